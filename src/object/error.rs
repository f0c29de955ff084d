//! The one error type, and the per-thread slot that carries errors across packed calls.

use std::any::Any as PanicPayload;
use std::cell::RefCell;
use std::ffi::{CStr, CString};
use std::fmt;

use super::libtvm_ffi;

/// What went wrong, in tvm-ffi's vocabulary plus this library's own kinds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    Value,
    Type,
    Index,
    Key,
    Runtime,
    /// A call on a worker failed; the message names the worker and the function.
    Worker,
    /// The session was shut down.
    SessionClosed,
    /// The device (or its driver) is not there.
    DeviceUnavailable,
    /// A wait ran past its timeout.
    Timeout,
    /// A panic inside the library or a Rust callback, caught before it reached C.
    Panic,
    /// Any other kind, as raised by a callback (e.g. `AttributeError`).
    Other(String),
}

impl ErrorKind {
    /// The kind's name, as `dvm_last_error_kind` reports it.
    pub fn name(&self) -> &str {
        match self {
            ErrorKind::Value => "ValueError",
            ErrorKind::Type => "TypeError",
            ErrorKind::Index => "IndexError",
            ErrorKind::Key => "KeyError",
            ErrorKind::Runtime => "RuntimeError",
            ErrorKind::Worker => "WorkerError",
            ErrorKind::SessionClosed => "SessionClosed",
            ErrorKind::DeviceUnavailable => "DeviceUnavailable",
            ErrorKind::Timeout => "TimeoutError",
            ErrorKind::Panic => "Panic",
            ErrorKind::Other(name) => name,
        }
    }

    /// Parses a kind name; unknown names become [`ErrorKind::Other`].
    pub fn from_name(name: &str) -> ErrorKind {
        match name {
            "ValueError" => ErrorKind::Value,
            "TypeError" => ErrorKind::Type,
            "IndexError" => ErrorKind::Index,
            "KeyError" => ErrorKind::Key,
            "RuntimeError" => ErrorKind::Runtime,
            "WorkerError" => ErrorKind::Worker,
            "SessionClosed" => ErrorKind::SessionClosed,
            "DeviceUnavailable" => ErrorKind::DeviceUnavailable,
            "TimeoutError" => ErrorKind::Timeout,
            "Panic" => ErrorKind::Panic,
            other => ErrorKind::Other(other.to_string()),
        }
    }
}

/// An error: a kind and a message that names the offending value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
        }
    }
    pub fn value(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Value, message)
    }
    pub fn type_error(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Type, message)
    }
    pub fn index(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Index, message)
    }
    pub fn key(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Key, message)
    }
    pub fn runtime(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Runtime, message)
    }

    /// The same error, its message led by `context` (what it is about: "`value`: ...").
    pub fn context(self, context: impl fmt::Display) -> Self {
        Self::new(self.kind, format!("{context}: {}", self.message))
    }

    /// Turns a caught panic's payload into an error.
    pub fn from_panic(payload: Box<dyn PanicPayload + Send>) -> Self {
        let text = if let Some(s) = payload.downcast_ref::<&str>() {
            (*s).to_string()
        } else if let Some(s) = payload.downcast_ref::<String>() {
            s.clone()
        } else {
            "a panic with a non-string payload".to_string()
        };
        Self::new(ErrorKind::Panic, format!("panic: {text}"))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.name(), self.message)
    }
}

impl std::error::Error for Error {}

/// The calling thread's last error, kept as C strings so C can borrow them.
struct Slot {
    kind: CString,
    message: CString,
    /// Set by [`raise`] and [`set_last`] (an error a packed function may pass on by returning
    /// -1), cleared by [`take_raised`] and by [`clear_raised`] before each packed call.
    pending: bool,
}

thread_local! {
    static LAST_ERROR: RefCell<Option<Slot>> = const { RefCell::new(None) };
}

fn c_string(text: &str) -> CString {
    CString::new(text.replace('\0', "\\0")).expect("NUL bytes were replaced")
}

/// Stores `error` in this thread's slot, raised, and in libtvm_ffi's slot when that library is
/// in the process: a caller built on tvm-ffi (its Python package, a C++ program) reads only
/// its own, and returning -1 without an error there crashes it.
fn store(error: &Error) {
    let slot = Slot {
        kind: c_string(error.kind.name()),
        message: c_string(&error.message),
        pending: true,
    };
    LAST_ERROR.with(|cell| *cell.borrow_mut() = Some(slot));
    if let Some(host) = libtvm_ffi::get() {
        host.raise(error.kind.name(), &error.message);
    }
}

/// Records `error` as the calling thread's last error (what `dvm_last_error_*` report). As in
/// tvm-ffi, it also counts as raised: a callback whose library call failed passes that error
/// on to its own caller by returning -1.
pub fn set_last(error: &Error) {
    store(error);
}

/// Raises `error` in the calling thread: a packed function does this, then returns -1.
pub fn raise(error: &Error) {
    store(error);
}

/// Forgets an earlier raise that nobody collected, before making a packed call.
pub fn clear_raised() {
    LAST_ERROR.with(|cell| {
        if let Some(slot) = cell.borrow_mut().as_mut() {
            slot.pending = false;
        }
    });
}

/// Collects the error a packed function raised before returning `rc` (nonzero). With
/// libtvm_ffi in the process, its slot holds it: functions made by tvm-ffi (Python callbacks
/// among them) raise only there, and this library's raise there too.
pub fn take_raised(rc: i32) -> Error {
    let host_raised = libtvm_ffi::get().and_then(|host| host.take_raised());
    LAST_ERROR.with(|cell| match (host_raised, cell.borrow_mut().as_mut()) {
        (Some((kind, message)), slot) => {
            if let Some(slot) = slot {
                slot.pending = false;
            }
            Error::new(ErrorKind::from_name(&kind), message)
        }
        (None, Some(slot)) if slot.pending => {
            slot.pending = false;
            Error::new(
                ErrorKind::from_name(&slot.kind.to_string_lossy()),
                slot.message.to_string_lossy().into_owned(),
            )
        }
        _ => Error::runtime(format!(
            "a packed function returned {rc} without raising an error"
        )),
    })
}

/// Runs `f` with the last error's kind and message (NULL when no error happened yet).
pub fn with_last<R>(f: impl FnOnce(Option<(&CStr, &CStr)>) -> R) -> R {
    LAST_ERROR.with(|cell| {
        let slot = cell.borrow();
        f(slot
            .as_ref()
            .map(|s| (s.kind.as_c_str(), s.message.as_c_str())))
    })
}
