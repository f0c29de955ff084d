//! Tensors: host allocation, the DLTensor view, DLPack exchange, and the VM's ordered access:
//! synchronous small reads and writes, asynchronous copies on a stream.

use std::ffi::c_void;
use std::mem::ManuallyDrop;

use super::stream::{dvm_stream, stream_arg};
use super::value::count_slice;
use super::{boundary, boundary_or, dvm_status, handle_ref, non_null, write_out};
use crate::abi::{DLDataType, DLDevice, DLManagedTensorVersioned, DLTensor};
use crate::object::{Tensor, TensorCell};
use crate::vm;

/// A tensor (a Tensor object: its DLTensor sits right after the object header, as in tvm-ffi).
#[allow(non_camel_case_types)]
pub struct dvm_tensor {
    _opaque: [u8; 0],
}

/// The tensor behind a handle, lent for the call. Streams order the uses of tensors this
/// library made; a tensor object another library made (tvm-ffi's, say) is refused here, since
/// its uses could not be ordered across calls: import it once (`dvm_tensor_from_dlpack`, or
/// `tensor_from_dlpack` through tvm-ffi) and use the import.
///
/// # Safety
/// `t` is NULL or a live object handle.
pub(crate) unsafe fn tensor_arg(
    t: *const dvm_tensor,
    name: &str,
) -> crate::Result<ManuallyDrop<Tensor>> {
    // SAFETY: as the caller promises.
    let object = unsafe { handle_ref::<TensorCell, _>(t, name, "a tensor") }?;
    if !Tensor::is_native(&object) {
        return Err(crate::Error::type_error(format!(
            "`{name}` is a tensor made by another library: import it first (tensor_from_dlpack), \
             so that streams can order its uses"
        )));
    }
    // A tensor made here is used as it is: nothing is allocated, and the lent reference stays
    // the caller's.
    Ok(ManuallyDrop::new(Tensor::from_object(
        ManuallyDrop::into_inner(object),
    )?))
}

fn into_handle(t: Tensor) -> *mut dvm_tensor {
    t.into_object().into_raw().as_ptr().cast()
}

/// Allocates a compact tensor on `device`: on `kDLCPU` zero-filled and 64-byte aligned; on
/// `kDLCUDA` uninitialised GPU memory (`data` is the device pointer) from the device's memory
/// pool, freed when the last reference goes, in stream order (after the work already queued on
/// this library's streams and on the device's legacy default stream; the host does not wait);
/// on `kDLCUDAHost` (device 0) zero-filled page-locked host memory, which GPUs copy to and from
/// directly and the host reads and writes like `kDLCPU` memory.
///
/// Ownership: `*out` is a new reference; free it with `dvm_tensor_free`.
/// Errors: `ValueError` for a negative `ndim` or dimension, an invalid dtype, a size that
/// overflows, NULL pointers, or a `kDLCUDAHost` device id other than 0; `DeviceUnavailable`
/// for devices without a backend (a CUDA device or page-locked memory without the driver or a
/// GPU, a CUDA device out of range: the message says which).
/// Undefined: `shape` with fewer than `ndim` values.
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
        let tensor = crate::device::empty(dims, dtype, device)?;
        // SAFETY: checked non-NULL above.
        unsafe { write_out(out, into_handle(tensor)) };
        Ok(())
    })
}

/// Drops a reference to a tensor (to any object: it is dropped as by `dvm_object_dec_ref`).
/// NULL is fine. Work still queued on a stream that uses the
/// tensor keeps it alive until that work finishes, on the device too (a DLPack tensor's
/// deleter runs after that: on a GPU stream, by the stream's next sync or close at the latest).
///
/// Undefined: dropping a reference the caller does not own.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_tensor_free(t: *mut dvm_tensor) {
    if !t.is_null() {
        // SAFETY: the caller gives up a reference it owns.
        unsafe { super::dvm_object_dec_ref(t.cast()) };
    }
}

