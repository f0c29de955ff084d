//! A single-producer, single-consumer ring of byte frames in shared memory, between a
//! controller and a worker process (or any two threads) that map the same [`SharedMemory`].
//!
//! The one idea: everything both sides need lives in the mapping, and nothing read from it is
//! trusted. The header holds the producer's position (`head`) and the consumer's (`tail`),
//! each on its own cache line, and one futex word per side that can wait. Positions count
//! bytes since the ring was made and only grow; each side keeps its own position to itself and
//! publishes a copy (release) after writing or reading a record, and checks every position and
//! record header it reads against the bounds the ring allows. Waiting is the library's one
//! policy (spin, yield, then park on the futex in slices that run the caller's `check`), and
//! each side wakes the other only when it announced that it sleeps: the consumer waiting for a
//! frame, the producer waiting for room.
//!
//! Records are 8-byte aligned: an 8-byte header (payload length, kind) and the payload, padded.
//! A record never wraps: when one does not fit before the end of the ring, the producer fills
//! the rest with a pad record and goes on from offset 0. So a frame longer than half the ring
//! may wait for the consumer to skip a pad even when the ring is empty. A frame longer than a
//! record can be goes as parts of half the ring each, the last one a frame record; the consumer
//! gathers them into memory of its own (up to [`MAX_GATHERED`] bytes, the memory kept for the
//! next such frame), or into a block the receiver keeps, placed as it asks
//! ([`Consumer::recv_placed`]), releasing each part as it goes, so the producer writes the next
//! while the consumer copies the last.
//!
//! Each end is single-threaded (its methods take `&mut self`), and one process holds each end.
//! Threads that send to one ring share its producer behind a lock (`Mutex<Producer>`), which
//! serialises their sends.
//!
//! A misbehaving peer can spoil what it sends, not this process: a position or record header
//! out of bounds ends the call with a `RuntimeError` saying the ring is corrupt, and the only
//! loops that last as long as the peer wants are the waits, which `check` and the deadline
//! end. The bytes of a frame are in shared memory while they are borrowed, and a misbehaving
//! peer can change them meanwhile: a decoder reads each byte once and checks what it reads.

#[cfg(all(test, loom))]
mod loom_model;
#[cfg(all(test, not(loom)))]
mod tests;

use std::ops::{Deref, DerefMut, Range};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32 as PlainU32, AtomicU64 as PlainU64};
use std::time::Duration;

use super::shm::SharedMemory;
use super::wait::{PARK_SLICE, SharedSleeper, SpinPolicy};
use crate::object::{Error, HostBlock, Result};
use crate::sync::atomic::{AtomicU64, Ordering, fence};
use crate::sync::time::Instant;

/// "dvm-ring" in the first eight bytes of every ring.
const MAGIC: u64 = u64::from_le_bytes(*b"dvm-ring");
/// The layout's version: both ends must agree on it.
const VERSION: u32 = 1;
/// What the header's parts are aligned to, so that no two of them share a cache line (128
/// bytes: adjacent-line prefetch pairs 64-byte lines).
pub const RING_ALIGN: usize = 128;
/// The smallest data area a ring can have.
pub const MIN_CAPACITY: usize = RING_ALIGN;
/// The largest data area a ring can have (a frame's length fits 32 bits).
pub const MAX_CAPACITY: usize = 1 << 31;
/// Bytes of a record's header.
const RECORD_HEADER: u64 = 8;
/// A record that holds a frame, or the last part of one.
const FRAME: u32 = u32::from_le_bytes(*b"fram");
/// A record that holds a part of a frame, not its last.
const PART: u32 = u32::from_le_bytes(*b"part");
/// The longest frame a consumer gathers from parts (a wire frame's default bound and its
/// header).
pub const MAX_GATHERED: usize = (1 << 30) + 16;
/// A consumer keeps the memory it gathered a frame in for the next one up to this many bytes.
const KEEP_GATHERED: usize = 128 << 20;
/// A record that fills the end of the ring.
const PAD: u32 = u32::from_le_bytes(*b"pad ");
/// Positions above this when an end attaches are corrupt: a real ring does not pass 2^62
/// bytes, and checking it here keeps every sum below from overflowing.
const MAX_POSITION: u64 = 1 << 62;

/// One part of the header, on cache lines of its own.
#[repr(C, align(128))]
struct Line<T>(T);

