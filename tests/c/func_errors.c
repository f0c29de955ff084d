/*
 * Errors raised inside C callbacks reach the caller of dvm_func_call with their kind and
 * message: the standard kinds map to their status codes, other kinds come back as
 * DVM_OTHER_ERROR with the name preserved, a callback that fails without raising becomes a
 * RuntimeError, errors propagate through nested calls, and each thread keeps its own error.
 */
#include <threads.h>

#include "check.h"

/* What a raising callback raises: `self` points at one of these. */
typedef struct {
  const char* kind;
  const char* message;
} Raise;

static int32_t raise_error(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)args, (void)num_args, (void)result;
  const Raise* what = (const Raise*)self;
  dvm_error_raise(what->kind, what->message);
  return -1;
}

/* Fails with the status in `self` without raising anything. */
static int32_t fail_silently(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)args, (void)num_args, (void)result;
  return *(const int32_t*)self;
}

/* Raises an error but then reports success: the caller must see the success. */
static int32_t raise_then_succeed(void* self, const DVMAny* args, int32_t num_args,
                                  DVMAny* result) {
  (void)self, (void)args, (void)num_args;
  dvm_error_raise("ValueError", "raised but not returned");
  result->type_index = kDVMInt;
  result->v_int64 = 7;
  return 0;
}

/* Calls the global `self` names and passes its failure on by returning -1, as tvm-ffi code does:
 * the error the inner call left on this thread is the one the outer caller receives. */
static int32_t call_inner(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  dvm_func* inner;
  if (dvm_func_get_global((const char*)self, &inner) != DVM_OK) return -1;
  dvm_status status = dvm_func_call(inner, args, num_args, result);
  dvm_func_free(inner);
  return status == DVM_OK ? 0 : -1;
}

static dvm_func* make(DVMSafeCall call, void* self) {
  dvm_func* f;
  CHECK_OK(dvm_func_new(self, call, NULL, &f));
  return f;
}

/* Calls `f` without arguments; returns the status. */
static dvm_status call0(dvm_func* f) {
  DVMAny result;
  memset(&result, 0, sizeof result);
  dvm_status status = dvm_func_call(f, NULL, 0, &result);
  if (status == DVM_OK) dvm_any_release(&result);
  return status;
}

static int last_error_is(const char* kind, const char* message) {
  const char* k = dvm_last_error_kind();
  const char* m = dvm_last_error_message();
  return k != NULL && m != NULL && strcmp(k, kind) == 0 && strcmp(m, message) == 0;
}

/* Runs on a second thread: fails there and reports whether that thread saw its own error. */
static int fail_on_other_thread(void* arg) {
  dvm_func* f = (dvm_func*)arg;
  if (call0(f) != DVM_KEY_ERROR) return 1;
  return last_error_is("KeyError", "raised on the second thread") ? 0 : 2;
}

