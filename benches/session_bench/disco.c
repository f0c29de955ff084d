/*
 * The baseline: Apache TVM's Disco threaded and process sessions, driven through the tvm-ffi C
 * ABI only (libtvm_ffi.so; the runtime.disco.* globals are registered when
 * libtvm_runtime_extra.so is loaded, which the link line forces with --no-as-needed).
 *
 * Globals used, with the argument conventions of the 0.27 wheel:
 *   runtime.disco.SessionThreaded(num_workers: int, num_groups: int) -> Session
 *   runtime.disco.SessionProcess(num_workers: int, num_groups: int, pool_creator: str,
 *                                entrypoint: str) -> Session
 *   runtime.disco.WorkerProcess(worker_id, num_workers, num_groups, read_fd, write_fd)
 *       (the main loop of a worker process; see "process sessions" below)
 *   runtime.disco.SessionGetGlobalFunc(session, name: str) -> DRef
 *   runtime.disco.SessionCallPacked(session, 0, 0, func: DRef, args...) -> DRef
 *       (the two zeros are slots the session overwrites in place with the action code and
 *       the new register; so the argument array is rebuilt for every call)
 *   runtime.disco.SessionSyncWorker(session, worker: int)
 *   runtime.disco.SessionCopyToWorker0(session, host: Tensor, remote: DRef)      asynchronous
 *   runtime.disco.SessionCopyFromWorker0(session, host: Tensor, remote: DRef)    asynchronous
 *   runtime.disco.SessionShutdown(session)         (threaded sessions only: see disco_close)
 *   runtime.disco.DRefDebugGetFromRemote(dref, worker: int) -> value   (a check at open)
 *   ffi.Shape(dims: int...) -> Shape
 * and on the workers:
 *   runtime.disco.worker_id() -> Shape([worker id])                     the cheap call
 *   runtime.disco.empty(shape: Shape, dtype, device: None, worker0_only: bool,
 *                       in_group: bool) -> Tensor on worker 0, None elsewhere
 *
 * Disco has no "sync all": it is one SessionSyncWorker per worker, in turn (what its own
 * Python wrapper does). Its copy from worker 0 returns before the data has arrived, so
 * copy_from_worker0 here is SessionCopyFromWorker0 followed by SessionSyncWorker(0).
 * A call's result DRef is released at once; Disco then sends a register free to every worker.
 */
#define _GNU_SOURCE
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tvm/ffi/c_api.h>

static _Thread_local char disco_error[1024];

static const char *disco_last_error(void) { return disco_error; }

/* Stores the error raised in this thread by a failed FFI call, prefixed with what failed. */
static int fail_raised(const char *what) {
    TVMFFIObjectHandle err = NULL;
    TVMFFIErrorMoveFromRaised(&err);
    if (err) {
        const TVMFFIErrorCell *cell =
            (const TVMFFIErrorCell *)((const char *)err + sizeof(TVMFFIObject));
        snprintf(disco_error, sizeof disco_error, "%s: %.*s: %.*s", what, (int)cell->kind.size,
                 cell->kind.data, (int)cell->message.size, cell->message.data);
        TVMFFIObjectDecRef(err);
    } else {
        snprintf(disco_error, sizeof disco_error, "%s failed without raising an error", what);
    }
    return -1;
}

static int fail(const char *message) {
    snprintf(disco_error, sizeof disco_error, "%s", message);
    return -1;
}

/* ---- values ----------------------------------------------------------------------------------- */

/* A value of the given type with every other byte zero (padding and unused payload bytes
 * included). */
static TVMFFIAny any_of(int32_t type_index) {
    TVMFFIAny v;
    memset(&v, 0, sizeof v);
    v.type_index = type_index;
    return v;
}

static TVMFFIAny any_none(void) { return any_of(kTVMFFINone); }

static TVMFFIAny any_int(int64_t x) {
    TVMFFIAny v = any_of(kTVMFFIInt);
    v.v_int64 = x;
    return v;
}

