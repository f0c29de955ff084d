//! Streams: ordered, asynchronous copies on a device, with cross-stream soft sync.

use std::mem::ManuallyDrop;

use super::{boundary, dvm_status, handle_ref, non_null, write_out};
use crate::abi::DLDevice;
use crate::object::ObjectRef;
use crate::vm::{Stream, StreamCell, stream_handle};

/// A stream (an object; `dvm_object_*` work on it). Work submitted to one stream runs in
/// submission order; work on different streams is ordered only through the tensors it uses
/// (and `dvm_stream_wait`).
#[allow(non_camel_case_types)]
pub struct dvm_stream {
    _opaque: [u8; 0],
}

/// The stream behind a handle, lent for the call.
///
/// # Safety
/// `s` is NULL or a live object handle.
pub(crate) unsafe fn stream_arg(
    s: *const dvm_stream,
    name: &str,
) -> crate::Result<ManuallyDrop<ObjectRef<StreamCell>>> {
    // SAFETY: as the caller promises.
    unsafe { handle_ref::<StreamCell, _>(s, name, "a stream") }
}

/// Creates a stream on `device`. All streams of a device are run by one executor thread of
/// the library, in the order work was submitted. On `kDLCUDA` each stream is a non-blocking
/// CUDA stream: copies are queued on the GPU and ordered across streams with CUDA events
/// (recorded only when another stream waits). On `kDLCUDAHost` it is a host stream.
///
/// Ownership: `*out` is a new reference; free it with `dvm_stream_free`.
/// Errors: `ValueError` if `out` is NULL or the device id is out of range;
/// `DeviceUnavailable` for devices without a backend (`kDLCPU` device 0, the GPUs the CUDA
/// driver finds and, where there is a GPU, `kDLCUDAHost` device 0 have one).
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_stream_new(device: DLDevice, out: *mut *mut dvm_stream) -> dvm_status {
    boundary(|| {
        let out = non_null(out, "out")?;
        let stream = Stream::new(device)?;
        // SAFETY: checked non-NULL above.
        unsafe { write_out(out, stream_handle(stream).into_raw().as_ptr().cast()) };
        Ok(())
    })
}

/// Waits until everything submitted to `s` so far has run, then reports the first failure on
/// `s` since its last sync (a failed callback, or an instruction skipped because its input was
/// not written), with a count of the others. Reporting clears them.
///
/// Ownership: `s` is borrowed.
/// Errors: `ValueError` if `s` is NULL; `TypeError` if it is not a stream; the kind of the
/// first failure; `RuntimeError` when called from a callback running on the same executor.
/// Undefined: `s` after its last release.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_stream_sync(s: *mut dvm_stream) -> dvm_status {
    boundary(|| {
        // SAFETY: NULL or a live handle, by contract.
        let stream = unsafe { stream_arg(s, "s") }?;
        stream.0.sync()
    })
}

/// Makes work submitted to `waiter` from now on wait until everything submitted to
/// `signaler` so far has run (soft sync: the calling thread does not wait).
///
/// Ownership: both are borrowed.
/// Errors: `ValueError` if either is NULL; `TypeError` if either is not a stream.
/// Undefined: a stream after its last release.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_stream_wait(
    waiter: *mut dvm_stream,
    signaler: *mut dvm_stream,
) -> dvm_status {
    boundary(|| {
        // SAFETY: NULL or live handles, by contract.
        let (waiter, signaler) = unsafe {
            (
                stream_arg(waiter, "waiter")?,
                stream_arg(signaler, "signaler")?,
            )
        };
        waiter.0.wait_for(&signaler.0)
    })
}

/// Drops a reference to a stream (to any object: it is dropped as by `dvm_object_dec_ref`).
/// NULL is fine. When the last reference goes, the stream first
/// finishes the work submitted to it (this call then waits for it); failures not yet reported
/// by `dvm_stream_sync` are dropped, so sync first to see them. Tensors in use by that work stay
/// alive until it finishes.
///
/// Undefined: dropping a reference the caller does not own.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_stream_free(s: *mut dvm_stream) {
    if !s.is_null() {
        // SAFETY: the caller gives up a reference it owns.
        unsafe { super::dvm_object_dec_ref(s.cast()) };
    }
}
