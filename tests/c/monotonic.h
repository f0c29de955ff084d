/*
 * monotonic.h: now_s(), the monotonic clock in seconds, for the tests that time a wait or bound
 * a spin, and sleep_ms(). A test that includes it defines _POSIX_C_SOURCE (200809L) before its
 * first include.
 */
#ifndef DISCOVM_TESTS_MONOTONIC_H
#define DISCOVM_TESTS_MONOTONIC_H

#include <stdint.h>
#include <time.h>

static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Sleeps `ms` milliseconds. */
static inline void sleep_ms(int64_t ms) {
  struct timespec pause = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  nanosleep(&pause, NULL);
}

#endif /* DISCOVM_TESTS_MONOTONIC_H */
