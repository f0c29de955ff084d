/* CUDA copy benchmark: the library against raw driver calls, in the same run.
 *
 *   1. H2D and D2H bandwidth, 4 KiB to 256 MiB, from pinned and pageable (malloc) host memory:
 *      dvm_tensor_copy on a CUDA stream + dvm_stream_sync (pinned: a kDLCUDAHost tensor of the
 *      library), against cuMemcpy{HtoD,DtoH}Async + cuStreamSynchronize on a raw non-blocking
 *      stream (pinned: cuMemHostAlloc, flags 0). Target: the library reaches >= 0.9x the raw
 *      bandwidth.
 *   2. 4-byte dvm_tensor_read latency from a CUDA tensor, against cuMemcpyDtoHAsync + stream
 *      sync into a pinned word, interleaved and back to back. Target: <= 1.5x the raw latency.
 *
 * Prints Markdown tables, ready for BENCHMARKS.md. The raw side loads libcuda.so.1 itself (no
 * CUDA headers or toolkit needed to build this). Exits 77 without a GPU. `--quick` stops at
 * 64 KiB and reads 200 times (a smoke run, as the tests do against a stand-in driver). Build:
 * scripts/gpu-build.sh; run: gpu-check.sh in the bundle. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../tests/c/cuda_driver.h"
#include "../../tests/c/monotonic.h"
#include "discovm.h"

typedef void* CUstream;
typedef void* CUcontext;

static struct {
  CUresult (*init)(unsigned);
  CUresult (*device_get)(int*, int);
  CUresult (*primary_ctx_retain)(CUcontext*, int);
  CUresult (*ctx_set_current)(CUcontext);
  CUresult (*stream_create)(CUstream*, unsigned);
  CUresult (*stream_synchronize)(CUstream);
  CUresult (*mem_alloc)(CUdeviceptr*, size_t);
  CUresult (*mem_free)(CUdeviceptr);
  CUresult (*mem_host_alloc)(void**, size_t, unsigned);
  CUresult (*mem_free_host)(void*);
  CUresult (*htod)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*dtoh)(void*, CUdeviceptr, size_t, CUstream);
} cu;

#define CU(call)                                                              \
  do {                                                                        \
    CUresult rc_ = (call);                                                    \
    if (rc_ != 0) {                                                           \
      fprintf(stderr, "%s:%d: %s failed: CUDA error %d\n", __FILE__, __LINE__, \
              #call, rc_);                                                    \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

#define DVM(call)                                                                       \
  do {                                                                                  \
    if ((call) != DVM_OK) {                                                             \
      fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #call,          \
              dvm_last_error_kind(), dvm_last_error_message());                         \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

static void load_driver(void) {
  driver_function(&cu.init, "cuInit");
  driver_function(&cu.device_get, "cuDeviceGet");
  driver_function(&cu.primary_ctx_retain, "cuDevicePrimaryCtxRetain");
  driver_function(&cu.ctx_set_current, "cuCtxSetCurrent");
  driver_function(&cu.stream_create, "cuStreamCreate");
  driver_function(&cu.stream_synchronize, "cuStreamSynchronize");
  driver_function(&cu.mem_alloc, "cuMemAlloc_v2");
  driver_function(&cu.mem_free, "cuMemFree_v2");
  driver_function(&cu.mem_host_alloc, "cuMemHostAlloc");
  driver_function(&cu.mem_free_host, "cuMemFreeHost");
  driver_function(&cu.htod, "cuMemcpyHtoDAsync_v2");
  driver_function(&cu.dtoh, "cuMemcpyDtoHAsync_v2");
}


/* The first *n bytes of a host buffer as a tensor on `device` (kDLCPU or kDLCUDAHost),
 * without copying. */
static void no_delete(DLManagedTensorVersioned* self) { (void)self; }

static dvm_tensor* wrap_host(void* data, DLDevice device, int64_t* n,
                             DLManagedTensorVersioned* managed) {
  memset(managed, 0, sizeof *managed);
  managed->version.major = DLPACK_MAJOR_VERSION;
  managed->version.minor = DLPACK_MINOR_VERSION;
  managed->deleter = no_delete;
  managed->dl_tensor = (DLTensor){data, device, 1, {kDLUInt, 8, 1}, n, NULL, 0};
  dvm_tensor* t = NULL;
  DVM(dvm_tensor_from_dlpack(managed, &t));
  return t;
}