static TVMFFIAny any_bool(int x) {
    TVMFFIAny v = any_of(kTVMFFIBool);
    v.v_int64 = x != 0;
    return v;
}

static TVMFFIAny any_raw_str(const char *s) {
    TVMFFIAny v = any_of(kTVMFFIRawStr);
    v.v_c_str = s;
    return v;
}

static TVMFFIAny any_dtype(DLDataType dtype) {
    TVMFFIAny v = any_of(kTVMFFIDataType);
    v.v_dtype = dtype;
    return v;
}

static TVMFFIAny any_object(int32_t type_index, TVMFFIObjectHandle obj) {
    TVMFFIAny v = any_of(type_index);
    v.v_obj = (TVMFFIObject *)obj;
    return v;
}

static void any_release(TVMFFIAny *v) {
    if (v->type_index >= kTVMFFIStaticObjectBegin && v->v_obj) TVMFFIObjectDecRef(v->v_obj);
    *v = any_none();
}

/* Calls f; on success *out holds an owned value (None for functions returning nothing). */
static int call(TVMFFIObjectHandle f, TVMFFIAny *args, int32_t num_args, TVMFFIAny *out,
                const char *what) {
    *out = any_none();
    if (TVMFFIFunctionCall(f, args, num_args, out) != 0) return fail_raised(what);
    return 0;
}

/* Calls f and drops its result. */
static int call_void(TVMFFIObjectHandle f, TVMFFIAny *args, int32_t num_args, const char *what) {
    TVMFFIAny out;
    if (call(f, args, num_args, &out, what) != 0) return -1;
    any_release(&out);
    return 0;
}

/* ---- globals ---------------------------------------------------------------------------------- */

static struct {
    int ready;
    TVMFFIObjectHandle session_threaded, session_process, get_global_func, call_packed,
        sync_worker, copy_to, copy_from, shutdown, debug_get, make_shape;
} g;

static int lookup(const char *name, TVMFFIObjectHandle *out) {
    TVMFFIByteArray key = {name, strlen(name)};
    *out = NULL;
    if (TVMFFIFunctionGetGlobal(&key, out) != 0) return fail_raised(name);
    if (!*out) {
        snprintf(disco_error, sizeof disco_error,
                 "global function %s not found (is libtvm_runtime_extra.so linked with "
                 "--no-as-needed?)",
                 name);
        return -1;
    }
    return 0;
}

static int load_globals(void) {
    if (g.ready) return 0;
    if (lookup("runtime.disco.SessionThreaded", &g.session_threaded) ||
        lookup("runtime.disco.SessionProcess", &g.session_process) ||
        lookup("runtime.disco.SessionGetGlobalFunc", &g.get_global_func) ||
        lookup("runtime.disco.SessionCallPacked", &g.call_packed) ||
        lookup("runtime.disco.SessionSyncWorker", &g.sync_worker) ||
        lookup("runtime.disco.SessionCopyToWorker0", &g.copy_to) ||
        lookup("runtime.disco.SessionCopyFromWorker0", &g.copy_from) ||
        lookup("runtime.disco.SessionShutdown", &g.shutdown) ||
        lookup("runtime.disco.DRefDebugGetFromRemote", &g.debug_get) ||
        lookup("ffi.Shape", &g.make_shape))
        return -1;
    g.ready = 1;
    return 0;
}

static const char *disco_version(void) {
    static char text[96];
    TVMFFIVersion v;
    TVMFFIGetVersion(&v);
    snprintf(text, sizeof text, "TVM Disco threaded session (tvm-ffi %u.%u.%u)", v.major,
             v.minor, v.patch);
    return text;
}

static const char *disco_process_version(void) {
    static char text[128];
    TVMFFIVersion v;
    TVMFFIGetVersion(&v);
    snprintf(text, sizeof text,
             "TVM Disco process session (tvm-ffi %u.%u.%u): worker 0 a controller thread, "
             "1..N-1 processes",
             v.major, v.minor, v.patch);
    return text;
}

/* ---- process sessions ------------------------------------------------------------------------ */

