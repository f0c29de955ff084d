/*
 * Sessions under load, from C: 100 000 broadcast calls run in order on every worker; eight host
 * threads sharing one session (10 000 calls each) lose no call; and shutting the session down
 * while threads are calling is clean: it returns, and every thread sees SessionClosed and
 * joins.
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

#include "session_check.h"

enum { MAX_WORKERS = 4 };

/* ---- C callbacks ----------------------------------------------------------------------------- */

/* expect_next(i): each worker thread expects 0, 1, 2, ... and raises if a call comes out of
 * order. The counter is per thread, and a session's worker threads are its own. */
static _Thread_local int64_t next_expected;
static int32_t expect_next(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)num_args, (void)result;
  int64_t seen = args[0].v_int64;
  if (seen != next_expected) {
    char message[96];
    snprintf(message, sizeof message, "call %lld ran where %lld was due", (long long)seen,
             (long long)next_expected);
    dvm_error_raise("ValueError", message);
    next_expected = seen + 1;
    return -1;
  }
  next_expected = seen + 1;
  return 0;
}

/* count(): counts the calls each worker ran. */
static atomic_long calls_ran[MAX_WORKERS];
static int32_t count(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)args, (void)num_args, (void)result;
  int32_t id = dvm_current_worker_id();
  if (id < 0 || id >= MAX_WORKERS) {
    dvm_error_raise("RuntimeError", "count ran off the expected workers");
    return -1;
  }
  atomic_fetch_add(&calls_ran[id], 1);
  return 0;
}

/* ---- The tests ------------------------------------------------------------------------------- */

static void a_hundred_thousand_calls_keep_per_worker_order(void) {
  dvm_session* s = new_session(2);
  dvm_dref* f = session_func(s, "test.c.expect_next");
  for (int64_t i = 0; i < 100000; i++) {
    DVMAny arg = any_int(i);
    dvm_dref* out;
    dvm_status status = dvm_session_call(s, f, &arg, 1, &out);
    if (status != DVM_OK) {
      CHECK_OK(status);
      break;
    }
    dvm_dref_free(out);
  }
  CHECK_OK(dvm_session_sync_all(s)); /* any call out of order would fail here */
  dvm_dref_free(f);
  end_session(s);
}

/* One host thread's share of the load: `calls` broadcasts, a sync every 1000. */
typedef struct {
  dvm_session* session;
  const dvm_dref* func;
  int calls;
  int index;
  dvm_status failed; /* the first status that was not DVM_OK */
  char message[256];
} CallerJob;

static void note_failure(CallerJob* job, dvm_status status) {
  if (job->failed != DVM_OK) return;
  job->failed = status;
  snprintf(job->message, sizeof job->message, "%s: %s",
           check_or_null(dvm_last_error_kind()), check_or_null(dvm_last_error_message()));
}

static void* caller(void* arg) {
  CallerJob* job = arg;
  for (int i = 0; i < job->calls; i++) {
    dvm_dref* out;
    dvm_status status = dvm_session_call(job->session, job->func, NULL, 0, &out);
    if (status != DVM_OK) {
      note_failure(job, status);
      return NULL;
    }
    dvm_dref_free(out);
    if (i % 1000 == 0) {
      status = dvm_session_sync_worker(job->session, (i / 1000 + job->index) % 2);
      if (status != DVM_OK) {
        note_failure(job, status);
        return NULL;
      }
    }
  }
  dvm_status status = dvm_session_sync_all(job->session);
  if (status != DVM_OK) note_failure(job, status);
  return NULL;
}

static void eight_host_threads_lose_no_call(void) {
  enum { THREADS = 8, CALLS = 10000 };
  for (int w = 0; w < MAX_WORKERS; w++) atomic_store(&calls_ran[w], 0);
  dvm_session* s = new_session(2);
  dvm_dref* f = session_func(s, "test.c.count");
  pthread_t threads[THREADS];
  CallerJob jobs[THREADS];
  for (int t = 0; t < THREADS; t++) {
    jobs[t] = (CallerJob){s, f, CALLS, t, DVM_OK, ""};
    CHECK(pthread_create(&threads[t], NULL, caller, &jobs[t]) == 0);
  }
  for (int t = 0; t < THREADS; t++) {
    CHECK(pthread_join(threads[t], NULL) == 0);
    if (jobs[t].failed != DVM_OK) {
      fprintf(stderr, "thread %d failed with status %d: %s\n", t, (int)jobs[t].failed,
              jobs[t].message);
    }
    CHECK(jobs[t].failed == DVM_OK);
  }
  CHECK_OK(dvm_session_sync_all(s));
  for (int w = 0; w < 2; w++) {
    long ran = atomic_load(&calls_ran[w]);
    if (ran != THREADS * CALLS) fprintf(stderr, "worker %d ran %ld calls\n", w, ran);
    CHECK(ran == THREADS * CALLS);
  }
  dvm_dref_free(f);
  end_session(s);
}

