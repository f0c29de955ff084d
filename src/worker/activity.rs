//! The board: what each worker is doing (its state, its call and function, since when, the
//! collective it waits in and for whom, its last failure), in a record the worker writes and
//! anyone reads without asking it, for the controller's status and hang reports.
//!
//! The one idea: the record is atomics only, valid when zeroed and free of pointers, so it lies
//! beside a worker thread's shared state or in the session's shared memory for a worker process,
//! where the controller reads it while the worker is busy, stuck or dead. The worker is its one
//! writer and brackets each change with a sequence number (odd while it writes); a reader
//! retries a torn read a bounded number of times and never waits for the worker.
//!
//! The standard library's atomics, in model-checking builds too: nothing waits on a record;
//! the collectives only read their peers' to judge a wait they are in already.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::sync::clock::coarse_ns;

mod joins;
mod seq;

pub use joins::{COMMS, Comm, Joins};
pub(crate) use seq::{Seq, Text, cut, text_of};

/// What a worker is doing, as it says itself (`dead` and `lost` are the controller's verdicts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Waiting for a message (the zeroed record's state).
    Idle,
    /// Running a call.
    Running,
    /// In a collective of its call.
    Collective,
    /// Waiting for its device's work (a sync).
    Syncing,
}

impl State {
    /// Its code on the board (and on a node's board on the wire).
    pub(crate) fn code(self) -> u32 {
        match self {
            State::Idle => 0,
            State::Running => 1,
            State::Collective => 2,
            State::Syncing => 3,
        }
    }

    /// The state of code `code`, if it is one.
    pub(crate) fn from_code(code: u32) -> Option<State> {
        [
            State::Idle,
            State::Running,
            State::Collective,
            State::Syncing,
        ]
        .into_iter()
        .find(|state| state.code() == code)
    }

    /// How the status names it.
    pub fn name(self) -> &'static str {
        match self {
            State::Idle => "idle",
            State::Running => "running",
            State::Collective => "collective",
            State::Syncing => "syncing",
        }
    }
}

/// Words of a function's name the record keeps.
const NAME_WORDS: usize = 8;
/// Bytes of a function's name the record keeps.
pub const MAX_FUNCTION_BYTES: usize = NAME_WORDS * 8;
/// Words of the last failure's message the record keeps.
const FAILURE_WORDS: usize = 32;
/// Bytes of the last failure's message the record keeps.
pub const MAX_FAILURE_BYTES: usize = FAILURE_WORDS * 8;
/// Workers the record can name as awaited peers (ids beyond are left out).
pub const MAX_PEERS: usize = 256;
/// Words of a set of peers, one bit each.
pub const PEER_WORDS: usize = MAX_PEERS / 64;

/// The set of `peers` as words, one bit each (ids past [`MAX_PEERS`] are left out).
pub fn peer_words(peers: impl IntoIterator<Item = usize>) -> [u64; PEER_WORDS] {
    let mut words = [0u64; PEER_WORDS];
    for peer in peers.into_iter().filter(|&peer| peer < MAX_PEERS) {
        words[peer / 64] |= 1 << (peer % 64);
    }
    words
}

