/*
 * cuda_check.h: what the CUDA test programs share (on top of check.h).
 *
 *   require_cuda(program)      the number of CUDA devices; without one, checks that CUDA entry
 *                              points report DeviceUnavailable, prints why and exits 77 (skipped)
 *   bytes_on(device, n)        a new 1-D uint8 tensor of n bytes on device
 *   host_bytes(t)              the first byte of a host tensor
 *   fill(p, n, seed)           writes a pattern that differs per seed and per position
 *   first_difference(a, b, n)  the first index where two buffers differ, or -1
 */
#ifndef DISCOVM_TESTS_CUDA_CHECK_H
#define DISCOVM_TESTS_CUDA_CHECK_H

#include <stdint.h>

#include "check.h"

#define EXIT_SKIPPED 77

static const DLDevice kHost = {kDLCPU, 0};
static const DLDevice kGpu0 = {kDLCUDA, 0};

static inline int32_t require_cuda(const char* program) {
  int32_t count = 0;
  CHECK_OK(dvm_device_count(kDLCUDA, &count));
  if (count > 0) return count;
  int64_t shape[1] = {4};
  dvm_tensor* t = NULL;
  EXPECT_STATUS(dvm_tensor_empty(shape, 1, (DLDataType){kDLUInt, 8, 1}, kGpu0, &t),
                DVM_DEVICE_UNAVAILABLE, "CUDA device 0: ");
  dvm_stream* s = NULL;
  EXPECT_STATUS(dvm_stream_new(kGpu0, &s), DVM_DEVICE_UNAVAILABLE, "CUDA device 0: ");
  dvm_session_options options;
  memset(&options, 0, sizeof options);
  options.num_devices = 1;
  options.devices = &kGpu0;
  dvm_session* session = NULL;
  EXPECT_STATUS(dvm_session_new_threaded(1, 1, &options, &session), DVM_DEVICE_UNAVAILABLE,
                "devices[0]: CUDA device 0: ");
  if (check_finish() != 0) exit(1);
  printf("%s: skipped: no CUDA device here (dvm_device_count(kDLCUDA) is 0: %s)\n", program,
         dvm_last_error_message());
  exit(EXIT_SKIPPED);
}

static inline dvm_tensor* bytes_on(DLDevice device, int64_t n) {
  dvm_tensor* t = NULL;
  CHECK_OK(dvm_tensor_empty(&n, 1, (DLDataType){kDLUInt, 8, 1}, device, &t));
  const DLTensor* dl = dvm_tensor_dl(t);
  CHECK(dl->device.device_type == device.device_type && dl->device.device_id == device.device_id);
  return t;
}

static inline unsigned char* host_bytes(dvm_tensor* t) {
  const DLTensor* dl = dvm_tensor_dl(t);
  return (unsigned char*)dl->data + dl->byte_offset;
}

static inline void fill(unsigned char* p, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1u;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    p[i] = (unsigned char)(x >> 24);
  }
}

static inline long long first_difference(const unsigned char* a, const unsigned char* b,
                                         size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (a[i] != b[i]) return (long long)i;
  }
  return -1;
}

#endif
