/*
 * How sessions fail, seen from C: a C callback that raises on one worker (the next wait on that
 * worker reports it, naming the worker, the function and the message; calls that take the failed
 * register fail with the same cause; everything else goes on); a missing global function
 * (KeyError at once); every call after shutdown (SessionClosed at once); freeing a session
 * without shutting it down (also while DRefs and queued calls remain); and a session timeout
 * that turns a wait on a blocked worker into a TimeoutError instead of a hang.
 */
#define _POSIX_C_SOURCE 200809L

#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

#include "monotonic.h"
#include "session_check.h"

/* ---- C callbacks ----------------------------------------------------------------------------- */

/* fail_on_1(x): raises a ValueError on worker 1, returns x elsewhere. */
static int32_t fail_on_1(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)num_args;
  if (dvm_current_worker_id() == 1) {
    dvm_error_raise("ValueError", "boom on purpose");
    return -1;
  }
  *result = args[0]; /* an Int: nothing to own */
  return 0;
}

/* odd_kind(): raises an error of a kind the library has no code for. */
static int32_t odd_kind(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)args, (void)num_args, (void)result;
  dvm_error_raise("AttributeError", "no attribute `colour`");
  return -1;
}

/* identity(x) = x, for Ints. */
static int32_t identity(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self;
  if (num_args != 1 || args[0].type_index != kDVMInt) {
    dvm_error_raise("TypeError", "identity takes one Int");
    return -1;
  }
  *result = args[0];
  return 0;
}

/* count(): counts the calls each worker ran. */
static atomic_long calls_ran[4];
static int32_t count(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)args, (void)num_args, (void)result;
  atomic_fetch_add(&calls_ran[dvm_current_worker_id()], 1);
  return 0;
}

/* block(): on worker 0, spins until the test sets `release` (or 60 s pass, so that a broken
 * test cannot spin forever); returns at once elsewhere. */
static atomic_int release;
static int32_t block(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)args, (void)num_args, (void)result;
  if (dvm_current_worker_id() != 0) return 0;
  double give_up = now_s() + 60;
  while (!atomic_load(&release)) {
    if (now_s() > give_up) {
      dvm_error_raise("RuntimeError", "block was never released");
      return -1;
    }
    sched_yield();
  }
  return 0;
}

/* one(): returns 1; its function object counts how often it was deleted. */
static atomic_int one_deleted;
static int32_t one(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)args, (void)num_args;
  result->type_index = kDVMInt;
  result->v_int64 = 1;
  return 0;
}
static void count_delete(void* self) {
  (void)self;
  atomic_fetch_add(&one_deleted, 1);
}

/* ---- The tests ------------------------------------------------------------------------------- */

