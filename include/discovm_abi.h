/*
 * discovm_abi.h: the binary layout of discovm's packed values.
 *
 * This header is written by hand. The generated API header `discovm.h` includes it, so most
 * programs include `discovm.h` only; include this one alone when you need the value types and
 * none of the functions.
 *
 * Every type below has the same size, alignment and member offsets as its counterpart in
 * Apache TVM's FFI (tvm-ffi 0.1.16, `tvm/ffi/c_api.h`), and every member has the same name.
 * Code written against that header ports by renaming: `TVMFFIAny` -> `DVMAny`,
 * `kTVMFFIInt` -> `kDVMInt`, and so on. Values, objects and functions made on either side can
 * be passed to the other without conversion.
 *
 * The DLPack types keep DLPack's own names and sit behind DLPack's own include guard, so this
 * header may be combined with `dlpack/dlpack.h` or `tvm/ffi/c_api.h` in any order.
 *
 * Requirements: C11 or C++11 (anonymous unions) and a 64-bit target. The layout is checked at
 * compile time by the static assertions at the end of this file.
 */
#ifndef DISCOVM_ABI_H
#define DISCOVM_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ============================================================================================
 * DLPack 1.3: the tensor exchange format. Defined here only when no DLPack header came first.
 * ========================================================================================== */
#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_

#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 3

#ifndef DLPACK_EXTERN_C
#ifdef __cplusplus
#define DLPACK_EXTERN_C extern "C"
#else
#define DLPACK_EXTERN_C
#endif
#endif

#ifndef DLPACK_DLL
#ifdef _WIN32
#ifdef DLPACK_EXPORTS
#define DLPACK_DLL __declspec(dllexport)
#else
#define DLPACK_DLL __declspec(dllimport)
#endif
#else
#define DLPACK_DLL
#endif
#endif

/* The DLPack version a producer used. A different major version means a different layout:
 * a consumer may then only call the deleter. */
typedef struct {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;

/* Kind of memory a tensor lives in (DLDevice.device_type). Values 5 and 6 are unused. */
#ifdef __cplusplus
typedef enum : int32_t {
#else
typedef enum {
#endif
  kDLCPU = 1,          /* host memory */
  kDLCUDA = 2,         /* CUDA device memory */
  kDLCUDAHost = 3,     /* page-locked host memory from cudaMallocHost */
  kDLOpenCL = 4,       /* OpenCL buffer */
  kDLVulkan = 7,       /* Vulkan buffer */
  kDLMetal = 8,        /* Apple Metal buffer */
  kDLVPI = 9,          /* Verilog simulator buffer */
  kDLROCM = 10,        /* AMD ROCm device memory */
  kDLROCMHost = 11,    /* page-locked host memory from hipMallocHost */
  kDLExtDev = 12,      /* reserved for experimental devices */
  kDLCUDAManaged = 13, /* CUDA unified memory from cudaMallocManaged */
  kDLOneAPI = 14,      /* oneAPI unified shared memory */
  kDLWebGPU = 15,      /* WebGPU buffer */
  kDLHexagon = 16,     /* Qualcomm Hexagon DSP */
  kDLMAIA = 17,        /* Microsoft MAIA */
  kDLTrn = 18,         /* AWS Trainium */
} DLDeviceType;

/* A device: its kind and its index among devices of that kind (0 for host memory). */
typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;

/* Element kinds for DLDataType.code. */
typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U,
  kDLBool = 6U,
  kDLFloat8_e3m4 = 7U,
  kDLFloat8_e4m3 = 8U,
  kDLFloat8_e4m3b11fnuz = 9U,
  kDLFloat8_e4m3fn = 10U,
  kDLFloat8_e4m3fnuz = 11U,
  kDLFloat8_e5m2 = 12U,
  kDLFloat8_e5m2fnuz = 13U,
  kDLFloat8_e8m0fnu = 14U,
  kDLFloat6_e2m3fn = 15U,
  kDLFloat6_e3m2fn = 16U,
  kDLFloat4_e2m1fn = 17U,
} DLDataTypeCode;

/* An element type: float32 is {kDLFloat, 32, 1}, int8 {kDLInt, 8, 1}, bool {kDLBool, 8, 1}.
 * lanes > 1 describes short vectors. */
typedef struct {
  uint8_t code; /* a DLDataTypeCode */
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

/* A view of an n-dimensional array. It owns nothing: data, shape and strides belong to
 * whoever made it. strides count elements, not bytes; producers of DLPack 1.2 and later always
 * fill them for ndim > 0, older ones may leave NULL for a compact row-major array. The first
 * element is at (char*)data + byte_offset. */
typedef struct {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
} DLTensor;

/* A tensor handed to a consumer (unversioned, pre-1.0 form). The consumer calls
 * deleter(self) once when done; the deleter frees the struct itself too. */
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensor* self);
} DLManagedTensor;

