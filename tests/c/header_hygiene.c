/*
 * Header hygiene, C side: both public headers, each included twice and in both orders, must
 * compile as C11 under -Wall -Wextra -Werror -pedantic. tests/headers.rs compiles this file
 * with -std=c11; header_hygiene.cpp is its C++17 twin.
 */
#include "discovm.h"
#include "discovm_abi.h"
#include "discovm.h"
#include "discovm_abi.h"

#include <string.h>

/* A packed function written against the header: reads a borrowed Int argument and stores an
 * owned Int result. */
static int add_one(void* handle, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)handle;
  (void)num_args;
  result->type_index = kDVMInt;
  result->zero_padding = 0;
  result->v_int64 = args[0].v_int64 + 1;
  return 0;
}

int main(void) {
  DVMSafeCall call = add_one;
  DVMAny arg;
  DVMAny result;
  memset(&arg, 0, sizeof arg);
  memset(&result, 0, sizeof result);
  arg.type_index = kDVMInt;
  arg.v_int64 = 41;
  if (call(NULL, &arg, 1, &result) != 0 || result.v_int64 != 42) return 1;

  /* A small string: up to 7 bytes inline, length in small_str_len, NUL after the bytes. */
  DVMAny small;
  memset(&small, 0, sizeof small);
  small.type_index = kDVMSmallStr;
  small.small_str_len = 3;
  memcpy(small.v_bytes, "abc", 4);

  DLTensor tensor;
  memset(&tensor, 0, sizeof tensor);
  tensor.device.device_type = kDLCPU;
  tensor.dtype.code = kDLFloat;
  tensor.dtype.bits = 32;
  tensor.dtype.lanes = 1;
  return small.v_bytes[small.small_str_len] == '\0' && tensor.ndim == 0 ? 0 : 1;
}
