/* NCCL collectives whose peer passed them: on two workers, each on a GPU of its own (worker
 * threads, worker processes, and two nodes of one worker), worker 1 fails before an all-reduce,
 * or returns, or queues an all-gather or a smaller all-reduce in its place, while worker 0
 * queues the all-reduce. Worker 0 waits for its GPU, where NCCL would wait for worker 1 for
 * ever; with no session timeout, the sync fails within a second, naming the all-reduce, the
 * peer and the peer's cause (or what it queued), and saying that the communicators are made
 * again. The next all-reduce, with no init_ccl between, sums both workers' values. The first
 * case comes first on the communicators: with NCCL_STUB_CONNECT, the stand-in's first collective
 * connects the ranks, and worker 0 waits in its enqueue rather than on its GPU; the failed
 * enqueue leaves worker 0's output unwritten, and an in-place all-reduce of it then fails on
 * both workers at once.
 *
 * Then, in a session with a timeout, worker 1 comes 6 s late to an all-reduce: a copy from
 * worker 0, whose stream holds the all-reduce, and a sync each end at the timeout, though
 * worker 0 waits for its GPU; once worker 1 came, the session goes on.
 *
 * It needs two GPUs and NCCL (or the NCCL stand-in with its communicators of several ranks,
 * NCCL_STUB_SHARED_RANKS, as tests/cuda_stub_driver.rs runs it): without them it exits 77
 * (skipped). */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_check.h"
#include "monotonic.h"
#include "session_check.h"
#include "session_kinds.h"

enum { N = 256 };

/* Failing at once: within a second, with room for a loaded machine. */
static const double kFailsWithin = 1.0;

/* Whether `what` took less than `bound` seconds; says how long it took when not. */
static int took_less(const char* kind, const char* what, double took, double bound) {
  if (took >= bound) {
    fprintf(stderr, "cuda_nccl_peers: %s: %s took %.2f s: %s\n", kind, what, took,
            dvm_last_error_message());
  }
  return took < bound;
}

/* The session timeout of the late peer's test, and how late the peer comes. */
enum { TIMEOUT_MS = 2000, LATE_MS = 6000 };

/* What worker 1 does in place of the all-reduce (LATE: the all-reduce, LATE_MS late). */
enum { RETURNS, FAILS, GATHERS, SHRINKS, LATE };

/* peers.allreduce_but(worker, how, send, recv, half): the all-reduce (sum) of send into recv,
 * but on worker `worker` (-1: none), which returns, fails, all-gathers `half` into recv,
 * all-reduces `half` in place, or comes late, as `how` says. */
static int32_t allreduce_but(void* self, const DVMAny* args, int32_t n, DVMAny* result) {
  (void)self, (void)n, (void)result;
  if (dvm_current_worker_id() == args[0].v_int64) {
    switch (args[1].v_int64) {
      case FAILS:
        dvm_error_raise("ValueError", "failed before the allreduce on purpose");
        return -1;
      case GATHERS: {
        DVMAny gather[3] = {args[4], any_bool(0), args[3]};
        return call_global_here("runtime.disco.allgather", gather, 3);
      }
      case SHRINKS:
        break; /* it all-reduces `half` */
      case LATE:
        sleep_ms(LATE_MS);
        break;
      default:
        return 0;
    }
  }
  int64_t sum = 0;
  DVMAny op = any_none();
  if (dvm_shape_new(&sum, 1, &op) != DVM_OK) return fail_with_last_error();
  int shrinks = dvm_current_worker_id() == args[0].v_int64 && args[1].v_int64 == SHRINKS;
  DVMAny reduce[4] = {args[shrinks ? 4 : 2], op, any_bool(0), args[shrinks ? 4 : 3]};
  int32_t called = call_global_here("runtime.disco.allreduce", reduce, 4);
  CHECK_OK(dvm_any_release(&op));
  return called;
}

/* The tensors of the test, on every worker. */
typedef struct {
  dvm_dref *send, *recv, *half;
} Tensors;

/* Calls peers.allreduce_but(worker, how) on every worker. */
static void reduce_but(dvm_session* s, int64_t worker, int64_t how, const Tensors* t) {
  DVMAny args[5] = {any_int(worker), any_int(how), any_dref(t->send), any_dref(t->recv),
                    any_dref(t->half)};
  dvm_dref_free(call_builtin(s, "peers.allreduce_but", args, 5));
}

