/*
 * dlopen_call.c: load libdiscovm.so at run time with dlopen, find its functions with dlsym and
 * call through them. This is how plugins, and hosts that must start without the library, use
 * discovm. The program is not linked with -ldiscovm; it only needs the header for the types.
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
  const char* (*version)(void);
  dvm_status (*func_new)(void* self, DVMSafeCall call, void (*deleter)(void*), dvm_func** out);
  dvm_status (*func_call)(dvm_func* f, const DVMAny* args, int32_t num_args, DVMAny* result);
  void (*func_free)(dvm_func* f);
  void (*error_raise)(const char* kind, const char* message);
  const char* (*last_error_kind)(void);
  const char* (*last_error_message)(void);
} dvm;

/* Looks up `name` and stores its address in the function pointer at `slot`, or stops with
 * dlerror's explanation. (POSIX guarantees that function pointers fit in a void*.) */
static void load(void* library, const char* name, void* slot) {
  void* symbol = dlsym(library, name);
  if (symbol == NULL) {
    fprintf(stderr, "dlsym(%s) failed: %s\n", name, dlerror());
    exit(1);
  }
  memcpy(slot, &symbol, sizeof symbol);
}

/* Prints the error behind a failed status and stops. */
static void check(dvm_status status, const char* what) {
  if (status != DVM_OK) {
    fprintf(stderr, "%s failed (status %d): %s: %s\n", what, (int)status, dvm.last_error_kind(),
            dvm.last_error_message());
    exit(1);
  }
}

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
  load(library, "dvm_version", &dvm.version);
  load(library, "dvm_func_new", &dvm.func_new);
  load(library, "dvm_func_call", &dvm.func_call);
  load(library, "dvm_func_free", &dvm.func_free);
  load(library, "dvm_error_raise", &dvm.error_raise);
  load(library, "dvm_last_error_kind", &dvm.last_error_kind);
  load(library, "dvm_last_error_message", &dvm.last_error_message);
  printf("loaded discovm %s from %s\n", dvm.version(), path);

  /* Step 4: make a function and call it, all through the pointers. */
  dvm_func* f;
  check(dvm.func_new(NULL, square, NULL, &f), "dvm_func_new");
  DVMAny arg, result;
  memset(&arg, 0, sizeof arg);
  memset(&result, 0, sizeof result);
  arg.type_index = kDVMInt;
  arg.v_int64 = 12;
  check(dvm.func_call(f, &arg, 1, &result), "dvm_func_call");
  printf("square(12) = %lld\n", (long long)result.v_int64);

  /* Step 5: errors work the same way: call with no arguments. */
  dvm_status status = dvm.func_call(f, NULL, 0, &result);
  printf("square() failed as expected (status %d): %s: %s\n", (int)status,
         dvm.last_error_kind(), dvm.last_error_message());
  if (status != DVM_TYPE_ERROR) return 1;

  /* Step 6: release the function before closing the library that made it. */
  dvm.func_free(f);
  dlclose(library);
  return 0;
}