const _: () = assert!(std::mem::align_of::<Line<u8>>() == RING_ALIGN);

/// What the creator writes once, before either end attaches; each end reads it once.
#[repr(C)]
struct Layout {
    magic: PlainU64,
    version: PlainU32,
    /// The header's size in the build that made it, a check that both ends agree on it.
    header_bytes: PlainU32,
    capacity: PlainU64,
}

/// The start of a ring; the data area follows it.
#[repr(C)]
struct Header {
    layout: Line<Layout>,
    /// Bytes the producer has published. Written by the producer only.
    head: Line<AtomicU64>,
    /// Bytes the consumer has released. Written by the consumer only.
    tail: Line<AtomicU64>,
    /// The consumer sleeps on this while it waits for a frame; the producer wakes it.
    readable: Line<SharedSleeper>,
    /// The producer sleeps on this while it waits for room; the consumer wakes it.
    writable: Line<SharedSleeper>,
}

/// The header's size: the data area starts this far into the ring.
const HEADER_BYTES: usize = std::mem::size_of::<Header>();

const _: () = assert!(HEADER_BYTES.is_multiple_of(RING_ALIGN));

/// Checks a ring's data size: a power of two from [`MIN_CAPACITY`] to [`MAX_CAPACITY`].
fn check_capacity(capacity: u64) -> Result<()> {
    if capacity.is_power_of_two()
        && capacity >= MIN_CAPACITY as u64
        && capacity <= MAX_CAPACITY as u64
    {
        Ok(())
    } else {
        Err(Error::value(format!(
            "ring capacity {capacity}: must be a power of two from {MIN_CAPACITY} to \
             {MAX_CAPACITY} bytes"
        )))
    }
}

/// The bytes a ring with `capacity` bytes of data takes in shared memory: its header and its
/// data. A multiple of [`RING_ALIGN`], so rings placed one after another stay aligned.
///
/// Errors: `ValueError` if `capacity` is not a power of two from [`MIN_CAPACITY`] to
/// [`MAX_CAPACITY`].
pub fn ring_bytes(capacity: usize) -> Result<usize> {
    check_capacity(capacity as u64)?;
    Ok(HEADER_BYTES + capacity)
}

/// Makes an empty ring with `capacity` bytes of data at `offset` in `memory`, before either end
/// attaches (the exclusive borrow means no end is attached in this process; the creator makes
/// its rings before it shares the memory with another).
///
/// Errors: `ValueError` for a bad capacity, an offset not a multiple of [`RING_ALIGN`] or a
/// ring that does not fit in `memory`.
pub fn init_ring(memory: &mut SharedMemory, offset: usize, capacity: usize) -> Result<()> {
    let bytes = ring_bytes(capacity)?;
    check_placement(memory, offset, bytes)?;
    let header = Header {
        layout: Line(Layout {
            magic: PlainU64::new(MAGIC),
            version: PlainU32::new(VERSION),
            header_bytes: PlainU32::new(HEADER_BYTES as u32),
            capacity: PlainU64::new(capacity as u64),
        }),
        head: Line(AtomicU64::new(0)),
        tail: Line(AtomicU64::new(0)),
        readable: Line(SharedSleeper::new()),
        writable: Line(SharedSleeper::new()),
    };
    // SAFETY: `offset..offset + bytes` lies inside the mapping and `offset` is a multiple of
    // RING_ALIGN (checked above; the mapping is page-aligned), so the header is in bounds and
    // aligned; `&mut memory` rules out any reference into it in this process.
    unsafe { memory.as_ptr().add(offset).cast::<Header>().write(header) };
    Ok(())
}

/// Checks that `bytes` at `offset` lie inside `memory` and are aligned for a header.
fn check_placement(memory: &SharedMemory, offset: usize, bytes: usize) -> Result<()> {
    if !offset.is_multiple_of(RING_ALIGN) {
        return Err(Error::value(format!(
            "ring offset {offset} is not a multiple of {RING_ALIGN}"
        )));
    }
    match offset.checked_add(bytes) {
        Some(end) if end <= memory.len() => Ok(()),
        _ => Err(Error::value(format!(
            "a ring of {bytes} bytes at offset {offset} does not fit in {} bytes of shared \
             memory",
            memory.len()
        ))),
    }
}

/// An error for something the peer wrote that no correct peer writes.
fn corrupt(what: impl std::fmt::Display) -> Error {
    Error::runtime(format!("corrupt shared-memory ring: {what}"))
}