/* Repetitions so each measurement moves about 1 GiB (at least 5, at most 2000). */
static int reps_for(size_t n) {
  size_t reps = (1ull << 30) / n;
  return reps < 5 ? 5 : reps > 2000 ? 2000 : (int)reps;
}

static double gbps(size_t n, int reps, double seconds) {
  return (double)n * reps / seconds / 1e9;
}

static int failures;

/* One size in both directions: the raw loop between raw_host and raw_dev, the library's between
 * lib_host (on lib_device) and dev. */
static void bandwidth(const char* kind, void* raw_host, void* lib_host, DLDevice lib_device,
                      CUdeviceptr raw_dev, CUstream raw, dvm_stream* s, dvm_tensor* dev,
                      size_t n) {
  int64_t len = (int64_t)n;
  DLManagedTensorVersioned managed;
  dvm_tensor* h = wrap_host(lib_host, lib_device, &len, &managed);
  /* The library's device tensor is longer; copy into a view of the same length. */
  DLManagedTensorVersioned dev_view;
  memset(&dev_view, 0, sizeof dev_view);
  dev_view.version.major = DLPACK_MAJOR_VERSION;
  dev_view.version.minor = DLPACK_MINOR_VERSION;
  dev_view.deleter = no_delete;
  dev_view.dl_tensor = *dvm_tensor_dl(dev);
  dev_view.dl_tensor.shape = &len;
  dev_view.dl_tensor.strides = NULL;
  dvm_tensor* d = NULL;
  DVM(dvm_tensor_from_dlpack(&dev_view, &d));
  int reps = reps_for(n);
  for (int dir = 0; dir < 2; dir++) {
    double best_raw = 1e30, best_lib = 1e30;
    for (int trial = 0; trial < 3; trial++) {
      double t0 = now_s();
      for (int i = 0; i < reps; i++) {
        if (dir == 0) CU(cu.htod(raw_dev, raw_host, n, raw));
        else CU(cu.dtoh(raw_host, raw_dev, n, raw));
      }
      CU(cu.stream_synchronize(raw));
      double t1 = now_s();
      for (int i = 0; i < reps; i++) {
        if (dir == 0) DVM(dvm_tensor_copy(d, h, s));
        else DVM(dvm_tensor_copy(h, d, s));
      }
      DVM(dvm_stream_sync(s));
      double t2 = now_s();
      if (t1 - t0 < best_raw) best_raw = t1 - t0;
      if (t2 - t1 < best_lib) best_lib = t2 - t1;
    }
    double raw_bw = gbps(n, reps, best_raw), lib_bw = gbps(n, reps, best_lib);
    double ratio = lib_bw / raw_bw;
    int ok = ratio >= 0.9;
    failures += !ok;
    printf("| %s | %s | %zu | %.2f | %.2f | %.2f | %s |\n", dir == 0 ? "H2D" : "D2H", kind, n,
           raw_bw, lib_bw, ratio, ok ? "ok" : "**below 0.9**");
  }
  dvm_tensor_free(d);
  dvm_tensor_free(h);
}

static int compare_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

enum { MAX_READS = 20000 };

/* The reads per latency row: MAX_READS, or fewer for a quick run. */
static int reads = MAX_READS;

/* One row of 4-byte read latencies: `reads` raw reads (cuMemcpyDtoHAsync into the page-locked
 * `word` + cuStreamSynchronize) and `reads` dvm_tensor_read calls of `dev`, either interleaved
 * (each library read right after a raw one) or back to back (all raw reads, then all library
 * reads: no thread of either side waits for the other's in between). Returns 1 if the ratio of
 * the medians misses the target. */
