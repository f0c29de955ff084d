//! How a waiter waits, the one policy of the library: a short PAUSE spin (enough for a
//! cross-core round trip), then `yield_now` until the spin budget runs out (a yielding waiter
//! hands its CPU to runnable threads, which matters when threads outnumber CPUs), then park in
//! slices, checking between slices that waiting still makes sense.
//!
//! The one idea: the side that makes progress wakes a waiter only when the waiter announced
//! that it sleeps. The waiter announces, fences and polls once more before parking; the waker
//! publishes its progress, fences, then looks at the announcement: one of them sees the other.
//! The loop is written once ([`wait_for`]); a thread of this process parks and is unparked
//! ([`Sleeper`]), a process sleeps on a futex word in shared memory ([`SharedSleeper`]).

use std::sync::PoisonError;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::channel::Deadline;
use crate::object::{Error, ErrorKind, Result};
use crate::sync::Mutex;
use crate::sync::atomic::{AtomicBool, Ordering, fence};
use crate::sync::futex::Futex;
use crate::sync::thread::{self, Thread};
use crate::sync::time::Instant;

/// PAUSEs before yielding, about 0.8 µs: longer than a cross-core round trip. The waiter polls
/// after each one, so it sees an answer within one PAUSE of its arrival (polling a line nobody
/// writes costs no traffic).
#[cfg(not(loom))]
const PAUSES: u32 = 31;
/// A model polls once: every poll only reads, so one covers what the others could see.
#[cfg(loom)]
const PAUSES: u32 = 1;
/// A parked waiter wakes at least this often to check that its peer is still there.
pub(crate) const PARK_SLICE: Duration = Duration::from_millis(20);
/// The first park of a waiter that nobody wakes; each next one is twice as long, up to
/// [`PARK_SLICE`]: room in a queue comes back soon after the consumer gets a CPU, and a waiter
/// that slept a whole slice would stall its session for that long.
const FIRST_UNWOKEN_SLICE: Duration = Duration::from_micros(50);

/// How long to spin and yield before parking.
#[derive(Clone, Copy, Debug)]
pub struct SpinPolicy {
    /// Spin (PAUSE, then yield) for this long before parking; zero parks at once.
    pub budget: Duration,
}

impl SpinPolicy {
    pub const DEFAULT_BUDGET: Duration = Duration::from_micros(200);
}

impl Default for SpinPolicy {
    fn default() -> Self {
        SpinPolicy {
            budget: Self::DEFAULT_BUDGET,
        }
    }
}

/// Where a waiter announces that it sleeps and how it sleeps: the part of the waiting policy
/// that differs between threads of one process and processes sharing memory.
trait Park {
    /// Announces that the waiter is about to sleep (`true`), or withdraws that (`false`).
    fn announce(&self, sleeping: bool);

    /// The waker's half, after its progress is visible and fenced: whether the waiter
    /// announced that it sleeps. A `true` takes the announcement, and the caller wakes it.
    fn claim(&self) -> bool;

    /// Sleeps for at most `slice`. Returns early when woken, and without sleeping when a
    /// waker claimed the announcement first (a wake-up that came between the announcement and
    /// this call is not lost); may return early for no reason.
    fn park(&self, slice: Duration);
}

/// The first part of a wait: [`PAUSES`] PAUSEs, polling after each, about a cross-core round
/// trip. Also for a caller with a cheap answer if it comes at once and a full wait otherwise.
pub(crate) fn spin_briefly<T>(mut poll: impl FnMut() -> Option<T>) -> Option<T> {
    (0..PAUSES).find_map(|_| {
        crate::sync::spin_loop();
        poll()
    })
}

