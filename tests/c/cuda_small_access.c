/* Small reads and writes (dvm_tensor_read / dvm_tensor_write) on CUDA tensors, ordered with
 * the asynchronous copies around them: a read right after a large host -> device copy sees the
 * copy's bytes; a write is seen by a copy queued after it; partial writes leave the rest as it
 * was. Exits 77 without a GPU. */
#include <stdio.h>

#include "cuda_check.h"

#define N (64 << 20)

int main(void) {
  require_cuda("cuda_small_access");
  dvm_stream* s = NULL;
  CHECK_OK(dvm_stream_new(kGpu0, &s));
  dvm_tensor* in = bytes_on(kHost, N);
  dvm_tensor* out = bytes_on(kHost, N);
  dvm_tensor* gpu = bytes_on(kGpu0, N);

  /* Reads after async copies: 20 rounds of a 64 MiB copy, then a 4-byte read at once. */
  for (uint32_t round = 0; round < 20; round++) {
    fill(host_bytes(in), N, round);
    CHECK_OK(dvm_tensor_copy(gpu, in, s));
    uint32_t head = 0;
    CHECK_OK(dvm_tensor_read(gpu, &head, sizeof head));
    CHECK(memcmp(&head, host_bytes(in), sizeof head) == 0);
    CHECK_OK(dvm_stream_sync(s)); /* `in` is refilled next round */
  }

  /* A 4-byte write, then a copy of the whole tensor: new head, old rest. */
  const uint32_t word = 0xC0FFEE42u;
  CHECK_OK(dvm_tensor_write(gpu, &word, sizeof word));
  CHECK_OK(dvm_tensor_copy(out, gpu, s));
  CHECK_OK(dvm_stream_sync(s));
  CHECK(memcmp(host_bytes(out), &word, sizeof word) == 0);
  CHECK(first_difference(host_bytes(out) + 4, host_bytes(in) + 4, N - 4) < 0);

  /* Many small writes and reads in a row, each seeing the last. */
  for (uint32_t i = 0; i < 1000; i++) {
    uint32_t back = 0;
    CHECK_OK(dvm_tensor_write(gpu, &i, sizeof i));
    CHECK_OK(dvm_tensor_read(gpu, &back, sizeof back));
    if (back != i) {
      CHECK(back == i);
      break;
    }
  }

  /* Reading more bytes than the tensor holds is refused, as on the host. */
  dvm_tensor* tiny = bytes_on(kGpu0, 2);
  unsigned char three[3];
  EXPECT_STATUS(dvm_tensor_read(tiny, three, 3), DVM_VALUE_ERROR, "");
  dvm_tensor_free(tiny);

  dvm_tensor_free(in), dvm_tensor_free(out), dvm_tensor_free(gpu);
  dvm_stream_free(s);
  printf("cuda_small_access: small reads and writes follow the async copies around them\n");
  return check_finish();
}