static int latency(const char* label, int interleaved, void* word, CUdeviceptr raw_dev,
                   CUstream raw, dvm_tensor* dev) {
  static double raw_us[MAX_READS], lib_us[MAX_READS];
  uint32_t value = 0;
  for (int pass = 0; pass < (interleaved ? 1 : 2); pass++) {
    for (int i = 0; i < reads; i++) {
      double t0 = now_s();
      if (interleaved || pass == 0) {
        CU(cu.dtoh(word, raw_dev, 4, raw));
        CU(cu.stream_synchronize(raw));
        raw_us[i] = (now_s() - t0) * 1e6;
      }
      if (interleaved || pass == 1) {
        double t1 = now_s();
        DVM(dvm_tensor_read(dev, &value, 4));
        lib_us[i] = (now_s() - t1) * 1e6;
      }
    }
  }
  qsort(raw_us, (size_t)reads, sizeof(double), compare_double);
  qsort(lib_us, (size_t)reads, sizeof(double), compare_double);
  double ratio = lib_us[reads / 2] / raw_us[reads / 2];
  int ok = ratio <= 1.5;
  printf("| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %s |\n", label, raw_us[reads / 2],
         raw_us[reads * 99 / 100], lib_us[reads / 2], lib_us[reads * 99 / 100], ratio,
         ok ? "ok" : "**above 1.5**");
  return !ok;
}

int main(int argc, char** argv) {
  int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  if (quick) reads = 200;
  int32_t gpus = 0;
  DVM(dvm_device_count(kDLCUDA, &gpus));
  if (gpus == 0) {
    printf("cuda_copy bench: skipped: no CUDA device here (dvm_device_count(kDLCUDA) is 0)\n");
    return 77;
  }
  load_driver();
  CU(cu.init(0));
  int device;
  CU(cu.device_get(&device, 0));
  CUcontext ctx;
  CU(cu.primary_ctx_retain(&ctx, device));
  CU(cu.ctx_set_current(ctx));
  CUstream raw;
  CU(cu.stream_create(&raw, 1 /* CU_STREAM_NON_BLOCKING */));

  const size_t max = quick ? 64u << 10 : 256u << 20;
  int64_t max_len = (int64_t)max;
  const DLDevice host = {kDLCPU, 0}, pinned_host = {kDLCUDAHost, 0};
  void* pinned;
  CU(cu.mem_host_alloc(&pinned, max, 0));
  dvm_tensor* lib_pinned = NULL;
  DVM(dvm_tensor_empty(&max_len, 1, (DLDataType){kDLUInt, 8, 1}, pinned_host, &lib_pinned));
  void* lib_pinned_data = dvm_tensor_dl(lib_pinned)->data;
  void* pageable = malloc(max);
  if (!pageable) return 1;
  memset(pinned, 1, max);
  memset(lib_pinned_data, 1, max);
  memset(pageable, 2, max);
  CUdeviceptr raw_dev;
  CU(cu.mem_alloc(&raw_dev, max));

  dvm_stream* s = NULL;
  DVM(dvm_stream_new((DLDevice){kDLCUDA, 0}, &s));
  dvm_tensor* dev = NULL;
  DVM(dvm_tensor_empty(&max_len, 1, (DLDataType){kDLUInt, 8, 1}, (DLDevice){kDLCUDA, 0}, &dev));

  printf("Bandwidth, best of 3 (target: discovm >= 0.9x raw):\n\n");
  printf("| direction | host memory | bytes | raw GB/s | discovm GB/s | ratio | |\n");
  printf("|---|---|---|---|---|---|---|\n");
  for (size_t n = 4096; n <= max; n *= 4) {
    bandwidth("pinned", pinned, lib_pinned_data, pinned_host, raw_dev, raw, s, dev, n);
    bandwidth("pageable", pageable, pageable, host, raw_dev, raw, s, dev, n);
  }

  printf("\nPageable D2H up to 64 KiB: the library lands the bytes in its stream's page-locked\n"
         "buffer and copies them out; the raw side uses the driver's pageable path.\n");

  printf("\n4-byte read latency, median of %d (target: discovm <= 1.5x raw):\n\n", reads);
  printf("| | raw median us | raw p99 | discovm median us | discovm p99 | ratio | |\n");
  printf("|---|---|---|---|---|---|---|\n");
  failures += latency("dvm_tensor_read 4 B, interleaved", 1, pinned, raw_dev, raw, dev);
  failures += latency("dvm_tensor_read 4 B, back to back", 0, pinned, raw_dev, raw, dev);

  dvm_tensor_free(dev);
  dvm_tensor_free(lib_pinned);
  dvm_stream_free(s);
  CU(cu.mem_free(raw_dev));
  CU(cu.mem_free_host(pinned));
  free(pageable);
  printf("\n%d measurement(s) missed their target.\n", failures);
  return 0; /* targets are reported, not enforced: the tests decide pass/fail */
}
