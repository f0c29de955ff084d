/* A stand-in for libnccl.so.2 for the CUDA tests run against the CUDA driver stand-in
 * (cuda_driver_stub.c): communicators of a single rank whose collectives are device-to-device
 * copies queued, through that driver (libcuda.so.1), on the stream they are given, so they are
 * ordered with the stream's other work as NCCL's kernels are. With one rank, an all-reduce (any
 * operation), an all-gather and a broadcast copy the send buffer into the receive buffer, and a
 * send to rank 0 is received by the matching receive of the same group.
 *
 * Communicators made with ncclCommInitRankConfig and `blocking = 0` are non-blocking: joining,
 * finalizing and every collective return ncclInProgress, and ncclCommGetAsyncError reports
 * ncclInProgress once more before ncclSuccess, so callers poll as they must with NCCL. A call
 * on a communicator whose operation is still in progress, a collective on a stream of another
 * device than the communicator's, a communicator made without a current CUDA context, a
 * point-to-point call outside a group and a send without its receive abort with a message on
 * stderr, as misuse of NCCL is a bug; more than one rank is refused with ncclInvalidUsage.
 *
 * With NCCL_STUB_FAIL_ALLREDUCE=n, the n-th ncclAllReduce of the process is queued as any other,
 * and then its communicator fails as NCCL's do when a peer or the network does: every poll of
 * ncclCommGetAsyncError after the one that ended the call reports ncclRemoteError.
 *
 * It does not model: more than one rank (so no transfers between GPUs), ncclCommSplit,
 * reduction arithmetic, or NCCL's own threads. Built as libnccl.so.2 by
 * tests/cuda_stub_driver.rs. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../c/cuda_driver.h"
#include "nccl_abi.h"

typedef struct {
  void* context; /* the CUDA context current when it was made: its device */
  int blocking;
  int polls_left; /* polls of ncclCommGetAsyncError that still report ncclInProgress */
  int finalized;
  int failing; /* 1: fails once its operation in progress ends; 2: failed */
} Comm;
typedef Comm* ncclComm_t;

static void fail(const char* format, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void fail(const char* format, ...) {
  va_list args;
  va_start(args, format);
  fprintf(stderr, "NCCL stub: ");
  vfprintf(stderr, format, args);
  fprintf(stderr, "\n");
  va_end(args);
  abort();
}

/* ---- The CUDA driver --------------------------------------------------------------------- */

static struct {
  int (*ctx_get_current)(void**);
  int (*ctx_set_current)(void*);
  int (*memcpy_dtod_async)(CUdeviceptr, CUdeviceptr, size_t, cudaStream_t);
} cu;

static void load_driver(void) {
  if (cu.memcpy_dtod_async != NULL) return;
  driver_function(&cu.ctx_get_current, "cuCtxGetCurrent");
  driver_function(&cu.ctx_set_current, "cuCtxSetCurrent");
  driver_function(&cu.memcpy_dtod_async, "cuMemcpyDtoDAsync_v2");
}

static void* current_context(void) {
  void* context = NULL;
  if (cu.ctx_get_current(&context) != 0) fail("cuCtxGetCurrent failed");
  return context;
}

/* Queues a copy of `size` bytes on `stream` in the communicator's context, as NCCL's kernel
 * would run there; the driver checks that the stream and both buffers belong to it. */
static int copy(Comm* comm, void* dst, const void* src, size_t size, cudaStream_t stream) {
  if (size == 0 || dst == src) return ncclSuccess;
  void* previous = current_context();
  cu.ctx_set_current(comm->context);
  int result = cu.memcpy_dtod_async((CUdeviceptr)dst, (CUdeviceptr)src, size, stream);
  cu.ctx_set_current(previous);
  if (result != 0) fail("cuMemcpyDtoDAsync failed: CUDA error %d", result);
  return ncclSuccess;
}

/* ---- Communicators ----------------------------------------------------------------------- */

static size_t type_size(int type) {
  switch (type) {
    case 0: case 1: case 10: case 11: return 1; /* int8, uint8, fp8 e4m3 and e5m2 */
    case 6: case 9: return 2; /* float16, bfloat16 */
    case 2: case 3: case 7: return 4; /* int32, uint32, float32 */
    case 4: case 5: case 8: return 8; /* int64, uint64, float64 */
    default: fail("data type %d is not an NCCL type", type);
  }
}

/* Checks that a call may be made on `comm` now. */
static void usable(Comm* comm, const char* call) {
  if (comm == NULL) fail("%s: NULL communicator", call);
  if (comm->polls_left > 0) fail("%s on a communicator whose last operation is in progress", call);
  if (comm->finalized) fail("%s on a finalized communicator", call);
}

/* What a call on `comm` returns: a non-blocking communicator reports it in progress. */
static int started(Comm* comm) {
  if (comm->blocking) return ncclSuccess;
  comm->polls_left = 1;
  return ncclInProgress;
}

static int join(Comm** out, int nranks, int rank, int blocking) {
  load_driver();
  if (nranks != 1 || rank != 0) {
    fprintf(stderr, "NCCL stub: rank %d of %d: only single-rank communicators are modelled\n",
            rank, nranks);
    *out = NULL;
    return ncclInvalidUsage;
  }
  void* context = current_context();
  if (context == NULL) fail("a communicator made without a current CUDA context has no device");
  Comm* comm = calloc(1, sizeof *comm);
  if (comm == NULL) fail("out of memory");
  comm->context = context;
  comm->blocking = blocking;
  *out = comm;
  return started(comm);
}

int ncclGetVersion(int* version) {
  *version = 22105;
  return ncclSuccess;
}

int ncclGetUniqueId(ncclUniqueId* id) {
  memset(id->internal, 0x5a, sizeof id->internal);
  return ncclSuccess;
}

const char* ncclGetErrorString(int result) {
  switch (result) {
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    default: return "error of the NCCL stub";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  (void)comm;
  return "the NCCL stub models single-rank communicators only";
}

int ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  (void)id;
  return join(comm, nranks, rank, 1);
}

int ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                           ncclConfig_t* config) {
  (void)id;
  return join(comm, nranks, rank, config == NULL || config->blocking != 0);
}

