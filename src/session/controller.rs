//! The controller side of a threaded session: N worker threads, each with its own queue.
//! Messages are typed values; a broadcast is built once and shared. Any host thread may use a
//! session; a send gate makes shutdown wait for sends in progress, so nothing is queued after
//! the final `Shutdown` and no wait can outlive its worker.

// Model-checking builds have thread links alone.
#![cfg_attr(loom, allow(irrefutable_let_patterns))]

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use super::dref::DRef;
use super::link::{self, WorkerLink};
#[cfg(not(loom))]
use super::node::{self};
#[cfg(not(loom))]
use super::process;
use super::state::SessionState;
use super::trace::Tracer;
use super::trace::collect::Doing;
use crate::abi::DLDevice;
use crate::channel::Deadline;
use crate::channel::SpinPolicy;
use crate::channel::deadline::STOP_GRACE;
use crate::device::cpu::HostTensor;
use crate::object::{Any, AnyView, Error, ErrorKind, Function, Result, registry};
use crate::sync::Mutex;
use crate::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering, fence};
use crate::sync::clock::ticks;
use crate::worker::activity::call_word;
use crate::worker::completion::Completion;
use crate::worker::message::{Arg, CopyDirection, GlobalLookup, HostCopy, Message, Reply, Store};
use crate::worker::registers::{Reg, RegisterIds};
use crate::worker::{self};

/// What watches a session's worker processes (nothing in model-checking builds, which have none).
#[cfg(not(loom))]
pub(super) type DeathWatch = process::DeathWatch;
#[cfg(loom)]
pub(super) type DeathWatch = ();

/// A session: a controller and its workers (threads of this process, worker processes, or
/// workers on other nodes), each reached through its link.
pub struct Session {
    pub(super) workers: Arc<[WorkerLink]>,
    /// The device of each worker.
    pub(super) devices: Vec<DLDevice>,
    pub(super) num_groups: usize,
    pub(super) registers: RegisterIds,
    pub(super) timeout: Option<Duration>,
    pub(super) spin: SpinPolicy,
    /// Registers of dropped DRefs that not every worker was told of yet: the next send tells
    /// every worker, before its own message (see `free_register`).
    pub(super) frees: Mutex<Vec<Reg>>,
    /// Whether frees wait for the next send even when there is room for them (every worker is
    /// reached through frames, where a free of its own costs a frame).
    pub(super) frees_wait: bool,
    /// Whether `frees` may hold something (so that sends skip its lock otherwise).
    pub(super) has_frees: AtomicBool,
    /// The watch over worker processes (process sessions), which records a worker's death in
    /// its link as it happens.
    pub(super) watcher: Option<DeathWatch>,
    /// Held by `init_ccl` from sending the new communicator to the workers until it keeps it,
    /// so that every worker installs the same one last, and that is the one kept. (Not the `ccl`'s
    /// lock: shutdown takes that one to break waits that this call's sync may be stuck behind.)
    pub(super) ccl_setup: Mutex<()>,
    /// Whether `load_module` ships modules to the other nodes (sessions across machines).
    pub(super) upload_modules: bool,
    /// Whether the session is open, stopping or broken, and the CPU communicator `init_ccl`
    /// set up, if any (kept to break its waits at shutdown; the death of a worker breaks it).
    pub(super) state: Arc<SessionState>,
    /// How many times `init_ccl` laid out communicators in the nodes' arenas (sessions across
    /// machines): each goes to the area after the last one's.
    pub(super) node_ccl_inits: AtomicUsize,
    /// The number of the last call sent (calls are numbered from 1, in the order they take
    /// their numbers).
    pub(super) calls_sent: AtomicU64,
    /// The device ids the session's NCCL communicators were last made with (`init_ccl("nccl")`),
    /// while they are the session's: it makes them again with these when a worker's were
    /// aborted.
    pub(super) nccl_ids: Mutex<Option<Vec<i32>>>,
    /// Set once the referee of a session across machines runs (from its first `init_ccl`).
    pub(super) referee: std::sync::OnceLock<()>,
    /// The session's timeline, while one is taken.
    pub(super) tracer: Tracer,
}

/// Which workers a call goes to.
#[derive(Clone, Copy, Debug)]
pub enum Target {
    All,
    One(usize),
}

