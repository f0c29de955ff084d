//! Models of the shared-memory ring's waits: the consumer waiting for a frame and the producer
//! waiting for room each announce that they sleep on their futex word, fence and poll once
//! more before they sleep; the other side publishes its position, fences and wakes the futex
//! only if it saw the announcement. The futex is modelled with loom's lock and condition
//! variable (`crate::sync::futex`), and in a model a timed wait has no timeout, so a lost
//! wake-up leaves a side asleep for good, which loom reports as a deadlock: each model passing
//! shows that no interleaving loses a frame's or a release's wake-up.
//!
//! The two ends run on two threads over model memory; the ring code is the real one.

use std::sync::Arc;
use std::time::Duration;

use super::{Consumer, Producer, init_ring, ring_bytes};
use crate::channel::Deadline;
use crate::channel::shm::SharedMemory;
use crate::channel::wait::SpinPolicy;
use crate::sync::explore;
use loom::thread::spawn;

const PARK_AT_ONCE: SpinPolicy = SpinPolicy {
    budget: Duration::ZERO,
};

/// Both ends of a ring of 128 bytes (the smallest), so a few frames fill it.
fn ring() -> (Producer, Consumer) {
    let mut memory = SharedMemory::create("model", ring_bytes(128).unwrap()).unwrap();
    init_ring(&mut memory, 0, 128).unwrap();
    let memory = Arc::new(memory);
    (
        Producer::attach(memory.clone(), 0).unwrap(),
        Consumer::attach(memory, 0).unwrap(),
    )
}

/// A consumer thread receives one frame of each length in `lens` while this thread sends
/// them; every frame arrives whole and in order.
fn send_and_receive(lens: &'static [usize], policy: SpinPolicy) {
    let (mut producer, mut consumer) = ring();
    let receiver = spawn(move || {
        for (i, &len) in lens.iter().enumerate() {
            let frame = consumer.recv(policy, Deadline::NEVER, || Ok(())).unwrap();
            assert_eq!(frame.len(), len, "frame {i}");
            assert!(frame.iter().all(|&b| b == i as u8), "frame {i}");
        }
    });
    for (i, &len) in lens.iter().enumerate() {
        producer
            .send_with(
                len,
                policy,
                Deadline::NEVER,
                || Ok(()),
                |buf| buf.fill(i as u8),
            )
            .unwrap();
    }
    receiver.join().unwrap();
}

/// Two frames that both fit: only the consumer can wait.
#[test]
fn a_consumer_that_parks_at_once_is_woken_for_each_frame() {
    explore("ring: consumer parks at once", None, || {
        send_and_receive(&[8, 16], PARK_AT_ONCE)
    });
}

/// Three records of 64 bytes in 128: the third waits for the consumer to release the first.
#[test]
fn a_producer_waiting_for_room_is_woken_by_the_release() {
    explore("ring: producer waits for room", Some(4), || {
        send_and_receive(&[56, 56, 56], PARK_AT_ONCE)
    });
}

/// Records of 32 and 56 bytes, then one of 104 with 40 bytes left before the end: the pad
/// that fills them is published (with a wake-up) on its own, and the last frame waits until
/// the consumer has skipped it.
#[test]
fn a_frame_behind_a_pad_waits_for_the_pad_to_be_skipped() {
    explore("ring: frame behind a pad", Some(3), || {
        send_and_receive(&[24, 48, 96], PARK_AT_ONCE)
    });
}

/// Both ends spin and yield first, then park.
#[test]
fn ends_that_spin_first_are_woken_too() {
    explore("ring: both ends spin then park", Some(4), || {
        send_and_receive(&[56, 56, 56], SpinPolicy::default())
    });
}
