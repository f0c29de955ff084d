//! The ring within one process: frames of every size across the end of the ring, waits for
//! room and for frames (woken by the peer, not by the check interval), errors for frames that
//! never fit, corrupt headers, failing checks and deadlines, and the shared memory under it.

mod process;

use std::mem::offset_of;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32 as PlainU32, AtomicU64 as PlainU64, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::layout::{FRAME, HEADER_BYTES, Header, Layout, PAD, VERSION, record_word};
use super::*;
use crate::channel::Deadline;
use crate::channel::shm::SharedMemory;
use crate::channel::wait::SpinPolicy;
use crate::object::{Error, ErrorKind, Result};

/// Long enough for any of these tests on a loaded machine; ends a wait that went wrong.
const PATIENCE: Duration = Duration::from_secs(60);

fn deadline() -> Deadline {
    Deadline::after(Some(PATIENCE))
}

fn alive() -> Result<()> {
    Ok(())
}

const PARK_AT_ONCE: SpinPolicy = SpinPolicy {
    budget: Duration::ZERO,
};

/// A ring of `capacity` bytes at offset 0 of its own shared memory, and both its ends.
fn ring(capacity: usize) -> (Arc<SharedMemory>, Producer, Consumer) {
    let mut memory = SharedMemory::create("ring-test", ring_bytes(capacity).unwrap()).unwrap();
    init_ring(&mut memory, 0, capacity).unwrap();
    let memory = Arc::new(memory);
    let producer = Producer::attach(memory.clone(), 0).unwrap();
    let consumer = Consumer::attach(memory.clone(), 0).unwrap();
    (memory, producer, consumer)
}

/// The bytes of frame `seed`: different for every frame and every position in it.
pub(super) fn fill(buf: &mut [u8], seed: u64) {
    let x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for (j, byte) in buf.iter_mut().enumerate() {
        *byte = (x >> ((j % 8) * 8)) as u8 ^ (j / 8) as u8;
    }
}

/// Whether `buf` holds frame `seed`.
pub(super) fn holds(buf: &[u8], seed: u64) -> bool {
    let x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    buf.iter()
        .enumerate()
        .all(|(j, &byte)| byte == (x >> ((j % 8) * 8)) as u8 ^ (j / 8) as u8)
}

/// A u32 of the header, by its offset in `Header`.
fn header_u32(memory: &SharedMemory, field: usize) -> &PlainU32 {
    // SAFETY: the field lies inside the ring at offset 0 of the mapping, 4-aligned, and the
    // mapping lives as long as the borrow.
    unsafe { PlainU32::from_ptr(memory.as_ptr().add(field).cast()) }
}

/// A u64 of the ring, by its offset from the ring's start.
fn ring_u64(memory: &SharedMemory, at: usize) -> &PlainU64 {
    // SAFETY: as in `header_u32`, 8-aligned.
    unsafe { PlainU64::from_ptr(memory.as_ptr().add(at).cast()) }
}

const HEAD: usize = offset_of!(Header, head);
const TAIL: usize = offset_of!(Header, tail);
const READABLE: usize = offset_of!(Header, readable);
const WRITABLE: usize = offset_of!(Header, writable);

/// Waits until the futex word at `field` says its waiter sleeps.
fn until_asleep(memory: &SharedMemory, field: usize) {
    let end = Instant::now() + PATIENCE;
    while header_u32(memory, field).load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(Instant::now() < end, "the waiter never parked");
        thread::yield_now();
    }
}

