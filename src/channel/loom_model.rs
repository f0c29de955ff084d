//! Models of the channel's wait: the consumer announces that it sleeps, fences and polls once
//! more before it parks; a producer pushes, fences and wakes the consumer only if it saw that
//! announcement. In a model a park has no timeout, so a lost wake-up leaves the consumer
//! parked for good, which loom reports as a deadlock: each model passing shows that no
//! interleaving loses a message's wake-up or leaves a thread asleep with work queued.
//!
//! Waiting for room in a full queue is left out: it re-polls on a timer by design (the
//! consumer never wakes producers), and a model has no timer.

use std::time::Duration;

use super::{Channel, SpinPolicy};
use crate::channel::Deadline;
use crate::sync::atomic::{Ordering, fence};
use crate::sync::{Arc, explore, thread};
use loom::thread::spawn;

const PARK_AT_ONCE: SpinPolicy = SpinPolicy {
    budget: Duration::ZERO,
};

/// A consumer thread that names itself and receives `count` values.
fn consumer(
    channel: &Arc<Channel<u32>>,
    policy: SpinPolicy,
    count: usize,
) -> thread::JoinHandle<Vec<u32>> {
    let channel = channel.clone();
    spawn(move || {
        channel.set_consumer(thread::current());
        (0..count).map(|_| channel.recv(policy)).collect()
    })
}

/// One producer queues a value without waking (as a register's release does) and then sends
/// one; another sends one. The consumer, which may not have named itself yet, gets all three,
/// the first producer's in order.
fn two_producers(policy: SpinPolicy) {
    let channel = Arc::new(Channel::new(4));
    let consumer = consumer(&channel, policy, 3);
    let producer = {
        let channel = channel.clone();
        spawn(move || channel.send(3, policy, Deadline::NEVER, || Ok(())).unwrap())
    };
    channel.push(1, policy, Deadline::NEVER, || Ok(())).unwrap();
    channel.send(2, policy, Deadline::NEVER, || Ok(())).unwrap();
    producer.join().unwrap();
    let received = consumer.join().unwrap();
    let mine: Vec<u32> = received.iter().copied().filter(|&v| v != 3).collect();
    assert_eq!(mine, [1, 2], "received {received:?}");
    assert!(received.contains(&3), "received {received:?}");
}

#[test]
fn two_producers_wake_a_consumer_that_parks_at_once() {
    explore(
        "channel: two producers, consumer parks at once",
        Some(3),
        || two_producers(PARK_AT_ONCE),
    );
}

#[test]
fn two_producers_wake_a_consumer_that_spins_first() {
    explore(
        "channel: two producers, consumer spins then parks",
        Some(2),
        || two_producers(SpinPolicy::default()),
    );
}

/// A broadcast as the session sends it: queued on every consumer's channel, then one fence,
/// then a wake for each consumer that sleeps.
#[test]
fn one_fence_covers_a_broadcast_to_two_consumers() {
    explore("channel: fenced broadcast to two consumers", None, || {
        let channels = [Arc::new(Channel::new(2)), Arc::new(Channel::new(2))];
        let consumers: Vec<_> = channels
            .iter()
            .map(|c| consumer(c, PARK_AT_ONCE, 1))
            .collect();
        for channel in &channels {
            channel
                .push(7, PARK_AT_ONCE, Deadline::NEVER, || Ok(()))
                .unwrap();
        }
        fence(Ordering::SeqCst);
        for channel in &channels {
            channel.wake_fenced();
        }
        for consumer in consumers {
            assert_eq!(consumer.join().unwrap(), [7]);
        }
    });
}
