//! The flight recorder: every worker's last [`RING`] events (its calls, syncs, collectives,
//! module loads, its stream's instructions and its collectives' runs on its GPU, with when they began and how long they took), kept at all times, for a
//! timeline of the session and for a look at what a worker did before it hung or died.
//!
//! The one idea: a ring of fixed-size slots of atomics, valid when zeroed, that the worker
//! alone writes and anyone reads without waiting: each slot carries the number of the event it
//! holds, written odd before the event and even after, so a reader that finds another number
//! knows the slot was overwritten (or is being written) and counts the event as lost. In a
//! worker process the ring lies in the session's arena, so a dead worker's events outlive it.
//! A second ring of the worker's takes the instructions of the streams its functions made,
//! which their threads write, each taking its event's number first (`Ring::record_shared`).

use std::cell::Cell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

use super::activity::{Text, text_of};
pub(crate) use crate::sync::clock::now_ns;
use crate::vm::{Ran, StreamRecorder, StreamRecorders};

/// Events a ring keeps: the last ones of its worker.
pub const RING: usize = 1024;
/// Rings each worker has: its own events', and its streams' instructions'.
pub const LANES: usize = 2;
/// Words of an event's name.
const NAME_WORDS: usize = 8;
/// Bytes of an event's name that a ring keeps.
pub const NAME_BYTES: usize = NAME_WORDS * 8;

/// What an event is: the trace's category.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A call of a function (its name, its call id).
    Call,
    /// A wait for the worker's device work.
    Sync,
    /// A collective (its name; `detail` is its code and its [`Team`]).
    Collective,
    /// A module loaded.
    Module,
    /// An instruction of a stream of the worker (`detail` is the stream's number).
    Stream,
    /// A collective's run on the worker's GPU, from when the GPU began it to when it finished
    /// (`detail` as a [`Kind::Collective`]'s).
    Gpu,
}

impl Kind {
    pub(crate) fn code(self) -> u32 {
        match self {
            Kind::Call => 1,
            Kind::Sync => 2,
            Kind::Collective => 3,
            Kind::Module => 4,
            Kind::Stream => 5,
            Kind::Gpu => 6,
        }
    }

    pub(crate) fn from_code(code: u32) -> Option<Kind> {
        [
            Kind::Call,
            Kind::Sync,
            Kind::Collective,
            Kind::Module,
            Kind::Stream,
            Kind::Gpu,
        ]
        .into_iter()
        .find(|kind| kind.code() == code)
    }

    /// The trace's category of the kind.
    pub fn category(self) -> &'static str {
        match self {
            Kind::Call => "call",
            Kind::Sync => "sync",
            Kind::Collective => "collective",
            Kind::Module => "module",
            Kind::Stream => "stream",
            Kind::Gpu => "gpu",
        }
    }
}

/// An event's name as read back: one allocation shared by every event of that name, so that
/// reading a ring allocates only for a name its reader has not seen (see [`Names`]).
pub type Name = Arc<str>;

/// Whom a collective met: in a collective event's `detail`, above the collective's code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Team {
    /// Every worker of the session.
    Session,
    /// The worker's group.
    Group,
    /// One other worker (a transfer).
    Pair,
}

/// Where a collective event's detail holds its team.
const TEAM_SHIFT: u32 = 16;

impl Team {
    /// The detail of a collective event of collective `code` with this team.
    pub fn detail(self, code: u32) -> u32 {
        let team = match self {
            Team::Session => 0,
            Team::Group => 1,
            Team::Pair => 2,
        };
        code | team << TEAM_SHIFT
    }

    /// The team a collective event's `detail` holds.
    pub fn of(detail: u32) -> Option<Team> {
        match detail >> TEAM_SHIFT {
            0 => Some(Team::Session),
            1 => Some(Team::Group),
            2 => Some(Team::Pair),
            _ => None,
        }
    }
}

/// What a collective's events say of it besides their times.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Collective {
    /// Its name (`allreduce`, ...).
    pub name: &'static str,
    /// Its code and its [`Team`] (see [`Team::detail`]).
    pub detail: u32,
    /// The bytes of its first tensor (the one sent, or received where nothing is).
    pub bytes: u64,
}

