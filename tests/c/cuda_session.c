/* A session whose workers run on CUDA devices: `runtime.disco.empty` makes GPU tensors on each
 * worker's device, and copies to and from worker 0 move the bytes through the worker's CUDA
 * stream (1 KiB and 32 MiB, every byte checked). Exits 77 without a GPU. */
#include <stdio.h>

#include "cuda_check.h"
#include "session_check.h"

#define WORKERS 2

static void copy_through_worker0(dvm_session* s, int64_t n, uint32_t seed) {
  DLDataType u8 = {kDLUInt, 8, 1};
  dvm_dref* remote = empty_tensor(s, &n, 1, u8, 0);

  for (int32_t w = 0; w < WORKERS; w++) {
    DVMAny t = any_none();
    CHECK_OK(dvm_dref_get(remote, w, &t));
    CHECK(t.type_index == kDVMTensor);
    if (t.type_index == kDVMTensor) {
      const DLTensor* dl = CELL(DLTensor, t.v_obj);
      CHECK(dl->device.device_type == kDLCUDA);
    }
    CHECK_OK(dvm_any_release(&t));
  }

  unsigned char* in = malloc((size_t)n);
  unsigned char* out = malloc((size_t)n);
  if (!in || !out) exit(1);
  fill(in, (size_t)n, seed);
  memset(out, 0, (size_t)n);
  DLTensor host_in = {in, kHost, 1, u8, &n, NULL, 0};
  DLTensor host_out = {out, kHost, 1, u8, &n, NULL, 0};
  CHECK_OK(dvm_session_copy_to_worker0(s, &host_in, remote));
  CHECK_OK(dvm_session_copy_from_worker0(s, &host_out, remote));
  long long at = first_difference(in, out, (size_t)n);
  if (at >= 0) fprintf(stderr, "%lld bytes through worker 0 differ at %lld\n", (long long)n, at);
  CHECK(at < 0);
  dvm_dref_free(remote);
  free(in);
  free(out);
}

int main(void) {
  int32_t gpus = require_cuda("cuda_session");
  DLDevice devices[WORKERS];
  for (int32_t w = 0; w < WORKERS; w++) devices[w] = (DLDevice){kDLCUDA, w % gpus};
  dvm_session_options options;
  memset(&options, 0, sizeof options);
  options.num_devices = WORKERS;
  options.devices = devices;
  options.timeout_ms = 60000;
  dvm_session* s = NULL;
  CHECK_OK(dvm_session_new_threaded(WORKERS, 1, &options, &s));
  copy_through_worker0(s, 1024, 1);
  copy_through_worker0(s, 32 << 20, 2);
  CHECK_OK(dvm_session_sync_all(s));
  end_session(s);
  printf("cuda_session: %d workers on CUDA devices; copies through worker 0 match\n", WORKERS);
  return check_finish();
}
