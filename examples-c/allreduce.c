/*
 * allreduce.c: set up collectives between a session's workers and sum a tensor across them.
 *
 * Each worker holds its own tensor; `runtime.disco.allreduce` (Disco's name and arguments:
 * send, Shape([kind]), in_group, recv) leaves the element-wise sum of all of them in every
 * worker's recv tensor. With the "cpu" backend the workers are threads of this process and the
 * reduction runs in shared memory: each worker reduces one slice of everyone's input and writes
 * it into everyone's output, with no copy through the controller.
 *
 * Build and run from the repository root:
 *
 *   cargo build
 *   cc -std=c11 -Iinclude examples-c/allreduce.c -Ltarget/debug -ldiscovm \
 *      -Wl,-rpath,"$PWD/target/debug" -o allreduce
 *   ./allreduce
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "discovm.h"
#include "example_check.h" /* CHECK(call): stops with the error if a call fails */

enum { NUM_WORKERS = 4, LENGTH = 8 };

/* Step 1: a worker-side function that fills the worker's tensor: element i on worker w is
 * (w + 1) * i. The tensor arrives as a tensor object (kDVMTensor). */
static int32_t fill(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self;
  (void)result; /* returns None */
  if (num_args != 1 || args[0].type_index != kDVMTensor) {
    dvm_error_raise("TypeError", "example.fill takes one tensor");
    return -1;
  }
  const DLTensor* t = dvm_tensor_dl((const dvm_tensor*)args[0].v_obj);
  float* data = (float*)((char*)t->data + t->byte_offset);
  int32_t worker = dvm_current_worker_id();
  for (int64_t i = 0; i < t->shape[0]; i++) {
    data[i] = (float)((worker + 1) * i);
  }
  return 0;
}

/* A DVMAny that refers to a DRef (each worker sees its own register value). */
static DVMAny dref_value(dvm_dref* ref) {
  DVMAny v;
  memset(&v, 0, sizeof v);
  v.type_index = ((const DVMObject*)ref)->type_index;
  v.v_obj = (DVMObject*)ref;
  return v;
}

static DVMAny bool_value(int b) {
  DVMAny v;
  memset(&v, 0, sizeof v);
  v.type_index = kDVMBool;
  v.v_int64 = b;
  return v;
}

int main(void) {
  dvm_func* f;
  CHECK(dvm_func_new(NULL, fill, NULL, &f));
  CHECK(dvm_func_register_global("example.fill", f, 0));
  dvm_func_free(f);

  /* Step 2: start a session of 4 workers. */
  dvm_session* session;
  CHECK(dvm_session_new_threaded(NUM_WORKERS, 1, NULL, &session));

  /* Step 3: set up the CPU collectives. device_ids may be NULL for "cpu". A collective called
   * before this fails on its worker, and the next wait reports a WorkerError naming both. */
  CHECK(dvm_session_init_ccl(session, "cpu", NULL, 0));

  /* Step 4: a float32 tensor of LENGTH elements on every worker, for input and for output
   * (runtime.disco.empty(shape, dtype, device = None, worker0_only = false)). */
  int64_t shape[1] = {LENGTH};
  DVMAny empty_args[4];
  memset(empty_args, 0, sizeof empty_args);
  CHECK(dvm_shape_new(shape, 1, &empty_args[0]));
  empty_args[1].type_index = kDVMDataType;
  empty_args[1].v_dtype = (DLDataType){kDLFloat, 32, 1};
  empty_args[3] = bool_value(0);
  dvm_dref* empty_fn;
  CHECK(dvm_session_get_global_func(session, "runtime.disco.empty", &empty_fn));
  dvm_dref *send, *recv;
  CHECK(dvm_session_call(session, empty_fn, empty_args, 4, &send));
  CHECK(dvm_session_call(session, empty_fn, empty_args, 4, &recv));
  CHECK(dvm_any_release(&empty_args[0]));

  /* Step 5: fill each worker's input. */
  dvm_dref *fill_fn, *filled;
  CHECK(dvm_session_get_global_func(session, "example.fill", &fill_fn));
  DVMAny send_arg = dref_value(send);
  CHECK(dvm_session_call(session, fill_fn, &send_arg, 1, &filled));

  /* Step 6: allreduce with kind 0 (sum; 1 prod, 2 min, 3 max, 4 avg), across the whole
   * session (in_group = false). Every worker must make the same call. */
  int64_t sum[1] = {0};
  DVMAny allreduce_args[4];
  memset(allreduce_args, 0, sizeof allreduce_args);
  allreduce_args[0] = send_arg;
  CHECK(dvm_shape_new(sum, 1, &allreduce_args[1]));
  allreduce_args[2] = bool_value(0);
  allreduce_args[3] = dref_value(recv);
  dvm_dref *allreduce_fn, *reduced;
  CHECK(dvm_session_get_global_func(session, "runtime.disco.allreduce", &allreduce_fn));
  CHECK(dvm_session_call(session, allreduce_fn, allreduce_args, 4, &reduced));
  CHECK(dvm_any_release(&allreduce_args[1]));

  /* Step 7: read worker 0's result. Element i is (1 + 2 + 3 + 4) * i = 10 * i. */
  float host[LENGTH] = {0};
  DLTensor host_tensor = {host, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  CHECK(dvm_session_copy_from_worker0(session, &host_tensor, recv));
  printf("allreduce(sum) over %d workers:", NUM_WORKERS);
  for (int i = 0; i < LENGTH; i++) {
    printf(" %g", host[i]);
    if (host[i] != 10.0f * (float)i) {
      fprintf(stderr, "\nelement %d is %g, expected %g\n", i, host[i], 10.0f * (float)i);
      return 1;
    }
  }
  printf("\n");

  /* Step 8: clean up: free the DRefs, shut the session down. */
  dvm_dref_free(reduced);
  dvm_dref_free(allreduce_fn);
  dvm_dref_free(filled);
  dvm_dref_free(fill_fn);
  dvm_dref_free(recv);
  dvm_dref_free(send);
  dvm_dref_free(empty_fn);
  CHECK(dvm_session_shutdown(session));
  dvm_session_free(session);
  CHECK(dvm_func_remove_global("example.fill"));
  return 0;
}
