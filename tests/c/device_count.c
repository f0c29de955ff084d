/* Device counts, and what a CUDA device gives on a machine without one. Runs everywhere: without
 * a CUDA driver or GPU the count is 0 and every CUDA entry point says DeviceUnavailable; with a
 * GPU (where the CUDA backend is not there yet) the count is the driver's. */
#include <stdio.h>

#include "check.h"

int main(void) {
  int32_t count = -1;
  CHECK_OK(dvm_device_count(kDLCPU, &count));
  CHECK(count == 1);
  CHECK_OK(dvm_device_count(kDLCUDA, &count));
  CHECK(count >= 0);
  int32_t cuda = count;
  CHECK_OK(dvm_device_count(kDLVulkan, &count));
  CHECK(count == 0);
  EXPECT_STATUS(dvm_device_count(99, &count), DVM_VALUE_ERROR, "unknown DLPack device type 99");
  EXPECT_STATUS(dvm_device_count(kDLCPU, NULL), DVM_VALUE_ERROR, "`out` is NULL");

  int64_t shape[1] = {4};
  DLDataType f32 = {kDLFloat, 32, 1};
  dvm_tensor* t = NULL;
  EXPECT_STATUS(dvm_tensor_empty(shape, 1, f32, (DLDevice){kDLCUDA, 0}, &t),
                DVM_DEVICE_UNAVAILABLE, "CUDA device 0: ");
  CHECK(t == NULL);
  dvm_stream* s = NULL;
  EXPECT_STATUS(dvm_stream_new((DLDevice){kDLCUDA, 0}, &s), DVM_DEVICE_UNAVAILABLE,
                "CUDA device 0: ");
  if (cuda == 0) {
    const char* message = dvm_last_error_message();
    CHECK(strstr(message, "could not be loaded") != NULL || strstr(message, "found no GPU") != NULL);
  }
  printf("device_count: %d CUDA device(s); CUDA entry points report DeviceUnavailable\n", cuda);
  return check_finish();
}
