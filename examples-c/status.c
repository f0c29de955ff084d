/*
 * status.c: see what every worker of a session is doing, and what a wait that timed out says
 * of them.
 *
 * dvm_session_status reads what each worker reports of itself (its state, the call it runs and
 * for how long, the collective it waits in and for whom, its last failure) without sending any
 * worker a message, so it answers at once even while a worker is stuck. A wait that runs past
 * the session's timeout fails with DVM_TIMEOUT, and its message says the same of every worker
 * it waited for. Here worker 1 is held in a function until this program lets it go.
 * docs/observability.md says what each field means.
 *
 * Build and run from the repository root:
 *
 *   cargo build
 *   cc -std=c11 -Iinclude examples-c/status.c -Ltarget/debug -ldiscovm \
 *      -Wl,-rpath,"$PWD/target/debug" -o status
 *   ./status
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep */

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "discovm.h"
#include "example_check.h" /* CHECK(call): stops with the error if a call fails */

enum { NUM_WORKERS = 4, TIMEOUT_MS = 1000, HOLD_AT_MOST_MS = 30000 };

static atomic_int held;     /* set by worker 1 once it runs example.hold */
static atomic_int released; /* set by main() to let worker 1 go */

static void sleep_1ms(void) {
  struct timespec one_ms = {0, 1000000};
  nanosleep(&one_ms, NULL);
}

/* Waits until `flag` is set, for at most HOLD_AT_MOST_MS: a mistake never hangs the program. */
static void wait_for(atomic_int* flag) {
  for (int ms = 0; !atomic_load(flag) && ms < HOLD_AT_MOST_MS; ms++) sleep_1ms();
}

/* Step 1: the function the workers run. Worker 1 stays in it until main() sets `released`;
 * the others return at once. */
static int32_t hold(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)args, (void)num_args, (void)result;
  if (dvm_current_worker_id() == 1) {
    atomic_store(&held, 1);
    wait_for(&released);
  }
  return 0;
}

/* Prints the session's status. The document is a string object (kDVMStr), owned by the
 * caller: its bytes (DVMByteArray) follow the object's header. */
static void print_status(dvm_session* session) {
  DVMAny status;
  memset(&status, 0, sizeof status);
  CHECK(dvm_session_status(session, &status)); /* never waits for a worker */
  if (status.type_index != kDVMStr) {
    fprintf(stderr, "the status has type index %d, not a string\n", (int)status.type_index);
    exit(1);
  }
  const DVMByteArray* json = (const DVMByteArray*)((const DVMObject*)status.v_obj + 1);
  printf("%.*s\n", (int)json->size, json->data);
  CHECK(dvm_any_release(&status));
}

int main(void) {
  /* Step 2: register the function under a global name, so workers can find it. */
  dvm_func* f;
  CHECK(dvm_func_new(NULL, hold, NULL, &f));
  CHECK(dvm_func_register_global("example.hold", f, 0));
  dvm_func_free(f); /* the registry keeps its own reference */

  /* Step 3: start worker threads with a session timeout: a wait (a sync, a read, a copy)
   * that runs past it fails with DVM_TIMEOUT instead of waiting for good. */
  dvm_session_options options;
  memset(&options, 0, sizeof options); /* zero: the defaults */
  options.timeout_ms = TIMEOUT_MS;
  dvm_session* session;
  CHECK(dvm_session_new_threaded(NUM_WORKERS, 1, &options, &session));

  /* Step 4: broadcast the call. Calls are numbered from 1 in the order they are sent (a
   * lookup is no call), so this is call 1. Workers 0, 2 and 3 return from it; worker 1
   * stays. */
  dvm_dref* hold_fn;
  CHECK(dvm_session_get_global_func(session, "example.hold", &hold_fn));
  dvm_dref* result;
  CHECK(dvm_session_call(session, hold_fn, NULL, 0, &result));
  wait_for(&held);

  /* Step 5: take the status. Worker 1 is "running" call 1 of "example.hold", with the time
   * it has run it in "since_ms"; the others are "idle" (or still "running", if they are
   * slow to get there). */
  printf("while worker 1 is held:\n");
  print_status(session);

  /* Step 6: wait for every worker. The wait times out, and its message says what each
   * worker does: "sync of all timed out after 1.0 s: worker 1 has run call 1
   * (`example.hold`) for 1.0 s; workers 0, 2 and 3 are idle". Its kind stays
   * TimeoutError. */
  dvm_status synced = dvm_session_sync_all(session);
  if (synced != DVM_TIMEOUT) {
    fprintf(stderr, "the sync should have timed out, but returned status %d\n", (int)synced);
    return 1;
  }
  const char* report = dvm_last_error_message();
  printf("%s: %s\n", dvm_last_error_kind(), report);
  int names_the_call = strstr(report, "worker 1 has run call 1 (`example.hold`)") != NULL;
  printf("the report names worker 1's call: %s\n", names_the_call ? "yes" : "no");

  /* Step 7: let worker 1 go. A timeout breaks nothing: the next sync waits again, and the
   * status then shows every worker idle, having finished call 1. */
  atomic_store(&released, 1);
  CHECK(dvm_session_sync_all(session));
  printf("after worker 1 was let go:\n");
  print_status(session);

  /* Step 8: clean up. */
  dvm_dref_free(result);
  dvm_dref_free(hold_fn);
  CHECK(dvm_session_shutdown(session));
  dvm_session_free(session);
  CHECK(dvm_func_remove_global("example.hold"));
  printf("session shut down\n");
  return names_the_call ? 0 : 1;
}
