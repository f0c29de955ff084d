//! Tensors: host allocation, the DLTensor view, DLPack exchange.

use std::mem::ManuallyDrop;

use super::value::count_slice;
use super::{boundary, boundary_or, dvm_status, handle_ref, lend, non_null, write_out};
use crate::abi::{DLDataType, DLDevice, DLManagedTensorVersioned, DLTensor};
use crate::object::{Tensor, TensorCell};

/// A tensor (a Tensor object: its DLTensor sits right after the object header, as in tvm-ffi).
#[allow(non_camel_case_types)]
pub struct dvm_tensor {
    _opaque: [u8; 0],
}

/// The tensor behind a handle, lent for the call.
///
/// # Safety
/// `t` is NULL or a live object handle.
pub(crate) unsafe fn tensor_arg(
    t: *const dvm_tensor,
    name: &str,
) -> crate::Result<ManuallyDrop<Tensor>> {
    // SAFETY: as the caller promises.
    let object = unsafe { handle_ref::<TensorCell, _>(t, name, "a tensor") }?;
    Ok(lend(object, Tensor::from_object))
}

fn into_handle(t: Tensor) -> *mut dvm_tensor {
    t.into_object().into_raw().as_ptr().cast()
}

/// Allocates a compact, zero-filled tensor, 64-byte aligned. Only `kDLCPU` devices for now.
///
/// Ownership: `*out` is a new reference; free it with `dvm_tensor_free`.
/// Errors: `ValueError` for a negative `ndim` or dimension, an invalid dtype, a size that
/// overflows, or NULL pointers; `DeviceUnavailable` for devices without a backend.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_tensor_empty(
    shape: *const i64,
    ndim: i32,
    dtype: DLDataType,
    device: DLDevice,
    out: *mut *mut dvm_tensor,
) -> dvm_status {
    boundary(|| {
        let out = non_null(out, "out")?;
        // SAFETY: the caller vouches for `ndim` dims.
        let dims = unsafe { count_slice(shape, ndim, "shape", "ndim") }?;
        let tensor = Tensor::empty(dims, dtype, device)?;
        // SAFETY: checked non-NULL above.
        unsafe { write_out(out, into_handle(tensor)) };
        Ok(())
    })
}

/// Drops a reference to a tensor. NULL is fine.
///
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_tensor_free(t: *mut dvm_tensor) {
    if !t.is_null() {
        // SAFETY: the caller gives up a reference it owns.
        unsafe { super::dvm_object_dec_ref(t.cast()) };
    }
}

/// The tensor's DLTensor, or NULL if `t` is NULL or not a tensor.
///
/// Ownership: borrowed; valid while `t` lives.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_tensor_dl(t: *const dvm_tensor) -> *const DLTensor {
    boundary_or(
        |_| std::ptr::null(),
        || {
            // SAFETY: NULL or a live handle, by contract.
            let tensor = unsafe { tensor_arg(t, "t") }?;
            // The handle's own reference keeps the DLTensor alive after ours goes.
            Ok(tensor.dl() as *const DLTensor)
        },
    )
}

/// Wraps a DLPack tensor without copying. On success the tensor takes ownership of `managed`
/// and calls its deleter when the last reference goes; on failure the caller keeps it.
///
/// Ownership: `*out` is a new reference; free it with `dvm_tensor_free`.
/// Errors: `ValueError` for NULL pointers, an unsupported DLPack major version, or an invalid
/// description (negative dims or strides, NULL data, sizes that overflow).
/// Thread safety: any thread; the deleter may run on any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_tensor_from_dlpack(
    managed: *mut DLManagedTensorVersioned,
    out: *mut *mut dvm_tensor,
) -> dvm_status {
    boundary(|| {
        let out = non_null(out, "out")?;
        let managed = non_null(managed, "managed")?;
        // SAFETY: the caller hands over a valid managed tensor.
        let tensor = unsafe { Tensor::from_dlpack(managed) }?;
        // SAFETY: checked non-NULL above.
        unsafe { write_out(out, into_handle(tensor)) };
        Ok(())
    })
}

/// Exports a tensor through DLPack without copying. The export keeps the tensor alive until
/// the consumer calls `(*out)->deleter(*out)`.
///
/// Errors: `ValueError` for NULL pointers; `TypeError` if `t` is not a tensor.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_tensor_to_dlpack(
    t: *mut dvm_tensor,
    out: *mut *mut DLManagedTensorVersioned,
) -> dvm_status {
    boundary(|| {
        let out = non_null(out, "out")?;
        // SAFETY: NULL or a live handle, by contract.
        let tensor = unsafe { tensor_arg(t, "t") }?;
        // SAFETY: checked non-NULL above.
        unsafe { write_out(out, tensor.to_dlpack().as_ptr()) };
        Ok(())
    })
}