/// Rounds a payload length up to the record alignment.
fn padded(len: u64) -> u64 {
    (len + 7) & !7
}

/// One end's view of a ring: where its header and data are, and the mapping that keeps them.
struct RingRef {
    /// Keeps the pointers below valid.
    _memory: Arc<SharedMemory>,
    header: NonNull<Header>,
    data: NonNull<u8>,
    /// Read once when attaching, never again from the shared header.
    capacity: u64,
}

// SAFETY: the pointers point into memory that `_memory` keeps mapped wherever this goes; the
// header is read and written through atomics only, and data bytes only by the end that the
// protocol gives them to.
unsafe impl Send for RingRef {}

impl RingRef {
    /// Checks the ring at `offset` and returns a view of it.
    fn attach(memory: Arc<SharedMemory>, offset: usize) -> Result<RingRef> {
        check_placement(&memory, offset, HEADER_BYTES)?;
        // SAFETY: checked just above: in bounds and aligned (the mapping is page-aligned).
        let header: NonNull<Header> =
            unsafe { NonNull::new_unchecked(memory.as_ptr().add(offset).cast()) };
        // SAFETY: the header is mapped while `memory` lives, and every field is an atomic, so a
        // shared reference to it is sound however the peer writes to it.
        let layout = &unsafe { header.as_ref() }.layout.0;
        let magic = layout.magic.load(Ordering::Relaxed);
        if magic != MAGIC {
            return Err(corrupt(format_args!(
                "no ring at offset {offset} (magic {magic:#018x})"
            )));
        }
        let version = layout.version.load(Ordering::Relaxed);
        let header_bytes = layout.header_bytes.load(Ordering::Relaxed);
        if version != VERSION || header_bytes as usize != HEADER_BYTES {
            return Err(corrupt(format_args!(
                "the ring at offset {offset} has layout version {version} with a \
                 {header_bytes}-byte header; this build reads version {VERSION} with a \
                 {HEADER_BYTES}-byte header"
            )));
        }
        let capacity = layout.capacity.load(Ordering::Relaxed);
        check_capacity(capacity).map_err(|e| corrupt(e.message))?;
        check_placement(&memory, offset, HEADER_BYTES + capacity as usize)
            .map_err(|e| corrupt(e.message))?;
        // SAFETY: the data area follows the header and fits in the mapping (checked above).
        let data =
            unsafe { NonNull::new_unchecked(header.as_ptr().cast::<u8>().add(HEADER_BYTES)) };
        Ok(RingRef {
            _memory: memory,
            header,
            data,
            capacity,
        })
    }

    fn header(&self) -> &Header {
        // SAFETY: mapped while `self` lives; all fields are atomics (see `attach`).
        unsafe { self.header.as_ref() }
    }

    /// The positions as published, checked against each other: for an end attaching.
    fn positions(&self) -> Result<(u64, u64)> {
        let head = self.header().head.0.load(Ordering::Acquire);
        let tail = self.header().tail.0.load(Ordering::Acquire);
        if tail > head
            || head - tail > self.capacity
            || !head.is_multiple_of(8)
            || !tail.is_multiple_of(8)
        {
            return Err(corrupt(format_args!(
                "positions head {head} and tail {tail} do not fit a ring of {} bytes",
                self.capacity
            )));
        }
        if head > MAX_POSITION {
            return Err(corrupt(format_args!("position {head} is out of range")));
        }
        Ok((head, tail))
    }

    /// The data offset of position `at`.
    fn offset(&self, at: u64) -> u64 {
        at & (self.capacity - 1)
    }

    /// The header of the record at data offset `offset` (a multiple of 8 below the capacity).
    /// An atomic, so that a peer rewriting it cannot change it between its check and its use:
    /// it is read once.
    fn record_word(&self, offset: u64) -> &PlainU64 {
        debug_assert!(offset.is_multiple_of(8) && offset + RECORD_HEADER <= self.capacity);
        // SAFETY: in bounds and 8-aligned (the data area starts 128-aligned); the memory is
        // mapped while `self` lives and only ever accessed atomically at this address.
        unsafe { PlainU64::from_ptr(self.data.as_ptr().add(offset as usize).cast()) }
    }

