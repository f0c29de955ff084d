//! What the controller sends to workers, as typed values: a worker thread takes them as they
//! are, a worker process or node as frames (`session::requests`). A broadcast's
//! arguments are built once and shared by every worker through one `Arc`; a call without
//! arguments travels inline, with nothing to allocate.

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

/// A value to store in a register (shared by the workers it is sent to).
pub struct Store {
    pub reg: Reg,
    pub value: Any,
    /// The global function's name, when the value is one (for messages).
    pub name: Option<Arc<str>>,
}

/// A lookup of the global function `name` in a worker's own registry, stored in `reg`; the reply
/// comes once it is there, or with the `KeyError` of a missing name.
pub struct GlobalLookup {
    pub reg: Reg,
    pub name: Arc<str>,
    pub reply: Reply<()>,
}

/// A lookup of the function `name` of the module in register `module` on a worker, stored in
/// `reg`; the reply comes once it is there, or with why not: the module's `KeyError` for a name
/// it lacks, or the failure its register holds (a load that failed).
pub struct ModuleLookup {
    pub reg: Reg,
    pub module: Reg,
    pub name: Arc<str>,
    pub reply: Reply<()>,
}

/// The direction of a copy between the host and worker 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyDirection {
    ToWorker,
    FromWorker,
}

impl CopyDirection {
    /// How errors name a copy of the remote tensor `name` this way.
    pub fn describe(self, name: &str) -> String {
        match self {
            CopyDirection::ToWorker => format!("copy of `{name}` to worker 0"),
            CopyDirection::FromWorker => format!("copy of `{name}` from worker 0"),
        }
    }
}

/// The host side of a copy to or from worker 0, and the name of the argument that gave the
/// remote tensor (errors name it).
pub struct HostCopy {
    pub host: HostTensor,
    pub name: &'static str,
}

/// A reply to a request: a value, or the error to raise on the waiting thread.
pub type Reply<T> = crate::sync::Arc<Completion<Result<T>>>;

/// One entry of a worker's queue.
pub enum Message {
    /// Calls the function in `func` with `args`, storing the result in `out`. `call` is the
    /// low 32 bits of the call's number, which the worker widens from the numbers it saw.
    Call {
        call: u32,
        func: Reg,
        out: Reg,
        args: Option<Arc<[Arg]>>,
    },
    Store(Arc<Store>),
    /// Empties a register. Queued without waking the worker: nobody waits for it, and the
    /// next message that needs the worker wakes it.
    Free(Reg),
    /// Reply once everything before it ran, with the first error since the last sync, if any.
    Sync(Reply<()>),
    /// Reply with an owned copy of a register's value.
    Get {
        reg: Reg,
        reply: Reply<Any>,
    },
    /// Report how many registers hold something.
    CountLive(Reply<usize>),
    /// Store a global function of the worker's own registry in a register (boxed: rare, and
    /// it would make every slot larger).
    GetGlobalFunc(Box<GlobalLookup>),
    /// Store a function of a module the worker holds in a register (boxed, as above).
    GetModuleFunc(Box<ModuleLookup>),
    Copy {
        reg: Reg,
        /// Boxed: it is large and rare, and every queue slot is as large as its largest message.
        host: Box<HostCopy>,
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

const _: () = assert!(
    std::mem::size_of::<Message>() <= 32,
    "queue slots stay small"
);
