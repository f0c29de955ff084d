/*
 * dlopen_call.c: load libdiscovm.so at run time with dlopen, find its functions with dlsym and
 * call through them. This is how plugins, and hosts that must start without the library, use
 * discovm. The program is not linked with -ldiscovm; it only needs the header for the types.
 * It goes through every kind of handle: functions and values, the device count, a session
 * with its workers and DRefs, streams and tensors, and the errors.
 *
 * Build and run from the repository root:
 *
 *   cargo build
 *   cc -std=c11 -Iinclude examples-c/dlopen_call.c -ldl -o dlopen_call
 *   ./dlopen_call target/debug/libdiscovm.so
 *
 * The library path comes from the first argument, else the DVM_LIBRARY environment variable,
 * else "libdiscovm.so" (found through the usual search path, e.g. LD_LIBRARY_PATH).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "discovm.h"

/* Step 1: the functions this program uses, as pointers filled in from the library. */
static struct {
  /* the library, errors, devices */
  const char* (*version)(void);
  void (*error_raise)(const char* kind, const char* message);
  const char* (*last_error_kind)(void);
  const char* (*last_error_message)(void);
  dvm_status (*device_count)(int32_t device_type, int32_t* out);
  /* functions and values */
  dvm_status (*func_new)(void* self, DVMSafeCall call, void (*deleter)(void*), dvm_func** out);
  dvm_status (*func_call)(dvm_func* f, const DVMAny* args, int32_t num_args, DVMAny* result);
  dvm_status (*func_register_global)(const char* name, dvm_func* f, int32_t allow_override);
  dvm_status (*func_remove_global)(const char* name);
  void (*func_free)(dvm_func* f);
  dvm_status (*string_new)(const char* data, size_t len, DVMAny* out);
  dvm_status (*any_release)(DVMAny* value);
  /* sessions, workers, DRefs */
  dvm_status (*session_new_threaded)(int32_t num_workers, int32_t num_groups,
                                     const dvm_session_options* opts, dvm_session** out);
  dvm_status (*session_get_global_func)(dvm_session* s, const char* name, dvm_dref** out);
  dvm_status (*session_call)(dvm_session* s, const dvm_dref* func, const DVMAny* args,
                             int32_t num_args, dvm_dref** out);
  dvm_status (*session_live_registers)(dvm_session* s, int32_t worker, int64_t* out);
  dvm_status (*session_shutdown)(dvm_session* s);
  void (*session_free)(dvm_session* s);
  dvm_status (*session_worker)(dvm_session* s, int32_t worker, dvm_worker** out);
  int32_t (*worker_id)(const dvm_worker* w);
  dvm_status (*worker_device)(const dvm_worker* w, DLDevice* out);
  dvm_status (*worker_call)(dvm_worker* w, const dvm_dref* func, const DVMAny* args,
                            int32_t num_args, dvm_dref** out);
  dvm_status (*worker_sync)(dvm_worker* w);
  void (*worker_free)(dvm_worker* w);
  dvm_status (*dref_get)(const dvm_dref* r, int32_t worker, DVMAny* out);
  dvm_status (*dref_set)(const dvm_dref* r, int32_t worker, const DVMAny* value);
  void (*dref_free)(dvm_dref* r);
  /* streams and tensors */
  dvm_status (*stream_new)(DLDevice device, dvm_stream** out);
  dvm_status (*stream_sync)(dvm_stream* s);
  void (*stream_free)(dvm_stream* s);
  dvm_status (*tensor_empty)(const int64_t* shape, int32_t ndim, DLDataType dtype,
                             DLDevice device, dvm_tensor** out);
  dvm_status (*tensor_write)(dvm_tensor* t, const void* src, size_t nbytes);
  dvm_status (*tensor_copy)(dvm_tensor* dst, dvm_tensor* src, dvm_stream* s);
  dvm_status (*tensor_read)(dvm_tensor* t, void* dst, size_t nbytes);
  void (*tensor_free)(dvm_tensor* t);
} dvm;