    /// The payload bytes of the record at data offset `offset`.
    fn payload(&self, offset: u64, len: usize) -> *mut u8 {
        debug_assert!(offset + RECORD_HEADER + len as u64 <= self.capacity);
        // SAFETY: in bounds (every caller checked the record against the capacity).
        unsafe { self.data.as_ptr().add((offset + RECORD_HEADER) as usize) }
    }
}

fn record_word(kind: u32, len: u64) -> u64 {
    (u64::from(kind) << 32) | len
}

/// Wakes whoever sleeps on a ring, either end, so that its wait runs its `check` at once
/// (for a thread that learns the peer is gone before either end does).
pub struct Waker(RingRef);

// SAFETY: a waker touches only the header's sleepers, through atomics and futex calls, from
// any thread; the mapping stays while it lives.
unsafe impl Sync for Waker {}

impl Waker {
    pub fn wake(&self) {
        let header = self.0.header();
        header.readable.0.wake();
        header.writable.0.wake();
    }
}

impl RingRef {
    /// Another view of the same ring.
    fn share(&self) -> RingRef {
        RingRef {
            _memory: self._memory.clone(),
            header: self.header,
            data: self.data,
            capacity: self.capacity,
        }
    }
}

/// The longest frame a ring of `capacity` data bytes takes.
fn max_frame(capacity: usize) -> usize {
    capacity.saturating_sub(RECORD_HEADER as usize)
}

/// The sending end of a ring.
pub struct Producer {
    ring: RingRef,
    /// Where the next record goes: past everything published, and past a pad record not yet
    /// published.
    head: u64,
    /// The consumer's position as last read.
    tail: u64,
    /// How often a wait for room that parked runs its `check`.
    check_interval: Duration,
}

impl Producer {
    /// Attaches the sending end of the ring at `offset` in `memory` (made by [`init_ring`], in
    /// this process or another). One producer per ring.
    ///
    /// Errors: `ValueError` if the ring does not fit in `memory`; `RuntimeError` if what is
    /// there is not a ring of this layout or its header is corrupt.
    pub fn attach(memory: Arc<SharedMemory>, offset: usize) -> Result<Producer> {
        let ring = RingRef::attach(memory, offset)?;
        let (head, tail) = ring.positions()?;
        Ok(Producer {
            ring,
            head,
            tail,
            check_interval: PARK_SLICE,
        })
    }

    /// A waker of whoever waits on this ring.
    pub fn waker(&self) -> Waker {
        Waker(self.ring.share())
    }

    /// The largest frame the ring can take: its capacity less one record header.
    pub fn max_frame(&self) -> usize {
        max_frame(self.ring.capacity as usize)
    }

    /// How often a parked wait for room runs its `check` (20 ms unless set).
    pub fn set_check_interval(&mut self, interval: Duration) {
        self.check_interval = interval;
    }

