/*
 * example_check.h: the status check the examples in this directory share.
 *
 * Every discovm function that can fail returns a dvm_status. On failure, the error's kind and
 * message are kept for the calling thread; check() prints them and stops the program:
 *
 *   CHECK(dvm_session_sync_all(session));
 *
 * A program of your own can copy these lines, or handle failures its own way.
 */
#ifndef DISCOVM_EXAMPLE_CHECK_H
#define DISCOVM_EXAMPLE_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "discovm.h"

static inline void check(dvm_status status, const char* what) {
  if (status != DVM_OK) {
    fprintf(stderr, "%s failed (status %d): %s: %s\n", what, (int)status, dvm_last_error_kind(),
            dvm_last_error_message());
    exit(1);
  }
}
#define CHECK(call) check((call), #call)

#endif /* DISCOVM_EXAMPLE_CHECK_H */
