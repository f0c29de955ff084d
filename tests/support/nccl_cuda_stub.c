/* A stand-in for libnccl.so.2 for the CUDA tests run against the CUDA driver stand-in
 * (cuda_driver_stub.c): communicators whose collectives are work queued, through that driver
 * (libcuda.so.1), on the stream they are given, so they are ordered with the stream's other
 * work as NCCL's kernels are. With one rank, an all-reduce (any operation), an all-gather and a
 * broadcast copy the send buffer into the receive buffer, and a send to rank 0 is received by
 * the matching receive of the same group.
 *
 * With NCCL_STUB_SHARED_RANKS set, communicators of up to 8 ranks are modelled too, the ranks in
 * threads or processes of one machine: they meet in a file of /dev/shm named by the unique id
 * (ncclGetUniqueId makes a random one). Joining is in progress until every rank joined. A
 * collective is a step queued on the stream (discovmStubQueueStep of the driver stand-in, which
 * runs the stream's work at once as far as it can): when the work before it ran, it leaves its
 * send bytes (at most 64 KiB) in its rank's cell, then cannot run, and holds its stream, until
 * every rank left its own; then it computes its receive buffer (unless the ranks disagree on
 * the collective or its size: then it waits for ever, as NCCL may). So a rank whose peer never queues its side waits on its GPU for ever, as with
 * NCCL, until ncclCommAbort, after which its queued collectives end without writing. Modelled:
 * the all-reduce (sum, product, max, min, average of int32, uint32, int64, uint64, float32 and
 * float64), the all-gather and the broadcast; such communicators are never freed, so that work
 * queued on them may still run after their abort.
 *
 * Communicators made with ncclCommInitRankConfig and `blocking = 0` are non-blocking: joining,
 * finalizing and every collective return ncclInProgress, and ncclCommGetAsyncError reports
 * ncclInProgress once more before ncclSuccess, so callers poll as they must with NCCL. A call
 * on a communicator whose operation is still in progress, a collective on a stream of another
 * device than the communicator's, a communicator made without a current CUDA context, a
 * point-to-point call outside a group and a send without its receive abort with a message on
 * stderr, as misuse of NCCL is a bug; more than one rank is refused with ncclInvalidUsage
 * unless NCCL_STUB_SHARED_RANKS is set (below).
 *
 * With NCCL_STUB_CONNECT set, the first collective of a non-blocking communicator of several
 * ranks connects it to the others, as NCCL's lazy connection does: it stays in progress until
 * every rank queued its first collective (for ever, for a rank whose peer never does).
 *
 * With NCCL_STUB_FAIL_ALLREDUCE=n, the n-th ncclAllReduce of the process is queued as any other,
 * and then its communicator fails as NCCL's do when a peer or the network does: every poll of
 * ncclCommGetAsyncError after the one that ended the call reports ncclRemoteError.
 *
 * It does not model: transfers between ranks, ncclCommSplit, reduction arithmetic of other
 * dtypes, or NCCL's own threads. Built as libnccl.so.2 by tests/cuda_stub_driver.rs. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../c/cuda_driver.h"
#include "nccl_abi.h"

enum { MAX_RANKS = 8, SLOTS = 16, SLOT_BYTES = 1 << 16 };

/* A rank's cell for the collectives of one slot (those whose number is the slot's, modulo
 * SLOTS). */
typedef struct {
  _Atomic unsigned long long seq; /* 1 + the number of the collective it holds; 0: none yet */
  atomic_int taken; /* ranks that computed that collective's result from it */
  int kind; /* that collective's, and the bytes each rank sends in it */
  size_t size;
  char bytes[SLOT_BYTES]; /* its send bytes */
} Cell;

/* What the ranks of a communicator share, in the file named by its unique id. */
typedef struct {
  atomic_int joined;
  atomic_int connected; /* ranks that queued their first collective (NCCL_STUB_CONNECT) */
  Cell cells[SLOTS][MAX_RANKS];
} Shared;