/// The ids in a set of peers that `word(i)` gives word `i` of.
pub fn peer_ids(word: impl Fn(usize) -> u64) -> Vec<usize> {
    (0..MAX_PEERS)
        .filter(|&peer| word(peer / 64) & (1 << (peer % 64)) != 0)
        .collect()
}
/// One worker's line of the board, on cache lines of its own.
#[repr(C, align(128))]
#[derive(Default)]
pub struct Activity {
    /// Odd while the worker writes.
    seq: Seq,
    state: AtomicU32,
    /// The collective's code (`ccl::Collective::code`) while in one; 0 otherwise.
    collective: AtomicU32,
    /// The number of the call it runs, or ran last.
    call: AtomicU64,
    /// Whether that call went to every worker (1) or to this one alone (0).
    to_all: AtomicU32,
    /// When it entered its state.
    since_ns: AtomicU64,
    /// When its call began.
    call_ns: AtomicU64,
    /// The peers it waits for in its collective, one bit each.
    waits_for: [AtomicU64; PEER_WORDS],
    /// The function of its call (empty: unnamed).
    function: Text<NAME_WORDS>,
    /// The last call it finished.
    finished: AtomicU64,
    /// The last call that went to every worker it finished (calls to it alone may overtake
    /// those).
    finished_all: AtomicU64,
    /// The last call that failed, and why.
    failed_call: AtomicU64,
    failure: Text<FAILURE_WORDS>,
    /// The collectives it joined since its communicators were made, on each ([`Comm`]).
    joined: [AtomicU64; COMMS],
    /// The call it joined the last of those in, or made the communicators in.
    joined_call: AtomicU64,
    /// The communicator of the last it joined ([`Comm::code`]).
    joined_on: AtomicU32,
    /// The code of the last it joined, when its call went to every worker (0 otherwise).
    joined_what: AtomicU32,
    /// The bytes its members agree on in that one (0: not said).
    joined_size: AtomicU64,
}

/// A consistent reading of a worker's record.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    pub state: State,
    /// The call it runs, or ran last (0: none yet).
    pub call: u64,
    /// The function of that call, when it has a name.
    pub function: Option<String>,
    /// How long it has been in its state.
    pub for_ns: u64,
    /// The collective's code while in one.
    pub collective: u32,
    /// The peers it waits for in its collective, when it waited long enough to say.
    pub waits_for: Vec<usize>,
    /// The last call it finished.
    pub finished: u64,
    /// The last call that failed, and why.
    pub failure: Option<(u64, String)>,
    /// The collectives it joined, for judging whether a peer can still meet it.
    pub joins: Joins,
}

impl Snapshot {
    /// Whether `other` says the same, but for the time spent in the state (which every reading
    /// finds longer).
    pub fn same_as(&self, other: &Snapshot) -> bool {
        *self
            == (Snapshot {
                for_ns: self.for_ns,
                ..other.clone()
            })
    }
}

impl Activity {
    /// Makes one change, bracketed by the sequence number (the worker's thread only).
    fn change(&self, write: impl FnOnce(&Self)) {
        self.seq.write(|| write(self));
    }

    fn state(&self) -> State {
        State::from_code(self.state.load(Ordering::Relaxed)).unwrap_or(State::Idle)
    }

    /// The worker starts: idle from now (a zeroed record says nothing of when).
    pub(crate) fn start(&self) {
        let now = coarse_ns();
        self.change(|a| {
            a.state.store(State::Idle.code(), Ordering::Relaxed);
            a.since_ns.store(now, Ordering::Relaxed);
        });
    }

    /// Call `call` of `function` begins (`None`: the same function as the last call's, whose
    /// name is kept); `to_all` says whether it went to every worker.
    pub(crate) fn begin_call(&self, call: u64, to_all: bool, function: Option<&str>) {
        let now = coarse_ns();
        self.change(|a| {
            a.state.store(State::Running.code(), Ordering::Relaxed);
            a.call.store(call, Ordering::Relaxed);
            a.to_all.store(to_all.into(), Ordering::Relaxed);
            a.since_ns.store(now, Ordering::Relaxed);
            a.call_ns.store(now, Ordering::Relaxed);
            if let Some(function) = function {
                a.function.store(function);
            }
        });
    }

    /// The call ended, having failed with `failure` if it did.
    ///
    /// The call's end is two words outside the sequence number, so that a call that returns
    /// costs no more: a reader of `finished_all` that sees the call sees the failure (and
    /// whatever the worker did in the call) too.
    pub(crate) fn end_call(&self, failure: Option<&str>) {
        let call = self.call.load(Ordering::Relaxed);
        if let Some(failure) = failure {
            self.change(|a| {
                a.failed_call.store(call, Ordering::Relaxed);
                a.failure.store(failure);
            });
        }
        self.finished.store(call, Ordering::Release);
        if self.to_all.load(Ordering::Relaxed) == 1 {
            self.finished_all.store(call, Ordering::Release);
        }
    }

