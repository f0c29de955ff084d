//! The watch over a worker's NCCL waits (PyTorch's NCCL watchdog): NCCL's kernels wait on the
//! GPU, without end, for a peer that never comes, so every wait of a worker with NCCL
//! communicators polls, and between polls checks them ([`CommsCheck`]): their asynchronous
//! errors, the session's shutdown, a later `init_ccl`, and the peers of the last collective the
//! worker queued.
//!
//! The one idea: a peer that finished a call having queued fewer collectives on a communicator
//! than this worker (or another collective in the same place) will never queue its side, so
//! the worker judges from its peers' records (on one machine) or reads the controller's ruling
//! (across machines), aborts its communicators, and fails the wait at once.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use super::Comms;
use crate::ccl::Awaited;
use crate::ccl::backend;
use crate::ccl::collective::Collective;
use crate::device::nccl::Interrupts;
use crate::device::poll;
use crate::object::{Error, ErrorKind, Result};
use crate::sync::atomic::Ordering;
use crate::sync::clock::now_ns;
use crate::vm::Stream;
use crate::worker::activity::{Comm as Joined, Record};
use crate::worker::{self, Signals, WorkerInfo, WorkerShared, on_gpu};

/// How a worker's error ends when its NCCL communicators were aborted because they failed or a
/// peer passed their collective: the session, which gets the error from every kind of worker
/// in order with the failure, finds these words in a sync's error and makes the communicators
/// again before its next call ([`aborted_in`]).
const REMADE: &str = ", and are made again before the session's next call";

/// Whether `error`, a sync's, says that a worker's NCCL communicators were aborted and are to
/// be made again.
pub(crate) fn aborted_in(error: &Error) -> bool {
    error.message.contains(REMADE)
}

/// A collective a worker queued in a call that went to every worker: a peer that finished that
/// call having queued fewer on the collective's communicator never queues its side there.
#[derive(Clone, Debug)]
pub(super) struct Queued {
    what: Collective,
    /// The call it was queued in, and that call's function.
    call: u64,
    function: Option<String>,
    /// On the worker's group's communicator, or on the session's.
    grouped: bool,
    /// How many the worker queued on that communicator since it was made, this one included.
    count: u64,
    /// The bytes its members must agree on (see `Joins::size`).
    size: u64,
}

impl Comms {
    /// Notes in the worker's record that it queued `what` on its group's communicator
    /// (`grouped`) or on the session's, and keeps it as the collective its waits watch when its
    /// call went to every worker (transfers, between two workers, are not counted; one queued
    /// in a call to this worker alone leaves the last of a call to every worker watched: it
    /// cannot finish before that one).
    pub(super) fn queued(&self, what: Collective, grouped: bool, size: u64) {
        let count = self
            .shared
            .activity
            .joined_one(on(grouped), what.code(), size);
        if let Some((call, function)) = worker::activity::own_broadcast_call() {
            *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some(Queued {
                what,
                call,
                function,
                grouped,
                count,
                size,
            });
        }
    }

    /// The failure of the last collective the worker queued when a worker of its team finished
    /// that collective's call having queued fewer on the team's communicator (it will never
    /// queue its side of it, and NCCL would wait for it for ever), or queued another collective
    /// in its place. The worker judges so from its peers' records on one machine; across
    /// machines the controller does, and rules.
    fn passed(&self) -> Option<Error> {
        let last = self
            .last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()?;
        passed_peer(&last, &self.info, &self.peers).or_else(|| ruled(&last, &self.shared.signals))
    }

