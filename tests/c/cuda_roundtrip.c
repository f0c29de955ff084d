/* Host -> device -> device -> host round trips of 1 B to 256 MiB on one CUDA stream, checking
 * every byte; the same through page-locked (kDLCUDAHost) tensors, with small reads ordered after
 * the copies; frees in stream order (memory freed while copies still use it, reallocated and
 * overwritten on another stream at once, must not disturb them); a CUDA tensor exported through
 * DLPack (device type 2, the right id, the same device pointer) and imported back; and where
 * there are several GPUs, the last one, and copies between two GPUs through the VM on either
 * GPU's stream. Exits 77 (skipped) without a GPU. */
#include <stdio.h>

#include "cuda_check.h"

static void round_trip(dvm_stream* s, int64_t n, uint32_t seed) {
  dvm_tensor* in = bytes_on(kHost, n);
  dvm_tensor* out = bytes_on(kHost, n);
  dvm_tensor* a = bytes_on(kGpu0, n);
  dvm_tensor* b = bytes_on(kGpu0, n);
  fill(host_bytes(in), (size_t)n, seed);
  CHECK_OK(dvm_tensor_copy(a, in, s));
  CHECK_OK(dvm_tensor_copy(b, a, s));
  CHECK_OK(dvm_tensor_copy(out, b, s));
  /* Freed at once: the queued copies keep the tensors alive. */
  dvm_tensor_free(a);
  dvm_tensor_free(b);
  CHECK_OK(dvm_stream_sync(s));
  long long at = first_difference(host_bytes(in), host_bytes(out), (size_t)n);
  if (at >= 0) fprintf(stderr, "round trip of %lld bytes differs at byte %lld\n", (long long)n, at);
  CHECK(at < 0);
  dvm_tensor_free(in);
  dvm_tensor_free(out);
}

/* Host -> pinned -> device -> pinned, then 8 bytes read from the last pinned tensor at once:
 * the read waits for the copy into it. */
static void pinned_round_trip(dvm_stream* s, int64_t n, uint32_t seed) {
  const DLDevice pinned = {kDLCUDAHost, 0};
  dvm_tensor* in = bytes_on(pinned, n);
  dvm_tensor* out = bytes_on(pinned, n);
  dvm_tensor* a = bytes_on(kGpu0, n);
  fill(host_bytes(in), (size_t)n, seed); /* page-locked memory is host memory */
  CHECK_OK(dvm_tensor_copy(a, in, s));
  CHECK_OK(dvm_tensor_copy(out, a, s));
  unsigned char head[8];
  size_t first = n < 8 ? (size_t)n : 8;
  CHECK_OK(dvm_tensor_read(out, head, first));
  CHECK(memcmp(head, host_bytes(in), first) == 0);
  CHECK_OK(dvm_stream_sync(s));
  long long at = first_difference(host_bytes(in), host_bytes(out), (size_t)n);
  if (at >= 0) fprintf(stderr, "pinned round trip of %lld bytes differs at %lld\n", (long long)n, at);
  CHECK(at < 0);
  dvm_tensor_free(a), dvm_tensor_free(in), dvm_tensor_free(out);
}

/* A GPU tensor freed while two copies on `s` still use it; its memory is reallocated at once and
 * overwritten on `other`: the free waited for `s`, so the copy back still sees the bytes. */
static void frees_follow_the_work(dvm_stream* s, dvm_stream* other) {
  const int64_t n = 32 << 20;
  dvm_tensor* in = bytes_on(kHost, n);
  dvm_tensor* out = bytes_on(kHost, n);
  dvm_tensor* junk = bytes_on(kHost, n);
  memset(host_bytes(junk), 0xee, (size_t)n);
  int wrong = 0;
  for (uint32_t round = 0; round < 8; round++) {
    fill(host_bytes(in), (size_t)n, 1000 + round);
    dvm_tensor* a = bytes_on(kGpu0, n);
    CHECK_OK(dvm_tensor_copy(a, in, s));
    CHECK_OK(dvm_tensor_copy(out, a, s));
    dvm_tensor_free(a);
    dvm_tensor* b = bytes_on(kGpu0, n); /* may reuse a's memory from the pool */
    CHECK_OK(dvm_tensor_copy(b, junk, other));
    dvm_tensor_free(b);
    CHECK_OK(dvm_stream_sync(s));
    CHECK_OK(dvm_stream_sync(other));
    wrong += first_difference(host_bytes(in), host_bytes(out), (size_t)n) >= 0;
  }
  if (wrong) fprintf(stderr, "%d of 8 rounds saw freed memory overwritten too early\n", wrong);
  CHECK(wrong == 0);
  dvm_tensor_free(in), dvm_tensor_free(out), dvm_tensor_free(junk);
}