/// A function of a session bound to the workers it runs on (see [`Session::bind`]); it keeps
/// the function's register, and so the session, alive.
pub struct BoundCall {
    target: Target,
    func: DRef,
}

impl BoundCall {
    /// Calls the function with `args`, as [`Session::call`] does.
    pub fn call(&self, args: &[AnyView<'_>]) -> Result<DRef> {
        self.func
            .session()
            .call_register(self.target, self.func.reg(), args)
    }

    /// The worker thread a call goes to, when it goes to one: only such a call can be tried
    /// without waiting ([`BoundCall::try_call`]).
    pub fn single_thread(&self) -> Option<usize> {
        let session = self.func.session();
        let worker = match self.target {
            Target::One(worker) => worker,
            Target::All if session.workers.len() == 1 => 0,
            Target::All => return None,
        };
        matches!(session.workers[worker], WorkerLink::Thread(_)).then_some(worker)
    }

    /// [`BoundCall::call`] if it sends without waiting; `Ok(None)`, having queued no call, when
    /// it would wait: for room in the worker's queue (frees waiting for a send may have been
    /// queued ahead of it), for frees to queue on other workers, or for more than one worker or
    /// a worker process (see [`BoundCall::single_thread`]). A caller
    /// that holds a lock a worker may need (Python's GIL) can call this while holding it.
    pub fn try_call(&self, args: &[AnyView<'_>]) -> Result<Option<DRef>> {
        match self.single_thread() {
            Some(worker) => self
                .func
                .session()
                .try_call_register(worker, self.func.reg(), args),
            None => Ok(None),
        }
    }

    /// [`BoundCall::call`] as a function of the call's arguments, which returns the DRef.
    pub fn into_function(self) -> Function {
        Function::from_closure(move |args| {
            AnyView::validate_all(args, |i| format!("args[{i}]"))?;
            Ok(self.call(args)?.into())
        })
    }

    /// [`BoundCall::try_call`] as a function of the call's arguments, which returns the DRef,
    /// or None for a call it did not send; None for a call that is never tried.
    pub fn into_try_function(self) -> Option<Function> {
        self.single_thread()?;
        Some(Function::from_closure(move |args| {
            AnyView::validate_all(args, |i| format!("args[{i}]"))?;
            Ok(self.try_call(args)?.map_or(Any::None, Any::from))
        }))
    }
}

pub(super) fn closed_error() -> Error {
    Error::new(ErrorKind::SessionClosed, "the session has been shut down")
}

impl Session {
    /// Whether the workers are processes.
    pub(super) fn has_processes(&self) -> bool {
        self.watcher.is_some()
    }

    pub fn num_workers(&self) -> usize {
        self.workers.len()
    }

    pub fn worker_device(&self, worker: usize) -> DLDevice {
        self.devices[worker]
    }

    pub fn num_groups(&self) -> usize {
        self.num_groups
    }

    pub fn is_closed(&self) -> bool {
        self.state.is_stopping()
    }

    /// Checks a worker index from C.
    pub fn worker_index(&self, worker: i64) -> Result<usize> {
        usize::try_from(worker)
            .ok()
            .filter(|&w| w < self.workers.len())
            .ok_or_else(|| {
                Error::index(format!(
                    "worker {worker} out of range (session has {} workers)",
                    self.workers.len()
                ))
            })
    }

    pub(super) fn deadline(&self) -> Deadline {
        Deadline::after(self.timeout)
    }

    /// Fails with `SessionClosed` after shutdown.
    pub fn check_open(&self) -> Result<()> {
        if self.state.is_stopping() {
            return Err(closed_error());
        }
        // A session whose worker process or node died is broken: everything fails with that
        // cause (worker 0's link may see its own death before anyone recorded it).
        self.state.check()?;
        if self.has_processes() {
            self.alive(0)?;
        }
        Ok(())
    }

    pub(super) fn alive(&self, worker: usize) -> Result<()> {
        self.workers[worker].alive(worker)
    }

    /// Queues a message for `worker` without waking it.
    pub(super) fn push(&self, worker: usize, message: Message) -> Result<()> {
        self.workers[worker]
            .push(message, self.spin, self.deadline(), || self.alive(worker))
            .map_err(|error| self.full_queue_report(error, worker..worker + 1))
    }

    /// Wakes the sleeping workers among `workers` after one fence for all the pushes before.
    pub(super) fn wake(&self, workers: impl Iterator<Item = usize>) {
        fence(Ordering::SeqCst);
        for worker in workers {
            self.workers[worker].wake_fenced();
        }
    }

    pub(super) fn targets(&self, target: Target) -> std::ops::Range<usize> {
        match target {
            Target::All => 0..self.workers.len(),
            Target::One(worker) => worker..worker + 1,
        }
    }

    /// Queues `message()` for every targeted worker and wakes those that sleep.
    ///
    /// Nothing here orders sends against a concurrent shutdown: a message queued after the
    /// final `Shutdown` is never run, and its waiter learns so from the worker's exit.
    pub(super) fn run(&self, target: Target, message: impl Fn() -> Message) -> Result<()> {
        self.check_open()?;
        self.queue_frees()?;
        let pushed = self.push_range(self.targets(target), message, &[]);
        self.wake(self.targets(target));
        pushed
    }

    /// [`Session::run`] of a call for every worker: the frees waiting for a send ride on it,
    /// one message per worker for both.
    pub(super) fn run_call_on_all(&self, call: impl Fn() -> Message) -> Result<()> {
        self.check_open()?;
        let frees = self.take_frees();
        let all = 0..self.workers.len();
        let pushed = self.push_range(all.clone(), call, &frees);
        self.settle_frees(frees, pushed.is_ok());
        self.wake(all);
        pushed
    }

    /// Queues `message()` for the workers of `range` without waking them, after `frees`
    /// (registers they empty first; only a call takes them).
    pub(super) fn push_range(
        &self,
        range: std::ops::Range<usize>,
        message: impl Fn() -> Message,
        frees: &[Reg],
    ) -> Result<()> {
        link::push_to(
            &self.workers,
            range.clone(),
            message,
            frees,
            self.spin,
            self.deadline(),
            |w| self.alive(w),
        )
        .map_err(|error| self.full_queue_report(error, range))
    }

    pub(super) fn store(
        &self,
        target: Target,
        reg: Reg,
        value: Any,
        name: Option<Arc<str>>,
    ) -> Result<()> {
        let store = Arc::new(Store { reg, value, name });
        self.run(target, || Message::Store(store.clone()))
    }

    /// Waits for a worker's reply; a timeout says what the worker is doing.
    pub(super) fn wait<T>(
        &self,
        worker: usize,
        reply: &Reply<T>,
        what: &str,
        deadline: Deadline,
    ) -> Result<T> {
        let what = || format!("{what} on worker {worker}");
        self.workers[worker]
            .wait(reply, self.spin, deadline, what, || self.alive(worker))
            .map_err(|error| self.hang_report(error, &what(), &what(), [worker]))
    }

    /// Sends a request that carries `reply` to one worker and waits for the answer.
    pub(super) fn request<T>(
        &self,
        worker: usize,
        what: &str,
        make: impl FnOnce(Reply<T>) -> Message,
    ) -> Result<T> {
        self.request_with(worker, what, Reply::new(Completion::new()), make)
    }

    pub(super) fn request_with<T>(
        &self,
        worker: usize,
        what: &str,
        reply: Reply<T>,
        make: impl FnOnce(Reply<T>) -> Message,
    ) -> Result<T> {
        self.check_open()?;
        self.queue_frees()?;
        self.push(worker, make(reply.clone()))?;
        self.wake(worker..worker + 1);
        self.wait(worker, &reply, what, self.deadline())
    }

    pub(super) fn check_owner(
        self: &Arc<Self>,
        dref: &DRef,
        name: impl std::fmt::Display,
    ) -> Result<()> {
        if Arc::ptr_eq(dref.session(), self) {
            Ok(())
        } else {
            Err(Error::value(format!(
                "`{name}` is a DRef of another session"
            )))
        }
    }

    /// Resolves a global function now (a missing name is a `KeyError` here, not later on the
    /// workers) and stores it in a new register on every worker.
    pub fn get_global_func(self: &Arc<Self>, name: &str) -> Result<DRef> {
        if self.is_closed() {
            return Err(closed_error());
        }
        crate::worker::tvm_dispatch::install()?;
        let name: Arc<str> = name.into();
        // A function object cannot cross to a worker in another process: each looks it up.
        if self
            .workers
            .iter()
            .any(|w| !matches!(w, WorkerLink::Thread(_)))
        {
            return self.get_global_func_of_workers(name);
        }
        let function = registry::get_global(&name)?;
        let dref = DRef::new(self.clone(), self.registers.allocate(), Some(name.clone()));
        self.store(Target::All, dref.reg(), function.into(), Some(name))?;
        Ok(dref)
    }

    /// [`Session::get_global_func`] for sessions with workers in other processes: every worker
    /// looks the name up in its own registry.
    pub(super) fn get_global_func_of_workers(self: &Arc<Self>, name: Arc<str>) -> Result<DRef> {
        self.look_up(name, "looking up a global function", |reg, name, reply| {
            Message::GetGlobalFunc(Box::new(GlobalLookup { reg, name, reply }))
        })
    }

    /// A new register on every worker holding the function `name` each worker finds itself, by
    /// the lookup `make` sends it with the register, the name and the reply: all asked at once,
    /// and a worker that finds nothing fails the call (the register is freed again).
    pub(super) fn look_up(
        self: &Arc<Self>,
        name: Arc<str>,
        what: &str,
        make: impl Fn(Reg, Arc<str>, Reply<()>) -> Message,
    ) -> Result<DRef> {
        self.check_open()?;
        self.queue_frees()?;
        let dref = DRef::new(self.clone(), self.registers.allocate(), Some(name.clone()));
        self.ask_workers(0..self.workers.len(), what, |reply| {
            make(dref.reg(), name.clone(), reply)
        })?;
        Ok(dref)
    }

    /// Argument `position` of a call, as the workers will get it (errors name it `args[i]`).
    pub(super) fn encode(self: &Arc<Self>, position: usize, arg: &AnyView<'_>) -> Result<Arg> {
        if let Some(dref) = DRef::from_view(arg) {
            self.check_owner(&dref, format_args!("args[{position}]"))?;
            return Ok(Arg::Register(dref.reg()));
        }
        arg.to_owned()
            .map(Arg::Value)
            .map_err(|e| e.context(format_args!("`args[{position}]`")))
    }

    /// Calls the function in `func` with `args` on the target workers; DRef arguments become
    /// each worker's register value. Returns at once with a DRef to the results.
    pub fn call(
        self: &Arc<Self>,
        target: Target,
        func: &DRef,
        args: &[AnyView<'_>],
    ) -> Result<DRef> {
        self.check_owner(func, "func")?;
        self.call_register(target, func.reg(), args)
    }

    /// Calls `here.0` with the arguments `here.1` on the workers of this machine and `there.0`
    /// with `there.1` on the workers of other nodes, into one register: a call whose arguments
    /// differ by machine (a module loaded from its path here and from its upload there).
    #[cfg(not(loom))]
    pub(super) fn call_by_machine(
        self: &Arc<Self>,
        here: (&DRef, &[AnyView<'_>]),
        there: (&DRef, &[AnyView<'_>]),
    ) -> Result<DRef> {
        self.check_owner(here.0, "func")?;
        self.check_owner(there.0, "func")?;
        let (here_args, there_args) = (self.encode_args(here.1)?, self.encode_args(there.1)?);
        self.check_open()?;
        let frees = self.take_frees();
        let all = 0..self.workers.len();
        let local = all
            .clone()
            .find(|&w| matches!(self.workers[w], WorkerLink::Node(_)))
            .unwrap_or(all.end);
        let out = DRef::new(self.clone(), self.registers.allocate(), None);
        let number = self.number_call();
        let call = |func: &DRef, args: &Option<Arc<[Arg]>>| Message::Call {
            call: call_word(number, true),
            func: func.reg(),
            out: out.reg(),
            args: args.clone(),
        };
        let pushed = self
            .push_range(0..local, || call(here.0, &here_args), &frees)
            .and_then(|()| self.push_range(local..all.end, || call(there.0, &there_args), &frees));
        self.settle_frees(frees, pushed.is_ok());
        self.wake(all);
        pushed.map(|()| out)
    }

    /// A number for a new call (its message carries the word [`call_word`] makes of it).
    fn number_call(&self) -> u64 {
        self.calls_sent.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Whether `load_module` ships modules to the session's other nodes.
    pub(super) fn uploads_modules(&self) -> bool {
        self.upload_modules
    }

    /// Sends `module` (the bytes of a module file) to every other node of the session, which
    /// keeps it under its SHA-256; returns that hash in hex.
    #[cfg(not(loom))]
    pub(super) fn upload(&self, module: &[u8]) -> Result<String> {
        let hash = node::hash(module);
        for (node, first) in self.nodes() {
            node.alive(first)?;
            node.upload(&hash, module)?;
        }
        Ok(node::hex(&hash))
    }

    /// `func` of this session bound to `target`, for calls that repeat: [`BoundCall::call`] is
    /// [`Session::call`] without checking the target and the function again.
    pub fn bind(self: &Arc<Self>, target: Target, func: DRef) -> Result<BoundCall> {
        self.check_open()?;
        self.check_owner(&func, "func")?;
        if let Target::One(worker) = target {
            self.worker_index(worker as i64)?;
        }
        Ok(BoundCall { target, func })
    }

    /// The arguments of a call, as the workers will get them (one `Arc` shared by all).
    pub(super) fn encode_args(
        self: &Arc<Self>,
        args: &[AnyView<'_>],
    ) -> Result<Option<Arc<[Arg]>>> {
        if args.is_empty() {
            return Ok(None);
        }
        let args = args
            .iter()
            .enumerate()
            .map(|(i, a)| self.encode(i, a))
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(args.into()))
    }

    /// [`Session::call`] for a function of this session, in register `func`.
    pub(super) fn call_register(
        self: &Arc<Self>,
        target: Target,
        func: Reg,
        args: &[AnyView<'_>],
    ) -> Result<DRef> {
        if self.is_closed() {
            return Err(closed_error());
        }
        #[cfg(not(loom))]
        if self.state.take_ruling() {
            self.remake_comms()?;
        }
        let args = self.encode_args(args)?;
        let out = DRef::new(self.clone(), self.registers.allocate(), None);
        let reg = out.reg();
        let number = self.number_call();
        let sent = self.tracer.is_on().then(ticks);
        let call = || Message::Call {
            call: call_word(number, self.targets(target).len() == self.workers.len()),
            func,
            out: reg,
            args: args.clone(),
        };
        match target {
            Target::All => self.run_call_on_all(call)?,
            Target::One(_) => self.run(target, call)?,
        }
        let worker = match target {
            Target::All => None,
            Target::One(worker) => Some(worker),
        };
        self.note_sent(sent, number, worker);
        Ok(out)
    }

    /// Notes, when a trace runs (`sent`: when the send began), that call `number` went to
    /// `worker` (None: every worker).
    fn note_sent(&self, sent: Option<u64>, number: u64, worker: Option<usize>) {
        if let Some(sent) = sent {
            let call = number;
            self.tracer.note(Doing::Sent { call, worker }, sent);
        }
    }

    /// [`Session::call_register`] to the thread of `worker` alone, if its queue has room now for
    /// the call and for the frees waiting for a send (which it carries when `worker` is the
    /// session's only one, and waits for otherwise); `Ok(None)`, having queued no call,
    /// otherwise.
    pub(super) fn try_call_register(
        self: &Arc<Self>,
        worker: usize,
        func: Reg,
        args: &[AnyView<'_>],
    ) -> Result<Option<DRef>> {
        self.check_open()?;
        let args = self.encode_args(args)?;
        // Waiting frees go first, to every worker: here only when this one is all of them.
        let frees = self.take_frees();
        let link = &self.workers[worker];
        let told = (frees.is_empty() || self.workers.len() == 1)
            && frees
                .iter()
                .all(|&reg| link.try_push(Message::Free(reg)).is_ok());
        let out = self.registers.allocate();
        let number = self.number_call();
        let sent = self.tracer.is_on().then(ticks);
        let call = Message::Call {
            call: call_word(number, self.workers.len() == 1),
            func,
            out,
            args,
        };
        let called = told && link.try_push(call).is_ok();
        // A free queued twice empties an empty register: harmless, as it is not reused yet.
        self.settle_frees(frees, told);
        if !called {
            self.registers.release(out); // no worker saw it
            // Its number goes back too, unless a later call took one since.
            let _ = self.calls_sent.compare_exchange(
                number,
                number - 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            return Ok(None);
        }
        self.wake(worker..worker + 1);
        self.note_sent(sent, number, (self.workers.len() > 1).then_some(worker));
        Ok(Some(DRef::new(self.clone(), out, None)))
    }

    /// An owned copy of a register's value on one worker.
    pub fn get_register(&self, reg: Reg, worker: usize) -> Result<Any> {
        self.request(worker, "reading a register", |reply| Message::Get {
            reg,
            reply,
        })
        .inspect_err(|error| self.note_aborted_comms(error))
    }

    /// Sets a register's value on one worker (ordered after earlier calls; returns at once).
    pub fn set_register(&self, reg: Reg, worker: usize, value: Any) -> Result<()> {
        // Fails (nothing queued) after shutdown, like every call.
        self.store(Target::One(worker), reg, value, None)
    }

    /// How many registers hold something on `worker`, after everything sent before.
    pub fn live_registers(&self, worker: usize) -> Result<usize> {
        self.request(worker, "counting registers", Message::CountLive)
    }

    /// Copies between a host buffer and the tensor in `dref` on worker 0; returns when done.
    /// Errors name `dref` as `name` (the argument that gave it).
    pub fn copy_worker0(
        self: &Arc<Self>,
        host: HostTensor,
        dref: &DRef,
        name: &'static str,
        direction: CopyDirection,
    ) -> Result<()> {
        let what = match direction {
            CopyDirection::ToWorker => "copy to worker 0",
            CopyDirection::FromWorker => "copy from worker 0",
        };
        let bytes = host.nbytes() as u64;
        self.traced(what, bytes, || {
            self.copy_worker0_now(host, dref, name, direction)
        })
        .inspect_err(|error| self.note_aborted_comms(error))
    }

    fn copy_worker0_now(
        self: &Arc<Self>,
        host: HostTensor,
        dref: &DRef,
        name: &'static str,
        direction: CopyDirection,
    ) -> Result<()> {
        self.check_owner(dref, name)?;
        self.check_open()?;
        self.queue_frees()?;
        let (reg, deadline) = (dref.reg(), self.deadline());
        let in_place = self.workers[0]
            .copy_in_place(reg, &host, name, direction, self.spin, deadline)
            .map_err(|error| {
                let what = direction.describe(name);
                self.hang_report(error, &what, &what, [0])
            });
        if in_place? {
            return Ok(());
        }
        self.request(0, "copy", |reply| Message::Copy {
            reg: dref.reg(),
            host: Box::new(HostCopy { host, name }),
            direction,
            reply,
        })
    }

    /// Stops every worker after the work already queued and joins their threads. Later calls
    /// fail with `SessionClosed`; shutting down again does nothing.
    pub fn shutdown(&self) -> Result<()> {
        if !self.state.begin_stopping() {
            return Ok(());
        }

        // A collective some worker never joins would keep its worker from ever reading the
        // shutdown: break the communicator so its waits end. A worker waiting for NCCL work on
        // its GPU sees its flag, aborts its communicators and stops waiting.
        for link in self.workers.iter() {
            link.mark_stopping();
        }
        if let Some(ccl) = self
            .state
            .ccl
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            ccl.abort(&Error::new(
                ErrorKind::SessionClosed,
                "the session was shut down while this collective waited for its workers",
            ));
        }
        // Worker processes get one grace period, together; those of a broken session none,
        // since nothing they still do can be seen.
        let broken = self.state.is_broken() || (self.has_processes() && self.alive(0).is_err());
        let deadline = match self.deadline() {
            _ if broken => Deadline::now(),
            never if never.is_never() && self.has_processes() => Deadline::after(Some(STOP_GRACE)),
            deadline => deadline,
        };
        let mut first = None;
        for (worker, link) in self.workers.iter().enumerate() {
            if let Err(error) = link.stop(worker, self.spin, deadline) {
                first.get_or_insert(error);
            }
        }
        self.wake(0..self.workers.len());
        let me = worker::current().map(|info| info.id);
        for (worker, link) in self.workers.iter().enumerate() {
            // What is left of a broken session is ended, not waited for.
            if let Err(error) = link.join(worker, deadline, me)
                && !broken
            {
                first.get_or_insert(self.did_not_stop(error, worker));
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}
