/* A stand-in for the CUDA driver (libcuda.so.1), so the CUDA tests run on machines without a
 * GPU. It exports the driver calls this library (through cudarc), the CUDA test programs and
 * the copy benchmark make, with the driver's C ABI, and models what a GPU would make of them:
 *
 * - Devices: DISCOVM_STUB_GPUS of them (default 1; 0: cuInit reports CUDA_ERROR_NO_DEVICE),
 *   each with one primary context (retained and released with counts). Every device supports
 *   memory pools, unless DISCOVM_STUB_NO_POOLS is set (then the library's cuMemAlloc path
 *   runs).
 * - Device memory is host memory the host cannot reach: a device pointer is the address of a
 *   malloc'd block with bit 52 set, which no x86-64 or AArch64 process can dereference, so a
 *   host access to device memory crashes at once instead of passing by chance.
 * - Deferred execution: every stream keeps a queue of its work (copies, waits for other
 *   streams, stream-ordered allocations and frees), which runs only when something forces it:
 *   a stream, event or context synchronization, a query of an event (which reports
 *   CUDA_ERROR_NOT_READY while the work before it is pending, and then runs that work, as a GPU
 *   makes progress while the host polls), a copy into pageable host memory (which returns once
 *   done, as the driver's does) and the destruction of a stream. Work that the host did not
 *   wait for has therefore not happened: a missing synchronization or event wait shows as
 *   wrong bytes. A copy from pageable host memory takes the bytes when it is issued (the
 *   driver stages them); a copy from or to page-locked memory reads and writes it when it runs.
 *   Frees are the exception: a queued free runs as soon as the work it waits for has run, as
 *   early as a GPU may run it, so that a use after it shows.
 * - The NCCL stand-in's collectives are work of their own on a stream (discovmStubQueueStep, not
 *   a driver call), which runs at once with the work before it, and may not be able to run
 *   yet, as a kernel waiting on its peers: the stream's work stops there; a query of an event
 *   after it reports CUDA_ERROR_NOT_READY, and a synchronization waits, without the lock, until
 *   it ran.
 * - Timing: an event made without CU_EVENT_DISABLE_TIMING is stamped with the host's
 *   CLOCK_MONOTONIC when its stream's work reaches it (at once on an idle stream, else when a
 *   forcing runs the work before it), and cuEventElapsedTime gives the time between two stamps
 *   (CUDA_ERROR_NOT_READY while one is pending), so a GPU's times are the host times at which
 *   its stand-in ran the work.
 * - The legacy default stream (handle 0 or CU_STREAM_LEGACY) of each context waits for the
 *   work issued before on the context's blocking streams, and each blocking stream for the
 *   work issued before on the legacy stream; non-blocking streams are ordered with nothing.
 *   With DISCOVM_STUB_ONE_QUEUE set, every stream's work also waits for the work issued before
 *   on the other streams of its context, as on a GPU whose streams share one hardware queue
 *   (CUDA_DEVICE_MAX_CONNECTIONS=1): an event recorded on an idle stream then waits for a
 *   collective another stream holds.
 *
 * It aborts, with a message on stderr, on what would be a bug on a GPU:
 * - a call before cuInit, or one that needs a current context without one (or with a released
 *   one), or that queues work on a stream of another context than the current one;
 * - an event recorded on a stream of another context than its own; a stream or event used
 *   after it was destroyed;
 * - a copy whose device memory is not a live allocation (never allocated, freed, its free
 *   already queued, too short, on another device than the stream's), or that runs before its
 *   stream-ordered allocation finished or after its memory was freed;
 * - a free of device memory while a queued copy touching the memory is not ordered before it:
 *   cuMemFree with such a copy queued anywhere, cuMemFreeAsync with one the free does not
 *   follow (by its stream's order, or by the event waits queued before it, directly or through
 *   other streams' waits); likewise a free
 *   of page-locked host memory (cuMemFreeHost) while a queued copy still reads or writes it;
 * - a free of a pointer that is not a live allocation, and a device call it does not model.
 *
 * It does not model: kernels, the duration of work, concurrency between streams (everything runs on the host
 * thread that forces it, under one global lock), errors of the driver itself (out of memory,
 * a failing context), peer access settings, non-portable page-locked memory used from another
 * context (treated as page-locked everywhere), the per-thread default stream, or memory pools
 * (their attribute is accepted and changes nothing). Built as libcuda.so.1, with libcuda.so
 * linking to it, by tests/cuda_stub_driver.rs. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef int CUdevice;

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_READY = 600,
};

enum {
  CU_STREAM_NON_BLOCKING = 1,
  CU_EVENT_DISABLE_TIMING = 2,
  CU_MEMHOSTALLOC_PORTABLE = 1,
  CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115,
  CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES = 3,
};

#define MAX_DEVICES 16
/* Set in every device pointer handed out; see the header comment. */
#define DEVICE_BIT (1ull << 52)

/* ---- Failing loudly ---------------------------------------------------------------------- */