/* GPU 0 -> GPU `last` on GPU 0's stream, then back on GPU `last`'s stream. */
static void peer_copies(dvm_stream* s0, dvm_stream* s1, DLDevice last) {
  const int64_t n = (16 << 20) + 3;
  dvm_tensor* in = bytes_on(kHost, n);
  dvm_tensor* out = bytes_on(kHost, n);
  fill(host_bytes(in), (size_t)n, 4242);
  dvm_tensor* a = bytes_on(kGpu0, n);
  dvm_tensor* b = bytes_on(last, n);
  dvm_tensor* c = bytes_on(kGpu0, n);
  CHECK_OK(dvm_tensor_copy(a, in, s0));
  CHECK_OK(dvm_tensor_copy(b, a, s0)); /* a peer copy issued on GPU 0 */
  CHECK_OK(dvm_tensor_copy(c, b, s1)); /* waits for s0, then a peer copy issued on `last` */
  CHECK_OK(dvm_tensor_copy(out, c, s0));
  CHECK_OK(dvm_stream_sync(s0));
  long long at = first_difference(host_bytes(in), host_bytes(out), (size_t)n);
  if (at >= 0) fprintf(stderr, "copies between two GPUs differ at byte %lld\n", at);
  CHECK(at < 0);
  dvm_tensor_free(a), dvm_tensor_free(b), dvm_tensor_free(c);
  dvm_tensor_free(in), dvm_tensor_free(out);
}

static void dlpack_export_and_import(dvm_stream* s) {
  const int64_t n = 1 << 20;
  dvm_tensor* in = bytes_on(kHost, n);
  dvm_tensor* out = bytes_on(kHost, n);
  fill(host_bytes(in), (size_t)n, 99);
  dvm_tensor* a = bytes_on(kGpu0, n);
  CHECK_OK(dvm_tensor_copy(a, in, s));

  DLManagedTensorVersioned* managed = NULL;
  CHECK_OK(dvm_tensor_to_dlpack(a, &managed));
  CHECK(managed->dl_tensor.device.device_type == kDLCUDA);
  CHECK(managed->dl_tensor.device.device_id == 0);
  CHECK(managed->dl_tensor.data == dvm_tensor_dl(a)->data);
  CHECK(managed->dl_tensor.ndim == 1 && managed->dl_tensor.shape[0] == n);
  dvm_tensor_free(a); /* the export keeps the memory */

  dvm_tensor* back = NULL;
  CHECK_OK(dvm_tensor_from_dlpack(managed, &back)); /* takes the export over */
  CHECK(dvm_tensor_dl(back)->device.device_type == kDLCUDA);
  CHECK_OK(dvm_tensor_copy(out, back, s));
  CHECK_OK(dvm_stream_sync(s));
  CHECK(first_difference(host_bytes(in), host_bytes(out), (size_t)n) < 0);
  unsigned char head[8];
  CHECK_OK(dvm_tensor_read(back, head, sizeof head));
  CHECK(memcmp(head, host_bytes(in), sizeof head) == 0);
  dvm_tensor_free(back); /* runs the export's deleter, which frees the GPU memory */
  dvm_tensor_free(in);
  dvm_tensor_free(out);
}

int main(void) {
  int32_t gpus = require_cuda("cuda_roundtrip");
  dvm_stream* s = NULL;
  CHECK_OK(dvm_stream_new(kGpu0, &s));
  const int64_t sizes[] = {1, 3, 64, 4096, 65537, 1 << 20, (4 << 20) + 5, 64 << 20, 256 << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) round_trip(s, sizes[i], (uint32_t)i);
  const int64_t pinned_sizes[] = {1, 4096, 65537, 32 << 20};
  for (size_t i = 0; i < sizeof pinned_sizes / sizeof pinned_sizes[0]; i++) {
    pinned_round_trip(s, pinned_sizes[i], (uint32_t)(100 + i));
  }
  dvm_stream* other = NULL;
  CHECK_OK(dvm_stream_new(kGpu0, &other));
  frees_follow_the_work(s, other);
  dvm_stream_free(other);
  dlpack_export_and_import(s);

  /* The last GPU, where there are several: its own context, stream and memory. */
  if (gpus > 1) {
    const DLDevice last = {kDLCUDA, gpus - 1};
    const int64_t n = 8 << 20;
    dvm_tensor* in = bytes_on(kHost, n);
    dvm_tensor* out = bytes_on(kHost, n);
    fill(host_bytes(in), (size_t)n, 7);
    dvm_tensor* b = bytes_on(last, n);
    dvm_stream* other = NULL;
    CHECK_OK(dvm_stream_new(last, &other));
    CHECK_OK(dvm_tensor_copy(b, in, other));
    CHECK_OK(dvm_tensor_copy(out, b, other));
    CHECK_OK(dvm_stream_sync(other));
    CHECK(first_difference(host_bytes(in), host_bytes(out), (size_t)n) < 0);
    peer_copies(s, other, last);
    dvm_stream_free(other);
    dvm_tensor_free(b), dvm_tensor_free(in), dvm_tensor_free(out);
  }
  dvm_stream_free(s);
  printf("cuda_roundtrip: %d GPU(s); round trips of 1 B to 256 MiB (device and page-locked "
         "memory), frees in stream order, a DLPack export%s match\n",
         gpus, gpus > 1 ? " and copies between two GPUs" : "");
  return check_finish();
}
