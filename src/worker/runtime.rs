//! The worker thread: runs its queue in order, keeps its register file, reports failures as
//! values, and exposes its identity to the functions it runs.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use super::activity::{Activity, Seq, State, Text, widen_call};
use super::events::{self, Ring};
use super::message::{
    Arg, CopyDirection, GlobalLookup, HostCopy, Message, ModuleLookup, Store, worker_error,
};
use super::registers::{Reg, RegisterFile, Slot};
use crate::abi::{DLDevice, KDL_CPU, KDL_CUDA};
use crate::channel::Deadline;
use crate::channel::{Channel, Sleepers, SpinPolicy};
use crate::device::cpu::SharedCpuWatch;
use crate::device::{cuda, poll};
use crate::object::{Any, AnyView, Error, ErrorKind, Function, Result, Tensor, registry};
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::vm::{Placement, Stream};

/// What a worker shares with the controller.
pub struct WorkerShared {
    /// Set when the worker thread has left its loop (normally or not).
    pub exited: Exited,
    /// What the controller tells the worker outside its queue.
    pub signals: Placed<Signals>,
    /// What the worker is doing, for anyone to read.
    pub activity: Placed<Activity>,
    /// Its last events, for anyone to read (the flight recorder).
    pub events: Placed<Ring>,
    /// The last instructions of the streams its functions made, which their executor threads
    /// write (its own stream's go to `events`).
    pub stream_events: Placed<Ring>,
    /// The session's bound on every wait (`None`: no bound); joining NCCL communicators gives
    /// up after it.
    pub timeout: Option<Duration>,
    /// The session, once it exists (for the worker's own handle; weak, so no cycle). The
    /// worker knows it only as something to hand back to its owner.
    pub session: OnceLock<Weak<dyn std::any::Any + Send + Sync>>,
}

/// What the controller tells a worker outside its queue, for waits that could otherwise last
/// for ever (a worker's NCCL work waits on its GPU for its peers). Plain atomics, valid when
/// zeroed, so that a worker process finds them in its session's arena.
#[repr(C)]
#[derive(Default)]
pub struct Signals {
    /// Set by shutdown before it tells the worker to stop: a device wait of a worker with NCCL
    /// communicators (which could wait forever for a peer) sees it and gives up.
    pub stopping: AtomicBool,
    /// How many times `init_ccl` sent the workers new communicators (counted before it sends
    /// them): a device wait of a worker with NCCL communicators gives up when it changes, so
    /// that a worker stuck on its old ones gets to the new ones.
    pub ccl_generation: AtomicU64,
    /// The controller's ruling that a collective the worker waits in will never complete.
    pub ruling: Ruling,
}

/// Words of a ruling's reason.
const RULING_WORDS: usize = 64;

/// The controller's ruling that the collective a worker waits in, in a call that went to every
/// worker, will never complete (a peer finished the call without joining it, or is gone): the
/// call, and why. Its one writer is the controller, or the worker's node on its behalf; a
/// worker waiting in a collective that cannot end by itself (Gloo's) reads it.
#[repr(C)]
#[derive(Default)]
pub struct Ruling {
    seq: Seq,
    /// The call ruled on (0: none yet).
    call: std::sync::atomic::AtomicU64,
    why: Text<RULING_WORDS>,
}

impl Ruling {
    /// Rules on call `call`, for `why` (its one writer only).
    pub(crate) fn rule(&self, call: u64, why: &str) {
        self.seq.write(|| {
            self.why.store(why);
            self.call.store(call, std::sync::atomic::Ordering::Relaxed);
        });
    }

    /// Why the collective of call `call` will never complete, if the controller ruled so.
    pub(crate) fn on(&self, call: u64) -> Option<String> {
        self.seq
            .read(|| {
                let ruled = self.call.load(std::sync::atomic::Ordering::Relaxed);
                (ruled == call).then(|| self.why.load())
            })
            .flatten()
    }
}

/// Where a record a worker shares with its controller lives: on the heap with the worker
/// thread, or in the arena of the session of this worker process (mapped for the rest of the
/// process).
pub enum Placed<T: 'static> {
    Own(Box<T>),
    Shared(&'static T),
}

impl<T> std::ops::Deref for Placed<T> {
    type Target = T;

