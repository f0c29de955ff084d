//! The `extern "C"` boundary. Every exported function runs its body through `boundary`:
//! panics are caught, errors go to the calling thread's last-error slot, and the status says
//! which kind. Bodies only translate C arguments and call safe Rust below this module.

// The exported functions are `unsafe extern "C"`: their contract with C callers (valid pointers,
// handles that live for the call) is stated in each doc comment under Ownership, Errors and
// Thread safety, the form the generated header carries, rather than in a `# Safety` section.
#![allow(clippy::missing_safety_doc)]

mod device;
mod dref;
mod error;
mod func;
mod hosted;
#[cfg(not(loom))]
mod node;
#[cfg(not(loom))]
mod process;
mod session;
mod status;
mod stream;
mod tensor;
mod trace;
mod tvm_ffi;
mod value;
mod worker;

pub use device::*;
pub use dref::*;
pub use error::*;
pub use func::*;
pub use hosted::*;
#[cfg(not(loom))]
pub use node::*;
#[cfg(not(loom))]
pub use process::*;
pub use session::*;
pub use status::*;
pub use stream::*;
pub use tensor::*;
pub use trace::*;
pub use value::*;
pub use worker::*;

use std::ffi::{CStr, c_char};
use std::mem::ManuallyDrop;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;

use crate::abi::DVMObject;
use crate::object::error::set_last;
use crate::object::{Error, ErrorKind, ObjectRef, ObjectType, Result, type_key};

/// A status code: `DVM_OK` (0) or one of the failure codes below. Codes are never renumbered.
#[allow(non_camel_case_types)]
pub type dvm_status = i32;

/// Success.
pub const DVM_OK: dvm_status = 0;
/// `ValueError`: an argument has the right type but a bad value (NULL, negative, too large).
pub const DVM_VALUE_ERROR: dvm_status = 1;
/// `TypeError`: a value of the wrong type (the message names expected and actual types).
pub const DVM_TYPE_ERROR: dvm_status = 2;
/// `IndexError`: an index (e.g. a worker id) out of range.
pub const DVM_INDEX_ERROR: dvm_status = 3;
/// `KeyError`: a name that is not registered.
pub const DVM_KEY_ERROR: dvm_status = 4;
/// `RuntimeError`: an operation failed at run time.
pub const DVM_RUNTIME_ERROR: dvm_status = 5;
/// `WorkerError`: a call on a worker failed; the message names the worker and the function.
pub const DVM_WORKER_ERROR: dvm_status = 6;
/// `SessionClosed`: the session was shut down.
pub const DVM_SESSION_CLOSED: dvm_status = 7;
/// `DeviceUnavailable`: the device or its driver is not present.
pub const DVM_DEVICE_UNAVAILABLE: dvm_status = 8;
/// `TimeoutError`: a wait ran past its timeout.
pub const DVM_TIMEOUT: dvm_status = 9;
/// `Panic`: a bug inside the library or a Rust callback, caught before it reached C.
pub const DVM_PANIC: dvm_status = 10;
/// Any other kind raised by a callback (e.g. `AttributeError`); see `dvm_last_error_kind`.
pub const DVM_OTHER_ERROR: dvm_status = 11;

fn status_of(kind: &ErrorKind) -> dvm_status {
    match kind {
        ErrorKind::Value => DVM_VALUE_ERROR,
        ErrorKind::Type => DVM_TYPE_ERROR,
        ErrorKind::Index => DVM_INDEX_ERROR,
        ErrorKind::Key => DVM_KEY_ERROR,
        ErrorKind::Runtime => DVM_RUNTIME_ERROR,
        ErrorKind::Worker => DVM_WORKER_ERROR,
        ErrorKind::SessionClosed => DVM_SESSION_CLOSED,
        ErrorKind::DeviceUnavailable => DVM_DEVICE_UNAVAILABLE,
        ErrorKind::Timeout => DVM_TIMEOUT,
        ErrorKind::Panic => DVM_PANIC,
        ErrorKind::Other(_) => DVM_OTHER_ERROR,
    }
}

/// Runs `body`; on error or panic stores the error for `dvm_last_error_*` and returns
/// `on_error(status)`.
pub(crate) fn boundary_or<T>(
    on_error: impl FnOnce(dvm_status) -> T,
    body: impl FnOnce() -> Result<T>,
) -> T {
    let error = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => return value,
        Ok(Err(error)) => error,
        Err(panic) => Error::from_panic(panic),
    };
    set_last(&error);
    on_error(status_of(&error.kind))
}

/// [`boundary_or`] for functions that return a status.
pub(crate) fn boundary(body: impl FnOnce() -> Result<()>) -> dvm_status {
    boundary_or(|status| status, || body().map(|()| DVM_OK))
}

/// A non-NULL pointer argument, or a `ValueError` naming it.
pub(crate) fn non_null<T>(ptr: *const T, name: &str) -> Result<NonNull<T>> {
    NonNull::new(ptr.cast_mut()).ok_or_else(|| Error::value(format!("`{name}` is NULL")))
}

/// A NUL-terminated UTF-8 string argument.
///
/// # Safety
/// `ptr` is NULL or points at a NUL-terminated string that outlives `'a`.
pub(crate) unsafe fn c_str<'a>(ptr: *const c_char, name: &str) -> Result<&'a str> {
    let ptr = non_null(ptr, name)?;
    // SAFETY: the caller vouches for the terminator.
    unsafe { CStr::from_ptr(ptr.as_ptr()) }
        .to_str()
        .map_err(|e| Error::value(format!("`{name}` is not valid UTF-8: {e}")))
}

/// The object behind a handle, lent by the C caller for the duration of the call, after
/// checking it is a `T`. No reference is taken or dropped: the caller's own keeps it alive.
///
/// # Safety
/// `handle` is NULL or points at a live object header that outlives the call.
pub(crate) unsafe fn handle_ref<T: ObjectType, H>(
    handle: *const H,
    name: &str,
    what: &str,
) -> Result<ManuallyDrop<ObjectRef<T>>> {
    let ptr = non_null(handle.cast::<DVMObject>(), name)?;
    // SAFETY: the caller vouches for a live object header.
    let type_index = unsafe { ptr.as_ref() }.type_index;
    if type_index != T::type_index() {
        return Err(not_a(name, what, type_index));
    }
    // SAFETY: a live object of the checked type; ManuallyDrop keeps the caller's reference.
    Ok(ManuallyDrop::new(unsafe { ObjectRef::from_raw(ptr) }))
}

/// The error for an argument `name` that should be `what` but is a value of another type.
pub(crate) fn not_a(name: &str, what: &str, type_index: i32) -> Error {
    Error::type_error(format!(
        "`{name}` is not {what} (it is {})",
        type_key::type_name(type_index)
    ))
}

/// Wraps a lent object in its typed handle, still lent: nothing is released when it goes.
pub(crate) fn lend<T, U>(
    object: ManuallyDrop<ObjectRef<T>>,
    wrap: impl FnOnce(ObjectRef<T>) -> U,
) -> ManuallyDrop<U> {
    ManuallyDrop::new(wrap(ManuallyDrop::into_inner(object)))
}

/// Writes an output after the work succeeded.
///
/// # Safety
/// `out` was checked non-NULL and points at writable memory for a `T`.
pub(crate) unsafe fn write_out<T>(out: NonNull<T>, value: T) {
    // SAFETY: as the caller promises; outputs are plain data or owned handles.
    unsafe { out.as_ptr().write(value) }
}
