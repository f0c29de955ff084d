/* A trace of NCCL all-reduces: on two workers, each on a GPU of its own (worker threads, worker
 * processes, and two nodes of one worker), a trace runs while every worker all-reduces twice
 * and the session syncs; the trace is written to CUDA_NCCL_TRACE_DIR/KIND.json (default: the
 * current directory), where tests/cuda_stub_driver.rs reads when each all-reduce ran on each
 * GPU. Here the sums are checked, and that the file has a run on a GPU of each all-reduce of
 * each worker. With one GPU, one worker (a thread, then a process) does the same.
 *
 * Then, with two workers, worker 1 comes 50 ms late to an all-reduce and 2.5 s late to the next,
 * while the controller waits in a sync; a second in, another thread dumps the flight
 * recorder to KIND-dump.json, where the test finds worker 0's run of the first on its GPU (its
 * wait records what its GPU passed) and none of the second.
 *
 * It needs a GPU and NCCL (or the NCCL stand-in; with two GPUs, with its communicators of
 * several ranks, NCCL_STUB_SHARED_RANKS): without them it exits 77 (skipped). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_check.h"
#include "monotonic.h"
#include "session_check.h"
#include "session_kinds.h"

enum { N = 256, ROUNDS = 2 };

/* How many times `text` occurs in the file at `path`. */
static int occurrences(const char* path, const char* text) {
  FILE* f = fopen(path, "rb");
  CHECK(f != NULL);
  if (f == NULL) return 0;
  static char content[1 << 22];
  size_t len = fread(content, 1, sizeof content - 1, f);
  fclose(f);
  content[len] = 0;
  int found = 0;
  for (const char* at = strstr(content, text); at != NULL; at = strstr(at + 1, text)) found++;
  return found;
}

/* trace.late_allreduce(send, recv, late_ms): the all-reduce (sum) of send into recv, which
 * worker 1 joins `late_ms` late. */
static int32_t late_allreduce(void* self, const DVMAny* args, int32_t n, DVMAny* result) {
  (void)self, (void)n, (void)result;
  if (dvm_current_worker_id() == 1) sleep_ms(args[2].v_int64);
  int64_t sum = 0;
  DVMAny reduce[4] = {args[0], any_none(), any_bool(0), args[1]};
  if (dvm_shape_new(&sum, 1, &reduce[1]) != DVM_OK) return fail_with_last_error();
  int32_t called = call_global_here("runtime.disco.allreduce", reduce, 4);
  dvm_any_release(&reduce[1]);
  return called;
}

/* What the dumping thread needs. */
typedef struct {
  dvm_session* s;
  char path[4096];
  dvm_status dumped;
} Dump;

static void* dump_soon(void* arg) {
  Dump* dump = arg;
  sleep_ms(1000);
  dump->dumped = dvm_session_trace_dump(dump->s, dump->path);
  return NULL;
}

/* Worker 1 joins an all-reduce late, then the next far later, while the controller syncs and
 * another thread dumps the flight recorder to DIR/KIND-dump.json. */
static void dump_while_waiting(dvm_session* s, const char* dir, const char* kind,
                               dvm_dref* send, dvm_dref* recv) {
  Dump dump = {s, "", DVM_OK};
  snprintf(dump.path, sizeof dump.path, "%s/%s-dump.json", dir, kind);
  const int64_t late_ms[2] = {50, 2500};
  for (int i = 0; i < 2; i++) {
    DVMAny args[3] = {any_dref(send), any_dref(recv), any_int(late_ms[i])};
    dvm_dref_free(call_builtin(s, "trace.late_allreduce", args, 3));
  }
  pthread_t dumper;
  CHECK(pthread_create(&dumper, NULL, dump_soon, &dump) == 0);
  CHECK_OK(dvm_session_sync_all(s));
  CHECK(pthread_join(dumper, NULL) == 0);
  CHECK_OK(dump.dumped);
  printf("cuda_nccl_trace: %s: dumped the flight recorder to %s while the sync waited\n", kind,
         dump.path);
}

