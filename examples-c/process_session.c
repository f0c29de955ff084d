/*
 * process_session.c: a session whose workers are processes. Each worker runs a worker program
 * (process_worker.c here; the installed discovm-worker by default) in a process of its own, so
 * a worker that crashes takes down only itself: the controller gets an error naming the worker,
 * its process id and the cause, and shuts the rest down cleanly.
 *
 * Build both programs, then give the controller the worker program's path:
 *
 *   cc -std=c11 -Iinclude examples-c/process_worker.c -Ltarget/debug -ldiscovm \
 *      -Wl,-rpath,"$PWD/target/debug" -o process_worker
 *   cc -std=c11 -Iinclude examples-c/process_session.c -Ltarget/debug -ldiscovm \
 *      -Wl,-rpath,"$PWD/target/debug" -o process_session
 *   ./process_session ./process_worker
 */
#include <stdio.h>
#include <string.h>

#include "discovm.h"
#include "example_check.h" /* CHECK(call): stops with the error if a call fails */

enum { NUM_WORKERS = 2 };

static DVMAny int_value(int64_t x) {
  DVMAny v;
  memset(&v, 0, sizeof v);
  v.type_index = kDVMInt;
  v.v_int64 = x;
  return v;
}

static int64_t int_on(const dvm_dref* ref, int32_t worker) {
  DVMAny v;
  CHECK(dvm_dref_get(ref, worker, &v)); /* an Int: nothing to release */
  return v.v_int64;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s WORKER_PROGRAM\n", argv[0]);
    return 2;
  }

  /* Step 1: start the workers, each a process running the worker program. */
  dvm_session_options options;
  memset(&options, 0, sizeof options); /* zero: the defaults */
  options.worker_program = argv[1];
  dvm_session* session;
  CHECK(dvm_session_new_process(NUM_WORKERS, 1, &options, &session));
  printf("started a session of %d worker processes\n", dvm_session_num_workers(session));

  /* Step 2: functions are looked up in the workers' own registries (the worker program
   * registered them), and called as in any session. */
  dvm_dref* square;
  CHECK(dvm_session_get_global_func(session, "example.square", &square));
  DVMAny seven = int_value(7);
  dvm_dref* squares;
  CHECK(dvm_session_call(session, square, &seven, 1, &squares));
  for (int32_t w = 0; w < NUM_WORKERS; w++) {
    printf("example.square(7) on worker %d = %lld\n", (int)w, (long long)int_on(squares, w));
  }

  /* Step 3: a worker that crashes fails the next wait with its pid and cause. */
  dvm_dref* crash;
  CHECK(dvm_session_get_global_func(session, "example.crash", &crash));
  dvm_worker* worker1;
  CHECK(dvm_session_worker(session, 1, &worker1));
  dvm_dref* crashed;
  CHECK(dvm_worker_call(worker1, crash, NULL, 0, &crashed));
  dvm_status status = dvm_session_sync_worker(session, 1);
  printf("worker 1 crashed: %s\n", status == DVM_WORKER_ERROR ? "yes" : "no");
  if (status == DVM_WORKER_ERROR) {
    /* "worker 1 (pid N) killed by signal 11 (SIGSEGV)"; the pid differs from run to run. */
    printf("the error names the signal: %s\n",
           strstr(dvm_last_error_message(), "killed by signal 11 (SIGSEGV)") ? "yes" : "no");
  }

  /* Step 4: the session is broken now (every call fails with that cause); shutting it down
   * stops and reaps the other workers. */
  dvm_dref_free(crashed);
  dvm_worker_free(worker1);
  dvm_dref_free(crash);
  dvm_dref_free(squares);
  dvm_dref_free(square);
  CHECK(dvm_session_shutdown(session));
  dvm_session_free(session);
  printf("session shut down\n");
  return status == DVM_WORKER_ERROR ? 0 : 1;
}
