//! Floors: what the VM's operations would cost with no VM at all.
//!
//! - Spin ping-pong: this thread stores a sequence number, a partner thread that polls it
//!   stores it back. Both wait the same way (PAUSE up to 256 polls, then yield), as the session
//!   benchmark's floor does. This is the cost of moving two cache lines between CPUs: the floor
//!   for any synchronous request to another thread, such as a small read run by an executor.
//! - memcpy: the floor for copies, between buffers allocated exactly as the VM allocates host
//!   tensors (64-byte aligned, size rounded up to 64 bytes, zero-filled), so that alignment
//!   and page offsets are the same on both sides.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::hint::black_box;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::stats::{Budget, back_to_back};

/// PAUSEs a waiter polls through before it starts yielding.
const PAUSE_POLLS: u32 = 256;

fn wait_step(polls: &mut u32) {
    if *polls < PAUSE_POLLS {
        *polls += 1;
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// One atomic on a cache line (and its neighbour) of its own.
#[repr(align(128))]
#[derive(Default)]
struct Line(AtomicU64);

#[derive(Default)]
struct Pair {
    ping: Line,
    pong: Line,
}

const STOP: u64 = u64::MAX;

/// Samples of the spin ping-pong round trip (ns), with a partner thread started for the
/// purpose and stopped afterwards.
pub fn spin_pingpong(budget: Budget) -> Vec<f64> {
    let pair = Arc::new(Pair::default());
    let partner = {
        let pair = pair.clone();
        std::thread::spawn(move || {
            let mut seen = 0;
            loop {
                let mut polls = 0;
                let v = loop {
                    let v = pair.ping.0.load(Ordering::Acquire);
                    if v != seen {
                        break v;
                    }
                    wait_step(&mut polls);
                };
                if v == STOP {
                    return;
                }
                seen = v;
                pair.pong.0.store(v, Ordering::Release);
            }
        })
    };
    let mut seq = 0u64;
    let samples = back_to_back(budget, || {
        seq += 1;
        pair.ping.0.store(seq, Ordering::Release);
        let mut polls = 0;
        while pair.pong.0.load(Ordering::Acquire) != seq {
            wait_step(&mut polls);
        }
    });
    pair.ping.0.store(STOP, Ordering::Release);
    partner
        .join()
        .expect("the ping-pong partner does not panic");
    samples
}

/// A zero-filled host buffer allocated as the VM allocates a host tensor of `nbytes`.
pub struct AlignedBuffer {
    ptr: NonNull<u8>,
    layout: Layout,
    len: usize,
}

/// The alignment of host tensors (`HOST_ALIGNMENT` in the library).
pub const TENSOR_ALIGNMENT: usize = 64;

impl AlignedBuffer {
    pub fn new(nbytes: usize) -> AlignedBuffer {
        let layout = Layout::from_size_align(
            nbytes.max(1).next_multiple_of(TENSOR_ALIGNMENT),
            TENSOR_ALIGNMENT,
        )
        .expect("a valid buffer size");
        // SAFETY: the layout has a nonzero size.
        let ptr = NonNull::new(unsafe { alloc_zeroed(layout) }).expect("out of memory");
        AlignedBuffer {
            ptr,
            layout,
            len: nbytes,
        }
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the buffer owns `len` initialised bytes.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the buffer owns `len` initialised bytes, borrowed mutably here.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout in `new`.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// Fills `bytes` with a pattern that depends on `seed` (so no page is left as shared zeros).
pub fn fill(bytes: &mut [u8], seed: u8) {
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(7).wrapping_add(seed);
    }
}

/// One memcpy of `src` into `dst`, which the optimiser cannot drop.
pub fn copy(dst: &mut AlignedBuffer, src: &AlignedBuffer) {
    let dst = dst.as_mut_slice();
    dst.copy_from_slice(src.as_slice());
    black_box(dst);
}
