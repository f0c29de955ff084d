/* NCCL communicators that had to be aborted are made again by the session before its next call,
 * without init_ccl: a session of one worker on one GPU (worker threads, then worker processes)
 * runs an all-reduce; the next one's communicator fails under it, and the sync that reports it
 * names the aborted communicators and says they are made again; a third all-reduce, with no
 * init_ccl between, works and gives the right values.
 *
 * The failure is the NCCL stand-in's (NCCL_STUB_FAIL_ALLREDUCE=2 fails the second all-reduce of
 * each process; tests/cuda_stub_driver.rs runs it so): without it, or without a GPU or NCCL,
 * the program exits 77 (skipped). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cuda_check.h"
#include "session_check.h"

enum { N = 1024 };

/* runtime.disco.allreduce(send, sum, in_group=False, recv) on every worker. */
static void allreduce(dvm_session* s, dvm_dref* send, dvm_dref* recv) {
  int64_t sum = 0;
  DVMAny op = any_none();
  CHECK_OK(dvm_shape_new(&sum, 1, &op));
  DVMAny args[4] = {any_dref(send), op, any_bool(0), any_dref(recv)};
  dvm_dref_free(call_builtin(s, "runtime.disco.allreduce", args, 4));
  CHECK_OK(dvm_any_release(&op));
}

/* The test on a session of `kind`; 77 when NCCL cannot be loaded. */
static int run(const char* kind) {
  dvm_session_options options;
  memset(&options, 0, sizeof options);
  options.num_devices = 1;
  options.devices = &kGpu0;
  options.worker_program = "/proc/self/exe";
  dvm_session* s = NULL;
  if (strcmp(kind, "processes") == 0) {
    CHECK_OK(dvm_session_new_process(1, 1, &options, &s));
  } else {
    CHECK_OK(dvm_session_new_threaded(1, 1, &options, &s));
  }
  if (dvm_session_init_ccl(s, "nccl", NULL, 0) != DVM_OK) {
    printf("cuda_nccl_remade: skipped: %s\n", dvm_last_error_message());
    end_session(s);
    return EXIT_SKIPPED;
  }
  static float in[N], out[N];
  for (int i = 0; i < N; i++) in[i] = (float)(i % 89);
  int64_t n = N;
  DLTensor host_in = {in, kHost, 1, {kDLFloat, 32, 1}, &n, NULL, 0};
  DLTensor host_out = {out, kHost, 1, {kDLFloat, 32, 1}, &n, NULL, 0};
  dvm_dref* send = empty_tensor(s, &n, 1, (DLDataType){kDLFloat, 32, 1}, 0);
  dvm_dref* recv = empty_tensor(s, &n, 1, (DLDataType){kDLFloat, 32, 1}, 0);
  CHECK_OK(dvm_session_copy_to_worker0(s, &host_in, send));

  allreduce(s, send, recv);
  CHECK_OK(dvm_session_sync_all(s));
  /* The second fails under its collective (the sync's wait for the worker's stream sees it):
   * its communicator is aborted, and made again. */
  allreduce(s, send, recv);
  EXPECT_STATUS(dvm_session_sync_all(s), DVM_WORKER_ERROR,
                "its NCCL communicators were aborted, and are made again before the session's "
                "next call");
  EXPECT_ERROR("WorkerError", "remote process exited or there was a network error");
  /* No init_ccl: the next call finds them made again. */
  memset(out, 0, sizeof out);
  allreduce(s, send, recv);
  CHECK_OK(dvm_session_copy_from_worker0(s, &host_out, recv));
  CHECK(memcmp(in, out, sizeof in) == 0);
  CHECK_OK(dvm_session_sync_all(s));

  dvm_dref_free(send), dvm_dref_free(recv);
  end_session(s);
  printf("cuda_nccl_remade: %s: the communicators were made again after the failure\n", kind);
  return 0;
}

/* `cuda_nccl_remade [threads|processes]`: one kind, or (no argument) both. Started as a worker
 * process by its own controller, it serves it. */
int main(int argc, char** argv) {
  const char* kinds[2] = {"threads", "processes"};
  int controller = argc == 1;
  for (int k = 0; k < 2; k++) controller |= argc == 2 && strcmp(argv[1], kinds[k]) == 0;
  if (!controller) return dvm_worker_main(argc, argv);
  require_cuda("cuda_nccl_remade");
  if (getenv("NCCL_STUB_FAIL_ALLREDUCE") == NULL) {
    printf("cuda_nccl_remade: skipped: it needs the NCCL stand-in's failure "
           "(NCCL_STUB_FAIL_ALLREDUCE)\n");
    return EXIT_SKIPPED;
  }
  for (int k = 0; k < 2; k++) {
    if (argc == 2 && strcmp(argv[1], kinds[k]) != 0) continue;
    int ran = run(kinds[k]);
    if (ran != 0) return ran;
  }
  return check_finish();
}
