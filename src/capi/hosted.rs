//! Functions whose callback may run on another thread than their caller: hosts such as
//! Node.js run a callback on the one thread that owns it while the caller waits, so the
//! callback cannot read the caller's thread (its worker) or raise into the caller's error
//! slot. The idea: what lives on the caller's thread crosses as values, the worker id as an
//! argument going in and the error as the result coming out, and this side, still on the
//! caller's thread, raises it there.

use std::ffi::c_void;

use super::func::{dvm_func, into_handle};
use super::{boundary, dvm_current_worker_id, dvm_status, non_null, write_out};
use crate::abi::DVMAny;
use crate::object::{Any, AnyView, Error, ErrorKind, Function};

/// The callback of a hosted function: `call(self, args, num_args, worker_id, result)`.
type HostedCall = unsafe extern "C" fn(*mut c_void, *const DVMAny, i32, i32, *mut DVMAny) -> i32;

/// The callback, its `self` and its deleter, which runs when the function dies.
struct Hosted {
    self_: *mut c_void,
    call: HostedCall,
    deleter: Option<unsafe extern "C" fn(*mut c_void)>,
}

// SAFETY: the maker of a hosted function promises that its callback and `self` may be used
// from any thread (as for `dvm_func_new`).
unsafe impl Send for Hosted {}
// SAFETY: as above.
unsafe impl Sync for Hosted {}

impl Drop for Hosted {
    fn drop(&mut self) {
        if let Some(deleter) = self.deleter {
            // SAFETY: the deleter belongs to `self_`, and runs once.
            unsafe { deleter(self.self_) };
        }
    }
}

impl Hosted {
    /// Runs the callback for a caller on this thread, raising a failure it reports as one of
    /// this thread's errors.
    fn invoke(&self, args: &[AnyView<'_>]) -> crate::Result<Any> {
        let num_args = i32::try_from(args.len())
            .map_err(|_| Error::value("too many arguments for one packed call"))?;
        let mut result = DVMAny::none();
        // SAFETY: the callback follows its documented convention; the arguments outlive it.
        let rc = unsafe {
            (self.call)(
                self.self_,
                AnyView::as_raw_slice(args),
                num_args,
                dvm_current_worker_id(),
                &mut result,
            )
        };
        // SAFETY: the callback leaves an owned value in `result` (None if it wrote nothing).
        let value = unsafe { Any::from_raw(result) }.map_err(|e| e.context("the result"))?;
        if rc == 0 {
            return Ok(value);
        }
        Err(reported_error(&value, rc))
    }
}

/// The error a failed callback left in `result`: a string holding its kind, a NUL byte, and
/// its message (a string without NUL is a message of a `RuntimeError`).
fn reported_error(value: &Any, rc: i32) -> Error {
    let view = value.view();
    let Ok(text) = view.as_str_bytes() else {
        return Error::runtime(format!(
            "a hosted function returned {rc} without an error string in its result"
        ));
    };
    let text = String::from_utf8_lossy(text);
    match text.split_once('\0') {
        Some((kind, message)) => Error::new(ErrorKind::from_name(kind), message),
        None => Error::runtime(text),
    }
}

/// Makes a function from a callback that may run on another thread than its caller (hosts
/// such as Node.js run a callback on the thread that owns it while the caller waits). Calls
/// run `call(self, args, num_args, worker_id, result)`, where `worker_id` is the caller's
/// worker (`dvm_current_worker_id()` on the calling thread: -1 off worker threads). The
/// callback returns 0 with an owned value in `result`, or nonzero with a string in `result`
/// holding the error's kind, a NUL byte, and its message (a string without NUL: the message
/// of a `RuntimeError`); the caller then receives that error, raised on its own thread. When
/// the function dies, `deleter(self)` runs (if not NULL).
///
/// Ownership: `*out` is a new reference; free it with `dvm_func_free`.
/// Errors: `ValueError` if `call` or `out` is NULL.
/// Undefined: `call` or `deleter` that is not a function of its type; a callback that leaves
/// anything but an owned value (or None) in `result`.
/// Thread safety: any thread; the callback may later run on any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_func_new_hosted(
    self_: *mut c_void,
    call: Option<unsafe extern "C" fn(*mut c_void, *const DVMAny, i32, i32, *mut DVMAny) -> i32>,
    deleter: Option<unsafe extern "C" fn(*mut c_void)>,
    out: *mut *mut dvm_func,
) -> dvm_status {
    boundary(|| {
        let out = non_null(out, "out")?;
        let call = call.ok_or_else(|| Error::value("`call` is NULL"))?;
        let hosted = Hosted {
            self_,
            call,
            deleter,
        };
        let function = Function::from_closure(move |args| hosted.invoke(args));
        // SAFETY: checked non-NULL above.
        unsafe { write_out(out, into_handle(function)) };
        Ok(())
    })
}
