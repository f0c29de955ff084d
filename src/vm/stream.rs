//! Streams: ordered instruction queues on a device, each run by an executor thread.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use super::dependence::{Access, TensorDeps, Use, Waits};
use super::executor::{Executor, Task};
use super::instruction::{Body, DeviceWork, HostPtr, Instruction, Op, Operand};
use super::progress::Progress;
use super::recorded::{self, StreamRecorder};
use super::retiring::Retiring;
use crate::abi::DLDevice;
use crate::device::cpu::HostTensor;
use crate::device::{DeviceStream, Marker, backend, is_host_memory};
use crate::object::tensor::dtype_name;
use crate::object::{Error, ErrorKind, Function, Result, Tensor};

/// Which thread runs a stream's instructions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Placement {
    /// One executor per device, shared by all its streams (the default, as in OneFlow's VM):
    /// soft syncs between streams of one executor never block, and need no thread switch.
    #[default]
    SharedPerDevice,
    /// A thread of the stream's own.
    OwnThread,
    /// No thread: each instruction runs on the thread that submits it, in order, before the
    /// submission returns. For a stream one thread owns (a session worker's): its work never
    /// waits for another thread, nor wakes one. A callback running on such a stream cannot
    /// queue work on it.
    Inline,
}

pub(crate) struct StreamCore {
    device: DLDevice,
    dev: Box<dyn DeviceStream>,
    /// On devices whose work outlives the host call, recorded when another stream is about to
    /// wait for this one (so a run of instructions on one stream records nothing).
    marker: Box<dyn Marker>,
    executor: Arc<Executor>,
    own_executor: bool,
    issued: AtomicU64,
    pub(crate) progress: Progress,
    /// The first failure since the last sync, and how many followed it.
    error: Mutex<Option<(Error, usize)>>,
    /// Whether `error` holds a failure, set and cleared under its lock; read without it.
    failed: AtomicBool,
    closed: AtomicBool,
    /// What its finished instructions hold until the device finished them too.
    pub(crate) retiring: Retiring,
    /// Hears of each instruction it ran, when it is not run inline (see `vm::recorded`).
    pub(crate) recorder: Option<StreamRecorder>,
}

impl StreamCore {
    pub fn device_stream(&self) -> &dyn DeviceStream {
        &*self.dev
    }

    pub fn marker(&self) -> &dyn Marker {
        &*self.marker
    }