/// Waits until `poll` gives a value: polls, spins and yields within `policy`'s budget, then
/// announces its sleep, fences, polls once more and parks for at most `slice` at a time.
/// Before and after each park `check` may end the wait with an error (the peer is gone);
/// `deadline` ends it with a timeout error that names `what`.
fn wait_for<T>(
    sleeper: &impl Park,
    policy: SpinPolicy,
    slices: (Duration, Duration),
    deadline: Deadline,
    what: impl Fn() -> String,
    mut check: impl FnMut() -> Result<()>,
    mut poll: impl FnMut() -> Option<T>,
) -> Result<T> {
    let (mut slice, longest) = slices;
    loop {
        if let Some(value) = poll() {
            return Ok(value);
        }
        if !policy.budget.is_zero() {
            if let Some(value) = spin_briefly(&mut poll) {
                return Ok(value);
            }
            let spin_end = Instant::now() + policy.budget;
            while Instant::now() < spin_end {
                thread::yield_now();
                if let Some(value) = poll() {
                    return Ok(value);
                }
            }
        }
        sleeper.announce(true);
        fence(Ordering::SeqCst);
        if let Some(value) = poll() {
            sleeper.announce(false);
            return Ok(value);
        }
        // After the announcement: a peer's end that a waker records and then wakes for is
        // seen here, or the wake-up finds the announcement.
        if let Err(error) = check() {
            sleeper.announce(false);
            return Err(error);
        }
        let park = match deadline.remaining() {
            Some(left) if left.is_zero() => {
                sleeper.announce(false);
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!("{} timed out", what()),
                ));
            }
            Some(left) => left.min(slice),
            None => slice,
        };
        sleeper.park(park);
        slice = (slice * 2).min(longest);
        sleeper.announce(false);
        check()?;
    }
}

/// The "I am asleep" flag of one waiting thread.
#[derive(Default)]
pub struct Sleeper {
    /// Written only by swaps, by the waiter too: each write then reads the one before, which
    /// orders it after a waker's concurrent swap in the model checker as on hardware (loom
    /// cannot order a plain store against a swap it did not see, and would report lost
    /// wake-ups that cannot happen). The waiter swaps only on its way to and from a park.
    sleeping: CachePadded<AtomicBool>,
}

impl Park for Sleeper {
    fn announce(&self, sleeping: bool) {
        self.sleeping.swap(sleeping, Ordering::Relaxed);
    }

    fn claim(&self) -> bool {
        self.sleeping.load(Ordering::Relaxed) && self.sleeping.swap(false, Ordering::AcqRel)
    }

    /// The thread's park token keeps an unpark that came first.
    fn park(&self, slice: Duration) {
        thread::park_timeout(slice);
    }
}

impl Sleeper {
    /// Wakes `thread` if it announced that it sleeps on this flag; otherwise costs a fence and
    /// one load.
    pub fn wake(&self, thread: &Thread) {
        fence(Ordering::SeqCst); // pairs with the fence in `wait`: store-fence-load on both sides
        self.wake_fenced(thread);
    }

    /// [`Sleeper::wake`] for a caller that already issued `fence(SeqCst)` after making its
    /// progress visible (one fence may cover several sleepers).
    pub fn wake_fenced(&self, thread: &Thread) {
        if self.claim() {
            thread.unpark();
        }
    }

    /// Waits until `poll` gives a value. `check` runs while parked (at least every 20 ms) and
    /// may end the wait with an error (the peer is gone); a deadline ends it with a timeout.
    /// Only the thread `wake` is given may call this.
    pub fn wait<T>(
        &self,
        policy: SpinPolicy,
        deadline: Deadline,
        what: impl Fn() -> String,
        check: impl FnMut() -> Result<()>,
        poll: impl FnMut() -> Option<T>,
    ) -> Result<T> {
        wait_for(
            self,
            policy,
            (PARK_SLICE, PARK_SLICE),
            deadline,
            what,
            check,
            poll,
        )
    }

    /// [`Sleeper::wait`] for a waiter that nobody wakes (any number of threads may wait so on
    /// one flag): it parks for 50 µs first, then twice as long each time, up to 20 ms.
    pub fn wait_unwoken<T>(
        &self,
        policy: SpinPolicy,
        deadline: Deadline,
        what: impl Fn() -> String,
        check: impl FnMut() -> Result<()>,
        poll: impl FnMut() -> Option<T>,
    ) -> Result<T> {
        wait_for(
            self,
            policy,
            (FIRST_UNWOKEN_SLICE, PARK_SLICE),
            deadline,
            what,
            check,
            poll,
        )
    }
}

/// The "I am asleep" flags of any number of waiting threads of this process, which the side
/// that makes progress wakes all at once.
#[derive(Default)]
pub(crate) struct Sleepers {
    /// Whether some thread announced that it sleeps.
    any: Sleeper,
    /// The threads that announced it. A thread that stopped waiting stays listed until the
    /// next wake-up, which costs it a spurious unpark (every park here tolerates those).
    threads: Mutex<Vec<Thread>>,
}