    /// The worker enters `state` (idle, or syncing), unless it is in it already.
    pub(crate) fn enter(&self, state: State) {
        if self.state() != state {
            let now = coarse_ns();
            self.change(|a| {
                a.state.store(state.code(), Ordering::Relaxed);
                a.since_ns.store(now, Ordering::Relaxed);
            });
        }
    }

    /// The worker's call enters the collective of code `collective`.
    pub(crate) fn enter_collective(&self, collective: u32) {
        let now = coarse_ns();
        self.change(|a| {
            a.state.store(State::Collective.code(), Ordering::Relaxed);
            a.collective.store(collective, Ordering::Relaxed);
            a.since_ns.store(now, Ordering::Relaxed);
        });
    }

    /// The worker's call leaves its collective and runs on.
    fn leave_collective(&self) {
        self.change(|a| {
            a.state.store(State::Running.code(), Ordering::Relaxed);
            a.collective.store(0, Ordering::Relaxed);
            let began = a.call_ns.load(Ordering::Relaxed);
            a.since_ns.store(began, Ordering::Relaxed);
            a.waits_for
                .iter()
                .for_each(|word| word.store(0, Ordering::Relaxed));
        });
    }

    /// The peers the worker waits for in its collective now.
    fn wait_for(&self, peers: impl Iterator<Item = usize>) {
        let words = peer_words(peers);
        self.change(|a| {
            for (word, bits) in a.waits_for.iter().zip(words) {
                word.store(bits, Ordering::Relaxed);
            }
        });
    }

    /// Whether the worker has finished call `call`: None while it has not reached it or runs
    /// it; then Some with its failure, or None if it returned. Only a call that went to every
    /// worker can be asked about (one sent to another worker alone never reaches this one).
    pub(crate) fn passed(&self, call: u64) -> Option<Option<String>> {
        if self.finished_all.load(Ordering::Acquire) < call {
            return None;
        }
        self.read(|a| (a.failed_call.load(Ordering::Relaxed) == call).then(|| a.failure.load()))
    }

    /// The number of the call the worker runs, or ran last (exact on the worker's own thread; on
    /// another, as of a moment ago).
    pub(crate) fn running_call(&self) -> u64 {
        self.call.load(Ordering::Relaxed)
    }

    /// The call the worker runs now, for its collectives' posts: its number, if it went to
    /// every worker; 0 otherwise (the worker's own thread only).
    fn call_stamp(&self) -> u64 {
        let running = self.state() != State::Idle;
        let to_all = self.to_all.load(Ordering::Relaxed) == 1;
        if running && to_all {
            self.call.load(Ordering::Relaxed)
        } else {
            0
        }
    }

    /// The call the worker runs now, if it went to every worker, with its function's name.
    pub(crate) fn broadcast_call(&self) -> Option<(u64, Option<String>)> {
        let read = self.snapshot()?;
        (self.to_all.load(Ordering::Relaxed) == 1 && read.state != State::Idle)
            .then_some((read.call, read.function))
    }

    /// A consistent reading, or None when the writer kept changing the record through every
    /// try (or died in the middle of a change).
    pub fn snapshot(&self) -> Option<Snapshot> {
        self.read(|a| {
            let now = coarse_ns();
            let failed_call = a.failed_call.load(Ordering::Relaxed);
            let (call, finished) = (
                a.call.load(Ordering::Relaxed),
                a.finished.load(Ordering::Relaxed),
            );
            // A call ended is a worker idle, before it says so as it parks (its time in the
            // state counts from the call's start until then).
            let state = match a.state() {
                State::Running if finished == call && call != 0 => State::Idle,
                state => state,
            };
            let since = a.since_ns.load(Ordering::Relaxed);
            Snapshot {
                state,
                call,
                function: Some(a.function.load()).filter(|name| !name.is_empty()),
                for_ns: now.saturating_sub(since),
                collective: a.collective.load(Ordering::Relaxed),
                waits_for: peer_ids(|i| a.waits_for[i].load(Ordering::Relaxed)),
                finished,
                failure: (failed_call != 0).then(|| (failed_call, a.failure.load())),
                joins: a.joins_now(),
            }
        })
    }

