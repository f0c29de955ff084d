//! Retiring instructions: on a device stream whose work outlives the host call (a GPU's), an
//! instruction is finished on the host once it was issued, but the device may still read and
//! write its tensors. The one idea: what it holds (its tensors, its callback and values) is
//! kept here until the device has passed it, so that memory this library does not own (a
//! DLPack import, whose deleter hands it back to its producer; another library's tensor object)
//! is not given back while a copy still uses it. Every instruction is held, not only those
//! holding memory of others: memory this library allocated is freed in stream order anyway (see
//! `device::cuda`), so holding it a little longer costs only memory, and one rule keeps the
//! bookkeeping free of per-tensor checks. Host streams hold nothing: their work is done when
//! issued. Instructions are let go outside the lock: a deleter may call back into this library.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use super::instruction::Op;
use crate::device::{DeviceStream, Marker};
use crate::object::Result;

/// Instructions per batch: a marker is recorded after each batch.
pub(crate) const BATCH: usize = 64;

/// Batches waiting for the device before the executor waits for the oldest one.
pub(crate) const MAX_BATCHES: usize = 16;

/// Instructions the device may not have finished, with the marker recorded after them.
struct Batch {
    marker: Box<dyn Marker>,
    /// The number of the batch's last instruction.
    last: u64,
    ops: Vec<Op>,
}

#[derive(Default)]
struct Held {
    /// Closed batches, oldest first.
    batches: VecDeque<Batch>,
    /// Instructions since the last batch closed, with their numbers.
    open: Vec<(u64, Op)>,
    /// Markers of batches let go, for the next batches.
    spare: Vec<Box<dyn Marker>>,
}

/// What a device stream's finished instructions still hold.
///
/// Held instructions are let go: by a sync of the stream (after the device finished what was
/// issued), by its close, by `settle`, by a small read or write on it (which waits for the
/// device); and, without any of these, in batches: every [`BATCH`] instructions a marker is
/// recorded after the batch, and batches whose marker the device passed (a query, which never
/// blocks) are let go. When more than [`MAX_BATCHES`] batches are waiting, the executor waits on
/// the device for the oldest one (the device is far behind; this bounds what is held, to about
/// `BATCH * (MAX_BATCHES + 1)` instructions).
#[derive(Default)]
pub(crate) struct Retiring {
    held: Mutex<Held>,
    /// The last instruction the device is known to have passed.
    passed: AtomicU64,
}

impl Retiring {
    /// Keeps `op`, instruction `seq` just issued on `dev`, until the device has passed it; lets
    /// go of the earlier instructions the device has passed. On the stream's executor only.
    /// An error (recording or querying a marker) leaves the instructions held until the next
    /// sync, which reports the device's state.
    pub fn hold(&self, dev: &dyn DeviceStream, seq: u64, op: Op) -> Result<()> {
        let mut done: Vec<Op> = Vec::new();
        let result = {
            let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
            held.open.push((seq, op));
            if held.open.len() < BATCH {
                return Ok(());
            }
            held.close_batch(dev, seq, &mut done, &self.passed)
        };
        drop(done);
        result
    }

    /// The last instruction the device is known to have passed (by a sync, or a batch's
    /// marker): uses up to it are over on the device too.
    pub fn passed(&self) -> u64 {
        self.passed.load(Ordering::Acquire)
    }

    /// Lets go of every instruction up to `seq`, once the device finished them (the caller
    /// synchronized the device stream after they were issued).
    pub fn release_through(&self, seq: u64) {
        let done: Vec<Op> = {
            let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
            let mut done = Vec::new();
            while held.batches.front().is_some_and(|b| b.last <= seq) {
                held.let_go_of_oldest(&mut done, &self.passed);
            }
            // The open instructions are in issue order.
            let through = held.open.partition_point(|(s, _)| *s <= seq);
            done.extend(held.open.drain(..through).map(|(_, op)| op));
            self.passed.fetch_max(seq, Ordering::Release);
            done
        };
        drop(done);
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.batches.is_empty() && held.open.is_empty()
    }
}

impl Held {
    /// Records a marker after the open instructions (the last is `seq`), making them a batch,
    /// and moves the batches the device has passed into `done`.
    fn close_batch(
        &mut self,
        dev: &dyn DeviceStream,
        seq: u64,
        done: &mut Vec<Op>,
        passed: &AtomicU64,
    ) -> Result<()> {
        let marker = match self.spare.pop() {
            Some(marker) => marker,
            None => dev.new_marker()?,
        };
        if let Err(error) = dev.record(&*marker) {
            self.spare.push(marker);
            return Err(error);
        }
        let ops = self.open.drain(..).map(|(_, op)| op).collect();
        self.batches.push_back(Batch {
            marker,
            last: seq,
            ops,
        });
        loop {
            let Some(front) = self.batches.front() else {
                return Ok(());
            };
            let front_passed = if self.batches.len() > MAX_BATCHES {
                front.marker.synchronize().map(|()| true)
            } else {
                front.marker.is_passed()
            };
            if !front_passed? {
                return Ok(());
            }
            self.let_go_of_oldest(done, passed);
        }
    }