    /// Reserves room for a frame of `len` bytes, waiting for it with `policy` while the ring
    /// is full, and returns the frame's bytes to write in place. The frame is sent when the
    /// reservation is committed; dropping it sends nothing.
    ///
    /// Errors: `ValueError` if the frame can never fit (longer than [`Producer::max_frame`]);
    /// `TimeoutError` if `deadline` passes while waiting; whatever `check` returns (it runs
    /// between parks, at least every check interval); `RuntimeError` if the consumer's
    /// position in shared memory is corrupt.
    pub fn reserve(
        &mut self,
        len: usize,
        policy: SpinPolicy,
        deadline: Option<Instant>,
        mut check: impl FnMut() -> Result<()>,
    ) -> Result<Reservation<'_>> {
        let capacity = self.ring.capacity;
        if len as u64 > capacity - RECORD_HEADER {
            return Err(Error::value(format!(
                "a frame of {len} bytes can never fit in a ring of {capacity} bytes (at most \
                 {} bytes a frame)",
                capacity - RECORD_HEADER
            )));
        }
        let record = RECORD_HEADER + padded(len as u64);
        let at = self.ring.offset(self.head);
        let to_end = capacity - at;
        if to_end < record {
            // No room before the end: a pad record takes the rest, and the frame goes at 0.
            self.wait_for_room(to_end, len, policy, deadline, &mut check)?;
            self.ring
                .record_word(at)
                .store(record_word(PAD, to_end - RECORD_HEADER), Ordering::Relaxed);
            self.head += to_end;
            if to_end + record > capacity {
                // The frame needs room the pad holds: the consumer must see the pad to skip
                // it (the wait for room below wakes the consumer before it waits).
                self.publish();
            }
        }
        self.wait_for_room(record, len, policy, deadline, &mut check)?;
        Ok(Reservation {
            producer: self,
            len,
            record,
            kind: FRAME,
        })
    }

    /// Sends `frame`: [`Producer::reserve`], copy, [`Reservation::commit`]; a frame longer
    /// than [`Producer::max_frame`] goes as parts of half the ring each (up to
    /// [`MAX_GATHERED`] bytes in all).
    ///
    /// Errors: as for [`Producer::send_from`].
    pub fn send(
        &mut self,
        frame: &[u8],
        policy: SpinPolicy,
        deadline: Option<Instant>,
        check: impl FnMut() -> Result<()>,
    ) -> Result<()> {
        let mut rest = frame;
        self.send_from(frame.len(), policy, deadline, check, |part| {
            let (this, next) = rest.split_at(part.len());
            part.copy_from_slice(this);
            rest = next;
            Ok(())
        })
    }

    /// Sends a frame of `len` bytes that `fill` writes in place, front to back, one record at
    /// a time: a frame longer than [`Producer::max_frame`] goes as parts of half the ring
    /// each (up to [`MAX_GATHERED`] bytes in all), each sent as soon as it is filled, so the
    /// consumer reads one part while `fill` writes the next (a relay fills them straight
    /// from a socket).
    ///
    /// Errors: as for [`Producer::reserve`]; `ValueError` for a frame longer than
    /// [`MAX_GATHERED`]; whatever `fill` returns (the record it was filling is not sent). A
    /// failure between parts leaves the consumer with a part of a frame: the ring is no use
    /// after it.
    pub fn send_from(
        &mut self,
        len: usize,
        policy: SpinPolicy,
        deadline: Option<Instant>,
        mut check: impl FnMut() -> Result<()>,
        mut fill: impl FnMut(&mut [u8]) -> Result<()>,
    ) -> Result<()> {
        if len > MAX_GATHERED {
            return Err(Error::value(format!(
                "a frame of {len} bytes is longer than a ring carries ({MAX_GATHERED} bytes)"
            )));
        }
        let mut rest = len;
        if rest > self.max_frame() {
            let part =
                ((self.ring.capacity / 2) as usize).saturating_sub(RECORD_HEADER as usize) & !7;
            while rest > self.max_frame() {
                let mut reservation = self.reserve(part, policy, deadline, &mut check)?;
                fill(&mut reservation)?;
                reservation.kind = PART;
                reservation.commit();
                rest -= part;
            }
        }
        let mut reservation = self.reserve(rest, policy, deadline, check)?;
        fill(&mut reservation)?;
        reservation.commit();
        Ok(())
    }

    /// Sends a frame of `len` bytes that `write` fills in place (a wire encoder writes
    /// straight into the ring), and returns what `write` returns. If `write` panics, nothing
    /// is sent.
    pub fn send_with<R>(
        &mut self,
        len: usize,
        policy: SpinPolicy,
        deadline: Option<Instant>,
        check: impl FnMut() -> Result<()>,
        write: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R> {
        let mut reservation = self.reserve(len, policy, deadline, check)?;
        let result = write(&mut reservation);
        reservation.commit();
        Ok(result)
    }

    /// Wakes the consumer if it sleeps, after frames sent with [`Reservation::publish`].
    pub fn wake_consumer(&self) {
        self.ring.header().readable.0.wake();
    }

    /// [`Producer::wake_consumer`] for a caller that issued `fence(SeqCst)` after publishing
    /// (one fence may cover several rings).
    pub fn wake_consumer_fenced(&self) {
        self.ring.header().readable.0.wake_fenced();
    }

    /// Waits until `bytes` more fit after `head`.
    fn wait_for_room(
        &mut self,
        bytes: u64,
        len: usize,
        policy: SpinPolicy,
        deadline: Option<Instant>,
        check: impl FnMut() -> Result<()>,
    ) -> Result<()> {
        let capacity = self.ring.capacity;
        let head = self.head;
        if head - self.tail + bytes <= capacity {
            return Ok(());
        }
        // Frames published without a wake-up must not be left to a sleeping consumer while
        // this waits for it to read them.
        self.wake_consumer();
        let ring = &self.ring;
        let tail = &mut self.tail;
        let poll = || {
            let seen = ring.header().tail.0.load(Ordering::Acquire);
            // The consumer's position only grows, and never passes what was written.
            if seen < *tail || seen > head || !seen.is_multiple_of(8) {
                return Some(Err(corrupt(format_args!(
                    "the consumer's position {seen} is outside {}..={head}",
                    *tail
                ))));
            }
            *tail = seen;
            (head - seen + bytes <= capacity).then_some(Ok(()))
        };
        ring.header().writable.0.wait(
            policy,
            self.check_interval,
            deadline,
            || format!("sending a {len}-byte frame to a full ring"),
            check,
            poll,
        )?
    }

    /// Makes everything up to `head` visible to the consumer.
    fn publish(&self) {
        self.ring
            .header()
            .head
            .0
            .store(self.head, Ordering::Release);
    }
}

