//! The controller's side of one worker process: two rings in a memfd the worker inherited
//! (requests to it, replies from it), the child process, and the requests waiting for replies.
//!
//! The one idea: no thread of the controller is dedicated to a worker. A thread that waits for
//! a reply reads the reply ring itself, completing whichever pending requests the replies
//! answer, its own among them; other threads waiting on the same worker meanwhile wait for
//! their reply to be completed, or for the ring to be free to read.

use std::sync::{Arc, OnceLock, PoisonError};
use std::time::Duration;

use crate::abi::DLDevice;
use crate::ccl::CpuCcl;
use crate::channel::Deadline;
use crate::channel::ring::{Consumer, Producer, Waker};
use crate::channel::{Sleepers, SpinPolicy, spin_briefly};
use crate::device::cpu::HostTensor;
use crate::object::{Any, Error, ErrorKind, Result, Tensor};
use crate::os::Child;
use crate::session::requests::{Pending, RequestBook, encode_broadcast, try_send};
use crate::session::state::SessionState;
use crate::session::status::{Verdict, WorkerStatus};
use crate::sync::Mutex;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::time::Instant;
use crate::wire::{ArenaTensor, Frame, Limits, Value};
use crate::worker::Signals;
use crate::worker::activity::Activity;
use crate::worker::arena::{Arena, CCL_AREAS};
use crate::worker::completion::Completion;
use crate::worker::events::Ring;
use crate::worker::message::{CopyDirection, Message, Reply};

/// One worker process, as the controller reaches it.
pub(crate) struct ProcessLink {
    worker: usize,
    /// Its place among the workers of this machine, in their arena.
    local: usize,
    child: Child,
    requests: Mutex<Producer>,
    /// Frames sent on `requests`, counted under its lock.
    sent: AtomicU64,
    replies: Mutex<Consumer>,
    book: RequestBook,
    /// Why the worker is gone, once the watcher saw it die.
    death: Arc<OnceLock<Error>>,
    /// What every worker's link in the session shares.
    session: Arc<ProcessSet>,
    /// Wakes the threads waiting on this worker.
    wakers: Arc<LinkWakers>,
    limits: Limits,
}

/// Whoever waits on one worker process: threads parked on its two rings (for room, for a
/// reply), and threads waiting for their reply while another thread reads the ring ("aside";
/// the reader wakes them whenever it delivers a reply and when it lets go of the ring).
pub(crate) struct LinkWakers {
    rings: [Waker; 2],
    aside: Sleepers,
}

impl LinkWakers {
    /// Wakes them all, to look at the session again (a worker died).
    pub fn wake_all(&self) {
        for ring in &self.rings {
            ring.wake();
        }
        self.aside.wake_all();
    }
}

/// The session's worker processes on this machine, as their links share them: the session's
/// state and its arena.
pub(crate) struct ProcessSet {
    /// Whether the session is stopping or broken (the first death of a worker), and its
    /// communicator.
    pub state: Arc<SessionState>,
    /// The session's arena, where worker 0 lends tensors for copies and CPU communicators
    /// keep their records.
    pub arena: Arc<Arena>,
}

impl ProcessSet {
    /// A new CPU communicator in the arena's area that the workers' current one does not use
    /// (`runtime.disco.cpu.init_ccl_in_arena` installs it by its area's number).
    pub fn new_ccl(
        &self,
        num_groups: usize,
        timeout: Option<Duration>,
        spin: SpinPolicy,
    ) -> Result<Arc<CpuCcl>> {
        let current = self
            .state
            .ccl
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let in_use = current.as_ref().and_then(|ccl| ccl.area());
        let area = in_use.map_or(0, |area| (area + 1) % CCL_AREAS);
        let area = self.arena.fresh_ccl_area(area)?;
        // SAFETY: the arena's areas were sized by `ccl_bytes`, and this one was zeroed just now.
        Ok(Arc::new(unsafe {
            CpuCcl::in_area(area, num_groups, timeout, spin)
        }))
    }
}

impl ProcessLink {
    /// What the controller tells this worker outside its queue.
    pub fn signals(&self) -> &Signals {
        self.session.arena.signals(self.local)
    }

    /// The worker's ring of events, in the arena.
    pub fn events(&self) -> &Ring {
        self.session.arena.events(self.local)
    }

    /// The worker's ring of its streams' instructions, in the arena.
    pub fn stream_events(&self) -> &Ring {
        self.session.arena.stream_events(self.local)
    }

