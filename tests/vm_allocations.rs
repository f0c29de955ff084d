//! Synchronous small reads and writes allocate nothing in steady state, on any thread: a
//! counting allocator watches the whole process while they run. (One test in this binary, so
//! no other test allocates meanwhile.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use discovm::abi::{DLDataType, DLDevice, KDL_INT};
use discovm::object::Tensor;
use discovm::vm::{self, Stream};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator, counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as the caller promises.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as the caller promises.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as the caller promises.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn small_reads_and_writes_allocate_nothing_in_steady_state() {
    let i64 = DLDataType::new(KDL_INT, 64, 1);
    let t = Tensor::empty(&[4], i64, DLDevice::cpu()).unwrap();
    let u = Tensor::empty(&[4], i64, DLDevice::cpu()).unwrap();
    let stream = Stream::new(DLDevice::cpu()).unwrap();
    stream.copy(&u, &t).unwrap(); // `u` was last written on `stream`
    let mut out = [0u8; 8];
    for i in 0..100i64 {
        vm::write(&t, &i.to_ne_bytes()).unwrap();
        vm::read(&t, &mut out).unwrap();
        vm::read(&u, &mut out).unwrap();
    }
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for i in 0..1_000i64 {
        vm::write(&t, &i.to_ne_bytes()).unwrap();
        vm::read(&t, &mut out).unwrap();
        vm::read(&u, &mut out).unwrap();
    }
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
    vm::read(&t, &mut out).unwrap();
    assert_eq!(i64::from_ne_bytes(out), 999);
    assert_eq!(allocations, 0, "allocations during 3000 small accesses");
    stream.sync().unwrap();
}
