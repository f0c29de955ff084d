//! The sending end of a ring ([`Producer`]). It reserves room for a record, waiting for the
//! consumer to release bytes while the ring is full, and the caller writes the frame in place
//! ([`Reservation`]) before it is published. A frame longer than half the ring may wait for the
//! consumer to skip a pad even when the ring is empty; a frame longer than a record can be goes
//! as parts of half the ring each, the last one a frame record. An end is single-threaded (its
//! methods take `&mut self`): threads that send to one ring share its producer behind a lock
//! (`Mutex<Producer>`), which serialises their sends.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::Duration;

use super::layout::{
    FRAME, MAX_GATHERED, PAD, PART, RECORD_HEADER, max_frame, padded, record_word,
};
use super::view::{RingRef, Waker, corrupt};
use crate::channel::Deadline;
use crate::channel::shm::SharedMemory;
use crate::channel::wait::{PARK_SLICE, SpinPolicy};
use crate::object::{Error, Result};
use crate::sync::atomic::{Ordering, fence};

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
    /// Attaches the sending end of the ring at `offset` in `memory` (made by
    /// [`init_ring`](super::init_ring), in this process or another). One producer per ring.
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
        deadline: Deadline,
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
        deadline: Deadline,
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
        deadline: Deadline,
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
        deadline: Deadline,
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
        deadline: Deadline,
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
