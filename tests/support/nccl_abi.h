/* The parts of NCCL's C ABI (nccl.h) that the stand-in NCCL libraries implement: the unique id
 * passed by value, the stream type, the result codes they return, and the fields of
 * ncclConfig_t that NCCL 2.14 has (what the library passes to ncclCommInitRankConfig). */
#ifndef DISCOVM_TESTS_NCCL_ABI_H
#define DISCOVM_TESTS_NCCL_ABI_H

#include <stddef.h>

typedef struct {
  char internal[128];
} ncclUniqueId;
typedef void* cudaStream_t;

enum {
  ncclSuccess = 0,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7
};

typedef struct {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
} ncclConfig_t;

#endif
