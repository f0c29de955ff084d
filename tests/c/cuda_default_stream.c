/* The library's CUDA work follows the device's legacy default stream, where kernels go unless
 * told otherwise (a worker's functions launch theirs there, a DLPack consumer such as PyTorch
 * queues its work there by default), with no host wait in between:
 *   1. bytes a raw copy on the default stream writes into a GPU tensor are what a library copy
 *      queued afterwards reads;
 *   2. a GPU tensor freed right after a raw copy on the default stream read it is freed after
 *      that copy (its memory may go to the next allocation only then);
 *   3. likewise a page-locked (kDLCUDAHost) tensor that a raw copy on the default stream reads.
 * The default-stream side calls the driver directly (libcuda.so.1, loaded here: no CUDA toolkit
 * needed to build this). Exits 77 without a GPU. */
#include <stdio.h>

#include "cuda_check.h"
#include "cuda_driver.h"

#define ROUNDS 10
#define N (1024 * 1024)

/* CU_STREAM_LEGACY: the legacy default stream of the current context. */
#define LEGACY_STREAM ((void*)1)

static struct {
  CUresult (*retain)(void**, int);
  CUresult (*release)(int);
  CUresult (*set_current)(void*);
  CUresult (*htod)(CUdeviceptr, const void*, size_t, void*);
  CUresult (*dtoh)(void*, CUdeviceptr, size_t, void*);
  CUresult (*stream_synchronize)(void*);
} cu;

/* Loads the driver calls this test makes itself; exits if one is missing. */
static void load_driver(void) {
  driver_function(&cu.retain, "cuDevicePrimaryCtxRetain");
  driver_function(&cu.release, "cuDevicePrimaryCtxRelease_v2");
  driver_function(&cu.set_current, "cuCtxSetCurrent");
  driver_function(&cu.htod, "cuMemcpyHtoDAsync_v2");
  driver_function(&cu.dtoh, "cuMemcpyDtoHAsync_v2");
  driver_function(&cu.stream_synchronize, "cuStreamSynchronize");
}

int main(void) {
  require_cuda("cuda_default_stream");
  load_driver();

  /* The library made the driver ready; the raw calls run in device 0's primary context. */
  void* ctx = NULL;
  CHECK(cu.retain(&ctx, 0) == 0);
  CHECK(cu.set_current(ctx) == 0);

  dvm_stream* s = NULL;
  CHECK_OK(dvm_stream_new(kGpu0, &s));
  const DLDevice pinned = {kDLCUDAHost, 0};
  dvm_tensor* in = bytes_on(pinned, N); /* page-locked: the raw copy reads it when it runs */
  dvm_tensor* out = bytes_on(kHost, N);
  dvm_tensor* gpu = bytes_on(kGpu0, N);
  CUdeviceptr gpu_data = (CUdeviceptr)(uintptr_t)dvm_tensor_dl(gpu)->data;
  int wrong = 0;
  for (int round = 0; round < ROUNDS && wrong < 3; round++) {
    fill(host_bytes(in), N, (uint32_t)round);
    CHECK(cu.htod(gpu_data, host_bytes(in), N, LEGACY_STREAM) == 0);
    CHECK_OK(dvm_tensor_copy(out, gpu, s)); /* ordered after the default stream's copy */
    CHECK_OK(dvm_stream_sync(s));
    long long at = first_difference(host_bytes(out), host_bytes(in), N);
    if (at >= 0) {
      fprintf(stderr, "round %d: the stream read old bytes at %lld\n", round, at);
      wrong++;
    }
  }
  CHECK(wrong == 0);

  /* 2. Freed while the default stream still reads it; new tensors take the memory at once and
   * are overwritten. */
  dvm_tensor* back = bytes_on(pinned, N); /* page-locked: the raw copy writes it when it runs */
  wrong = 0;
  for (int round = 0; round < ROUNDS && wrong < 3; round++) {
    fill(host_bytes(in), N, (uint32_t)(100 + round));
    dvm_tensor* doomed = bytes_on(kGpu0, N);
    CHECK_OK(dvm_tensor_copy(doomed, in, s));
    CHECK_OK(dvm_stream_sync(s));
    CUdeviceptr doomed_data = (CUdeviceptr)(uintptr_t)dvm_tensor_dl(doomed)->data;
    CHECK(cu.dtoh(host_bytes(back), doomed_data, N, LEGACY_STREAM) == 0);
    dvm_tensor_free(doomed);
    dvm_tensor* next = bytes_on(kGpu0, N);
    memset(host_bytes(out), 0xee, N);
    CHECK_OK(dvm_tensor_copy(next, out, s));
    CHECK(cu.stream_synchronize(LEGACY_STREAM) == 0);
    long long at = first_difference(host_bytes(back), host_bytes(in), N);
    if (at >= 0) {
      fprintf(stderr, "round %d: the default stream read freed memory at %lld\n", round, at);
      wrong++;
    }
    CHECK_OK(dvm_stream_sync(s));
    dvm_tensor_free(next);
  }
  CHECK(wrong == 0);

  /* 3. Page-locked memory freed while the default stream still copies from it; new page-locked
   * tensors may take the memory at once and are overwritten. */
  unsigned char* expected = malloc(N);
  if (!expected) exit(1);
  wrong = 0;
  for (int round = 0; round < ROUNDS && wrong < 3; round++) {
    dvm_tensor* source = bytes_on(pinned, N);
    fill(host_bytes(source), N, (uint32_t)(200 + round));
    memcpy(expected, host_bytes(source), N);
    CHECK(cu.htod(gpu_data, host_bytes(source), N, LEGACY_STREAM) == 0);
    dvm_tensor_free(source);
    dvm_tensor* next = bytes_on(pinned, N);
    memset(host_bytes(next), 0xee, N);
    CHECK_OK(dvm_tensor_copy(out, gpu, s)); /* ordered after the default stream's copy */
    CHECK_OK(dvm_stream_sync(s));
    long long at = first_difference(host_bytes(out), expected, N);
    if (at >= 0) {
      fprintf(stderr, "round %d: the default stream read freed page-locked memory at %lld\n",
              round, at);
      wrong++;
    }
    dvm_tensor_free(next);
  }
  CHECK(wrong == 0);
  free(expected);
  dvm_tensor_free(back);
  dvm_tensor_free(in), dvm_tensor_free(out), dvm_tensor_free(gpu);
  dvm_stream_free(s);
  CHECK(cu.release(0) == 0);
  printf("cuda_default_stream: %d rounds each, the library's stream saw every default-stream "
         "write, and no free of GPU or page-locked memory overtook a default-stream read\n",
         ROUNDS);
  return check_finish();
}
