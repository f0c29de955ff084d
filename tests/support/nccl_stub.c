/* A stand-in for libnccl.so.2 with NCCL's C ABI and no GPU behind it, for the loader tests on
 * machines without NCCL: it reports version 2.21.5, hands out a recognisable unique id, and
 * fails ncclGroupEnd with ncclInvalidUsage (5) and a last-error text, so the error path can be
 * checked. Collectives are never reached here (they need a GPU first); for the watch of a
 * communicator, ncclStubCommNew makes a communicator whose asynchronous error the test sets
 * (ncclStubSetAsyncError) and whose aborts it counts (ncclStubAborts). Built as a shared
 * library by tests/nccl_loader.rs and by the unit tests of src/device/nccl.rs. */
#include <stdlib.h>

typedef struct {
  char internal[128];
} ncclUniqueId;
typedef void* ncclComm_t;
typedef void* cudaStream_t;

int ncclGetVersion(int* version) {
  *version = 22105;
  return 0;
}

int ncclGetUniqueId(ncclUniqueId* id) {
  for (int i = 0; i < 128; i++) id->internal[i] = (char)(i * 7);
  return 0;
}

const char* ncclGetErrorString(int result) {
  switch (result) {
    case 2: return "stub: unhandled system error";
    case 5: return "stub: invalid usage";
    default: return "stub: other error";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  return comm ? "a peer of the stub communicator is gone" : "the stub's group ended badly";
}

/* A stub communicator: the asynchronous error it reports, and how often it was aborted. */
typedef struct {
  int async_error;
  int aborts;
} StubComm;

ncclComm_t ncclStubCommNew(void) { return calloc(1, sizeof(StubComm)); }
void ncclStubSetAsyncError(ncclComm_t comm, int error) { ((StubComm*)comm)->async_error = error; }
int ncclStubAborts(ncclComm_t comm) { return ((StubComm*)comm)->aborts; }
void ncclStubCommFree(ncclComm_t comm) { free(comm); }

int ncclCommGetAsyncError(ncclComm_t comm, int* error) {
  *error = ((StubComm*)comm)->async_error;
  return 0;
}

/* Counts the abort; the memory stays for the test to read (ncclStubCommFree frees it). */
int ncclCommAbort(ncclComm_t comm) {
  ((StubComm*)comm)->aborts++;
  return 0;
}

int ncclGroupStart(void) { return 0; }
int ncclGroupEnd(void) { return 5; }

/* Present so the loader accepts the library; never called by the tests. */
int ncclCommInitRank(ncclComm_t* comm, int n, ncclUniqueId id, int rank) {
  (void)comm, (void)n, (void)id, (void)rank;
  return 3;
}
int ncclCommDestroy(ncclComm_t comm) { return (void)comm, 3; }
int ncclAllReduce(const void* s, void* r, size_t n, int t, int op, ncclComm_t c, cudaStream_t st) {
  return (void)s, (void)r, (void)n, (void)t, (void)op, (void)c, (void)st, 3;
}
int ncclAllGather(const void* s, void* r, size_t n, int t, ncclComm_t c, cudaStream_t st) {
  return (void)s, (void)r, (void)n, (void)t, (void)c, (void)st, 3;
}
int ncclBroadcast(const void* s, void* r, size_t n, int t, int root, ncclComm_t c,
                  cudaStream_t st) {
  return (void)s, (void)r, (void)n, (void)t, (void)root, (void)c, (void)st, 3;
}
int ncclSend(const void* s, size_t n, int t, int peer, ncclComm_t c, cudaStream_t st) {
  return (void)s, (void)n, (void)t, (void)peer, (void)c, (void)st, 3;
}
int ncclRecv(void* r, size_t n, int t, int peer, ncclComm_t c, cudaStream_t st) {
  return (void)r, (void)n, (void)t, (void)peer, (void)c, (void)st, 3;
}