    /// The worker's record of what it is doing, in the arena.
    pub fn activity(&self) -> &Activity {
        self.session.arena.activity(self.local)
    }

    /// What the links of this worker's session share.
    pub fn session(&self) -> &Arc<ProcessSet> {
        &self.session
    }

    pub fn new(
        worker: usize,
        local: usize,
        child: Child,
        requests: Producer,
        replies: Consumer,
        death: Arc<OnceLock<Error>>,
        session: Arc<ProcessSet>,
    ) -> ProcessLink {
        let pid = child.pid();
        let wakers = Arc::new(LinkWakers {
            rings: [requests.waker(), replies.waker()],
            aside: Sleepers::default(),
        });
        ProcessLink {
            wakers,
            worker,
            local,
            child,
            requests: Mutex::new(requests),
            sent: AtomicU64::new(0),
            replies: Mutex::new(replies),
            book: RequestBook::new(format!("worker {worker} (pid {pid})")),
            death,
            session,
            limits: Limits::default(),
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.pid()
    }

    pub fn child(&self) -> &Child {
        &self.child
    }

    /// Wakes the threads waiting on this worker's rings, so that they look at the session
    /// again (its death, or another worker's) at once.
    pub fn wakers(&self) -> Arc<LinkWakers> {
        self.wakers.clone()
    }

    /// Where the watcher records why the worker is gone.
    pub fn death(&self) -> Arc<OnceLock<Error>> {
        self.death.clone()
    }

    /// Fails with the `WorkerError` naming the worker, its pid and its cause once it died, and
    /// with that of the first worker of the session that died once one did.
    pub fn alive(&self) -> Result<()> {
        let death = self.death.get().or_else(|| {
            // Before the watcher saw it: the first to notice records it as the watcher would.
            let cause = self.child.try_exit()?;
            let error = cause.worker_error(self.worker, self.pid());
            Some(self.session.state.record_death(&self.death, error))
        });
        self.session.state.alive(self.worker, death)
    }

    /// What the controller knows of the worker: its record in the arena (which outlives it),
    /// and its death.
    pub fn observe(&self) -> WorkerStatus {
        let (worker, pid) = (self.worker, self.pid());
        let death = self.death.get().cloned().or_else(|| {
            let cause = self.child.try_exit()?;
            Some(
                self.session
                    .state
                    .record_death(&self.death, cause.worker_error(worker, pid))
                    .clone(),
            )
        });
        let verdict = death.map(|error| {
            let who = format!("worker {worker} (pid {pid}) ");
            let cause = error.message.strip_prefix(&who).unwrap_or(&error.message);
            Verdict::Dead(cause.to_string())
        });
        WorkerStatus {
            worker,
            node: 0,
            pid: u32::try_from(pid).ok(),
            in_process: false,
            report: self.activity().snapshot(),
            report_age: Duration::ZERO,
            verdict,
        }
    }

    /// Sends a frame encoded by [`encode_broadcast`], waiting for room as `spin`
    /// and `deadline` say.
    pub fn send_encoded(&self, frame: &[u8], spin: SpinPolicy, deadline: Deadline) -> Result<()> {
        self.alive()?;
        self.send_counted(|requests| requests.send(frame, spin, deadline, || self.alive()))
    }

    /// Sends one frame on the request ring with `send`, and counts it once sent.
    fn send_counted(&self, send: impl FnOnce(&mut Producer) -> Result<()>) -> Result<()> {
        let mut requests = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        send(&mut requests)?;
        self.count_sent();
        Ok(())
    }

    /// Counts a frame sent, under the lock of `requests` (so a plain store does).
    fn count_sent(&self) {
        let sent = self.sent.load(Ordering::Relaxed);
        self.sent.store(sent + 1, Ordering::Relaxed);
    }

    /// Whether a sync of this worker needs no message: it handled every frame this thread
    /// sent it (and any sent before), has nothing to wait for or report, lives, and no reply
    /// is still to come from it or to be reported here; now, or within a brief spin (a short
    /// call about to finish).
    pub fn in_sync(&self) -> bool {
        let now = || {
            let sent = self.sent.load(Ordering::Relaxed);
            (self.session.arena.in_sync(self.local, sent) && self.book.is_idle()).then_some(())
        };
        now().or_else(|| spin_briefly(now)).is_some()
    }

    /// Sends a frame of `len` bytes that `fill` writes straight into the ring, part by part
    /// (see [`Producer::send_from`]).
    pub fn send_from(
        &self,
        len: usize,
        spin: SpinPolicy,
        deadline: Deadline,
        fill: impl FnMut(&mut [u8]) -> Result<()>,
    ) -> Result<()> {
        self.alive()?;
        self.send_counted(|requests| requests.send_from(len, spin, deadline, || self.alive(), fill))
    }

    /// Tells the worker to leave its loop, whether or not the session is broken (a worker
    /// that is gone needs nothing).
    pub fn send_shutdown(&self, spin: SpinPolicy, deadline: Deadline) -> Result<()> {
        self.session.state.begin_stopping();
        let own_death = || match self.death.get() {
            Some(death) => Err(death.clone()),
            None => Ok(()),
        };
        if own_death().is_err() {
            return Ok(());
        }
        let frame = encode_broadcast(&Message::Shutdown, &[])?;
        self.send_counted(|requests| requests.send(&frame, spin, deadline, own_death))
    }

    /// Sends `message`: a request that waits for a reply registers how its reply completes it
    /// first.
    pub fn send(&self, message: Message, spin: SpinPolicy, deadline: Deadline) -> Result<()> {
        self.book
            .send(message, |frame, _| self.send_encoded(frame, spin, deadline))
    }

    /// Sends `message` if the ring has room now and nobody else is sending; gives it back
    /// otherwise (never waits).
    pub fn try_send(&self, message: Message) -> std::result::Result<(), Message> {
        if self.alive().is_err() {
            return Ok(()); // nothing to free on a worker that is gone
        }
        try_send(message, |frame| {
            let Ok(mut requests) = self.requests.try_lock() else {
                return false;
            };
            let now = SpinPolicy {
                budget: Duration::ZERO,
            };
            // A full ring ends the wait at its first check, before any park.
            let full = || Err(Error::runtime("the ring is full"));
            let sent = requests.send(frame, now, Deadline::NEVER, full).is_ok();
            if sent {
                self.count_sent();
            }
            sent
        })
    }

    /// Copies between `host` and the tensor in register `reg` on worker 0 in place, when the
    /// worker has it in the session's arena: the worker lends it (see [`crate::worker::arena`]), this
    /// thread copies and gives it back. Returns false, having copied nothing, for a tensor
    /// outside the arena (the caller sends the copy as a frame then). Errors name the copy as
    /// `name`.
    pub fn copy_in_place(
        &self,
        reg: u32,
        host: &HostTensor,
        name: &str,
        direction: CopyDirection,
        spin: SpinPolicy,
        deadline: Deadline,
    ) -> Result<bool> {
        let request = self.book.next_id();
        let reply: Reply<Option<ArenaTensor>> = Reply::new(Completion::new());
        let pending: Pending = {
            let (reply, session) = (reply.clone(), self.session.clone());
            let (worker, local) = (self.worker, self.local);
            Box::new(move |result: Result<Value>| {
                let lent = match result {
                    Ok(Value::Arena(place)) => Ok(Some(place)),
                    Ok(Value::Plain(Any::None)) => Ok(None),
                    Ok(other) => Err(Error::runtime(format!(
                        "worker {worker} answered a lend with {other:?}"
                    ))),
                    Err(error) => Err(error),
                };
                if reply.claim() {
                    reply.complete(lent);
                } else if let Ok(Some(_)) = lent {
                    // Its waiter gave up: the worker still waits for the tensor.
                    session.arena.give_back(local, request);
                }
                None
            })
        };
        let mut frame = Vec::new();
        Frame::<Any>::Lend { request, reg }.encode(&mut frame)?;
        self.book.send_request(&frame, request, pending, |frame| {
            self.send_encoded(frame, spin, deadline)
        })?;
        let what = direction.describe(name);
        let Some(place) = self.wait(&reply, spin, deadline, || what.clone())?? else {
            return Ok(false);
        };
        let copied = self.copy_lent(&place, host, direction);
        self.session.arena.give_back(self.local, request);
        copied
            .map(|()| true)
            .map_err(|cause| Error::new(cause.kind, format!("{what}: {}", cause.message)))
    }

    /// The copy itself, between `host` and the tensor worker 0 lent at `place`.
    fn copy_lent(
        &self,
        place: &ArenaTensor,
        host: &HostTensor,
        direction: CopyDirection,
    ) -> Result<()> {
        let bytes = self.session.arena.bytes_of(self.local, place)?;
        // SAFETY: the worker lent these bytes (checked to lie in its region) and touches them
        // again only once given back, after the copy; the view releases nothing.
        let lent = unsafe {
            Tensor::from_memory(
                &place.shape,
                place.dtype,
                DLDevice::cpu(),
                bytes,
                Box::new(|| {}),
            )
        };
        host.check_matches(&lent)?;
        let (from, to) = match direction {
            CopyDirection::ToWorker => (host.ptr().cast_const(), bytes.as_ptr()),
            CopyDirection::FromWorker => (bytes.as_ptr().cast_const(), host.ptr()),
        };
        // SAFETY: both hold `nbytes` (the shapes and dtypes match, both compact); the host's
        // memory is the caller's for the call, the arena's lent to this thread.
        unsafe { std::ptr::copy_nonoverlapping(from, to, host.nbytes()) };
        Ok(())
    }

    /// Waits for the reply to a request sent on this link, reading the reply ring while no
    /// other thread does. A deadline that passes abandons the request unless its reply is
    /// being delivered.
    pub fn wait<T>(
        &self,
        reply: &Reply<T>,
        spin: SpinPolicy,
        deadline: Deadline,
        what: impl Fn() -> String,
    ) -> Result<Result<T>> {
        let waited = self.wait_for(reply, spin, deadline, &what);
        if waited.is_ok() || reply.abandon() {
            return waited;
        }
        // A thread reading the ring claimed the reply: it is delivering it now (into memory
        // the caller owns, for a copy), so this returns only once that is done.
        drop(self.replies.lock().unwrap_or_else(PoisonError::into_inner));
        match reply.try_take() {
            Some(value) => Ok(self.book.report_carried(value)),
            None => waited,
        }
    }

    fn wait_for<T>(
        &self,
        reply: &Reply<T>,
        spin: SpinPolicy,
        deadline: Deadline,
        what: &impl Fn() -> String,
    ) -> Result<Result<T>> {
        loop {
            let Ok(mut replies) = self.replies.try_lock() else {
                // Another thread reads the ring: it completes this reply, or lets go of it.
                let woken = self.wakers.aside.wait(
                    spin,
                    deadline,
                    what,
                    || self.alive(),
                    || match reply.try_take() {
                        Some(value) => Some(Some(value)),
                        None => self.replies.try_lock().ok().map(|_| None),
                    },
                )?;
                if let Some(value) = woken {
                    return Ok(self.book.report_carried(value));
                }
                continue; // the ring is free to read
            };
            let read = self.read_until(&mut replies, reply, spin, deadline, what);
            drop(replies);
            self.wakers.aside.wake_all();
            return read;
        }
    }

    /// Reads replies and delivers them until `reply` has its own.
    fn read_until<T>(
        &self,
        replies: &mut Consumer,
        reply: &Reply<T>,
        spin: SpinPolicy,
        deadline: Deadline,
        what: &impl Fn() -> String,
    ) -> Result<Result<T>> {
        loop {
            if let Some(value) = reply.try_take() {
                return Ok(self.book.report_carried(value));
            }
            let frame = match replies.recv(spin, deadline, || self.alive()) {
                Ok(frame) => frame,
                Err(error) if error.kind == ErrorKind::Timeout => {
                    return Err(timed_out(what));
                }
                Err(error) => return Err(error),
            };
            let decoded = Frame::decode(&frame, &self.limits);
            drop(frame);
            self.book.deliver(decoded?)?;
            self.wakers.aside.wake_all();
        }
    }

    /// Receives the worker's next reply and hands its bytes, undecoded, to `take` (a node
    /// relaying them); fails once the worker is gone.
    pub fn recv_raw<R>(&self, spin: SpinPolicy, take: impl FnOnce(&[u8]) -> R) -> Result<R> {
        let mut replies = self.replies.lock().unwrap_or_else(PoisonError::into_inner);
        let frame = replies.recv(spin, Deadline::NEVER, || self.alive())?;
        Ok(take(&frame))
    }

    /// Waits for the worker to end after its `Shutdown`, killing it if it is still running at
    /// `deadline`.
    pub fn join(&self, deadline: Instant) -> Result<()> {
        let grace = deadline.saturating_duration_since(Instant::now());
        if self.child.wait_timeout(grace).is_some() {
            return Ok(());
        }
        self.child.terminate(Duration::ZERO);
        Err(Error::new(
            ErrorKind::Timeout,
            format!(
                "worker {} (pid {}) did not stop in time; it was killed",
                self.worker,
                self.pid()
            ),
        ))
    }
}

fn timed_out(what: &impl Fn() -> String) -> Error {
    Error::new(ErrorKind::Timeout, format!("{} timed out", what()))
}
