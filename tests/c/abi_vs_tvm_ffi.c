/*
 * Proves that discovm_abi.h describes the same binary layout as Apache TVM's FFI headers.
 *
 * Every mirrored struct must have the same size and alignment as its tvm-ffi counterpart, and
 * every member the same offset and size; every type index and flag the same value. These are
 * compile-time checks: if this file compiles, they hold. At run time the program counts them and
 * prints the DLPack layout it was compiled with ("dlpack ..." lines), so that a build where
 * discovm_abi.h supplied the DLPack types can be compared with one where dlpack.h did.
 *
 * Build (tests/headers.rs does this, as C11 and as C++17, in both include orders):
 *   gcc -std=c11 -Wall -Wextra -Werror -pedantic -Iinclude -isystem <tvm-ffi include dir> \
 *       [-DDVM_TVM_FFI_FIRST] tests/c/abi_vs_tvm_ffi.c
 * where the include dir is printed by tests/support/tvm_ffi_venv.sh.
 * DVM_TVM_FFI_FIRST includes tvm-ffi's headers (and with them dlpack.h) before ours; without it
 * ours comes first and tvm-ffi's must accept the DLPack types it defined.
 */
#ifdef DVM_TVM_FFI_FIRST
#include <tvm/ffi/c_api.h>
#include <tvm/ffi/extra/c_env_api.h>
#include "discovm_abi.h"
#define DLPACK_SOURCE "dlpack.h"
#else
#include "discovm_abi.h"
#include <tvm/ffi/c_api.h>
#include <tvm/ffi/extra/c_env_api.h>
#define DLPACK_SOURCE "discovm_abi.h"
#endif

#include <stdio.h>

#ifdef __cplusplus
#define CHECK(cond) static_assert(cond, #cond)
#define ALIGN_OF(type) alignof(type)
#define LANGUAGE "C++"
#else
#define CHECK(cond) _Static_assert(cond, #cond)
#define ALIGN_OF(type) _Alignof(type)
#define LANGUAGE "C"
#endif

#define MEMBER_SIZE(type, member) sizeof(((type*)0)->member)

/* ---- discovm type vs tvm-ffi type ------------------------------------------------------- */

/* Each entry: TYPE(ours, theirs) or MEMBER(ours, theirs, member). */
#define MIRRORED_LAYOUTS(TYPE, MEMBER)                          \
  TYPE(DVMObjectHandle, TVMFFIObjectHandle)                     \
  TYPE(DVMTypeIndex, int32_t)                                   \
  TYPE(DVMObjectDeleterFlagBitMask, int32_t)                    \
  TYPE(DVMBacktraceUpdateMode, int32_t)                         \
  TYPE(DVMObject, TVMFFIObject)                                 \
  MEMBER(DVMObject, TVMFFIObject, combined_ref_count)           \
  MEMBER(DVMObject, TVMFFIObject, type_index)                   \
  MEMBER(DVMObject, TVMFFIObject, __padding)                    \
  MEMBER(DVMObject, TVMFFIObject, deleter)                      \
  MEMBER(DVMObject, TVMFFIObject, __ensure_align)               \
  TYPE(DVMAny, TVMFFIAny)                                       \
  MEMBER(DVMAny, TVMFFIAny, type_index)                         \
  MEMBER(DVMAny, TVMFFIAny, zero_padding)                       \
  MEMBER(DVMAny, TVMFFIAny, small_str_len)                      \
  MEMBER(DVMAny, TVMFFIAny, v_int64)                            \
  MEMBER(DVMAny, TVMFFIAny, v_float64)                          \
  MEMBER(DVMAny, TVMFFIAny, v_ptr)                              \
  MEMBER(DVMAny, TVMFFIAny, v_c_str)                            \
  MEMBER(DVMAny, TVMFFIAny, v_obj)                              \
  MEMBER(DVMAny, TVMFFIAny, v_dtype)                            \
  MEMBER(DVMAny, TVMFFIAny, v_device)                           \
  MEMBER(DVMAny, TVMFFIAny, v_bytes)                            \
  MEMBER(DVMAny, TVMFFIAny, v_uint64)                           \
  TYPE(DVMByteArray, TVMFFIByteArray)                           \
  MEMBER(DVMByteArray, TVMFFIByteArray, data)                   \
  MEMBER(DVMByteArray, TVMFFIByteArray, size)                   \
  TYPE(DVMShapeCell, TVMFFIShapeCell)                           \
  MEMBER(DVMShapeCell, TVMFFIShapeCell, data)                   \
  MEMBER(DVMShapeCell, TVMFFIShapeCell, size)                   \
  TYPE(DVMSafeCall, TVMFFISafeCallType)                         \
  TYPE(DVMFunctionCell, TVMFFIFunctionCell)                     \
  MEMBER(DVMFunctionCell, TVMFFIFunctionCell, safe_call)        \
  MEMBER(DVMFunctionCell, TVMFFIFunctionCell, cpp_call)         \
  TYPE(DVMErrorCell, TVMFFIErrorCell)                           \
  MEMBER(DVMErrorCell, TVMFFIErrorCell, kind)                   \
  MEMBER(DVMErrorCell, TVMFFIErrorCell, message)                \
  MEMBER(DVMErrorCell, TVMFFIErrorCell, backtrace)              \
  MEMBER(DVMErrorCell, TVMFFIErrorCell, update_backtrace)       \
  MEMBER(DVMErrorCell, TVMFFIErrorCell, cause_chain)            \
  MEMBER(DVMErrorCell, TVMFFIErrorCell, extra_context)          \
  TYPE(DVMSeqCell, TVMFFISeqCell)                               \
  MEMBER(DVMSeqCell, TVMFFISeqCell, data)                       \
  MEMBER(DVMSeqCell, TVMFFISeqCell, size)                       \
  MEMBER(DVMSeqCell, TVMFFISeqCell, capacity)                   \
  MEMBER(DVMSeqCell, TVMFFISeqCell, data_deleter)               \
  TYPE(DVMOpaqueObjectCell, TVMFFIOpaqueObjectCell)             \
  MEMBER(DVMOpaqueObjectCell, TVMFFIOpaqueObjectCell, handle)