/* Which symbol fills which pointer. (POSIX guarantees that function pointers fit in a void*.) */
#define SYMBOL(member) {"dvm_" #member, (void*)&dvm.member}
static const struct {
  const char* name;
  void* slot;
} symbols[] = {
    SYMBOL(version),
    SYMBOL(error_raise),
    SYMBOL(last_error_kind),
    SYMBOL(last_error_message),
    SYMBOL(device_count),
    SYMBOL(func_new),
    SYMBOL(func_call),
    SYMBOL(func_register_global),
    SYMBOL(func_remove_global),
    SYMBOL(func_free),
    SYMBOL(string_new),
    SYMBOL(any_release),
    SYMBOL(session_new_threaded),
    SYMBOL(session_get_global_func),
    SYMBOL(session_call),
    SYMBOL(session_live_registers),
    SYMBOL(session_shutdown),
    SYMBOL(session_free),
    SYMBOL(session_worker),
    SYMBOL(worker_id),
    SYMBOL(worker_device),
    SYMBOL(worker_call),
    SYMBOL(worker_sync),
    SYMBOL(worker_free),
    SYMBOL(dref_get),
    SYMBOL(dref_set),
    SYMBOL(dref_free),
    SYMBOL(stream_new),
    SYMBOL(stream_sync),
    SYMBOL(stream_free),
    SYMBOL(tensor_empty),
    SYMBOL(tensor_write),
    SYMBOL(tensor_copy),
    SYMBOL(tensor_read),
    SYMBOL(tensor_free),
};

/* Prints the error behind a failed status and stops. */
static void check(dvm_status status, const char* what) {
  if (status != DVM_OK) {
    fprintf(stderr, "%s failed (status %d): %s: %s\n", what, (int)status, dvm.last_error_kind(),
            dvm.last_error_message());
    exit(1);
  }
}
#define CHECK(call) check((call), #call)

/* A packed function: square(x) for an Int x. */
static int32_t square(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self;
  if (num_args != 1 || args[0].type_index != kDVMInt) {
    dvm.error_raise("TypeError", "square takes one Int");
    return -1;
  }
  result->type_index = kDVMInt;
  result->v_int64 = args[0].v_int64 * args[0].v_int64;
  return 0;
}

/* A DVMAny holding an Int (zeroed first: unused bytes must be 0). */
static DVMAny int_value(int64_t x) {
  DVMAny v;
  memset(&v, 0, sizeof v);
  v.type_index = kDVMInt;
  v.v_int64 = x;
  return v;
}

/* The Int a DRef holds on one worker. */
static int64_t int_on(const dvm_dref* ref, int32_t worker) {
  DVMAny value;
  memset(&value, 0, sizeof value);
  CHECK(dvm.dref_get(ref, worker, &value));
  if (value.type_index != kDVMInt) {
    fprintf(stderr, "worker %d holds type index %d, not an Int\n", (int)worker,
            (int)value.type_index);
    exit(1);
  }
  return value.v_int64;
}