/* Every worker reduces; worker 0's recv then holds 1 + 2 in every element. */
static void every_worker_reduces(dvm_session* s, const Tensors* t) {
  reduce_but(s, -1, RETURNS, t);
  static float out[N];
  int64_t n = N;
  DLTensor host_out = {out, kHost, 1, {kDLFloat, 32, 1}, &n, NULL, 0};
  CHECK_OK(dvm_session_copy_from_worker0(s, &host_out, t->recv));
  for (int i = 0; i < N; i++) CHECK(out[i] == 3.0f);
}

/* Worker 0's recv was left unwritten by the all-reduce whose enqueue failed there (worker 1
 * failed before the first collective, which connects the ranks): an in-place all-reduce of it
 * then fails on worker 0 before it joins, and so on worker 1, which would wait for it. */
static void in_place_on_unwritten(dvm_session* s, const char* kind, const Tensors* t) {
  Tensors in_place = {t->recv, t->recv, t->half};
  double started = now_s();
  reduce_but(s, -1, RETURNS, &in_place);
  EXPECT_STATUS(dvm_session_sync_all(s), DVM_WORKER_ERROR,
                "an input was not written because an earlier instruction failed");
  double took = now_s() - started;
  const char* message = dvm_last_error_message();
  CHECK(strstr(message, "on worker 1: worker 0 finished call ") != NULL);
  CHECK(strstr(message, "without joining it") != NULL);
  CHECK(took_less(kind, "the in-place all-reduce", took, kFailsWithin));
  printf("cuda_nccl_peers: %s: an in-place all-reduce of what the failed one left unwritten "
         "failed in %.3f s\n",
         kind, took);
}

/* The tensors of the test on every worker of `s`, send filled. */
static Tensors filled(dvm_session* s) {
  int64_t n = N, half_n = N / 2;
  DLDataType f32 = {kDLFloat, 32, 1};
  Tensors t = {empty_tensor(s, &n, 1, f32, 0), empty_tensor(s, &n, 1, f32, 0),
               empty_tensor(s, &half_n, 1, f32, 0)};
  DVMAny fill_args[1] = {any_dref(t.send)};
  dvm_dref_free(call_builtin(s, "peers.fill", fill_args, 1));
  return t;
}

/* In a session of `kind` with a timeout, worker 1 comes LATE_MS late to an all-reduce: a copy
 * from worker 0 and a sync end at the timeout while worker 0 waits for its GPU; 77 when NCCL
 * cannot be loaded. */
static int late_peer(const char* kind, const DLDevice* devices) {
  dvm_session* s = start_session(kind, 2, devices, TIMEOUT_MS);
  int nccl = start_nccl(s, "cuda_nccl_peers", kind);
  if (nccl != 0) return nccl;
  Tensors t = filled(s);
  every_worker_reduces(s, &t);
  static float out[N];
  int64_t n = N;
  DLTensor host_out = {out, kHost, 1, {kDLFloat, 32, 1}, &n, NULL, 0};
  double started = now_s();
  reduce_but(s, 1, LATE, &t);
  EXPECT_STATUS(dvm_session_copy_from_worker0(s, &host_out, t.recv), DVM_TIMEOUT,
                "timed out after 2.0 s");
  EXPECT_STATUS(dvm_session_sync_all(s), DVM_TIMEOUT, "timed out after 2.0 s");
  double took = now_s() - started;
  /* Two timeouts, with room for a loaded machine, and well before worker 1 comes. */
  CHECK(took_less(kind, "the copy and the sync", took, 5.5));
  /* Once worker 1 came, nothing failed. */
  dvm_status synced = DVM_TIMEOUT;
  for (int tries = 0; tries < 20 && synced == DVM_TIMEOUT; tries++) synced = dvm_session_sync_all(s);
  CHECK_OK(synced);
  every_worker_reduces(s, &t);
  printf("cuda_nccl_peers: %s: worker 1 came %d ms late: a copy and a sync with a %d ms timeout "
         "ended in %.3f s, and the session went on\n",
         kind, LATE_MS, TIMEOUT_MS, took);
  dvm_dref_free(t.send), dvm_dref_free(t.recv), dvm_dref_free(t.half);
  finish_session(s);
  return 0;
}

