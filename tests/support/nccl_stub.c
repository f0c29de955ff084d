/* A stand-in for libnccl.so.2 with NCCL's C ABI and no GPU behind it, for the loader tests on
 * machines without NCCL: it reports version 2.21.5, hands out a recognisable unique id, and
 * fails ncclGroupEnd with ncclInvalidUsage (5) and a last-error text, so the error path can be
 * checked. Its communicators are non-blocking ones without a GPU: how the next operation goes
 * (joining with ncclCommInitRankConfig, ncclAllReduce, ncclCommFinalize) is set beforehand
 * with ncclStubPlan: NCCL still at it (ncclInProgress) for some polls of
 * ncclCommGetAsyncError, or for ever, then a result. The test reads what happened: the polls,
 * aborts, finalizations and destructions of a communicator, the calls made on it while an
 * operation was still in progress (which NCCL forbids), and the configuration it was made
 * with. ncclStubCommNew makes a communicator directly, whose asynchronous error the test may
 * set (ncclStubSetAsyncError). Built as a shared library by tests/nccl_loader.rs and by the
 * unit tests of src/device/nccl/ (one copy per test). */
#include <limits.h>
#include <stdlib.h>

#include "nccl_abi.h"

typedef void* ncclComm_t;

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

/* A stub communicator. */
typedef struct {
  int polls_left; /* polls that still report ncclInProgress; -1: for ever */
  int async_error; /* reported after that */
  int polls, aborts, finalizes, destroys;
  int early_calls; /* calls made while an operation was in progress */
} StubComm;

/* How the next operation goes: in progress for `polls` polls (-1: for ever), then `result`. */
static int plan_polls = 0, plan_result = ncclSuccess;
void ncclStubPlan(int polls, int result) {
  plan_polls = polls;
  plan_result = result;
}

/* Starts an operation on `comm` as planned; returns what the call returns. */
static int start(StubComm* comm) {
  if (comm->polls_left != 0) comm->early_calls++;
  if (plan_polls == 0) return plan_result;
  comm->polls_left = plan_polls;
  comm->async_error = plan_result;
  return ncclInProgress;
}

ncclComm_t ncclStubCommNew(void) { return calloc(1, sizeof(StubComm)); }
void ncclStubSetAsyncError(ncclComm_t comm, int error) { ((StubComm*)comm)->async_error = error; }
int ncclStubPolls(ncclComm_t comm) { return ((StubComm*)comm)->polls; }
int ncclStubAborts(ncclComm_t comm) { return ((StubComm*)comm)->aborts; }
int ncclStubFinalizes(ncclComm_t comm) { return ((StubComm*)comm)->finalizes; }
int ncclStubDestroys(ncclComm_t comm) { return ((StubComm*)comm)->destroys; }
int ncclStubEarlyCalls(ncclComm_t comm) { return ((StubComm*)comm)->early_calls; }
void ncclStubCommFree(ncclComm_t comm) { free(comm); }

/* The configuration of the last ncclCommInitRankConfig. */
static ncclConfig_t last_config;
size_t ncclStubConfigSize(void) { return last_config.size; }
unsigned int ncclStubConfigMagic(void) { return last_config.magic; }
unsigned int ncclStubConfigVersion(void) { return last_config.version; }
int ncclStubConfigBlocking(void) { return last_config.blocking; }
/* Whether every other field is NCCL's "undefined". */
int ncclStubConfigRestUndefined(void) {
  return last_config.cgaClusterSize == INT_MIN && last_config.minCTAs == INT_MIN &&
         last_config.maxCTAs == INT_MIN && last_config.netName == NULL;
}

int ncclCommGetAsyncError(ncclComm_t comm, int* error) {
  StubComm* c = comm;
  c->polls++;
  if (c->polls_left != 0) {
    if (c->polls_left > 0) c->polls_left--;
    *error = ncclInProgress;
    return 0;
  }
  *error = c->async_error;
  return 0;
}

/* Joins as planned; a failure at once leaves no communicator, as NCCL's does. */
int ncclCommInitRankConfig(ncclComm_t* comm, int n, ncclUniqueId id, int rank,
                           ncclConfig_t* config) {
  (void)n, (void)id, (void)rank;
  last_config = *config;
  StubComm* c = ncclStubCommNew();
  int result = start(c);
  if (result != ncclSuccess && result != ncclInProgress) {
    free(c);
    c = NULL;
  }
  *comm = c;
  return result;
}

/* Counts the abort; the memory stays for the test to read (ncclStubCommFree frees it). */
int ncclCommAbort(ncclComm_t comm) {
  ((StubComm*)comm)->aborts++;
  return 0;
}

int ncclCommFinalize(ncclComm_t comm) {
  ((StubComm*)comm)->finalizes++;
  return start(comm);
}

/* Counts the destruction; the memory stays, as for an abort. */
int ncclCommDestroy(ncclComm_t comm) {
  StubComm* c = comm;
  if (c->polls_left != 0) c->early_calls++;
  c->destroys++;
  return 0;
}

int ncclAllReduce(const void* s, void* r, size_t n, int t, int op, ncclComm_t c, cudaStream_t st) {
  (void)s, (void)r, (void)n, (void)t, (void)op, (void)st;
  return start(c);
}

int ncclGroupStart(void) { return 0; }
int ncclGroupEnd(void) { return 5; }

/* Present so the loader accepts the library; never called by the tests. */
int ncclCommInitRank(ncclComm_t* comm, int n, ncclUniqueId id, int rank) {
  (void)comm, (void)n, (void)id, (void)rank;
  return ncclInternalError;
}
int ncclAllGather(const void* s, void* r, size_t n, int t, ncclComm_t c, cudaStream_t st) {
  return (void)s, (void)r, (void)n, (void)t, (void)c, (void)st, ncclInternalError;
}
int ncclBroadcast(const void* s, void* r, size_t n, int t, int root, ncclComm_t c,
                  cudaStream_t st) {
  return (void)s, (void)r, (void)n, (void)t, (void)root, (void)c, (void)st, ncclInternalError;
}
int ncclSend(const void* s, size_t n, int t, int peer, ncclComm_t c, cudaStream_t st) {
  return (void)s, (void)n, (void)t, (void)peer, (void)c, (void)st, ncclInternalError;
}
int ncclRecv(void* r, size_t n, int t, int peer, ncclComm_t c, cudaStream_t st) {
  return (void)r, (void)n, (void)t, (void)peer, (void)c, (void)st, ncclInternalError;
}