int main(int argc, char** argv) {
  /* Step 2: find and open the library. */
  const char* path = argc > 1 ? argv[1] : getenv("DVM_LIBRARY");
  if (path == NULL) path = "libdiscovm.so";
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (library == NULL) {
    fprintf(stderr, "dlopen(%s) failed: %s\n", path, dlerror());
    return 1;
  }

  /* Step 3: look up each function. */
  for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
    void* symbol = dlsym(library, symbols[i].name);
    if (symbol == NULL) {
      fprintf(stderr, "dlsym(%s) failed: %s\n", symbols[i].name, dlerror());
      return 1;
    }
    memcpy(symbols[i].slot, &symbol, sizeof symbol);
  }
  printf("loaded discovm %s from %s (%zu functions)\n", dvm.version(), path,
         sizeof symbols / sizeof symbols[0]);

  /* Step 4: devices. The CPU is always there; CUDA GPUs only with a driver. */
  int32_t cpus = 0, gpus = 0;
  CHECK(dvm.device_count(kDLCPU, &cpus));
  CHECK(dvm.device_count(kDLCUDA, &gpus));
  printf("devices: %d CPU, %d CUDA\n", (int)cpus, (int)gpus);

  /* Step 5: make a function and call it, all through the pointers. */
  dvm_func* f;
  CHECK(dvm.func_new(NULL, square, NULL, &f));
  DVMAny arg = int_value(12);
  DVMAny result;
  memset(&result, 0, sizeof result);
  CHECK(dvm.func_call(f, &arg, 1, &result));
  printf("square(12) = %lld\n", (long long)result.v_int64);

  /* Step 6: errors work the same way: call with no arguments. */
  dvm_status status = dvm.func_call(f, NULL, 0, &result);
  printf("square() failed as expected (status %d): %s: %s\n", (int)status,
         dvm.last_error_kind(), dvm.last_error_message());
  if (status != DVM_TYPE_ERROR) return 1;

  /* Step 7: a session of two workers runs the function, registered under a global name. */
  CHECK(dvm.func_register_global("example.square", f, 0));
  dvm_session* session;
  CHECK(dvm.session_new_threaded(2, 1, NULL, &session));
  dvm_dref* square_fn;
  CHECK(dvm.session_get_global_func(session, "example.square", &square_fn));
  DVMAny seven = int_value(7);
  dvm_dref* squares;
  CHECK(dvm.session_call(session, square_fn, &seven, 1, &squares));
  printf("square(7) on workers 0 and 1: %lld %lld\n", (long long)int_on(squares, 0),
         (long long)int_on(squares, 1));

  /* Step 8: one worker, and a register set from here. */
  dvm_worker* worker;
  CHECK(dvm.session_worker(session, 1, &worker));
  DLDevice device;
  CHECK(dvm.worker_device(worker, &device));
  DVMAny three = int_value(3);
  dvm_dref* alone;
  CHECK(dvm.worker_call(worker, square_fn, &three, 1, &alone));
  CHECK(dvm.worker_sync(worker));
  printf("square(3) on worker %d alone (device type %d): %lld\n", (int)dvm.worker_id(worker),
         (int)device.device_type, (long long)int_on(alone, 1));
  const char text[] = "set from the controller";
  DVMAny message, back;
  memset(&back, 0, sizeof back);
  CHECK(dvm.string_new(text, strlen(text), &message));
  CHECK(dvm.dref_set(squares, 0, &message));
  CHECK(dvm.dref_get(squares, 0, &back));
  printf("worker 0's register now holds a string object: %s\n",
         back.type_index == kDVMStr ? "yes" : "no");
  CHECK(dvm.any_release(&back));
  CHECK(dvm.any_release(&message));

  /* Step 9: free the DRefs (their registers are freed on every worker) and shut down. */
  dvm.dref_free(alone);
  dvm.dref_free(squares);
  dvm.dref_free(square_fn);
  int64_t live = -1;
  CHECK(dvm.session_live_registers(session, 0, &live));
  printf("registers still in use on worker 0: %lld\n", (long long)live);
  dvm.worker_free(worker);
  CHECK(dvm.session_shutdown(session));
  dvm.session_free(session);

  /* Step 10: a stream copies between two tensors; reads wait for the copy. */
  const int64_t shape[1] = {3};
  const DLDataType f64 = {kDLFloat, 64, 1};
  const DLDevice cpu = {kDLCPU, 0};
  dvm_tensor *source, *target;
  CHECK(dvm.tensor_empty(shape, 1, f64, cpu, &source));
  CHECK(dvm.tensor_empty(shape, 1, f64, cpu, &target));
  const double values[3] = {0.5, 1.5, 2.5};
  CHECK(dvm.tensor_write(source, values, sizeof values));
  dvm_stream* stream;
  CHECK(dvm.stream_new(cpu, &stream));
  CHECK(dvm.tensor_copy(target, source, stream));
  double copied[3] = {0, 0, 0};
  CHECK(dvm.tensor_read(target, copied, sizeof copied));
  CHECK(dvm.stream_sync(stream));
  printf("copied on a stream: %g %g %g\n", copied[0], copied[1], copied[2]);

  /* Step 11: release everything before closing the library that made it. */
  dvm.stream_free(stream);
  dvm.tensor_free(target);
  dvm.tensor_free(source);
  CHECK(dvm.func_remove_global("example.square"));
  dvm.func_free(f);
  dlclose(library);
  return live == 0 && copied[2] == 2.5 ? 0 : 1;
}
