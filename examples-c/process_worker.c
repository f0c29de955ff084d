/*
 * process_worker.c: a worker program of your own, for process sessions (see
 * process_session.c, which starts it). It registers its functions, then hands the process to
 * dvm_worker_main, which serves the controller that started it until the session shuts down.
 *
 * Build it against the library like any program:
 *
 *   cc -std=c11 -Iinclude examples-c/process_worker.c -Ltarget/debug -ldiscovm \
 *      -Wl,-rpath,"$PWD/target/debug" -o process_worker
 */
#define _DEFAULT_SOURCE /* getpid */

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "discovm.h"

/* Step 1: the functions the workers run, in the packed calling convention. */

/* example.square(x) = x * x, for an Int. */
static int32_t square(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self;
  if (num_args != 1 || args[0].type_index != kDVMInt) {
    dvm_error_raise("TypeError", "example.square takes one Int");
    return -1;
  }
  memset(result, 0, sizeof *result);
  result->type_index = kDVMInt;
  result->v_int64 = args[0].v_int64 * args[0].v_int64;
  return 0;
}

/* example.pid(): the worker's process id. */
static int32_t pid(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)args, (void)num_args;
  memset(result, 0, sizeof *result);
  result->type_index = kDVMInt;
  result->v_int64 = getpid();
  return 0;
}

/* example.crash(): ends this process with a segmentation fault, as a bug in a worker
 * function would. The controller and the other workers go on. */
static int32_t crash(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)args, (void)num_args, (void)result;
  raise(SIGSEGV);
  return 0;
}

static void define(const char* name, DVMSafeCall call) {
  dvm_func* f;
  if (dvm_func_new(NULL, call, NULL, &f) != DVM_OK ||
      dvm_func_register_global(name, f, 0) != DVM_OK) {
    _exit(1);
  }
  dvm_func_free(f); /* the registry keeps its own reference */
}

int main(int argc, char** argv) {
  /* Step 2: register the functions, then serve the controller. */
  define("example.square", square);
  define("example.pid", pid);
  define("example.crash", crash);
  return dvm_worker_main(argc, argv);
}