impl Park for Sleepers {
    /// Only announcements of sleep are made: a thread that stopped waiting stays announced
    /// (and listed) until the next wake-up.
    fn announce(&self, sleeping: bool) {
        if sleeping {
            let me = thread::current();
            let mut threads = self.threads.lock().unwrap_or_else(PoisonError::into_inner);
            if !threads.iter().any(|t| t.id() == me.id()) {
                threads.push(me);
            }
            self.any.announce(true);
        }
    }

    fn claim(&self) -> bool {
        self.any.claim()
    }

    fn park(&self, slice: Duration) {
        self.any.park(slice);
    }
}

impl Sleepers {
    /// Wakes every thread that announced it sleeps; otherwise costs a fence and one load. Call
    /// after making the progress they wait for visible.
    pub(crate) fn wake_all(&self) {
        fence(Ordering::SeqCst); // pairs with the fence in `wait_for`
        if self.claim() {
            let threads =
                std::mem::take(&mut *self.threads.lock().unwrap_or_else(PoisonError::into_inner));
            for thread in threads {
                thread.unpark();
            }
        }
    }

    /// Waits until `poll` gives a value, as [`Sleeper::wait`] does (`check` may end it with an
    /// error, a deadline with a timeout error that names `what`); any thread may.
    pub(crate) fn wait<T>(
        &self,
        policy: SpinPolicy,
        deadline: Deadline,
        what: impl Fn() -> String,
        check: impl FnMut() -> Result<()>,
        poll: impl FnMut() -> Option<T>,
    ) -> Result<T> {
        wait_for(
            self,
            policy,
            (PARK_SLICE, PARK_SLICE),
            deadline,
            what,
            check,
            poll,
        )
    }
}

/// The "I am asleep" flag of one waiter in shared memory: a futex word (1 while the waiter
/// sleeps or is about to, 0 otherwise) that the waiter sleeps on and a waker in any process
/// that maps it wakes. Without loom it is a bare `u32`, to be placed in shared memory.
#[repr(transparent)]
pub(crate) struct SharedSleeper {
    /// Written by swaps only, for the reason [`Sleeper`] gives.
    word: Futex,
}

const AWAKE: u32 = 0;
const ASLEEP: u32 = 1;

impl Park for SharedSleeper {
    fn announce(&self, sleeping: bool) {
        let word = if sleeping { ASLEEP } else { AWAKE };
        self.word.word().swap(word, Ordering::Relaxed);
    }

    /// Any word but 0 counts as asleep: a peer that wrote garbage there costs a spurious
    /// wake-up, nothing more.
    fn claim(&self) -> bool {
        let word = self.word.word();
        word.load(Ordering::Relaxed) != AWAKE && word.swap(AWAKE, Ordering::AcqRel) != AWAKE
    }

    /// Sleeps only while the word still says asleep: a waker that claimed it first makes the
    /// kernel return at once.
    fn park(&self, slice: Duration) {
        self.word.wait(ASLEEP, slice);
    }
}

impl SharedSleeper {
    pub(crate) fn new() -> SharedSleeper {
        SharedSleeper {
            word: Futex::new(AWAKE),
        }
    }

    /// Wakes the waiter if it announced that it sleeps on this word; otherwise costs a fence
    /// and one load.
    pub(crate) fn wake(&self) {
        fence(Ordering::SeqCst); // pairs with the fence in `wait_for`
        self.wake_fenced();
    }

    /// [`SharedSleeper::wake`] for a caller that already issued `fence(SeqCst)` after making
    /// its progress visible.
    pub(crate) fn wake_fenced(&self) {
        if self.claim() {
            self.word.wake_one();
        }
    }

    /// Waits until `poll` gives a value, parked on the futex in slices of at most `slice`
    /// between calls to `check`. One waiter per word.
    pub(crate) fn wait<T>(
        &self,
        policy: SpinPolicy,
        slice: Duration,
        deadline: Deadline,
        what: impl Fn() -> String,
        check: impl FnMut() -> Result<()>,
        poll: impl FnMut() -> Option<T>,
    ) -> Result<T> {
        wait_for(self, policy, (slice, slice), deadline, what, check, poll)
    }
}