    /// See [`CommsCheck::check`]; `generation` is the worker's `ccl_generation` when the wait
    /// began. `ask_nccl`: whether to ask NCCL for the communicators' asynchronous errors too
    /// (not in a wait for NCCL's own call, which asks it itself).
    fn check(&self, generation: u64, ask_nccl: bool) -> Result<()> {
        if self.aborted.get().is_some() {
            return Ok(()); // NCCL's kernels were stopped: the rest of the work finishes
        }
        let failed = [(false, "the session's"), (true, "its group's")]
            .into_iter()
            .filter(|&(grouped, _)| ask_nccl && (!grouped || self.group.is_some()))
            .find_map(|(grouped, which)| {
                let (comm, rank) = self.team(grouped);
                let cause = comm.async_error().err()?;
                Some(format!(
                    "{which} NCCL communicator (rank {rank} of {}) failed: {}",
                    comm.size(),
                    cause.message
                ))
            });
        let gave_up = |why: &str| {
            format!(
                "worker {} gave up waiting for its NCCL work: {why}",
                self.info.id
            )
        };
        // A peer that finished the call without queueing its side fails the wait as on the
        // CPU backend, in the same words.
        // `remade`: the session is to make them again (not so when it stops, or when a later
        // `init_ccl` makes them).
        let (kind, why, said, remade) = match failed {
            Some(why) => (ErrorKind::Runtime, gave_up(&why), why, true),
            None => match interrupted(&self.shared, generation) {
                Err(cause) => (cause.kind, gave_up(&cause.message), cause.message, false),
                Ok(()) => match self.passed() {
                    Some(error) => (error.kind, error.message.clone(), error.message, true),
                    None => return Ok(()),
                },
            },
        };
        // NCCL's kernels stop, so nothing of them keeps the GPU (or the worker) waiting. The
        // group's communicator was split from the session's: it goes first. Those unfinished
        // never ran, and are not recorded as run.
        on_gpu::abandon();
        if let Some(group) = &self.group {
            group.abort();
        }
        self.world.abort();
        let ending = if remade { REMADE } else { "" };
        let error = Error::new(
            kind,
            format!("{why}; its NCCL communicators were aborted{ending}"),
        );
        let _ = self.aborted.set(said);
        Err(error)
    }
}

/// The communicator whose count a collective on the group's (`grouped`) or the session's NCCL
/// communicator adds to in the worker's record.
fn on(grouped: bool) -> Joined {
    if grouped {
        Joined::Group
    } else {
        Joined::Session
    }
}

/// The failure of `last`, a collective worker `info` queued, when a worker of its team (in
/// `peers`, the records by id) finished its call having queued fewer collectives on the team's
/// communicator (the message is the CPU backend's for a worker that finished the call without
/// joining), or queued another collective in its place (NCCL would pair the two).
fn passed_peer(last: &Queued, info: &WorkerInfo, peers: &[Record]) -> Option<Error> {
    if peers.len() != info.num_workers {
        return None;
    }
    let team = match last.grouped {
        true => info.group_members(),
        false => 0..info.num_workers,
    };
    let awaited = Awaited {
        what: last.what,
        call: last.call,
        function: last.function.as_deref(),
        worker: info.id,
        on: on(last.grouped),
        count: last.count,
        size: last.size,
        by_order: true,
    };
    team.filter(|&peer| peer != info.id).find_map(|peer| {
        let record = &peers[peer];
        // What it queued by the end of the call, unless it queued more in a later call (whose
        // collectives NCCL may pair with this one: not judged here); then the call's failure,
        // which its end follows.
        let joins = record.joins()?;
        let failure = record.passed(last.call).flatten();
        awaited.hopeless(peer, &joins, failure.as_deref())
    })
}

/// The failure of `last`, a collective the worker queued, when the controller ruled that it
/// will never complete (a session across machines: see `session::referee`); its words are the
/// ruling's.
fn ruled(last: &Queued, signals: &Signals) -> Option<Error> {
    signals.ruling.on(last.call).map(Error::runtime)
}

/// The records of the workers of a session of worker threads, on their way to their
/// `init_ccl_per_worker`, by the number `init_ccl` passes them.
static STAGED_PEERS: Mutex<Option<HashMap<i64, Vec<Record>>>> = Mutex::new(None);

/// Makes `records` (the session's worker threads', by id) available to the NCCL init under the
/// number returned (0 when there are none: worker processes find theirs in their arena).
pub(crate) fn stage_peers(records: Vec<Record>) -> i64 {
    static NEXT: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(1);
    if records.is_empty() {
        return 0;
    }
    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    STAGED_PEERS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_or_insert_with(HashMap::new)
        .insert(id, records);
    id
}

/// The records staged under `id` (none if nothing is).
fn staged_peers(id: i64) -> Vec<Record> {
    STAGED_PEERS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .and_then(|staged| staged.get(&id).cloned())
        .unwrap_or_default()
}

/// Forgets the records staged under `id` (the workers keep theirs).
pub(crate) fn unstage_peers(id: i64) {
    if let Some(staged) = STAGED_PEERS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_mut()
    {
        staged.remove(&id);
    }
}

/// The records of the session's workers, by id, for this worker: those staged under `stage`
/// (worker threads), or those of its arena (worker processes of one machine); none on a
/// session across machines.
pub(super) fn peer_records(stage: i64, num_workers: usize) -> Vec<Record> {
    let records = if stage != 0 {
        staged_peers(stage)
    } else {
        #[cfg(not(loom))]
        let records = crate::worker::arena::records().unwrap_or_default();
        #[cfg(loom)]
        let records = Vec::new();
        records
    };
    if records.len() == num_workers {
        records
    } else {
        Vec::new()
    }
}

