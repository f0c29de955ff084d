/*
 * A C program built against an installed discovm through pkg-config, as tests/install.rs
 * builds it:
 *
 *   cc main.c $(pkg-config --cflags --libs discovm)             # with libdiscovm.so
 *   cc main.c $(pkg-config --static --cflags --libs discovm)    # with libdiscovm.a, once
 *                                                              # -ldiscovm is -l:libdiscovm.a
 *
 * It asks each worker of a two-worker session for its rank and prints what came back, first
 * with worker threads, then with worker processes running the installed discovm-worker (found
 * next to the installed library, or named by DISCOVM_WORKER for a statically linked program).
 */
#include <stdio.h>
#include <string.h>

#include "discovm.h"

static int failed(const char* what) {
  fprintf(stderr, "%s failed: %s: %s\n", what, dvm_last_error_kind(), dvm_last_error_message());
  return 1;
}

/* Prints the rank each worker of `session` reports, then shuts the session down. */
static int print_ranks(dvm_session* session) {
  dvm_dref* worker_rank;
  if (dvm_session_get_global_func(session, "runtime.disco.worker_rank", &worker_rank) != DVM_OK) {
    return failed("get_global_func");
  }
  dvm_dref* ranks;
  if (dvm_session_call(session, worker_rank, NULL, 0, &ranks) != DVM_OK) return failed("call");
  for (int32_t w = 0; w < 2; w++) {
    DVMAny rank;
    memset(&rank, 0, sizeof rank);
    if (dvm_dref_get(ranks, w, &rank) != DVM_OK) return failed("dref_get");
    if (rank.type_index != kDVMInt) {
      fprintf(stderr, "worker %d returned type index %d\n", (int)w, (int)rank.type_index);
      return 1;
    }
    printf(" %lld", (long long)rank.v_int64);
  }
  dvm_dref_free(ranks);
  dvm_dref_free(worker_rank);
  if (dvm_session_shutdown(session) != DVM_OK) return failed("shutdown");
  dvm_session_free(session);
  return 0;
}

int main(void) {
  dvm_session* session;
  printf("discovm %s from C: worker ranks", dvm_version());
  if (dvm_session_new_threaded(2, 1, NULL, &session) != DVM_OK) return failed("session");
  if (print_ranks(session) != 0) return 1;
  printf(", process ranks");
  if (dvm_session_new_process(2, 1, NULL, &session) != DVM_OK) return failed("process session");
  if (print_ranks(session) != 0) return 1;
  printf("\n");
  return 0;
}
