/*
 * A worker failure is reported by the next wait on that worker, even when a wait in between
 * timed out. Here worker 0 fails a call, then blocks; a sync on worker 0 times out (it saw
 * nothing: the worker was still blocked), and once the worker is released the next sync on
 * worker 0 must report the failure rather than succeed.
 */
#define _POSIX_C_SOURCE 200809L

#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

#include "monotonic.h"
#include "session_check.h"

/* fail(): raises on worker 0. */
static int32_t fail(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)args, (void)num_args, (void)result;
  if (dvm_current_worker_id() != 0) return 0;
  dvm_error_raise("ValueError", "failed before the timeout");
  return -1;
}

/* block(): on worker 0, says it `entered`, then spins until the test sets `release` (at most
 * 60 s). */
static atomic_int entered, release;
static int32_t block(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)args, (void)num_args, (void)result;
  if (dvm_current_worker_id() != 0) return 0;
  atomic_store(&entered, 1);
  double give_up = now_s() + 60;
  while (!atomic_load(&release) && now_s() < give_up) sched_yield();
  return 0;
}

/* Worker 0 fails, then blocks; `wait` times out while it is blocked. */
static void check_failure_survives(dvm_session* s, dvm_dref* failing, dvm_dref* blocker,
                                   dvm_status (*wait)(dvm_session*), const char* wait_name) {
  atomic_store(&entered, 0);
  atomic_store(&release, 0);
  dvm_dref* failed = broadcast(s, failing, NULL, 0);
  dvm_dref* blocked = broadcast(s, blocker, NULL, 0);
  /* The wait must find worker 0 in the call, however slowly the failure before it ran. */
  double give_up = now_s() + 60;
  while (!atomic_load(&entered) && now_s() < give_up) sched_yield();
  /* The timeout says what worker 0 does: "sync ... timed out after 100 ms: worker 0 has run
   * call N (`test.c.block`) for 100 ms; worker 1 is idle". */
  EXPECT_STATUS(wait(s), DVM_TIMEOUT, "timed out after 100 ms: worker 0 has run call ");
  EXPECT_ERROR("TimeoutError", "(`test.c.block`) for ");
  atomic_store(&release, 1);
  char what[128];
  snprintf(what, sizeof what, "the sync on worker 0 after %s timed out", wait_name);
  check_status(dvm_session_sync_worker(s, 0), DVM_WORKER_ERROR,
               "worker 0: `test.c.fail` failed: ValueError", __FILE__, __LINE__, what);
  CHECK_OK(dvm_session_sync_all(s));
  dvm_dref_free(blocked);
  dvm_dref_free(failed);
}

static dvm_status sync_worker0(dvm_session* s) { return dvm_session_sync_worker(s, 0); }

int main(void) {
  alarm(120); /* a hang is a failure, not a stuck test run */
  register_c("test.c.fail", fail);
  register_c("test.c.block", block);
  dvm_session_options options;
  memset(&options, 0, sizeof options);
  options.timeout_ms = 100;
  dvm_session* s;
  CHECK_OK(dvm_session_new_threaded(2, 1, &options, &s));
  dvm_dref* failing = session_func(s, "test.c.fail");
  dvm_dref* blocker = session_func(s, "test.c.block");

  check_failure_survives(s, failing, blocker, sync_worker0, "dvm_session_sync_worker");
  check_failure_survives(s, failing, blocker, dvm_session_sync_all, "dvm_session_sync_all");

  dvm_dref_free(blocker);
  dvm_dref_free(failing);
  end_session(s);
  return check_finish();
}