/* Each entry: the name after the prefix; kDVM<name> must equal kTVMFFI<name>. tests/headers.rs
 * checks that this list names every constant of tvm-ffi's type-index enum. */
#define MIRRORED_CONSTANTS(SAME)                                   \
  SAME(Any) SAME(None) SAME(Int) SAME(Bool) SAME(Float)            \
  SAME(OpaquePtr) SAME(DataType) SAME(Device) SAME(DLTensorPtr)    \
  SAME(RawStr) SAME(ByteArrayPtr) SAME(ObjectRValueRef)            \
  SAME(SmallStr) SAME(SmallBytes) SAME(Unchanged)                  \
  SAME(StaticObjectBegin) SAME(Object) SAME(Str) SAME(Bytes)       \
  SAME(Error) SAME(Function) SAME(Shape) SAME(Tensor) SAME(Array)  \
  SAME(Map) SAME(Module) SAME(OpaquePyObject) SAME(List)           \
  SAME(Dict) SAME(VisitInterrupt) SAME(BigInt)                     \
  SAME(StaticObjectEnd) SAME(DynObjectBegin)                       \
  SAME(ObjectDeleterFlagBitMaskStrong)                             \
  SAME(ObjectDeleterFlagBitMaskWeak)                               \
  SAME(ObjectDeleterFlagBitMaskBoth)                               \
  SAME(BacktraceUpdateModeReplace)                                 \
  SAME(BacktraceUpdateModeAppend)

#define ASSERT_SAME_TYPE(ours, theirs)      \
  CHECK(sizeof(ours) == sizeof(theirs));    \
  CHECK(ALIGN_OF(ours) == ALIGN_OF(theirs));
#define ASSERT_SAME_MEMBER(ours, theirs, member)                     \
  CHECK(offsetof(ours, member) == offsetof(theirs, member));         \
  CHECK(MEMBER_SIZE(ours, member) == MEMBER_SIZE(theirs, member));
#define ASSERT_SAME_CONSTANT(name) CHECK((int64_t)kDVM##name == (int64_t)kTVMFFI##name);

MIRRORED_LAYOUTS(ASSERT_SAME_TYPE, ASSERT_SAME_MEMBER)
MIRRORED_CONSTANTS(ASSERT_SAME_CONSTANT)

/* The tensor cell of a kDVMTensor object starts right after the header, as in tvm-ffi. */
CHECK(sizeof(DVMObject) == sizeof(TVMFFIObject));

/* ---- DLPack: printed, so builds that took it from different headers can be compared ------ */