static void a_worker_function_that_raises(void) {
  dvm_session* s = new_session(2);
  dvm_dref* fail = session_func(s, "test.c.fail_on_1");
  dvm_dref* ident = session_func(s, "test.c.identity");
  DVMAny seven = any_int(7);
  dvm_dref* out = broadcast(s, fail, &seven, 1);

  /* Worker 0 is fine; the next wait on worker 1 names the worker, the function and the cause. */
  CHECK_OK(dvm_session_sync_worker(s, 0));
  EXPECT_STATUS(dvm_session_sync_worker(s, 1), DVM_WORKER_ERROR,
                "worker 1: `test.c.fail_on_1` failed: ValueError: boom on purpose");
  CHECK_OK(dvm_session_sync_worker(s, 1)); /* reported once */
  CHECK(int_on(out, 0) == 7);
  DVMAny v = any_sentinel();
  EXPECT_STATUS(dvm_dref_get(out, 1, &v), DVM_WORKER_ERROR, "boom on purpose");
  CHECK(is_sentinel(&v));

  /* A call that takes the failed register fails there with the same cause; worker 0 goes on. */
  DVMAny arg = any_dref(out);
  dvm_dref* dependent = broadcast(s, ident, &arg, 1);
  CHECK(int_on(dependent, 0) == 7);
  EXPECT_STATUS(dvm_session_sync_worker(s, 1), DVM_WORKER_ERROR,
                "worker 1: `test.c.identity` was not run");
  EXPECT_ERROR("WorkerError", "boom on purpose");
  EXPECT_STATUS(dvm_dref_get(dependent, 1, &v), DVM_WORKER_ERROR, "boom on purpose");
  CHECK(is_sentinel(&v));

  /* Several failures before a wait: the first is reported, with how many followed. */
  dvm_dref* again1 = broadcast(s, fail, &seven, 1);
  dvm_dref* again2 = broadcast(s, fail, &seven, 1);
  EXPECT_STATUS(dvm_session_sync_all(s), DVM_WORKER_ERROR,
                "boom on purpose (and 1 more failure since the last sync)");
  EXPECT_ERROR("WorkerError", "worker 1: ");
  CHECK_OK(dvm_session_sync_all(s));

  /* Kinds without a status code of their own keep their name in the message. */
  dvm_dref* odd = session_func(s, "test.c.odd_kind");
  dvm_dref* odd_out = broadcast(s, odd, NULL, 0);
  EXPECT_STATUS(dvm_session_sync_worker(s, 0), DVM_WORKER_ERROR,
                "worker 0: `test.c.odd_kind` failed: AttributeError: no attribute `colour`");

  /* Waits through a worker handle report that worker's failures: odd_kind's, still pending
   * there, then one from a call on that worker alone. */
  dvm_worker* w1;
  CHECK_OK(dvm_session_worker(s, 1, &w1));
  EXPECT_STATUS(dvm_worker_sync(w1), DVM_WORKER_ERROR,
                "worker 1: `test.c.odd_kind` failed: AttributeError: no attribute `colour`");
  dvm_dref* single = NULL;
  CHECK_OK(dvm_worker_call(w1, fail, &seven, 1, &single));
  EXPECT_STATUS(dvm_worker_sync(w1), DVM_WORKER_ERROR,
                "worker 1: `test.c.fail_on_1` failed: ValueError: boom on purpose");

  /* Later calls work, on every worker. */
  dvm_dref* rank = session_func(s, "runtime.disco.worker_rank");
  dvm_dref* ranks = broadcast(s, rank, NULL, 0);
  CHECK(int_on(ranks, 0) == 0);
  CHECK(int_on(ranks, 1) == 1);
  CHECK_OK(dvm_session_sync_all(s));

  dvm_worker_free(w1);
  dvm_dref* all[] = {fail, ident, out, dependent, again1, again2, odd, odd_out, single, rank,
                     ranks};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dvm_dref_free(all[i]);
  end_session(s);
}

static void a_missing_function_fails_at_lookup(void) {
  dvm_session* s = new_session(2);
  dvm_dref* out = (dvm_dref*)&out;
  EXPECT_STATUS(dvm_session_get_global_func(s, "test.c.no_such_function", &out), DVM_KEY_ERROR,
                "test.c.no_such_function");
  CHECK(out == (dvm_dref*)&out);
  CHECK_OK(dvm_session_sync_all(s)); /* nothing was sent to the workers */

  /* Once looked up, the function lives in the workers' registers: removing the global name
   * afterwards does not affect calls. */
  register_c("test.c.short_lived", identity);
  dvm_dref* f = session_func(s, "test.c.short_lived");
  CHECK_OK(dvm_func_remove_global("test.c.short_lived"));
  DVMAny three = any_int(3);
  dvm_dref* r = broadcast(s, f, &three, 1);
  CHECK(int_on(r, 0) == 3 && int_on(r, 1) == 3);
  EXPECT_STATUS(dvm_session_get_global_func(s, "test.c.short_lived", &out), DVM_KEY_ERROR,
                "test.c.short_lived");
  dvm_dref_free(r);
  dvm_dref_free(f);
  expect_no_live_registers(s);
  dvm_session_free(s);
}

