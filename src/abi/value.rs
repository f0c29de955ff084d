//! The 16-byte tagged value, the 24-byte object header and the object cells.

use std::ffi::{c_char, c_void};
use std::mem::{align_of, offset_of, size_of};
use std::sync::atomic::AtomicU64;

use super::{DLDataType, DLDevice};

/// Type indices, equal to tvm-ffi's `TVMFFITypeIndex`.
pub mod type_index {
    pub const NONE: i32 = 0;
    pub const INT: i32 = 1;
    pub const BOOL: i32 = 2;
    pub const FLOAT: i32 = 3;
    pub const OPAQUE_PTR: i32 = 4;
    pub const DATA_TYPE: i32 = 5;
    pub const DEVICE: i32 = 6;
    pub const DL_TENSOR_PTR: i32 = 7;
    pub const RAW_STR: i32 = 8;
    pub const BYTE_ARRAY_PTR: i32 = 9;
    pub const OBJECT_RVALUE_REF: i32 = 10;
    pub const SMALL_STR: i32 = 11;
    pub const SMALL_BYTES: i32 = 12;
    pub const UNCHANGED: i32 = 13;
    pub const STATIC_OBJECT_BEGIN: i32 = 64;
    pub const OBJECT: i32 = 64;
    pub const STR: i32 = 65;
    pub const BYTES: i32 = 66;
    pub const ERROR: i32 = 67;
    pub const FUNCTION: i32 = 68;
    pub const SHAPE: i32 = 69;
    pub const TENSOR: i32 = 70;
    pub const ARRAY: i32 = 71;
    pub const MAP: i32 = 72;
    pub const MODULE: i32 = 73;
    pub const OPAQUE_PY_OBJECT: i32 = 74;
    pub const LIST: i32 = 75;
    pub const DICT: i32 = 76;
    pub const VISIT_INTERRUPT: i32 = 77;
    pub const BIG_INT: i32 = 78;
    pub const STATIC_OBJECT_END: i32 = 79;
    pub const DYN_OBJECT_BEGIN: i32 = 128;
}

/// Deleter flag: run the destructor, keep the memory (strong count reached zero).
pub const DELETER_FLAG_STRONG: i32 = 1;
/// Deleter flag: free the memory (weak count reached zero).
pub const DELETER_FLAG_WEAK: i32 = 2;
/// Both at once: the common case.
pub const DELETER_FLAG_BOTH: i32 = 3;

/// The object deleter: `deleter(self, flags)`.
pub type DVMDeleter = unsafe extern "C" fn(*mut c_void, i32);

/// The object header (tvm-ffi's `TVMFFIObject`). Strong count in the low 32 bits of
/// `combined_ref_count`, weak count in the high 32 bits; a new object starts at `0x1_00000001`.
#[repr(C)]
pub struct DVMObject {
    pub combined_ref_count: AtomicU64,
    pub type_index: i32,
    pub __padding: u32,
    pub deleter: Option<DVMDeleter>,
}

/// The 8-byte payload of [`DVMAny`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union DVMAnyPayload {
    pub v_int64: i64,
    pub v_float64: f64,
    pub v_ptr: *mut c_void,
    pub v_c_str: *const c_char,
    pub v_obj: *mut DVMObject,
    pub v_dtype: DLDataType,
    pub v_device: DLDevice,
    pub v_bytes: [u8; 8],
    pub v_uint64: u64,
}

/// The tagged value (tvm-ffi's `TVMFFIAny`). `small_str_len` is tvm-ffi's
/// `zero_padding | small_str_len` union: the length for small strings and bytes, 0 otherwise.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DVMAny {
    pub type_index: i32,
    pub small_str_len: u32,
    pub v: DVMAnyPayload,
}

impl DVMAny {
    /// The None value, all bytes zero.
    pub const fn none() -> Self {
        DVMAny {
            type_index: type_index::NONE,
            small_str_len: 0,
            v: DVMAnyPayload { v_uint64: 0 },
        }
    }
}

/// `TVMFFIByteArray`: the cell of String and Bytes objects, and the target of ByteArrayPtr.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DVMByteArray {
    pub data: *const c_char,
    pub size: usize,
}

/// `TVMFFIShapeCell`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DVMShapeCell {
    pub data: *const i64,
    pub size: usize,
}

/// The packed calling convention: 0 on success, -1 after raising an error in the calling
/// thread's error slot. Arguments are borrowed; the result is owned by the caller.
pub type DVMSafeCall = unsafe extern "C" fn(
    handle: *mut c_void,
    args: *const DVMAny,
    num_args: i32,
    result: *mut DVMAny,
) -> i32;

/// `TVMFFIFunctionCell`. `cpp_call` is NULL for every function this library makes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DVMFunctionCell {
    pub safe_call: Option<DVMSafeCall>,
    pub cpp_call: *mut c_void,
}

/// `TVMFFIErrorCell`.
#[repr(C)]
pub struct DVMErrorCell {
    pub kind: DVMByteArray,
    pub message: DVMByteArray,
    pub backtrace: DVMByteArray,
    pub update_backtrace:
        Option<unsafe extern "C" fn(self_: *mut c_void, backtrace: *const DVMByteArray, mode: i32)>,
    pub cause_chain: *mut DVMObject,
    pub extra_context: *mut DVMObject,
}

/// `TVMFFISeqCell`: the cell of Array and List objects.
#[repr(C)]
pub struct DVMSeqCell {
    pub data: *mut DVMAny,
    pub size: i64,
    pub capacity: i64,
    pub data_deleter: Option<unsafe extern "C" fn(*mut c_void)>,
}

/// Size of the object header: every object's cell starts at this offset.
pub const OBJECT_HEADER_SIZE: usize = 24;

const _: () = {
    assert!(size_of::<DVMAny>() == 16 && align_of::<DVMAny>() == 8);
    assert!(offset_of!(DVMAny, small_str_len) == 4);
    assert!(offset_of!(DVMAny, v) == 8);
    assert!(size_of::<DVMObject>() == OBJECT_HEADER_SIZE && align_of::<DVMObject>() == 8);
    assert!(offset_of!(DVMObject, type_index) == 8);
    assert!(offset_of!(DVMObject, __padding) == 12);
    assert!(offset_of!(DVMObject, deleter) == 16);
    assert!(size_of::<DVMByteArray>() == 16 && offset_of!(DVMByteArray, size) == 8);
    assert!(size_of::<DVMShapeCell>() == 16 && offset_of!(DVMShapeCell, size) == 8);
    assert!(size_of::<DVMFunctionCell>() == 16 && offset_of!(DVMFunctionCell, cpp_call) == 8);
    assert!(size_of::<DVMErrorCell>() == 72);
    assert!(offset_of!(DVMErrorCell, message) == 16);
    assert!(offset_of!(DVMErrorCell, backtrace) == 32);
    assert!(offset_of!(DVMErrorCell, update_backtrace) == 48);
    assert!(offset_of!(DVMErrorCell, cause_chain) == 56);
    assert!(offset_of!(DVMErrorCell, extra_context) == 64);
    assert!(size_of::<DVMSeqCell>() == 32);
    assert!(offset_of!(DVMSeqCell, size) == 8);
    assert!(offset_of!(DVMSeqCell, capacity) == 16);
    assert!(offset_of!(DVMSeqCell, data_deleter) == 24);
};