/// The tensor's DLTensor, or NULL if `t` is NULL or not a tensor (any tensor object, also one
/// another library made).
///
/// Ownership: borrowed; valid while `t` lives.
/// Undefined: using the DLTensor after `t`'s last release, or writing through it.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_tensor_dl(t: *const dvm_tensor) -> *const DLTensor {
    boundary_or(
        |_| std::ptr::null(),
        || {
            // SAFETY: NULL or a live handle, by contract.
            let object = unsafe { handle_ref::<TensorCell, _>(t, "t", "a tensor") }?;
            // The handle's own reference keeps the DLTensor alive after ours goes.
            Ok(object.dl() as *const DLTensor)
        },
    )
}

/// Wraps a DLPack tensor without copying. On success the tensor takes ownership of `managed`
/// and calls its deleter when the last reference goes; on failure the caller keeps it.
///
/// Ownership: `*out` is a new reference; free it with `dvm_tensor_free`.
/// Errors: `ValueError` for NULL pointers, an unsupported DLPack major version, or an invalid
/// description (negative dims or strides, NULL data, sizes that overflow).
/// Undefined: `managed` describing memory that is not there; two tensors over
/// shared memory used on different streams (streams order the uses of a tensor, not of
/// memory that two tensors share).
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
        let tensor = unsafe { Tensor::from_dlpack(managed) }.map_err(|e| e.context("`managed`"))?;
        // SAFETY: checked non-NULL above.
        unsafe { write_out(out, into_handle(tensor)) };
        Ok(())
    })
}

/// Exports a tensor through DLPack without copying. The export keeps the tensor alive until
/// the consumer calls `(*out)->deleter(*out)`. Any tensor object is accepted, also one another
/// library made. It first waits until the work queued so far on any stream that uses `t` has
/// finished (on a GPU too), since the consumer takes no part in the streams' ordering; work
/// queued through `t` later is not ordered with the consumer's.
///
/// Errors: `ValueError` for NULL pointers or an invalid description; `TypeError` if `t` is not
/// a tensor; `RuntimeError` when called from a callback running on the executor that still has
/// to run such work.
/// Undefined: calling the export's deleter more than once, or using the export
/// after it.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_tensor_to_dlpack(
    t: *mut dvm_tensor,
    out: *mut *mut DLManagedTensorVersioned,
) -> dvm_status {
    boundary(|| {
        let out = non_null(out, "out")?;
        // SAFETY: NULL or a live handle, by contract.
        let object = unsafe { handle_ref::<TensorCell, _>(t, "t", "a tensor") }?;
        let tensor = Tensor::from_object((*object).clone())?;
        vm::settle(&tensor)?;
        // SAFETY: checked non-NULL above.
        unsafe { write_out(out, tensor.to_dlpack().as_ptr()) };
        Ok(())
    })
}

/// A C buffer of `nbytes` as a byte pointer; NULL is accepted only when `nbytes` is 0.
fn buffer(ptr: *const c_void, nbytes: usize, name: &str) -> crate::Result<*mut u8> {
    if nbytes == 0 {
        return Ok(std::ptr::NonNull::<u8>::dangling().as_ptr());
    }
    Ok(non_null(ptr, name)?.as_ptr().cast())
}

/// Copies the first `nbytes` bytes of `t` into `dst` and returns when they are there. The read
/// is ordered after every earlier use of `t` on any stream (an earlier `dvm_tensor_copy` into
/// `t` has landed). `nbytes` may be less than the tensor's size (the first bytes are read) and
/// 0 (nothing is copied, but the read still waits for earlier writers and reports their
/// failure). Meant for small reads (a scalar, a flag): it runs on the stream that last wrote
/// `t`, and its hot path allocates nothing.
///
/// Ownership: `t` is borrowed; `dst` must hold `nbytes` bytes.
/// Errors: `ValueError` if `t` is NULL, `dst` is NULL with `nbytes` > 0, `nbytes` exceeds the
/// tensor's size, or `t` is a strided view; `TypeError` if `t` is not a tensor, or is a tensor
/// object another library made (import it with `dvm_tensor_from_dlpack` first, so that its uses
/// can be ordered); `DeviceUnavailable` for a device without a backend; the failure that should have written
/// `t`, if an earlier callback or copy failed; `RuntimeError` when called from a callback
/// running on the executor that would run the read.
/// Undefined: `dst` with fewer than `nbytes` writable bytes; `t` after its last
/// release.
/// Thread safety: any thread; reads from several threads do not order among themselves.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_tensor_read(
    t: *mut dvm_tensor,
    dst: *mut c_void,
    nbytes: usize,
) -> dvm_status {
    boundary(|| {
        // SAFETY: NULL or a live handle, by contract.
        let tensor = unsafe { tensor_arg(t, "t") }?;
        let dst = buffer(dst, nbytes, "dst")?;
        vm::check_access(&tensor, (nbytes, "nbytes"), vm::Access::Read)?;
        // SAFETY: the caller vouches for `nbytes` writable bytes at `dst`; `nbytes` fits in the
        // tensor, so it is at most isize::MAX.
        let dst = unsafe { std::slice::from_raw_parts_mut(dst, nbytes) };
        vm::read(&tensor, dst)
    })
}

