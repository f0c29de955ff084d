//! Collecting events from rings: a collector thread drains a set of workers' rings every few
//! milliseconds (every one while a ring fills fast) into one store, capped at
//! [`MAX_TRACE_BYTES`], until it is stopped. The controller collects its own machine's workers
//! this way for a trace, and each node its own.
//!
//! The one idea: a drain reads each ring from the number where the last one stopped, so the
//! workers never wait for the collector, and a ring that overflowed between two drains shows
//! as events counted lost.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::object::{Error, Result};
use crate::sync::clock::Calibration;
use crate::worker::events::{Event, Kind, LANES, Name, Names, RING, Ring};

/// How often a collector drains its rings while they fill slowly.
const DRAIN_EVERY: Duration = Duration::from_millis(5);
/// How often while a ring filled by half or more between two drains: a worker that records
/// faster than that loses fewer events, at the cost of more drains.
const DRAIN_BUSY: Duration = Duration::from_millis(1);
/// The most memory a trace's events may take; the events past it are counted, not kept.
pub(crate) const MAX_TRACE_BYTES: usize = 1 << 30;

/// What the controller does, as a trace shows it (`W`: what it waited in, named).
#[derive(Clone, Debug)]
pub(crate) enum Doing<W = &'static str> {
    /// It sent call `call` to `worker` (None: every worker).
    Sent { call: u64, worker: Option<usize> },
    /// It waited: a sync, or a copy of `bytes` to or from worker 0.
    Waited { what: W, bytes: u64 },
}

impl Doing {
    /// The event of the controller's ring that says so, from `start` to `end` (in ticks, which
    /// [`Noted::of`] converts): a send is a call event whose detail is its worker and one (0:
    /// every worker).
    pub fn event(&self, start: u64, end: u64) -> Event<&'static str> {
        let (kind, name, call, detail, bytes) = match *self {
            Doing::Sent { call, worker } => {
                (Kind::Call, "", call, worker.map_or(0, |w| w as u32 + 1), 0)
            }
            Doing::Waited { what, bytes } => (Kind::Sync, what, 0, 0, bytes),
        };
        Event {
            kind,
            start_ns: start,
            dur_ns: end.saturating_sub(start),
            call,
            bytes,
            wait_ns: 0,
            detail,
            name,
        }
    }
}

/// One event of the controller's, as read back from its ring.
#[derive(Clone, Debug)]
pub(crate) struct Noted {
    pub doing: Doing<Name>,
    pub start_ns: u64,
    pub dur_ns: u64,
}

impl Noted {
    /// What `event`, written by [`Doing::event`] in ticks read between `first` and `last`,
    /// says.
    fn of(event: Event, first: Calibration, last: Calibration) -> Noted {
        let doing = match event.kind {
            Kind::Call => Doing::Sent {
                call: event.call,
                worker: (event.detail as usize).checked_sub(1),
            },
            _ => Doing::Waited {
                what: event.name,
                bytes: event.bytes,
            },
        };
        Noted {
            doing,
            start_ns: first.to_ns(last, event.start_ns),
            dur_ns: first.span_ns(last, event.dur_ns),
        }
    }
}

/// How a node's clock stands to the controller's: a time `t` of the node's is `t - offset_ns`
/// of the controller's, give or take `bound_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Clock {
    pub offset_ns: i64,
    pub bound_ns: u64,
}

impl Clock {
    /// The controller's time of the node's `ns`.
    pub fn to_controller(self, ns: u64) -> u64 {
        (ns as i64).saturating_sub(self.offset_ns).max(0) as u64
    }
}

/// A node's part in a trace, as its metadata tells it.
#[derive(Clone, Debug)]
pub(crate) struct NodePart {
    pub node: usize,
    /// Its clock, when it could be read.
    pub clock: Option<Clock>,
    /// Why its events are missing, when they are.
    pub missing: Option<String>,
    /// The workers whose last events it sent as they died (kept when its others are missing).
    pub last_words: Vec<usize>,
}

