//! How far a stream has got: the sequence number of its last finished instruction, and the
//! threads waiting for it to pass a given number (other executors, `sync` callers).
//!
//! The executor publishes each number, then wakes the waiters that announced they sleep; they
//! wait by the library's one policy (spin, yield, then park).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::channel::Deadline;
use crate::channel::{Sleepers, SpinPolicy};

#[derive(Default)]
pub(crate) struct Progress {
    done: AtomicU64,
    sleepers: Sleepers,
}

impl Progress {
    /// The last finished sequence number.
    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Acquire)
    }

    /// Publishes `seq` as finished and wakes the threads that sleep waiting for progress.
    pub fn advance(&self, seq: u64) {
        self.done.store(seq, Ordering::Release);
        self.sleepers.wake_all();
    }

    /// Returns once `done() >= seq`.
    pub fn wait_for(&self, seq: u64) {
        self.sleepers
            .wait(
                SpinPolicy::default(),
                Deadline::NEVER,
                String::new,
                || Ok(()),
                || (self.done() >= seq).then_some(()),
            )
            .expect("a wait without deadline cannot fail");
    }
}