/// Copies `nbytes` bytes from `src` into the start of `t` and returns when they are there.
/// The write is ordered after every earlier use of `t` on any stream, and later uses see it.
/// `nbytes` may be less than the tensor's size (the rest is left as it was) and 0 (nothing
/// happens). A write of the whole tensor clears the failure of an earlier producer.
///
/// Ownership: `t` is borrowed; `src` must hold `nbytes` bytes.
/// Errors: as for `dvm_tensor_read`, with `src` for `dst`; also `ValueError` if `t` is
/// read-only (a DLPack tensor whose producer set the read-only flag).
/// Undefined: `src` with fewer than `nbytes` readable bytes; `t` after its last
/// release.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_tensor_write(
    t: *mut dvm_tensor,
    src: *const c_void,
    nbytes: usize,
) -> dvm_status {
    boundary(|| {
        // SAFETY: NULL or a live handle, by contract.
        let tensor = unsafe { tensor_arg(t, "t") }?;
        let src = buffer(src, nbytes, "src")?;
        vm::check_access(&tensor, (nbytes, "nbytes"), vm::Access::Write)?;
        // SAFETY: the caller vouches for `nbytes` readable bytes at `src`; `nbytes` fits in the
        // tensor, so it is at most isize::MAX.
        let src = unsafe { std::slice::from_raw_parts(src.cast_const(), nbytes) };
        vm::write(&tensor, src)
    })
}

/// Queues a copy of `src` into `dst` on stream `s` and returns at once. The copy runs after
/// everything submitted to `s` before it and after every earlier use of either tensor on other
/// streams (later reads of `dst` and writes of either wait for it). Both tensors are kept alive
/// until the copy has run, even if the caller frees them at once.
///
/// Ownership: all three are borrowed.
/// Errors: `ValueError` if any is NULL, the shapes, dtypes or byte sizes differ, either is a
/// strided view, `dst` is read-only (a DLPack flag), or the two are distinct tensors over
/// shared memory (DLPack imports of one buffer; a tensor copied onto itself is left as it is);
/// `TypeError` for handles of the wrong type and for tensor objects another library made (as for
/// `dvm_tensor_read`);
/// `DeviceUnavailable` if a tensor is on a device the stream cannot reach (a host stream
/// reaches host memory, `kDLCPU` and `kDLCUDAHost`; a CUDA stream reaches host memory and every
/// GPU: a copy between two GPUs runs on the stream's GPU as a peer copy). A failure while the copy runs (its source was never
/// written because an earlier callback failed) is reported by the next `dvm_stream_sync(s)`.
/// Undefined: handles after their last release.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_tensor_copy(
    dst: *mut dvm_tensor,
    src: *mut dvm_tensor,
    s: *mut dvm_stream,
) -> dvm_status {
    boundary(|| {
        // SAFETY: NULL or live handles, by contract.
        let (dst, src, stream) = unsafe {
            (
                tensor_arg(dst, "dst")?,
                tensor_arg(src, "src")?,
                stream_arg(s, "s")?,
            )
        };
        stream.0.copy(&dst, &src)
    })
}
