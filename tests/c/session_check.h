/*
 * session_check.h: helpers shared by the session tests (tests/c/session_*.c), on top of check.h
 * and values.h.
 *
 *   any_dref(r)                      a DRef as an argument (its type index read from its header)
 *   register_c(name, call)           registers a C callback as a global function
 *   fail_with_last_error()           raises the library's last error again as a callback's
 *                                    own; returns -1, the callback's result
 *   call_global_here(name, args, n)  calls global function `name` here (in a callback on a
 *                                    worker); 0, or -1 with the error raised as the callback's
 *   fill_one_plus_worker_id          a callback: every element of its float32 tensor (at
 *                                    most 4096) becomes 1 + the calling worker's id
 *   new_session(n)                   a session of n workers in one group, default options
 *   session_func(s, name)            dvm_session_get_global_func, which must succeed
 *   broadcast(s, f, args, n)         dvm_session_call, which must succeed
 *   call_builtin(s, name, args, n)   looks up a global function and calls it on every worker
 *   empty_tensor(s, dims, ndim, dtype, worker0_only)
 *                                    runtime.disco.empty: a zeroed tensor on each worker, or
 *                                    on worker 0 only
 *   int_on(r, worker)                the Int a DRef holds on a worker (records a failure and
 *                                    returns INT64_MIN if it holds anything else)
 *   expect_no_live_registers(s)      every worker's register file is empty
 *   end_session(s)                   expect_no_live_registers, then a shutdown that must
 *                                    succeed, then dvm_session_free
 */
#ifndef DISCOVM_TESTS_SESSION_CHECK_H
#define DISCOVM_TESTS_SESSION_CHECK_H

#include <stdint.h>

#include "values.h"

/* A DRef is an object, so it travels as one; its type index is assigned at run time. */
static inline DVMAny any_dref(const dvm_dref* r) { return any_object((void*)r); }

/* A value that must stay as it is when a call fails. */
static inline DVMAny any_sentinel(void) { return any_int(0x5e5e5e5e); }

static inline int is_sentinel(const DVMAny* v) {
  return v->type_index == kDVMInt && v->v_int64 == 0x5e5e5e5e;
}

static inline void register_c(const char* name, DVMSafeCall call) {
  dvm_func* f;
  CHECK_OK(dvm_func_new(NULL, call, NULL, &f));
  CHECK_OK(dvm_func_register_global(name, f, 1));
  dvm_func_free(f); /* the registry keeps its own reference */
}

/* Its text is copied first: raising replaces the last error. */
static inline int32_t fail_with_last_error(void) {
  char kind[64], message[512];
  snprintf(kind, sizeof kind, "%s", dvm_last_error_kind());
  snprintf(message, sizeof message, "%s", dvm_last_error_message());
  dvm_error_raise(kind, message);
  return -1;
}

static inline int32_t call_global_here(const char* name, DVMAny* args, int32_t n) {
  dvm_func* f = NULL;
  if (dvm_func_get_global(name, &f) != DVM_OK) return fail_with_last_error();
  DVMAny none = any_none();
  dvm_status status = dvm_func_call(f, args, n, &none);
  dvm_func_free(f);
  return status == DVM_OK ? 0 : fail_with_last_error();
}

static inline int32_t fill_one_plus_worker_id(void* self, const DVMAny* args, int32_t n,
                                              DVMAny* result) {
  (void)self, (void)n, (void)result;
  dvm_tensor* t = (dvm_tensor*)args[0].v_obj;
  const DLTensor* dl = dvm_tensor_dl(t);
  int64_t count = 1;
  for (int32_t d = 0; d < dl->ndim; d++) count *= dl->shape[d];
  float values[4096];
  if (count > 4096) {
    dvm_error_raise("ValueError", "fill_one_plus_worker_id fills at most 4096 elements");
    return -1;
  }
  for (int64_t i = 0; i < count; i++) values[i] = (float)(1 + dvm_current_worker_id());
  dvm_status status = dvm_tensor_write(t, values, (size_t)count * sizeof(float));
  return status == DVM_OK ? 0 : fail_with_last_error();
}

static inline dvm_session* new_session(int32_t num_workers) {
  dvm_session* s;
  CHECK_OK(dvm_session_new_threaded(num_workers, 1, NULL, &s));
  return s;
}

static inline dvm_dref* session_func(dvm_session* s, const char* name) {
  dvm_dref* f;
  CHECK_OK(dvm_session_get_global_func(s, name, &f));
  return f;
}

static inline dvm_dref* broadcast(dvm_session* s, const dvm_dref* f, const DVMAny* args,
                                  int32_t num_args) {
  dvm_dref* out;
  CHECK_OK(dvm_session_call(s, f, args, num_args, &out));
  return out;
}

static inline dvm_dref* call_builtin(dvm_session* s, const char* name, const DVMAny* args,
                                     int32_t num_args) {
  dvm_dref* f = session_func(s, name);
  dvm_dref* out = broadcast(s, f, args, num_args);
  dvm_dref_free(f); /* the call keeps what it needs */
  return out;
}

static inline dvm_dref* empty_tensor(dvm_session* s, const int64_t* dims, int32_t ndim,
                                     DLDataType dtype, int worker0_only) {
  DVMAny args[4] = {any_none(), any_dtype(dtype), any_none(), any_bool(worker0_only)};
  CHECK_OK(dvm_shape_new(dims, ndim, &args[0]));
  dvm_dref* out = call_builtin(s, "runtime.disco.empty", args, 4);
  CHECK_OK(dvm_any_release(&args[0]));
  return out;
}

static inline int64_t check_int_on(const dvm_dref* r, int32_t worker, const char* file,
                                   int line) {
  DVMAny v = any_none();
  check_ok(dvm_dref_get(r, worker, &v), file, line, "dvm_dref_get");
  if (v.type_index != kDVMInt) {
    fprintf(stderr, "%s:%d: FAILED: worker %d holds type index %d, expected an Int\n", file,
            line, (int)worker, (int)v.type_index);
    check_failures++;
    dvm_any_release(&v);
    return INT64_MIN;
  }
  return v.v_int64;
}
#define int_on(r, worker) check_int_on((r), (worker), __FILE__, __LINE__)

static inline void check_no_live_registers(dvm_session* s, const char* file, int line) {
  for (int32_t w = 0; w < dvm_session_num_workers(s); w++) {
    int64_t live = -1;
    check_ok(dvm_session_live_registers(s, w, &live), file, line, "dvm_session_live_registers");
    check_count++;
    if (live != 0) {
      fprintf(stderr, "%s:%d: FAILED: worker %d still holds %lld registers\n", file, line,
              (int)w, (long long)live);
      check_failures++;
    }
  }
}
#define expect_no_live_registers(s) check_no_live_registers((s), __FILE__, __LINE__)

static inline void check_end_session(dvm_session* s, const char* file, int line) {
  check_no_live_registers(s, file, line);
  check_ok(dvm_session_shutdown(s), file, line, "dvm_session_shutdown");
  dvm_session_free(s);
}
#define end_session(s) check_end_session((s), __FILE__, __LINE__)

#endif /* DISCOVM_TESTS_SESSION_CHECK_H */