/// Room reserved for one frame: its bytes, to fill, then send with [`Reservation::commit`].
pub struct Reservation<'a> {
    producer: &'a mut Producer,
    len: usize,
    /// The record's bytes, header and padding included.
    record: u64,
    /// `FRAME`, or `PART` for a part of a frame sent in parts.
    kind: u32,
}

impl<'a> Reservation<'a> {
    /// Sends the frame, and wakes the consumer if it sleeps.
    pub fn commit(self) {
        let producer = self.finish();
        fence(Ordering::SeqCst); // pairs with the consumer's fence between announcing and polling
        producer.ring.header().readable.0.wake_fenced();
    }

    /// Sends the frame without waking the consumer: follow with [`Producer::wake_consumer`]
    /// (or a fence and [`Producer::wake_consumer_fenced`]), or leave it for the next commit.
    pub fn publish(self) {
        self.finish();
    }

    /// Writes the record's header and publishes the record.
    fn finish(self) -> &'a mut Producer {
        let Reservation {
            producer,
            len,
            record,
            kind,
        } = self;
        let at = producer.ring.offset(producer.head);
        producer
            .ring
            .record_word(at)
            .store(record_word(kind, len as u64), Ordering::Relaxed);
        producer.head += record;
        producer.publish();
        producer
    }
}

impl Deref for Reservation<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        let ring = &self.producer.ring;
        let at = ring.offset(self.producer.head);
        // SAFETY: `reserve` waited until the consumer had released these bytes, and they stay
        // the producer's until the record is published, which takes this reservation; they are
        // in bounds (`reserve` placed the record before the end of the ring).
        unsafe { std::slice::from_raw_parts(ring.payload(at, self.len), self.len) }
    }
}

impl DerefMut for Reservation<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        let ring = &self.producer.ring;
        let at = ring.offset(self.producer.head);
        // SAFETY: as in `deref`; the reservation borrows the producer mutably, so these bytes
        // have no other borrow in this process.
        unsafe { std::slice::from_raw_parts_mut(ring.payload(at, self.len), self.len) }
    }
}

/// Where the record to read next is, once checked.
#[derive(Clone, Copy)]
struct Record {
    /// Its data offset.
    at: u64,
    /// Its payload's length.
    len: usize,
    /// Its bytes, header and padding included.
    bytes: u64,
    /// Whether it is a part of a frame, not its last.
    part: bool,
}

/// The receiving end of a ring.
pub struct Consumer {
    ring: RingRef,
    state: ConsumerState,
    /// The memory the last frame in parts was gathered in, kept for the next one (unless it
    /// grew past [`KEEP_GATHERED`]), so its pages are touched once.
    gathered: Vec<u8>,
    /// How often a wait for a frame that parked runs its `check`.
    check_interval: Duration,
}

/// The positions the consumer keeps to itself.
struct ConsumerState {
    /// Everything before this is released.
    tail: u64,
    /// The producer's position as last read.
    head: u64,
}

impl Consumer {
    /// Attaches the receiving end of the ring at `offset` in `memory` (made by [`init_ring`],
    /// in this process or another). One consumer per ring.
    ///
    /// Errors: `ValueError` if the ring does not fit in `memory`; `RuntimeError` if what is
    /// there is not a ring of this layout or its header is corrupt.
    pub fn attach(memory: Arc<SharedMemory>, offset: usize) -> Result<Consumer> {
        let ring = RingRef::attach(memory, offset)?;
        let (head, tail) = ring.positions()?;
        Ok(Consumer {
            ring,
            state: ConsumerState { tail, head },
            gathered: Vec::new(),
            check_interval: PARK_SLICE,
        })
    }