/* The test on a session of `kind` of `workers` workers (1 or 2); 77 when NCCL cannot be
 * loaded. */
static int run(const char* kind, int32_t workers) {
  int nodes = strcmp(kind, "nodes") == 0;
  /* A node's worker runs on the first GPU it sees. */
  DLDevice devices[2] = {kGpu0, {kDLCUDA, nodes ? 0 : 1}};
  dvm_session* s = start_session(kind, workers, devices, 0);
  int nccl = start_nccl(s, "cuda_nccl_trace", kind);
  if (nccl != 0) return nccl;
  int64_t n = N;
  DLDataType f32 = {kDLFloat, 32, 1};
  dvm_dref* send = empty_tensor(s, &n, 1, f32, 0);
  dvm_dref* recv = empty_tensor(s, &n, 1, f32, 0);
  DVMAny fill_args[1] = {any_dref(send)};
  dvm_dref_free(call_builtin(s, "trace.fill", fill_args, 1));

  CHECK_OK(dvm_session_trace_start(s));
  int64_t sum = 0;
  DVMAny reduce[4] = {any_dref(send), any_none(), any_bool(0), any_dref(recv)};
  CHECK_OK(dvm_shape_new(&sum, 1, &reduce[1]));
  for (int round = 0; round < ROUNDS; round++) {
    dvm_dref_free(call_builtin(s, "runtime.disco.allreduce", reduce, 4));
  }
  CHECK_OK(dvm_any_release(&reduce[1]));
  CHECK_OK(dvm_session_sync_all(s));
  static float out[N];
  DLTensor host_out = {out, kHost, 1, {kDLFloat, 32, 1}, &n, NULL, 0};
  CHECK_OK(dvm_session_copy_from_worker0(s, &host_out, recv));
  /* Worker w holds 1 + w everywhere. */
  for (int i = 0; i < N; i++) CHECK(out[i] == (workers == 2 ? 3.0f : 1.0f));
  const char* dir = getenv("CUDA_NCCL_TRACE_DIR");
  dir = dir != NULL ? dir : ".";
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.json", dir, kind);
  CHECK_OK(dvm_session_trace_stop(s, path));
  int runs = occurrences(path, "\"cat\":\"gpu\"");
  if (runs != ROUNDS * workers) {
    fprintf(stderr, "cuda_nccl_trace: %s: %d runs on a GPU in %s, expected %d\n", kind, runs,
            path, ROUNDS * workers);
    CHECK(runs == ROUNDS * workers);
  }
  printf("cuda_nccl_trace: %s: %d worker(s): wrote %s with %d runs on a GPU\n", kind,
         (int)workers, path, runs);
  if (workers == 2) dump_while_waiting(s, dir, kind, send, recv);

  dvm_dref_free(send), dvm_dref_free(recv);
  finish_session(s);
  return 0;
}

/* `cuda_nccl_trace [threads|processes|nodes]`: one kind, or (no argument) all three. Started as
 * a worker process by its own controller, it serves it; as `cuda_nccl_trace node HOST PORT
 * WORKERS`, it is a node. */
int main(int argc, char** argv) {
  register_c("trace.fill", fill_one_plus_worker_id);
  register_c("trace.late_allreduce", late_allreduce);
  int served = serve_unless_controller(argc, argv);
  if (served >= 0) return served;
  /* A wait that outlived its cause would hang the test: it ends here instead. */
  alarm(60);
  int32_t workers = require_cuda("cuda_nccl_trace") >= 2 ? 2 : 1;
  for (int k = 0; k < 3; k++) {
    const char* kind = kSessionKinds[k];
    if (!kind_asked(argc, argv, kind)) continue;
    if (workers == 1 && strcmp(kind, "nodes") == 0) {
      printf("cuda_nccl_trace: nodes skipped: two nodes need two GPUs\n");
      continue;
    }
    int ran = run(kind, workers);
    if (ran != 0) return ran;
  }
  return check_finish();
}