static void every_call_after_shutdown_fails_at_once(void) {
  const DLDataType f32 = {kDLFloat, 32, 1};
  const DLDevice cpu = {kDLCPU, 0};
  dvm_session* s = new_session(2);
  dvm_dref* rank = session_func(s, "runtime.disco.worker_rank");
  dvm_dref* ranks = broadcast(s, rank, NULL, 0);
  int64_t dims[1] = {4};
  dvm_dref* tensor = empty_tensor(s, dims, 1, f32, 0);
  dvm_worker* w0;
  CHECK_OK(dvm_session_worker(s, 0, &w0));

  /* Work queued before the shutdown still runs: shutdown stops the workers after it. */
  dvm_dref* counter = session_func(s, "test.c.count");
  for (int i = 0; i < 1000; i++) dvm_dref_free(broadcast(s, counter, NULL, 0));
  CHECK_OK(dvm_session_shutdown(s));
  CHECK(atomic_load(&calls_ran[0]) == 1000 && atomic_load(&calls_ran[1]) == 1000);

  float host[4] = {0};
  DLTensor host_dl = {host, cpu, 1, f32, dims, NULL, 0};
  DVMAny v = any_sentinel();
  dvm_dref* out = (dvm_dref*)&out;
  int64_t live = -5;
  const char* closed = "the session has been shut down";
  double start = now_s();
  EXPECT_STATUS(dvm_session_get_global_func(s, "runtime.disco.worker_rank", &out),
                DVM_SESSION_CLOSED, closed);
  EXPECT_STATUS(dvm_session_call(s, rank, NULL, 0, &out), DVM_SESSION_CLOSED, closed);
  EXPECT_STATUS(dvm_worker_call(w0, rank, NULL, 0, &out), DVM_SESSION_CLOSED, closed);
  CHECK(out == (dvm_dref*)&out);
  EXPECT_STATUS(dvm_session_sync_worker(s, 0), DVM_SESSION_CLOSED, closed);
  EXPECT_STATUS(dvm_session_sync_worker(s, 1), DVM_SESSION_CLOSED, closed);
  EXPECT_STATUS(dvm_session_sync_all(s), DVM_SESSION_CLOSED, closed);
  EXPECT_STATUS(dvm_worker_sync(w0), DVM_SESSION_CLOSED, closed);
  EXPECT_STATUS(dvm_dref_get(ranks, 1, &v), DVM_SESSION_CLOSED, closed);
  CHECK(is_sentinel(&v));
  DVMAny five = any_int(5);
  EXPECT_STATUS(dvm_dref_set(ranks, 1, &five), DVM_SESSION_CLOSED, closed);
  EXPECT_STATUS(dvm_session_copy_to_worker0(s, &host_dl, tensor), DVM_SESSION_CLOSED, closed);
  EXPECT_STATUS(dvm_session_copy_from_worker0(s, &host_dl, tensor), DVM_SESSION_CLOSED, closed);
  EXPECT_STATUS(dvm_session_live_registers(s, 0, &live), DVM_SESSION_CLOSED, closed);
  CHECK(live == -5);
  CHECK_OK(dvm_session_shutdown(s)); /* shutting down twice is fine */
  CHECK(now_s() - start < 5.0);      /* nothing above waited for a worker */

  /* Handles outlive the shutdown and are freed as usual. */
  CHECK(dvm_session_num_workers(s) == 2);
  CHECK(dvm_worker_id(w0) == 0);
  dvm_worker_free(w0);
  dvm_dref_free(counter);
  dvm_dref_free(tensor);
  dvm_dref_free(ranks);
  dvm_dref_free(rank);
  dvm_session_free(s);
}

static void freeing_without_shutdown_is_safe(void) {
  /* Nothing alive but the session. */
  dvm_session* plain = new_session(2);
  dvm_dref* rank = session_func(plain, "runtime.disco.worker_rank");
  dvm_dref_free(broadcast(plain, rank, NULL, 0));
  dvm_dref_free(rank);
  dvm_session_free(plain);

  /* Calls still queued: freeing the last reference runs them, then stops the workers. */
  for (int w = 0; w < 2; w++) atomic_store(&calls_ran[w], 0);
  dvm_session* busy = new_session(2);
  dvm_dref* counter = session_func(busy, "test.c.count");
  for (int i = 0; i < 1000; i++) dvm_dref_free(broadcast(busy, counter, NULL, 0));
  dvm_dref_free(counter);
  dvm_session_free(busy);
  CHECK(atomic_load(&calls_ran[0]) == 1000 && atomic_load(&calls_ran[1]) == 1000);

  /* DRefs still alive keep the session working after its handle is freed; the last one to go
   * stops the workers, which release what their registers held. */
  dvm_session* s = new_session(2);
  rank = session_func(s, "runtime.disco.worker_rank");
  dvm_dref* ranks = broadcast(s, rank, NULL, 0);
  dvm_dref* holder = broadcast(s, rank, NULL, 0);
  static int token;
  dvm_func* mine;
  CHECK_OK(dvm_func_new(&token, one, count_delete, &mine));
  DVMAny as_value = any_object(mine);
  CHECK_OK(dvm_dref_set(holder, 0, &as_value));
  CHECK_OK(dvm_dref_set(holder, 1, &as_value));
  dvm_func_free(mine); /* the registers keep it alive */
  dvm_session_free(s);

  CHECK(int_on(ranks, 1) == 1);
  DVMAny held = any_none();
  CHECK_OK(dvm_dref_get(holder, 0, &held));
  CHECK(held.type_index == kDVMFunction);
  if (held.type_index == kDVMFunction) {
    DVMAny result = any_none();
    CHECK_OK(dvm_func_call((dvm_func*)held.v_obj, NULL, 0, &result));
    CHECK(result.type_index == kDVMInt && result.v_int64 == 1);
  }
  CHECK_OK(dvm_any_release(&held));
  dvm_dref_free(ranks);
  dvm_dref_free(rank);
  CHECK(atomic_load(&one_deleted) == 0);
  dvm_dref_free(holder); /* the last reference: the session shuts down and joins its workers */
  CHECK(atomic_load(&one_deleted) == 1);
}