int ncclCommGetAsyncError(ncclComm_t comm, int* error) {
  if (comm == NULL) fail("ncclCommGetAsyncError: NULL communicator");
  if (comm->polls_left > 0) {
    comm->polls_left--;
    *error = ncclInProgress;
  } else if (comm->failing == 2) {
    *error = ncclRemoteError;
  } else {
    comm->failing += comm->failing; /* the call ended well; from the next poll on, it failed */
    *error = ncclSuccess;
  }
  return ncclSuccess;
}

int ncclCommFinalize(ncclComm_t comm) {
  usable(comm, "ncclCommFinalize");
  int result = started(comm);
  comm->finalized = 1;
  return result;
}

int ncclCommDestroy(ncclComm_t comm) {
  if (comm == NULL) fail("ncclCommDestroy: NULL communicator");
  if (comm->polls_left > 0) fail("ncclCommDestroy while an operation is in progress");
  free(comm);
  return ncclSuccess;
}

/* Allowed at any time, in progress or not. */
int ncclCommAbort(ncclComm_t comm) {
  free(comm);
  return ncclSuccess;
}

/* ---- Collectives ------------------------------------------------------------------------- */

int ncclAllReduce(const void* send, void* recv, size_t count, int type, int op, ncclComm_t comm,
                  cudaStream_t stream) {
  (void)op;
  usable(comm, "ncclAllReduce");
  if (comm->failing == 2) return ncclRemoteError;
  static int calls;
  const char* fail_at = getenv("NCCL_STUB_FAIL_ALLREDUCE");
  if (fail_at != NULL && ++calls == atoi(fail_at)) comm->failing = 1;
  copy(comm, recv, send, count * type_size(type), stream);
  return started(comm);
}

int ncclAllGather(const void* send, void* recv, size_t count, int type, ncclComm_t comm,
                  cudaStream_t stream) {
  usable(comm, "ncclAllGather");
  copy(comm, recv, send, count * type_size(type), stream);
  return started(comm);
}

int ncclBroadcast(const void* send, void* recv, size_t count, int type, int root,
                  ncclComm_t comm, cudaStream_t stream) {
  usable(comm, "ncclBroadcast");
  if (root != 0) return ncclInvalidArgument;
  copy(comm, recv, send, count * type_size(type), stream);
  return started(comm);
}

/* ---- Groups and point-to-point ----------------------------------------------------------- */

/* The sends and receives of the calling thread's open group, matched at ncclGroupEnd. */
typedef struct {
  Comm* comm;
  void* buffer;
  size_t size;
  cudaStream_t stream;
} Transfer;

#define MAX_TRANSFERS 64
static __thread int group_depth;
static __thread Transfer sends[MAX_TRANSFERS], recvs[MAX_TRANSFERS];
static __thread int nsends, nrecvs;

static int transfer(Transfer* list, int* n, const char* call, void* buffer, size_t count,
                    int type, int peer, Comm* comm, cudaStream_t stream) {
  usable(comm, call);
  if (group_depth == 0) fail("%s outside a group: a single rank would wait for itself", call);
  if (peer != 0) return ncclInvalidArgument;
  if (*n == MAX_TRANSFERS) fail("%s: more than %d in one group", call, MAX_TRANSFERS);
  list[(*n)++] = (Transfer){comm, buffer, count * type_size(type), stream};
  return ncclSuccess;
}

int ncclSend(const void* send, size_t count, int type, int peer, ncclComm_t comm,
             cudaStream_t stream) {
  return transfer(sends, &nsends, "ncclSend", (void*)send, count, type, peer, comm, stream);
}

int ncclRecv(void* recv, size_t count, int type, int peer, ncclComm_t comm, cudaStream_t stream) {
  return transfer(recvs, &nrecvs, "ncclRecv", recv, count, type, peer, comm, stream);
}

int ncclGroupStart(void) {
  group_depth++;
  return ncclSuccess;
}

/* The outermost end pairs the i-th send with the i-th receive, as NCCL matches them. */
int ncclGroupEnd(void) {
  if (group_depth == 0) fail("ncclGroupEnd without ncclGroupStart");
  if (--group_depth > 0) return ncclSuccess;
  if (nsends != nrecvs) fail("a group with %d sends and %d receives on one rank", nsends, nrecvs);
  for (int i = 0; i < nsends; i++) {
    Transfer* s = &sends[i];
    Transfer* r = &recvs[i];
    if (s->size != r->size) fail("a send of %zu bytes met a receive of %zu", s->size, r->size);
    if (s->comm != r->comm || s->stream != r->stream) {
      fail("a send and its receive on different communicators or streams are not modelled");
    }
    copy(r->comm, r->buffer, s->buffer, r->size, r->stream);
  }
  nsends = nrecvs = 0;
  return ncclSuccess;
}
