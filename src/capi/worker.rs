//! Workers: one worker of a session, from the controller's side or from inside a function
//! running on it.

use std::mem::ManuallyDrop;

use super::dref::dvm_dref;
use super::session::{call_with, dvm_session, session_arg};
use super::{boundary, dvm_status, handle_ref, non_null, write_out};
use crate::abi::{DLDevice, DVMAny};
use crate::object::{Error, ErrorKind, ObjectRef};
use crate::session::{Target, WorkerCell, current_worker_handle, new_worker_handle};
use crate::worker::current as current_worker;

/// One worker of a session (an object; `dvm_object_*` work on it).
#[allow(non_camel_case_types)]
pub struct dvm_worker {
    _opaque: [u8; 0],
}

/// # Safety
/// `w` is NULL or a live object handle.
pub(crate) unsafe fn worker_arg(
    w: *const dvm_worker,
) -> crate::Result<ManuallyDrop<ObjectRef<WorkerCell>>> {
    // SAFETY: as the caller promises.
    unsafe { handle_ref::<WorkerCell, _>(w, "worker", "a worker") }
}

/// A handle to worker `worker` of the session.
///
/// Ownership: `*out` is a new reference (it keeps the session alive); free it with
/// `dvm_worker_free`.
/// Errors: `IndexError` for a worker out of range; `ValueError` for NULL pointers;
/// `SessionClosed` after shutdown.
/// Undefined: `session` after its last release.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_session_worker(
    session: *mut dvm_session,
    worker: i32,
    out: *mut *mut dvm_worker,
) -> dvm_status {
    boundary(|| {
        let out = non_null(out, "out")?;
        // SAFETY: NULL or a live handle, by contract.
        let session = unsafe { session_arg(session) }?;
        let handle = new_worker_handle(&session, worker.into())?;
        // SAFETY: checked non-NULL above.
        unsafe { write_out(out, handle.into_raw().as_ptr().cast()) };
        Ok(())
    })
}

/// Drops a reference to a worker handle (to any object: it is dropped as by
/// `dvm_object_dec_ref`). NULL is fine.
///
/// Undefined: dropping a reference the caller does not own.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_worker_free(worker: *mut dvm_worker) {
    if !worker.is_null() {
        // SAFETY: the caller gives up a reference it owns.
        unsafe { super::dvm_object_dec_ref(worker.cast()) };
    }
}

/// Calls the function in `func` on this worker only. The result DRef holds a value on this
/// worker alone.
///
/// Ownership and errors: as `dvm_session_call`.
/// Undefined: as for `dvm_session_call`.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_worker_call(
    worker: *mut dvm_worker,
    func: *const dvm_dref,
    args: *const DVMAny,
    num_args: i32,
    out: *mut *mut dvm_dref,
) -> dvm_status {
    boundary(|| {
        // SAFETY: NULL or a live handle, by contract.
        let worker = unsafe { worker_arg(worker) }?;
        let session = worker.session()?;
        // SAFETY: as documented on `dvm_session_call`.
        unsafe { call_with(&session, Target::One(worker.id), func, args, num_args, out) }
    })
}

/// Waits until every call sent so far to this worker has finished.
///
/// Errors: as `dvm_session_sync_worker`.
/// Undefined: `worker` after its last release.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_worker_sync(worker: *mut dvm_worker) -> dvm_status {
    boundary(|| {
        // SAFETY: NULL or a live handle, by contract.
        let worker = unsafe { worker_arg(worker) }?;
        worker.session()?.sync_worker(worker.id)
    })
}

/// The worker's id (0-based), or -1 if `worker` is not a worker.
///
/// Undefined: `worker` after its last release.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_worker_id(worker: *const dvm_worker) -> i32 {
    // SAFETY: NULL or a live handle, by contract.
    super::boundary_or(|_| -1, || Ok(unsafe { worker_arg(worker) }?.id as i32))
}

/// The worker's device.
///
/// Errors: `ValueError` for NULL pointers; `TypeError` if `worker` is not a worker.
/// Undefined: `worker` after its last release.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_worker_device(
    worker: *const dvm_worker,
    out: *mut DLDevice,
) -> dvm_status {
    boundary(|| {
        let out = non_null(out, "out")?;
        // SAFETY: NULL or a live handle, by contract.
        let worker = unsafe { worker_arg(worker) }?;
        let device = worker.session()?.worker_device(worker.id);
        // SAFETY: checked non-NULL above.
        unsafe { write_out(out, device) };
        Ok(())
    })
}

/// The id of the worker running the calling thread, or -1 off worker threads.
///
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn dvm_current_worker_id() -> i32 {
    current_worker().map_or(-1, |info| info.id as i32)
}

/// The worker running the calling thread, for functions that run on workers.
///
/// Ownership: `*out` is borrowed: valid while the function runs (do not free it; take a
/// reference with `dvm_object_inc_ref` to keep it).
/// Errors: `RuntimeError` when called off a worker thread; `ValueError` if `out` is NULL.
/// Undefined: using `*out` once the function running on the worker returned,
/// unless a reference was taken.
/// Thread safety: worker threads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_current_worker(out: *mut *mut dvm_worker) -> dvm_status {
    boundary(|| {
        let out = non_null(out, "out")?;
        let handle = current_worker_handle().ok_or_else(|| {
            Error::new(
                ErrorKind::Runtime,
                "dvm_current_worker called off a worker thread",
            )
        })?;
        // The worker thread keeps its own reference while it runs, so a borrowed pointer is valid.
        let object = handle.view().as_object()?;
        // SAFETY: checked non-NULL above.
        unsafe { write_out(out, object.as_ptr().cast()) };
        Ok(())
    })
}