    /// Moves the oldest batch's instructions into `done`, keeping its marker for reuse, and
    /// notes in `passed` that the device passed them.
    fn let_go_of_oldest(&mut self, done: &mut Vec<Op>, passed: &AtomicU64) {
        if let Some(batch) = self.batches.pop_front() {
            done.extend(batch.ops);
            self.spare.push(batch.marker);
            passed.fetch_max(batch.last, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    use super::{BATCH, MAX_BATCHES};
    use crate::abi::DLDevice;
    use crate::vm::mock_device::{MockDevice, imported, tensor};
    use crate::vm::{Placement, Stream};

    fn bytes(t: &crate::object::Tensor) -> Vec<u8> {
        // SAFETY: a live host tensor of `nbytes` readable bytes that no stream is writing.
        unsafe { std::slice::from_raw_parts(t.data_ptr().cast_const(), t.nbytes()) }.to_vec()
    }

    /// A DLPack import copied on a device stream, its last reference dropped at once (as
    /// `dvm_tensor_free` after `dvm_tensor_copy`): the copy was only issued, so the producer's
    /// deleter waits until the device finished it (here, the stream's sync); on close too.
    #[test]
    fn an_import_outlives_its_copy_on_a_device_stream_until_the_device_finished_it() {
        let device = Arc::new(MockDevice::default());
        device.busy.store(true, Ordering::Release);
        let stream = device.stream("s", Placement::Inline);
        let (src, deleted) = imported();
        let dst = tensor();
        stream.copy(&dst, &src).unwrap();
        drop(src);
        assert_eq!(
            deleted.load(Ordering::Acquire),
            0,
            "deleted while in flight"
        );
        stream.sync().unwrap();
        assert_eq!(deleted.load(Ordering::Acquire), 1, "deleted after the sync");
        assert_eq!(bytes(&dst), [7; 64]);

        device.busy.store(true, Ordering::Release);
        let (src, deleted) = imported();
        stream.copy(&tensor(), &src).unwrap();
        drop(src);
        assert_eq!(
            deleted.load(Ordering::Acquire),
            0,
            "deleted while in flight"
        );
        drop(stream);
        assert_eq!(
            deleted.load(Ordering::Acquire),
            1,
            "deleted when the stream closed"
        );
    }

    /// A small read of a tensor a device stream wrote runs on that stream and waits for the
    /// device: what the stream's earlier instructions held goes then too.
    #[test]
    fn a_small_read_on_a_device_stream_lets_go_of_what_it_waited_for() {
        let device = Arc::new(MockDevice::default());
        device.busy.store(true, Ordering::Release);
        let stream = device.stream("s", Placement::OwnThread);
        let (src, deleted) = imported();
        let dst = tensor();
        stream.copy(&dst, &src).unwrap();
        drop(src);
        let mut out = [0u8; 64];
        crate::vm::read(&dst, &mut out).unwrap();
        assert_eq!(out, [7; 64]);
        assert_eq!(deleted.load(Ordering::Acquire), 1);
    }

    /// On the host nothing changes: the copy is done when it ran, and the import goes with it.
    #[test]
    fn on_a_host_stream_an_import_goes_as_soon_as_its_copy_ran() {
        let stream = Stream::with_placement(DLDevice::cpu(), Placement::Inline).unwrap();
        let (src, deleted) = imported();
        let dst = tensor();
        stream.copy(&dst, &src).unwrap();
        drop(src);
        assert_eq!(deleted.load(Ordering::Acquire), 1);
        assert_eq!(bytes(&dst), [7; 64]);
    }

    /// Without a sync, what instructions held goes in batches: once the device passed a
    /// batch's marker, or, when too many batches wait, once the executor waited for the oldest.
    #[test]
    fn without_a_sync_held_instructions_go_once_the_device_passed_them() {
        let device = Arc::new(MockDevice::default());
        let stream = device.stream("s", Placement::Inline);
        let copy = || {
            let (src, deleted) = imported();
            stream.copy(&tensor(), &src).unwrap();
            deleted
        };
        let count = |all: &[Arc<std::sync::atomic::AtomicUsize>]| {
            all.iter().map(|d| d.load(Ordering::Acquire)).sum::<usize>()
        };
        // An idle device passes each batch's marker at once.
        let mut all: Vec<_> = (0..BATCH - 1).map(|_| copy()).collect();
        assert_eq!(count(&all), 0, "an open batch is held");
        all.push(copy());
        assert_eq!(count(&all), BATCH, "a passed batch goes");
        assert_eq!(device.take_log(), ["s records"]);

        // A busy device passes none until the executor waits for the oldest batch.
        device.busy.store(true, Ordering::Release);
        let mut busy: Vec<_> = (0..MAX_BATCHES * BATCH).map(|_| copy()).collect();
        assert_eq!(
            count(&busy),
            0,
            "batches the device has not passed are held"
        );
        busy.extend((0..BATCH).map(|_| copy()));
        assert_eq!(
            count(&busy),
            busy.len(),
            "too many batches: waited for and let go"
        );
        assert_eq!(device.take_log().len(), MAX_BATCHES + 1);
        stream.sync().unwrap();
    }
}
