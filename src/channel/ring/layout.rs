//! The ring's layout in shared memory: a header, then the data area. The header holds the
//! producer's position (`head`) and the consumer's (`tail`), each on its own cache line, and one
//! futex word per side that can wait; positions count bytes since the ring was made and only
//! grow. Records are 8-byte aligned: an 8-byte header (payload length, kind) and the payload,
//! padded. A record never wraps: when one does not fit before the end of the ring, the producer
//! fills the rest with a pad record and goes on from offset 0.

use std::sync::atomic::{AtomicU32 as PlainU32, AtomicU64 as PlainU64};

use crate::channel::shm::SharedMemory;
use crate::channel::wait::SharedSleeper;
use crate::object::{Error, Result};
use crate::sync::atomic::AtomicU64;

/// "dvm-ring" in the first eight bytes of every ring.
pub(super) const MAGIC: u64 = u64::from_le_bytes(*b"dvm-ring");
/// The layout's version: both ends must agree on it.
pub(super) const VERSION: u32 = 1;
/// What the header's parts are aligned to, so that no two of them share a cache line (128
/// bytes: adjacent-line prefetch pairs 64-byte lines).
pub const RING_ALIGN: usize = 128;
/// The smallest data area a ring can have.
pub const MIN_CAPACITY: usize = RING_ALIGN;
/// The largest data area a ring can have (a frame's length fits 32 bits).
pub const MAX_CAPACITY: usize = 1 << 31;
/// Bytes of a record's header.
pub(super) const RECORD_HEADER: u64 = 8;
/// A record that holds a frame, or the last part of one.
pub(super) const FRAME: u32 = u32::from_le_bytes(*b"fram");
/// A record that holds a part of a frame, not its last.
pub(super) const PART: u32 = u32::from_le_bytes(*b"part");
/// The longest frame a consumer gathers from parts (a wire frame's default bound and its
/// header).
pub const MAX_GATHERED: usize = (1 << 30) + 16;
/// A record that fills the end of the ring.
pub(super) const PAD: u32 = u32::from_le_bytes(*b"pad ");
/// Positions above this when an end attaches are corrupt: a real ring does not pass 2^62
/// bytes, and checking it here keeps every sum below from overflowing.
pub(super) const MAX_POSITION: u64 = 1 << 62;

/// One part of the header, on cache lines of its own.
#[repr(C, align(128))]
pub(super) struct Line<T>(pub(super) T);

const _: () = assert!(std::mem::align_of::<Line<u8>>() == RING_ALIGN);

/// What the creator writes once, before either end attaches; each end reads it once.
#[repr(C)]
pub(super) struct Layout {
    pub(super) magic: PlainU64,
    pub(super) version: PlainU32,
    /// The header's size in the build that made it, a check that both ends agree on it.
    pub(super) header_bytes: PlainU32,
    pub(super) capacity: PlainU64,
}

/// The start of a ring; the data area follows it.
#[repr(C)]
pub(super) struct Header {
    pub(super) layout: Line<Layout>,
    /// Bytes the producer has published. Written by the producer only.
    pub(super) head: Line<AtomicU64>,
    /// Bytes the consumer has released. Written by the consumer only.
    pub(super) tail: Line<AtomicU64>,
    /// The consumer sleeps on this while it waits for a frame; the producer wakes it.
    pub(super) readable: Line<SharedSleeper>,
    /// The producer sleeps on this while it waits for room; the consumer wakes it.
    pub(super) writable: Line<SharedSleeper>,
}

/// The header's size: the data area starts this far into the ring.
pub(super) const HEADER_BYTES: usize = std::mem::size_of::<Header>();

const _: () = assert!(HEADER_BYTES.is_multiple_of(RING_ALIGN));

/// Checks a ring's data size: a power of two from [`MIN_CAPACITY`] to [`MAX_CAPACITY`].
pub(super) fn check_capacity(capacity: u64) -> Result<()> {
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
pub(super) fn check_placement(memory: &SharedMemory, offset: usize, bytes: usize) -> Result<()> {
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

/// Rounds a payload length up to the record alignment.
pub(super) fn padded(len: u64) -> u64 {
    (len + 7) & !7
}

pub(super) fn record_word(kind: u32, len: u64) -> u64 {
    (u64::from(kind) << 32) | len
}

/// The longest frame a ring of `capacity` data bytes takes.
pub(super) fn max_frame(capacity: usize) -> usize {
    capacity.saturating_sub(RECORD_HEADER as usize)
}
