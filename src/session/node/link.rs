//! The controller's side of one node: a TCP connection that carries the frames of the node's
//! workers, a thread that reads it, and a link per worker for the session.
//!
//! The one idea: the reader thread is the only one that reads the connection. It delivers each
//! reply to the request of the worker it routes to (the waiting thread wakes on the reply's
//! completion, as with a worker thread), and when the node is lost (its connection closes, it
//! sends garbage, or nothing comes within the heartbeat interval) it breaks the session and fails
//! every request still waiting, so no wait outlives the node. It keeps the node's board too:
//! the last report of each worker, and when anything last came from the node, which the
//! status reads without asking the node.

use std::io::{BufReader, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpStream};
use std::sync::{Arc, OnceLock, PoisonError};
use std::time::Duration;

use super::board::{self, Entry};
use super::trace::{self as node_trace, Replies};
use crate::channel::Deadline;
use crate::channel::ring::MAX_GATHERED;
use crate::channel::{Sleepers, SpinPolicy};
use crate::net::routed::{self, ALL, HASH_SIZE, ReadError, What};
use crate::object::{Error, ErrorKind, Result};
use crate::session::requests::{RequestBook, try_send};
use crate::session::signal::Signal;
use crate::session::state::SessionState;
use crate::session::status::{Verdict, WorkerStatus, seconds};
use crate::session::trace::collect::{Clock, Collected};
use crate::sync::Mutex;
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::clock::coarse_ns;
use crate::sync::time::Instant;
use crate::wire::{Frame, Gathered, Limits};
use crate::worker::activity::Snapshot;
use crate::worker::message::{Message, Reply};

use super::BOARD_PERIOD;
use super::outbox::{DIRECT_FROM, MAX_BUFFERED, Outbox};

/// How long a node may go unheard before the status calls its workers lost: ten of the
/// periods at which it sends something (its board, or a heartbeat when nothing changed). Its
/// board's thread only reads memory and writes a few bytes, and the reader notes every byte
/// that comes, a long reply's too, so a node that is merely busy is heard from many times
/// within it; one silent that long is stopped, hung or cut off. Being lost so breaks nothing:
/// a node heard again reports again, and only silence for the heartbeat interval loses it for
/// good.
const SILENT_LOST: Duration = BOARD_PERIOD.saturating_mul(10);

/// A worker's last report from its node's board.
#[derive(Clone)]
struct Report {
    pid: u32,
    record: Snapshot,
    /// When it came, on the coarse clock.
    came_ns: u64,
}

/// One node of the session, as the controller reaches it.
///
/// Writes are buffered: a thread about to wait for a reply sends what was written at once, and
/// a flusher thread sends calls that nobody waits for as soon as it runs, many at a time when
/// they come faster than it. The connection counts the frames written to each worker
/// ([`Progress`]), so a sync with nothing written since one that found the worker with
/// everything run and nothing to report returns without a message.
pub(crate) struct NodeConnection {
    rank: usize,
    /// Its workers' ids: `first .. first + count`.
    first: usize,
    count: usize,
    peer: SocketAddr,
    /// The controller's end of the connection.
    local: SocketAddr,
    /// What goes to the node.
    outbox: Outbox,
    /// Each worker's requests, by its place on the node.
    books: Vec<RequestBook>,
    /// Each worker's frames, by its place on the node.
    progress: Vec<Progress>,
    /// Each worker's last report, by its place on the node.
    reports: Vec<Mutex<Option<Report>>>,
    /// When anything last came from the node, on the coarse clock.
    heard_ns: AtomicU64,
    /// Why the node is gone, once it is.
    death: OnceLock<Error>,
    /// Set once the reader thread left: the connection is closed.
    ended: AtomicBool,
    ended_sleepers: Sleepers,
    /// Set once `Shutdown` went to the node's workers.
    stopped: AtomicBool,
    /// Set when something was written that the flusher has not sent yet.
    unsent: AtomicBool,
    /// The flusher waits here.
    flusher: Sleepers,
    /// Whether the session is broken or stopping.
    state: Arc<SessionState>,
    /// The node's answers to the controller's trace requests.
    traces: Replies,
}

