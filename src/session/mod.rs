//! Sessions: a controller broadcasting packed calls to workers (threads of this process, worker
//! processes, or workers on other nodes) that keep their results in register files, addressed
//! by remote references (DRefs).

mod builtins;
pub mod ccl;
mod completion;
mod controller;
mod dref;
mod handles;
mod health;
mod link;
#[cfg(all(test, loom))]
mod loom_model;
mod message;
mod module;
// Nodes and worker processes are not model-checked: the models cover the protocols they share.
#[cfg(not(loom))]
mod node;
#[cfg(not(loom))]
mod process;
mod registers;
#[cfg(not(loom))]
mod requests;
mod tvm_dispatch;
mod worker;
mod worker_env;

pub use crate::channel::SpinPolicy;
pub use controller::{BoundCall, MAX_WORKERS, QUEUE_CAPACITY, Session, SessionOptions, Target};
pub use dref::{DRef, DRefCell};
pub use handles::{
    SessionCell, SessionLink, WorkerCell, current_worker_handle, new_worker_handle, session_handle,
};
pub use message::CopyDirection;
#[cfg(not(loom))]
pub(crate) use node::serve_node;
#[cfg(not(loom))]
pub(crate) use process::serve as serve_worker;
pub use registers::Reg;
pub use worker::{WorkerInfo, current as current_worker, with_stream as with_worker_stream};
pub use worker_env::WorkerThreads;