static void fail(const char* format, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void fail(const char* format, ...) {
  va_list args;
  va_start(args, format);
  fprintf(stderr, "CUDA driver stub: ");
  vfprintf(stderr, format, args);
  fprintf(stderr, "\n");
  va_end(args);
  abort();
}

/* Everything below is guarded by this lock: the library calls the driver from many threads. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
#define LOCKED(body)             \
  do {                           \
    pthread_mutex_lock(&lock);   \
    body;                        \
    pthread_mutex_unlock(&lock); \
  } while (0)

/* ---- Devices and contexts ---------------------------------------------------------------- */

typedef struct Stream Stream;

typedef struct {
  int device;
  int retained; /* primary context retain count */
  Stream* legacy; /* the legacy default stream, made on first use */
} Context;

/* Set by the first cuInit, and never changed after. */
static atomic_int initialized;
static int device_count;
static Context contexts[MAX_DEVICES];
static __thread Context* current;

static void need_init(const char* call) {
  if (!initialized) fail("%s called before cuInit", call);
}

/* The current context, which `call` needs; aborts without one. */
static Context* need_context(const char* call) {
  need_init(call);
  if (current == NULL) fail("%s called without a current context", call);
  if (current->retained == 0) {
    fail("%s called in device %d's primary context after its last release", call,
         current->device);
  }
  return current;
}

static void check_device(CUdevice device, const char* call) {
  need_init(call);
  if (device < 0 || device >= device_count) {
    fail("%s: device %d out of range (%d devices)", call, device, device_count);
  }
}

/* ---- Memory ------------------------------------------------------------------------------ */

/* A block of device or page-locked host memory. Records are never released (only the bytes
 * are), so queued work can tell that its memory was freed. */
typedef struct Allocation {
  char* bytes; /* the host memory behind it; NULL once freed */
  size_t size;
  uintptr_t address; /* what the caller sees: with DEVICE_BIT for device memory */
  int device; /* device memory: the device; page-locked memory: -1 */
  int ready; /* a stream-ordered allocation has run on its stream */
  int free_queued; /* cuMemFreeAsync was called for it */
  struct Allocation* next;
} Allocation;

static Allocation* live; /* the allocations not freed yet */
static Allocation* freed; /* the others' records */

static Allocation* new_allocation(size_t size, int device, int ready, int fill) {
  Allocation* a = calloc(1, sizeof *a);
  if (a == NULL || (a->bytes = malloc(size ? size : 1)) == NULL) {
    fail("out of host memory for %zu bytes", size);
  }
  memset(a->bytes, fill, size);
  a->size = size;
  a->address = (uintptr_t)a->bytes | (device >= 0 ? DEVICE_BIT : 0);
  a->device = device;
  a->ready = ready;
  a->next = live;
  live = a;
  return a;
}

/* The live allocation holding [address, address + size), or NULL. */
static Allocation* find_allocation(uintptr_t address, size_t size, int device_memory) {
  for (Allocation* a = live; a != NULL; a = a->next) {
    if ((a->device >= 0) != device_memory) continue;
    if (address >= a->address && address - a->address < (a->size ? a->size : 1)) {
      if (size > a->size - (address - a->address)) {
        fail("%zu bytes at 0x%llx run past the end of a %zu-byte allocation", size,
             (unsigned long long)address, a->size);
      }
      return a;
    }
  }
  return NULL;
}

/* The live device allocation of `device` holding `size` bytes at `address`; aborts otherwise. */
static Allocation* device_memory(CUdeviceptr address, size_t size, int device, const char* call) {
  Allocation* a = find_allocation((uintptr_t)address, size, 1);
  if (a == NULL) fail("%s: 0x%llx is not live device memory", call, address);
  if (a->free_queued) fail("%s: 0x%llx was already given to cuMemFreeAsync", call, address);
  if (a->device != device) {
    fail("%s: 0x%llx is memory of device %d, used from a stream of device %d", call, address,
         a->device, device);
  }
  return a;
}

/* ---- Streams and their queued work ------------------------------------------------------- */

typedef enum { OP_COPY, OP_WAIT, OP_ALLOCATE, OP_FREE, OP_STEP } OpKind;

/* What an OP_STEP runs: given its memory's bytes, it returns 1 when it ran, 0 when it cannot
 * run yet (its stream stops there until a later forcing finds it ready). */
typedef int (*StepFn)(void* arg, const void* src, void* dst);

/* One piece of queued work. A copy's sides are either inside an allocation (device or
 * page-locked memory, checked when the copy runs) or plain host memory (`*_allocation` NULL). */
typedef struct {
  OpKind kind;
  /* OP_COPY, and OP_STEP's memory (`src` may be 0) */
  uintptr_t dst, src;
  size_t size;
  Allocation *dst_allocation, *src_allocation;
  void* staged; /* owned copy of pageable source bytes */
  /* OP_WAIT: run `stream` up to (not including) its op number `until` */
  Stream* stream;
  unsigned long long until;
  /* OP_ALLOCATE, OP_FREE */
  Allocation* allocation;
  /* OP_STEP */
  StepFn step;
  void* step_arg;
} Op;

struct Stream {
  Context* context;
  int blocking; /* ordered with the legacy stream (created without CU_STREAM_NON_BLOCKING) */
  int legacy;
  int destroyed;
  /* Op numbers: `issued` so far, `done` of them ran. The queue holds ops done..issued-1,
   * op number n at queue[n - first]. */
  unsigned long long issued, done, first;
  Op* queue;
  size_t capacity;
  /* Scratch of ordered_before: in pass `pass`, the ops below `covered` come first. */
  unsigned long long pass, covered;
  /* Timing events recorded on it, to stamp once op number `until` of theirs ran (in order). */
  struct Stamp* stamps;
  size_t n_stamps, stamps_capacity;
  Stream* next;
};

typedef struct Stamp {
  struct Event* event;
  unsigned long long until;
} Stamp;

static Stream* streams; /* every stream ever made; records are kept to catch use after destroy */

static Stream* new_stream(Context* context, int blocking, int legacy) {
  Stream* s = calloc(1, sizeof *s);
  if (s == NULL) fail("out of host memory");
  s->context = context;
  s->blocking = blocking;
  s->legacy = legacy;
  s->next = streams;
  streams = s;
  return s;
}

/* The stream behind a handle: 0 and CU_STREAM_LEGACY (1) are the current context's legacy
 * stream. */
static Stream* stream_of(void* handle, const char* call) {
  if (handle == (void*)2) fail("%s: the per-thread default stream is not modelled", call);
  if (handle == NULL || handle == (void*)1) {
    Context* context = need_context(call);
    if (context->legacy == NULL) context->legacy = new_stream(context, 1, 1);
    return context->legacy;
  }
  Stream* s = handle;
  if (s->destroyed) fail("%s: stream %p used after cuStreamDestroy", call, handle);
  return s;
}

static int run_until(Stream* s, unsigned long long until);
static void stamp_reached(Stream* s);

/* Whether op `op` (not yet run) reads or writes allocation `a`. */
static int touches(const Op* op, const Allocation* a) {
  return (op->kind == OP_COPY || op->kind == OP_STEP) &&
         (op->dst_allocation == a || op->src_allocation == a);
}

/* Aborts when some stream still has queued work touching `a`, which is being freed. */
static void check_no_queued_use(const Allocation* a, const char* what) {
  for (Stream* s = streams; s != NULL; s = s->next) {
    for (unsigned long long n = s->done; n < s->issued; n++) {
      if (touches(&s->queue[n - s->first], a)) {
        fail("%s of 0x%llx (%zu bytes) while a copy touching it is still queued on %s %p of "
             "device %d: it may run after the free",
             what, (unsigned long long)a->address, a->size,
             s->legacy ? "the legacy stream" : "stream", (void*)s, s->context->device);
      }
    }
  }
}

/* Frees the memory of `a` (overwritten with `fill` first) and moves its record to `freed`. */
static void release_bytes(Allocation* a, int fill) {
  memset(a->bytes, fill, a->size);
  free(a->bytes);
  a->bytes = NULL;
  Allocation** link = &live;
  while (*link != a) link = &(*link)->next;
  *link = a->next;
  a->next = freed;
  freed = a;
}

/* Checks, as a copy runs, that its memory is still there and ready. */
static char* resolve(uintptr_t address, Allocation* a, const char* side) {
  if (a == NULL) return (char*)address;
  if (a->bytes == NULL) {
    fail("a queued copy %s 0x%llx ran after that memory was freed", side,
         (unsigned long long)address);
  }
  if (!a->ready) {
    fail("a copy %s 0x%llx ran before its stream-ordered allocation finished", side,
         (unsigned long long)address);
  }
  return a->bytes + (address - a->address);
}

/* Runs `op`; 0 when it cannot run yet (a step not ready, or a wait for one). */
static int run_op(Op* op) {
  switch (op->kind) {
    case OP_COPY: {
      char* dst = resolve(op->dst, op->dst_allocation, "to");
      const char* src = op->staged ? op->staged : resolve(op->src, op->src_allocation, "from");
      memmove(dst, src, op->size);
      free(op->staged);
      break;
    }
    case OP_WAIT:
      return run_until(op->stream, op->until);
    case OP_STEP: {
      const char* src = op->src ? resolve(op->src, op->src_allocation, "from") : NULL;
      return op->step(op->step_arg, src, resolve(op->dst, op->dst_allocation, "to"));
    }
    case OP_ALLOCATE:
      op->allocation->ready = 1;
      break;
    case OP_FREE:
      /* Work ordered before the free has run by now; work still queued elsewhere is not. */
      check_no_queued_use(op->allocation, "a stream-ordered free");
      release_bytes(op->allocation, 0xDD);
      break;
  }
  return 1;
}

/* Runs `s`'s queued work up to op number `until` (and the work it waits for); 0 when it
 * stopped at a step that cannot run yet. */
static int run_until(Stream* s, unsigned long long until) {
  while (s->done < until) {
    Op op = s->queue[s->done - s->first];
    s->done++; /* before running: a wait it triggers never comes back to this op */
    if (!run_op(&op)) {
      s->done--; /* it runs again, whole, at the next forcing */
      return 0;
    }
    stamp_reached(s);
  }
  if (s->done == s->issued) s->first = s->done; /* the queue is empty: start it over */
  return 1;
}

/* Runs `s`'s work up to op number `until`, waiting (without the lock) while a step cannot run:
 * a host wait for such work lasts until another thread or process lets it run. */
static void run_blocking(Stream* s, unsigned long long until) {
  while (!run_until(s, until)) {
    pthread_mutex_unlock(&lock);
    usleep(200);
    pthread_mutex_lock(&lock);
  }
}

static void run_all(Stream* s) { run_blocking(s, s->issued); }

/* Marks, for the current pass, the ops that op number `until` of `s` follows: those before it
 * on `s`, and (through the waits among them) on other streams. Ops already run count too. */
static unsigned long long pass;
static void cover(Stream* s, unsigned long long until) {
  unsigned long long from = s->pass == pass ? s->covered : s->done;
  if (until <= from) return;
  s->pass = pass;
  s->covered = until;
  for (unsigned long long n = from; n < until; n++) {
    const Op* op = &s->queue[n - s->first];
    if (op->kind == OP_WAIT) cover(op->stream, op->until);
  }
}

/* Aborts unless every queued copy touching `a` comes before op number `until` of `s` (a free
 * of `a` queued there): a copy that does not may run after the free on a GPU. */
static void check_ordered_before(const Allocation* a, Stream* s, unsigned long long until) {
  pass++;
  cover(s, until);
  for (Stream* t = streams; t != NULL; t = t->next) {
    unsigned long long first_free = t->pass == pass ? t->covered : t->done;
    for (unsigned long long n = first_free; n < t->issued; n++) {
      if (touches(&t->queue[n - t->first], a)) {
        fail("cuMemFreeAsync of 0x%llx (%zu bytes) on stream %p, while a copy touching it is "
             "queued on %s %p of device %d and not ordered before the free",
             (unsigned long long)a->address, a->size, (void*)s,
             t->legacy ? "the legacy stream" : "stream", (void*)t, t->context->device);
      }
    }
  }
}

/* What a GPU does as early as it may: frees (and the waits before them that are already
 * satisfied), so a use after a free shows. Copies and allocations stay queued until waited
 * for. */
static void run_ready_frees(void) {
  for (int progress = 1; progress;) {
    progress = 0;
    for (Stream* s = streams; s != NULL; s = s->next) {
      while (s->done < s->issued) {
        Op* op = &s->queue[s->done - s->first];
        int ready = op->kind == OP_FREE ||
                    (op->kind == OP_WAIT && op->stream->done >= op->until);
        if (!ready) break;
        (void)run_until(s, s->done + 1);
        progress = 1;
      }
    }
  }
}

static void append(Stream* s, Op op) {
  size_t used = (size_t)(s->issued - s->first);
  if (used == s->capacity) {
    /* Drop the ops that ran before growing. */
    size_t pending = (size_t)(s->issued - s->done);
    memmove(s->queue, s->queue + (s->done - s->first), pending * sizeof(Op));
    s->first = s->done;
    if (pending == s->capacity) {
      s->capacity = s->capacity ? 2 * s->capacity : 64;
      s->queue = realloc(s->queue, s->capacity * sizeof(Op));
      if (s->queue == NULL) fail("out of host memory");
    }
  }
  s->queue[s->issued - s->first] = op;
  s->issued++;
}

/* Queues on `s` the waits of the legacy stream's implicit ordering: the legacy stream waits
 * for the work issued so far on its context's blocking streams, a blocking stream for the work
 * issued so far on the legacy stream. */
static void order_with_legacy(Stream* s) {
  if (s->legacy) {
    for (Stream* other = streams; other != NULL; other = other->next) {
      if (other != s && other->blocking && !other->destroyed && other->context == s->context &&
          other->issued > other->done) {
        append(s, (Op){.kind = OP_WAIT, .stream = other, .until = other->issued});
      }
    }
  } else if (s->blocking) {
    Stream* legacy = s->context->legacy;
    if (legacy != NULL && legacy->issued > legacy->done) {
      append(s, (Op){.kind = OP_WAIT, .stream = legacy, .until = legacy->issued});
    }
  }
}

/* With DISCOVM_STUB_ONE_QUEUE, queues on `s` a wait for the work issued so far on every other
 * stream of its context, as one hardware queue orders it. */
static void order_in_one_queue(Stream* s) {
  static int one_queue = -1;
  if (one_queue < 0) one_queue = getenv("DISCOVM_STUB_ONE_QUEUE") != NULL;
  if (!one_queue) return;
  for (Stream* other = streams; other != NULL; other = other->next) {
    if (other != s && !other->destroyed && other->context == s->context &&
        other->issued > other->done) {
      append(s, (Op){.kind = OP_WAIT, .stream = other, .until = other->issued});
    }
  }
}

/* The stream new work goes to, checked against the current context; the implicit waits are
 * queued first. */
static Stream* stream_for_work(void* handle, const char* call) {
  Context* context = need_context(call);
  Stream* s = stream_of(handle, call);
  if (s->context != context) {
    fail("%s: stream %p belongs to device %d, but device %d's context is current", call,
         handle, s->context->device, context->device);
  }
  order_with_legacy(s);
  order_in_one_queue(s);
  return s;
}

/* ---- Initialization, devices, contexts --------------------------------------------------- */

CUresult cuInit(unsigned int flags) {
  (void)flags;
  LOCKED({
    if (!initialized) {
      const char* gpus = getenv("DISCOVM_STUB_GPUS");
      device_count = gpus ? atoi(gpus) : 1;
      if (device_count < 0 || device_count > MAX_DEVICES) {
        fail("DISCOVM_STUB_GPUS=%s: 0 to %d devices", gpus, MAX_DEVICES);
      }
      for (int d = 0; d < MAX_DEVICES; d++) contexts[d].device = d;
      initialized = device_count > 0;
    }
  });
  return initialized ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

CUresult cuDeviceGetCount(int* count) {
  need_init("cuDeviceGetCount");
  *count = device_count;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  need_init("cuDeviceGet");
  if (ordinal < 0 || ordinal >= device_count) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* value, int attribute, CUdevice device) {
  check_device(device, "cuDeviceGetAttribute");
  if (attribute != CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED) {
    fail("cuDeviceGetAttribute: attribute %d is not modelled", attribute);
  }
  *value = getenv("DISCOVM_STUB_NO_POOLS") == NULL;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(void** context, CUdevice device) {
  check_device(device, "cuDevicePrimaryCtxRetain");
  LOCKED(contexts[device].retained++);
  *context = &contexts[device];
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
  check_device(device, "cuDevicePrimaryCtxRelease");
  LOCKED({
    if (contexts[device].retained == 0) {
      fail("cuDevicePrimaryCtxRelease: device %d's primary context is not retained", device);
    }
    contexts[device].retained--;
  });
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(void** context) {
  need_init("cuCtxGetCurrent");
  *context = current;
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(void* context) {
  need_init("cuCtxSetCurrent");
  Context* c = context;
  if (c != NULL && (c < contexts || c >= contexts + device_count)) {
    fail("cuCtxSetCurrent: %p is not a primary context", context);
  }
  LOCKED({
    if (c != NULL && c->retained == 0) {
      fail("cuCtxSetCurrent: device %d's primary context is not retained", c->device);
    }
  });
  current = c;
  return CUDA_SUCCESS;
}

/* Runs all the work queued in the current context. */
CUresult cuCtxSynchronize(void) {
  LOCKED({
    Context* context = need_context("cuCtxSynchronize");
    for (Stream* s = streams; s != NULL; s = s->next) {
      if (s->context == context) run_all(s);
    }
    run_ready_frees();
  });
  return CUDA_SUCCESS;
}

/* ---- Streams ----------------------------------------------------------------------------- */

CUresult cuStreamCreate(void** stream, unsigned int flags) {
  if (flags & ~(unsigned)CU_STREAM_NON_BLOCKING) {
    fail("cuStreamCreate: flags %u are not modelled", flags);
  }
  LOCKED({
    Context* context = need_context("cuStreamCreate");
    *stream = new_stream(context, !(flags & CU_STREAM_NON_BLOCKING), 0);
  });
  return CUDA_SUCCESS;
}

/* Runs the stream's work; on the legacy stream that includes the blocking streams' earlier
 * work, as a GPU's legacy stream waits for it. */
CUresult cuStreamSynchronize(void* stream) {
  LOCKED({
    Stream* s = stream_of(stream, "cuStreamSynchronize");
    need_context("cuStreamSynchronize");
    if (s->legacy) order_with_legacy(s);
    run_all(s);
    run_ready_frees();
  });
  return CUDA_SUCCESS;
}

/* The driver finishes the stream's work after a destroy; here it runs at once. */
CUresult cuStreamDestroy_v2(void* stream) {
  LOCKED({
    need_context("cuStreamDestroy");
    Stream* s = stream_of(stream, "cuStreamDestroy");
    if (s->legacy) fail("cuStreamDestroy: the legacy stream cannot be destroyed");
    run_all(s);
    run_ready_frees();
    s->destroyed = 1;
    free(s->queue);
    s->queue = NULL;
    s->capacity = 0;
    free(s->stamps);
    s->stamps = NULL;
    s->n_stamps = s->stamps_capacity = 0;
  });
  return CUDA_SUCCESS;
}

/* ---- Events ------------------------------------------------------------------------------ */

typedef struct Event {
  Context* context;
  Stream* stream; /* where it was last recorded; NULL if never */
  unsigned long long until; /* the stream's op count at that recording */
  int destroyed;
  int timing; /* made without CU_EVENT_DISABLE_TIMING */
  int stamped; /* its latest recording was reached, at `stamp_ns` */
  unsigned long long stamp_ns;
  struct Event* next;
} Event;

static unsigned long long monotonic_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
}

/* Has timing event `e`, just recorded on `s` behind queued work, stamped when that work ran. */
static void stamp_later(Stream* s, Event* e) {
  if (s->n_stamps == s->stamps_capacity) {
    s->stamps_capacity = s->stamps_capacity ? 2 * s->stamps_capacity : 16;
    s->stamps = realloc(s->stamps, s->stamps_capacity * sizeof(Stamp));
    if (s->stamps == NULL) fail("out of host memory");
  }
  s->stamps[s->n_stamps].event = e;
  s->stamps[s->n_stamps].until = e->until;
  s->n_stamps++;
}

/* Stamps the timing events recorded on `s` whose work before them ran. */
static void stamp_reached(Stream* s) {
  size_t n = 0;
  while (n < s->n_stamps && s->stamps[n].until <= s->done) {
    Event* e = s->stamps[n].event;
    /* A later recording elsewhere replaced this one. */
    if (e->stream == s && e->until == s->stamps[n].until && !e->stamped) {
      e->stamped = 1;
      e->stamp_ns = monotonic_ns();
    }
    n++;
  }
  memmove(s->stamps, s->stamps + n, (s->n_stamps - n) * sizeof(Stamp));
  s->n_stamps -= n;
}

static Event* events; /* every event ever made, kept to catch use after destroy */

static Event* event_of(void* handle, const char* call) {
  Event* e = handle;
  if (e == NULL) fail("%s: NULL event", call);
  if (e->destroyed) fail("%s: event %p used after cuEventDestroy", call, handle);
  return e;
}

/* Whether the work before the event's recording is still queued. */
static int pending(const Event* e) { return e->stream != NULL && e->stream->done < e->until; }

CUresult cuEventCreate(void** event, unsigned int flags) {
  if (flags & ~(unsigned)CU_EVENT_DISABLE_TIMING) {
    fail("cuEventCreate: flags %u are not modelled", flags);
  }
  LOCKED({
    Event* e = calloc(1, sizeof *e);
    if (e == NULL) fail("out of host memory");
    e->timing = !(flags & CU_EVENT_DISABLE_TIMING);
    e->context = need_context("cuEventCreate");
    e->next = events;
    events = e;
    *event = e;
  });
  return CUDA_SUCCESS;
}

CUresult cuEventRecord(void* event, void* stream) {
  LOCKED({
    Event* e = event_of(event, "cuEventRecord");
    Stream* s = stream_for_work(stream, "cuEventRecord");
    if (e->context != s->context) {
      fail("cuEventRecord: event %p of device %d recorded on a stream of device %d", event,
           e->context->device, s->context->device);
    }
    e->stream = s;
    e->until = s->issued;
    e->stamped = 0;
    if (e->timing && s->done == s->issued) {
      e->stamped = 1;
      e->stamp_ns = monotonic_ns();
    } else if (e->timing) {
      stamp_later(s, e);
    }
  });
  return CUDA_SUCCESS;
}

/* The time between the two events' stamps; CUDA_ERROR_NOT_READY while the work before either
 * is pending, CUDA_ERROR_INVALID_HANDLE for one never recorded or made without timing. */
CUresult cuEventElapsedTime(float* ms, void* start, void* end) {
  CUresult result = CUDA_SUCCESS;
  LOCKED({
    need_context("cuEventElapsedTime");
    Event* from = event_of(start, "cuEventElapsedTime");
    Event* to = event_of(end, "cuEventElapsedTime");
    if (from->context != to->context) {
      fail("cuEventElapsedTime: events %p and %p are of devices %d and %d", start, end,
           from->context->device, to->context->device);
    }
    if (!from->timing || !to->timing || from->stream == NULL || to->stream == NULL) {
      result = CUDA_ERROR_INVALID_HANDLE;
    } else if (!from->stamped || !to->stamped) {
      result = CUDA_ERROR_NOT_READY;
    } else {
      *ms = (float)(((double)to->stamp_ns - (double)from->stamp_ns) / 1e6);
    }
  });
  return result;
}

/* Not ready while the work before the recording is queued; that work then runs, so a later
 * query finds it done. */
CUresult cuEventQuery(void* event) {
  CUresult result = CUDA_SUCCESS;
  LOCKED({
    need_context("cuEventQuery");
    Event* e = event_of(event, "cuEventQuery");
    if (pending(e)) {
      (void)run_until(e->stream, e->until);
      run_ready_frees();
      result = CUDA_ERROR_NOT_READY;
    }
  });
  return result;
}

CUresult cuEventSynchronize(void* event) {
  LOCKED({
    need_context("cuEventSynchronize");
    Event* e = event_of(event, "cuEventSynchronize");
    if (pending(e)) run_blocking(e->stream, e->until);
    run_ready_frees();
  });
  return CUDA_SUCCESS;
}

/* A recording still pending stays in its stream's queue, as on a GPU. */
CUresult cuEventDestroy_v2(void* event) {
  LOCKED({
    need_context("cuEventDestroy");
    event_of(event, "cuEventDestroy")->destroyed = 1;
  });
  return CUDA_SUCCESS;
}

/* The stream waits for the work before the event's latest recording (on any device); an event
 * never recorded is no wait. */
CUresult cuStreamWaitEvent(void* stream, void* event, unsigned int flags) {
  (void)flags;
  LOCKED({
    Event* e = event_of(event, "cuStreamWaitEvent");
    Stream* s = stream_for_work(stream, "cuStreamWaitEvent");
    if (pending(e)) append(s, (Op){.kind = OP_WAIT, .stream = e->stream, .until = e->until});
  });
  return CUDA_SUCCESS;
}

/* ---- Memory pools ------------------------------------------------------------------------ */

/* A pool is its device's context; its attributes change nothing here. */
CUresult cuDeviceGetDefaultMemPool(void** pool, CUdevice device) {
  check_device(device, "cuDeviceGetDefaultMemPool");
  *pool = &contexts[device];
  return CUDA_SUCCESS;
}

CUresult cuMemPoolSetAttribute(void* pool, int attribute, void* value) {
  Context* context = pool;
  if (context < contexts || context >= contexts + device_count) {
    fail("cuMemPoolSetAttribute: %p is not a default pool", pool);
  }
  if (attribute != CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES) {
    fail("cuMemPoolSetAttribute: attribute %d is not modelled", attribute);
  }
  if (*(int*)value != 0 && *(int*)value != 1) {
    fail("cuMemPoolSetAttribute: %d is not a boolean", *(int*)value);
  }
  return CUDA_SUCCESS;
}

/* ---- Allocation -------------------------------------------------------------------------- */

/* Memory that is usable in stream order: copies may use it once the allocation ran on
 * `stream`. */
CUresult cuMemAllocAsync(CUdeviceptr* address, size_t size, void* stream) {
  LOCKED({
    Stream* s = stream_for_work(stream, "cuMemAllocAsync");
    Allocation* a = new_allocation(size, s->context->device, 0, 0xCD);
    append(s, (Op){.kind = OP_ALLOCATE, .allocation = a});
    *address = a->address;
  });
  return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr* address, size_t size) {
  LOCKED({
    Context* context = need_context("cuMemAlloc");
    *address = new_allocation(size, context->device, 1, 0xCD)->address;
  });
  return CUDA_SUCCESS;
}

/* Frees once the work issued before on `stream` ran; see run_op for the checks then. */
CUresult cuMemFreeAsync(CUdeviceptr address, void* stream) {
  LOCKED({
    Stream* s = stream_for_work(stream, "cuMemFreeAsync");
    Allocation* a = find_allocation((uintptr_t)address, 0, 1);
    if (a == NULL || a->address != address || a->free_queued) {
      fail("cuMemFreeAsync: 0x%llx is not a live device allocation", address);
    }
    a->free_queued = 1;
    append(s, (Op){.kind = OP_FREE, .allocation = a});
    check_ordered_before(a, s, s->issued - 1);
    run_ready_frees();
  });
  return CUDA_SUCCESS;
}

/* Frees at once: work still queued that touches the memory is a use after free. */
CUresult cuMemFree_v2(CUdeviceptr address) {
  LOCKED({
    need_context("cuMemFree");
    Allocation* a = find_allocation((uintptr_t)address, 0, 1);
    if (a == NULL || a->address != address || a->free_queued) {
      fail("cuMemFree: 0x%llx is not a live device allocation", address);
    }
    check_no_queued_use(a, "cuMemFree");
    release_bytes(a, 0xDD);
  });
  return CUDA_SUCCESS;
}

CUresult cuMemHostAlloc(void** pointer, size_t size, unsigned int flags) {
  (void)flags;
  LOCKED({
    need_context("cuMemHostAlloc");
    *pointer = (void*)new_allocation(size, -1, 1, 0xAB)->address;
  });
  return CUDA_SUCCESS;
}

CUresult cuMemFreeHost(void* pointer) {
  LOCKED({
    need_context("cuMemFreeHost");
    Allocation* a = find_allocation((uintptr_t)pointer, 0, 0);
    if (a == NULL || a->address != (uintptr_t)pointer) {
      fail("cuMemFreeHost: %p is not live page-locked memory", pointer);
    }
    check_no_queued_use(a, "cuMemFreeHost");
    release_bytes(a, 0xEE);
  });
  return CUDA_SUCCESS;
}

/* ---- Copies ------------------------------------------------------------------------------ */

/* Queues a copy of `size` bytes on the stream `stream`; a side with an allocation is checked
 * when the copy runs. */
static void queue_copy(Stream* s, uintptr_t dst, Allocation* dst_allocation, uintptr_t src,
                       Allocation* src_allocation, void* staged, size_t size) {
  append(s, (Op){.kind = OP_COPY,
                 .dst = dst,
                 .src = src,
                 .size = size,
                 .dst_allocation = dst_allocation,
                 .src_allocation = src_allocation,
                 .staged = staged});
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t size, void* stream) {
  LOCKED({
    Stream* s = stream_for_work(stream, "cuMemcpyHtoDAsync");
    Allocation* to = device_memory(dst, size, s->context->device, "cuMemcpyHtoDAsync");
    Allocation* pinned = find_allocation((uintptr_t)src, size, 0);
    void* staged = NULL;
    if (pinned == NULL) {
      /* Pageable memory: the driver takes the bytes before returning. */
      staged = malloc(size ? size : 1);
      if (staged == NULL) fail("out of host memory for %zu bytes", size);
      memcpy(staged, src, size);
    }
    queue_copy(s, dst, to, (uintptr_t)src, pinned, staged, size);
  });
  return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t size, void* stream) {
  LOCKED({
    Stream* s = stream_for_work(stream, "cuMemcpyDtoHAsync");
    Allocation* from = device_memory(src, size, s->context->device, "cuMemcpyDtoHAsync");
    Allocation* pinned = find_allocation((uintptr_t)dst, size, 0);
    queue_copy(s, (uintptr_t)dst, pinned, src, from, NULL, size);
    /* Into pageable memory the driver returns once the bytes arrived. */
    if (pinned == NULL) {
      run_all(s);
      run_ready_frees();
    }
  });
  return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t size, void* stream) {
  LOCKED({
    Stream* s = stream_for_work(stream, "cuMemcpyDtoDAsync");
    int device = s->context->device;
    Allocation* to = device_memory(dst, size, device, "cuMemcpyDtoDAsync (destination)");
    Allocation* from = device_memory(src, size, device, "cuMemcpyDtoDAsync (source)");
    queue_copy(s, dst, to, src, from, NULL, size);
  });
  return CUDA_SUCCESS;
}

/* A copy between the memory of two contexts' devices, on a stream of the current context. */
CUresult cuMemcpyPeerAsync(CUdeviceptr dst, void* dst_context, CUdeviceptr src,
                           void* src_context, size_t size, void* stream) {
  LOCKED({
    Stream* s = stream_for_work(stream, "cuMemcpyPeerAsync");
    Context* to_context = dst_context;
    Context* from_context = src_context;
    Allocation* to =
        device_memory(dst, size, to_context->device, "cuMemcpyPeerAsync (destination)");
    Allocation* from = device_memory(src, size, from_context->device, "cuMemcpyPeerAsync (source)");
    queue_copy(s, dst, to, src, from, NULL, size);
  });
  return CUDA_SUCCESS;
}

/* ---- The NCCL stand-in's work ------------------------------------------------------------ */

/* Not a driver call: how the NCCL stand-in queues a collective's work on a stream of the
 * current context, as NCCL queues a kernel. `step` runs with the bytes of `src` (`src_size`
 * bytes of device memory, or none when `src` is 0) and `dst` when the work before it ran, and
 * again at later forcings for as long as it returns 0 (a rank waiting for its peers). Unlike
 * other work, it is forced at once (with the work before it): a rank's side of a collective
 * must not wait for its own host to wait for it, or its peers would wait for ever. */
CUresult discovmStubQueueStep(void* stream, CUdeviceptr src, size_t src_size, CUdeviceptr dst,
                              size_t dst_size, StepFn step, void* arg) {
  LOCKED({
    Stream* s = stream_for_work(stream, "discovmStubQueueStep");
    int device = s->context->device;
    Allocation* from =
        src ? device_memory(src, src_size, device, "discovmStubQueueStep (source)") : NULL;
    Allocation* to = device_memory(dst, dst_size, device, "discovmStubQueueStep (destination)");
    append(s, (Op){.kind = OP_STEP,
                   .dst = dst,
                   .src = src,
                   .size = dst_size,
                   .dst_allocation = to,
                   .src_allocation = from,
                   .step = step,
                   .step_arg = arg});
    /* As a GPU would start it: the stream's work runs now as far as it can, the step too. */
    (void)run_until(s, s->issued);
    run_ready_frees();
  });
  return CUDA_SUCCESS;
}

/* ---- Errors ------------------------------------------------------------------------------ */

CUresult cuGetErrorName(CUresult error, const char** name) {
  switch (error) {
    case CUDA_SUCCESS: *name = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_NO_DEVICE: *name = "CUDA_ERROR_NO_DEVICE"; break;
    case CUDA_ERROR_INVALID_DEVICE: *name = "CUDA_ERROR_INVALID_DEVICE"; break;
    case CUDA_ERROR_INVALID_HANDLE: *name = "CUDA_ERROR_INVALID_HANDLE"; break;
    case CUDA_ERROR_NOT_READY: *name = "CUDA_ERROR_NOT_READY"; break;
    default: *name = "CUDA_ERROR_UNKNOWN"; break;
  }
  return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char** text) {
  (void)error;
  *text = "an error of the CUDA driver stub";
  return CUDA_SUCCESS;
}
