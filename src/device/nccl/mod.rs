//! NCCL, loaded at run time: the project builds and runs without it, and only the collectives
//! of sessions whose workers are on GPUs need it. The loader finds the library and resolves its
//! entry points once; a communicator is one rank's `ncclComm_t`, whose waits on a non-blocking
//! NCCL its owner can give up, aborting it.

mod comm;
mod loader;
#[cfg(test)]
mod stub;
#[cfg(test)]
mod tests;

pub use comm::{Comm, Interrupts, RedOp, Region};
pub use loader::{LIBRARY_VAR, Nccl, UniqueId};