/*
 * Disco's ProcessSession keeps worker 0 as a thread of the controller and gets workers
 * 1..N-1 from a "process pool": SessionProcess(n, groups, pool_creator, entrypoint) calls the
 * global function named pool_creator with (n, groups, entrypoint); the function it returns
 * is called with i = 1..N-1 to start worker i and answer Shape([read_fd, write_fd]), the
 * controller's ends of two pipes, and with 0 after shutdown to tear the pool down. Disco's own
 * creator, runtime.disco.create_process_pool, is Python (tvm/runtime/disco/process_pool.py):
 * it runs `python -m tvm.exec.disco_worker i n groups read_fd write_fd`, which only looks up
 * runtime.disco.WorkerProcess and calls it. So the C harness registers a creator of its own
 * doing the same in C: it runs this program again with those arguments (after
 * BENCH_DISCO_WORKER_FLAG), with only the two pipe ends open (Popen's pass_fds), and the
 * worker calls the same C++ runtime.disco.WorkerProcess. What is measured is Disco's
 * ProcessSession and its workers' main loop; only the start-up of a worker differs (no Python
 * interpreter), and no start-up is timed.
 */
#define PROCESS_POOL_NAME "session_bench.disco_process_pool"
#define PROCESS_ENTRYPOINT "session_bench " BENCH_DISCO_WORKER_FLAG /* unused by our pool */

/* The worker's two pipe ends, after it moved them to these descriptors. */
#define WORKER_READ_FD 3
#define WORKER_WRITE_FD 4

struct process_pool {
    int32_t num_workers, num_groups;
    pid_t *pids; /* pids[i]: worker i (1..N-1), 0 once reaped or never started */
};

static int raise_error(const char *kind, const char *message) {
    TVMFFIErrorSetRaisedFromCStr(kind, message);
    return -1;
}

/* Waits up to 5 s for every worker process to exit (they do once shutdown reaches them or
 * their pipes close), then kills what is left. */
static void pool_reap(struct process_pool *pool) {
    uint64_t deadline = bench_now_ns() + 5000000000ull;
    for (int32_t i = 1; i < pool->num_workers; i++) {
        while (pool->pids[i] > 0) {
            pid_t r = waitpid(pool->pids[i], NULL, WNOHANG);
            if (r == pool->pids[i] || (r < 0 && errno != EINTR)) {
                pool->pids[i] = 0;
            } else if (bench_now_ns() > deadline) {
                kill(pool->pids[i], SIGKILL);
                waitpid(pool->pids[i], NULL, 0);
                pool->pids[i] = 0;
            } else {
                const struct timespec ms = {0, 1000000};
                nanosleep(&ms, NULL);
            }
        }
    }
}

static void pool_delete(void *self) {
    struct process_pool *pool = self;
    pool_reap(pool);
    free(pool->pids);
    free(pool);
}

