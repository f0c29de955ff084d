/*
 * check.h: tiny assertion helpers shared by the C and C++ tests in this directory.
 *
 *   CHECK(cond)                       records a failure (and goes on) unless cond holds
 *   CHECK_OK(expr)                    expr must return DVM_OK; otherwise prints the last error
 *                                     and exits, since later steps depend on it
 *   EXPECT_STATUS(expr, status, text) expr must fail with `status`, the matching error kind,
 *                                     and a message containing `text`
 *   EXPECT_ERROR(kind, text)          the last error has this kind and a message containing text
 *   return check_finish();            at the end of main: prints a summary, 0 if all passed
 */
#ifndef DISCOVM_TESTS_CHECK_H
#define DISCOVM_TESTS_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "discovm.h"

static int check_count;
static int check_failures;

/* The error kind each status stands for (DVM_OTHER_ERROR: any other name). */
static inline const char* check_kind_of(dvm_status status) {
  switch (status) {
    case DVM_VALUE_ERROR: return "ValueError";
    case DVM_TYPE_ERROR: return "TypeError";
    case DVM_INDEX_ERROR: return "IndexError";
    case DVM_KEY_ERROR: return "KeyError";
    case DVM_RUNTIME_ERROR: return "RuntimeError";
    case DVM_WORKER_ERROR: return "WorkerError";
    case DVM_SESSION_CLOSED: return "SessionClosed";
    case DVM_DEVICE_UNAVAILABLE: return "DeviceUnavailable";
    case DVM_TIMEOUT: return "TimeoutError";
    case DVM_PANIC: return "Panic";
    default: return NULL;
  }
}

static inline const char* check_or_null(const char* text) { return text ? text : "(null)"; }

static inline void check_fail(const char* file, int line, const char* what) {
  fprintf(stderr, "%s:%d: FAILED: %s\n", file, line, what);
  check_failures++;
}

static inline void check_cond(int ok, const char* file, int line, const char* what) {
  check_count++;
  if (!ok) check_fail(file, line, what);
}

static inline void check_ok(dvm_status status, const char* file, int line, const char* what) {
  check_count++;
  if (status != DVM_OK) {
    fprintf(stderr, "%s:%d: FAILED: %s returned %" PRId32 ": %s: %s\n", file, line, what, status,
            check_or_null(dvm_last_error_kind()), check_or_null(dvm_last_error_message()));
    exit(1);
  }
}

static inline void check_error(const char* kind, const char* text, const char* file, int line,
                               const char* what) {
  const char* actual_kind = dvm_last_error_kind();
  const char* message = dvm_last_error_message();
  check_count++;
  if (kind != NULL && (actual_kind == NULL || strcmp(actual_kind, kind) != 0)) {
    fprintf(stderr, "%s:%d: FAILED: %s: error kind is %s, expected %s (message: %s)\n", file,
            line, what, check_or_null(actual_kind), kind, check_or_null(message));
    check_failures++;
  } else if (message == NULL || strstr(message, text) == NULL) {
    fprintf(stderr, "%s:%d: FAILED: %s: message \"%s\" does not contain \"%s\"\n", file, line,
            what, check_or_null(message), text);
    check_failures++;
  }
}

static inline void check_status(dvm_status actual, dvm_status expected, const char* text,
                                const char* file, int line, const char* what) {
  check_count++;
  if (actual != expected) {
    fprintf(stderr,
            "%s:%d: FAILED: %s returned %" PRId32 ", expected %" PRId32 " (last error: %s: %s)\n",
            file, line, what, actual, expected, check_or_null(dvm_last_error_kind()),
            check_or_null(dvm_last_error_message()));
    check_failures++;
    return;
  }
  if (expected != DVM_OK) check_error(check_kind_of(expected), text, file, line, what);
}

/* Prints the summary; use as `return check_finish();` at the end of main. */
static inline int check_finish(void) {
  if (check_failures > 0) {
    fprintf(stderr, "%d of %d checks FAILED\n", check_failures, check_count);
    return 1;
  }
  printf("all %d checks passed\n", check_count);
  return 0;
}

#define CHECK(cond) check_cond((cond) ? 1 : 0, __FILE__, __LINE__, #cond)
#define CHECK_OK(expr) check_ok((expr), __FILE__, __LINE__, #expr)
#define EXPECT_STATUS(expr, status, text) \
  check_status((expr), (status), (text), __FILE__, __LINE__, #expr)
#define EXPECT_ERROR(kind, text) check_error((kind), (text), __FILE__, __LINE__, "last error")

#endif /* DISCOVM_TESTS_CHECK_H */
