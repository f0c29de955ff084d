/* The C side of the bindings benchmark: pipelined calls of a no-op worker function (the
 * built-in runtime.disco.worker_rank on a threaded session of one worker), each result
 * dropped at once, then one sync; and call + sync round trips. Prints the best of ROUNDS
 * rounds, in ns per call: the line calls.go and calls.mjs print too.
 *
 * Usage: calls [PIPELINED_CALLS [ROUND_TRIPS]] */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "discovm.h"

#define ROUNDS 5

static void check(dvm_status status, const char* what) {
  if (status != DVM_OK) {
    fprintf(stderr, "%s: %s: %s\n", what, dvm_last_error_kind(), dvm_last_error_message());
    exit(1);
  }
}

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int main(int argc, char** argv) {
  long pipelined = argc > 1 ? atol(argv[1]) : 200000;
  long round_trips = argc > 2 ? atol(argv[2]) : 20000;
  dvm_session* session;
  check(dvm_session_new_threaded(1, 1, NULL, &session), "dvm_session_new_threaded");
  dvm_dref* fn;
  check(dvm_session_get_global_func(session, "runtime.disco.worker_rank", &fn), "get_global_func");
  double best_pipelined = 1e300, best_round_trip = 1e300;
  for (int round = 0; round < ROUNDS; round++) {
    double start = now_ns();
    for (long i = 0; i < pipelined; i++) {
      dvm_dref* out;
      check(dvm_session_call(session, fn, NULL, 0, &out), "dvm_session_call");
      dvm_dref_free(out);
    }
    check(dvm_session_sync_all(session), "dvm_session_sync_all");
    double mid = now_ns();
    for (long i = 0; i < round_trips; i++) {
      dvm_dref* out;
      check(dvm_session_call(session, fn, NULL, 0, &out), "dvm_session_call");
      dvm_dref_free(out);
      check(dvm_session_sync_all(session), "dvm_session_sync_all");
    }
    double end = now_ns();
    if ((mid - start) / pipelined < best_pipelined) best_pipelined = (mid - start) / pipelined;
    if ((end - mid) / round_trips < best_round_trip) best_round_trip = (end - mid) / round_trips;
  }
  printf("pipelined_ns=%.1f round_trip_ns=%.1f\n", best_pipelined, best_round_trip);
  dvm_dref_free(fn);
  check(dvm_session_shutdown(session), "dvm_session_shutdown");
  dvm_session_free(session);
  return 0;
}
