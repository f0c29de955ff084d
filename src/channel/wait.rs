//! How a thread waits for another on a 2-vCPU machine: a short PAUSE spin (enough for a
//! cross-core round trip), then `yield_now` until the spin budget runs out (a yielding waiter
//! hands its vCPU to runnable threads, which matters when workers outnumber cores), then park.
//! The thread that makes progress wakes a waiter only when it announced that it sleeps.

use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::object::{Error, ErrorKind, Result};
use crate::sync::atomic::{AtomicBool, Ordering, fence};
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
const PARK_SLICE: Duration = Duration::from_millis(20);

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

/// The "I am asleep" flag of one waiting thread.
#[derive(Default)]
pub struct Sleeper {
    /// Written only by swaps, by the waiter too: each write then reads the one before, which
    /// orders it after a waker's concurrent swap in the model checker as on hardware (loom
    /// cannot order a plain store against a swap it did not see, and would report lost
    /// wake-ups that cannot happen). The waiter swaps only on its way to and from a park.
    sleeping: CachePadded<AtomicBool>,
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
        if self.sleeping.load(Ordering::Relaxed) && self.sleeping.swap(false, Ordering::AcqRel) {
            thread.unpark();
        }
    }

    /// Waits until `poll` gives a value. `check` runs while parked (at least every 20 ms) and
    /// may end the wait with an error (the peer is gone); a deadline ends it with a timeout.
    /// Only the thread `wake` is given may call this.
    pub fn wait<T>(
        &self,
        policy: SpinPolicy,
        deadline: Option<Instant>,
        what: impl Fn() -> String,
        mut check: impl FnMut() -> Result<()>,
        mut poll: impl FnMut() -> Option<T>,
    ) -> Result<T> {
        loop {
            if let Some(value) = poll() {
                return Ok(value);
            }
            if !policy.budget.is_zero() {
                for _ in 0..PAUSES {
                    crate::sync::spin_loop();
                    if let Some(value) = poll() {
                        return Ok(value);
                    }
                }
                let spin_end = Instant::now() + policy.budget;
                while Instant::now() < spin_end {
                    thread::yield_now();
                    if let Some(value) = poll() {
                        return Ok(value);
                    }
                }
            }
            self.sleeping.swap(true, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            if let Some(value) = poll() {
                self.sleeping.swap(false, Ordering::Relaxed);
                return Ok(value);
            }
            let slice = match deadline {
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        self.sleeping.swap(false, Ordering::Relaxed);
                        return Err(Error::new(
                            ErrorKind::Timeout,
                            format!("{} timed out", what()),
                        ));
                    }
                    (deadline - now).min(PARK_SLICE)
                }
                None => PARK_SLICE,
            };
            thread::park_timeout(slice);
            self.sleeping.swap(false, Ordering::Relaxed);
            check()?;
        }
    }
}
