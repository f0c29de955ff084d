//! How the controller reaches one worker: the seam between a session and its workers, whatever
//! they are (a thread of this process, a worker process, a worker on another node).
//!
//! The one idea: the controller speaks in [`Message`]s and [`Reply`]s whatever the worker is,
//! and each link carries them its own way. A thread link hands the typed message itself to the
//! worker's queue (nothing is encoded in-process); a process link encodes it once on the wire
//! and completes the replies it reads back; a node link writes the same encoding on its node's
//! connection, whose reader completes the replies.

// Model-checking builds have thread links alone.
#![cfg_attr(loom, allow(irrefutable_let_patterns))]

use std::sync::{Arc, PoisonError};

#[cfg(not(loom))]
use super::node::{NodeConnection, NodeLink};
#[cfg(not(loom))]
use super::process::ProcessLink;
use super::signal::Signal;
use super::status::{Verdict, WorkerStatus};
use crate::channel::Deadline;
#[cfg(not(loom))]
use crate::channel::deadline::STOP_GRACE;
use crate::channel::{Channel, SpinPolicy};
use crate::device::cpu::HostTensor;
use crate::object::{Error, ErrorKind, Result};
use crate::sync::Mutex;
use crate::sync::thread::{self, JoinHandle};
use crate::sync::time::Instant;
use crate::worker::WorkerShared;
use crate::worker::activity::Record;
use crate::worker::events::{LANES, Ring};
use crate::worker::message::{CopyDirection, Message, Reply};
use crate::worker::registers::Reg;

/// Queues `message()` for each of `targets` without waking them, after `frees`, registers
/// each target empties first (only a call takes them). Threads get the typed messages
/// themselves; worker processes get one encoding of the call with its frees, made once for all
/// of them, and nodes the same bytes: that encoding where it was made, else one for a stream
/// (large tensors written from their own memory); a node of several workers gets one message
/// for all of them when every one is targeted.
pub(super) fn push_to(
    links: &[WorkerLink],
    targets: std::ops::Range<usize>,
    message: impl Fn() -> Message,
    frees: &[Reg],
    spin: SpinPolicy,
    deadline: Deadline,
    alive: impl Fn(usize) -> Result<()>,
) -> Result<()> {
    #[cfg(not(loom))]
    let mut encoded = None;
    #[cfg(not(loom))]
    let mut gathered = None;
    #[cfg(not(loom))]
    let mut last_node: Option<&Arc<NodeConnection>> = None;
    #[cfg(not(loom))]
    let targeted = targets.clone();
    for worker in targets {
        match &links[worker] {
            WorkerLink::Thread(link) => {
                let push = |message| link.channel.push(message, spin, deadline, || alive(worker));
                frees.iter().try_for_each(|&reg| push(Message::Free(reg)))?;
                push(message())?
            }
            #[cfg(not(loom))]
            WorkerLink::Process(link) => {
                let frame = once(&mut encoded, || {
                    super::requests::encode_broadcast(&message(), frees)
                })?;
                link.send_encoded(frame, spin, deadline)?
            }
            #[cfg(not(loom))]
            WorkerLink::Node(link) => {
                // Every worker of a node of several targeted: its first takes the message for
                // all. (A node relays a message for one worker as it arrives, one for all once
                // it is whole.)
                let node_workers = link.node().workers();
                let whole = node_workers.len() > 1
                    && targeted.start <= node_workers.start
                    && node_workers.end <= targeted.end;
                if whole && last_node.is_some_and(|node| Arc::ptr_eq(node, link.node())) {
                    continue;
                }
                last_node = Some(link.node());
                // The same bytes as a stream's encoding: made for the worker processes already,
                // it serves the nodes too.
                match &encoded {
                    Some(frame) => link.send_encoded(frame, whole)?,
                    None => {
                        let frame = once(&mut gathered, || {
                            super::requests::gather_broadcast(&message(), frees)
                        })?;
                        link.send_gathered(frame, whole)?
                    }
                }
            }
        }
    }
    #[cfg(not(loom))]
    {
        if let Some(frame) = encoded {
            super::requests::recycle(frame);
        }
        if let Some(frame) = gathered {
            super::requests::recycle_gathered(frame);
        }
    }
    Ok(())
}

/// What `make` makes, made the first time it is asked for.
#[cfg(not(loom))]
fn once<T>(made: &mut Option<T>, make: impl FnOnce() -> Result<T>) -> Result<&T> {
    if made.is_none() {
        *made = Some(make()?);
    }
    Ok(made.as_ref().expect("made above"))
}

/// A worker thread of this process.
pub(super) struct ThreadLink {
    pub shared: Arc<WorkerShared>,
    pub channel: Arc<Channel<Message>>,
    pub thread: Mutex<Option<JoinHandle<()>>>,
}

/// One worker, as the controller reaches it.
pub(super) enum WorkerLink {
    Thread(ThreadLink),
    #[cfg(not(loom))]
    Process(Box<ProcessLink>),
    #[cfg(not(loom))]
    Node(Box<NodeLink>),
}

