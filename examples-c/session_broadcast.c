/*
 * session_broadcast.c: start a session of worker threads, broadcast a C function to all of
 * them, read each worker's result, and copy a tensor to worker 0 and back.
 *
 * A session is a pool of worker threads driven by one controller (this program). Each call is
 * broadcast to every worker, which runs it on its own thread and keeps the result in its own
 * register file; the controller holds a DRef (remote reference) naming that register on every
 * worker. This is how one program drives one worker per GPU in tensor-parallel inference.
 *
 * Build and run from the repository root (or just `make demo`):
 *
 *   cargo build
 *   cc -std=c11 -Iinclude examples-c/session_broadcast.c -Ltarget/debug -ldiscovm \
 *      -Wl,-rpath,"$PWD/target/debug" -o session_broadcast
 *   ./session_broadcast
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "discovm.h"
#include "example_check.h" /* CHECK(call): stops with the error if a call fails */

enum { NUM_WORKERS = 4 };

/* Step 1: the function the workers run, in the packed calling convention. It runs on a worker
 * thread, and asks which worker it is with dvm_current_worker_id().
 *
 * scale(x) = x * (worker id + 1). */
static int32_t scale(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self;
  if (num_args != 1 || args[0].type_index != kDVMInt) {
    dvm_error_raise("TypeError", "example.scale takes one Int");
    return -1;
  }
  int32_t worker = dvm_current_worker_id(); /* -1 if called off a worker thread */
  if (worker < 0) {
    dvm_error_raise("RuntimeError", "example.scale must run on a session worker");
    return -1;
  }
  result->type_index = kDVMInt;
  result->v_int64 = args[0].v_int64 * (worker + 1);
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

/* Reads the Int a DRef holds on one worker. */
static int64_t int_on_worker(const dvm_dref* ref, int32_t worker) {
  DVMAny value;
  memset(&value, 0, sizeof value);
  CHECK(dvm_dref_get(ref, worker, &value)); /* waits for the calls sent before */
  if (value.type_index != kDVMInt) {
    fprintf(stderr, "worker %d holds type index %d, not an Int\n", (int)worker,
            (int)value.type_index);
    exit(1);
  }
  return value.v_int64;
}

int main(void) {
  /* Step 2: register the callback under a global name, so workers can find it. */
  dvm_func* f;
  CHECK(dvm_func_new(NULL, scale, NULL, &f));
  CHECK(dvm_func_register_global("example.scale", f, 0));
  dvm_func_free(f); /* the registry keeps its own reference */

  /* Step 3: start a session of 4 worker threads, in one group, with default options (NULL). */
  dvm_session* session;
  CHECK(dvm_session_new_threaded(NUM_WORKERS, 1, NULL, &session));
  printf("started a session of %d workers\n", (int)dvm_session_num_workers(session));

  /* Step 4: look the function up for the session. The name is resolved now, so a typo fails
   * here with a KeyError; the DRef names the function on every worker. */
  dvm_dref* scale_fn;
  CHECK(dvm_session_get_global_func(session, "example.scale", &scale_fn));

  /* Step 5: broadcast a call. It returns at once with a DRef to the results; each worker runs
   * the call on its own thread. */
  DVMAny ten = int_value(10);
  dvm_dref* results;
  CHECK(dvm_session_call(session, scale_fn, &ten, 1, &results));

  /* Step 6: read each worker's result. dvm_dref_get waits for that worker to get there. */
  for (int32_t w = 0; w < NUM_WORKERS; w++) {
    printf("example.scale(10) on worker %d = %lld\n", (int)w,
           (long long)int_on_worker(results, w));
  }

  /* Step 7: a DRef passed as an argument becomes each worker's own value of that register,
   * without leaving the workers: worker w computes 10 * (w + 1) * (w + 1). */
  DVMAny previous;
  memset(&previous, 0, sizeof previous);
  previous.type_index = ((const DVMObject*)results)->type_index; /* a DRef is an object */
  previous.v_obj = (DVMObject*)results;
  dvm_dref* squared;
  CHECK(dvm_session_call(session, scale_fn, &previous, 1, &squared));
  printf("example.scale(previous result) on each worker:");
  for (int32_t w = 0; w < NUM_WORKERS; w++) {
    printf(" %lld", (long long)int_on_worker(squared, w));
  }
  printf("\n");

  /* Step 8: allocate a 2x3 float32 tensor on worker 0 with the built-in runtime.disco.empty
   * (shape, dtype, device = None for the worker's own, worker0_only = true). */
  int64_t shape[2] = {2, 3};
  DLDataType float32 = {kDLFloat, 32, 1};
  DVMAny empty_args[4];
  memset(empty_args, 0, sizeof empty_args); /* all None */
  CHECK(dvm_shape_new(shape, 2, &empty_args[0]));
  empty_args[1].type_index = kDVMDataType;
  empty_args[1].v_dtype = float32;
  empty_args[3].type_index = kDVMBool;
  empty_args[3].v_int64 = 1;
  dvm_dref* empty_fn;
  CHECK(dvm_session_get_global_func(session, "runtime.disco.empty", &empty_fn));
  dvm_dref* remote;
  CHECK(dvm_session_call(session, empty_fn, empty_args, 4, &remote));
  CHECK(dvm_any_release(&empty_args[0])); /* the shape object: the call made its own copy */

  /* Step 9: copy a host tensor to worker 0 and back. Host tensors are plain DLTensors on the
   * CPU, compact, with the remote tensor's shape and dtype. dvm_session_copy_from_worker0
   * returns with the host buffer filled (Disco's copy is asynchronous). */
  float sent[6] = {1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f};
  float received[6] = {0};
  DLDevice cpu = {kDLCPU, 0};
  DLTensor host_sent = {sent, cpu, 2, float32, shape, NULL, 0};
  DLTensor host_received = {received, cpu, 2, float32, shape, NULL, 0};
  CHECK(dvm_session_copy_to_worker0(session, &host_sent, remote));
  CHECK(dvm_session_copy_from_worker0(session, &host_received, remote));
  printf("copied to worker 0 and back: [[%g, %g, %g], [%g, %g, %g]]\n", received[0],
         received[1], received[2], received[3], received[4], received[5]);

  /* Step 10: clean up. Freeing a DRef frees its register on every worker (after the calls
   * sent before); shutdown stops the workers once their work is done and joins them. */
  dvm_dref_free(remote);
  dvm_dref_free(empty_fn);
  dvm_dref_free(squared);
  dvm_dref_free(results);
  dvm_dref_free(scale_fn);
  CHECK(dvm_session_shutdown(session));
  dvm_session_free(session);
  CHECK(dvm_func_remove_global("example.scale"));
  printf("session shut down\n");
  return 0;
}
