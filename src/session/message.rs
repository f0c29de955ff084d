//! What the controller sends to workers. A broadcast is one `Arc<Instruction>` shared by every
//! worker: built once, never serialised, reference-counted.

use std::sync::Arc;

use super::completion::Completion;
use super::registers::Reg;
use crate::device::cpu::HostTensor;
use crate::object::{Any, Error, Result};

/// An argument of a call: a value, or a register whose per-worker value is used.
pub enum Arg {
    Value(Any),
    Register(Reg),
}

/// Work that every addressed worker runs in order.
pub enum Instruction {
    /// Stores a value (a resolved global function, a value set by the controller).
    Store { reg: Reg, value: Any },
    /// Calls the function in `func` with `args`, storing the result in `out`.
    Call {
        func: Reg,
        label: Arc<str>,
        args: Vec<Arg>,
        out: Reg,
    },
    /// Empties a register.
    Kill { reg: Reg },
}

/// The direction of a copy between the host and worker 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyDirection {
    ToWorker,
    FromWorker,
}

/// A reply to a request: a value, or the error to raise on the waiting thread.
pub type Reply<T> = Arc<Completion<Result<T>>>;

/// One entry of a worker's queue.
pub enum Message {
    Run(Arc<Instruction>),
    /// Reply once everything before it ran, with the first error since the last sync, if any.
    Sync(Reply<()>),
    /// Reply with an owned copy of a register's value.
    Get {
        reg: Reg,
        reply: Reply<Any>,
    },
    /// Report how many registers hold something.
    CountLive(Reply<usize>),
    Copy {
        reg: Reg,
        host: HostTensor,
        direction: CopyDirection,
        reply: Reply<()>,
    },
    Shutdown,
}

/// Why a call was not run or failed, attributed to a worker.
pub fn worker_error(worker: usize, what: &str, cause: &Error) -> Error {
    Error::new(
        crate::object::ErrorKind::Worker,
        format!(
            "worker {worker}: {what} failed: {}: {}",
            cause.kind.name(),
            cause.message
        ),
    )
}
