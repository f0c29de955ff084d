/*
 * The discovm backends of the session benchmark: the same primitives as disco.c, through
 * include/discovm.h. The columns share every function here but open(): "discovm" starts its
 * sessions with dvm_session_new_threaded, "discovm process" with dvm_session_new_process
 * (workers are processes running the worker program the library finds next to itself,
 * target/release/discovm-worker, which benches/run.sh builds; DISCOVM_WORKER names another).
 * The "traced" columns are the same sessions with a trace running from their start
 * (dvm_session_trace_start) to their close, which writes it to a temporary file and removes it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bench.h"
#include "discovm.h"

struct bench_session {
    dvm_session *session;
    dvm_dref *worker_id; /* runtime.disco.worker_id: the cheap function call() runs */
    dvm_dref *empty;     /* runtime.disco.empty: allocates the worker-0 tensor */
    int traced;          /* a trace runs from the session's start */
};

struct bench_copy {
    bench_session *s;
    dvm_dref *remote;
    int64_t shape[1];
    DLTensor src;
    DLTensor dst;
};

static char error_text[512];

static int fail(const char *what) {
    const char *kind = dvm_last_error_kind();
    const char *message = dvm_last_error_message();
    snprintf(error_text, sizeof error_text, "%s: %s: %s", what, kind ? kind : "?",
             message ? message : "?");
    return 1;
}

static const char *discovm_version(void) {
    static char text[64];
    snprintf(text, sizeof text, "discovm %s (threaded session)", dvm_version());
    return text;
}

static const char *discovm_traced_version(void) {
    static char text[96];
    snprintf(text, sizeof text, "discovm %s (threaded session, a trace running)", dvm_version());
    return text;
}

static const char *discovm_process_traced_version(void) {
    static char text[96];
    snprintf(text, sizeof text, "discovm %s (process session, a trace running)", dvm_version());
    return text;
}

static const char *discovm_process_version(void) {
    static char text[96];
    snprintf(text, sizeof text, "discovm %s (process session: every worker a process)",
             dvm_version());
    return text;
}

static void discovm_close(bench_session *s) {
    if (!s) return;
    dvm_dref_free(s->worker_id);
    dvm_dref_free(s->empty);
    if (s->traced) {
        char path[64];
        snprintf(path, sizeof path, "/tmp/session_bench_trace_%ld.json", (long)getpid());
        if (dvm_session_trace_stop(s->session, path) != DVM_OK) fail("trace stop");
        unlink(path);
    }
    if (s->session) dvm_session_shutdown(s->session);
    dvm_session_free(s->session);
    free(s);
}

/* How a column starts its session: dvm_session_new_threaded or dvm_session_new_process. */
typedef dvm_status (*session_start_fn)(int32_t num_workers, int32_t num_groups,
                                       const dvm_session_options *opts, dvm_session **out);

static bench_session *discovm_open_with(session_start_fn start, int32_t num_workers,
                                        int traced) {
    bench_session *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    if (start(num_workers, 1, NULL, &s->session) != DVM_OK ||
        dvm_session_get_global_func(s->session, "runtime.disco.worker_id", &s->worker_id) != DVM_OK ||
        dvm_session_get_global_func(s->session, "runtime.disco.empty", &s->empty) != DVM_OK) {
        fail("open");
        discovm_close(s);
        return NULL;
    }
    if (traced) {
        if (dvm_session_trace_start(s->session) != DVM_OK) {
            fail("trace start");
            discovm_close(s);
            return NULL;
        }
        s->traced = 1;
    }
    return s;
}

static bench_session *discovm_open_threaded(int32_t num_workers) {
    return discovm_open_with(dvm_session_new_threaded, num_workers, 0);
}

static bench_session *discovm_open_process(int32_t num_workers) {
    return discovm_open_with(dvm_session_new_process, num_workers, 0);
}

static bench_session *discovm_open_threaded_traced(int32_t num_workers) {
    return discovm_open_with(dvm_session_new_threaded, num_workers, 1);
}