    fn deref(&self) -> &T {
        match self {
            Placed::Own(record) => record,
            Placed::Shared(record) => record,
        }
    }
}

/// Whether a worker thread has left its loop, and the threads waiting for that.
#[derive(Default)]
pub struct Exited {
    flag: AtomicBool,
    sleepers: Sleepers,
}

impl Exited {
    /// Records that the worker left its loop and wakes whoever waits for it.
    pub fn mark(&self) {
        self.flag.store(true, Ordering::SeqCst);
        self.sleepers.wake_all();
    }

    pub fn is_set(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    /// Waits until the worker left its loop, or `deadline` passes (a timeout naming `what`).
    pub fn wait(&self, deadline: Deadline, what: impl Fn() -> String) -> Result<()> {
        self.sleepers.wait(
            SpinPolicy::default(),
            deadline,
            what,
            || Ok(()),
            || self.is_set().then_some(()),
        )
    }
}

/// Who a worker is, as the functions it runs see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerInfo {
    pub id: usize,
    pub num_workers: usize,
    pub num_groups: usize,
    pub device: DLDevice,
}

impl WorkerInfo {
    pub fn workers_per_group(&self) -> usize {
        self.num_workers / self.num_groups
    }
    /// The worker's index within its group.
    pub fn local_id(&self) -> usize {
        self.id % self.workers_per_group()
    }

    /// The ids of the workers of its group, itself included.
    pub fn group_members(&self) -> std::ops::Range<usize> {
        group_members(self.id, self.workers_per_group())
    }
}

/// The ids of the workers of worker `worker`'s group, in a session whose groups have
/// `per_group` workers each (consecutive ids).
pub fn group_members(worker: usize, per_group: usize) -> std::ops::Range<usize> {
    let per_group = per_group.max(1);
    let first = worker - worker % per_group;
    first..first + per_group
}

crate::sync::thread_local! {
    static CURRENT: RefCell<Option<(WorkerInfo, Arc<WorkerShared>, Any)>> = const { RefCell::new(None) };
    /// The worker's stream on its device, made on first use: copies to and from worker 0 and
    /// the device work of built-ins (NCCL collectives) go through it. It runs inline, on the
    /// worker's own thread, in the worker's order; a sync of the worker waits for it.
    static STREAM: RefCell<Option<Rc<Stream>>> = const { RefCell::new(None) };
}

/// Runs `f` with the calling worker's stream (made on first use, on the worker's device).
/// Errors: `RuntimeError` off worker threads; why the stream could not be made.
pub fn with_stream<R>(f: impl FnOnce(&Stream) -> Result<R>) -> Result<R> {
    let info = current().ok_or_else(|| {
        Error::runtime("a worker's stream is reachable only from its own worker thread")
    })?;
    let stream = STREAM.with(|slot| -> Result<Rc<Stream>> {
        let mut slot = slot.borrow_mut();
        if let Some(stream) = &*slot {
            return Ok(stream.clone());
        }
        let stream = Rc::new(Stream::with_placement(info.device, Placement::Inline)?);
        *slot = Some(stream.clone());
        Ok(stream)
    })?;
    f(&stream)
}

/// What the worker running on this thread shares with the controller, if any.
pub fn shared() -> Option<Arc<WorkerShared>> {
    CURRENT.with(|c| c.borrow().as_ref().map(|(_, shared, _)| shared.clone()))
}

/// `f` of the record of activity of the worker running on this thread, if any (none in the
/// thread's last destructors).
pub(crate) fn with_own_activity<R>(f: impl FnOnce(&Activity) -> R) -> Option<R> {
    CURRENT
        .try_with(|c| {
            c.borrow()
                .as_ref()
                .map(|(_, shared, _)| f(&shared.activity))
        })
        .ok()
        .flatten()
}

/// `f` of the ring of events of the worker running on this thread, if any, with the number of
/// the call it runs (or ran last).
pub(crate) fn with_own_events(f: impl FnOnce(&Ring, u64)) {
    // A thread's last destructors may still record (its stream's last instructions).
    let _ = CURRENT.try_with(|c| {
        if let Some((_, shared, _)) = c.borrow().as_ref() {
            f(&shared.events, shared.activity.running_call());
        }
    });
}

/// The worker running on this thread, if any.
pub fn current() -> Option<WorkerInfo> {
    CURRENT.with(|c| c.borrow().as_ref().map(|(info, _, _)| *info))
}

