//! The stream VM: ordered copies and callbacks on device streams, dependence tracking per
//! tensor with cross-stream soft sync, and synchronous small-memory access.
//!
//! The one idea: each tensor remembers the stream and number of its last write and of the reads
//! since, so an instruction that uses it on another stream first waits for just those uses (on
//! the host for the number; on a device also through a marker, placed only when a stream
//! waits), and the bookkeeping happens on the submitting thread: no scheduler thread. A
//! [`Stream`](crate::vm::Stream) runs its instructions in order on an executor (see
//! [`Placement`](crate::vm::Placement)); instructions keep their tensors alive until the device
//! is done with them, and a failing callback poisons the tensors it should have written.

mod dependence;
mod executor;
mod instruction;
#[cfg(test)]
mod mock_device;
mod progress;
mod recorded;
mod retiring;
mod small_mem;
mod stream;

pub use dependence::{Access, settle};
pub use executor::QUEUE_CAPACITY;
pub use instruction::{DeviceWork, Operand, poisoned_input};
pub use recorded::Ran;
pub(crate) use recorded::{
    StreamRecorder, StreamRecorders, record_on_this_thread, record_streams_made_on_this_thread,
};
pub use small_mem::{check_access, read, write};
pub use stream::{Placement, Stream, StreamCell, StreamPoint, stream_handle};