#define DLPACK_LAYOUTS(TYPE, MEMBER)                                           \
  TYPE(DLPackVersion)                                                          \
  MEMBER(DLPackVersion, major) MEMBER(DLPackVersion, minor)                    \
  TYPE(DLDeviceType)                                                           \
  TYPE(DLDataTypeCode)                                                         \
  TYPE(DLDevice)                                                               \
  MEMBER(DLDevice, device_type) MEMBER(DLDevice, device_id)                    \
  TYPE(DLDataType)                                                             \
  MEMBER(DLDataType, code) MEMBER(DLDataType, bits) MEMBER(DLDataType, lanes)  \
  TYPE(DLTensor)                                                               \
  MEMBER(DLTensor, data) MEMBER(DLTensor, device) MEMBER(DLTensor, ndim)       \
  MEMBER(DLTensor, dtype) MEMBER(DLTensor, shape) MEMBER(DLTensor, strides)    \
  MEMBER(DLTensor, byte_offset)                                                \
  TYPE(DLManagedTensor)                                                        \
  MEMBER(DLManagedTensor, dl_tensor) MEMBER(DLManagedTensor, manager_ctx)      \
  MEMBER(DLManagedTensor, deleter)                                             \
  TYPE(DLManagedTensorVersioned)                                               \
  MEMBER(DLManagedTensorVersioned, version)                                    \
  MEMBER(DLManagedTensorVersioned, manager_ctx)                                \
  MEMBER(DLManagedTensorVersioned, deleter)                                    \
  MEMBER(DLManagedTensorVersioned, flags)                                      \
  MEMBER(DLManagedTensorVersioned, dl_tensor)                                  \
  TYPE(DLPackManagedTensorAllocator)                                           \
  TYPE(DLPackManagedTensorFromPyObjectNoSync)                                  \
  TYPE(DLPackDLTensorFromPyObjectNoSync)                                       \
  TYPE(DLPackCurrentWorkStream)                                                \
  TYPE(DLPackManagedTensorToPyObjectNoSync)                                    \
  TYPE(DLPackExchangeAPIHeader)                                                \
  MEMBER(DLPackExchangeAPIHeader, version)                                     \
  MEMBER(DLPackExchangeAPIHeader, prev_api)                                    \
  TYPE(DLPackExchangeAPI)                                                      \
  MEMBER(DLPackExchangeAPI, header)                                            \
  MEMBER(DLPackExchangeAPI, managed_tensor_allocator)                          \
  MEMBER(DLPackExchangeAPI, managed_tensor_from_py_object_no_sync)             \
  MEMBER(DLPackExchangeAPI, managed_tensor_to_py_object_no_sync)               \
  MEMBER(DLPackExchangeAPI, dltensor_from_py_object_no_sync)                   \
  MEMBER(DLPackExchangeAPI, current_work_stream)

#define DLPACK_VALUES(VALUE)                                                          \
  VALUE(DLPACK_MAJOR_VERSION) VALUE(DLPACK_MINOR_VERSION)                             \
  VALUE(DLPACK_FLAG_BITMASK_READ_ONLY) VALUE(DLPACK_FLAG_BITMASK_IS_COPIED)           \
  VALUE(DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED)                                   \
  VALUE(sizeof(DLPACK_FLAG_BITMASK_READ_ONLY))                                        \
  VALUE(kDLCPU) VALUE(kDLCUDA) VALUE(kDLCUDAHost) VALUE(kDLOpenCL) VALUE(kDLVulkan)  \
  VALUE(kDLMetal) VALUE(kDLVPI) VALUE(kDLROCM) VALUE(kDLROCMHost) VALUE(kDLExtDev)   \
  VALUE(kDLCUDAManaged) VALUE(kDLOneAPI) VALUE(kDLWebGPU) VALUE(kDLHexagon)          \
  VALUE(kDLMAIA) VALUE(kDLTrn)                                                        \
  VALUE(kDLInt) VALUE(kDLUInt) VALUE(kDLFloat) VALUE(kDLOpaqueHandle) VALUE(kDLBfloat) \
  VALUE(kDLComplex) VALUE(kDLBool) VALUE(kDLFloat8_e3m4) VALUE(kDLFloat8_e4m3)       \
  VALUE(kDLFloat8_e4m3b11fnuz) VALUE(kDLFloat8_e4m3fn) VALUE(kDLFloat8_e4m3fnuz)     \
  VALUE(kDLFloat8_e5m2) VALUE(kDLFloat8_e5m2fnuz) VALUE(kDLFloat8_e8m0fnu)           \
  VALUE(kDLFloat6_e2m3fn) VALUE(kDLFloat6_e3m2fn) VALUE(kDLFloat4_e2m1fn)

#define COUNT_TYPE(ours, theirs) checks += 2;
#define COUNT_MEMBER(ours, theirs, member) checks += 2;
#define COUNT_CONSTANT(name) constants += 1;

#define PRINT_DLPACK_TYPE(type) \
  printf("dlpack %s size=%zu align=%zu\n", #type, sizeof(type), (size_t)ALIGN_OF(type));
#define PRINT_DLPACK_MEMBER(type, member)                                               \
  printf("dlpack %s.%s offset=%zu size=%zu\n", #type, #member, offsetof(type, member), \
         MEMBER_SIZE(type, member));
#define PRINT_DLPACK_VALUE(name) printf("dlpack %s=%lld\n", #name, (long long)(name));

int main(void) {
  int checks = 0;
  int constants = 0;
  MIRRORED_LAYOUTS(COUNT_TYPE, COUNT_MEMBER)
  MIRRORED_CONSTANTS(COUNT_CONSTANT)

  DLPACK_LAYOUTS(PRINT_DLPACK_TYPE, PRINT_DLPACK_MEMBER)
  DLPACK_VALUES(PRINT_DLPACK_VALUE)

  printf("abi_vs_tvm_ffi (%s, DLPack from %s): %d layout checks and %d constants match "
         "tvm-ffi %d.%d.%d\n",
         LANGUAGE, DLPACK_SOURCE, checks, constants, TVM_FFI_VERSION_MAJOR, TVM_FFI_VERSION_MINOR,
         TVM_FFI_VERSION_PATCH);
  return 0;
}