/// The worker's handle object, made once per thread by `make` from the worker and a weak
/// reference to its session, and kept while the worker runs.
pub fn current_handle(
    make: impl FnOnce(WorkerInfo, Option<&Weak<dyn std::any::Any + Send + Sync>>) -> Any,
) -> Option<Any> {
    CURRENT.with(|c| {
        let mut current = c.borrow_mut();
        let (info, shared, handle) = current.as_mut()?;
        if matches!(handle, Any::None) {
            *handle = make(*info, shared.session.get());
        }
        Some(handle.clone())
    })
}

/// Marks the worker as gone however its thread ends.
struct ExitGuard(Arc<WorkerShared>);

impl Drop for ExitGuard {
    fn drop(&mut self) {
        // The stream finishes its work on the worker's thread, which made it.
        drop(STREAM.with(|s| s.borrow_mut().take()));
        CURRENT.with(|c| c.borrow_mut().take());
        self.0.exited.mark();
    }
}

/// A call that ran, until its event is recorded (see `Worker::unrecorded`).
#[derive(Clone, Copy)]
struct EndedCall {
    started_ns: u64,
    number: u64,
    to_all: bool,
}

/// A worker's state on its own thread: its registers and the failures its next sync reports.
/// A thread of this process or the main thread of a worker process drives it, one message at a
/// time.
pub(crate) struct Worker {
    info: WorkerInfo,
    /// Whether the user pinned this worker (then it never moves itself).
    pinned: bool,
    /// Moves an unpinned worker off a CPU it shares with its waiter.
    shared_cpu: SharedCpuWatch,
    registers: RegisterFile,
    /// The first failure since the last sync, and how many followed it.
    failure: Option<(Error, usize)>,
    /// The number of the last call it ran (call messages carry only its low bits).
    last_call: u64,
    /// The function's name its record of activity holds.
    named: Option<Arc<str>>,
    /// Its last call, recorded once its end is read: when the next call is taken (that one
    /// reading is the next call's start too: calls in a row cost one each) or as soon as
    /// something else comes or nothing is waiting.
    unrecorded: Cell<Option<EndedCall>>,
    /// Last, so that it goes after the registers.
    _exit: ExitGuard,
}

/// Runs worker `info.id` until it receives `Shutdown`.
pub fn run(
    shared: Arc<WorkerShared>,
    channel: &Channel<Message>,
    info: WorkerInfo,
    policy: SpinPolicy,
    pinned: bool,
) {
    channel.set_consumer(crate::sync::thread::current());
    let mut worker = Worker::start(shared, info, pinned);
    loop {
        // A call taken at once follows the last one without a wait; see `Worker::call`.
        let message = channel.try_recv().unwrap_or_else(|| {
            worker.record_last_call();
            channel.recv_with(policy, || worker.note_idle())
        });
        if !worker.handle(message) {
            break;
        }
    }
    worker.finish();
}

impl Worker {
    /// Makes the calling thread worker `info.id`: what functions it runs see as their worker,
    /// with the worker's device bound (a failure to bind is reported at the first sync).
    pub(crate) fn start(shared: Arc<WorkerShared>, info: WorkerInfo, pinned: bool) -> Worker {
        let exit = ExitGuard(shared.clone());
        shared.activity.start();
        let streams = events::streams_recorders(shared.clone());
        CURRENT.with(|c| *c.borrow_mut() = Some((info, shared, Any::None)));
        // What its own stream runs (inline, on this thread) goes into its ring; what a stream
        // its functions make runs, into its ring of streams.
        crate::vm::record_on_this_thread(Rc::new(events::record_ran));
        crate::vm::record_streams_made_on_this_thread(streams);
        let mut worker = Worker {
            info,
            pinned,
            shared_cpu: SharedCpuWatch::default(),
            registers: RegisterFile::default(),
            failure: None,
            last_call: 0,
            named: None,
            unrecorded: Cell::new(None),
            _exit: exit,
        };
        // The worker's device context becomes current on this thread before anything runs, so
        // the functions it calls (and their CUDA work) find it.
        if let Err(cause) = crate::device::bind_to_thread(info.device) {
            worker.note_failure(&Error::new(
                cause.kind,
                format!("worker {}: {}", info.id, cause.message),
            ));
        }
        worker
    }

