/*
 * process_worker.c: the worker program of the process-session tests, a user's worker program
 * as the README describes one: it registers its functions, then returns dvm_worker_main.
 *
 *   proc.pid()            this process's id
 *   proc.add(a, b)        a + b, for Ints
 *   proc.echo(x)          x itself (a new reference to an object)
 *   proc.fail(message)    raises a ValueError with the message
 *   proc.sleep_ms(ms)     sleeps, then returns None
 *   proc.exit(status)     ends the process with that status
 *   proc.segv()           ends it by SIGSEGV
 *   proc.abort()          ends it by abort()
 *   proc.scale(t, k)      multiplies the float32 tensor t by k, in place
 *   proc.heap_empty(n)    a zeroed float32 tensor of n elements in this process's own memory
 *                         (outside the session's arena, unlike runtime.disco.empty's)
 */
#define _DEFAULT_SOURCE

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "discovm.h"

static void set_int(DVMAny* result, int64_t value) {
  memset(result, 0, sizeof *result);
  result->type_index = kDVMInt;
  result->v_int64 = value;
}

static int32_t pid(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)args, (void)num_args;
  set_int(result, getpid());
  return 0;
}

static int32_t add(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self;
  if (num_args != 2 || args[0].type_index != kDVMInt || args[1].type_index != kDVMInt) {
    dvm_error_raise("TypeError", "proc.add takes two Ints");
    return -1;
  }
  set_int(result, args[0].v_int64 + args[1].v_int64);
  return 0;
}

static int32_t echo(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self;
  if (num_args != 1) {
    dvm_error_raise("TypeError", "proc.echo takes one value");
    return -1;
  }
  *result = args[0];
  if (result->type_index >= kDVMStaticObjectBegin && dvm_object_inc_ref(result->v_obj) != DVM_OK) {
    return -1;
  }
  return 0;
}

static int32_t fail(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)args, (void)num_args, (void)result;
  dvm_error_raise("ValueError", "proc.fail was asked to fail");
  return -1;
}

static int32_t sleep_ms(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)num_args, (void)result;
  usleep((useconds_t)(args[0].v_int64 * 1000));
  return 0;
}

static int32_t exit_with(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)num_args, (void)result;
  exit((int)args[0].v_int64);
}

static int32_t segv(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)args, (void)num_args, (void)result;
  raise(SIGSEGV);
  return 0;
}

static int32_t abort_now(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)args, (void)num_args, (void)result;
  abort();
}

static int32_t scale(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)result;
  if (num_args != 2 || args[0].type_index != kDVMTensor || args[1].type_index != kDVMFloat) {
    dvm_error_raise("TypeError", "proc.scale takes a tensor and a Float");
    return -1;
  }
  const DLTensor* t = (const DLTensor*)((const DVMObject*)args[0].v_obj + 1);
  int64_t n = 1;
  for (int32_t d = 0; d < t->ndim; d++) n *= t->shape[d];
  float* data = (float*)((char*)t->data + t->byte_offset);
  for (int64_t i = 0; i < n; i++) data[i] *= (float)args[1].v_float64;
  return 0;
}

static int32_t heap_empty(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self;
  if (num_args != 1 || args[0].type_index != kDVMInt) {
    dvm_error_raise("TypeError", "proc.heap_empty takes an Int");
    return -1;
  }
  DLDataType f32 = {kDLFloat, 32, 1};
  DLDevice cpu = {kDLCPU, 0};
  dvm_tensor* t;
  if (dvm_tensor_empty(&args[0].v_int64, 1, f32, cpu, &t) != DVM_OK) return -1;
  result->type_index = kDVMTensor;
  result->v_obj = (DVMObject*)t;
  return 0;
}

static void define(const char* name, DVMSafeCall call) {
  dvm_func* f;
  if (dvm_func_new(NULL, call, NULL, &f) != DVM_OK ||
      dvm_func_register_global(name, f, 0) != DVM_OK) {
    abort();
  }
  dvm_func_free(f);
}

int main(int argc, char** argv) {
  define("proc.pid", pid);
  define("proc.add", add);
  define("proc.echo", echo);
  define("proc.fail", fail);
  define("proc.sleep_ms", sleep_ms);
  define("proc.exit", exit_with);
  define("proc.segv", segv);
  define("proc.abort", abort_now);
  define("proc.scale", scale);
  define("proc.heap_empty", heap_empty);
  return dvm_worker_main(argc, argv);
}