    /// What `get` reads of the record between two equal, even sequence numbers; None when the
    /// writer kept changing it through every try (or died in the middle of a change).
    fn read<T>(&self, get: impl Fn(&Self) -> T) -> Option<T> {
        self.seq.read(|| get(self))
    }
}

/// Set in a call's word when the call went to every worker.
const TO_ALL: u32 = 1 << 31;

/// The word a call's message carries: the low 31 bits of its number, and [`TO_ALL`] when it
/// goes to every worker.
pub(crate) fn call_word(number: u64, to_all: bool) -> u32 {
    (number as u32 & !TO_ALL) | if to_all { TO_ALL } else { 0 }
}

/// The call a message's `word` stands for: its number, widened to the number nearest `last`
/// (the last one the worker saw; calls sent by several threads at once may arrive a little
/// out of order), and whether it went to every worker.
pub(crate) fn widen_call(last: u64, word: u32) -> (u64, bool) {
    let low = word & !TO_ALL;
    // The step from `last` to `low` in 31-bit arithmetic, as a signed number.
    let step = ((low.wrapping_sub(last as u32) << 1) as i32) >> 1;
    (last.wrapping_add_signed(step.into()), word & TO_ALL != 0)
}

/// The collective the calling worker's call is in, until dropped (then its call runs on).
pub(crate) struct InCollective(());

/// Records that the calling worker, if it is one, enters the collective of code `collective`.
pub(crate) fn enter_collective(collective: u32) -> InCollective {
    super::with_own_activity(|activity| activity.enter_collective(collective));
    InCollective(())
}

/// Where another worker's record lies for a reader in this process: with its worker thread,
/// or in the session's arena (worker processes of this machine).
#[derive(Clone)]
pub(crate) enum Record {
    Thread(Arc<super::WorkerShared>),
    Mapped(&'static Activity),
}

impl std::ops::Deref for Record {
    type Target = Activity;