/* Bits of DLManagedTensorVersioned.flags. */
#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)
#define DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (1UL << 2UL)

/* A tensor handed to a consumer, with the producer's DLPack version. Check version.major
 * first. The consumer calls deleter(self) once when done; the deleter frees the struct too. */
typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned* self);
  uint64_t flags; /* DLPACK_FLAG_BITMASK_* */
  DLTensor dl_tensor;
} DLManagedTensorVersioned;

/* The DLPack C exchange table that array libraries publish to each other (through Python's
 * `__dlpack_c_exchange_api__`). Every callback returns 0 on success, nonzero on failure. */

/* Allocates a new tensor shaped like prototype (dtype, ndim, shape, device are read); on
 * failure calls SetError(error_ctx, kind, message). */
typedef int (*DLPackManagedTensorAllocator)(
    DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
    void (*SetError)(void* error_ctx, const char* kind, const char* message));

/* Exports a Python tensor object as an owned DLManagedTensorVersioned, without stream sync. */
typedef int (*DLPackManagedTensorFromPyObjectNoSync)(void* py_object,
                                                     DLManagedTensorVersioned** out);

/* Fills a caller-provided DLTensor that views a Python tensor object for the current call. */
typedef int (*DLPackDLTensorFromPyObjectNoSync)(void* py_object, DLTensor* out);

/* Reports the producer's current work stream for a device (NULL for CPU). */
typedef int (*DLPackCurrentWorkStream)(DLDeviceType device_type, int32_t device_id,
                                       void** out_current_stream);

/* Wraps an owned DLManagedTensorVersioned (ownership moves) in a Python tensor object. */
typedef int (*DLPackManagedTensorToPyObjectNoSync)(DLManagedTensorVersioned* tensor,
                                                   void** out_py_object);

/* The part of the exchange table that stays fixed across versions. */
typedef struct DLPackExchangeAPIHeader {
  DLPackVersion version;
  struct DLPackExchangeAPIHeader* prev_api; /* an older table, or NULL */
} DLPackExchangeAPIHeader;

typedef struct DLPackExchangeAPI {
  DLPackExchangeAPIHeader header;
  DLPackManagedTensorAllocator managed_tensor_allocator;
  DLPackManagedTensorFromPyObjectNoSync managed_tensor_from_py_object_no_sync;
  DLPackManagedTensorToPyObjectNoSync managed_tensor_to_py_object_no_sync;
  DLPackDLTensorFromPyObjectNoSync dltensor_from_py_object_no_sync; /* may be NULL */
  DLPackCurrentWorkStream current_work_stream;
} DLPackExchangeAPI;

#endif /* DLPACK_DLPACK_H_ */

#if !defined(DLPACK_MAJOR_VERSION) || DLPACK_MAJOR_VERSION != 1
#error "discovm_abi.h needs DLPack 1.x; an older dlpack.h was included before it"
#endif

/* ============================================================================================
 * Type indices
 * ========================================================================================== */

