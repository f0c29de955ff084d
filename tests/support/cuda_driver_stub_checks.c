/* Checks of the CUDA driver stand-in itself (cuda_driver_stub.c), run by
 * tests/cuda_stub_driver.rs: that it defers work, orders blocking streams with the legacy
 * stream, reports pending events as not ready, times events when their stream reaches them, and aborts on the misuse it is meant to catch.
 *
 *   cuda_driver_stub_checks SCENARIO
 *
 * The scenarios "deferred", "legacy_order", "event_query" and "event_timing" exit 0 when the stand-in behaves;
 * the others misuse the driver and must be aborted by it (the test reads its message). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void* CUcontext;
typedef void* CUstream;
typedef void* CUevent;

CUresult cuInit(unsigned int flags);
CUresult cuDevicePrimaryCtxRetain(CUcontext* context, int device);
CUresult cuCtxSetCurrent(CUcontext context);
CUresult cuStreamCreate(CUstream* stream, unsigned int flags);
CUresult cuStreamSynchronize(CUstream stream);
CUresult cuEventCreate(CUevent* event, unsigned int flags);
CUresult cuEventRecord(CUevent event, CUstream stream);
CUresult cuEventQuery(CUevent event);
CUresult cuEventSynchronize(CUevent event);
CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end);
CUresult cuMemAlloc_v2(CUdeviceptr* address, size_t size);
CUresult cuMemFree_v2(CUdeviceptr address);
CUresult cuMemFreeAsync(CUdeviceptr address, CUstream stream);
CUresult cuMemHostAlloc(void** pointer, size_t size, unsigned int flags);
CUresult cuMemFreeHost(void* pointer);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t size, CUstream stream);
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t size, CUstream stream);

#define CU(call)                                                                      \
  do {                                                                                \
    CUresult result_ = (call);                                                        \
    if (result_ != 0) {                                                               \
      fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, #call, result_); \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

#define EXPECT(condition)                                                      \
  do {                                                                         \
    if (!(condition)) {                                                        \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #condition); \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

enum { N = 64, BLOCKING = 0, NON_BLOCKING = 1 };
#define LEGACY ((CUstream)1)

/* Makes device `device`'s primary context current. */
static void enter(int device) {
  CUcontext context;
  CU(cuDevicePrimaryCtxRetain(&context, device));
  CU(cuCtxSetCurrent(context));
}

static unsigned char* pinned(unsigned char fill) {
  void* p;
  CU(cuMemHostAlloc(&p, N, 0));
  memset(p, fill, N);
  return p;
}

/* A new stream with `flags` in the current context. */
static CUstream stream(unsigned flags) {
  CUstream s;
  CU(cuStreamCreate(&s, flags));
  return s;
}

/* New device memory, with a copy of `in` into it queued on `s`. */
static CUdeviceptr upload(CUstream s, const unsigned char* in) {
  CUdeviceptr dev;
  CU(cuMemAlloc_v2(&dev, N));
  CU(cuMemcpyHtoDAsync_v2(dev, in, N, s));
  return dev;
}

/* A copy into page-locked memory has not happened until the stream is synchronized. */
static int deferred(void) {
  enter(0);
  CUstream s = stream(BLOCKING);
  unsigned char* out = pinned(0);
  CUdeviceptr dev = upload(s, pinned(7));
  CU(cuMemcpyDtoHAsync_v2(out, dev, N, s));
  EXPECT(out[0] == 0);
  CU(cuStreamSynchronize(s));
  EXPECT(out[0] == 7 && out[N - 1] == 7);
  return 0;
}

/* Work on the legacy stream follows the earlier work of blocking streams, not of non-blocking
 * ones. */
static int legacy_order(void) {
  enter(0);
  for (int flags = BLOCKING; flags <= NON_BLOCKING; flags++) {
    CUstream s = stream((unsigned)flags);
    unsigned char* out = pinned(0);
    CUdeviceptr dev = upload(s, pinned(9));
    CU(cuMemcpyDtoHAsync_v2(out, dev, N, LEGACY));
    CU(cuStreamSynchronize(LEGACY));
    EXPECT(out[0] == (flags == BLOCKING ? 9 : 0xCD)); /* 0xCD: fresh device memory */
    CU(cuStreamSynchronize(s));
  }
  return 0;
}