/* A thread that calls and syncs until the session closes under it (at most `calls` rounds). */
typedef struct {
  dvm_session* session;
  const dvm_dref* func;
  atomic_int* rounds_done; /* shared: rounds completed by all threads together */
  long calls;
  dvm_status ended_with;
  int closed_kind_ok;    /* the last error's kind was SessionClosed */
  int closed_again;      /* a further call also failed with SessionClosed */
  char message[256];
} LoadJob;

static void* load(void* arg) {
  LoadJob* job = arg;
  for (long i = 0; i < job->calls; i++) {
    dvm_dref* out = NULL;
    dvm_status status = dvm_session_call(job->session, job->func, NULL, 0, &out);
    if (status == DVM_OK) {
      dvm_dref_free(out); /* also fine when the session closed in between */
      status = dvm_session_sync_worker(job->session, (int32_t)(i % 2));
    }
    if (status != DVM_OK) {
      job->ended_with = status;
      const char* kind = dvm_last_error_kind();
      job->closed_kind_ok = kind != NULL && strcmp(kind, "SessionClosed") == 0;
      snprintf(job->message, sizeof job->message, "%s: %s", check_or_null(kind),
               check_or_null(dvm_last_error_message()));
      job->closed_again = dvm_session_call(job->session, job->func, NULL, 0, &out) ==
                              DVM_SESSION_CLOSED &&
                          dvm_session_sync_all(job->session) == DVM_SESSION_CLOSED;
      return NULL;
    }
    atomic_fetch_add(job->rounds_done, 1);
  }
  return NULL; /* ran out of rounds: the session never closed */
}

static void shutdown_during_load_is_clean(void) {
  enum { THREADS = 4 };
  for (int w = 0; w < MAX_WORKERS; w++) atomic_store(&calls_ran[w], 0);
  dvm_session* s = new_session(4);
  dvm_dref* f = session_func(s, "test.c.count");
  atomic_int rounds_done = 0;
  pthread_t threads[THREADS];
  LoadJob jobs[THREADS];
  for (int t = 0; t < THREADS; t++) {
    jobs[t] = (LoadJob){s, f, &rounds_done, 2000000, DVM_OK, 0, 0, ""};
    CHECK(pthread_create(&threads[t], NULL, load, &jobs[t]) == 0);
  }
  /* Let the load get going (bounded: a few hundred rounds, or give up after 10^8 yields). */
  for (long spins = 0; atomic_load(&rounds_done) < 400 && spins < 100000000; spins++) {
    sched_yield();
  }
  CHECK(atomic_load(&rounds_done) >= 400);
  CHECK_OK(dvm_session_shutdown(s));

  for (int t = 0; t < THREADS; t++) {
    CHECK(pthread_join(threads[t], NULL) == 0);
    if (jobs[t].ended_with != DVM_SESSION_CLOSED || !jobs[t].closed_kind_ok) {
      fprintf(stderr, "thread %d ended with status %d: %s\n", t, (int)jobs[t].ended_with,
              jobs[t].message);
    }
    CHECK(jobs[t].ended_with == DVM_SESSION_CLOSED);
    CHECK(jobs[t].closed_kind_ok);
    CHECK(jobs[t].closed_again);
  }
  /* Each completed round synced worker 0 or 1 after its call: those calls ran. (A call racing
   * the shutdown may have been queued behind it on some workers; its sender learns that from
   * its next wait, as SessionClosed.) */
  CHECK(atomic_load(&calls_ran[0]) + atomic_load(&calls_ran[1]) >= atomic_load(&rounds_done));

  EXPECT_STATUS(dvm_session_sync_all(s), DVM_SESSION_CLOSED, "shut down");
  CHECK_OK(dvm_session_shutdown(s));
  dvm_dref_free(f);
  dvm_session_free(s);
}

int main(void) {
  alarm(300); /* a hang is a failure, not a stuck test run */
  register_c("test.c.expect_next", expect_next);
  register_c("test.c.count", count);

  a_hundred_thousand_calls_keep_per_worker_order();
  eight_host_threads_lose_no_call();
  shutdown_during_load_is_clean();
  return check_finish();
}
