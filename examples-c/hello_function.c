/*
 * hello_function.c: turn a C callback into a packed function, register it under a global name,
 * look it up and call it, and handle the error it raises.
 *
 * Build and run from the repository root (or just `make demo`):
 *
 *   cargo build
 *   cc -std=c11 -Iinclude examples-c/hello_function.c -Ltarget/debug -ldiscovm \
 *      -Wl,-rpath,"$PWD/target/debug" -o hello_function
 *   ./hello_function
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "discovm.h"
#include "example_check.h" /* CHECK(call): stops with the error if a call fails */

/* Step 1: the callback, in the packed calling convention shared with TVM's FFI. It receives
 * borrowed arguments and writes an owned result. It returns 0 on success, or raises an error
 * and returns -1.
 *
 * add(a, b) adds two numbers: Ints give an Int, anything with a Float gives a Float. */
static int32_t add(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self; /* the `self` pointer given to dvm_func_new; unused here */
  if (num_args != 2) {
    dvm_error_raise("TypeError", "add takes 2 arguments");
    return -1;
  }
  double sum = 0;
  int all_ints = 1;
  for (int i = 0; i < 2; i++) {
    if (args[i].type_index == kDVMInt) {
      sum += (double)args[i].v_int64;
    } else if (args[i].type_index == kDVMFloat) {
      sum += args[i].v_float64;
      all_ints = 0;
    } else {
      char message[80];
      snprintf(message, sizeof message, "add: argument %d must be a number (type index %d)", i,
               (int)args[i].type_index);
      dvm_error_raise("TypeError", message);
      return -1;
    }
  }
  if (all_ints) {
    result->type_index = kDVMInt;
    result->v_int64 = args[0].v_int64 + args[1].v_int64;
  } else {
    result->type_index = kDVMFloat;
    result->v_float64 = sum;
  }
  return 0;
}

/* Prints a numeric result. */
static void print_number(const char* call, const DVMAny* value) {
  if (value->type_index == kDVMInt) {
    printf("%s = %lld\n", call, (long long)value->v_int64);
  } else {
    printf("%s = %g\n", call, value->v_float64);
  }
}

int main(void) {
  printf("discovm %s\n", dvm_version());

  /* Step 2: wrap the callback in a function object. We own one reference to it. */
  dvm_func* made;
  CHECK(dvm_func_new(NULL, add, NULL, &made));

  /* Step 3: register it under a global name. The registry keeps its own reference, so we can
   * drop ours. */
  CHECK(dvm_func_register_global("example.add", made, 0));
  dvm_func_free(made);

  /* Step 4: look it up by name, as any other part of the program (or another language) can. */
  dvm_func* add_fn;
  CHECK(dvm_func_get_global("example.add", &add_fn));

  /* Step 5: call it. Arguments are 16-byte DVMAny values; zero them, then set the type index
   * and the payload. The result must start as None (all zero). */
  DVMAny args[2];
  memset(args, 0, sizeof args);
  args[0].type_index = kDVMInt;
  args[0].v_int64 = 2;
  args[1].type_index = kDVMInt;
  args[1].v_int64 = 40;
  DVMAny result;
  memset(&result, 0, sizeof result);
  CHECK(dvm_func_call(add_fn, args, 2, &result));
  print_number("example.add(2, 40)", &result);

  args[0].type_index = kDVMFloat;
  args[0].v_float64 = 1.5;
  memset(&result, 0, sizeof result);
  CHECK(dvm_func_call(add_fn, args, 2, &result));
  print_number("example.add(1.5, 40)", &result);

  /* Step 6: an error raised by the callback comes back with its kind and message. */
  check(dvm_string_new("two", 3, &args[0]), "dvm_string_new");
  memset(&result, 0, sizeof result);
  dvm_status status = dvm_func_call(add_fn, args, 2, &result);
  if (status != DVM_TYPE_ERROR) {
    fprintf(stderr, "expected a TypeError, got status %d\n", (int)status);
    return 1;
  }
  printf("example.add(\"two\", 40) failed as expected: %s: %s\n", dvm_last_error_kind(),
         dvm_last_error_message());

  /* Step 7: clean up. Values that may hold objects (strings, results) are released with
   * dvm_any_release; function handles with dvm_func_free. */
  CHECK(dvm_any_release(&args[0]));
  CHECK(dvm_any_release(&result));
  dvm_func_free(add_fn);
  CHECK(dvm_func_remove_global("example.add"));
  return 0;
}
