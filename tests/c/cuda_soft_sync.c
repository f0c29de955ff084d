/* Soft sync between two CUDA streams, 1000 rounds: each round writes new bytes into a GPU
 * tensor on one stream (host -> device, then device -> device) and reads them on the other
 * stream (device -> device, then device -> host, or a small read); the reader must see the new
 * bytes every time, with no host wait between the two streams. Exits 77 without a GPU. */
#include <stdio.h>

#include "cuda_check.h"

#define ROUNDS 1000
#define N (256 * 1024)

int main(void) {
  require_cuda("cuda_soft_sync");
  dvm_stream* writer = NULL;
  dvm_stream* reader = NULL;
  CHECK_OK(dvm_stream_new(kGpu0, &writer));
  CHECK_OK(dvm_stream_new(kGpu0, &reader));
  dvm_tensor* patterns[2] = {bytes_on(kHost, N), bytes_on(kHost, N)};
  dvm_tensor* staged = bytes_on(kGpu0, N);
  dvm_tensor* shared = bytes_on(kGpu0, N);
  dvm_tensor* seen = bytes_on(kGpu0, N);
  dvm_tensor* out = bytes_on(kHost, N);
  int wrong = 0;
  for (int round = 0; round < ROUNDS && wrong < 5; round++) {
    dvm_tensor* pattern = patterns[round % 2];
    /* The pattern buffer is free again: the copy that last used it was synced below. */
    fill(host_bytes(pattern), N, (uint32_t)round);
    CHECK_OK(dvm_tensor_copy(staged, pattern, writer));
    CHECK_OK(dvm_tensor_copy(shared, staged, writer));
    CHECK_OK(dvm_tensor_copy(seen, shared, reader)); /* waits for the writer on the GPU */
    if (round % 2 == 0) {
      CHECK_OK(dvm_tensor_copy(out, seen, reader));
      CHECK_OK(dvm_stream_sync(reader));
      long long at = first_difference(host_bytes(out), host_bytes(pattern), N);
      if (at >= 0) {
        fprintf(stderr, "round %d: the reader saw old bytes at %lld\n", round, at);
        wrong++;
      }
    } else {
      unsigned char tail[16];
      /* A small read is ordered after the reader's copy, which follows the writer's. */
      CHECK_OK(dvm_tensor_read(seen, tail, sizeof tail));
      if (memcmp(tail, host_bytes(pattern), sizeof tail) != 0) {
        fprintf(stderr, "round %d: a small read saw old bytes\n", round);
        wrong++;
      }
      CHECK_OK(dvm_stream_sync(writer));
    }
  }
  CHECK(wrong == 0);
  CHECK_OK(dvm_stream_sync(writer));
  CHECK_OK(dvm_stream_sync(reader));
  dvm_tensor_free(patterns[0]), dvm_tensor_free(patterns[1]);
  dvm_tensor_free(staged), dvm_tensor_free(shared), dvm_tensor_free(seen), dvm_tensor_free(out);
  dvm_stream_free(writer);
  dvm_stream_free(reader);
  printf("cuda_soft_sync: %d rounds, the reading stream saw every write\n", ROUNDS);
  return check_finish();
}