    /// Ends the worker after its last message: its device work, then its values, on its own
    /// thread, as they were made there.
    pub(crate) fn finish(mut self) {
        // NCCL work queued and never synced would hold the stream's teardown in the driver if
        // a peer never joined it: it is waited for by polling first, which gives up (aborting
        // the communicators) as the session is shutting down.
        if poll::this_threads_check().is_some() {
            self.sync_device();
        }
        self.registers.clear();
    }

    /// Runs one message; false once it was the last (`Shutdown`).
    pub(crate) fn handle(&mut self, message: Message) -> bool {
        if !matches!(message, Message::Call { .. } | Message::Free(_)) {
            self.record_last_call();
        }
        match message {
            Message::Call {
                call,
                func,
                out,
                args,
            } => self.call(call, func, out, args.as_deref().unwrap_or(&[])),
            Message::Store(store) => {
                let Store { reg, value, name } = &*store;
                self.registers
                    .set(*reg, Slot::Value(value.clone()), name.clone());
            }
            Message::Free(reg) => self.registers.free(reg),
            // A request is answered only if its waiter has not given up (timed out): a reply
            // nobody reads must not swallow a failure the next wait should report. What may
            // wait long (for the device, whose work may wait for peers) is done before the
            // request is claimed, so that its waiter may still give up meanwhile.
            Message::Sync(reply) => {
                self.share_less(reply.waiter_cpu());
                self.sync_device();
                if reply.claim() {
                    reply.complete(self.take_failure());
                }
            }
            Message::Get { reg, reply } => {
                if reply.claim() {
                    let value = self.value(reg, "reading").cloned();
                    reply.complete(self.take_failure().and(value));
                }
            }
            Message::CountLive(reply) => {
                if reply.claim() {
                    reply.complete(Ok(self.registers.live()));
                }
            }
            Message::GetGlobalFunc(lookup) => {
                let GlobalLookup { reg, name, reply } = *lookup;
                if reply.claim() {
                    let found = registry::get_global(&name).map(|function| {
                        self.registers
                            .set(reg, Slot::Value(function.into()), Some(name));
                    });
                    reply.complete(found);
                }
            }
            // Like a global lookup, it reports its own failure alone: the failures since the
            // last sync stay for the next one.
            Message::GetModuleFunc(lookup) => {
                let ModuleLookup {
                    reg,
                    module,
                    name,
                    reply,
                } = *lookup;
                if reply.claim() {
                    let found = self.module_function(module, &name).map(|function| {
                        self.registers
                            .set(reg, Slot::Value(function.into()), Some(name));
                    });
                    reply.complete(found);
                }
            }
            Message::Copy {
                reg,
                host,
                direction,
                reply,
            } => {
                // The copy waits in the driver for the stream's earlier work: that is waited
                // for first (the worker says so: a referee judges its peers then), which a
                // failure of it fails.
                if let Some(stream) = STREAM.with(|s| s.borrow().clone()) {
                    self.activity().enter(State::Syncing);
                    self.settle_stream(&stream);
                    self.note_idle();
                }
                if reply.claim() {
                    let copied = self
                        .take_failure()
                        .and_then(|()| self.copy(reg, &host, direction));
                    reply.complete(copied);
                }
            }
            Message::Shutdown => return false,
        }
        true
    }

    /// See [`SharedCpuWatch`]; a worker the user pinned stays where it is.
    fn share_less(&mut self, waiter_cpu: Option<usize>) {
        if !self.pinned {
            self.shared_cpu.note(waiter_cpu);
        }
    }

    /// What this worker is doing, for anyone to read.
    fn activity(&self) -> &Activity {
        &self._exit.0.activity
    }

    /// Records that the worker waits for its next message.
    pub(crate) fn note_idle(&self) {
        self.record_last_call();
        super::on_gpu::record_passed();
        self.activity().enter(State::Idle);
    }

    /// Records the worker's last call, if it is not yet, as ending now: it found no message
    /// waiting, or something other than a call or a free came.
    pub(crate) fn record_last_call(&self) {
        if self.unrecorded.get().is_some() {
            self.record_call_ended(events::now_ns());
        }
    }