/* The test on a session of `kind`; 77 when NCCL cannot be loaded. */
static int run(const char* kind) {
  int nodes = strcmp(kind, "nodes") == 0;
  /* A node's worker runs on the first GPU it sees. */
  DLDevice devices[2] = {kGpu0, {kDLCUDA, nodes ? 0 : 1}};
  dvm_session* s = start_session(kind, 2, devices, 0);
  int nccl = start_nccl(s, "cuda_nccl_peers", kind);
  if (nccl != 0) return nccl;
  Tensors t = filled(s);

  static const struct {
    int64_t how;
    const char* said; /* by worker 0's error, after "on worker 0: worker 1 " */
    const char* done; /* what worker 1 did, in the line printed */
  } cases[] = {
      {FAILS,
       "without joining it: `peers.allreduce_but` failed: ValueError: failed before the "
       "allreduce on purpose",
       "failed before the all-reduce"},
      {RETURNS, "without joining it: `peers.allreduce_but` returned", "returned before the all-reduce"},
      {GATHERS, "joined allgather in its place: the workers disagree on which collective comes next",
       "all-gathered in place of the all-reduce"},
      {SHRINKS,
       "joined it with 512 bytes where worker 0 has 1024: the workers disagree on its size",
       "all-reduced half as many elements"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    double started = now_s();
    reduce_but(s, 1, cases[c].how, &t);
    EXPECT_STATUS(dvm_session_sync_all(s), DVM_WORKER_ERROR,
                  "(`peers.allreduce_but`) on worker 0: worker 1 ");
    double took = now_s() - started;
    const char* message = dvm_last_error_message();
    CHECK(strstr(message, "allreduce in call ") != NULL);
    CHECK(strstr(message, cases[c].said) != NULL);
    CHECK(strstr(message, "its NCCL communicators were aborted, and are made again") != NULL);
    /* Worker 1 waits for worker 0 too, and says so. */
    if (cases[c].how == GATHERS) {
      CHECK(strstr(message, "on worker 1: worker 0 joined allreduce in its place") != NULL);
    }
    if (cases[c].how == SHRINKS) {
      CHECK(strstr(message, "on worker 1: worker 0 joined it with 1024 bytes where worker 1 "
                            "has 512") != NULL);
    }
    CHECK(took_less(kind, "the sync", took, kFailsWithin));
    /* Where the first case failed in worker 0's enqueue (the stand-in's lazy connection). */
    if (c == 0 && getenv("NCCL_STUB_CONNECT") != NULL) in_place_on_unwritten(s, kind, &t);
    /* No init_ccl: the next call finds the communicators made again. */
    every_worker_reduces(s, &t);
    printf("cuda_nccl_peers: %s: worker 1 %s: the sync failed in %.3f s, and the next all-reduce "
           "summed both\n",
           kind, cases[c].done, took);
  }
  CHECK_OK(dvm_session_sync_all(s));
  dvm_dref_free(t.send), dvm_dref_free(t.recv), dvm_dref_free(t.half);
  finish_session(s);
  return late_peer(kind, devices);
}

/* `cuda_nccl_peers [threads|processes|nodes]`: one kind, or (no argument) all three. Started as
 * a worker process by its own controller, it serves it; as `cuda_nccl_peers node HOST PORT
 * WORKERS`, it is a node. */
int main(int argc, char** argv) {
  register_c("peers.fill", fill_one_plus_worker_id);
  register_c("peers.allreduce_but", allreduce_but);
  int served = serve_unless_controller(argc, argv);
  if (served >= 0) return served;
  /* A wait that outlived its cause would hang the test: it ends here instead. */
  alarm(120);
  int32_t gpus = require_cuda("cuda_nccl_peers");
  if (gpus < 2) {
    printf("cuda_nccl_peers: skipped: two ranks need two GPUs; this machine has %d\n", (int)gpus);
    return EXIT_SKIPPED;
  }
  for (int k = 0; k < 3; k++) {
    if (!kind_asked(argc, argv, kSessionKinds[k])) continue;
    int ran = run(kSessionKinds[k]);
    if (ran != 0) return ran;
  }
  return check_finish();
}
