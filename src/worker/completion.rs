//! A one-shot reply from a worker to the thread that waits for it.

use crate::channel::Deadline;
use crate::channel::{Sleeper, SpinPolicy};
use crate::device::cpu::current_cpu;
use crate::object::Result;
use crate::sync::atomic::{AtomicU8, Ordering};
use crate::sync::thread::{self, Thread};
use crate::sync::{Arc, Mutex};

const PENDING: u8 = 0;
const CLAIMED: u8 = 1;
const DONE: u8 = 2;
const ABANDONED: u8 = 3;

/// Filled once by a worker, waited for by the thread that made it.
pub struct Completion<T> {
    state: AtomicU8,
    value: Mutex<Option<T>>,
    waiter: Thread,
    /// The CPU the waiter ran on when it made (or reused) the request.
    waiter_cpu: Option<usize>,
    sleeper: Sleeper,
}

impl<T> Completion<T> {
    /// A completion the calling thread will wait for.
    pub fn new() -> Self {
        Completion {
            state: AtomicU8::new(PENDING),
            value: Mutex::new(None),
            waiter: thread::current(),
            waiter_cpu: current_cpu(),
            sleeper: Sleeper::default(),
        }
    }

    /// A fresh completion, reusing `old` when nobody else holds it any more.
    pub fn reuse(old: Option<Arc<Self>>) -> Arc<Self> {
        match old {
            Some(mut old) => match Arc::get_mut(&mut old) {
                Some(slot) => {
                    slot.state.store(PENDING, Ordering::Relaxed);
                    slot.waiter_cpu = current_cpu();
                    *slot.value.get_mut().unwrap_or_else(|e| e.into_inner()) = None;
                    old
                }
                None => Arc::new(Self::new()),
            },
            None => Arc::new(Self::new()),
        }
    }

    /// A completion answered on behalf of a waiter in another process, whose CPU this process
    /// cannot know.
    pub fn for_peer() -> Self {
        Completion {
            waiter_cpu: None,
            ..Self::new()
        }
    }

    /// The reply, if it was delivered (taken once).
    pub fn try_take(&self) -> Option<T> {
        (self.state.load(Ordering::Acquire) == DONE)
            .then(|| self.value.lock().unwrap_or_else(|e| e.into_inner()).take())
            .flatten()
    }

    /// Gives up on the reply unless a worker already claimed it; whether it gave up.
    pub fn abandon(&self) -> bool {
        self.state
            .compare_exchange(PENDING, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The CPU the waiter ran on when it made the request.
    pub fn waiter_cpu(&self) -> Option<usize> {
        self.waiter_cpu
    }

    /// The worker claims the request before acting on memory the waiter owns; false when the
    /// waiter gave up (timed out), in which case the worker must not touch that memory.
    pub fn claim(&self) -> bool {
        self.state
            .compare_exchange(PENDING, CLAIMED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Delivers the reply and wakes the waiter if it sleeps.
    pub fn complete(&self, value: T) {
        *self.value.lock().unwrap_or_else(|e| e.into_inner()) = Some(value);
        self.state.store(DONE, Ordering::Release);
        self.sleeper.wake(&self.waiter);
    }

    /// Waits for the reply. On timeout the request is abandoned unless a worker already claimed
    /// it, in which case the wait goes on until that worker finishes (it is working on memory the
    /// caller owns, and finishing is bounded).
    pub fn wait(
        &self,
        policy: SpinPolicy,
        deadline: Deadline,
        what: impl Fn() -> String,
        mut check: impl FnMut() -> Result<()>,
    ) -> Result<T> {
        let poll = || self.try_take();
        match self.sleeper.wait(policy, deadline, &what, &mut check, poll) {
            Err(timeout) if self.abandon() => Err(timeout),
            Err(_) => self
                .sleeper
                .wait(policy, Deadline::NEVER, what, check, poll),
            Ok(value) => Ok(value),
        }
    }
}