impl NodeConnection {
    /// The node of rank `rank` on `stream`, with workers `first .. first + count`; starts its
    /// reader, which gives up on a node silent for `heartbeat`.
    pub fn start(
        rank: usize,
        first: usize,
        count: usize,
        stream: TcpStream,
        heartbeat: Duration,
        state: Arc<SessionState>,
    ) -> Result<Arc<NodeConnection>> {
        let io = |e: std::io::Error| Error::runtime(format!("node {rank}'s connection: {e}"));
        let peer = stream.peer_addr().map_err(io)?;
        let local = stream.local_addr().map_err(io)?;
        stream.set_nodelay(true).map_err(io)?;
        stream.set_read_timeout(Some(heartbeat)).map_err(io)?;
        let reader = stream.try_clone().map_err(io)?;
        let connection = Arc::new(NodeConnection {
            rank,
            first,
            count,
            peer,
            local,
            outbox: Outbox::new(stream).map_err(io)?,
            books: (first..first + count)
                .map(|w| RequestBook::new(format!("worker {w} (node {rank})")))
                .collect(),
            progress: (0..count).map(|_| Progress::default()).collect(),
            reports: (0..count).map(|_| Mutex::new(None)).collect(),
            heard_ns: AtomicU64::new(coarse_ns()),
            death: OnceLock::new(),
            ended: AtomicBool::new(false),
            ended_sleepers: Sleepers::default(),
            stopped: AtomicBool::new(false),
            unsent: AtomicBool::new(false),
            flusher: Sleepers::default(),
            state,
            traces: Replies::default(),
        });
        let read = connection.clone();
        std::thread::Builder::new()
            .name(format!("discovm-node-{rank}"))
            .spawn(move || read.read(reader, heartbeat))
            .map_err(|e| Error::runtime(format!("cannot start node {rank}'s reader: {e}")))?;
        let flush = connection.clone();
        std::thread::Builder::new()
            .name(format!("discovm-flush-{rank}"))
            .spawn(move || flush.flush_until_ended())
            .map_err(|e| Error::runtime(format!("cannot start node {rank}'s flusher: {e}")))?;
        Ok(connection)
    }

    /// The flusher: sends what was written whenever there is something, until the connection
    /// ends.
    fn flush_until_ended(&self) {
        loop {
            // Spinning before it parks, as every waiter does: calls in a stream find it awake,
            // and need no wake-up each.
            let woken = self.flusher.wait(
                SpinPolicy::default(),
                Deadline::NEVER,
                || format!("node {}'s flusher", self.rank),
                || Ok(()),
                // A load: polling writes nothing to the line the writers set.
                || (self.unsent.load(Ordering::SeqCst) || self.ended()).then_some(()),
            );
            if woken.is_err() || self.ended() {
                return;
            }
            self.flush();
        }
    }

    /// Its workers' ids.
    pub fn workers(&self) -> std::ops::Range<usize> {
        self.first..self.first + self.count
    }

    /// Has the flusher send what was written and not sent yet, if anything.
    pub fn send_soon(&self) {
        if self.unsent.load(Ordering::SeqCst) {
            self.flusher.wake_all();
        }
    }

    /// The node's address as the controller reaches it, and the controller's address as the
    /// node reaches it: where the node's workers and the controller's own listen for each
    /// other (Gloo's pairs).
    pub fn addresses(&self) -> (IpAddr, IpAddr) {
        (self.peer.ip(), self.local.ip())
    }

    /// Who the node is, for messages: "node 1 (workers 2 and 3, at 10.0.0.2:40112)".
    fn describe(&self) -> String {
        let workers = match self.count {
            1 => format!("worker {}", self.first),
            2 => format!("workers {} and {}", self.first, self.first + 1),
            n => format!("workers {} to {}", self.first, self.first + n - 1),
        };
        format!("node {} ({workers}, at {})", self.rank, self.peer)
    }