/// One event, as read back (its name a [`Name`]) and as recorded (a `&str`).
#[derive(Clone, Debug, PartialEq)]
pub struct Event<N = Name> {
    pub kind: Kind,
    /// When it began, in ns on the machine's monotonic clock (`now_ns`).
    pub start_ns: u64,
    pub dur_ns: u64,
    /// The call it belongs to (0: none known).
    pub call: u64,
    /// Bytes it moved (collectives).
    pub bytes: u64,
    /// Of its time, how long it waited for peers (collectives; 0: not measured).
    pub wait_ns: u64,
    /// What more its kind says: see [`Kind`].
    pub detail: u32,
    /// The function's or collective's name, or the module's path (cut to 64 bytes).
    pub name: N,
}

impl<'a> Event<&'a str> {
    /// An event of `kind` named `name` that began at `start_ns` and ends now, of no call and
    /// with nothing more to say (the caller sets what it knows).
    pub(crate) fn ended(kind: Kind, name: &'a str, start_ns: u64) -> Self {
        Event {
            kind,
            start_ns,
            dur_ns: now_ns().saturating_sub(start_ns),
            call: 0,
            bytes: 0,
            wait_ns: 0,
            detail: 0,
            name,
        }
    }
}

#[repr(C)]
struct Slot {
    /// `2n + 2` while it holds event `n`; odd while the worker writes it.
    seq: AtomicU64,
    start_ns: AtomicU64,
    dur_ns: AtomicU64,
    call: AtomicU64,
    bytes: AtomicU64,
    wait_ns: AtomicU64,
    kind: AtomicU32,
    detail: AtomicU32,
    name: Text<NAME_WORDS>,
}

/// A worker's ring of its last events.
#[repr(C, align(128))]
pub struct Ring {
    /// Events written so far.
    head: AtomicU64,
    slots: [Slot; RING],
}

impl Ring {
    /// An empty ring on the heap, made there in place (it is too large for a small stack).
    pub fn boxed() -> Box<Ring> {
        let layout = std::alloc::Layout::new::<Ring>();
        // SAFETY: the layout is a ring's, which has a size; a ring is atomics only, and all
        // zeroes is an empty ring, owned by the box from here on.
        unsafe {
            let raw = std::alloc::alloc_zeroed(layout).cast::<Ring>();
            if raw.is_null() {
                std::alloc::handle_alloc_error(layout);
            }
            Box::from_raw(raw)
        }
    }
}

/// The names a reader of rings has seen, by the words a slot stores them in.
#[derive(Default)]
pub struct Names {
    seen: HashMap<NameKey, Name>,
    /// The last one found: a worker's events mostly follow one of the same name.
    last: Option<(NameKey, Name)>,
}

/// A name's length and words, as a slot stores them.
type NameKey = (usize, [u64; NAME_WORDS]);

/// Names a reader keeps at most (past it, it forgets them all and starts again): a worker's
/// names are its functions', collectives' and modules', so few.
const NAMES_KEPT: usize = 4096;

impl Names {
    /// The name `text` holds.
    fn of(&mut self, text: &Text<NAME_WORDS>) -> Name {
        let key = text.load_words();
        if let Some((last, name)) = &self.last
            && *last == key
        {
            return name.clone();
        }
        let name = match self.seen.get(&key) {
            Some(name) => name.clone(),
            None => {
                if self.seen.len() >= NAMES_KEPT {
                    self.seen.clear();
                }
                let name: Name = text_of(key.0, &key.1).into();
                self.seen.insert(key, name.clone());
                name
            }
        };
        self.last = Some((key, name.clone()));
        name
    }
}

/// What a reading of a ring found: the events from the one asked for on, and how many of
/// those it could not read (overwritten before they were read, or mid-write).
#[derive(Debug, Default)]
pub struct Reading {
    pub events: Vec<Event>,
    /// The number of the next event to ask for.
    pub next: u64,
    pub lost: u64,
}