/// Frames of every length the ring takes, at every offset. Those longer than half the ring
/// can need the consumer to skip a pad before they fit, so the consumer has a thread.
#[test]
fn frames_of_every_size_cross_the_end_of_the_ring() {
    const ROUNDS: u64 = 7;
    let (_memory, mut producer, mut consumer) = ring(256);
    let max = producer.max_frame();
    assert_eq!(max, 248);
    let receiver = thread::spawn(move || {
        for seed in 0..ROUNDS * (max as u64 + 1) {
            let frame = consumer.recv(PARK_AT_ONCE, deadline(), alive).unwrap();
            assert_eq!(frame.len(), seed as usize % (max + 1));
            assert!(holds(&frame, seed), "frame {seed}");
        }
        assert!(consumer.try_recv().unwrap().is_none());
        consumer
    });
    for seed in 0..ROUNDS * (max as u64 + 1) {
        let len = seed as usize % (max + 1);
        producer
            .send_with(len, PARK_AT_ONCE, deadline(), alive, |buf| fill(buf, seed))
            .unwrap();
    }
    let mut consumer = receiver.join().unwrap();
    let mut seed = 0;
    // Several small frames in the ring at once, at every offset.
    for round in 0..2000 {
        let lens: Vec<usize> = (0..4).map(|k| (round * 7 + k * 13) % 41).collect();
        for (k, &len) in lens.iter().enumerate() {
            producer
                .send_with(len, PARK_AT_ONCE, deadline(), alive, |buf| {
                    fill(buf, seed + k as u64)
                })
                .unwrap();
        }
        for (k, &len) in lens.iter().enumerate() {
            let frame = consumer.try_recv().unwrap().expect("a frame was sent");
            assert_eq!(frame.len(), len);
            assert!(holds(&frame, seed + k as u64));
        }
        assert!(consumer.try_recv().unwrap().is_none());
        seed += lens.len() as u64;
    }
}

#[test]
fn a_stream_between_two_threads_keeps_every_byte_in_order() {
    const FRAMES: u64 = 50_000;
    let (_memory, mut producer, mut consumer) = ring(1024);
    let sender = thread::spawn(move || {
        for i in 0..FRAMES {
            let len = (i as usize * 37) % (producer.max_frame() + 1);
            producer
                .send_with(len, SpinPolicy::default(), deadline(), alive, |buf| {
                    fill(buf, i)
                })
                .unwrap();
        }
    });
    for i in 0..FRAMES {
        let frame = consumer
            .recv(SpinPolicy::default(), deadline(), alive)
            .unwrap();
        assert_eq!(frame.len(), (i as usize * 37) % 1017, "frame {i}");
        assert!(holds(&frame, i), "frame {i}");
    }
    sender.join().unwrap();
}

/// The waiter parks with a check interval far longer than the test's patience, so only the
/// peer's wake-up can end its wait in time.
#[test]
fn a_full_ring_waits_for_room_and_the_consumer_wakes_it() {
    let (memory, mut producer, mut consumer) = ring(256);
    producer.set_check_interval(Duration::from_secs(3600));
    producer
        .send(&[1; 120], PARK_AT_ONCE, Deadline::NEVER, alive)
        .unwrap();
    producer
        .send(&[2; 120], PARK_AT_ONCE, Deadline::NEVER, alive)
        .unwrap();
    let checks = Arc::new(AtomicUsize::new(0));
    let counted = checks.clone();
    let sender = thread::spawn(move || {
        let result = producer.send(&[3; 8], PARK_AT_ONCE, deadline(), || {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        });
        (producer, result)
    });
    until_asleep(&memory, WRITABLE);
    assert_eq!(&*consumer.try_recv().unwrap().unwrap(), &[1; 120]);
    let (_producer, result) = sender.join().unwrap();
    result.unwrap();
    // A look before it parked and one after it was woken: no timer woke it.
    assert!(checks.load(std::sync::atomic::Ordering::Relaxed) <= 2);
    assert_eq!(&*consumer.try_recv().unwrap().unwrap(), &[2; 120]);
    assert_eq!(&*consumer.try_recv().unwrap().unwrap(), &[3; 8]);
}

#[test]
fn a_consumer_parked_on_an_empty_ring_is_woken_by_a_send() {
    let (memory, mut producer, mut consumer) = ring(256);
    consumer.set_check_interval(Duration::from_secs(3600));
    let receiver = thread::spawn(move || {
        consumer
            .recv(PARK_AT_ONCE, deadline(), alive)
            .map(|f| f.to_vec())
    });
    until_asleep(&memory, READABLE);
    producer
        .send(b"wake up", PARK_AT_ONCE, Deadline::NEVER, alive)
        .unwrap();
    assert_eq!(receiver.join().unwrap().unwrap(), b"wake up");
}