    /// Reads the connection until it ends: replies go to their requests, boards to the
    /// workers' reports, heartbeats keep the node alive, and anything else ends it.
    fn read(&self, stream: TcpStream, heartbeat: Duration) {
        let limits = Limits::default();
        let mut input = BufReader::new(Heard {
            stream: &stream,
            at_ns: &self.heard_ns,
        });
        // One buffer for every message: a large reply's pages are touched once.
        let mut buffer = Vec::new();
        let lost = loop {
            match routed::read(&mut input, &limits, std::mem::take(&mut buffer)) {
                Ok(message) => match self.take(&message) {
                    Ok(()) => buffer = message.frame,
                    Err(error) => break error,
                },
                Err(ReadError::Closed) => {
                    break Error::new(
                        ErrorKind::Worker,
                        format!("{} is lost: its connection closed", self.describe()),
                    );
                }
                Err(ReadError::Silent) => {
                    break Error::new(
                        ErrorKind::Worker,
                        format!(
                            "{} is lost: nothing came from it for {} ms (its heartbeat \
                             interval)",
                            self.describe(),
                            heartbeat.as_millis()
                        ),
                    );
                }
                Err(ReadError::Bad(error)) => {
                    eprintln!(
                        "discovm: dropped node {} at {}: {}",
                        self.rank, self.peer, error.message
                    );
                    break Error::new(
                        ErrorKind::Worker,
                        format!("{} sent a bad message: {}", self.describe(), error.message),
                    );
                }
            }
        };
        self.lose(lost);
        let _ = stream.shutdown(Shutdown::Both);
        self.ended.store(true, Ordering::SeqCst);
        self.ended_sleepers.wake_all();
        self.flusher.wake_all();
    }

    /// Takes one message from the node.
    fn take(&self, message: &routed::Message) -> Result<()> {
        match message.what {
            What::Heartbeat => return Ok(()),
            What::Board => return self.post(&message.frame),
            What::Trace => return self.traces.take(&message.frame, self.count),
            _ => {}
        }
        let book = self.books.get(message.route as usize).ok_or_else(|| {
            Error::value(format!(
                "a message routed to worker {:#x} of a node of {} workers",
                message.route, self.count
            ))
        })?;
        let frame = Frame::decode(&message.frame, &Limits::default())?;
        match (message.what, frame) {
            (What::Death, Frame::Err { error, .. }) => Err(error),
            (What::Death, other) => Err(Error::value(format!(
                "a death notice with a {} frame, not an Err",
                other.kind().name()
            ))),
            (_, frame) => book.deliver(frame),
        }
    }

    /// Keeps the reports of the board `entries` as the workers' last, as of now.
    fn post(&self, entries: &[u8]) -> Result<()> {
        let came_ns = coarse_ns();
        for Entry { local, pid, report } in board::decode(entries)? {
            let last = self.reports.get(local as usize).ok_or_else(|| {
                Error::value(format!(
                    "a board's entry for worker {local} of a node of {} workers",
                    self.count
                ))
            })?;
            *last.lock().unwrap_or_else(PoisonError::into_inner) = Some(Report {
                pid,
                record: report,
                came_ns,
            });
        }
        Ok(())
    }

    /// Records that the node is gone with `error` and fails every request waiting on it; the
    /// session is broken with it, unless it was stopping.
    fn lose(&self, error: Error) {
        let error = self.state.record_death(&self.death, error).clone();
        for book in &self.books {
            book.fail_all(&error);
        }
    }

    /// Fails with why the node is gone (`SessionClosed` once the session stopped), or with why
    /// the session is broken.
    pub fn alive(&self, worker: usize) -> Result<()> {
        self.state.alive(worker, self.death.get())
    }

    /// Writes one routed frame (sent by the flusher, or by a thread about to wait).
    fn write(&self, route: u32, frame: &[u8]) -> Result<()> {
        self.append(route, |out| out.write_all(frame))
    }

    /// [`NodeConnection::write`] of a frame encoded for a stream: a large one goes at once,
    /// from the memory of its tensors, after what was written before it.
    fn write_gathered(&self, route: u32, frame: &Gathered) -> Result<()> {
        if frame.frame_len() < DIRECT_FROM {
            return self.append(route, |out| frame.write_to(out));
        }
        let placed = || self.count_written(route);
        self.outbox
            .send_then(placed, |out| {
                routed::write_head(out, route, What::Frame)?;
                frame.write_to(out)
            })
            .map_err(|e| self.io_error(e))
    }

    /// Appends one routed frame that `write` writes after the route; a writer that finds the
    /// buffer full sends it itself.
    fn append(
        &self,
        route: u32,
        write: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>,
    ) -> Result<()> {
        let mut pending = self.outbox.lock();
        self.append_locked(&mut pending, route, write)?;
        let full = pending.len() >= MAX_BUFFERED;
        drop(pending);
        if full {
            self.flush();
        }
        Ok(())
    }

