//! DLPack 1.x types, with DLPack's own names.

use std::ffi::c_void;
use std::mem::{align_of, offset_of, size_of};

/// `kDLCPU`.
pub const KDL_CPU: i32 = 1;
/// `kDLCUDA`.
pub const KDL_CUDA: i32 = 2;
/// `kDLCUDAHost`.
pub const KDL_CUDA_HOST: i32 = 3;

/// `kDLInt`, `kDLUInt`, `kDLFloat`, `kDLOpaqueHandle`, `kDLBfloat`, `kDLComplex`, `kDLBool`.
pub const KDL_INT: u8 = 0;
pub const KDL_UINT: u8 = 1;
pub const KDL_FLOAT: u8 = 2;
pub const KDL_OPAQUE_HANDLE: u8 = 3;
pub const KDL_BFLOAT: u8 = 4;
pub const KDL_COMPLEX: u8 = 5;
pub const KDL_BOOL: u8 = 6;
/// The highest type code DLPack 1.3 defines (`kDLFloat4_e2m1fn`).
pub const KDL_LAST_TYPE_CODE: u8 = 17;

/// The DLPack version this library produces in `DLManagedTensorVersioned`.
pub const DLPACK_MAJOR_VERSION: u32 = 1;
pub const DLPACK_MINOR_VERSION: u32 = 3;

/// `DLDevice`: where a tensor lives.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DLDevice {
    pub device_type: i32,
    pub device_id: i32,
}

impl DLDevice {
    pub const fn cpu() -> Self {
        DLDevice {
            device_type: KDL_CPU,
            device_id: 0,
        }
    }
}

/// `DLDataType`: element type code, bits per lane and lanes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

impl DLDataType {
    pub const fn new(code: u8, bits: u8, lanes: u16) -> Self {
        DLDataType { code, bits, lanes }
    }
}

/// `DLTensor`: a borrowed view of strided memory. `strides` NULL means compact row-major.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

/// `DLPackVersion`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLPackVersion {
    pub major: u32,
    pub minor: u32,
}

/// `DLManagedTensor` (DLPack 0.x style, no version).
#[repr(C)]
pub struct DLManagedTensor {
    pub dl_tensor: DLTensor,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// `DLManagedTensorVersioned`: a tensor together with the means to release it.
#[repr(C)]
pub struct DLManagedTensorVersioned {
    pub version: DLPackVersion,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    pub flags: u64,
    pub dl_tensor: DLTensor,
}

/// `DLPACK_FLAG_BITMASK_READ_ONLY`.
pub const DLPACK_FLAG_BITMASK_READ_ONLY: u64 = 1;

const _: () = {
    assert!(size_of::<DLDevice>() == 8 && align_of::<DLDevice>() == 4);
    assert!(size_of::<DLDataType>() == 4 && align_of::<DLDataType>() == 2);
    assert!(size_of::<DLTensor>() == 48 && align_of::<DLTensor>() == 8);
    assert!(offset_of!(DLTensor, device) == 8);
    assert!(offset_of!(DLTensor, ndim) == 16);
    assert!(offset_of!(DLTensor, dtype) == 20);
    assert!(offset_of!(DLTensor, shape) == 24);
    assert!(offset_of!(DLTensor, strides) == 32);
    assert!(offset_of!(DLTensor, byte_offset) == 40);
    assert!(size_of::<DLManagedTensor>() == 64);
    assert!(offset_of!(DLManagedTensor, manager_ctx) == 48);
    assert!(offset_of!(DLManagedTensor, deleter) == 56);
    assert!(size_of::<DLPackVersion>() == 8);
    assert!(size_of::<DLManagedTensorVersioned>() == 80);
    assert!(offset_of!(DLManagedTensorVersioned, manager_ctx) == 8);
    assert!(offset_of!(DLManagedTensorVersioned, deleter) == 16);
    assert!(offset_of!(DLManagedTensorVersioned, flags) == 24);
    assert!(offset_of!(DLManagedTensorVersioned, dl_tensor) == 32);
};