/// A frame that needs the room its pad takes: the pad is published (and the consumer woken)
/// on its own, and the frame follows once the consumer skipped it.
#[test]
fn a_frame_behind_a_pad_waits_for_the_consumer_to_skip_the_pad() {
    let (memory, mut producer, mut consumer) = ring(256);
    consumer.set_check_interval(Duration::from_secs(3600));
    producer
        .send(&[7; 64], PARK_AT_ONCE, Deadline::NEVER, alive)
        .unwrap(); // offset 0..72
    drop(consumer.try_recv().unwrap().unwrap());
    // 184 bytes before the end; a 200-byte record needs the pad's room too.
    let receiver = thread::spawn(move || {
        consumer
            .recv(PARK_AT_ONCE, deadline(), alive)
            .map(|f| f.to_vec())
    });
    until_asleep(&memory, READABLE);
    producer
        .send(&[9; 192], PARK_AT_ONCE, deadline(), alive)
        .unwrap();
    assert_eq!(receiver.join().unwrap().unwrap(), [9; 192]);
}

#[test]
fn a_reservation_larger_than_the_ring_is_an_error() {
    let (_memory, mut producer, mut consumer) = ring(128);
    let error = producer
        .send_with(121, PARK_AT_ONCE, deadline(), alive, |_| ())
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::Value);
    assert_eq!(
        error.message,
        "a frame of 121 bytes can never fit in a ring of 128 bytes (at most 120 bytes a frame)"
    );
    producer
        .send(&[5; 120], PARK_AT_ONCE, deadline(), alive)
        .unwrap();
    assert_eq!(&*consumer.try_recv().unwrap().unwrap(), &[5; 120]);
}

#[test]
fn frames_larger_than_the_ring_cross_in_parts_among_whole_ones() {
    const FRAMES: u64 = 400;
    let (_memory, mut producer, mut consumer) = ring(1024);
    let len = |i: u64| (i as usize * 389) % 9000;
    let sender = thread::spawn(move || {
        let mut buf = vec![0u8; 9000];
        for i in 0..FRAMES {
            let frame = &mut buf[..len(i)];
            fill(frame, i);
            producer
                .send(frame, SpinPolicy::default(), deadline(), alive)
                .unwrap();
        }
    });
    for i in 0..FRAMES {
        let frame = consumer
            .recv(SpinPolicy::default(), deadline(), alive)
            .unwrap();
        assert_eq!(frame.len(), len(i), "frame {i}");
        assert!(holds(&frame, i), "frame {i}");
    }
    sender.join().unwrap();
    // Every part was released: the ring is empty again.
    assert!(consumer.try_recv().unwrap().is_none());
    // The memory the largest frame was gathered in stayed for the next one, through the
    // whole frames between them.
    assert!(
        consumer.gathered.capacity() >= len(23),
        "{}",
        consumer.gathered.capacity()
    );
}

#[test]
fn a_frame_in_parts_is_gathered_where_the_receiver_places_it() {
    let (_memory, mut producer, mut consumer) = ring(1024);
    let mut frame = vec![0u8; 5000];
    fill(&mut frame, 7);
    let sent = frame.clone();
    // The frame twice: longer than the ring, it goes in parts.
    let sender = thread::spawn(move || {
        for _ in 0..2 {
            producer
                .send(&sent, SpinPolicy::default(), deadline(), alive)
                .unwrap();
        }
    });
    // The receiver wants byte 24 of the frame on a 64-byte boundary.
    let place = |first: &[u8]| {
        assert_eq!(first, &frame[..first.len()], "the first part");
        Some((frame.len(), 24))
    };
    let mut received = consumer
        .recv_placed(SpinPolicy::default(), deadline(), alive, place)
        .unwrap();
    assert!(received[..] == frame[..]);
    let (block, range) = received.take_placed().unwrap();
    assert_eq!((block.as_ptr().addr() + range.start + 24) % 64, 0);
    assert!(block.as_slice()[range] == frame[..]);
    drop(received);
    // Parts that add up to another length than the receiver was told are refused.
    let err = consumer
        .recv_placed(SpinPolicy::default(), deadline(), alive, |_| {
            Some((4992, 0))
        })
        .err()
        .expect("refused");
    assert!(
        err.message.contains("4992 bytes it was placed for"),
        "{err}"
    );
    sender.join().unwrap();
}