/// Why a wait of the worker that began when its `ccl_generation` was `generation` must end:
/// the session is shutting down (`SessionClosed`), or `init_ccl` was called since (it sends the
/// worker new communicators, and a worker stuck in the wait would never get to them).
fn interrupted(shared: &WorkerShared, generation: u64) -> Result<()> {
    if shared.signals.stopping.load(Ordering::SeqCst) {
        return Err(Error::new(
            ErrorKind::SessionClosed,
            "the session was shut down",
        ));
    }
    if shared.signals.ccl_generation.load(Ordering::SeqCst) != generation {
        return Err(Error::runtime("init_ccl was called again"));
    }
    Ok(())
}

/// The interrupts of a worker's NCCL communicators: every wait on them (joining, a call NCCL
/// is still at, finalizing) ends at the session's shutdown or when `init_ccl` is called after
/// it began. Once the worker holds them, it also ends when a peer passed the collective being
/// queued, as a wait for its GPU does (see [`CommsCheck::check`]; the asynchronous errors are
/// the call's own to ask): a collective NCCL is still queueing (connecting its ranks) waits for
/// the same peers as its kernel.
pub(super) struct WorkerInterrupts {
    shared: Arc<WorkerShared>,
    /// The communicators, once made.
    comms: OnceLock<Weak<Comms>>,
}

impl WorkerInterrupts {
    pub(super) fn new(shared: Arc<WorkerShared>) -> WorkerInterrupts {
        WorkerInterrupts {
            shared,
            comms: OnceLock::new(),
        }
    }

    /// Watches `comms`, made with these interrupts, from now on.
    pub(super) fn made(&self, comms: &Arc<Comms>) {
        let _ = self.comms.set(Arc::downgrade(comms));
    }
}

impl Interrupts for WorkerInterrupts {
    /// The worker's `ccl_generation`.
    fn mark(&self) -> u64 {
        self.shared.signals.ccl_generation.load(Ordering::SeqCst)
    }

    fn check(&self, generation: u64) -> Result<()> {
        match self.comms.get().and_then(Weak::upgrade) {
            Some(comms) => comms.check(generation, false),
            None => interrupted(&self.shared, generation),
        }
    }
}

/// What a device wait of a worker with NCCL communicators checks between polls (PyTorch's
/// NCCL watchdog): NCCL's kernels wait on the GPU, forever, for a peer that never joins their
/// collective, passed another shape, or failed, and a wait in the driver would hold the worker
/// with them. Made when a wait begins.
pub(crate) struct CommsCheck {
    comms: Arc<Comms>,
    /// The worker's `ccl_generation` when the wait began.
    generation: u64,
    /// When the wait began.
    began_ns: u64,
}

/// How long a wait lasts, in ns, before its checks also record the collectives its GPU passed
/// (see [`CommsCheck::check`]).
const RECORDS_AFTER_NS: u64 = 1_000_000;

/// Makes every wait of the calling worker thread for its GPU (a small read, from one of its
/// functions, of a tensor a collective last wrote, as well as its syncs) watched while the
/// worker has NCCL communicators (see `device::poll::watch_this_thread`).
pub(super) fn check_worker_thread_waits() {
    poll::watch_this_thread(Rc::new(|| {
        comms_check().map(|watch| Box::new(move || watch.check()) as poll::Check)
    }));
}

/// The check of the NCCL communicators of the worker running on this thread, for a wait that
/// begins now; `None` when it has none (its waits block in the driver).
pub(crate) fn comms_check() -> Option<CommsCheck> {
    backend::held::<Arc<Comms>>().map(CommsCheck::new)
}

impl CommsCheck {
    pub(super) fn new(comms: Arc<Comms>) -> CommsCheck {
        let generation = comms.shared.signals.ccl_generation.load(Ordering::SeqCst);
        CommsCheck {
            comms,
            generation,
            began_ns: now_ns(),
        }
    }

