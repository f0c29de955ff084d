//! The bounded queue's stand-in in models: crossbeam's `ArrayQueue` is built on atomics loom
//! cannot see, so this one is built the same way on loom's, for the channel's one consumer.
//!
//! The one idea: a producer reserves a slot by moving the tail, writes the value and then
//! publishes the slot with a release store; the consumer takes the head slot only once it sees
//! that store with an acquire load, so each value it takes happens after its push.

use std::sync::Mutex;

use super::atomic::{AtomicBool, AtomicUsize, Ordering, fence};

/// The most values a queue holds in a model (each slot is an atomic the model tracks).
const MODEL_CAPACITY: usize = 16;

struct Slot<T> {
    published: AtomicBool,
    value: Mutex<Option<T>>,
}

/// A bounded queue of at most [`MODEL_CAPACITY`] values, for one consumer.
///
/// A pop finds the queue empty only when no push has reserved the head slot; one that has, it
/// waits for. A pop racing a push may miss it. The values themselves sit behind a lock the
/// model does not see, taken between two model steps only. A model that fills the queue makes
/// a producer wait for room, which re-polls on a timer and deadlocks in a model, so models send
/// fewer.
pub struct ArrayQueue<T> {
    slots: Box<[Slot<T>]>,
    /// The next slot to take; moved by the consumer only.
    head: AtomicUsize,
    /// The next slot to reserve.
    tail: AtomicUsize,
}

impl<T> ArrayQueue<T> {
    pub fn new(capacity: usize) -> Self {
        assert!(capacity > 0, "capacity must be non-zero");
        let slots = (0..capacity.min(MODEL_CAPACITY))
            .map(|_| Slot {
                published: AtomicBool::new(false),
                value: Mutex::new(None),
            })
            .collect();
        ArrayQueue {
            slots,
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
        }
    }

    pub fn push(&self, value: T) -> Result<(), T> {
        let capacity = self.slots.len();
        let mut tail = self.tail.load(Ordering::Relaxed);
        loop {
            // An older tail than the head read here is behind the pops: the queue is not full,
            // and the reservation below fails and reads the tail again.
            let head = self.head.load(Ordering::Acquire);
            if tail.saturating_sub(head) >= capacity {
                return Err(value);
            }
            match self
                .tail
                .compare_exchange(tail, tail + 1, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => tail = now,
            }
        }
        let slot = &self.slots[tail % capacity];
        *slot.value.lock().expect("no model panics while holding it") = Some(value);
        slot.published.store(true, Ordering::Release);
        Ok(())
    }

    pub fn pop(&self) -> Option<T> {
        let head = self.head.load(Ordering::Relaxed);
        let slot = &self.slots[head % self.slots.len()];
        while !slot.published.load(Ordering::Acquire) {
            // Empty, unless a push reserved the slot and is still writing it: then wait for
            // that push, as crossbeam's pop does, rather than report a queue with values in
            // it as empty.
            fence(Ordering::SeqCst);
            if self.tail.load(Ordering::Relaxed) == head {
                return None;
            }
            super::spin_loop();
        }
        let value = slot
            .value
            .lock()
            .expect("no model panics while holding it")
            .take();
        slot.published.store(false, Ordering::Relaxed);
        self.head.store(head + 1, Ordering::Release);
        value
    }
}