    /// [`NodeConnection::append`] to the buffer, locked by the caller, without sending.
    fn append_locked(
        &self,
        pending: &mut Vec<u8>,
        route: u32,
        write: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>,
    ) -> Result<()> {
        let start = pending.len();
        if let Err(e) =
            routed::write_head(pending, route, What::Frame).and_then(|()| write(pending))
        {
            pending.truncate(start);
            return Err(self.io_error(e));
        }
        self.count_written(route);
        self.unsent.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Counts a frame on `route` as written, at its place in the order of sending.
    fn count_written(&self, route: u32) {
        match self.progress.get(route as usize) {
            Some(worker) => worker.count_written(),
            None => self.progress.iter().for_each(Progress::count_written), // ALL
        }
    }

    /// Sends what was written, now. A failure shows as the node's loss, which the reader
    /// reports.
    pub fn flush(&self) {
        self.unsent.store(false, Ordering::SeqCst);
        let _ = self.outbox.send();
    }

    /// Tells the node it is alive, after what was written.
    pub fn heartbeat(&self) {
        // Writing to memory cannot fail.
        let _ = routed::write(&mut *self.outbox.lock(), 0, What::Heartbeat, &[]);
        self.flush();
    }

    fn io_error(&self, e: std::io::Error) -> Error {
        match self.death.get() {
            Some(death) => death.clone(),
            None => Error::new(
                ErrorKind::Worker,
                format!("{} is lost: sending to it failed: {e}", self.describe()),
            ),
        }
    }

    /// Sends `signal` to the node for its worker at `route` (or every one), now. A failure
    /// shows as the node's loss, which the reader reports.
    pub fn signal(&self, route: u32, signal: &Signal) {
        // Writing to memory cannot fail.
        let _ = signal.write(&mut *self.outbox.lock(), route);
        self.flush();
    }

    /// The node's rank in the session.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Fails once the node is gone: lost, or its connection closed.
    fn connected(&self) -> Result<()> {
        match self.death.get() {
            Some(death) => Err(death.clone()),
            None if self.ended() => Err(Error::new(
                ErrorKind::Worker,
                format!("{} closed its connection", self.describe()),
            )),
            None => Ok(()),
        }
    }

    /// Sends the trace request `what` with `stamp` to the node, now.
    fn ask_trace(&self, what: u32, stamp: u64) -> Result<()> {
        self.connected()?;
        // Writing to memory cannot fail.
        let _ = routed::write_trace(&mut *self.outbox.lock(), what, 0, stamp, &[]);
        self.flush();
        Ok(())
    }

    /// Has the node collect its workers' events from now on.
    pub fn trace_start(&self) -> Result<()> {
        self.ask_trace(node_trace::START, 0)
    }

    /// Reads how the node's clock stands to this machine's, in round trips.
    ///
    /// Errors: the node's loss, or `TimeoutError` when a reading does not come back.
    pub fn clock(&self) -> Result<Clock> {
        self.traces.clock(
            |stamp| self.ask_trace(node_trace::CLOCK, stamp),
            || self.connected(),
        )
    }

    /// The node's workers' events, on the node's clock: those of its running trace, which
    /// stops, or with `dump` its workers' last ones.
    ///
    /// Errors: the node's loss, or `TimeoutError` when the node goes silent mid-way.
    pub fn trace_events(&self, dump: bool) -> Result<Collected> {
        let what = if dump {
            node_trace::DUMP
        } else {
            node_trace::STOP
        };
        self.traces
            .events(
                self.count,
                |request| self.ask_trace(what, request),
                || self.connected(),
            )
            .map_err(|e| e.context(format_args!("the trace of {}", self.describe())))
    }

    /// The last events of the node's workers that died, on the node's clock, and that clock
    /// as last read (see [`NodeConnection::clock`]).
    pub fn last_words(&self) -> (Collected, Option<Clock>) {
        self.traces.last_words()
    }

    /// Sends `module`, whose SHA-256 is `hash`, to the node, now.
    pub fn upload(&self, hash: &[u8; HASH_SIZE], module: &[u8]) -> Result<()> {
        self.outbox
            .send_then(|| (), |out| routed::write_upload(out, hash, module))
            .map_err(|e| self.io_error(e))
    }

    /// Sends `Shutdown` to every worker of the node, once.
    fn stop(&self) -> Result<()> {
        self.state.begin_stopping();
        if self.stopped.swap(true, Ordering::SeqCst) || self.death.get().is_some() {
            return Ok(());
        }
        let mut frame = Vec::new();
        Frame::<crate::object::Any>::Shutdown.encode(&mut frame)?;
        self.write(ALL, &frame)
    }

    /// Whether the reader left (the connection is closed).
    pub fn ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }
}

