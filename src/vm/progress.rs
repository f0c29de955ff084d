//! How far a stream has got: the sequence number of its last finished instruction, and the
//! threads waiting for it to pass a given number (other executors, `sync` callers).
//!
//! The executor publishes each number with a store and a fence, then looks at one flag; only
//! when a waiter announced that it sleeps does it take the lock and unpark. Waiters spin
//! briefly, yield, then park (the policy `wait.rs` measured for these machines).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};
use std::sync::{Mutex, PoisonError};
use std::thread::Thread;
use std::time::{Duration, Instant};

use crate::channel::SpinPolicy;

/// PAUSEs before yielding (as the single-waiter policy does).
const PAUSES: u32 = 31;
/// Yield for this long before parking.
const YIELD_BUDGET: Duration = SpinPolicy::DEFAULT_BUDGET;
/// A parked waiter re-checks at least this often.
const PARK_SLICE: Duration = Duration::from_millis(20);

#[derive(Default)]
pub(crate) struct Progress {
    done: AtomicU64,
    watched: AtomicBool,
    watchers: Mutex<Vec<Thread>>,
}

impl Progress {
    /// The last finished sequence number.
    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Acquire)
    }

    /// Publishes `seq` as finished and wakes the threads that sleep waiting for progress.
    pub fn advance(&self, seq: u64) {
        self.done.store(seq, Ordering::Release);
        fence(Ordering::SeqCst); // pairs with the fence in `wait_for`
        if self.watched.load(Ordering::Relaxed) {
            let mut watchers = self.watchers.lock().unwrap_or_else(PoisonError::into_inner);
            self.watched.store(false, Ordering::Relaxed);
            for thread in watchers.drain(..) {
                thread.unpark();
            }
        }
    }

    /// Returns once `done() >= seq`.
    pub fn wait_for(&self, seq: u64) {
        if self.done() >= seq {
            return;
        }
        for _ in 0..PAUSES {
            std::hint::spin_loop();
            if self.done() >= seq {
                return;
            }
        }
        let spin_end = Instant::now() + YIELD_BUDGET;
        while Instant::now() < spin_end {
            std::thread::yield_now();
            if self.done() >= seq {
                return;
            }
        }
        let me = std::thread::current();
        loop {
            {
                let mut watchers = self.watchers.lock().unwrap_or_else(PoisonError::into_inner);
                if !watchers.iter().any(|t| t.id() == me.id()) {
                    watchers.push(me.clone());
                }
                self.watched.store(true, Ordering::Relaxed);
            }
            fence(Ordering::SeqCst);
            if self.done() >= seq {
                return;
            }
            std::thread::park_timeout(PARK_SLICE);
            if self.done() >= seq {
                return;
            }
        }
    }
}
