/*
 * Header hygiene: both public headers, each included twice, must compile as C11 and as C++17
 * under -Wall -Wextra -Werror -pedantic, with C linkage in C++ for everything they declare.
 * tests/headers.rs compiles this file twice: with -std=c11, and as C++ (-x c++ -std=c++17).
 */
#include "discovm.h"
#include "discovm_abi.h"
#include "discovm.h"
#include "discovm_abi.h"

#include <string.h>

#ifdef __cplusplus
#include <type_traits>

static_assert(std::is_standard_layout<DVMAny>::value, "DVMAny must be standard-layout");
static_assert(std::is_trivially_copyable<DVMAny>::value, "DVMAny must be trivially copyable");
static_assert(std::is_standard_layout<DVMObject>::value, "DVMObject must be standard-layout");
static_assert(std::is_same<std::underlying_type<DVMTypeIndex>::type, int32_t>::value,
              "DVMTypeIndex must have int32_t as its underlying type in C++");
static_assert(std::is_same<std::underlying_type<DLDeviceType>::type, int32_t>::value,
              "DLDeviceType must have int32_t as its underlying type in C++");

extern "C" {
#endif

/* A packed function written against the header, with C linkage as a library would export one:
 * reads a borrowed Int argument and stores an owned Int result. */
int hygiene_add_one(void* handle, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)handle;
  (void)num_args;
  result->type_index = kDVMInt;
  result->zero_padding = 0;
  result->v_int64 = args[0].v_int64 + 1;
  return 0;
}

#ifdef __cplusplus
}
#endif

int main(void) {
  DVMSafeCall call = hygiene_add_one;
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
  const DLDevice cpu = {kDLCPU, 0};
  const DLDataType f32 = {kDLFloat, 32, 1};
  tensor.device = cpu;
  tensor.dtype = f32;
  return small.v_bytes[small.small_str_len] == '\0' && tensor.ndim == 0 ? 0 : 1;
}