impl WorkerLink {
    /// Fails with `SessionClosed` once a worker thread has left its loop, and with the
    /// `WorkerError` naming its pid and cause once a worker process died.
    pub fn alive(&self, worker: usize) -> Result<()> {
        match self {
            WorkerLink::Thread(link) => {
                if link.shared.exited.is_set() {
                    return Err(Error::new(
                        ErrorKind::SessionClosed,
                        format!("worker {worker} has exited"),
                    ));
                }
                Ok(())
            }
            #[cfg(not(loom))]
            WorkerLink::Process(link) => link.alive(),
            #[cfg(not(loom))]
            WorkerLink::Node(link) => link.alive(),
        }
    }

    /// The worker thread's record of its activity, for a communicator between threads to read.
    pub fn thread_record(&self) -> Option<Record> {
        match self {
            WorkerLink::Thread(link) => Some(Record::Thread(link.shared.clone())),
            #[cfg(not(loom))]
            _ => None,
        }
    }

    /// The worker's ring of events, where this process can read it (see [`WorkerLink::rings`]).
    pub fn events(&self) -> Option<&Ring> {
        self.rings()[0]
    }

    /// The worker's rings, where this process can read them: its events', then its streams'
    /// instructions' (a worker thread's, or a worker process's in the arena, after its death
    /// too); none for a worker on another node.
    pub fn rings(&self) -> [Option<&Ring>; LANES] {
        match self {
            WorkerLink::Thread(link) => {
                [Some(&link.shared.events), Some(&link.shared.stream_events)]
            }
            #[cfg(not(loom))]
            WorkerLink::Process(link) => [Some(link.events()), Some(link.stream_events())],
            #[cfg(not(loom))]
            WorkerLink::Node(_) => [None, None],
        }
    }

    /// What the controller knows of the worker now, without asking it: its record on the
    /// board, and whether it is dead or lost.
    pub fn observe(&self, worker: usize) -> WorkerStatus {
        match self {
            WorkerLink::Thread(link) => WorkerStatus {
                worker,
                node: 0,
                pid: Some(std::process::id()),
                in_process: true,
                report: link.shared.activity.snapshot(),
                report_age: std::time::Duration::ZERO,
                verdict: link
                    .shared
                    .exited
                    .is_set()
                    .then(|| Verdict::Dead("its thread has left its loop".to_string())),
            },
            #[cfg(not(loom))]
            WorkerLink::Process(link) => link.observe(),
            #[cfg(not(loom))]
            WorkerLink::Node(link) => link.observe(),
        }
    }

    /// Whether a sync of this worker needs no message: a worker process that handled
    /// everything sent to it and has nothing to report ([`ProcessLink::in_sync`]), or a worker
    /// on another node that the last sync found so, with nothing sent to it since
    /// ([`NodeLink::in_sync`]).
    pub fn in_sync(&self) -> bool {
        match self {
            WorkerLink::Thread(_) => false,
            #[cfg(not(loom))]
            WorkerLink::Process(link) => link.in_sync(),
            #[cfg(not(loom))]
            WorkerLink::Node(link) => link.in_sync(),
        }
    }

    /// Where a sync about to be sent stands, for a worker that remembers what its syncs found
    /// (one on another node); pass it to [`WorkerLink::synced_after`] once the sync succeeded.
    pub fn sync_mark(&self) -> Option<u64> {
        match self {
            #[cfg(not(loom))]
            WorkerLink::Node(link) => Some(link.sync_mark()),
            _ => None,
        }
    }

    /// Records that a sync sent after `mark` ([`WorkerLink::sync_mark`]) succeeded.
    pub fn synced_after(&self, mark: u64) {
        match self {
            #[cfg(not(loom))]
            WorkerLink::Node(link) => link.synced_after(mark),
            _ => {}
        }
    }

    /// Queues `message` without waking the worker; a full queue waits for room as `spin`,
    /// `deadline` and `check` say.
    pub fn push(
        &self,
        message: Message,
        spin: SpinPolicy,
        deadline: Deadline,
        check: impl FnMut() -> Result<()>,
    ) -> Result<()> {
        match self {
            WorkerLink::Thread(link) => link.channel.push(message, spin, deadline, check),
            #[cfg(not(loom))]
            WorkerLink::Process(link) => {
                drop(check); // the link checks its worker itself
                link.send(message, spin, deadline)
            }
            #[cfg(not(loom))]
            WorkerLink::Node(link) => {
                drop(check);
                link.send(message)
            }
        }
    }

    /// Tells the worker to stop after the work already queued, waiting for room as `spin` and
    /// `deadline` say; a worker that is gone needs nothing.
    pub fn stop(&self, worker: usize, spin: SpinPolicy, deadline: Deadline) -> Result<()> {
        match self {
            WorkerLink::Thread(link) => link
                .channel
                .push(Message::Shutdown, spin, deadline, || self.alive(worker))
                .or_else(|e| {
                    if self.alive(worker).is_err() {
                        Ok(())
                    } else {
                        Err(e)
                    }
                }),
            #[cfg(not(loom))]
            WorkerLink::Process(link) => link.send_shutdown(spin, deadline),
            #[cfg(not(loom))]
            WorkerLink::Node(link) => link.stop(),
        }
    }