static bench_session *discovm_open_process_traced(int32_t num_workers) {
    return discovm_open_with(dvm_session_new_process, num_workers, 1);
}

static int discovm_sync_worker0(bench_session *s) {
    return dvm_session_sync_worker(s->session, 0) == DVM_OK ? 0 : fail("sync worker 0");
}

static int discovm_call(bench_session *s) {
    dvm_dref *result = NULL;
    if (dvm_session_call(s->session, s->worker_id, NULL, 0, &result) != DVM_OK) return fail("call");
    dvm_dref_free(result);
    return 0;
}

static int discovm_sync_all(bench_session *s) {
    return dvm_session_sync_all(s->session) == DVM_OK ? 0 : fail("sync all");
}

static DLTensor host_tensor(void *data, int64_t *shape) {
    DLTensor t = {0};
    t.data = data;
    t.device.device_type = kDLCPU;
    t.ndim = 1;
    t.dtype.code = kDLFloat;
    t.dtype.bits = 32;
    t.dtype.lanes = 1;
    t.shape = shape;
    return t;
}

static void discovm_copy_release(bench_copy *c) {
    if (!c) return;
    dvm_dref_free(c->remote);
    free(c);
}

static bench_copy *discovm_copy_prepare(bench_session *s, void *host_src, void *host_dst,
                                        size_t nbytes) {
    bench_copy *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->s = s;
    c->shape[0] = (int64_t)(nbytes / 4);
    DVMAny args[2];
    if (dvm_shape_new(c->shape, 1, &args[0]) != DVM_OK) {
        fail("shape");
        free(c);
        return NULL;
    }
    args[1].type_index = kDVMDataType;
    args[1].zero_padding = 0;
    args[1].v_int64 = 0;
    args[1].v_dtype.code = kDLFloat;
    args[1].v_dtype.bits = 32;
    args[1].v_dtype.lanes = 1;
    dvm_status status = dvm_session_call(s->session, s->empty, args, 2, &c->remote);
    dvm_any_release(&args[0]);
    if (status != DVM_OK) {
        fail("empty");
        free(c);
        return NULL;
    }
    c->src = host_tensor(host_src, c->shape);
    c->dst = host_tensor(host_dst, c->shape);
    return c;
}

static int discovm_copy_to_worker0(bench_copy *c) {
    return dvm_session_copy_to_worker0(c->s->session, &c->src, c->remote) == DVM_OK
               ? 0
               : fail("copy to worker 0");
}

static int discovm_copy_from_worker0(bench_copy *c) {
    return dvm_session_copy_from_worker0(c->s->session, &c->dst, c->remote) == DVM_OK
               ? 0
               : fail("copy from worker 0");
}

static const char *discovm_last_error(void) { return error_text; }

/* Every column shares the primitives; only its name, version line and start differ. */
#define DISCOVM_BACKEND(NAME, VERSION, OPEN)                                                   \
    {                                                                                          \
        .name = NAME, .version = VERSION, .open = OPEN, .sync_worker0 = discovm_sync_worker0,  \
        .call = discovm_call, .sync_all = discovm_sync_all,                                    \
        .copy_prepare = discovm_copy_prepare, .copy_to_worker0 = discovm_copy_to_worker0,      \
        .copy_from_worker0 = discovm_copy_from_worker0,                                        \
        .copy_release = discovm_copy_release, .close = discovm_close,                          \
        .last_error = discovm_last_error,                                                      \
    }

const bench_backend bench_discovm_backend =
    DISCOVM_BACKEND("discovm", discovm_version, discovm_open_threaded);

/* Copies to and from worker 0 go through the session's arena (docs/processes.md):
 * every size is measured. */
const bench_backend bench_discovm_process_backend =
    DISCOVM_BACKEND("discovm process", discovm_process_version, discovm_open_process);

const bench_backend bench_discovm_traced_backend =
    DISCOVM_BACKEND("discovm traced", discovm_traced_version, discovm_open_threaded_traced);

const bench_backend bench_discovm_process_traced_backend = DISCOVM_BACKEND(
    "discovm process traced", discovm_process_traced_version, discovm_open_process_traced);
