//! Dependence tracking per tensor: which stream last wrote it and which streams read it since,
//! each with the sequence number of that use. An access on another stream first waits for those
//! uses (soft sync): reads wait for the last writer, writes wait for the last writer and every
//! reader since; two reads never wait for each other. Execution-time state rides along: a tensor
//! that a failed instruction should have written is poisoned, and whatever reads it fails too.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::stream::StreamCore;
use crate::object::{Error, Result, Tensor};

/// How an instruction uses a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// A point on a stream: its instruction number `seq`.
#[derive(Clone)]
pub(crate) struct Use {
    pub stream: Arc<StreamCore>,
    pub seq: u64,
}

impl Use {
    /// Whether the stream's executor got past the use: it ran, or on a device stream, it was
    /// issued.
    pub fn is_done(&self) -> bool {
        self.stream.progress.done() >= self.seq
    }

    /// Whether the use is over, on the device too: done, on a stream whose work is finished
    /// once issued, or that the device is known to have passed (on a GPU stream, done is only
    /// issued: until a sync or a marker shows the device passed it, waiting for it needs a
    /// marker).
    pub fn is_finished(&self) -> bool {
        self.is_done()
            && (self.stream.device_stream().completes_on_host()
                || self.stream.retiring.passed() >= self.seq)
    }
}

/// The uses an instruction waits for before it runs, at most one per stream.
pub(crate) type Waits = Vec<Use>;

/// Adds `u` to `waits`, keeping the later point per stream; a use already finished needs no
/// wait (one only issued on a GPU stream does: it may still be running there).
fn add_wait(waits: &mut Waits, u: &Use) {
    if u.is_finished() {
        return;
    }
    match waits.iter_mut().find(|w| Arc::ptr_eq(&w.stream, &u.stream)) {
        Some(w) => w.seq = w.seq.max(u.seq),
        None => waits.push(u.clone()),
    }
}

/// The uses of one tensor that later accesses must follow.
#[derive(Default)]
pub(crate) struct AccessRecord {
    writer: Option<Use>,
    readers: Vec<Use>,
}

impl AccessRecord {
    /// Adds to `waits` what an access on `stream` must wait for.
    pub fn needs(&self, stream: &Arc<StreamCore>, access: Access, waits: &mut Waits) {
        let other = |u: &&Use| !Arc::ptr_eq(&u.stream, stream);
        if let Some(writer) = self.writer.as_ref().filter(other) {
            add_wait(waits, writer);
        }
        if access == Access::Write {
            for reader in self.readers.iter().filter(other) {
                add_wait(waits, reader);
            }
        }
    }

    /// Records an access at `seq` on `stream`. Uses on streams finished since (closed, and
    /// their work done, on the device too) are dropped first: nothing waits for them, and
    /// keeping them would keep every freed stream alive as long as the tensor (a long-lived
    /// tensor read by short-lived streams would collect one per stream). A stream closed from a
    /// callback on its executor finishes with its last instruction.
    pub fn record(&mut self, stream: &Arc<StreamCore>, seq: u64, access: Access) {
        let freed = |u: &Use| u.stream.is_finished() && u.is_done();
        self.readers.retain(|r| !freed(r));
        if self.writer.as_ref().is_some_and(freed) {
            self.writer = None;
        }
        match access {
            Access::Write => {
                self.readers.clear();
                match &mut self.writer {
                    Some(w) if Arc::ptr_eq(&w.stream, stream) => w.seq = seq,
                    w => {
                        *w = Some(Use {
                            stream: stream.clone(),
                            seq,
                        })
                    }
                }
            }
            Access::Read => match self
                .readers
                .iter_mut()
                .find(|r| Arc::ptr_eq(&r.stream, stream))
            {
                Some(r) => r.seq = seq,
                None => self.readers.push(Use {
                    stream: stream.clone(),
                    seq,
                }),
            },
        }
    }

    /// Whether every earlier use an access must follow has finished, all on streams whose work
    /// is done when their host call returns (so "finished" means the memory is settled).
    pub fn settled(&self, access: Access) -> bool {
        self.writer.as_ref().is_none_or(Use::is_finished)
            && (access == Access::Read || self.readers.iter().all(Use::is_finished))
    }