#[test]
fn rings_are_made_only_with_valid_sizes_and_places() {
    for capacity in [0, 64, 100, 3 << 10, MAX_CAPACITY * 2] {
        let error = ring_bytes(capacity).unwrap_err();
        assert_eq!(error.kind, ErrorKind::Value, "{capacity}");
        assert!(error.message.contains("power of two"), "{}", error.message);
    }
    let mut memory = SharedMemory::create("ring-test", 4096).unwrap();
    let error = init_ring(&mut memory, 64, 128).unwrap_err();
    assert_eq!(error.message, "ring offset 64 is not a multiple of 128");
    let error = init_ring(&mut memory, 0, 4096).unwrap_err();
    assert!(error.message.contains("does not fit"), "{}", error.message);
    let memory = Arc::new(memory);
    let error = Consumer::attach(memory.clone(), 0).err().unwrap();
    assert_eq!(error.kind, ErrorKind::Runtime);
    assert!(
        error.message.contains("no ring at offset 0"),
        "{}",
        error.message
    );
    let error = Producer::attach(memory, 1 << 20).err().unwrap();
    assert!(error.message.contains("does not fit"), "{}", error.message);
}

/// What a misbehaving peer can write into the header or a record ends the call with an error.
#[test]
fn corrupt_headers_and_records_are_errors_not_crashes() {
    use std::sync::atomic::Ordering::SeqCst;

    let corrupt_layout = |field: usize, value: u64| {
        let (memory, _, _) = ring(256);
        ring_u64(&memory, field).store(value, SeqCst);
        let error = Consumer::attach(memory.clone(), 0).err().unwrap();
        assert_eq!(error.kind, ErrorKind::Runtime);
        assert!(
            error.message.starts_with("corrupt shared-memory ring"),
            "{}",
            error.message
        );
        error.message
    };
    assert!(corrupt_layout(0, 0).contains("no ring"));
    let capacity = offset_of!(Layout, capacity);
    assert!(corrupt_layout(capacity, 1 << 40).contains("power of two"));
    assert!(corrupt_layout(capacity, 1 << 20).contains("does not fit"));
    assert!(corrupt_layout(8, u64::from(VERSION + 1)).contains("layout version 2"));

    // The producer's position runs more than the ring ahead.
    let (memory, _producer, mut consumer) = ring(256);
    ring_u64(&memory, HEAD).store(264, SeqCst);
    let error = consumer.try_recv().err().unwrap();
    assert_eq!(
        error.message,
        "corrupt shared-memory ring: the producer's position 264 is outside 0..=256"
    );

    // A record longer than what was published, one of an unknown kind, a pad at offset 0.
    for word in [
        record_word(FRAME, 100),
        record_word(FRAME, u64::from(u32::MAX)),
        record_word(0x1234, 8),
        record_word(PAD, 248),
    ] {
        let (memory, _producer, mut consumer) = ring(256);
        ring_u64(&memory, HEADER_BYTES).store(word, SeqCst);
        ring_u64(&memory, HEAD).store(16, SeqCst);
        let error = consumer.try_recv().err().unwrap();
        assert!(
            error.message.contains("record"),
            "{word:#x}: {}",
            error.message
        );
    }

    // The consumer's position goes backwards, or past what was written.
    for tail in [8, 512] {
        let (memory, mut producer, mut consumer) = ring(256);
        producer
            .send(&[1; 200], PARK_AT_ONCE, Deadline::NEVER, alive)
            .unwrap();
        drop(consumer.try_recv().unwrap().unwrap());
        producer
            .send(&[1; 200], PARK_AT_ONCE, Deadline::NEVER, alive)
            .unwrap();
        ring_u64(&memory, TAIL).store(tail, SeqCst);
        let error = producer
            .send(&[1; 200], PARK_AT_ONCE, deadline(), alive)
            .unwrap_err();
        assert!(
            error.message.contains("the consumer's position"),
            "{tail}: {}",
            error.message
        );
    }

    // Garbage in a futex word costs a spurious wake-up at most.
    let (memory, mut producer, mut consumer) = ring(256);
    header_u32(&memory, READABLE).store(77, SeqCst);
    header_u32(&memory, WRITABLE).store(u32::MAX, SeqCst);
    producer
        .send(b"still works", PARK_AT_ONCE, Deadline::NEVER, alive)
        .unwrap();
    let frame = consumer.recv(PARK_AT_ONCE, deadline(), alive).unwrap();
    assert_eq!(&*frame, b"still works");
}