/* Starts worker `id` and writes the controller's pipe ends to *read_fd and *write_fd. */
static int pool_start_worker(struct process_pool *pool, int32_t id, int *read_fd,
                             int *write_fd) {
    char args[3][16];
    snprintf(args[0], sizeof args[0], "%d", (int)id);
    snprintf(args[1], sizeof args[1], "%d", (int)pool->num_workers);
    snprintf(args[2], sizeof args[2], "%d", (int)pool->num_groups);
    char read_arg[] = {'0' + WORKER_READ_FD, 0}, write_arg[] = {'0' + WORKER_WRITE_FD, 0};
    char *argv[] = {"session_bench", BENCH_DISCO_WORKER_FLAG, args[0], args[1], args[2],
                    read_arg, write_arg, NULL};
    int to_worker[2], from_worker[2];
    if (pipe2(to_worker, O_CLOEXEC) != 0) return -1;
    if (pipe2(from_worker, O_CLOEXEC) != 0) {
        close(to_worker[0]);
        close(to_worker[1]);
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        /* Only async-signal-safe calls from here to exec: the controller has threads. Move
         * the worker's ends above the target descriptors, then onto them (dup2 clears
         * close-on-exec), and close everything else from 5 up (stdio stays). */
        int r = fcntl(to_worker[0], F_DUPFD_CLOEXEC, 16);
        int w = fcntl(from_worker[1], F_DUPFD_CLOEXEC, 16);
        if (r < 0 || w < 0 || dup2(r, WORKER_READ_FD) < 0 || dup2(w, WORKER_WRITE_FD) < 0)
            _exit(127);
#ifdef SYS_close_range
        syscall(SYS_close_range, WORKER_WRITE_FD + 1, ~0u, 0);
#endif
        /* The controller ignores SIGPIPE; the worker gets the default back, as Popen does. */
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigaction(SIGPIPE, &dfl, NULL);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    int saved = errno;
    close(to_worker[0]);
    close(from_worker[1]);
    if (pid < 0) {
        close(to_worker[1]);
        close(from_worker[0]);
        errno = saved;
        return -1;
    }
    pool->pids[id] = pid;
    *read_fd = from_worker[0];
    *write_fd = to_worker[1];
    return 0;
}

/* The pool function: f(i) starts worker i and returns Shape([read_fd, write_fd]); f(0) reaps
 * the workers and returns None. */
static int pool_call(void *self, const TVMFFIAny *args, int32_t num_args, TVMFFIAny *result) {
    struct process_pool *pool = self;
    if (num_args != 1 || args[0].type_index != kTVMFFIInt)
        return raise_error("TypeError", "process pool: expected one int (a worker id)");
    int64_t id = args[0].v_int64;
    *result = any_none();
    if (id == 0) {
        pool_reap(pool);
        return 0;
    }
    if (id < 0 || id >= pool->num_workers || pool->pids[id] != 0)
        return raise_error("ValueError", "process pool: bad or repeated worker id");
    int read_fd, write_fd;
    if (pool_start_worker(pool, (int32_t)id, &read_fd, &write_fd) != 0) {
        char message[128];
        snprintf(message, sizeof message, "process pool: starting worker %d: %s", (int)id,
                 strerror(errno));
        return raise_error("RuntimeError", message);
    }
    TVMFFIAny dims[2] = {any_int(read_fd), any_int(write_fd)};
    if (TVMFFIFunctionCall(g.make_shape, dims, 2, result) != 0) {
        close(read_fd); /* the worker sees EOF and exits; f(0) or the pool's end reaps it */
        close(write_fd);
        return -1;
    }
    return 0;
}

/* The pool creator: (num_workers, num_groups, entrypoint) -> the pool function. */
static int pool_create(void *self, const TVMFFIAny *args, int32_t num_args, TVMFFIAny *result) {
    (void)self;
    if (num_args < 2 || args[0].type_index != kTVMFFIInt || args[1].type_index != kTVMFFIInt ||
        args[0].v_int64 < 1 || args[1].v_int64 < 1)
        return raise_error("TypeError", "process pool creator: expected (num_workers, "
                                        "num_groups, entrypoint)");
    struct process_pool *pool = calloc(1, sizeof *pool);
    if (pool) pool->pids = calloc((size_t)args[0].v_int64, sizeof *pool->pids);
    if (!pool || !pool->pids) {
        free(pool);
        return raise_error("RuntimeError", "process pool creator: out of memory");
    }
    pool->num_workers = (int32_t)args[0].v_int64;
    pool->num_groups = (int32_t)args[1].v_int64;
    TVMFFIObjectHandle f = NULL;
    if (TVMFFIFunctionCreate(pool, pool_call, pool_delete, &f) != 0) {
        free(pool->pids);
        free(pool);
        return -1;
    }
    *result = any_object(kTVMFFIFunction, f); /* the caller owns it */
    return 0;
}

static int register_process_pool(void) {
    static int registered;
    if (registered) return 0;
    TVMFFIObjectHandle f = NULL;
    TVMFFIByteArray name = {PROCESS_POOL_NAME, strlen(PROCESS_POOL_NAME)};
    if (TVMFFIFunctionCreate(NULL, pool_create, NULL, &f) != 0)
        return fail_raised("TVMFFIFunctionCreate");
    int rc = TVMFFIFunctionSetGlobal(&name, f, 1);
    TVMFFIObjectDecRef(f); /* the registry holds its own reference */
    if (rc != 0) return fail_raised("TVMFFIFunctionSetGlobal");
    registered = 1;
    return 0;
}

int bench_disco_worker_main(int argc, char **argv) {
    int64_t v[5];
    if (argc != 7) {
        fprintf(stderr, "usage: %s " BENCH_DISCO_WORKER_FLAG " WORKER_ID NUM_WORKERS "
                        "NUM_GROUPS READ_FD WRITE_FD\n", argv[0]);
        return 2;
    }
    for (int i = 0; i < 5; i++) {
        char *end;
        v[i] = strtoll(argv[2 + i], &end, 10);
        if (end == argv[2 + i] || *end) {
            fprintf(stderr, "%s: bad argument %s\n", argv[0], argv[2 + i]);
            return 2;
        }
    }
    TVMFFIObjectHandle worker_process;
    if (lookup("runtime.disco.WorkerProcess", &worker_process) != 0) {
        fprintf(stderr, "disco worker: %s\n", disco_error);
        return 1;
    }
    TVMFFIAny args[5];
    for (int i = 0; i < 5; i++) args[i] = any_int(v[i]);
    if (call_void(worker_process, args, 5, "runtime.disco.WorkerProcess") != 0) {
        fprintf(stderr, "disco worker %d: %s\n", (int)v[0], disco_error);
        return 1;
    }
    return 0;
}

/* ---- session ---------------------------------------------------------------------------------- */

struct bench_session {
    int32_t num_workers;
    int process;         /* a ProcessSession (else a ThreadedSession) */
    TVMFFIAny session;   /* runtime.disco.ThreadedSession or runtime.disco.ProcessSession */
    TVMFFIAny worker_id; /* DRef to runtime.disco.worker_id on every worker */
    TVMFFIAny empty;     /* DRef to runtime.disco.empty on every worker */
};

static int session_get_func(bench_session *s, const char *name, TVMFFIAny *out) {
    TVMFFIAny args[2] = {s->session, any_raw_str(name)};
    return call(g.get_global_func, args, 2, out, "SessionGetGlobalFunc");
}

/* Broadcasts func(extra...) to every worker; the result DRef goes to *out. */
static int session_call(bench_session *s, const TVMFFIAny *func, const TVMFFIAny *extra,
                        int32_t num_extra, TVMFFIAny *out) {
    TVMFFIAny args[16];
    if (num_extra > 12) return fail("too many call arguments");
    args[0] = s->session;
    args[1] = any_int(0);
    args[2] = any_int(0);
    args[3] = *func;
    for (int32_t i = 0; i < num_extra; i++) args[4 + i] = extra[i];
    return call(g.call_packed, args, 4 + num_extra, out, "SessionCallPacked");
}

static int session_sync(bench_session *s, int32_t worker) {
    TVMFFIAny args[2] = {s->session, any_int(worker)};
    return call_void(g.sync_worker, args, 2, "SessionSyncWorker");
}

static void disco_close(bench_session *s) {
    if (!s) return;
    /* Every DRef holds the session; drop them first so that the last reference below shuts
     * the session down and joins its worker threads. A ProcessSession is only released: its
     * destructor shuts it down a second time, and in the 0.27 wheel that second shutdown
     * writes to workers that already exited after the first, which fails ("Write Error") in
     * a destructor and ends the controller in std::terminate (with 4 workers, nearly every
     * time). Released without SessionShutdown, it shuts down once: the message to every
     * worker, then the pipes closed, then the pool reaped. */
    any_release(&s->worker_id);
    any_release(&s->empty);
    if (!s->process && s->session.type_index >= kTVMFFIStaticObjectBegin) {
        TVMFFIAny args[1] = {s->session};
        call_void(g.shutdown, args, 1, "SessionShutdown");
    }
    any_release(&s->session);
    free(s);
}

/* Checks that the cheap worker function runs on every worker and returns its id. */
static int check_worker_ids(bench_session *s) {
    TVMFFIAny ids;
    if (session_call(s, &s->worker_id, NULL, 0, &ids) != 0) return -1;
    int rc = 0;
    for (int32_t w = 0; w < s->num_workers && rc == 0; w++) {
        TVMFFIAny args[2] = {ids, any_int(w)}, value;
        if (call(g.debug_get, args, 2, &value, "DRefDebugGetFromRemote") != 0) {
            rc = -1;
            break;
        }
        const TVMFFIShapeCell *shape =
            value.type_index == kTVMFFIShape
                ? (const TVMFFIShapeCell *)((const char *)value.v_obj + sizeof(TVMFFIObject))
                : NULL;
        if (!shape || shape->size != 1 || shape->data[0] != w) {
            snprintf(disco_error, sizeof disco_error,
                     "runtime.disco.worker_id on worker %d did not return Shape([%d])", (int)w,
                     (int)w);
            rc = -1;
        }
        any_release(&value);
    }
    any_release(&ids);
    return rc;
}

static int register_process_pool(void);

/* Opens a session of either kind, with one group. */
static bench_session *disco_open_with(int process, int32_t num_workers) {
    if (load_globals() != 0 || (process && register_process_pool() != 0)) return NULL;
    /* As under Python, Disco's usual host: a write to a worker that is gone fails with EPIPE
     * (and Disco raises an error) instead of killing the controller. */
    if (process) signal(SIGPIPE, SIG_IGN);
    bench_session *s = calloc(1, sizeof *s);
    if (!s) {
        fail("out of memory");
        return NULL;
    }
    s->num_workers = num_workers;
    s->process = process;
    s->session = s->worker_id = s->empty = any_none();
    TVMFFIAny args[4] = {any_int(num_workers), any_int(1), any_raw_str(PROCESS_POOL_NAME),
                         any_raw_str(PROCESS_ENTRYPOINT)};
    int rc = process ? call(g.session_process, args, 4, &s->session, "SessionProcess")
                     : call(g.session_threaded, args, 2, &s->session, "SessionThreaded");
    if (rc != 0 || session_get_func(s, "runtime.disco.worker_id", &s->worker_id) != 0 ||
        session_get_func(s, "runtime.disco.empty", &s->empty) != 0 || check_worker_ids(s) != 0) {
        disco_close(s);
        return NULL;
    }
    return s;
}

static bench_session *disco_open_threaded(int32_t num_workers) {
    return disco_open_with(0, num_workers);
}

static bench_session *disco_open_process(int32_t num_workers) {
    return disco_open_with(1, num_workers);
}

static int disco_sync_worker0(bench_session *s) { return session_sync(s, 0); }

static int disco_call(bench_session *s) {
    TVMFFIAny result;
    if (session_call(s, &s->worker_id, NULL, 0, &result) != 0) return -1;
    any_release(&result);
    return 0;
}

static int disco_sync_all(bench_session *s) {
    for (int32_t w = 0; w < s->num_workers; w++)
        if (session_sync(s, w) != 0) return -1;
    return 0;
}

/* ---- copies ----------------------------------------------------------------------------------- */

/* A host buffer seen as a 1-D float32 tensor, without copying: the DLPack wrapper below is
 * freed when the tensor object dies; the data stays with the harness. */
struct host_tensor {
    DLManagedTensorVersioned managed;
    int64_t shape[1];
};

static void host_tensor_deleter(DLManagedTensorVersioned *self) { free(self->manager_ctx); }

static int make_host_tensor(void *data, int64_t elems, TVMFFIObjectHandle *out) {
    struct host_tensor *t = calloc(1, sizeof *t);
    if (!t) return fail("out of memory");
    t->shape[0] = elems;
    t->managed.version.major = DLPACK_MAJOR_VERSION;
    t->managed.version.minor = DLPACK_MINOR_VERSION;
    t->managed.manager_ctx = t;
    t->managed.deleter = host_tensor_deleter;
    t->managed.dl_tensor.data = data;
    t->managed.dl_tensor.device.device_type = kDLCPU;
    t->managed.dl_tensor.device.device_id = 0;
    t->managed.dl_tensor.ndim = 1;
    t->managed.dl_tensor.dtype.code = kDLFloat;
    t->managed.dl_tensor.dtype.bits = 32;
    t->managed.dl_tensor.dtype.lanes = 1;
    t->managed.dl_tensor.shape = t->shape;
    if (TVMFFITensorFromDLPackVersioned(&t->managed, 0, 1, out) != 0) {
        free(t);
        return fail_raised("TVMFFITensorFromDLPackVersioned");
    }
    return 0;
}

struct bench_copy {
    bench_session *s;
    TVMFFIObjectHandle host_src, host_dst; /* ffi.Tensor views of the harness's buffers */
    TVMFFIAny remote;                      /* DRef: the tensor on worker 0 */
};

static void disco_copy_release(bench_copy *c) {
    if (!c) return;
    if (c->host_src) TVMFFIObjectDecRef(c->host_src);
    if (c->host_dst) TVMFFIObjectDecRef(c->host_dst);
    any_release(&c->remote);
    free(c);
}

static bench_copy *disco_copy_prepare(bench_session *s, void *host_src, void *host_dst,
                                      size_t nbytes) {
    bench_copy *c = calloc(1, sizeof *c);
    if (!c) {
        fail("out of memory");
        return NULL;
    }
    c->s = s;
    c->remote = any_none();
    int64_t elems = (int64_t)(nbytes / sizeof(float));
    TVMFFIAny dims[1] = {any_int(elems)}, shape;
    if (make_host_tensor(host_src, elems, &c->host_src) != 0 ||
        make_host_tensor(host_dst, elems, &c->host_dst) != 0 ||
        call(g.make_shape, dims, 1, &shape, "ffi.Shape") != 0) {
        disco_copy_release(c);
        return NULL;
    }
    DLDataType f32 = {kDLFloat, 32, 1};
    /* empty(shape, float32, device None = the worker's default, worker0_only, in_group) */
    TVMFFIAny extra[5] = {shape, any_dtype(f32), any_none(), any_bool(1), any_bool(1)};
    int rc = session_call(s, &s->empty, extra, 5, &c->remote);
    any_release(&shape);
    if (rc != 0) {
        disco_copy_release(c);
        return NULL;
    }
    return c;
}

static int disco_copy_to_worker0(bench_copy *c) {
    TVMFFIAny args[3] = {c->s->session, any_object(kTVMFFITensor, c->host_src), c->remote};
    return call_void(g.copy_to, args, 3, "SessionCopyToWorker0");
}

static int disco_copy_from_worker0(bench_copy *c) {
    TVMFFIAny args[3] = {c->s->session, any_object(kTVMFFITensor, c->host_dst), c->remote};
    if (call_void(g.copy_from, args, 3, "SessionCopyFromWorker0") != 0) return -1;
    return session_sync(c->s, 0); /* the copy above is only queued */
}

const bench_backend bench_disco_backend = {
    .name = "disco",
    .version = disco_version,
    .open = disco_open_threaded,
    .sync_worker0 = disco_sync_worker0,
    .call = disco_call,
    .sync_all = disco_sync_all,
    .copy_prepare = disco_copy_prepare,
    .copy_to_worker0 = disco_copy_to_worker0,
    .copy_from_worker0 = disco_copy_from_worker0,
    .copy_release = disco_copy_release,
    .close = disco_close,
    .last_error = disco_last_error,
};

const bench_backend bench_disco_process_backend = {
    .name = "disco process",
    .version = disco_process_version,
    .open = disco_open_process,
    .sync_worker0 = disco_sync_worker0,
    .call = disco_call,
    .sync_all = disco_sync_all,
    .copy_prepare = disco_copy_prepare,
    .copy_to_worker0 = disco_copy_to_worker0,
    .copy_from_worker0 = disco_copy_from_worker0,
    .copy_release = disco_copy_release,
    .close = disco_close,
    .last_error = disco_last_error,
};