/* An event after queued work is not ready; the work then runs, and it is. */
static int event_query(void) {
  enter(0);
  CUstream s = stream(BLOCKING);
  CUevent e;
  CU(cuEventCreate(&e, 2));
  EXPECT(cuEventQuery(e) == 0); /* never recorded */
  upload(s, pinned(3));
  CU(cuEventRecord(e, s));
  EXPECT(cuEventQuery(e) == 600); /* CUDA_ERROR_NOT_READY */
  EXPECT(cuEventQuery(e) == 0);
  return 0;
}

/* A timing event is stamped when its stream's work reaches it: at once on an idle stream, when
 * a forcing runs the work before it otherwise; the time between two stamps is not ready while
 * one is pending, and refused for an event without timing or never recorded. */
static int event_timing(void) {
  enter(0);
  CUstream s = stream(BLOCKING);
  CUevent start, end, untimed;
  CU(cuEventCreate(&start, 0));
  CU(cuEventCreate(&end, 0));
  CU(cuEventCreate(&untimed, 2));
  float ms = -1;
  EXPECT(cuEventElapsedTime(&ms, start, end) == 400); /* CUDA_ERROR_INVALID_HANDLE */
  CU(cuEventRecord(start, s));
  upload(s, pinned(3));
  CU(cuEventRecord(end, s));
  EXPECT(cuEventElapsedTime(&ms, start, end) == 600); /* CUDA_ERROR_NOT_READY */
  struct timespec pause = {0, 20 * 1000 * 1000};
  nanosleep(&pause, NULL);
  CU(cuEventSynchronize(end));
  CU(cuEventElapsedTime(&ms, start, end));
  EXPECT(ms >= 20.0f && ms < 10000.0f);
  CU(cuEventElapsedTime(&ms, end, start));
  EXPECT(ms <= -20.0f);
  CU(cuEventRecord(untimed, s));
  EXPECT(cuEventElapsedTime(&ms, start, untimed) == 400);
  return 0;
}

/* Page-locked memory freed while a copy from it is still queued. */
static int free_pinned_in_use(void) {
  enter(0);
  unsigned char* in = pinned(1);
  upload(stream(BLOCKING), in);
  CU(cuMemFreeHost(in));
  return 0;
}

/* A copy into device memory after its free. */
static int use_after_free(void) {
  enter(0);
  CUstream s = stream(BLOCKING);
  unsigned char* in = pinned(1);
  CUdeviceptr dev;
  CU(cuMemAlloc_v2(&dev, N));
  CU(cuMemFree_v2(dev));
  CU(cuMemcpyHtoDAsync_v2(dev, in, N, s));
  return 0;
}

/* Device memory freed in stream order on one stream while a copy into it is queued on another,
 * with no event wait between them. */
static int free_async_unordered(void) {
  enter(0);
  CUdeviceptr dev = upload(stream(NON_BLOCKING), pinned(1));
  CU(cuMemFreeAsync(dev, stream(NON_BLOCKING)));
  return 0;
}

/* A stream made on a thread without a current context. */
static int no_context(void) {
  CU(cuInit(0));
  stream(BLOCKING);
  return 0;
}

/* An event of device 0 recorded on a stream of device 1 (needs two GPUs). */
static int event_of_another_context(void) {
  enter(0);
  CUevent e;
  CU(cuEventCreate(&e, 2));
  enter(1);
  CU(cuEventRecord(e, stream(BLOCKING)));
  return 0;
}

int main(int argc, char** argv) {
  static const struct {
    const char* name;
    int (*run)(void);
  } scenarios[] = {
      {"deferred", deferred},
      {"legacy_order", legacy_order},
      {"event_query", event_query},
      {"event_timing", event_timing},
      {"free_pinned_in_use", free_pinned_in_use},
      {"use_after_free", use_after_free},
      {"free_async_unordered", free_async_unordered},
      {"no_context", no_context},
      {"event_of_another_context", event_of_another_context},
  };
  if (argc != 2) return 2;
  for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++) {
    if (strcmp(argv[1], scenarios[i].name) != 0) continue;
    if (strcmp(argv[1], "no_context") != 0) CU(cuInit(0));
    return scenarios[i].run();
  }
  fprintf(stderr, "unknown scenario %s\n", argv[1]);
  return 2;
}
