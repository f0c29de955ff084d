//! Sessions: a controller broadcasting packed calls to workers (threads of this process, worker
//! processes, or workers on other nodes) that keep their results in register files, addressed
//! by remote references (DRefs). This layer is the controller's side and the links to each kind
//! of worker; what a worker runs is `worker`'s, and the collectives are `ccl`'s.

mod collectives;
mod controller;
mod dref;
mod frees;
mod handles;
mod link;
#[cfg(all(test, loom))]
mod loom_model;
mod module;
// Nodes and worker processes are not model-checked: the models cover the protocols they share.
#[cfg(not(loom))]
mod node;
mod options;
#[cfg(not(loom))]
mod process;
#[cfg(not(loom))]
mod referee;
#[cfg(not(loom))]
mod requests;
mod signal;
mod start;
mod state;
mod status;
mod syncs;
mod trace;
mod worker_env;

pub use crate::channel::SpinPolicy;
pub use crate::worker::{CopyDirection, Reg};
pub use controller::{BoundCall, Session, Target};
pub use dref::{DRef, DRefCell};
pub use handles::{
    SessionCell, SessionRef, WorkerCell, current_worker_handle, new_worker_handle, session_handle,
};
#[cfg(not(loom))]
pub use node::board as node_board;
#[cfg(not(loom))]
pub(crate) use node::serve_node;
pub use options::{MAX_WORKERS, QUEUE_CAPACITY, SessionOptions};
#[cfg(not(loom))]
pub(crate) use process::serve as serve_worker;
pub use worker_env::WorkerThreads;

/// Registers, once per process, every built-in a worker offers: the worker's own, the
/// collectives' and the weight loader's. Whatever hosts workers calls it before they run.
pub(crate) fn register_builtins() {
    crate::worker::builtins::register();
    crate::ccl::register();
    crate::weights::register();
}
