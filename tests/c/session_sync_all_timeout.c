/*
 * The session timeout bounds a whole dvm_session_sync_all, as it bounds a shutdown: with every
 * worker blocked, sync_all fails with TimeoutError after about one timeout, not one timeout
 * per worker.
 */
#define _POSIX_C_SOURCE 200809L

#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

#include "monotonic.h"
#include "session_check.h"

enum { WORKERS = 8, TIMEOUT_MS = 100 };

/* block(): spins until the test sets `release` (at most 60 s). */
static atomic_int release;
static int32_t block(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)args, (void)num_args, (void)result;
  double give_up = now_s() + 60;
  while (!atomic_load(&release) && now_s() < give_up) sched_yield();
  return 0;
}

int main(void) {
  alarm(120); /* a hang is a failure, not a stuck test run */
  register_c("test.c.block", block);
  dvm_session_options options;
  memset(&options, 0, sizeof options);
  options.timeout_ms = TIMEOUT_MS;
  dvm_session* s;
  CHECK_OK(dvm_session_new_threaded(WORKERS, 1, &options, &s));
  dvm_dref* blocker = session_func(s, "test.c.block");
  dvm_dref* blocked = broadcast(s, blocker, NULL, 0);

  double start = now_s();
  EXPECT_STATUS(dvm_session_sync_all(s), DVM_TIMEOUT, "timed out");
  double waited = now_s() - start;
  /* One timeout, plus generous slack for a busy machine; one timeout per worker is 0.8 s. */
  if (waited >= 0.5) {
    fprintf(stderr, "sync_all with %d blocked workers and a %d ms timeout took %.3f s\n",
            WORKERS, TIMEOUT_MS, waited);
  }
  CHECK(waited < 0.5);

  atomic_store(&release, 1);
  CHECK_OK(dvm_session_sync_all(s));
  dvm_dref_free(blocked);
  dvm_dref_free(blocker);
  end_session(s);
  return check_finish();
}
