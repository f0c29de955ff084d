/*
 * "Failures on the workers are reported by the next wait (sync, copy, register read)": a call
 * that failed on worker 0 is reported by whichever wait on worker 0 comes next, not only by a
 * sync. Here the next wait is a register read of another (good) register, or a copy from
 * worker 0.
 */
#include "session_check.h"

/* fail(): raises on every worker. */
static int32_t fail(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)args, (void)num_args, (void)result;
  dvm_error_raise("ValueError", "a failure nobody synced for");
  return -1;
}

int main(void) {
  const DLDataType f32 = {kDLFloat, 32, 1};
  const DLDevice cpu = {kDLCPU, 0};
  register_c("test.c.fail", fail);
  dvm_session* s = new_session(1);
  dvm_dref* failing = session_func(s, "test.c.fail");
  dvm_dref* rank = session_func(s, "runtime.disco.worker_rank");
  dvm_dref* ranks = broadcast(s, rank, NULL, 0);
  int64_t dims[1] = {2};
  dvm_dref* tensor = empty_tensor(s, dims, 1, f32, 0);
  CHECK_OK(dvm_session_sync_all(s));

  /* The next wait is a register read. */
  dvm_dref* failed = broadcast(s, failing, NULL, 0);
  DVMAny v = any_sentinel();
  EXPECT_STATUS(dvm_dref_get(ranks, 0, &v), DVM_WORKER_ERROR,
                "worker 0: `test.c.fail` failed: ValueError: a failure nobody synced for");
  dvm_dref_free(failed);
  (void)dvm_session_sync_all(s); /* clears the failure if the read did not report it */

  /* The next wait is a copy from worker 0. */
  failed = broadcast(s, failing, NULL, 0);
  float host[2];
  DLTensor host_dl = {host, cpu, 1, f32, dims, NULL, 0};
  EXPECT_STATUS(dvm_session_copy_from_worker0(s, &host_dl, tensor), DVM_WORKER_ERROR,
                "worker 0: `test.c.fail` failed: ValueError: a failure nobody synced for");
  dvm_dref_free(failed);
  (void)dvm_session_sync_all(s); /* clears the failure if the copy did not report it */

  CHECK_OK(dvm_session_sync_all(s));
  dvm_dref_free(tensor);
  dvm_dref_free(ranks);
  dvm_dref_free(rank);
  dvm_dref_free(failing);
  expect_no_live_registers(s);
  dvm_session_free(s);
  return check_finish();
}
