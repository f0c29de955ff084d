/*
 * Header hygiene, C++ side: both public headers, each included twice and in both orders, must
 * compile as C++17 under -Wall -Wextra -Werror -pedantic, with C linkage for everything they
 * declare. tests/headers.rs compiles this file with -std=c++17; header_hygiene.c is its C twin.
 */
#include "discovm.h"
#include "discovm_abi.h"
#include "discovm.h"
#include "discovm_abi.h"

#include <cstring>
#include <type_traits>

static_assert(std::is_standard_layout<DVMAny>::value, "DVMAny must be standard-layout");
static_assert(std::is_trivially_copyable<DVMAny>::value, "DVMAny must be trivially copyable");
static_assert(std::is_standard_layout<DVMObject>::value, "DVMObject must be standard-layout");
static_assert(std::is_same<std::underlying_type<DVMTypeIndex>::type, int32_t>::value,
              "DVMTypeIndex must have int32_t as its underlying type in C++");
static_assert(std::is_same<std::underlying_type<DLDeviceType>::type, int32_t>::value,
              "DLDeviceType must have int32_t as its underlying type in C++");

// A packed function with C linkage, as a C++ library would export one.
extern "C" int hygiene_add_one(void* handle, const DVMAny* args, int32_t num_args,
                               DVMAny* result) {
  (void)handle;
  (void)num_args;
  result->type_index = kDVMInt;
  result->zero_padding = 0;
  result->v_int64 = args[0].v_int64 + 1;
  return 0;
}

int main() {
  DVMSafeCall call = hygiene_add_one;
  DVMAny arg{};
  DVMAny result{};
  arg.type_index = kDVMInt;
  arg.v_int64 = 41;
  if (call(nullptr, &arg, 1, &result) != 0 || result.v_int64 != 42) return 1;

  DVMAny small{};
  small.type_index = kDVMSmallStr;
  small.small_str_len = 3;
  std::memcpy(small.v_bytes, "abc", 4);

  DLTensor tensor{};
  tensor.device = DLDevice{kDLCPU, 0};
  tensor.dtype = DLDataType{kDLFloat, 32, 1};
  return small.v_bytes[small.small_str_len] == '\0' && tensor.ndim == 0 ? 0 : 1;
}