    /// A waker of whoever waits on this ring.
    pub fn waker(&self) -> Waker {
        Waker(self.ring.share())
    }

    /// How often a parked wait for a frame runs its `check` (20 ms unless set).
    pub fn set_check_interval(&mut self, interval: Duration) {
        self.check_interval = interval;
    }

    /// The next frame, if one is there (a frame sent whole).
    ///
    /// Errors: `RuntimeError` if the producer's position or the record in shared memory is
    /// corrupt.
    #[cfg(test)]
    pub fn try_recv(&mut self) -> Result<Option<Frame<'_>>> {
        Ok(self.state.poll(&self.ring)?.map(|record| Frame {
            consumer: self,
            record: Some(record),
            gathered: Vec::new(),
            placed: None,
        }))
    }

    /// The next frame, waiting for it with `policy`. Its bytes stay in the ring, borrowed,
    /// until the frame is dropped, which releases them to the producer.
    ///
    /// Errors: `TimeoutError` if `deadline` passes first; whatever `check` returns (it runs
    /// between parks, at least every check interval); `RuntimeError` if the producer's
    /// position or the record in shared memory is corrupt.
    pub fn recv(
        &mut self,
        policy: SpinPolicy,
        deadline: Option<Instant>,
        check: impl FnMut() -> Result<()>,
    ) -> Result<Frame<'_>> {
        self.recv_placed(policy, deadline, check, |_| None)
    }

    /// [`Consumer::recv`], where a frame that comes in parts may be gathered in a block of
    /// memory of its own, which the caller can keep ([`Frame::take_placed`]): given the first
    /// part, `place` says how long the whole frame is and which of its bytes should start on a
    /// 64-byte boundary (`None`: gather it in the consumer's own memory, as `recv` does).
    ///
    /// Errors: as for [`Consumer::recv`]; `RuntimeError` when the parts add up to another
    /// length than `place` said.
    pub fn recv_placed(
        &mut self,
        policy: SpinPolicy,
        deadline: Option<Instant>,
        mut check: impl FnMut() -> Result<()>,
        place: impl FnOnce(&[u8]) -> Option<(usize, usize)>,
    ) -> Result<Frame<'_>> {
        let mut gathered = std::mem::take(&mut self.gathered);
        let mut place = Some(place);
        let mut placed: Option<(HostBlock, Range<usize>)> = None;
        let mut filled = 0;
        let record = loop {
            let ring = &self.ring;
            let state = &mut self.state;
            let record = ring.header().readable.0.wait(
                policy,
                self.check_interval,
                deadline,
                || "receiving from a ring".to_string(),
                &mut check,
                || state.poll(ring).transpose(),
            )??;
            let gathering = placed.is_some() || !gathered.is_empty();
            if !record.part && !gathering {
                break Some(record);
            }
            // A part, or the last of them: copied out and released at once.
            // SAFETY: as in `Frame::deref`: a checked record, the producer's no more until it
            // is released below.
            let part = unsafe {
                std::slice::from_raw_parts(ring.payload(record.at, record.len), record.len)
            };
            if !gathering && let Some((len, aligned)) = place.take().and_then(|place| place(part)) {
                if len > MAX_GATHERED {
                    return Err(corrupt(format_args!(
                        "a frame in parts of {len} bytes is longer than {MAX_GATHERED}"
                    )));
                }
                let shift = (64 - aligned % 64) % 64;
                placed = Some((HostBlock::new(shift + len)?, shift..shift + len));
            }
            match &mut placed {
                Some((block, range)) => {
                    let at = range.start + filled;
                    if filled + part.len() > range.len() {
                        return Err(corrupt(format_args!(
                            "a frame in parts runs past the {} bytes it was placed for",
                            range.len()
                        )));
                    }
                    block.as_mut_slice()[at..at + part.len()].copy_from_slice(part);
                    filled += part.len();
                }
                None => {
                    if gathered.len() + part.len() > MAX_GATHERED {
                        return Err(corrupt(format_args!(
                            "a frame in parts runs past {MAX_GATHERED} bytes"
                        )));
                    }
                    gathered.extend_from_slice(part);
                }
            }
            state.tail += record.bytes;
            release(ring, state.tail);
            if !record.part {
                break None;
            }
        };
        if let Some((_, range)) = &placed
            && filled != range.len()
        {
            return Err(corrupt(format_args!(
                "a frame in parts of {filled} bytes was placed for {}",
                range.len()
            )));
        }
        Ok(Frame {
            consumer: self,
            record,
            gathered,
            placed,
        })
    }
}