/* In C++ the enums below have int32_t as their underlying type, as tvm-ffi's do. */
#ifdef __cplusplus
#define DVM_ABI_INT32_ENUM_BASE : int32_t
#else
#define DVM_ABI_INT32_ENUM_BASE
#endif

/* What a DVMAny or an object holds (DVMAny.type_index, DVMObject.type_index). The values are
 * tvm-ffi's.
 *
 * [0, 64): plain values stored inside the DVMAny itself. Among them, kDVMDLTensorPtr,
 *   kDVMRawStr and kDVMByteArrayPtr point at memory the DVMAny does not own: they may appear
 *   in call arguments, never in a result.
 * [64, 128): objects with a fixed index. The DVMAny's v_obj points at a DVMObject header.
 * 128 and up: object types registered at run time. Their index is assigned when the type key
 *   is registered and differs between processes, so look it up by key; never hard-code it.
 * A DVMAny holds an object exactly when type_index >= kDVMStaticObjectBegin. */
typedef enum DVMTypeIndex DVM_ABI_INT32_ENUM_BASE {
  kDVMAny = -1,            /* "any type"; appears in type descriptions, never in a value */
  kDVMNone = 0,            /* no value; v_int64 is 0 */
  kDVMInt = 1,             /* v_int64 */
  kDVMBool = 2,            /* v_int64, 0 or 1 */
  kDVMFloat = 3,           /* v_float64 */
  kDVMOpaquePtr = 4,       /* v_ptr, an address nobody interprets */
  kDVMDataType = 5,        /* v_dtype */
  kDVMDevice = 6,          /* v_device */
  kDVMDLTensorPtr = 7,     /* v_ptr -> DLTensor, borrowed */
  kDVMRawStr = 8,          /* v_c_str -> NUL-terminated string, borrowed */
  kDVMByteArrayPtr = 9,    /* v_ptr -> DVMByteArray, borrowed */
  kDVMObjectRValueRef = 10, /* v_ptr -> a DVMObject* slot the callee may take over */
  kDVMSmallStr = 11,       /* string of at most 7 bytes in v_bytes, length in small_str_len */
  kDVMSmallBytes = 12,     /* bytes, at most 7, in v_bytes, length in small_str_len */
  kDVMUnchanged = 13,      /* "no new value" marker used by structural rewriting */
  kDVMStaticObjectBegin = 64,
  kDVMObject = 64,         /* the root object type */
  kDVMStr = 65,            /* string object: DVMObject, then DVMByteArray */
  kDVMBytes = 66,          /* bytes object: DVMObject, then DVMByteArray */
  kDVMError = 67,          /* error object: DVMObject, then DVMErrorCell */
  kDVMFunction = 68,       /* function object: DVMObject, then DVMFunctionCell */
  kDVMShape = 69,          /* shape object: DVMObject, then DVMShapeCell */
  kDVMTensor = 70,         /* tensor object: DVMObject, then DLTensor */
  kDVMArray = 71,          /* immutable sequence: DVMObject, then DVMSeqCell */
  kDVMMap = 72,            /* map object (opaque layout) */
  kDVMModule = 73,         /* loaded module object (opaque layout) */
  kDVMOpaquePyObject = 74, /* Python object: DVMObject, then DVMOpaqueObjectCell */
  kDVMList = 75,           /* mutable sequence: DVMObject, then DVMSeqCell */
  kDVMDict = 76,           /* mutable map object (opaque layout) */
  kDVMVisitInterrupt = 77, /* marker object used by structural visitors */
  kDVMBigInt = 78,         /* integer outside int64: DVMObject, size_t nwords, int64 words */
  kDVMStaticObjectEnd = 79,
  kDVMDynObjectBegin = 128 /* first index assigned at run time */
} DVMTypeIndex;

/* ============================================================================================
 * Objects
 * ========================================================================================== */

/* A pointer to an object, that is to its DVMObject header. */
typedef void* DVMObjectHandle;

