/*
 * Hosted functions (dvm_func_new_hosted), whose callback may run on another thread than its
 * caller: the callback learns its caller's worker as an argument (-1 off worker threads), a
 * failure it reports as "kind NUL message" in its result is raised on the caller's thread with
 * that kind and message (on a worker: the next sync reports it), and the deleter runs once the
 * function is gone.
 */
#include "session_check.h"

static int deleted;

static void count_deletion(void* self) {
  (void)self;
  deleted++;
}

/* Returns 10 * the caller's worker id, or fails with a ValueError when asked to (args[0] != 0).
 * It reads nothing of its own thread: a host may run it on any thread. */
static int32_t tens(void* self, const DVMAny* args, int32_t num_args, int32_t worker_id,
                    DVMAny* result) {
  (void)self;
  if (num_args == 1 && args[0].type_index == kDVMInt && args[0].v_int64 != 0) {
    static const char error[] = "ValueError\0worker asked to fail";
    dvm_string_new(error, sizeof error - 1, result);
    return -1;
  }
  result->type_index = kDVMInt;
  result->v_int64 = 10 * (int64_t)worker_id;
  return 0;
}

int main(void) {
  /* 1. Called off the workers: worker id -1; a failure arrives with its kind and message. */
  dvm_func* f;
  CHECK_OK(dvm_func_new_hosted(NULL, tens, count_deletion, &f));
  DVMAny arg = {.type_index = kDVMInt, .v_int64 = 0};
  DVMAny result;
  memset(&result, 0, sizeof result);
  CHECK_OK(dvm_func_call(f, &arg, 1, &result));
  CHECK(result.type_index == kDVMInt && result.v_int64 == -10);
  arg.v_int64 = 1;
  EXPECT_STATUS(dvm_func_call(f, &arg, 1, &result), DVM_VALUE_ERROR, "worker asked to fail");

  /* 2. On every worker of a session: each sees its own id; a failure is the next sync's. */
  CHECK_OK(dvm_func_register_global("tests.hosted.tens", f, 1));
  dvm_session* s;
  CHECK_OK(dvm_session_new_threaded(3, 1, NULL, &s));
  dvm_dref* func;
  CHECK_OK(dvm_session_get_global_func(s, "tests.hosted.tens", &func));
  dvm_dref* out;
  arg.v_int64 = 0;
  CHECK_OK(dvm_session_call(s, func, &arg, 1, &out));
  for (int32_t w = 0; w < 3; w++) {
    DVMAny value;
    CHECK_OK(dvm_dref_get(out, w, &value));
    CHECK(value.type_index == kDVMInt && value.v_int64 == 10 * w);
  }
  dvm_dref_free(out);
  arg.v_int64 = 1;
  CHECK_OK(dvm_session_call(s, func, &arg, 1, &out));
  EXPECT_STATUS(dvm_session_sync_all(s), DVM_WORKER_ERROR, "worker asked to fail");
  dvm_dref_free(out);
  dvm_dref_free(func);
  CHECK_OK(dvm_session_shutdown(s));
  dvm_session_free(s);

  /* 3. The deleter runs once the last reference (the registry's) is gone. */
  dvm_func_free(f);
  CHECK(deleted == 0); /* the registry still holds it */
  CHECK_OK(dvm_func_remove_global("tests.hosted.tens"));
  CHECK(deleted == 1);
  return check_finish();
}