    /// Queues `message` if there is room now; gives it back otherwise.
    pub fn try_push(&self, message: Message) -> std::result::Result<(), Message> {
        match self {
            WorkerLink::Thread(link) => link.channel.try_push(message),
            #[cfg(not(loom))]
            WorkerLink::Process(link) => link.try_send(message),
            #[cfg(not(loom))]
            WorkerLink::Node(link) => link.try_send(message),
        }
    }

    /// Wakes the worker if it sleeps; the caller issued `fence(SeqCst)` after its pushes.
    pub fn wake_fenced(&self) {
        match self {
            WorkerLink::Thread(link) => link.channel.wake_fenced(),
            #[cfg(not(loom))]
            // A frame wakes a sleeping worker when it is sent.
            WorkerLink::Process(_) => {}
            #[cfg(not(loom))]
            // What was written to the node goes as soon as its flusher runs.
            WorkerLink::Node(link) => link.node().send_soon(),
        }
    }

    /// Copies between `host` and the tensor in `reg` in place, if the worker can lend it (a
    /// worker process, for a tensor in the session's arena); false, having done nothing,
    /// otherwise: the copy then goes as a message. Errors name the copy as `name`.
    pub fn copy_in_place(
        &self,
        reg: Reg,
        host: &HostTensor,
        name: &str,
        direction: CopyDirection,
        spin: SpinPolicy,
        deadline: Deadline,
    ) -> Result<bool> {
        match self {
            // A worker thread copies through the caller's pointers, in its own order.
            WorkerLink::Thread(_) => Ok(false),
            #[cfg(not(loom))]
            WorkerLink::Process(link) => {
                link.copy_in_place(reg, host, name, direction, spin, deadline)
            }
            // A worker on another node shares no memory with the controller.
            #[cfg(not(loom))]
            WorkerLink::Node(_) => Ok(false),
        }
    }

    /// Waits for the worker's answer to a request sent on this link.
    pub fn wait<T>(
        &self,
        reply: &Reply<T>,
        spin: SpinPolicy,
        deadline: Deadline,
        what: impl Fn() -> String,
        check: impl FnMut() -> Result<()>,
    ) -> Result<T> {
        match self {
            WorkerLink::Thread(_) => reply.wait(spin, deadline, what, check)?,
            #[cfg(not(loom))]
            WorkerLink::Process(link) => link.wait(reply, spin, deadline, what)?,
            #[cfg(not(loom))]
            WorkerLink::Node(link) => link.wait(reply, spin, deadline, what)?,
        }
    }

    /// What the links of a session of worker processes share; None for worker threads.
    #[cfg(not(loom))]
    pub fn process_session(&self) -> Option<&Arc<super::process::ProcessSet>> {
        match self {
            WorkerLink::Thread(_) => None,
            WorkerLink::Process(link) => Some(link.session()),
            WorkerLink::Node(_) => None,
        }
    }

    /// Tells a worker that the session is stopping (a worker waiting on its GPU or on a Gloo
    /// peer gives up).
    pub fn mark_stopping(&self) {
        self.signal(&Signal::Stopping);
    }

    /// Tells a worker that `init_ccl` sends new communicators (a worker stuck on its old ones
    /// gives them up).
    pub fn note_new_ccl(&self) {
        self.signal(&Signal::NewCommunicators);
    }

    /// Tells the worker `signal` outside its queue: in its signals, or through its node.
    pub fn signal(&self, signal: &Signal) {
        match self {
            WorkerLink::Thread(link) => signal.apply(&link.shared.signals),
            #[cfg(not(loom))]
            WorkerLink::Process(link) => signal.apply(link.signals()),
            #[cfg(not(loom))]
            WorkerLink::Node(link) => link.signal(signal),
        }
    }

    /// Waits for the worker to end after its `Shutdown`, until `deadline`; a worker process
    /// still running then is killed. `me` is the worker the calling thread is, if any (a
    /// worker dropping its own session cannot wait for itself).
    pub fn join(&self, worker: usize, deadline: Deadline, me: Option<usize>) -> Result<()> {
        let started = Instant::now();
        match self {
            WorkerLink::Thread(link) => {
                let Some(handle) = link
                    .thread
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take()
                else {
                    return Ok(());
                };
                if me == Some(worker) && thread::current().id() == handle.thread().id() {
                    return Ok(()); // it exits when it returns to its loop
                }
                if !deadline.is_never() {
                    // A worker that does not stop in time is left running, its thread detached.
                    link.shared
                        .exited
                        .wait(deadline, || format!("worker {worker} stopping"))
                        .map_err(|_| {
                            Error::new(
                                ErrorKind::Timeout,
                                format!(
                                    "worker {worker} did not stop in time; its thread is left \
                                     running"
                                ),
                            )
                        })?;
                }
                let _ = handle.join();
                Ok(())
            }
            #[cfg(not(loom))]
            WorkerLink::Process(link) => link.join(deadline.or_at(started + STOP_GRACE)),
            #[cfg(not(loom))]
            WorkerLink::Node(link) => link.join(deadline.or_at(started + STOP_GRACE)),
        }
    }
}