/// The node's end of the connection as its reader reads it: notes when bytes last came.
struct Heard<'a> {
    stream: &'a TcpStream,
    at_ns: &'a AtomicU64,
}

impl Read for Heard<'_> {
    fn read(&mut self, bytes: &mut [u8]) -> std::io::Result<usize> {
        let read = self.stream.read(bytes)?;
        if read > 0 {
            self.at_ns.store(coarse_ns(), Ordering::Relaxed);
        }
        Ok(read)
    }
}

/// The frames written to one worker of a node, and how far a sync found them run.
#[derive(Default)]
struct Progress {
    /// Frames written to the worker, counted under the lock of the connection's buffer, in
    /// the order they are sent.
    written: AtomicU64,
    /// A count of frames written that a successful sync showed run, the worker with nothing to
    /// report, when the sync's frame was the one after them; while it equals `written`,
    /// nothing has been written to the worker since. Zero until a sync succeeded (a sync's
    /// own frame counts, so one that succeeded leaves it at one or more).
    synced: AtomicU64,
}

impl Progress {
    fn count_written(&self) {
        self.written.fetch_add(1, Ordering::Relaxed);
    }
}

/// One worker on a node, as the controller reaches it.
pub(crate) struct NodeLink {
    worker: usize,
    /// Its place on the node.
    local: usize,
    node: Arc<NodeConnection>,
}

impl NodeLink {
    pub fn new(node: Arc<NodeConnection>, local: usize) -> NodeLink {
        NodeLink {
            worker: node.first + local,
            local,
            node,
        }
    }

    /// Tells the worker `signal` through its node.
    pub fn signal(&self, signal: &Signal) {
        self.node.signal(self.local as u32, signal);
    }

    fn book(&self) -> &RequestBook {
        &self.node.books[self.local]
    }

    fn progress(&self) -> &Progress {
        &self.node.progress[self.local]
    }

    /// Where a sync about to be sent stands: the frames written to the worker so far.
    pub fn sync_mark(&self) -> u64 {
        self.progress().written.load(Ordering::Relaxed)
    }

    /// Records that a sync sent after `mark` ([`NodeLink::sync_mark`]) succeeded: the worker
    /// ran everything written to it before the sync, and has nothing to report.
    pub fn synced_after(&self, mark: u64) {
        // Unless other frames came between the mark and the sync, the sync's is `mark + 1`.
        self.progress()
            .synced
            .fetch_max(mark + 1, Ordering::Relaxed);
    }

    /// Whether a sync of this worker needs no message: a sync found it with everything run and
    /// nothing to report, nothing was written to it since, and no reply is still to come from
    /// it or to be reported here. (A worker that dies meanwhile shows as the node's loss.)
    pub fn in_sync(&self) -> bool {
        let progress = self.progress();
        let synced = progress.synced.load(Ordering::Relaxed);
        synced != 0 && synced == progress.written.load(Ordering::Relaxed) && self.book().is_idle()
    }

    pub fn alive(&self) -> Result<()> {
        self.node.alive(self.worker)
    }

    /// What the controller knows of the worker: its node's last report of it, and whether the
    /// node is lost, gone or unheard for [`SILENT_LOST`] (its report stays, with its age).
    pub fn observe(&self) -> WorkerStatus {
        let node = &self.node;
        let now = coarse_ns();
        let since = |ns: u64| Duration::from_nanos(now.saturating_sub(ns));
        let last = node.reports[self.local]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let report_age = last.as_ref().map_or(Duration::ZERO, |r| since(r.came_ns));
        let silent = since(node.heard_ns.load(Ordering::Relaxed));
        let verdict = match node.death.get() {
            Some(death) => Some(Verdict::Lost(death.message.clone())),
            None if silent > SILENT_LOST => {
                let report = match &last {
                    Some(_) => format!(
                        "its last report of this worker is {} old",
                        seconds(report_age)
                    ),
                    None => "it never reported on this worker".to_string(),
                };
                Some(Verdict::Lost(format!(
                    "nothing heard from node {} for {} ({report})",
                    node.rank,
                    seconds(silent)
                )))
            }
            None => None,
        };
        WorkerStatus {
            worker: self.worker,
            node: node.rank,
            pid: last.as_ref().map(|r| r.pid),
            in_process: false,
            report: last.map(|r| r.record),
            report_age,
            verdict,
        }
    }