/// Workers' rings, by index (`None`: a ring this process cannot read, or that is not there).
pub(crate) trait Rings: Send + Sync + 'static {
    fn count(&self) -> usize;
    fn rings(&self, index: usize) -> [Option<&Ring>; LANES];
}

/// Items a chunk of [`Chunks`] holds.
const CHUNK: usize = 16 * 1024;

/// A list that grows by chunks of [`CHUNK`] items: appending never moves what it holds, so a
/// large trace costs its collector no copy of itself, nor a CPU held for one.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Chunks<T>(Vec<Vec<T>>);

impl<T> Default for Chunks<T> {
    fn default() -> Self {
        Chunks(Vec::new())
    }
}

impl<T> Chunks<T> {
    pub fn push(&mut self, item: T) {
        match self.0.last_mut() {
            Some(last) if last.len() < CHUNK => last.push(item),
            _ => {
                let mut chunk = Vec::with_capacity(CHUNK);
                chunk.push(item);
                self.0.push(chunk);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.0.iter().flatten()
    }
}

impl<T> IntoIterator for Chunks<T> {
    type Item = T;
    type IntoIter = std::iter::Flatten<std::vec::IntoIter<Vec<T>>>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter().flatten()
    }
}

impl<'a, T> IntoIterator for &'a Chunks<T> {
    type Item = &'a T;
    type IntoIter = std::iter::Flatten<std::slice::Iter<'a, Vec<T>>>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().flatten()
    }
}

