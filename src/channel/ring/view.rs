//! One end's view of a ring ([`RingRef`]), which trusts nothing it reads: attaching checks the
//! layout, and every position and record header read afterwards is checked against the bounds
//! the ring allows, so a peer that writes garbage ends the call with a `RuntimeError` saying
//! the ring is corrupt. A record header is read once, atomically, so a peer rewriting it cannot
//! change it between its check and its use.

use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::AtomicU64 as PlainU64;

use super::layout::{
    HEADER_BYTES, Header, MAGIC, MAX_POSITION, RECORD_HEADER, VERSION, check_capacity,
    check_placement,
};
use crate::channel::shm::SharedMemory;
use crate::object::{Error, Result};
use crate::sync::atomic::Ordering;

/// An error for something the peer wrote that no correct peer writes.
pub(super) fn corrupt(what: impl std::fmt::Display) -> Error {
    Error::runtime(format!("corrupt shared-memory ring: {what}"))
}

/// One end's view of a ring: where its header and data are, and the mapping that keeps them.
pub(super) struct RingRef {
    /// Keeps the pointers below valid.
    _memory: Arc<SharedMemory>,
    header: NonNull<Header>,
    data: NonNull<u8>,
    /// Read once when attaching, never again from the shared header.
    pub(super) capacity: u64,
}

// SAFETY: the pointers point into memory that `_memory` keeps mapped wherever this goes; the
// header is read and written through atomics only, and data bytes only by the end that the
// protocol gives them to.
unsafe impl Send for RingRef {}

impl RingRef {
    /// Checks the ring at `offset` and returns a view of it.
    pub(super) fn attach(memory: Arc<SharedMemory>, offset: usize) -> Result<RingRef> {
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

    pub(super) fn header(&self) -> &Header {
        // SAFETY: mapped while `self` lives; all fields are atomics (see `attach`).
        unsafe { self.header.as_ref() }
    }

    /// The positions as published, checked against each other: for an end attaching.
    pub(super) fn positions(&self) -> Result<(u64, u64)> {
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
    pub(super) fn offset(&self, at: u64) -> u64 {
        at & (self.capacity - 1)
    }

    /// The header of the record at data offset `offset` (a multiple of 8 below the capacity).
    /// An atomic, so that a peer rewriting it cannot change it between its check and its use:
    /// it is read once.
    pub(super) fn record_word(&self, offset: u64) -> &PlainU64 {
        debug_assert!(offset.is_multiple_of(8) && offset + RECORD_HEADER <= self.capacity);
        // SAFETY: in bounds and 8-aligned (the data area starts 128-aligned); the memory is
        // mapped while `self` lives and only ever accessed atomically at this address.
        unsafe { PlainU64::from_ptr(self.data.as_ptr().add(offset as usize).cast()) }
    }

    /// The payload bytes of the record at data offset `offset`.
    pub(super) fn payload(&self, offset: u64, len: usize) -> *mut u8 {
        debug_assert!(offset + RECORD_HEADER + len as u64 <= self.capacity);
        // SAFETY: in bounds (every caller checked the record against the capacity).
        unsafe { self.data.as_ptr().add((offset + RECORD_HEADER) as usize) }
    }
}

/// Wakes whoever sleeps on a ring, either end, so that its wait runs its `check` at once
/// (for a thread that learns the peer is gone before either end does).
pub struct Waker(pub(super) RingRef);

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
    pub(super) fn share(&self) -> RingRef {
        RingRef {
            _memory: self._memory.clone(),
            header: self.header,
            data: self.data,
            capacity: self.capacity,
        }
    }
}
