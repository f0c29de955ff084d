//! A bounded lock-free queue with one consumer thread that spins, yields, then parks; producers
//! wake it only when it sleeps. Between processes, [`ring`](crate::channel::ring) carries byte
//! frames the same way, in [`shm`](crate::channel::shm) shared memory, with the same waiting
//! policy (parking on a futex there).

use std::sync::OnceLock;

pub(crate) mod deadline;
#[cfg(all(test, loom))]
mod loom_model;
pub mod ring;
pub mod shm;
mod wait;

use crate::object::Result;
use crate::sync::ArrayQueue;
use crate::sync::atomic::{Ordering, fence};
use crate::sync::thread::Thread;
pub use deadline::Deadline;
#[cfg(not(loom))]
pub(crate) use wait::spin_briefly;
pub(crate) use wait::{PARK_SLICE, SharedSleeper, Sleepers};
pub use wait::{Sleeper, SpinPolicy};

pub struct Channel<T> {
    queue: ArrayQueue<T>,
    consumer: OnceLock<Thread>,
    sleeper: Sleeper,
    /// Producers waiting for room wait on this.
    room: Sleeper,
}

impl<T> Channel<T> {
    pub fn new(capacity: usize) -> Self {
        Channel {
            queue: ArrayQueue::new(capacity.max(1)),
            consumer: OnceLock::new(),
            sleeper: Sleeper::default(),
            room: Sleeper::default(),
        }
    }

    /// Names the consumer thread; call once, from it, before it receives.
    pub fn set_consumer(&self, thread: Thread) {
        let _ = self.consumer.set(thread);
    }

    /// Wakes the consumer if it sleeps. The fence comes before looking for the consumer: one
    /// that names itself while the value arrives is then either found here or finds the value
    /// when it polls after announcing its sleep.
    fn wake_consumer(&self) {
        fence(Ordering::SeqCst);
        self.wake_fenced();
    }

    /// Wakes the consumer if it sleeps; the caller issued `fence(SeqCst)` after its pushes.
    pub fn wake_fenced(&self) {
        if let Some(consumer) = self.consumer.get() {
            self.sleeper.wake_fenced(consumer);
        }
    }

    /// Queues `value` without waking the consumer: follow with a fence and `wake_fenced`, or
    /// leave it for the next message that wakes the consumer. A full queue waits for room
    /// (spin, yield, short parks), ending with an error when `check` says the consumer is gone
    /// or the deadline passes.
    pub fn push(
        &self,
        value: T,
        policy: SpinPolicy,
        deadline: Deadline,
        check: impl FnMut() -> Result<()>,
    ) -> Result<()> {
        let mut pending = match self.queue.push(value) {
            Ok(()) => return Ok(()),
            Err(back) => Some(back),
        };
        // Full: keep the consumer awake and retry. The consumer does not wake senders (that
        // would cost every receive a fence), so the wait below parks in short slices.
        self.room.wait_unwoken(
            policy,
            deadline,
            || "sending to a full worker queue".to_string(),
            check,
            || {
                self.wake_consumer();
                match self
                    .queue
                    .push(pending.take().expect("the value is still ours"))
                {
                    Ok(()) => Some(()),
                    Err(back) => {
                        pending = Some(back);
                        None
                    }
                }
            },
        )?;
        self.wake_consumer();
        Ok(())
    }

    /// Queues `value` without waiting and without waking the consumer, or gives it back when
    /// the queue is full.
    pub fn try_push(&self, value: T) -> std::result::Result<(), T> {
        self.queue.push(value)
    }

    /// Queues `value` and wakes the consumer if it sleeps.
    pub fn send(
        &self,
        value: T,
        policy: SpinPolicy,
        deadline: Deadline,
        check: impl FnMut() -> Result<()>,
    ) -> Result<()> {
        self.push(value, policy, deadline, check)?;
        self.wake_consumer();
        Ok(())
    }

    /// Receives the next value, waiting as long as it takes (the consumer thread only).
    pub fn recv(&self, policy: SpinPolicy) -> T {
        self.recv_with(policy, || {})
    }

    /// [`Channel::recv`], running `before_park` each time the wait is about to park (the
    /// consumer then has had nothing to do for a while).
    /// The next value, if one is there; never waits (the consumer's only).
    pub fn try_recv(&self) -> Option<T> {
        self.queue.pop()
    }

    pub fn recv_with(&self, policy: SpinPolicy, mut before_park: impl FnMut()) -> T {
        self.sleeper
            .wait(
                policy,
                Deadline::NEVER,
                String::new,
                || {
                    before_park();
                    Ok(())
                },
                || self.queue.pop(),
            )
            .expect("a wait without deadline or failing check cannot fail")
    }
}
