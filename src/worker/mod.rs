//! What runs on a worker, whatever hosts it (a thread of the controller's process, a worker
//! process, a process a node started): the messages it handles in order, its register file,
//! its identity and stream, the built-ins Disco's workers offer, modules, and the dispatchers
//! that let code TVM compiled call them. A worker knows no controller: it answers messages,
//! and its failures are values the next sync reports.

pub mod activity;
#[cfg(not(loom))]
pub(crate) mod arena;
pub(crate) mod builtins;
pub(crate) mod completion;
pub mod events;
pub(crate) mod message;
pub(crate) mod module;
pub(crate) mod on_gpu;
pub(crate) mod registers;
mod runtime;
pub(crate) mod tvm_dispatch;
#[cfg(not(loom))]
pub(crate) mod uploads;

pub use message::CopyDirection;
pub use registers::Reg;
#[cfg(not(loom))]
pub(crate) use runtime::Worker;
pub(crate) use runtime::{
    Exited, Placed, Signals, WorkerShared, current_handle, run, shared, with_own_activity,
    with_own_events,
};
pub use runtime::{WorkerInfo, current, group_members, with_stream};
