//! A global allocator that counts allocations, for the whole process and per thread, and
//! otherwise forwards to the system allocator.
//!
//! Every allocation costs one relaxed atomic add and one thread-local add more than usual; the
//! paths this benchmark times allocate nothing (or, for enqueued copies, the same amount in
//! every run), so the counting itself does not tilt a comparison.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

pub struct Counting;

static PROCESS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    // Const-initialised and without a destructor: reading it never allocates.
    static THREAD: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    PROCESS.fetch_add(1, Ordering::Relaxed);
    let _ = THREAD.try_with(|c| c.set(c.get() + 1));
}

/// Allocations (including reallocations) by every thread so far.
pub fn process() -> u64 {
    PROCESS.load(Ordering::Relaxed)
}

/// Allocations (including reallocations) by the calling thread so far.
pub fn this_thread() -> u64 {
    THREAD.with(Cell::get)
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: as the caller promises.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: as the caller promises.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as the caller promises.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: as the caller promises.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
