//! A single-producer, single-consumer ring of byte frames in shared memory, between a
//! controller and a worker process (or any two threads) that map the same
//! [`SharedMemory`](crate::channel::shm::SharedMemory).
//!
//! The one idea: everything both sides need lives in the mapping, and nothing read from it is
//! trusted. Each side keeps its own position to itself, publishes a copy after writing or
//! reading a record and checks whatever it reads, so a misbehaving peer can spoil what it sends,
//! not this process; only the waits last as long as the peer wants, and `check` and the deadline
//! end them. Waiting is the library's one policy, and each side wakes the other only when it
//! announced that it sleeps.

#[cfg(all(test, loom))]
mod loom_model;
#[cfg(all(test, not(loom)))]
mod tests;

mod consumer;
mod layout;
mod producer;
mod view;

pub use consumer::{Consumer, Received};
pub use layout::{MAX_CAPACITY, MAX_GATHERED, MIN_CAPACITY, RING_ALIGN, init_ring, ring_bytes};
pub use producer::{Producer, Reservation};
pub use view::Waker;