#[test]
fn a_failing_check_ends_a_parked_wait_with_its_error() {
    let (_memory, mut producer, mut consumer) = ring(128);
    consumer.set_check_interval(Duration::from_millis(1));
    let mut checks = 0;
    let error = consumer
        .recv(PARK_AT_ONCE, deadline(), || {
            checks += 1;
            if checks < 3 {
                Ok(())
            } else {
                Err(Error::new(ErrorKind::Worker, "worker 1 (pid 42) exited"))
            }
        })
        .err()
        .unwrap();
    assert_eq!(
        error,
        Error::new(ErrorKind::Worker, "worker 1 (pid 42) exited")
    );
    assert_eq!(checks, 3);

    producer.set_check_interval(Duration::from_millis(1));
    producer
        .send(&[0; 120], PARK_AT_ONCE, Deadline::NEVER, alive)
        .unwrap();
    let error = producer
        .send(&[0; 8], PARK_AT_ONCE, deadline(), || {
            Err(Error::runtime("the peer is gone"))
        })
        .unwrap_err();
    assert_eq!(error, Error::runtime("the peer is gone"));
}

#[test]
fn a_deadline_ends_a_wait_with_a_timeout() {
    let (_memory, mut producer, mut consumer) = ring(128);
    let soon = Deadline::after(Some(Duration::from_millis(5)));
    let error = consumer
        .recv(SpinPolicy::default(), soon, alive)
        .err()
        .unwrap();
    assert_eq!(error.kind, ErrorKind::Timeout);
    assert_eq!(error.message, "receiving from a ring timed out");
    producer
        .send(&[0; 100], PARK_AT_ONCE, Deadline::NEVER, alive)
        .unwrap();
    let error = producer
        .send(&[0; 100], PARK_AT_ONCE, soon, alive)
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::Timeout);
    assert_eq!(
        error.message,
        "sending a 100-byte frame to a full ring timed out"
    );
}

/// The way several threads send to one ring: the producer behind a lock.
#[test]
fn senders_on_several_threads_share_the_producer_behind_a_lock() {
    const THREADS: u64 = 4;
    const EACH: u64 = 5_000;
    let (_memory, producer, mut consumer) = ring(512);
    let producer = Arc::new(Mutex::new(producer));
    let senders: Vec<_> = (0..THREADS)
        .map(|t| {
            let producer = producer.clone();
            thread::spawn(move || {
                for i in 0..EACH {
                    let frame = [t.to_le_bytes(), i.to_le_bytes()].concat();
                    producer
                        .lock()
                        .unwrap()
                        .send(&frame, SpinPolicy::default(), deadline(), alive)
                        .unwrap();
                }
            })
        })
        .collect();
    let mut next = [0u64; THREADS as usize];
    for _ in 0..THREADS * EACH {
        let frame = consumer
            .recv(SpinPolicy::default(), deadline(), alive)
            .unwrap();
        let t = u64::from_le_bytes(frame[..8].try_into().unwrap()) as usize;
        let i = u64::from_le_bytes(frame[8..].try_into().unwrap());
        assert_eq!(i, next[t], "thread {t}'s frames in order");
        next[t] += 1;
    }
    for sender in senders {
        sender.join().unwrap();
    }
}

#[test]
fn reservations_write_in_place_and_publishing_can_wait_for_one_wake_up() {
    let (_memory, mut producer, mut consumer) = ring(256);
    {
        let mut reservation = producer
            .reserve(5, PARK_AT_ONCE, Deadline::NEVER, alive)
            .unwrap();
        reservation.copy_from_slice(b"never");
    } // not committed: not sent
    assert!(consumer.try_recv().unwrap().is_none());
    let mut reservation = producer
        .reserve(3, PARK_AT_ONCE, Deadline::NEVER, alive)
        .unwrap();
    reservation.copy_from_slice(b"one");
    reservation.publish();
    let mut reservation = producer
        .reserve(3, PARK_AT_ONCE, Deadline::NEVER, alive)
        .unwrap();
    reservation.copy_from_slice(b"two");
    reservation.publish();
    producer.wake_consumer();
    assert_eq!(&*consumer.try_recv().unwrap().unwrap(), b"one");
    assert_eq!(&*consumer.try_recv().unwrap().unwrap(), b"two");
    let written = producer
        .send_with(4, PARK_AT_ONCE, Deadline::NEVER, alive, |buf| {
            buf.copy_from_slice(b"four");
            buf.len()
        })
        .unwrap();
    assert_eq!(written, 4);
    assert_eq!(&*consumer.try_recv().unwrap().unwrap(), b"four");
}