    /// Fails when a communicator of the worker failed asynchronously (`ncclCommGetAsyncError`;
    /// the error names the communicator and gives NCCL's text), the session is shutting down
    /// (`SessionClosed`), `init_ccl` was called since the wait began (it sends the worker
    /// new communicators, and a worker stuck here would never get to them), or a worker of the
    /// team of the last collective this worker queued, in a call that went to every worker,
    /// finished that call having queued fewer collectives on the team's communicator (its
    /// function failed first, or returned: its side never comes; the error is the CPU
    /// backend's for a worker that finished the call without joining) or queued another
    /// collective in its place (see [`Comms::passed`]); each first aborts
    /// the worker's communicators (`ncclCommAbort`), which stops their kernels, and later
    /// collectives fail at once until new ones are made: by the session before its next call
    /// when a failure or a peer aborted them (the error says so, see [`aborted_in`]), by
    /// `init_ccl` otherwise. Once they were aborted there
    /// is nothing left to watch: the check passes, and a wait goes on for the work that is not
    /// NCCL's (which cannot wait for another worker).
    ///
    /// A wait longer than a millisecond also records, at each check, the collectives the GPU
    /// passed meanwhile (`worker::on_gpu`): a dump of the flight recorder taken while the wait
    /// hangs then shows which ones the GPU finished.
    pub(crate) fn check(&self) -> Result<()> {
        if now_ns().saturating_sub(self.began_ns) >= RECORDS_AFTER_NS {
            on_gpu::record_passed();
        }
        self.comms.check(self.generation, true)
    }