int main(void) {
  /* 1. A ValueError raised in the callback arrives with its status, kind and message. */
  Raise value_error = {"ValueError", "x must be positive, got -3"};
  dvm_func* f = make(raise_error, &value_error);
  EXPECT_STATUS(call0(f), DVM_VALUE_ERROR, "x must be positive, got -3");
  CHECK(last_error_is("ValueError", "x must be positive, got -3"));

  /* The result is untouched on failure. */
  DVMAny result;
  memset(&result, 0, sizeof result);
  result.type_index = kDVMInt;
  result.v_int64 = 99;
  CHECK(dvm_func_call(f, NULL, 0, &result) == DVM_VALUE_ERROR);
  CHECK(result.type_index == kDVMInt && result.v_int64 == 99);
  dvm_func_free(f);

  /* 2. Every kind maps to its status; unknown kinds keep their name. */
  static const struct {
    const char* kind;
    dvm_status status;
  } kinds[] = {
      {"ValueError", DVM_VALUE_ERROR},
      {"TypeError", DVM_TYPE_ERROR},
      {"IndexError", DVM_INDEX_ERROR},
      {"KeyError", DVM_KEY_ERROR},
      {"RuntimeError", DVM_RUNTIME_ERROR},
      {"WorkerError", DVM_WORKER_ERROR},
      {"SessionClosed", DVM_SESSION_CLOSED},
      {"DeviceUnavailable", DVM_DEVICE_UNAVAILABLE},
      {"TimeoutError", DVM_TIMEOUT},
      {"MyLibError", DVM_OTHER_ERROR},
      {"AttributeError", DVM_OTHER_ERROR},
  };
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    Raise raise = {kinds[i].kind, "message of a raised error"};
    f = make(raise_error, &raise);
    dvm_status status = call0(f);
    CHECK(status == kinds[i].status);
    CHECK(last_error_is(kinds[i].kind, "message of a raised error"));
    if (status != kinds[i].status) fprintf(stderr, "  kind %s gave status %d\n", kinds[i].kind, status);
    dvm_func_free(f);
  }

  /* 3. NULL kind means RuntimeError; NULL message means an empty one. */
  Raise no_kind = {NULL, "no kind given"};
  f = make(raise_error, &no_kind);
  EXPECT_STATUS(call0(f), DVM_RUNTIME_ERROR, "no kind given");
  dvm_func_free(f);
  Raise no_message = {"IndexError", NULL};
  f = make(raise_error, &no_message);
  EXPECT_STATUS(call0(f), DVM_INDEX_ERROR, "");
  CHECK(last_error_is("IndexError", ""));
  dvm_func_free(f);

  /* 4. A callback that fails without raising becomes a RuntimeError that says so. */
  int32_t minus_one = -1, minus_two = -2;
  f = make(fail_silently, &minus_one);
  EXPECT_STATUS(call0(f), DVM_RUNTIME_ERROR, "returned -1 without raising");
  dvm_func_free(f);
  f = make(fail_silently, &minus_two);
  EXPECT_STATUS(call0(f), DVM_RUNTIME_ERROR, "returned -2 without raising");
  dvm_func_free(f);

  /* 5. An error raised by a callback that then returns 0 is not reported, now or later. */
  f = make(raise_then_succeed, NULL);
  memset(&result, 0, sizeof result);
  CHECK_OK(dvm_func_call(f, NULL, 0, &result));
  CHECK(result.type_index == kDVMInt && result.v_int64 == 7);
  dvm_func_free(f);
  f = make(fail_silently, &minus_one);
  EXPECT_STATUS(call0(f), DVM_RUNTIME_ERROR, "returned -1 without raising");
  dvm_func_free(f);

  /* 6. Nested calls: the inner callback's error passes through the outer one unchanged. */
  Raise inner_error = {"IndexError", "inner index 5 out of range"};
  f = make(raise_error, &inner_error);
  CHECK_OK(dvm_func_register_global("test.errors.inner", f, 0));
  dvm_func_free(f);
  f = make(call_inner, (void*)"test.errors.inner");
  EXPECT_STATUS(call0(f), DVM_INDEX_ERROR, "inner index 5 out of range");
  dvm_func_free(f);
  /* ... and so does a library error inside the callback (here: a missing global). */
  f = make(call_inner, (void*)"test.errors.no_such_function");
  EXPECT_STATUS(call0(f), DVM_KEY_ERROR, "test.errors.no_such_function");
  dvm_func_free(f);
  CHECK_OK(dvm_func_remove_global("test.errors.inner"));

  /* 7. Each thread has its own last error. */
  Raise main_error = {"ValueError", "raised on the main thread"};
  Raise other_error = {"KeyError", "raised on the second thread"};
  dvm_func* on_main = make(raise_error, &main_error);
  dvm_func* on_other = make(raise_error, &other_error);
  EXPECT_STATUS(call0(on_main), DVM_VALUE_ERROR, "raised on the main thread");
  thrd_t thread;
  int thread_result = -1;
  CHECK(thrd_create(&thread, fail_on_other_thread, on_other) == thrd_success);
  CHECK(thrd_join(thread, &thread_result) == thrd_success);
  CHECK(thread_result == 0);
  CHECK(last_error_is("ValueError", "raised on the main thread"));
  dvm_func_free(on_main);
  dvm_func_free(on_other);

  return check_finish();
}