/// Two rings, one after the other in one mapping, stay apart.
#[test]
fn rings_side_by_side_in_one_mapping() {
    let bytes = ring_bytes(128).unwrap();
    let mut memory = SharedMemory::create("two-rings", 2 * bytes).unwrap();
    init_ring(&mut memory, 0, 128).unwrap();
    init_ring(&mut memory, bytes, 128).unwrap();
    let memory = Arc::new(memory);
    let mut first = Producer::attach(memory.clone(), 0).unwrap();
    let mut second = Producer::attach(memory.clone(), bytes).unwrap();
    first
        .send(&[1; 120], PARK_AT_ONCE, Deadline::NEVER, alive)
        .unwrap();
    second
        .send(&[2; 120], PARK_AT_ONCE, Deadline::NEVER, alive)
        .unwrap();
    let mut first = Consumer::attach(memory.clone(), 0).unwrap();
    let mut second = Consumer::attach(memory, bytes).unwrap();
    assert_eq!(&*second.try_recv().unwrap().unwrap(), &[2; 120]);
    assert_eq!(&*first.try_recv().unwrap().unwrap(), &[1; 120]);
}

#[test]
fn shared_memory_is_a_private_sealed_close_on_exec_memfd() {
    use std::os::unix::fs::PermissionsExt;

    let memory = SharedMemory::create("ring-test", 10_000).unwrap();
    assert_eq!(memory.len(), 10_000);
    let fd = memory.fd().as_raw_fd();
    // SAFETY: F_GETFD and F_GET_SEALS only read the flags of a descriptor `memory` holds.
    let (flags, seals) = unsafe {
        (
            libc::fcntl(fd, libc::F_GETFD),
            libc::fcntl(fd, libc::F_GET_SEALS),
        )
    };
    assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
    assert_eq!(
        seals & (libc::F_SEAL_SHRINK | libc::F_SEAL_GROW),
        libc::F_SEAL_SHRINK | libc::F_SEAL_GROW
    );
    let file = std::fs::File::from(memory.fd().try_clone_to_owned().unwrap());
    assert_eq!(file.metadata().unwrap().permissions().mode() & 0o777, 0o600);
    let error = file.set_len(100).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::EPERM), "sealed: {error}");

    // A second mapping of the same file sees the same bytes.
    let again = SharedMemory::from_fd(file.into()).unwrap();
    assert_eq!(again.len(), 10_000);
    // SAFETY: both pointers are inside their mappings; nothing else uses these bytes.
    unsafe {
        memory.as_ptr().add(9_999).write(42);
        assert_eq!(again.as_ptr().add(9_999).read(), 42);
    }
}

#[test]
fn shared_memory_refuses_bad_sizes_names_and_descriptors() {
    let error = SharedMemory::create("empty", 0).unwrap_err();
    assert_eq!(error.kind, ErrorKind::Value);
    let error = SharedMemory::create("a\0b", 64).unwrap_err();
    assert_eq!(
        error.message,
        "shared memory name \"a\\0b\" contains a NUL byte"
    );
    let error = SharedMemory::create("huge", usize::MAX).unwrap_err();
    assert!(error.message.contains("too large"), "{}", error.message);

    // A plain file cannot be sealed, so it is not mapped.
    let path = std::env::temp_dir().join(format!("discovm-ring-test-{}", std::process::id()));
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(4096).unwrap();
    std::fs::remove_file(&path).unwrap();
    let error = SharedMemory::from_fd(file.into()).unwrap_err();
    assert_eq!(error.kind, ErrorKind::Runtime);
    assert!(
        error.message.contains("F_GET_SEALS") && error.message.contains("os error"),
        "{}",
        error.message
    );
    let (reader, _writer) = std::io::pipe().unwrap();
    let error = SharedMemory::from_fd(reader.into()).unwrap_err();
    assert_eq!(error.kind, ErrorKind::Value);
    assert!(
        error.message.contains("not a regular file"),
        "{}",
        error.message
    );
}