/* Bits of the `flags` argument of DVMObject.deleter. */
typedef enum DVMObjectDeleterFlagBitMask DVM_ABI_INT32_ENUM_BASE {
  kDVMObjectDeleterFlagBitMaskStrong = 1, /* last strong reference gone: destroy the contents */
  kDVMObjectDeleterFlagBitMaskWeak = 2,   /* last weak reference gone: free the memory */
  kDVMObjectDeleterFlagBitMaskBoth = 3    /* both at once (the usual case) */
} DVMObjectDeleterFlagBitMask;

/* The header every object starts with (24 bytes). The object's own data (its "cell") follows
 * at offset 24.
 *
 * Reference counting: combined_ref_count holds the strong count in its low 32 bits and the
 * weak count in its high 32 bits; a new object starts at 0x0000000100000001 (one strong
 * reference, plus the one weak reference that all strong references share). Use
 * dvm_object_inc_ref / dvm_object_dec_ref rather than touching the count. When the last
 * reference goes, deleter(self, flags) runs with the kDVMObjectDeleterFlagBitMask* bits
 * saying what to do. */
typedef struct DVMObject {
  uint64_t combined_ref_count;
  int32_t type_index; /* a DVMTypeIndex, or an index >= kDVMDynObjectBegin */
  uint32_t __padding; /* always 0 */
  union {
    void (*deleter)(void* self, int flags);
    int64_t __ensure_align; /* keeps the union 8 bytes wide on every target */
  };
} DVMObject;

/* ============================================================================================
 * Packed values
 * ========================================================================================== */

/* A tagged value (16 bytes): type_index says which payload member is live.
 *
 * Ownership in calls: arguments are borrowed (the callee must not release them; to keep one,
 * it takes its own reference). A result is owned by the caller, who sets it to None (all 16
 * bytes zero) before the call and releases it afterwards; when it holds an object
 * (type_index >= kDVMStaticObjectBegin), the caller owns one reference to v_obj.
 *
 * zero_padding is 0 for every kind except kDVMSmallStr and kDVMSmallBytes, where the same 4
 * bytes are small_str_len. Small strings hold at most 7 bytes in v_bytes, followed by a NUL;
 * longer strings are kDVMStr / kDVMBytes objects. Payload bytes a value does not use are 0. */
typedef struct DVMAny {
  int32_t type_index; /* a DVMTypeIndex, or an index >= kDVMDynObjectBegin */
  union {
    uint32_t zero_padding;
    uint32_t small_str_len;
  };
  union {
    int64_t v_int64;       /* kDVMInt, kDVMBool, kDVMNone (0) */
    double v_float64;      /* kDVMFloat */
    void* v_ptr;           /* kDVMOpaquePtr, kDVMDLTensorPtr, kDVMByteArrayPtr,
                              kDVMObjectRValueRef */
    const char* v_c_str;   /* kDVMRawStr */
    DVMObject* v_obj;      /* every object index */
    DLDataType v_dtype;    /* kDVMDataType */
    DLDevice v_device;     /* kDVMDevice */
    char v_bytes[8];       /* kDVMSmallStr, kDVMSmallBytes */
    uint64_t v_uint64;     /* the payload as raw bits (hashing, comparison) */
  };
} DVMAny;

/* A run of bytes that is not NUL-terminated: a borrowed argument (kDVMByteArrayPtr), and the
 * cell of string and bytes objects (kDVMStr, kDVMBytes), whose characters stay valid while the
 * object lives. */
typedef struct DVMByteArray {
  const char* data;
  size_t size;
} DVMByteArray;

/* Cell of a shape object (kDVMShape): size dimensions at data, owned by the object. */
typedef struct DVMShapeCell {
  const int64_t* data;
  size_t size;
} DVMShapeCell;

/* The packed calling convention.
 *
 * handle: the callee's own context (for a function object: what it was created with).
 * args, num_args: the arguments, borrowed for the duration of the call.
 * result: set to None by the caller; on success the callee stores an owned value there.
 * Returns 0 on success. On failure returns -1 after raising an error on the calling thread
 * (dvm_error_raise); it never returns nonzero without raising, and leaves result None. */