impl ConsumerState {
    /// Finds the next frame, skipping (and releasing) a pad record on the way.
    fn poll(&mut self, ring: &RingRef) -> Result<Option<Record>> {
        // A pad is never at offset 0 and the record after it is, so this loop turns at most
        // twice.
        loop {
            if self.tail == self.head && !self.load_head(ring)? {
                return Ok(None);
            }
            let at = ring.offset(self.tail);
            let to_end = ring.capacity - at;
            let available = self.head - self.tail;
            let word = ring.record_word(at).load(Ordering::Relaxed);
            let len = word & u64::from(u32::MAX);
            let kind = (word >> 32) as u32;
            if kind == PAD && at != 0 && len + RECORD_HEADER == to_end && to_end <= available {
                self.tail += to_end;
                release(ring, self.tail);
                continue;
            }
            let bytes = RECORD_HEADER + padded(len);
            if (kind == FRAME || kind == PART) && bytes <= to_end && bytes <= available {
                return Ok(Some(Record {
                    at,
                    len: len as usize,
                    bytes,
                    part: kind == PART,
                }));
            }
            return Err(corrupt(format_args!(
                "record {word:#018x} at offset {at} (kind {kind:#x}, {len} bytes; {available} \
                 bytes published, {to_end} before the end of the ring)"
            )));
        }
    }

    /// Reads the producer's position; whether it moved.
    fn load_head(&mut self, ring: &RingRef) -> Result<bool> {
        let seen = ring.header().head.0.load(Ordering::Acquire);
        // The producer's position only grows, and never runs more than the ring ahead.
        if seen < self.head || seen - self.tail > ring.capacity || !seen.is_multiple_of(8) {
            return Err(corrupt(format_args!(
                "the producer's position {seen} is outside {}..={}",
                self.head,
                self.tail + ring.capacity
            )));
        }
        let moved = seen != self.head;
        self.head = seen;
        Ok(moved)
    }
}

/// Hands the bytes before `tail` back to the producer, waking it if it waits for room.
fn release(ring: &RingRef, tail: u64) {
    ring.header().tail.0.store(tail, Ordering::Release);
    fence(Ordering::SeqCst); // pairs with the producer's fence between announcing and polling
    ring.header().writable.0.wake_fenced();
}

/// A received frame: its bytes, borrowed from the ring until it is dropped, or, for a frame
/// that came in parts, gathered in memory of its own.
pub struct Frame<'a> {
    consumer: &'a mut Consumer,
    /// The record it lies in; `None` for a frame gathered from parts.
    record: Option<Record>,
    gathered: Vec<u8>,
    /// A frame in parts gathered in a block of its own: the block, and where the frame lies.
    placed: Option<(HostBlock, Range<usize>)>,
}

impl Frame<'_> {
    /// The block a frame in parts was gathered in ([`Consumer::recv_placed`]) and where in it
    /// the frame lies, for the caller to keep; `None` for another frame (or once taken).
    pub fn take_placed(&mut self) -> Option<(HostBlock, Range<usize>)> {
        self.placed.take()
    }
}

impl Deref for Frame<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        if let Some((block, range)) = &self.placed {
            return &block.as_slice()[range.clone()];
        }
        let Some(record) = self.record else {
            return &self.gathered;
        };
        let ring = &self.consumer.ring;
        // SAFETY: the record was checked to lie inside the data area, and the producer
        // published it and does not write it again until it is released, when this frame is
        // dropped (a misbehaving peer could, which makes the bytes wrong, never out of bounds).
        unsafe { std::slice::from_raw_parts(ring.payload(record.at, record.len), record.len) }
    }
}

impl Drop for Frame<'_> {
    fn drop(&mut self) {
        let consumer = &mut *self.consumer;
        if let Some(record) = self.record {
            consumer.state.tail += record.bytes;
            release(&consumer.ring, consumer.state.tail);
        }
        if self.gathered.capacity() <= KEEP_GATHERED {
            let mut gathered = std::mem::take(&mut self.gathered);
            gathered.clear();
            consumer.gathered = gathered;
        }
    }
}