    fn deref(&self) -> &Activity {
        match self {
            Record::Thread(shared) => &shared.activity,
            Record::Mapped(activity) => activity,
        }
    }
}

/// The call the calling worker runs now, if it is a worker and the call went to every worker,
/// with its function's name.
pub(crate) fn own_broadcast_call() -> Option<(u64, Option<String>)> {
    super::with_own_activity(Activity::broadcast_call)?
}

/// The number of the call the calling worker runs, if it is a worker and the call went to
/// every worker; 0 otherwise.
pub(crate) fn own_call_stamp() -> u64 {
    super::with_own_activity(Activity::call_stamp).unwrap_or(0)
}

/// Counts collective `what` (its code), which the calling worker, if it is one, joins on `on`.
pub(crate) fn note_joined(on: Comm, what: u32) {
    super::with_own_activity(|activity| activity.joined_one(on, what, 0));
}

/// Records the peers the calling worker, if it is one, waits for in its collective now.
pub(crate) fn note_waiting_for(peers: impl Iterator<Item = usize>) {
    super::with_own_activity(|activity| activity.wait_for(peers));
}

impl Drop for InCollective {
    fn drop(&mut self) {
        super::with_own_activity(Activity::leave_collective);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_zeroed_record_reads_as_an_idle_worker_that_ran_nothing() {
        let read = Activity::default().snapshot().unwrap();
        assert_eq!(read.state, State::Idle);
        assert_eq!((read.call, read.finished, read.collective), (0, 0, 0));
        assert_eq!(read.function, None);
        assert_eq!(read.failure, None);
        assert!(read.waits_for.is_empty());
    }

    #[test]
    fn a_call_its_collective_and_its_failure_read_back_as_written() {
        let activity = Activity::default();
        activity.begin_call(7, true, Some("mlp.step"));
        let read = activity.snapshot().unwrap();
        assert_eq!(read.state, State::Running);
        assert_eq!((read.call, read.function.as_deref()), (7, Some("mlp.step")));
        activity.enter_collective(3);
        activity.wait_for([1, 200, 9999].into_iter());
        let read = activity.snapshot().unwrap();
        assert_eq!((read.state, read.collective), (State::Collective, 3));
        assert_eq!(
            read.waits_for,
            vec![1, 200],
            "ids past MAX_PEERS are left out"
        );
        activity.leave_collective();
        activity.end_call(Some("ValueError: boom"));
        activity.enter(State::Idle);
        let read = activity.snapshot().unwrap();
        assert_eq!((read.state, read.finished), (State::Idle, 7));
        assert!(read.waits_for.is_empty());
        assert_eq!(read.failure, Some((7, "ValueError: boom".to_string())));
        // The next call of the same function keeps its name without writing it again.
        activity.begin_call(8, true, None);
        let read = activity.snapshot().unwrap();
        assert_eq!((read.call, read.function.as_deref()), (8, Some("mlp.step")));
    }

    #[test]
    fn readings_are_the_same_but_for_the_time_in_the_state() {
        let activity = Activity::default();
        activity.begin_call(3, true, Some("f"));
        let first = activity.snapshot().unwrap();
        let later = Snapshot {
            for_ns: first.for_ns + 1,
            ..first.clone()
        };
        assert!(first.same_as(&later));
        activity.begin_call(4, true, None);
        assert!(!first.same_as(&activity.snapshot().unwrap()));
    }

    #[test]
    fn texts_are_cut_at_a_character_boundary() {
        let activity = Activity::default();
        let long = "é".repeat(NAME_WORDS * 8);
        activity.begin_call(1, false, Some(&long));
        let name = activity.snapshot().unwrap().function.unwrap();
        assert_eq!(name, "é".repeat(NAME_WORDS * 4));
    }

    #[test]
    fn a_record_left_mid_change_reads_as_none_without_waiting() {
        let activity = Activity::default();
        activity.seq.0.store(1, Ordering::Relaxed);
        assert_eq!(activity.snapshot(), None);
    }

    #[test]
    fn readers_never_see_a_torn_record() {
        let activity = Arc::new(Activity::default());
        let writer = {
            let activity = activity.clone();
            std::thread::spawn(move || {
                for call in 1..=20_000u64 {
                    let name = format!("f{call}");
                    activity.begin_call(call, true, Some(&name));
                    activity.end_call(None);
                }
            })
        };
        while !writer.is_finished() {
            if let Some(read) = activity.snapshot()
                && read.call != 0
            {
                assert_eq!(read.function, Some(format!("f{}", read.call)));
            }
        }
        writer.join().unwrap();
    }

    #[test]
    fn call_numbers_widen_to_the_nearest_of_the_last() {
        let widen = |last, number, to_all| widen_call(last, call_word(number, to_all));
        assert_eq!(widen(0, 1, true), (1, true));
        assert_eq!(widen(41, 40, false), (40, false), "a little out of order");
        let wrap = 1u64 << 31;
        assert_eq!(widen(wrap - 1, wrap, true), (wrap, true), "past a wrap");
        assert_eq!(
            widen(wrap + 2, wrap - 1, false),
            (wrap - 1, false),
            "before one"
        );
        assert_eq!(
            widen(5 * wrap + 7, 5 * wrap + 9, true),
            (5 * wrap + 9, true)
        );
    }

    #[test]
    fn a_call_is_passed_once_finished_and_says_how() {
        let activity = Activity::default();
        assert_eq!(activity.passed(5), None, "not reached");
        activity.begin_call(5, true, Some("f"));
        assert_eq!(activity.passed(5), None, "running it");
        activity.end_call(Some("`f` failed: ValueError: boom"));
        assert_eq!(
            activity.passed(5),
            Some(Some("`f` failed: ValueError: boom".into()))
        );
        activity.begin_call(6, true, None);
        assert_eq!(
            activity.passed(5),
            Some(Some("`f` failed: ValueError: boom".into()))
        );
        assert_eq!(activity.passed(6), None);
        activity.end_call(None);
        assert_eq!(activity.passed(6), Some(None), "it returned");
    }
}