typedef int (*DVMSafeCall)(void* handle, const DVMAny* args, int32_t num_args, DVMAny* result);

/* Cell of a function object (kDVMFunction). Callers always go through safe_call, passing the
 * function object itself as handle. cpp_call is used only by C++ code built with tvm-ffi's
 * C++ headers; it is NULL for functions made in C or by discovm. */
typedef struct DVMFunctionCell {
  DVMSafeCall safe_call;
  void* cpp_call;
} DVMFunctionCell;

/* Values of the update_mode argument of DVMErrorCell.update_backtrace. */
typedef enum DVMBacktraceUpdateMode DVM_ABI_INT32_ENUM_BASE {
  kDVMBacktraceUpdateModeReplace = 0,
  kDVMBacktraceUpdateModeAppend = 1
} DVMBacktraceUpdateMode;

/* Cell of an error object (kDVMError). kind is an error class such as "ValueError",
 * message says what went wrong, backtrace lists the most recent frame first. The byte arrays
 * belong to the object. cause_chain (the error that caused this one) and extra_context are
 * object handles owned by the cell, or NULL. */
typedef struct DVMErrorCell {
  DVMByteArray kind;
  DVMByteArray message;
  DVMByteArray backtrace;
  void (*update_backtrace)(DVMObjectHandle self, const DVMByteArray* backtrace,
                           int32_t update_mode);
  DVMObjectHandle cause_chain;
  DVMObjectHandle extra_context;
} DVMErrorCell;

/* Cell of a sequence object (kDVMArray, kDVMList): size values of type DVMAny at data, room
 * for capacity. The object owns one reference to each element. If data_deleter is NULL the
 * elements live in the object's own allocation; otherwise data_deleter(data) frees them. */
typedef struct DVMSeqCell {
  void* data;
  int64_t size;
  int64_t capacity;
  void (*data_deleter)(void* data);
} DVMSeqCell;

/* Cell of an opaque foreign object (kDVMOpaquePyObject): for Python, a PyObject*. */
typedef struct DVMOpaqueObjectCell {
  void* handle;
} DVMOpaqueObjectCell;

/* ============================================================================================
 * Compile-time layout checks. Offsets are in bytes, for 64-bit targets.
 * ========================================================================================== */