typedef struct {
  void* context; /* the CUDA context current when it was made: its device */
  int blocking;
  int polls_left; /* polls of ncclCommGetAsyncError that still report ncclInProgress */
  int finalized;
  int failing; /* 1: fails once its operation in progress ends; 2: failed */
  int rank, nranks;
  Shared* shared; /* of several ranks only */
  unsigned long long queued; /* its collectives so far (several ranks) */
  int connecting; /* its first collective connects it to the other ranks (NCCL_STUB_CONNECT) */
  atomic_int aborted;
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
  int (*queue_step)(cudaStream_t, CUdeviceptr, size_t, CUdeviceptr, size_t,
                    int (*)(void*, const void*, void*), void*);
} cu;

static void load_driver(void) {
  if (cu.memcpy_dtod_async != NULL) return;
  driver_function(&cu.ctx_get_current, "cuCtxGetCurrent");
  driver_function(&cu.ctx_set_current, "cuCtxSetCurrent");
  driver_function(&cu.memcpy_dtod_async, "cuMemcpyDtoDAsync_v2");
  driver_function(&cu.queue_step, "discovmStubQueueStep");
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

/* Whether `comm` still connects to the other ranks: its first collective is in progress until
 * every rank queued its own. */
static int connecting(Comm* comm) {
  return comm->connecting && atomic_load(&comm->shared->connected) < comm->nranks;
}

/* Checks that a call may be made on `comm` now. */
static void usable(Comm* comm, const char* call) {
  if (comm == NULL) fail("%s: NULL communicator", call);
  if (comm->polls_left > 0 || connecting(comm)) {
    fail("%s on a communicator whose last operation is in progress", call);
  }
  if (comm->finalized) fail("%s on a finalized communicator", call);
}

/* What a call on `comm` returns: a non-blocking communicator reports it in progress. */
static int started(Comm* comm) {
  if (comm->blocking) return ncclSuccess;
  comm->polls_left = 1;
  return ncclInProgress;
}

/* The ranks' shared file of unique id `id`, mapped; made by the first rank that joins, and
 * unlinked by the last (each keeps its mapping). */
static Shared* meet(const ncclUniqueId* id, int nranks) {
  char name[64] = "/dev/shm/discovm-nccl-stub-";
  for (int i = 0; i < 16; i++) {
    snprintf(name + strlen(name), 3, "%02x", (unsigned char)id->internal[i]);
  }
  int fd = open(name, O_RDWR | O_CREAT, 0600);
  if (fd < 0 || ftruncate(fd, sizeof(Shared)) != 0) fail("cannot make %s", name);
  Shared* shared = mmap(NULL, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (shared == MAP_FAILED) fail("cannot map %s", name);
  if (atomic_fetch_add(&shared->joined, 1) + 1 == nranks) unlink(name);
  return shared;
}

/* Whether every rank of `comm` joined. */
static int all_joined(Comm* comm) {
  return comm->shared == NULL || atomic_load(&comm->shared->joined) >= comm->nranks;
}

static int join(Comm** out, int nranks, const ncclUniqueId* id, int rank, int blocking) {
  load_driver();
  int shared = nranks > 1 && getenv("NCCL_STUB_SHARED_RANKS") != NULL;
  if ((nranks != 1 && !shared) || nranks > MAX_RANKS || rank < 0 || rank >= nranks) {
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
  comm->rank = rank;
  comm->nranks = nranks;
  if (shared) comm->shared = meet(id, nranks);
  *out = comm;
  if (blocking) {
    while (!all_joined(comm)) usleep(200);
  }
  return started(comm);
}

int ncclGetVersion(int* version) {
  *version = 22105;
  return ncclSuccess;
}

int ncclGetUniqueId(ncclUniqueId* id) {
  memset(id->internal, 0x5a, sizeof id->internal);
  int fd = open("/dev/urandom", O_RDONLY);
  if (fd < 0 || read(fd, id->internal, 16) != 16) fail("cannot read /dev/urandom");
  close(fd);
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
  return join(comm, nranks, &id, rank, 1);
}

int ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                           ncclConfig_t* config) {
  return join(comm, nranks, &id, rank, config == NULL || config->blocking != 0);
}

int ncclCommGetAsyncError(ncclComm_t comm, int* error) {
  if (comm == NULL) fail("ncclCommGetAsyncError: NULL communicator");
  if (!all_joined(comm) || connecting(comm)) {
    *error = ncclInProgress;
  } else if (comm->polls_left > 0) {
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
  if (comm->shared == NULL) free(comm);
  return ncclSuccess;
}

/* Allowed at any time, in progress or not: its queued collectives end without writing. */
int ncclCommAbort(ncclComm_t comm) {
  if (comm->shared == NULL) {
    free(comm);
  } else {
    atomic_store(&comm->aborted, 1);
  }
  return ncclSuccess;
}

/* ---- Collectives of several ranks -------------------------------------------------------- */

enum { ALLREDUCE, ALLGATHER, BROADCAST };

/* A collective of a communicator of several ranks, queued as a step on its stream. */
typedef struct {
  Comm* comm;
  unsigned long long seq; /* its number on the communicator */
  int kind, type, op, root;
  size_t bytes; /* the send bytes of each rank */
  int left; /* its send bytes are in its cell */
} Collective;

/* Element i of the cell's bytes as a double (integers of up to 53 bits are exact). */
static double element(const char* bytes, int type, size_t i) {
  switch (type) {
    case 2: return ((const int32_t*)bytes)[i];
    case 3: return ((const uint32_t*)bytes)[i];
    case 4: return (double)((const int64_t*)bytes)[i];
    case 5: return (double)((const uint64_t*)bytes)[i];
    case 7: return ((const float*)bytes)[i];
    case 8: return ((const double*)bytes)[i];
    default: fail("an all-reduce of data type %d across ranks is not modelled", type);
  }
}

static void store(char* bytes, int type, size_t i, double x) {
  switch (type) {
    case 2: ((int32_t*)bytes)[i] = (int32_t)x; break;
    case 3: ((uint32_t*)bytes)[i] = (uint32_t)x; break;
    case 4: ((int64_t*)bytes)[i] = (int64_t)x; break;
    case 5: ((uint64_t*)bytes)[i] = (uint64_t)x; break;
    case 7: ((float*)bytes)[i] = (float)x; break;
    default: ((double*)bytes)[i] = x; break;
  }
}

/* Writes the collective's result into `recv` from every rank's cell in `row`. */
static void combine(const Collective* c, Cell* row, char* recv) {
  int n = c->comm->nranks;
  switch (c->kind) {
    case ALLGATHER:
      for (int r = 0; r < n; r++) memcpy(recv + r * c->bytes, row[r].bytes, c->bytes);
      return;
    case BROADCAST:
      memcpy(recv, row[c->root].bytes, c->bytes);
      return;
    default:
      break;
  }
  size_t count = c->bytes / type_size(c->type);
  for (size_t i = 0; i < count; i++) {
    double acc = element(row[0].bytes, c->type, i);
    for (int r = 1; r < n; r++) {
      double x = element(row[r].bytes, c->type, i);
      switch (c->op) {
        case 1: acc *= x; break;
        case 2: acc = x > acc ? x : acc; break;
        case 3: acc = x < acc ? x : acc; break;
        default: acc += x; break; /* sum, and the average's */
      }
    }
    store(recv, c->type, i, c->op == 4 ? acc / n : acc);
  }
}

/* The collective's step on its stream (see discovmStubQueueStep): 0 while a rank has not left
 * its send bytes, or its own cell still holds an earlier collective that a rank has to read. */
static int collective_step(void* arg, const void* send, void* recv) {
  Collective* c = arg;
  Comm* comm = c->comm;
  if (!atomic_load(&comm->aborted)) {
    Cell* row = comm->shared->cells[c->seq % SLOTS];
    Cell* mine = &row[comm->rank];
    if (!c->left) {
      if (atomic_load(&mine->seq) != 0 && atomic_load(&mine->taken) < comm->nranks) return 0;
      if (send != NULL) memcpy(mine->bytes, send, c->bytes);
      mine->kind = c->kind;
      mine->size = c->bytes;
      atomic_store(&mine->taken, 0);
      atomic_store(&mine->seq, c->seq + 1);
      c->left = 1;
    }
    for (int r = 0; r < comm->nranks; r++) {
      if (atomic_load(&row[r].seq) != c->seq + 1) return 0;
    }
    /* Ranks that disagree on the collective, or on its size, wait for ever, as NCCL may. */
    for (int r = 0; r < comm->nranks; r++) {
      if (row[r].kind != c->kind || row[r].size != c->bytes) return 0;
    }
    combine(c, row, recv);
    for (int r = 0; r < comm->nranks; r++) atomic_fetch_add(&row[r].taken, 1);
  }
  free(c);
  return 1;
}

/* Queues collective `kind` of `comm`, of `bytes` send bytes on each rank, on `stream`. */
static int queue_collective(Comm* comm, int kind, const void* send, size_t bytes, void* recv,
                            size_t recv_bytes, int type, int op, int root,
                            cudaStream_t stream) {
  if (bytes > SLOT_BYTES) {
    fail("a collective of %zu bytes across ranks (the stand-in holds %d)", bytes, SLOT_BYTES);
  }
  if (comm->queued == 0 && !comm->blocking && getenv("NCCL_STUB_CONNECT") != NULL) {
    comm->connecting = 1;
    atomic_fetch_add(&comm->shared->connected, 1);
  }
  Collective* c = calloc(1, sizeof *c);
  if (c == NULL) fail("out of memory");
  *c = (Collective){comm, comm->queued++, kind, type, op, root, bytes, 0};
  void* previous = current_context();
  cu.ctx_set_current(comm->context);
  int result = cu.queue_step(stream, (CUdeviceptr)send, send ? bytes : 0, (CUdeviceptr)recv,
                             recv_bytes, collective_step, c);
  cu.ctx_set_current(previous);
  if (result != 0) fail("discovmStubQueueStep failed: CUDA error %d", result);
  return started(comm);
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
  size_t bytes = count * type_size(type);
  if (comm->shared != NULL) {
    return queue_collective(comm, ALLREDUCE, send, bytes, recv, bytes, type, op, 0, stream);
  }
  copy(comm, recv, send, bytes, stream);
  return started(comm);
}

int ncclAllGather(const void* send, void* recv, size_t count, int type, ncclComm_t comm,
                  cudaStream_t stream) {
  usable(comm, "ncclAllGather");
  size_t bytes = count * type_size(type);
  if (comm->shared != NULL) {
    return queue_collective(comm, ALLGATHER, send, bytes, recv, bytes * comm->nranks, type, 0, 0,
                            stream);
  }
  copy(comm, recv, send, bytes, stream);
  return started(comm);
}

int ncclBroadcast(const void* send, void* recv, size_t count, int type, int root,
                  ncclComm_t comm, cudaStream_t stream) {
  usable(comm, "ncclBroadcast");
  if (root < 0 || root >= comm->nranks) return ncclInvalidArgument;
  size_t bytes = count * type_size(type);
  if (comm->shared != NULL) {
    const void* own = comm->rank == root ? send : NULL;
    return queue_collective(comm, BROADCAST, own, bytes, recv, bytes, type, 0, root, stream);
  }
  copy(comm, recv, send, bytes, stream);
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
  if (comm->shared != NULL) fail("%s: transfers between ranks are not modelled", call);
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
