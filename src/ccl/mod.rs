//! Collectives between a session's workers: the table of collectives, the one trait their
//! backends share, and the backends: the CPU communicator in shared memory, NCCL, Gloo, and
//! the hierarchy of a session across machines.
//!
//! The one idea: a worker holds one communicator, of one backend, and each collective's
//! built-in (Disco's name and arguments, looked up once in the table) runs the worker's part
//! on it. On the CPU the members of a team meet through their slots in shared memory: each
//! posts its buffers and the collective's number there, the others wait for that number
//! without a lock, and each does its share of the work on the others' memory directly
//! (docs/collectives.md says how the protocol works).

mod args;
mod awaited;
mod backend;
mod board;
mod collective;
mod communicator;
mod cpu;
#[cfg(not(loom))]
pub(crate) mod gloo;
#[cfg(not(loom))]
mod hierarchy;
#[cfg(all(test, loom))]
mod loom_model;
pub(crate) mod nccl;
mod reduce;
#[cfg(not(loom))]
mod rendezvous;

pub(crate) use awaited::Awaited;
pub(crate) use collective::Collective;
pub use communicator::CpuCcl;
pub(crate) use communicator::CurrentCcl;
pub use cpu::{stage, unstage};
pub use reduce::{ReduceOp, bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};

/// Registers every collective built-in once per process: one for each collective of the
/// table, running on the worker's communicator whatever its backend, and each backend's inits.
pub fn register() {
    backend::register();
    cpu::register();
    nccl::register();
    #[cfg(not(loom))]
    rendezvous::register();
}