    /// Records the worker's last call, if it is not yet, as ending at `ended_ns`.
    fn record_call_ended(&self, ended_ns: u64) {
        let Some(call) = self.unrecorded.take() else {
            return;
        };
        self._exit.0.events.record(&events::Event {
            kind: events::Kind::Call,
            start_ns: call.started_ns,
            dur_ns: ended_ns.saturating_sub(call.started_ns),
            call: call.number,
            bytes: 0,
            wait_ns: 0,
            detail: call.to_all.into(),
            name: self.named.as_deref().unwrap_or(""),
        });
    }

    /// Runs call `call` (its message's word: see [`widen_call`]) of the function in `func`.
    fn call(&mut self, call: u32, func: Reg, out: Reg, args: &[Arg]) {
        let (number, to_all) = widen_call(self.last_call, call);
        self.last_call = number;
        let name = self.registers.name(func);
        // The name is written only when it changes: calls of one function in a row cost none.
        let renamed = match (name, &self.named) {
            (Some(name), Some(named)) if Arc::ptr_eq(name, named) => None,
            (name, _) => Some(name.cloned()),
        };
        let function = renamed.as_ref().map(|name| name.as_deref().unwrap_or(""));
        let started_ns = events::now_ns();
        // Under its own name, before the record takes this call's.
        self.record_call_ended(started_ns);
        self.activity().begin_call(number, to_all, function);
        if let Some(name) = renamed {
            self.named = name;
        }
        let slot = match self.try_call(func, args) {
            Ok(value) => {
                self.activity().end_call(None);
                Slot::Value(value)
            }
            Err(error) => {
                // The message names the worker already: the record keeps what failed and why.
                let who = format!("worker {}: ", self.info.id);
                let cause = error.message.strip_prefix(&who).unwrap_or(&error.message);
                self.activity().end_call(Some(cause));
                let error = Arc::new(error);
                self.note_failure(&error);
                Slot::Failed(error)
            }
        };
        self.registers.set(out, slot, None);
        self.unrecorded.set(Some(EndedCall {
            started_ns,
            number,
            to_all,
        }));
    }

    /// How messages name the function in `func`.
    fn label(&self, func: Reg) -> String {
        match self.registers.name(func) {
            Some(name) => format!("`{name}`"),
            None => format!("the function in register {func}"),
        }
    }

    fn try_call(&self, func: Reg, args: &[Arg]) -> Result<Any> {
        let attribute = |cause: Error| worker_error(self.info.id, &self.label(func), &cause);
        let callee = self.value(func, "calling").map_err(attribute)?.view();
        let views = args
            .iter()
            .enumerate()
            .map(|(position, arg)| match arg {
                Arg::Value(value) => Ok(value.view()),
                Arg::Register(reg) => self
                    .value(*reg, &format!("argument {position}"))
                    .map(Any::view),
            })
            .collect::<Result<Vec<AnyView<'_>>>>()
            .map_err(|cause| {
                let (id, label) = (self.info.id, self.label(func));
                Error::new(
                    ErrorKind::Worker,
                    format!("worker {id}: {label} was not run: {}", cause.message),
                )
            })?;
        Function::call_view(&callee, &views).map_err(attribute)
    }

    /// The function `name` of the module in register `module`: the module's `KeyError` if it
    /// lacks it, a `TypeError` if the register holds no module, the failure of the call that
    /// made the module (its load) if the register holds that.
    fn module_function(&self, module: Reg, name: &str) -> Result<Function> {
        let module = self.value(module, &format!("looking up `{name}`"))?;
        crate::object::module::module_function(&module.view(), name)
    }

    /// The value in `reg`, or why there is none (`use_` says what it was wanted for).
    fn value(&self, reg: Reg, use_: &str) -> Result<&Any> {
        match self.registers.get(reg) {
            Slot::Value(value) => Ok(value),
            Slot::Failed(cause) => Err(Error::new(
                ErrorKind::Worker,
                format!(
                    "{use_}: register {reg} holds the failure of an earlier call ({})",
                    cause.message
                ),
            )),
            Slot::Empty => Err(Error::new(
                ErrorKind::Worker,
                format!("{use_}: register {reg} is empty on worker {}", self.info.id),
            )),
        }
    }