static void a_timeout_turns_a_hang_into_an_error(void) {
  const DLDataType f32 = {kDLFloat, 32, 1};
  const DLDevice cpu = {kDLCPU, 0};
  dvm_session_options options;
  memset(&options, 0, sizeof options);
  options.timeout_ms = 250;
  dvm_session* s;
  CHECK_OK(dvm_session_new_threaded(2, 1, &options, &s));
  int64_t dims[1] = {4};
  dvm_dref* tensor = empty_tensor(s, dims, 1, f32, 1);
  dvm_dref* blocker = session_func(s, "test.c.block");
  CHECK_OK(dvm_session_sync_all(s));

  atomic_store(&release, 0);
  dvm_dref* blocked = broadcast(s, blocker, NULL, 0); /* worker 0 now spins until released */
  CHECK_OK(dvm_session_sync_worker(s, 1));            /* worker 1 is not blocked */
  double start = now_s();
  EXPECT_STATUS(dvm_session_sync_worker(s, 0), DVM_TIMEOUT, "sync on worker 0 timed out");
  CHECK(now_s() - start >= 0.2);
  EXPECT_STATUS(dvm_session_sync_all(s), DVM_TIMEOUT, "sync of all timed out");
  DVMAny v = any_sentinel();
  EXPECT_STATUS(dvm_dref_get(blocked, 0, &v), DVM_TIMEOUT,
                "reading a register on worker 0 timed out");
  CHECK(is_sentinel(&v));
  int64_t live = -5;
  EXPECT_STATUS(dvm_session_live_registers(s, 0, &live), DVM_TIMEOUT, "timed out");
  CHECK(live == -5);
  /* A copy that timed out never touches the host buffer afterwards. */
  float host[4] = {-1, -1, -1, -1};
  DLTensor host_dl = {host, cpu, 1, f32, dims, NULL, 0};
  EXPECT_STATUS(dvm_session_copy_from_worker0(s, &host_dl, tensor), DVM_TIMEOUT,
                "copy on worker 0 timed out");

  /* Released, the worker catches up and the session is usable again. */
  atomic_store(&release, 1);
  CHECK_OK(dvm_session_sync_worker(s, 0));
  CHECK(host[0] == -1 && host[1] == -1 && host[2] == -1 && host[3] == -1);
  CHECK_OK(dvm_session_copy_from_worker0(s, &host_dl, tensor));
  CHECK(host[0] == 0 && host[3] == 0);
  CHECK_OK(dvm_dref_get(blocked, 0, &v));
  CHECK(v.type_index == kDVMNone);
  dvm_dref* rank = session_func(s, "runtime.disco.worker_rank");
  dvm_dref* ranks = broadcast(s, rank, NULL, 0);
  CHECK(int_on(ranks, 0) == 0 && int_on(ranks, 1) == 1);
  CHECK_OK(dvm_session_sync_all(s));

  dvm_dref* all[] = {tensor, blocker, blocked, rank, ranks};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dvm_dref_free(all[i]);
  expect_no_live_registers(s);

  /* A shutdown that cannot finish in time says so instead of hanging. */
  atomic_store(&release, 0);
  blocker = session_func(s, "test.c.block");
  blocked = broadcast(s, blocker, NULL, 0);
  dvm_dref_free(blocked);
  dvm_dref_free(blocker);
  EXPECT_STATUS(dvm_session_shutdown(s), DVM_TIMEOUT, "worker 0 did not stop in time");
  /* It says what the worker is doing. */
  EXPECT_ERROR("TimeoutError", "left running: worker 0 has run call ");
  EXPECT_ERROR("TimeoutError", " (`test.c.block`) for ");
  EXPECT_STATUS(dvm_session_sync_worker(s, 1), DVM_SESSION_CLOSED, "shut down");
  atomic_store(&release, 1); /* the worker finishes, sees the shutdown and exits */
  CHECK_OK(dvm_session_shutdown(s));
  dvm_session_free(s);
}

int main(void) {
  alarm(120); /* a hang is a failure, not a stuck test run */
  register_c("test.c.fail_on_1", fail_on_1);
  register_c("test.c.odd_kind", odd_kind);
  register_c("test.c.identity", identity);
  register_c("test.c.count", count);
  register_c("test.c.block", block);

  a_worker_function_that_raises();
  a_missing_function_fails_at_lookup();
  every_call_after_shutdown_fails_at_once();
  freeing_without_shutdown_is_safe();
  a_timeout_turns_a_hang_into_an_error();
  return check_finish();
}