    /// The node this worker is on.
    pub fn node(&self) -> &Arc<NodeConnection> {
        &self.node
    }

    /// Checks that a frame of `len` bytes can go to this worker: it is alive, and the ring of
    /// a worker process carries the frame.
    fn can_send(&self, len: usize) -> Result<()> {
        self.alive()?;
        if len > MAX_GATHERED {
            return Err(Error::value(format!(
                "a frame of {len} bytes is longer than a ring to a worker carries \
                 ({MAX_GATHERED} bytes)"
            )));
        }
        Ok(())
    }

    /// Writes `frame` to `route` of the node.
    fn write(&self, route: u32, frame: &[u8]) -> Result<()> {
        self.can_send(frame.len())?;
        self.node.write(route, frame)
    }

    /// The route of a message to this worker, or with `whole_node` to every worker of the node
    /// at once (one message, fanned out there).
    fn route(&self, whole_node: bool) -> u32 {
        if whole_node { ALL } else { self.local as u32 }
    }

    /// Writes a frame encoded once for every targeted worker (see [`NodeLink::route`]).
    pub fn send_encoded(&self, frame: &[u8], whole_node: bool) -> Result<()> {
        self.write(self.route(whole_node), frame)
    }

    /// [`NodeLink::send_encoded`] of a frame encoded for a stream.
    pub fn send_gathered(&self, frame: &Gathered, whole_node: bool) -> Result<()> {
        self.can_send(frame.frame_len())?;
        self.node.write_gathered(self.route(whole_node), frame)
    }

    /// Writes `message` (sent at the next flush); a request registers how its reply completes
    /// it first.
    pub fn send(&self, message: Message) -> Result<()> {
        self.book().send(message, |frame, waits| {
            self.write(self.route(false), frame)?;
            // Its waiter will want the reply as soon as possible.
            if waits {
                self.node.flush();
            }
            Ok(())
        })
    }

    /// Writes `message` unless another thread is writing to the node; gives it back then.
    pub fn try_send(&self, message: Message) -> std::result::Result<(), Message> {
        if self.alive().is_err() {
            return Ok(()); // nothing to free on a node that is gone
        }
        try_send(message, |frame| {
            let Some(mut pending) = self.node.outbox.try_lock() else {
                return false;
            };
            // Sent with what comes next (or the next heartbeat).
            let route = self.route(false);
            self.node
                .append_locked(&mut pending, route, |out| out.write_all(frame))
                .is_ok()
        })
    }

    /// Tells every worker of the node to leave its loop (once for the node).
    pub fn stop(&self) -> Result<()> {
        self.node.stop()
    }

    /// Waits for the reply to a request sent on this link.
    pub fn wait<T>(
        &self,
        reply: &Reply<T>,
        spin: SpinPolicy,
        deadline: Deadline,
        what: impl Fn() -> String,
    ) -> Result<Result<T>> {
        let value = reply.wait(spin, deadline, what, || self.alive())?;
        Ok(self.book().report_carried(value))
    }

    /// Waits until the node closed its connection after its workers stopped, until `deadline`;
    /// then closes it.
    pub fn join(&self, deadline: Instant) -> Result<()> {
        let node = &self.node;
        let waited = node.ended_sleepers.wait(
            SpinPolicy::default(),
            Deadline::at(deadline),
            || format!("{} stopping", node.describe()),
            || Ok(()),
            || node.ended().then_some(()),
        );
        node.outbox.shut_down();
        waited.map_err(|_| {
            Error::new(
                ErrorKind::Timeout,
                format!(
                    "{} did not stop in time; its connection was closed",
                    node.describe()
                ),
            )
        })
    }
}