    /// Waits for the device work the worker queued, and keeps its failures for the reply: the
    /// work on its stream, if it has one, and on a GPU also the kernels its functions launched
    /// on the device's default stream. A worker with NCCL communicators polls instead of
    /// blocking in the driver, with the check its collectives set for its thread (see
    /// [`poll::watch_this_thread`]): a collective a peer never joins then ends in an error
    /// instead of holding the worker for good.
    fn sync_device(&mut self) {
        let stream = STREAM.with(|s| s.borrow().clone());
        let on_gpu = self.info.device.device_type == KDL_CUDA;
        if stream.is_none() && !on_gpu {
            return;
        }
        let started = events::now_ns();
        self.activity().enter(State::Syncing);
        if let Some(stream) = stream {
            self.settle_stream(&stream);
        }
        if on_gpu && let Err(cause) = cuda::synchronize_default_stream(self.info.device.device_id) {
            self.note_failure(&worker_error(self.info.id, "work on its GPU", &cause));
        }
        let ring = &self._exit.0.events;
        ring.record(&events::Event {
            call: self.last_call,
            ..events::Event::ended(events::Kind::Sync, "sync", started)
        });
        self.note_idle();
    }

    /// Waits for the work queued on `stream`, the worker's, polling with the thread's check
    /// (NCCL's work waits on the device for peers that may never come), and keeps its failure
    /// for the next sync or copy to report.
    fn settle_stream(&mut self, stream: &Stream) {
        let mut check = poll::this_threads_check();
        if let Err(cause) = stream.sync_checked(check.as_mut().map(|c| c as _)) {
            self.note_failure(&worker_error(self.info.id, "work on its stream", &cause));
        }
    }

    /// Keeps `error` for the next sync to report.
    pub(crate) fn note_failure(&mut self, error: &Error) {
        match &mut self.failure {
            Some((_, more)) => *more += 1,
            None => self.failure = Some((error.clone(), 0)),
        }
    }

    fn take_failure(&mut self) -> Result<()> {
        match self.failure.take() {
            None => Ok(()),
            Some((error, 0)) => Err(error),
            Some((error, more)) => {
                let s = if more == 1 { "" } else { "s" };
                Err(Error::new(
                    error.kind,
                    format!(
                        "{} (and {more} more failure{s} since the last sync)",
                        error.message
                    ),
                ))
            }
        }
    }

    /// Waits for this worker's device work and reports the first failure since the last sync:
    /// what a sync answers once everything sent before it has run.
    pub fn sync(&mut self) -> Result<()> {
        self.sync_device();
        self.take_failure()
    }

    /// Whether a sync now would neither wait for nor report anything: no failure kept, a
    /// worker on the CPU, and its stream (if it has one) idle with nothing to report.
    pub fn is_settled(&self) -> bool {
        self.failure.is_none()
            && self.info.device.device_type == KDL_CPU
            && STREAM.with(|stream| stream.borrow().as_ref().is_none_or(|s| s.is_settled()))
    }

    /// The tensor in `reg`, with the work this worker's stream queued done, for the controller
    /// to copy in place (a worker process lending it from the session's arena). Reports the
    /// failures since the last sync first, as a copy does.
    pub fn lend(&mut self, reg: Reg) -> Result<Tensor> {
        self.take_failure()?;
        let id = self.info.id;
        let attribute = |cause: Error| worker_error(id, "copy to or from worker 0", &cause);
        let tensor = self
            .value(reg, "the copy's tensor")
            .map_err(attribute)?
            .view()
            .as_tensor()
            .map_err(attribute)?;
        with_stream(|stream| stream.sync())?;
        Ok(tensor)
    }

    /// Copies between the tensor in `reg` and the host, once the worker's stream is settled.
    fn copy(&self, reg: Reg, copy: &HostCopy, direction: CopyDirection) -> Result<()> {
        let (host, name) = (&copy.host, copy.name);
        let what = direction.describe(name);
        let id = self.info.id;
        let attribute = |cause: Error| worker_error(id, &what, &cause);
        let tensor = self
            .value(reg, "the copy's tensor")
            .map_err(&attribute)?
            .view()
            .as_tensor()
            .map_err(&attribute)?;
        with_stream(|stream| {
            stream.copy_host_sync(host, &tensor, direction == CopyDirection::FromWorker)
        })
        .map_err(|cause| Error::new(cause.kind, format!("{what}: {}", cause.message)))
    }
}
