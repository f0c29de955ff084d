//! The receiving end of a ring ([`Consumer`]). A frame sent whole is lent in place until it is
//! dropped, which releases its bytes to the producer; a frame in parts is gathered into memory
//! of the consumer's own (up to [`MAX_GATHERED`] bytes, the memory kept for the next such
//! frame), or into a block the receiver keeps, placed as it asks ([`Consumer::recv_placed`]),
//! releasing each part as it goes, so the producer writes the next while the consumer copies
//! the last. A lent frame's bytes are in shared memory, where a misbehaving peer can change
//! them meanwhile: a decoder reads each byte once and checks what it reads.

use std::ops::{Deref, Range};
use std::sync::Arc;
use std::time::Duration;

use super::layout::{FRAME, MAX_GATHERED, PAD, PART, RECORD_HEADER, padded};
use super::view::{RingRef, Waker, corrupt};
use crate::channel::Deadline;
use crate::channel::shm::SharedMemory;
use crate::channel::wait::{PARK_SLICE, SpinPolicy};
use crate::object::{HostBlock, Result};
use crate::sync::atomic::{Ordering, fence};

/// A consumer keeps the memory it gathered a frame in for the next one up to this many bytes.
const KEEP_GATHERED: usize = 128 << 20;

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
    pub(super) gathered: Vec<u8>,
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
    /// Attaches the receiving end of the ring at `offset` in `memory` (made by
    /// [`init_ring`](super::init_ring), in this process or another). One consumer per ring.
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
    pub fn try_recv(&mut self) -> Result<Option<Received<'_>>> {
        Ok(self.state.poll(&self.ring)?.map(|record| Received {
            consumer: self,
            record: Some(record),
            gathered: Vec::new(),
            placed: None,
        }))
    }

    /// Whether something was sent that is not received yet (a frame, or a pad before one);
    /// never waits. A corrupt position counts as something, for the receive to report.
    pub fn has_pending(&mut self) -> bool {
        self.state.tail != self.state.head || self.state.load_head(&self.ring).unwrap_or(true)
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
        deadline: Deadline,
        check: impl FnMut() -> Result<()>,
    ) -> Result<Received<'_>> {
        self.recv_placed(policy, deadline, check, |_| None)
    }

    /// [`Consumer::recv`], where a frame that comes in parts may be gathered in a block of
    /// memory of its own, which the caller can keep ([`Received::take_placed`]): given the first
    /// part, `place` says how long the whole frame is and which of its bytes should start on a
    /// 64-byte boundary (`None`: gather it in the consumer's own memory, as `recv` does).
    ///
    /// Errors: as for [`Consumer::recv`]; `RuntimeError` when the parts add up to another
    /// length than `place` said.
    pub fn recv_placed(
        &mut self,
        policy: SpinPolicy,
        deadline: Deadline,
        mut check: impl FnMut() -> Result<()>,
        place: impl FnOnce(&[u8]) -> Option<(usize, usize)>,
    ) -> Result<Received<'_>> {
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
            // SAFETY: as in `Received::deref`: a checked record, the producer's no more until it
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
        Ok(Received {
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
pub struct Received<'a> {
    consumer: &'a mut Consumer,
    /// The record it lies in; `None` for a frame gathered from parts.
    record: Option<Record>,
    gathered: Vec<u8>,
    /// A frame in parts gathered in a block of its own: the block, and where the frame lies.
    placed: Option<(HostBlock, Range<usize>)>,
}

impl Received<'_> {
    /// The block a frame in parts was gathered in ([`Consumer::recv_placed`]) and where in it
    /// the frame lies, for the caller to keep; `None` for another frame (or once taken).
    pub fn take_placed(&mut self) -> Option<(HostBlock, Range<usize>)> {
        self.placed.take()
    }
}

impl Deref for Received<'_> {
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

impl Drop for Received<'_> {
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