    /// The stream of the last write, if it still takes instructions.
    pub fn writer_stream(&self) -> Option<&Arc<StreamCore>> {
        self.writer
            .as_ref()
            .map(|w| &w.stream)
            .filter(|s| !s.is_closed())
    }
}

/// Waits until every use of `tensor` queued so far, on any stream, has finished (on the device
/// too), so that code taking no part in the streams' ordering (a DLPack consumer) finds its
/// memory settled. Errors: `RuntimeError` when a use still to run is queued on the executor of
/// the calling thread (it would wait for itself).
pub fn settle(tensor: &Tensor) -> Result<()> {
    let uses: Vec<Use> = {
        let record = TensorDeps::of(tensor).lock();
        record
            .writer
            .iter()
            .chain(&record.readers)
            .cloned()
            .collect()
    };
    for u in uses.iter().filter(|u| !u.is_done()) {
        u.stream.check_not_on_executor("settling a tensor")?;
        u.stream.progress.wait_for(u.seq);
    }
    // On a device whose work outlives the host call, the uses were issued by now; wait for the
    // device to finish those it may not have, once per stream.
    let mut device_streams: Vec<&Use> = Vec::new();
    for u in uses.iter().filter(|u| !u.is_finished()) {
        if !device_streams
            .iter()
            .any(|d| Arc::ptr_eq(&d.stream, &u.stream))
        {
            device_streams.push(u);
        }
    }
    for u in device_streams {
        let issued = u.stream.progress.done();
        u.stream.device_stream().synchronize()?;
        u.stream.retiring.release_through(issued);
    }
    Ok(())
}

/// The VM's per-tensor state.
#[derive(Default)]
pub(crate) struct TensorDeps {
    record: Mutex<AccessRecord>,
    poisoned: AtomicBool,
    poison: Mutex<Option<Error>>,
}

impl TensorDeps {
    pub fn of(tensor: &Tensor) -> &TensorDeps {
        tensor.extension::<TensorDeps>()
    }