impl Ring {
    /// Records `event` (the ring's worker alone).
    pub(crate) fn record(&self, event: &Event<&str>) {
        let n = self.head.load(Ordering::Relaxed);
        self.write(n, event);
        self.head.store(n + 1, Ordering::Release);
    }

    /// Records `event` in a ring that several threads write: each takes its event's number
    /// first, so a reader that comes between the taking and the writing counts that event
    /// lost.
    pub(crate) fn record_shared(&self, event: &Event<&str>) {
        let n = self.head.fetch_add(1, Ordering::AcqRel);
        self.write(n, event);
    }

    /// Writes `event` as event number `n`.
    fn write(&self, n: u64, event: &Event<&str>) {
        let slot = &self.slots[(n % RING as u64) as usize];
        slot.seq.store(2 * n + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        slot.start_ns.store(event.start_ns, Ordering::Relaxed);
        slot.dur_ns.store(event.dur_ns, Ordering::Relaxed);
        slot.call.store(event.call, Ordering::Relaxed);
        slot.bytes.store(event.bytes, Ordering::Relaxed);
        slot.wait_ns.store(event.wait_ns, Ordering::Relaxed);
        slot.kind.store(event.kind.code(), Ordering::Relaxed);
        slot.detail.store(event.detail, Ordering::Relaxed);
        slot.name.store(event.name);
        slot.seq.store(2 * n + 2, Ordering::Release);
    }

    /// How many events the ring's worker has recorded (the number of its next).
    pub fn written(&self) -> u64 {
        self.head.load(Ordering::Acquire)
    }

    /// The events from number `from` on that the ring still holds, their names from `names`;
    /// never waits.
    pub fn read_from(&self, from: u64, names: &mut Names) -> Reading {
        let head = self.head.load(Ordering::Acquire);
        let first = from.max(head.saturating_sub(RING as u64));
        let mut reading = Reading {
            events: Vec::with_capacity((head - first.min(head)) as usize),
            next: head.max(from),
            lost: first.saturating_sub(from),
        };
        for n in first..head {
            let slot = &self.slots[(n % RING as u64) as usize];
            let seq = slot.seq.load(Ordering::Acquire);
            let event = Kind::from_code(slot.kind.load(Ordering::Relaxed)).map(|kind| Event {
                kind,
                start_ns: slot.start_ns.load(Ordering::Relaxed),
                dur_ns: slot.dur_ns.load(Ordering::Relaxed),
                call: slot.call.load(Ordering::Relaxed),
                bytes: slot.bytes.load(Ordering::Relaxed),
                wait_ns: slot.wait_ns.load(Ordering::Relaxed),
                detail: slot.detail.load(Ordering::Relaxed),
                name: names.of(&slot.name),
            });
            fence(Ordering::Acquire);
            let again = slot.seq.load(Ordering::Relaxed);
            match event {
                Some(event) if seq == 2 * n + 2 && again == seq => reading.events.push(event),
                _ => reading.lost += 1,
            }
        }
        reading
    }

    /// The last events the ring holds (the flight recorder's).
    pub fn last(&self) -> Reading {
        self.read_from(0, &mut Names::default())
    }
}

thread_local! {
    /// How long the calling worker's running collective waited for its peers, so far.
    static WAITED_NS: Cell<u64> = const { Cell::new(0) };
}

/// Counts `ns` more of the calling worker's running collective as waiting for its peers.
pub(crate) fn add_wait(ns: u64) {
    let _ = WAITED_NS.try_with(|waited| waited.set(waited.get().saturating_add(ns)));
}

/// The wait counted since the last take (see [`add_wait`]), which starts again from 0.
pub(crate) fn take_wait() -> u64 {
    WAITED_NS.try_with(|waited| waited.replace(0)).unwrap_or(0)
}

/// The number of a worker's own stream (copies to and from worker 0, NCCL's work), which runs
/// on the worker's thread.
pub const WORKER_STREAM: u32 = 1;

/// Records `ran`, an instruction of the calling worker's own stream, in its ring.
pub(crate) fn record_ran(ran: &Ran) {
    super::with_own_events(|ring, call| {
        ring.record(&Event {
            kind: Kind::Stream,
            start_ns: ran.start_ns,
            dur_ns: ran.dur_ns,
            call,
            bytes: ran.bytes,
            wait_ns: 0,
            detail: WORKER_STREAM,
            name: ran.what,
        });
    });
}

/// What gives each stream that worker `shared`'s functions make (on its thread, run by an
/// executor thread) its recorder: its instructions go to the worker's ring of streams, on a
/// track of their own (numbered from 2, in the order the streams were made).
pub(crate) fn streams_recorders(shared: Arc<super::WorkerShared>) -> StreamRecorders {
    let made = Cell::new(WORKER_STREAM);
    Rc::new(move || {
        made.set(made.get() + 1);
        let (shared, stream) = (shared.clone(), made.get());
        Some(Arc::new(move |ran: &Ran| {
            shared.stream_events.record_shared(&Event {
                kind: Kind::Stream,
                start_ns: ran.start_ns,
                dur_ns: ran.dur_ns,
                call: shared.activity.running_call(),
                bytes: ran.bytes,
                wait_ns: 0,
                detail: stream,
                name: ran.what,
            });
        }) as StreamRecorder)
    })
}

/// Records an event of `kind` named `name` that began at `start_ns` and ends now, of which
/// `wait_ns` waited for peers, in the calling worker's ring, if it is a worker.
pub(crate) fn record_own(
    kind: Kind,
    name: &str,
    start_ns: u64,
    detail: u32,
    bytes: u64,
    wait_ns: u64,
) {
    super::with_own_events(|ring, call| {
        ring.record(&Event {
            call,
            bytes,
            wait_ns,
            detail,
            ..Event::ended(kind, name, start_ns)
        });
    });
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Event `n` of the tests, named `name`.
    fn event<N>(n: u64, name: N) -> Event<N> {
        Event {
            kind: Kind::Call,
            start_ns: 1000 + n,
            dur_ns: 5,
            call: n,
            bytes: 0,
            wait_ns: 0,
            detail: 0,
            name,
        }
    }

    /// Event `n` as read back.
    fn read(n: u64) -> Event {
        event(n, format!("f{n}").into())
    }

    fn record(ring: &Ring, n: u64) {
        ring.record(&event(n, format!("f{n}").as_str()));
    }

    #[test]
    fn a_ring_gives_back_what_was_recorded_from_any_number_on() {
        let ring = Ring::boxed();
        assert_eq!(ring.last().events, []);
        for n in 0..5 {
            record(&ring, n);
        }
        let mut names = Names::default();
        let reading = ring.read_from(2, &mut names);
        assert_eq!(reading.events, [read(2), read(3), read(4)]);
        assert_eq!((reading.next, reading.lost), (5, 0));
        assert_eq!(ring.read_from(5, &mut names).events, []);
        // Events of one name share it.
        record(&ring, 2);
        let again = ring.read_from(5, &mut names).events;
        assert!(Arc::ptr_eq(&again[0].name, &reading.events[0].name));
    }

    #[test]
    fn events_overwritten_before_they_were_read_are_counted_lost() {
        let ring = Ring::boxed();
        for n in 0..RING as u64 + 10 {
            record(&ring, n);
        }
        let reading = ring.read_from(3, &mut Names::default());
        assert_eq!(reading.lost, 7, "events 3 to 9 were overwritten");
        assert_eq!(reading.events.len(), RING);
        assert_eq!(reading.events[0], read(10));
        assert_eq!(
            ring.last().events.len(),
            RING,
            "the flight recorder's last 1024"
        );
    }

    #[test]
    fn a_slot_mid_write_is_lost_not_torn() {
        let ring = Ring::boxed();
        record(&ring, 0);
        ring.slots[0].seq.store(1, Ordering::Relaxed);
        let reading = ring.last();
        assert_eq!((reading.events.len(), reading.lost), (0, 1));
    }
}
