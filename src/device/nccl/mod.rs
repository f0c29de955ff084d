//! NCCL, loaded at run time: the project builds and runs without it, and only the collectives
//! of sessions whose workers are on GPUs need it. The loader finds the library and resolves its
//! entry points once; a communicator is one rank's `ncclComm_t`, whose waits on a non-blocking
//! NCCL its owner can give up, aborting it.

mod comm;
mod loader;
/// The stand-in library's build, shared with the integration tests.
#[cfg(test)]
#[path = "../../../tests/support/nccl_stub.rs"]
mod stub;
#[cfg(test)]
mod tests;

pub use comm::{Comm, Interrupts, RedOp, Region};
pub use loader::{LIBRARY_VAR, Nccl, UniqueId};
