//! The stream VM: ordered copies and callbacks on device streams, dependence tracking per
//! tensor with cross-stream soft sync, and synchronous small-memory access.
//!
//! - A [`Stream`](crate::vm::Stream) runs its instructions strictly in order. Instructions are numbered per
//!   stream; an executor thread runs them from a lock-free queue (spin, yield, then park; the
//!   submitter wakes it only when it sleeps) and publishes each number as it finishes.
//! - Each tensor remembers the stream and number of its last write and of the reads since. An
//!   instruction that uses a tensor last used on another stream first waits for that point
//!   (on the host by waiting for the number; on a device whose work outlives the host call,
//!   then also by placing a marker on the other stream and waiting for it on the device: markers
//!   are placed only when a stream waits, never after every instruction). Reads after writes,
//!   writes after reads and writes after writes across streams are ordered; two reads are not. The bookkeeping happens on the submitting thread: no scheduler thread.
//! - Instructions hold references to their tensors, so a tensor released while they run stays
//!   alive until they finish: on a device whose work outlives the host call, until the device
//!   finished them (see `retiring`), so that a DLPack import's deleter never hands memory back
//!   to its producer while a copy still uses it.
//! - A failing callback poisons the tensors it should have written; instructions that use them
//!   skip and fail in turn. Each failure is reported by the next sync of its stream.
//!
//! Thread mapping: by default all streams of a device share one executor thread (as OneFlow's
//! VM does); [`Placement::OwnThread`](crate::vm::Placement::OwnThread) gives a stream a thread of its own, and
//! [`Placement::Inline`](crate::vm::Placement::Inline) none: its one submitting thread (a session worker) runs it. On the
//! 2-vCPU machines this project targets, the shared executor was faster for cross-stream
//! ping-pong, since soft syncs between streams of one executor never block and no thread
//! switch is needed; a session worker's copies are fastest inline (about 1 us per small copy
//! round trip, against 9-10 us through the shared executor: a third thread on two CPUs).

mod dependence;
mod executor;
mod instruction;
#[cfg(test)]
mod mock_device;
mod progress;
mod retiring;
mod small_mem;
mod stream;

pub use dependence::{Access, settle};
pub use executor::QUEUE_CAPACITY;
pub use instruction::{DeviceWork, Operand};
pub use small_mem::{check_access, read, write};
pub use stream::{Placement, Stream, StreamCell, StreamPoint, stream_handle};
