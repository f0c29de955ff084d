//! Errors across the boundary, and the library version.

use std::ffi::c_char;

use super::{boundary_or, c_str};
use crate::object::{Error, ErrorKind, error};

/// The kind of the calling thread's most recent error (`"ValueError"`, `"WorkerError"`, ...),
/// or NULL if no call on this thread has failed yet.
///
/// Ownership: borrowed; valid until the next failing call on this thread.
/// Undefined: using the string after the next failing call on this thread.
/// Thread safety: any thread; each thread has its own error.
#[unsafe(no_mangle)]
pub extern "C" fn dvm_last_error_kind() -> *const c_char {
    error::with_last(|last| last.map_or(std::ptr::null(), |(kind, _)| kind.as_ptr()))
}

/// The message of the calling thread's most recent error, or NULL if there is none.
///
/// Ownership: borrowed; valid until the next failing call on this thread.
/// Undefined: using the string after the next failing call on this thread.
/// Thread safety: any thread; each thread has its own error.
#[unsafe(no_mangle)]
pub extern "C" fn dvm_last_error_message() -> *const c_char {
    error::with_last(|last| last.map_or(std::ptr::null(), |(_, message)| message.as_ptr()))
}

/// Raises an error from a C callback: call it, then return -1 from the packed function. The
/// caller of the function receives `kind` and `message` (NULL kind means `"RuntimeError"`,
/// NULL message means an empty one).
///
/// Ownership: both strings are copied.
/// Undefined: `kind` or `message` that is not NUL-terminated.
/// Thread safety: raises on the calling thread, which must be the one running the callback.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_error_raise(kind: *const c_char, message: *const c_char) {
    boundary_or(
        |_| (),
        || {
            // SAFETY: NULL or NUL-terminated, by contract.
            let kind = if kind.is_null() {
                "RuntimeError"
            } else {
                unsafe { c_str(kind, "kind") }?
            };
            // SAFETY: as above.
            let message = if message.is_null() {
                ""
            } else {
                unsafe { c_str(message, "message") }?
            };
            error::raise(&Error::new(ErrorKind::from_name(kind), message));
            Ok(())
        },
    )
}

/// The library version, e.g. `"0.1.0"`.
///
/// Ownership: a static string.
#[unsafe(no_mangle)]
pub extern "C" fn dvm_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}