/// What a trace collected so far.
#[derive(Default)]
pub(crate) struct Collected {
    /// Each worker's events, by index.
    pub workers: Vec<Chunks<Event>>,
    /// The number of the next event to read of each worker's rings.
    next: Vec<[u64; LANES]>,
    /// Events the rings overwrote before the collector read them.
    pub lost: u64,
    /// Events left out past [`MAX_TRACE_BYTES`].
    pub dropped: u64,
    pub controller: Vec<Noted>,
    /// The nodes whose events were sent to the controller.
    pub nodes: Vec<NodePart>,
    bytes: usize,
    /// The names of the events read so far.
    names: Names,
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Collected {
    /// Nothing yet, for `count` workers.
    pub fn for_workers(count: usize) -> Collected {
        Collected {
            workers: (0..count).map(|_| Chunks::default()).collect(),
            ..Collected::default()
        }
    }

    /// Whether `bytes` more fit under the cap; counts them kept if so, else one event dropped.
    fn fits(&mut self, bytes: usize) -> bool {
        if self.bytes + bytes > MAX_TRACE_BYTES {
            self.dropped += 1;
            return false;
        }
        self.bytes += bytes;
        true
    }

    /// Keeps `events` of the worker at `index`, up to the cap.
    pub fn keep(&mut self, index: usize, events: impl IntoIterator<Item = Event>) {
        for event in events {
            if self.fits(size_of::<Event>()) {
                self.workers[index].push(event);
            }
        }
    }

    /// Takes the events `from` collected on a node, whose worker `i` is `first + i` here, onto
    /// the controller's clock by `clock`.
    pub fn take_node(&mut self, first: usize, from: Collected, clock: Clock) {
        self.lost += from.lost;
        self.dropped += from.dropped;
        for (local, events) in from.workers.into_iter().enumerate() {
            let moved = events.into_iter().map(|event| Event {
                start_ns: clock.to_controller(event.start_ns),
                ..event
            });
            self.keep(first + local, moved);
        }
    }

    /// Reads every ring from where the last reading stopped; says how long to wait before the
    /// next drain.
    fn drain<R: Rings + ?Sized>(&mut self, rings: &R) -> Duration {
        let mut busiest = 0;
        for index in 0..rings.count() {
            for (lane, ring) in rings.rings(index).into_iter().enumerate() {
                let Some(ring) = ring else { continue };
                let next = &mut self.next[index][lane];
                let reading = ring.read_from(*next, &mut self.names);
                busiest = busiest.max(reading.next - *next);
                *next = reading.next;
                self.lost += reading.lost;
                self.keep(index, reading.events);
            }
        }
        match busiest >= RING as u64 / 2 {
            true => DRAIN_BUSY,
            false => DRAIN_EVERY,
        }
    }

    /// The last events every ring holds (the flight recorder's).
    pub fn last<R: Rings + ?Sized>(rings: &R) -> Collected {
        let mut collected = Collected::for_workers(rings.count());
        collected.next = vec![[0; LANES]; rings.count()];
        collected.drain(rings);
        collected.lost = 0;
        collected
    }

    /// Takes the events of the last ring, which the controller wrote ([`Doing::event`]) in
    /// ticks read between `first` and `last`, as the controller's.
    pub fn take_controllers(&mut self, first: Calibration, last: Calibration) {
        let events = self.workers.pop().unwrap_or_default();
        self.controller = events
            .into_iter()
            .map(|event| Noted::of(event, first, last))
            .collect();
    }
}

/// A thread that drains rings until it is stopped.
pub(crate) struct Collector {
    collected: Arc<Mutex<Collected>>,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Collector {
    /// Starts collecting `rings`' events from now on, until [`Collector::finish`] or until
    /// `ended` says so.
    pub fn start<R: Rings + ?Sized>(
        rings: Arc<R>,
        ended: impl Fn() -> bool + Send + 'static,
    ) -> Result<Collector> {
        let mut collected = Collected::for_workers(rings.count());
        collected.next = (0..rings.count())
            .map(|index| rings.rings(index).map(|ring| ring.map_or(0, Ring::written)))
            .collect();
        let collected = Arc::new(Mutex::new(collected));
        let stop = Arc::new(AtomicBool::new(false));
        let (into, stopped) = (collected.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("discovm-trace".into())
            .spawn(move || {
                // The calls it records come first where the CPUs are all busy; what it misses
                // then is counted as lost.
                crate::device::cpu::yield_priority_of_current_thread();
                let mut wait = DRAIN_EVERY;
                while !stopped.load(Ordering::Acquire) && !ended() {
                    std::thread::sleep(wait);
                    wait = lock(&into).drain(&*rings);
                }
                lock(&into).drain(&*rings);
            })
            .map_err(|e| Error::runtime(format!("cannot start the trace's collector: {e}")))?;
        Ok(Collector {
            collected,
            stop,
            thread,
        })
    }

    /// Whether the thread left (stopped, or `ended`).
    #[cfg(test)]
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    /// Stops the thread after a last drain, and gives what it collected.
    pub fn finish(self) -> Collected {
        self.stop.store(true, Ordering::Release);
        let _ = self.thread.join();
        std::mem::take(&mut *lock(&self.collected))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::worker::events::Kind;

    struct One(Box<Ring>);

    impl Rings for One {
        fn count(&self) -> usize {
            1
        }

        fn rings(&self, _: usize) -> [Option<&Ring>; LANES] {
            [Some(&self.0), None]
        }
    }

    fn record(rings: &One, count: usize) {
        for n in 0..count {
            rings.0.record(&Event {
                kind: Kind::Call,
                start_ns: n as u64,
                dur_ns: 1,
                call: n as u64,
                bytes: 0,
                wait_ns: 0,
                detail: 0,
                name: "f",
            });
        }
    }

    #[test]
    fn a_ring_that_fills_fast_is_drained_sooner_and_what_it_overwrote_is_counted() {
        let rings = One(Ring::boxed());
        let mut collected = Collected::for_workers(1);
        collected.next = vec![[0; LANES]];
        record(&rings, 10);
        assert_eq!(collected.drain(&rings), DRAIN_EVERY);
        record(&rings, RING / 2);
        assert_eq!(collected.drain(&rings), DRAIN_BUSY);
        record(&rings, RING + 100);
        assert_eq!(collected.drain(&rings), DRAIN_BUSY);
        assert_eq!(collected.lost, 100);
        assert_eq!(collected.workers[0].iter().count(), 10 + RING / 2 + RING);
    }
}
