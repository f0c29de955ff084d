//! Collectives between a session's workers. The CPU backend is shared memory between the
//! worker threads of one process: each participant posts the addresses of its buffers in its
//! slot of the team and publishes the collective's number there; the others spin on that
//! number (no lock, no shared counter), then each does its share of the work directly on the
//! others' memory: no copies through the controller, nothing serialised.
//!
//! Two ways to meet:
//! - Shared: participants read and write each other's buffers, so each also publishes when it
//!   is done with them, and nobody returns before everyone is. Reductions are split: worker
//!   `r` reduces slice `r` of every input and writes it into every output, a reduce-scatter
//!   and an all-gather in one pass.
//! - Staged (barriers, and small buffers when the team has more workers than CPUs): each
//!   participant first copies what the others read into its slot, and afterwards writes only
//!   its own outputs (an allreduce reduces the whole buffer on every worker). One meeting per
//!   collective: nobody waits for the others to finish, as they read only the staged copies,
//!   which stay untouched until everyone has joined the next collective (posts and copies
//!   alternate between two places by the collective's parity). When every worker has a CPU, a
//!   second meeting costs less than the copy and the others' reading it from this CPU's cache.
//!
//! Waiting: a waiter spins for the session's spin budget, then parks (the poster wakes
//! sleepers), as the awaited worker runs on another CPU and yielding would hand this CPU to
//! other processes. When the team has more workers than there are CPUs, or an awaited worker
//! last ran on this CPU, it yields a few times instead of spinning; and a worker that keeps
//! sharing its CPU with another member moves itself to another CPU.
//!
//! Errors. A worker whose own arguments are rejected still joins, with a post that says so,
//! and every participant fails. A worker whose arguments do not say whom to meet (a wrong
//! `in_group` type, a bad peer) breaks the communicator, as nobody could tell it will not
//! come. Workers that wait for each other in different teams (they disagree on `in_group` or
//! on which collective comes next) are found by the waiters, which break the communicator.
//! A worker that never joins: every join waits at most the session's timeout, then breaks the
//! communicator. Without a timeout, a join waits until the session shuts down, which breaks
//! the communicator and releases the waiters. A broken communicator fails every later
//! collective at once until `init_ccl` is called again.
//!
//! Breaking is safe with participants mid-way: a participant posts by moving its slot's number
//! forward with a compare-and-swap, and a waiter that sees the communicator broken locks every
//! slot still behind out of the collective with the same compare-and-swap. Each slot thus
//! either joined or was locked out, for good, and every participant reaches the same verdict:
//! all joined (everyone works, whatever broke meanwhile) or not (nobody works).
mod args;
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