#ifdef __cplusplus
#define DVM_ABI_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#define DVM_ABI_ALIGNOF(type) alignof(type)
#else
#define DVM_ABI_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#define DVM_ABI_ALIGNOF(type) _Alignof(type)
#endif
#define DVM_ABI_CHECK_TYPE(type, size, align)                                      \
  DVM_ABI_STATIC_ASSERT(sizeof(type) == (size), #type " must be " #size " bytes"); \
  DVM_ABI_STATIC_ASSERT(DVM_ABI_ALIGNOF(type) == (align), #type " must be aligned to " #align)
#define DVM_ABI_CHECK_MEMBER(type, member, offset)         \
  DVM_ABI_STATIC_ASSERT(offsetof(type, member) == (offset), \
                        #type "." #member " must be at offset " #offset)

DVM_ABI_STATIC_ASSERT(sizeof(void*) == 8 && sizeof(size_t) == 8,
                      "discovm_abi.h describes 64-bit targets only");
DVM_ABI_STATIC_ASSERT(sizeof(double) == 8, "double must be 8 bytes");

/* DLPack (whichever header defined it) */
DVM_ABI_CHECK_TYPE(DLPackVersion, 8, 4);
DVM_ABI_CHECK_MEMBER(DLPackVersion, major, 0);
DVM_ABI_CHECK_MEMBER(DLPackVersion, minor, 4);
DVM_ABI_CHECK_TYPE(DLDeviceType, 4, 4);
DVM_ABI_CHECK_TYPE(DLDevice, 8, 4);
DVM_ABI_CHECK_MEMBER(DLDevice, device_type, 0);
DVM_ABI_CHECK_MEMBER(DLDevice, device_id, 4);
DVM_ABI_CHECK_TYPE(DLDataType, 4, 2);
DVM_ABI_CHECK_MEMBER(DLDataType, code, 0);
DVM_ABI_CHECK_MEMBER(DLDataType, bits, 1);
DVM_ABI_CHECK_MEMBER(DLDataType, lanes, 2);
DVM_ABI_CHECK_TYPE(DLTensor, 48, 8);
DVM_ABI_CHECK_MEMBER(DLTensor, data, 0);
DVM_ABI_CHECK_MEMBER(DLTensor, device, 8);
DVM_ABI_CHECK_MEMBER(DLTensor, ndim, 16);
DVM_ABI_CHECK_MEMBER(DLTensor, dtype, 20);
DVM_ABI_CHECK_MEMBER(DLTensor, shape, 24);
DVM_ABI_CHECK_MEMBER(DLTensor, strides, 32);
DVM_ABI_CHECK_MEMBER(DLTensor, byte_offset, 40);
DVM_ABI_CHECK_TYPE(DLManagedTensor, 64, 8);
DVM_ABI_CHECK_MEMBER(DLManagedTensor, dl_tensor, 0);
DVM_ABI_CHECK_MEMBER(DLManagedTensor, manager_ctx, 48);
DVM_ABI_CHECK_MEMBER(DLManagedTensor, deleter, 56);
DVM_ABI_CHECK_TYPE(DLManagedTensorVersioned, 80, 8);
DVM_ABI_CHECK_MEMBER(DLManagedTensorVersioned, version, 0);
DVM_ABI_CHECK_MEMBER(DLManagedTensorVersioned, manager_ctx, 8);
DVM_ABI_CHECK_MEMBER(DLManagedTensorVersioned, deleter, 16);
DVM_ABI_CHECK_MEMBER(DLManagedTensorVersioned, flags, 24);
DVM_ABI_CHECK_MEMBER(DLManagedTensorVersioned, dl_tensor, 32);
#if DLPACK_MINOR_VERSION >= 3 /* the exchange table is checked against DLPack 1.3 */
DVM_ABI_CHECK_TYPE(DLPackExchangeAPIHeader, 16, 8);
DVM_ABI_CHECK_MEMBER(DLPackExchangeAPIHeader, version, 0);
DVM_ABI_CHECK_MEMBER(DLPackExchangeAPIHeader, prev_api, 8);
DVM_ABI_CHECK_TYPE(DLPackExchangeAPI, 56, 8);
DVM_ABI_CHECK_MEMBER(DLPackExchangeAPI, header, 0);
DVM_ABI_CHECK_MEMBER(DLPackExchangeAPI, managed_tensor_allocator, 16);
DVM_ABI_CHECK_MEMBER(DLPackExchangeAPI, managed_tensor_from_py_object_no_sync, 24);
DVM_ABI_CHECK_MEMBER(DLPackExchangeAPI, managed_tensor_to_py_object_no_sync, 32);
DVM_ABI_CHECK_MEMBER(DLPackExchangeAPI, dltensor_from_py_object_no_sync, 40);
DVM_ABI_CHECK_MEMBER(DLPackExchangeAPI, current_work_stream, 48);
#endif

/* Type indices and flags */
DVM_ABI_CHECK_TYPE(DVMTypeIndex, 4, 4);
DVM_ABI_CHECK_TYPE(DVMObjectDeleterFlagBitMask, 4, 4);
DVM_ABI_CHECK_TYPE(DVMBacktraceUpdateMode, 4, 4);
DVM_ABI_STATIC_ASSERT(kDVMStaticObjectEnd == kDVMBigInt + 1,
                      "kDVMStaticObjectEnd must follow the last static object index");
DVM_ABI_STATIC_ASSERT(kDVMObjectDeleterFlagBitMaskBoth ==
                          (kDVMObjectDeleterFlagBitMaskStrong | kDVMObjectDeleterFlagBitMaskWeak),
                      "Both must be Strong | Weak");

/* Objects */
DVM_ABI_CHECK_TYPE(DVMObjectHandle, 8, 8);
DVM_ABI_CHECK_TYPE(DVMObject, 24, 8);
DVM_ABI_CHECK_MEMBER(DVMObject, combined_ref_count, 0);
DVM_ABI_CHECK_MEMBER(DVMObject, type_index, 8);
DVM_ABI_CHECK_MEMBER(DVMObject, __padding, 12);
DVM_ABI_CHECK_MEMBER(DVMObject, deleter, 16);
DVM_ABI_CHECK_MEMBER(DVMObject, __ensure_align, 16);

/* Packed values */
DVM_ABI_CHECK_TYPE(DVMAny, 16, 8);
DVM_ABI_CHECK_MEMBER(DVMAny, type_index, 0);
DVM_ABI_CHECK_MEMBER(DVMAny, zero_padding, 4);
DVM_ABI_CHECK_MEMBER(DVMAny, small_str_len, 4);
DVM_ABI_CHECK_MEMBER(DVMAny, v_int64, 8);
DVM_ABI_CHECK_MEMBER(DVMAny, v_float64, 8);
DVM_ABI_CHECK_MEMBER(DVMAny, v_ptr, 8);
DVM_ABI_CHECK_MEMBER(DVMAny, v_c_str, 8);
DVM_ABI_CHECK_MEMBER(DVMAny, v_obj, 8);
DVM_ABI_CHECK_MEMBER(DVMAny, v_dtype, 8);
DVM_ABI_CHECK_MEMBER(DVMAny, v_device, 8);
DVM_ABI_CHECK_MEMBER(DVMAny, v_bytes, 8);
DVM_ABI_CHECK_MEMBER(DVMAny, v_uint64, 8);
DVM_ABI_CHECK_TYPE(DVMByteArray, 16, 8);
DVM_ABI_CHECK_MEMBER(DVMByteArray, data, 0);
DVM_ABI_CHECK_MEMBER(DVMByteArray, size, 8);
DVM_ABI_CHECK_TYPE(DVMShapeCell, 16, 8);
DVM_ABI_CHECK_MEMBER(DVMShapeCell, data, 0);
DVM_ABI_CHECK_MEMBER(DVMShapeCell, size, 8);
DVM_ABI_CHECK_TYPE(DVMSafeCall, 8, 8);
DVM_ABI_CHECK_TYPE(DVMFunctionCell, 16, 8);
DVM_ABI_CHECK_MEMBER(DVMFunctionCell, safe_call, 0);
DVM_ABI_CHECK_MEMBER(DVMFunctionCell, cpp_call, 8);
DVM_ABI_CHECK_TYPE(DVMErrorCell, 72, 8);
DVM_ABI_CHECK_MEMBER(DVMErrorCell, kind, 0);
DVM_ABI_CHECK_MEMBER(DVMErrorCell, message, 16);
DVM_ABI_CHECK_MEMBER(DVMErrorCell, backtrace, 32);
DVM_ABI_CHECK_MEMBER(DVMErrorCell, update_backtrace, 48);
DVM_ABI_CHECK_MEMBER(DVMErrorCell, cause_chain, 56);
DVM_ABI_CHECK_MEMBER(DVMErrorCell, extra_context, 64);
DVM_ABI_CHECK_TYPE(DVMSeqCell, 32, 8);
DVM_ABI_CHECK_MEMBER(DVMSeqCell, data, 0);
DVM_ABI_CHECK_MEMBER(DVMSeqCell, size, 8);
DVM_ABI_CHECK_MEMBER(DVMSeqCell, capacity, 16);
DVM_ABI_CHECK_MEMBER(DVMSeqCell, data_deleter, 24);
DVM_ABI_CHECK_TYPE(DVMOpaqueObjectCell, 8, 8);
DVM_ABI_CHECK_MEMBER(DVMOpaqueObjectCell, handle, 0);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DISCOVM_ABI_H */