    pub fn lock(&self) -> MutexGuard<'_, AccessRecord> {
        self.record.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The error of the failure that should have written this tensor, if any.
    pub fn poison(&self) -> Option<Error> {
        if !self.poisoned.load(Ordering::Acquire) {
            return None;
        }
        self.poison
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Marks the tensor as holding no valid value because of `error`.
    pub fn set_poison(&self, error: &Error) {
        *self.poison.lock().unwrap_or_else(PoisonError::into_inner) = Some(error.clone());
        self.poisoned.store(true, Ordering::Release);
    }

    /// The tensor was overwritten completely: it holds a valid value again.
    pub fn clear_poison(&self) {
        if self.poisoned.load(Ordering::Acquire) {
            *self.poison.lock().unwrap_or_else(PoisonError::into_inner) = None;
            self.poisoned.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::DLDevice;
    use crate::vm::Stream;
    use crate::vm::mock_device::{MockDevice, tensor};

    /// On a device stream, an instruction issued is not an instruction finished: an access on
    /// another stream waits for it on the device (a marker recorded after it, waited for by
    /// the accessing stream), however long ago it was issued, until a sync of its stream shows
    /// that the device passed it.
    #[test]
    fn uses_issued_on_a_device_stream_are_waited_for_on_the_device_until_it_passed_them() {
        use crate::vm::Placement;
        let device = Arc::new(MockDevice::default());
        // Inline: the copy is issued on the device as soon as it is queued.
        let a = device.stream("a", Placement::Inline);
        let b = device.stream("b", Placement::OwnThread);
        let (t, src) = (tensor(), tensor());
        device
            .busy
            .store(true, std::sync::atomic::Ordering::Release);
        a.copy(&t, &src).unwrap();
        b.copy(&tensor(), &t).unwrap();
        b.sync().unwrap();
        assert_eq!(device.take_log(), ["a records", "b waits"]);
        // A read on the same stream needs no marker.
        a.copy(&tensor(), &t).unwrap();
        assert_eq!(device.take_log(), Vec::<String>::new());
        // An explicit wait for a point another device stream only issued waits on the device.
        b.wait(&a.record()).unwrap();
        b.sync().unwrap();
        assert_eq!(device.take_log(), ["a records", "b waits"]);
        // Once a sync of `a` saw the device pass its work, nothing waits for it any more.
        a.sync().unwrap();
        b.copy(&tensor(), &t).unwrap();
        b.wait(&a.record()).unwrap();
        b.sync().unwrap();
        assert_eq!(device.take_log(), Vec::<String>::new());
    }

    /// A stream closed by a callback on its own executor cannot wait for its work then; until
    /// the device finished it, its uses stay in the tensors' records, so that later accesses
    /// on other streams still wait for them. Its last instruction waits for the device and
    /// lets go of what the stream's instructions held.
    #[test]
    fn a_stream_closed_from_its_own_callback_keeps_its_uses_until_its_device_work_finished() {
        use crate::object::{Any, Function};
        use crate::vm::Operand;
        use crate::vm::mock_device::imported;
        use std::sync::atomic::Ordering;
        let device = Arc::new(MockDevice::default());
        device.busy.store(true, Ordering::Release);
        let a = Arc::new(device.stream("a", crate::vm::Placement::Inline));
        let b = Arc::new(device.stream("b", crate::vm::Placement::OwnThread));
        let (src, deleted) = imported();
        let t = tensor();
        a.copy(&t, &src).unwrap();
        drop(src);
        let kept = Arc::new(Mutex::new(None));
        let callback = {
            let (a, b, t, kept) = (a.clone(), b.clone(), t.clone(), kept.clone());
            Function::from_closure(move |_| {
                a.close();
                // A read on another stream records its use, forgetting those it may.
                b.copy(&tensor(), &t)?;
                let record = TensorDeps::of(&t).lock();
                let writer = record.writer.as_ref();
                *kept.lock().unwrap() = Some(writer.is_some_and(|w| w.stream.is_closed()));
                Ok(Any::None)
            })
        };
        a.call(&callback, vec![Operand::Value(Any::None)]).unwrap();
        assert_eq!(
            *kept.lock().unwrap(),
            Some(true),
            "the write on `a` was kept"
        );
        assert_eq!(
            deleted.load(Ordering::Acquire),
            1,
            "the import goes once the device finished the closed stream's work"
        );
        b.sync().unwrap();
        // The device finished the closed stream's work: now its use can go.
        b.copy(&tensor(), &t).unwrap();
        assert!(TensorDeps::of(&t).lock().writer.is_none());
        b.sync().unwrap();
    }

    /// A long-lived tensor (weights, say) read or written by streams that come and go: its
    /// record keeps only uses on streams still open, so it does not grow, and it does not keep
    /// freed streams alive (a freed stream finished all its work before it closed).
    #[test]
    fn a_tensor_forgets_the_streams_freed_since_they_used_it() {
        let (weights, scratch) = (tensor(), tensor());
        for _ in 0..100 {
            let stream = Stream::new(DLDevice::cpu()).unwrap();
            stream.copy(&tensor(), &weights).unwrap();
            stream.copy(&scratch, &tensor()).unwrap();
        }
        let open = Stream::new(DLDevice::cpu()).unwrap();
        open.copy(&tensor(), &weights).unwrap();
        open.copy(&tensor(), &scratch).unwrap();
        for (what, t) in [("weights", &weights), ("scratch", &scratch)] {
            let record = TensorDeps::of(t).lock();
            let uses: Vec<&Use> = record.writer.iter().chain(&record.readers).collect();
            assert!(
                uses.iter().all(|u| !u.stream.is_closed()),
                "{what}: {} of {} recorded uses are on freed streams",
                uses.iter().filter(|u| u.stream.is_closed()).count(),
                uses.len()
            );
            assert_eq!(
                record.readers.len(),
                1,
                "{what}: one reader, the open stream"
            );
        }
    }
}