    /// Waits for everything queued on `stream`, polling the device and checking between polls.
    pub(crate) fn sync(&self, stream: &Stream) -> Result<()> {
        stream.sync_checked(Some(&mut || self.check()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{DLDevice, KDL_CUDA};
    use crate::ccl::nccl::INIT;
    use crate::sync::atomic::AtomicU64;
    use crate::worker::events::Ring;
    use crate::worker::{Exited, Placed};

    /// Records of `n` workers that ran nothing yet, as a wait reads them.
    fn records(n: usize) -> Vec<Record> {
        (0..n)
            .map(|_| Record::Mapped(Box::leak(Box::default())))
            .collect()
    }

    fn worker(id: usize, num_workers: usize, num_groups: usize) -> WorkerInfo {
        WorkerInfo {
            id,
            num_workers,
            num_groups,
            device: DLDevice {
                device_type: KDL_CUDA,
                device_id: id as i32,
            },
        }
    }

    /// Worker 0's first allreduce in call 7, of `f`, on the session's communicator.
    fn first_allreduce() -> Queued {
        Queued {
            what: Collective::Allreduce,
            call: 7,
            function: Some("f".into()),
            grouped: false,
            count: 1,
            size: 1024,
        }
    }

    #[test]
    fn a_peer_that_finished_the_call_without_queueing_its_side_fails_the_wait() {
        let peers = records(2);
        let last = first_allreduce();
        assert!(passed_peer(&last, &worker(0, 2, 1), &peers).is_none());
        peers[1].begin_call(7, true, Some("f"));
        assert!(
            passed_peer(&last, &worker(0, 2, 1), &peers).is_none(),
            "it runs the call"
        );
        peers[1].end_call(Some("`f` failed: ValueError: boom"));
        let error = passed_peer(&last, &worker(0, 2, 1), &peers).expect("it passed");
        assert_eq!(
            (error.kind, error.message.as_str()),
            (
                ErrorKind::Runtime,
                "allreduce in call 7 (`f`) on worker 0: worker 1 finished call 7 without joining \
                 it: `f` failed: ValueError: boom"
            )
        );
        assert!(
            passed_peer(&last, &worker(0, 2, 1), &peers[..1]).is_none(),
            "without every worker's record (across machines) nothing is judged"
        );
    }

    #[test]
    fn a_peer_that_queued_another_collective_in_its_place_fails_the_wait() {
        let peers = records(2);
        let last = first_allreduce();
        peers[1].begin_call(7, true, Some("f"));
        peers[1].joined_one(Joined::Session, Collective::Allgather.code(), 0);
        let error = passed_peer(&last, &worker(0, 2, 1), &peers).expect("crossed");
        assert_eq!(
            (error.kind, error.message.as_str()),
            (
                ErrorKind::Value,
                "allreduce in call 7 (`f`) on worker 0: worker 1 joined allgather in its place: \
                 the workers disagree on which collective comes next"
            )
        );
        // Finished, too.
        peers[1].end_call(None);
        assert!(passed_peer(&last, &worker(0, 2, 1), &peers).is_some());
        // The same collective in its place is its side, unless its size differs.
        let same = records(2);
        same[1].begin_call(7, true, Some("f"));
        same[1].joined_one(Joined::Session, Collective::Allreduce.code(), 1024);
        assert!(passed_peer(&last, &worker(0, 2, 1), &same).is_none());
        let smaller = records(2);
        smaller[1].begin_call(7, true, Some("f"));
        smaller[1].joined_one(Joined::Session, Collective::Allreduce.code(), 512);
        let error = passed_peer(&last, &worker(0, 2, 1), &smaller).expect("another size");
        assert_eq!(
            error.message,
            "allreduce in call 7 (`f`) on worker 0: worker 1 joined it with 512 bytes where \
             worker 0 has 1024: the workers disagree on its size"
        );
    }

    #[test]
    fn across_machines_the_controllers_ruling_on_the_call_fails_the_wait() {
        let signals = Signals::default();
        let last = first_allreduce();
        assert!(ruled(&last, &signals).is_none());
        signals.ruling.rule(6, "an earlier call's");
        assert!(
            ruled(&last, &signals).is_none(),
            "not this collective's call"
        );
        let why = "allreduce in call 7 (`f`) on worker 0: worker 3 finished call 7 without \
                   joining it: `f` returned";
        signals.ruling.rule(7, why);
        let error = ruled(&last, &signals).expect("ruled");
        assert_eq!(
            (error.kind, error.message.as_str()),
            (ErrorKind::Runtime, why)
        );
    }

    #[test]
    fn a_peer_that_queued_its_side_or_queues_in_a_later_call_is_not_judged() {
        let peers = records(2);
        let last = first_allreduce();
        peers[1].begin_call(7, true, Some("f"));
        peers[1].joined_one(Joined::Session, Collective::Allreduce.code(), 0);
        peers[1].end_call(None);
        assert!(passed_peer(&last, &worker(0, 2, 1), &peers).is_none());

        // What it queued on another communicator does not count.
        peers[1].begin_call(7, true, Some("f"));
        peers[1].comms_made();
        peers[1].joined_one(Joined::Group, Collective::Allreduce.code(), 0);
        peers[1].end_call(None);
        let error = passed_peer(&last, &worker(0, 2, 1), &peers).expect("it passed");
        assert!(error.message.ends_with("without joining it: `f` returned"));

        // A later call queued one, which NCCL pairs with this one.
        peers[1].begin_call(8, true, None);
        peers[1].joined_one(Joined::Session, Collective::Allreduce.code(), 0);
        assert!(passed_peer(&last, &worker(0, 2, 1), &peers).is_none());

        // A later init_ccl made it new communicators: its count no longer tells of call 7.
        peers[1].begin_call(9, true, Some(INIT));
        peers[1].comms_made();
        peers[1].end_call(None);
        assert!(passed_peer(&last, &worker(0, 2, 1), &peers).is_none());
    }

    #[test]
    fn only_the_collectives_team_is_judged() {
        // Two groups of two: worker 2 (the other group) passed call 7 with nothing queued.
        let peers = records(4);
        peers[2].begin_call(7, true, Some("f"));
        peers[2].end_call(None);
        let grouped = Queued {
            grouped: true,
            ..first_allreduce()
        };
        assert!(passed_peer(&grouped, &worker(0, 4, 2), &peers).is_none());
        let error = passed_peer(&first_allreduce(), &worker(0, 4, 2), &peers).expect("passed");
        assert!(
            error
                .message
                .contains("worker 2 finished call 7 without joining")
        );
    }

    #[test]
    fn a_workers_nccl_waits_end_at_shutdown_or_a_later_init_ccl() {
        let shared = Arc::new(WorkerShared {
            exited: Exited::default(),
            signals: Placed::Own(Box::new(Signals {
                ccl_generation: AtomicU64::new(3),
                ..Signals::default()
            })),
            activity: Placed::Own(Default::default()),
            events: Placed::Own(Ring::boxed()),
            stream_events: Placed::Own(Ring::boxed()),
            timeout: None,
            session: std::sync::OnceLock::new(),
        });
        let interrupts = WorkerInterrupts::new(shared.clone());
        let earlier = interrupts.mark();
        interrupts.check(earlier).expect("nothing happened yet");

        shared.signals.ccl_generation.fetch_add(1, Ordering::SeqCst);
        let error = interrupts.check(earlier).unwrap_err();
        assert_eq!(
            (error.kind, error.message.as_str()),
            (ErrorKind::Runtime, "init_ccl was called again")
        );
        let later = interrupts.mark();
        interrupts
            .check(later)
            .expect("a wait that began after the init_ccl goes on");

        shared.signals.stopping.store(true, Ordering::SeqCst);
        let error = interrupts.check(later).unwrap_err();
        assert_eq!(
            (error.kind, error.message.as_str()),
            (ErrorKind::SessionClosed, "the session was shut down")
        );
    }
}