    pub fn executor(&self) -> &Arc<Executor> {
        &self.executor
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Whether the stream was closed and all its work finished, on the device too (a use
    /// on it can be forgotten).
    pub fn is_finished(&self) -> bool {
        let issued = self.issued();
        self.is_closed()
            && self.progress.done() >= issued
            && (self.dev.completes_on_host() || self.retiring.passed() >= issued)
    }

    pub fn issued(&self) -> u64 {
        self.issued.load(Ordering::Acquire)
    }

    /// Whether a sync now would neither wait nor report anything: everything issued has run,
    /// on a device whose work completes on the host, and no failure waits for the next sync.
    pub fn is_settled(&self) -> bool {
        // The failure flag after the progress: a failure is kept before its work is done.
        self.dev.completes_on_host()
            && self.progress.done() >= self.issued()
            && !self.failed.load(Ordering::Acquire)
    }

    pub fn set_issued(&self, seq: u64) {
        self.issued.store(seq, Ordering::Release);
    }

    /// Keeps a failure for the next sync.
    pub fn report(&self, error: Error) {
        let mut slot = self.error.lock().unwrap_or_else(PoisonError::into_inner);
        match &mut *slot {
            Some((_, more)) => *more += 1,
            None => *slot = Some((error, 0)),
        }
        self.failed.store(true, Ordering::Release);
    }

    /// Called by the executor after instruction `seq`.
    pub fn finish(&self, seq: u64) {
        self.progress.advance(seq);
    }

    pub(crate) fn check_not_on_executor(&self, what: &str) -> Result<()> {
        if self.executor.is_current() {
            return Err(Error::runtime(format!(
                "{what} would wait for the thread it runs on (it was called from a callback \
                 running on a stream of the same executor)"
            )));
        }
        Ok(())
    }

    /// Waits for everything issued so far (on a device whose streams finish later, until the
    /// device finished it, then lets go of what its instructions held). With a `check`, the
    /// device wait polls and may give up with `check`'s error (see
    /// [`DeviceStream::synchronize_checked`]). Errors: `RuntimeError` on the stream's executor
    /// (it would wait for itself); failures of the work stay for the next sync.
    fn drain(&self, check: Option<&mut dyn FnMut() -> Result<()>>) -> Result<()> {
        self.check_not_on_executor("a stream sync")?;
        let issued = self.issued();
        self.progress.wait_for(issued);
        self.settle_device(issued, check);
        Ok(())
    }

    /// After instruction `seq` ran on the host: waits for the device to finish it and what
    /// came before, then lets go of what they held. Nothing to do on the host. A device that
    /// fails to synchronize (its failure is reported by the next sync) will not run that work
    /// any more (a CUDA error is sticky), so the instructions are let go all the same: keeping
    /// them would keep their memory forever. A wait that a `check` ended is reported too, but
    /// the device may still run the work: what it holds stays until a later sync.
    pub(crate) fn settle_device(&self, seq: u64, check: Option<&mut dyn FnMut() -> Result<()>>) {
        if self.dev.completes_on_host() {
            return;
        }
        let checked = check.is_some();
        let waited = match check {
            None => self.dev.synchronize(),
            Some(check) => self.dev.synchronize_checked(check),
        };
        if let Err(error) = waited {
            self.report(error);
            if checked {
                return;
            }
        }
        self.retiring.release_through(seq);
    }

    /// Waits for everything issued so far (on a device whose streams finish later, until the
    /// device finished it), then reports the failures since the last sync. With a `check`, as
    /// [`StreamCore::drain`] says.
    pub fn sync(&self, check: Option<&mut dyn FnMut() -> Result<()>>) -> Result<()> {
        self.drain(check)?;
        self.take_failures()
    }

    /// The first failure since the last sync (with a count of the others), if any.
    fn take_failures(&self) -> Result<()> {
        let first = {
            let mut slot = self.error.lock().unwrap_or_else(PoisonError::into_inner);
            self.failed.store(false, Ordering::Release);
            slot.take()
        };
        match first {
            None => Ok(()),
            Some((error, 0)) => Err(error),
            Some((error, more)) => Err(Error::new(
                error.kind,
                format!(
                    "{} (and {more} more failures on this stream)",
                    error.message
                ),
            )),
        }
    }

    /// Locks the tensors' records in address order, works out the waits, queues the op, and
    /// records the uses.
    fn submit(self: &Arc<Self>, uses: &[(&Tensor, Access)], op: Op) -> Result<u64> {
        let mut order: Vec<(&Tensor, Access)> = Vec::with_capacity(uses.len());
        for &(tensor, access) in uses {
            match order.iter_mut().find(|(t, _)| t.same(tensor)) {
                Some(entry) if access == Access::Write => entry.1 = Access::Write,
                Some(_) => {}
                None => order.push((tensor, access)),
            }
        }
        order.sort_by_key(|(t, _)| t.object().as_ptr() as usize);
        let mut records: Vec<_> = order
            .iter()
            .map(|(t, _)| TensorDeps::of(t).lock())
            .collect();
        let mut waits = Waits::new();
        for (record, (_, access)) in records.iter().zip(&order) {
            record.needs(self, *access, &mut waits);
        }
        let stream = self.clone();
        let (seq, inline) = self.executor.submit(self, |seq| {
            Task::Run(Box::new(Instruction {
                stream,
                seq,
                waits,
                op,
            }))
        })?;
        for (record, (_, access)) in records.iter_mut().zip(&order) {
            record.record(self, seq, *access);
        }
        drop(records);
        if let Some(run) = inline {
            run.run();
        }
        Ok(seq)
    }

    /// Checks that a tensor can be used on this stream (its device's backend reaches the
    /// tensor's memory: host memory, and on a GPU any GPU) and returns its size in bytes.
    fn check_tensor(&self, tensor: &Tensor, name: &str) -> Result<usize> {
        check_compact(tensor, name)?;
        let device = tensor.dl().device;
        if !self.dev.can_reach(device) {
            return Err(Error::new(
                ErrorKind::DeviceUnavailable,
                format!(
                    "`{name}` is on device ({}, {}), which a stream on ({}, {}) cannot reach",
                    device.device_type,
                    device.device_id,
                    self.device.device_type,
                    self.device.device_id
                ),
            ));
        }
        Ok(tensor.nbytes())
    }
}

/// Checks that a tensor is compact (the VM moves whole, dense buffers).
pub(crate) fn check_compact(tensor: &Tensor, name: &str) -> Result<()> {
    if !tensor.is_contiguous() {
        return Err(Error::value(format!(
            "`{name}` is a strided view (shape {:?}, strides {:?}); only compact row-major \
             tensors can be copied or accessed",
            tensor.shape(),
            tensor.strides()
        )));
    }
    Ok(())
}

/// The tensors among `args`, each with its place there and how it is used.
fn uses(args: &[Operand]) -> impl Iterator<Item = (usize, &Tensor, Access)> {
    args.iter().enumerate().filter_map(|(i, arg)| match arg {
        Operand::Read(t) => Some((i, t, Access::Read)),
        Operand::Write(t) | Operand::Overwrite(t) => Some((i, t, Access::Write)),
        Operand::Value(_) => None,
    })
}

/// Checks that the VM may write a tensor: compact, and not marked read-only by its producer.
pub(crate) fn check_writable(tensor: &Tensor, name: &str) -> Result<()> {
    if tensor.is_read_only() {
        return Err(Error::value(format!(
            "`{name}` is read-only (its DLPack producer set the read-only flag)"
        )));
    }
    Ok(())
}

/// A stream: instructions submitted to it run in order, after whatever the tensors they use
/// were last used for on other streams. Dropping it finishes its pending work first.
pub struct Stream {
    core: Arc<StreamCore>,
}

/// A point on a stream that another stream can wait for.
#[derive(Clone)]
pub struct StreamPoint(Use);

/// The shared executor of each device that has one.
type ExecutorTable = Mutex<Vec<(DLDevice, Arc<Executor>)>>;

static SHARED_EXECUTORS: LazyLock<ExecutorTable> = LazyLock::new(|| Mutex::new(Vec::new()));

fn shared_executor(device: DLDevice) -> Result<Arc<Executor>> {
    let mut executors = SHARED_EXECUTORS
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some((_, executor)) = executors.iter().find(|(d, _)| *d == device) {
        return Ok(executor.clone());
    }
    let executor = Executor::start(
        format!("dvm-vm-{}-{}", device.device_type, device.device_id),
        device,
    )?;
    executors.push((device, executor.clone()));
    Ok(executor)
}

static DEFAULT_STREAMS: LazyLock<Mutex<Vec<Stream>>> = LazyLock::new(|| Mutex::new(Vec::new()));

/// The device's default stream: it runs small-memory accesses on tensors no open stream wrote.
pub(crate) fn default_stream(device: DLDevice) -> Result<Arc<StreamCore>> {
    let mut streams = DEFAULT_STREAMS
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(stream) = streams.iter().find(|s| s.core.device == device) {
        return Ok(stream.core.clone());
    }
    let stream = Stream::new(device)?;
    let core = stream.core.clone();
    streams.push(stream);
    Ok(core)
}

impl Stream {
    /// A stream on `device`, run by the device's shared executor.
    pub fn new(device: DLDevice) -> Result<Stream> {
        Self::with_placement(device, Placement::default())
    }

    /// A stream on `device`, run where `placement` says.
    pub fn with_placement(device: DLDevice, placement: Placement) -> Result<Stream> {
        Self::on_device_stream(device, backend(device)?.new_stream()?, placement)
    }

    /// A stream that issues its work on `dev`, a stream of `device`'s backend.
    pub(crate) fn on_device_stream(
        device: DLDevice,
        dev: Box<dyn DeviceStream>,
        placement: Placement,
    ) -> Result<Stream> {
        let marker = dev.new_marker()?;
        let recorder = match placement {
            Placement::Inline => None,
            _ => recorded::new_streams_recorder(),
        };
        let (executor, own_executor) = match placement {
            Placement::SharedPerDevice => (shared_executor(device)?, false),
            Placement::OwnThread => (
                Executor::start(
                    format!("dvm-stream-{}-{}", device.device_type, device.device_id),
                    device,
                )?,
                true,
            ),
            Placement::Inline => (Executor::inline(), true),
        };
        Ok(Stream {
            core: Arc::new(StreamCore {
                device,
                dev,
                marker,
                executor,
                own_executor,
                issued: AtomicU64::new(0),
                progress: Progress::default(),
                error: Mutex::new(None),
                failed: AtomicBool::new(false),
                closed: AtomicBool::new(false),
                retiring: Retiring::default(),
                recorder,
            }),
        })
    }

    pub fn device(&self) -> DLDevice {
        self.core.device
    }

    /// Queues a copy of `src` into `dst`: same shape, dtype and size, both compact.
    pub fn copy(&self, dst: &Tensor, src: &Tensor) -> Result<()> {
        let dst_bytes = self.core.check_tensor(dst, "dst")?;
        check_writable(dst, "dst")?;
        let src_bytes = self.core.check_tensor(src, "src")?;
        if dst.shape() != src.shape() || dst.dl().dtype != src.dl().dtype || dst_bytes != src_bytes
        {
            return Err(Error::value(format!(
                "cannot copy `src`, a {:?} {} tensor ({src_bytes} bytes), into `dst`, a {:?} {} \
                 tensor ({dst_bytes} bytes): shapes, dtypes and sizes must match",
                src.shape(),
                dtype_name(src.dl().dtype),
                dst.shape(),
                dtype_name(dst.dl().dtype),
            )));
        }
        // A tensor copied onto itself is left as it is; two tensors over shared memory (DLPack
        // imports of one buffer) cannot be copied one into the other.
        if !dst.same(src) && overlap(dst, src, dst_bytes) {
            return Err(Error::value(format!(
                "`dst` and `src` share memory ({dst_bytes} bytes at {:p} and {:p})",
                dst.data_ptr(),
                src.data_ptr()
            )));
        }
        let op = Op::Copy {
            dst: dst.clone(),
            src: src.clone(),
            nbytes: dst_bytes,
        };
        self.core
            .submit(&[(src, Access::Read), (dst, Access::Write)], op)
            .map(drop)
    }

    /// Queues a copy of the first `nbytes` of `src` into host memory at `dst`.
    ///
    /// # Safety
    /// `dst` is valid for `nbytes` writes, and nothing else touches it, until a sync of this
    /// stream returned.
    pub unsafe fn copy_to_host(&self, src: &Tensor, dst: *mut u8, nbytes: usize) -> Result<()> {
        let size = self.core.check_tensor(src, "src")?;
        check_range((nbytes, "nbytes"), size, "read from")?;
        let op = Op::ToHost {
            src: src.clone(),
            dst: HostPtr(dst),
            nbytes,
        };
        self.core.submit(&[(src, Access::Read)], op).map(drop)
    }

    /// Queues a copy of `nbytes` from host memory at `src` into the start of `dst`.
    ///
    /// # Safety
    /// `src` is valid for `nbytes` reads, and nobody writes it, until a sync of this stream
    /// returned.
    pub unsafe fn copy_from_host(&self, dst: &Tensor, src: *const u8, nbytes: usize) -> Result<()> {
        let size = self.core.check_tensor(dst, "dst")?;
        check_writable(dst, "dst")?;
        check_range((nbytes, "nbytes"), size, "written to")?;
        let op = Op::FromHost {
            dst: dst.clone(),
            src: HostPtr(src.cast_mut()),
            nbytes,
        };
        self.core.submit(&[(dst, Access::Write)], op).map(drop)
    }

    /// Copies between a host tensor and `tensor` (same shape and dtype, both compact) after
    /// everything queued before, and returns when the copy is done (or failed).
    pub fn copy_host_sync(&self, host: &HostTensor, tensor: &Tensor, to_host: bool) -> Result<()> {
        host.check_matches(tensor)?;
        // SAFETY: the host tensor's creator vouched for its memory while the value is used, and
        // the sync below returns only after this stream is done with it.
        unsafe {
            if to_host {
                self.copy_to_host(tensor, host.ptr(), host.nbytes())?;
            } else {
                self.copy_from_host(tensor, host.ptr(), host.nbytes())?;
            }
        }
        self.sync()
    }

    /// Queues a call of `func` with `args`; tensors among them are ordered as read or written.
    /// A failure is reported by the next sync, and poisons the tensors passed as written: later
    /// instructions that use them skip and fail too, until they are overwritten whole.
    pub fn call(&self, func: &Function, args: Vec<Operand>) -> Result<()> {
        self.submit_call(Body::Function(func.clone()), args)
    }

    /// Queues `work` on the device stream underneath this one, ordered like [`Stream::call`]
    /// by the tensors in `args` (read or written by the work), with the same failure rules but
    /// one: it runs even when an input was left unwritten by an earlier failure (a collective's
    /// peers wait for it), and what it writes then carries that failure.
    pub fn launch(&self, args: Vec<Operand>, work: DeviceWork) -> Result<()> {
        self.submit_call(Body::Device(work), args)
    }

    /// Checks what [`Stream::call`] and [`Stream::launch`] check of `args` before they queue
    /// anything: each tensor usable on this stream, and each written one writable.
    pub fn check_operands(&self, args: &[Operand]) -> Result<()> {
        for (i, tensor, access) in uses(args) {
            self.core.check_tensor(tensor, &format!("args[{i}]"))?;
            if access == Access::Write {
                check_writable(tensor, &format!("args[{i}]"))?;
            }
        }
        Ok(())
    }

    fn submit_call(&self, body: Body, args: Vec<Operand>) -> Result<()> {
        self.check_operands(&args)?;
        let uses: Vec<(Tensor, Access)> = uses(&args).map(|(_, t, a)| (t.clone(), a)).collect();
        let borrowed: Vec<(&Tensor, Access)> = uses.iter().map(|(t, a)| (t, *a)).collect();
        self.core
            .submit(&borrowed, Op::Call { body, args })
            .map(drop)
    }

    /// The point after everything submitted to this stream so far.
    pub fn record(&self) -> StreamPoint {
        StreamPoint(Use {
            stream: self.core.clone(),
            seq: self.core.issued(),
        })
    }

    /// Makes later instructions of this stream wait until `point` was passed (soft sync).
    pub fn wait(&self, point: &StreamPoint) -> Result<()> {
        if Arc::ptr_eq(&point.0.stream, &self.core) || point.0.is_finished() {
            return Ok(());
        }
        let stream = self.core.clone();
        let waits = vec![point.0.clone()];
        self.core
            .executor
            .submit(&self.core, |seq| {
                Task::Run(Box::new(Instruction {
                    stream,
                    seq,
                    waits,
                    op: Op::Mark,
                }))
            })
            .map(drop)
    }

    /// Makes later instructions of this stream wait for everything submitted to `other` so far.
    pub fn wait_for(&self, other: &Stream) -> Result<()> {
        self.wait(&other.record())
    }

    /// Whether a sync now would neither wait nor report anything (host work only).
    pub fn is_settled(&self) -> bool {
        self.core.is_settled()
    }

    /// Waits until everything submitted so far has run; returns the first failure since the
    /// last sync (with a count of the others), if any.
    pub fn sync(&self) -> Result<()> {
        self.core.sync(None)
    }

    /// Like [`Stream::sync`], for a thread that must be able to give up on device work that may
    /// never finish: with a `check`, the device wait polls, calls `check` between polls, and
    /// ends with `check`'s error when it fails (reported like the stream's own failures);
    /// without one it is [`Stream::sync`].
    pub fn sync_checked(&self, check: Option<&mut dyn FnMut() -> Result<()>>) -> Result<()> {
        self.core.sync(check)
    }

    /// Finishes the pending work and stops taking more; failures not yet reported are dropped.
    /// Dropping the stream does this.
    pub fn close(&self) {
        let core = &self.core;
        if core.is_closed() {
            return;
        }
        let drained = core.drain(None).is_ok();
        let _ = core.take_failures();
        core.closed.store(true, Ordering::Release);
        if !drained && core.progress.done() >= core.issued() {
            // Called from a callback on the executor, whose instructions of this stream have
            // all run (none runs while this one does): wait for the device here.
            core.settle_device(core.issued(), None);
        }
        // Otherwise the stream's last instruction, still to run on this executor, waits for
        // the device after it (see `Instruction::execute`); until then the stream's uses are
        // kept, so that other streams wait for them.
        if core.own_executor {
            core.executor.stop();
        }
    }
}

impl Drop for StreamCore {
    fn drop(&mut self) {
        // Whatever is still held (a stream whose work a failed device never finished) goes
        // after the device is done with it.
        if !self.retiring.is_empty() {
            let _ = self.dev.synchronize();
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.close();
    }
}

/// Whether the first `nbytes` of two tensors share memory: tensors of one device, or both in
/// host memory, whose byte ranges intersect.
fn overlap(a: &Tensor, b: &Tensor, nbytes: usize) -> bool {
    let (da, db) = (a.dl().device, b.dl().device);
    let one_space = da == db || (is_host_memory(da) && is_host_memory(db));
    let (a, b) = (a.data_ptr() as usize, b.data_ptr() as usize);
    one_space && nbytes > 0 && a < b.saturating_add(nbytes) && b < a.saturating_add(nbytes)
}

/// Checks that `nbytes` (the argument `name`) fit in a tensor of `size` bytes.
pub(crate) fn check_range((nbytes, name): (usize, &str), size: usize, verb: &str) -> Result<()> {
    if nbytes > size {
        return Err(Error::value(format!(
            "`{name}`: {nbytes} bytes cannot be {verb} a tensor of {size} bytes"
        )));
    }
    Ok(())
}

/// The cell of a stream handle: dropping the last reference finishes the stream's work.
pub struct StreamCell(pub Stream);

static STREAM_INDEX: LazyLock<i32> =
    LazyLock::new(|| crate::object::type_key::dynamic_index("discovm.Stream"));

// SAFETY: objects with this dynamic index are only made by `stream_handle`.
unsafe impl crate::object::ObjectType for StreamCell {
    fn type_index() -> i32 {
        *STREAM_INDEX
    }
}

/// A new handle (an object) owning `stream`.
pub fn stream_handle(stream: Stream) -> crate::object::ObjectRef<StreamCell> {
    crate::object::alloc_object(
        <StreamCell as crate::object::ObjectType>::type_index(),
        StreamCell(stream),
    )
}
