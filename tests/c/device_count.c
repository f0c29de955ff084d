/* Device counts, and what a CUDA device the machine lacks gives. Runs everywhere: without a CUDA
 * driver or GPU the count is 0 and every CUDA entry point says DeviceUnavailable (and why); with
 * GPUs the count is the driver's and a device id past them is refused the same way. */
#include <stdio.h>

#include "check.h"

int main(void) {
  int32_t count = -1;
  CHECK_OK(dvm_device_count(kDLCPU, &count));
  CHECK(count == 1);
  CHECK_OK(dvm_device_count(kDLCUDA, &count));
  CHECK(count >= 0);
  int32_t cuda = count;
  CHECK_OK(dvm_device_count(kDLCUDAHost, &count));
  CHECK(count == (cuda > 0 ? 1 : 0)); /* page-locked host memory, where there is a GPU */
  CHECK_OK(dvm_device_count(kDLVulkan, &count));
  CHECK(count == 0);
  EXPECT_STATUS(dvm_device_count(99, &count), DVM_VALUE_ERROR, "unknown DLPack device type 99");
  EXPECT_STATUS(dvm_device_count(kDLCPU, NULL), DVM_VALUE_ERROR, "`out` is NULL");

  int64_t shape[1] = {4};
  DLDataType f32 = {kDLFloat, 32, 1};
  const DLDevice missing = {kDLCUDA, cuda}; /* the first id the machine does not have */
  char expected[64];
  snprintf(expected, sizeof expected, "CUDA device %d: ", cuda);
  dvm_tensor* t = NULL;
  EXPECT_STATUS(dvm_tensor_empty(shape, 1, f32, missing, &t), DVM_DEVICE_UNAVAILABLE, expected);
  CHECK(t == NULL);
  dvm_stream* s = NULL;
  EXPECT_STATUS(dvm_stream_new(missing, &s), DVM_DEVICE_UNAVAILABLE, expected);
  CHECK(s == NULL);
  const char* message = dvm_last_error_message();
  if (cuda == 0) {
    CHECK(strstr(message, "could not be loaded") != NULL || strstr(message, "found no GPU") != NULL);
  } else {
    CHECK(strstr(message, "out of range") != NULL);
  }
  const DLDevice pinned = {kDLCUDAHost, 0};
  if (cuda == 0) {
    EXPECT_STATUS(dvm_tensor_empty(shape, 1, f32, pinned, &t), DVM_DEVICE_UNAVAILABLE,
                  "page-locked host memory needs a GPU: CUDA device 0: ");
  } else {
    CHECK_OK(dvm_tensor_empty(shape, 1, f32, pinned, &t));
    CHECK(dvm_tensor_dl(t)->device.device_type == kDLCUDAHost);
    dvm_tensor_free(t);
  }
  EXPECT_STATUS(dvm_tensor_empty(shape, 1, f32, (DLDevice){kDLCUDAHost, 1}, &t), DVM_VALUE_ERROR,
                "kDLCUDAHost device id 1 is out of range");
  printf("device_count: %d CUDA device(s); a missing CUDA device reports DeviceUnavailable\n",
         cuda);
  return check_finish();
}
