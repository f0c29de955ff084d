//! The VM side: the streams and tensors every round reuses, and one function per measured
//! operation. Small reads, busy reads and 16 MiB copies go through the C API, as a C caller
//! would make them; the 4 KiB copy batches go through `discovm::vm::Stream` (the C API has no
//! way to give a stream a thread of its own), with one C API row to show what the boundary adds.

use std::ffi::{CStr, c_void};
use std::ptr;

use discovm::abi::{DLDataType, DLDevice, KDL_INT, KDL_UINT};
use discovm::capi::{
    DVM_OK, dvm_last_error_message, dvm_session, dvm_session_free, dvm_session_new_threaded,
    dvm_session_shutdown, dvm_session_sync_worker, dvm_status, dvm_stream, dvm_stream_free,
    dvm_stream_new, dvm_stream_sync, dvm_tensor, dvm_tensor_copy, dvm_tensor_dl, dvm_tensor_empty,
    dvm_tensor_free, dvm_tensor_read, dvm_tensor_write,
};
use discovm::object::Tensor;
use discovm::vm::{self, Placement, Stream};

use crate::floors::fill;

/// Copies queued on the stream before each busy read (or sync), and their size.
pub const BUSY_COPIES: usize = 8;
pub const BUSY_BYTES: usize = 64 << 10;
/// Size of the copies whose throughput is measured, and how many make one timed batch.
pub const SMALL_COPY_BYTES: usize = 4 << 10;
pub const BATCH: usize = 1000;
/// Size of the copies whose bandwidth is measured.
pub const BIG_COPY_BYTES: usize = 16 << 20;

/// The value the small tensors hold; every round checks that reads return it.
const SMALL_VALUE: i32 = 0x5eed;

/// Exits with the library's message if a C call failed.
fn check(status: dvm_status, what: &str) {
    if status != DVM_OK {
        // SAFETY: the message is a NUL-terminated string owned by this thread's error slot.
        let message = unsafe { CStr::from_ptr(dvm_last_error_message()) };
        eprintln!("vm_bench: {what} failed: {}", message.to_string_lossy());
        std::process::exit(1);
    }
}

/// Exits with the error if a Rust call failed.
fn ok<T>(result: discovm::Result<T>, what: &str) -> T {
    result.unwrap_or_else(|e| {
        eprintln!("vm_bench: {what} failed: {e}");
        std::process::exit(1);
    })
}

fn u8s() -> DLDataType {
    DLDataType::new(KDL_UINT, 8, 1)
}

fn new_stream() -> *mut dvm_stream {
    let mut s = ptr::null_mut();
    // SAFETY: `s` is a valid out pointer.
    check(
        unsafe { dvm_stream_new(DLDevice::cpu(), &mut s) },
        "dvm_stream_new",
    );
    s
}

fn new_tensor(nbytes: usize, dtype: DLDataType) -> *mut dvm_tensor {
    let elems = (nbytes / (dtype.bits as usize / 8)) as i64;
    let mut t = ptr::null_mut();
    // SAFETY: one dim, a valid out pointer.
    check(
        unsafe { dvm_tensor_empty(&elems, 1, dtype, DLDevice::cpu(), &mut t) },
        "dvm_tensor_empty",
    );
    t
}

/// The memory of a C tensor handle. Touched only while no VM work uses the tensor.
fn bytes_of<'a>(t: *mut dvm_tensor, nbytes: usize) -> &'a mut [u8] {
    // SAFETY: `t` is a live tensor handle; its DLTensor describes `nbytes` of compact memory
    // that this program owns while nothing is queued on it (the callers sync first).
    unsafe {
        let dl = &*dvm_tensor_dl(t);
        std::slice::from_raw_parts_mut((dl.data as *mut u8).add(dl.byte_offset as usize), nbytes)
    }
}

/// The memory of a tensor. Touched only while no VM work uses the tensor.
fn tensor_bytes(t: &Tensor) -> &[u8] {
    // SAFETY: the tensor is alive and compact, `nbytes` long, and nothing is queued on it (the
    // callers sync first).
    unsafe { std::slice::from_raw_parts(t.data_ptr(), t.nbytes()) }
}

pub struct Vm {
    /// The stream that last wrote `small`, so reads of `small` run on it; the busy copies and
    /// the 16 MiB copies are queued on it too.
    stream: *mut dvm_stream,
    small: *mut dvm_tensor,
    busy: [(*mut dvm_tensor, *mut dvm_tensor); BUSY_COPIES],
    big_src: *mut dvm_tensor,
    big_dst: *mut dvm_tensor,
    c_small_src: *mut dvm_tensor,
    c_small_dst: *mut dvm_tensor,
    /// Rust-side: a small tensor last written by `rust_stream`, and the 4 KiB chain a -> b -> c.
    rust_stream: Stream,
    rust_small: Tensor,
    chain: [Tensor; 3],
    /// Two streams of the shared per-device executor, and two with threads of their own.
    shared: [Stream; 2],
    own: [Stream; 2],
    /// A stream without a thread, run by this (the main) thread as it submits; a small tensor
    /// it last wrote, and a 4 KiB pair of its own.
    inline: Stream,
    inline_small: Tensor,
    inline_pair: [Tensor; 2],
    /// A threaded session of one worker: its sync is the library's other round trip to a
    /// thread, printed for reference next to the small reads.
    session: *mut dvm_session,
}

impl Vm {
    pub fn new() -> Vm {
        let stream = new_stream();

        // `small`: one int32 whose last writer is `stream`.
        let i32s = DLDataType::new(KDL_INT, 32, 1);
        let small_src = new_tensor(4, i32s);
        let small = new_tensor(4, i32s);
        // SAFETY: live handles; 4 readable bytes.
        unsafe {
            check(
                dvm_tensor_write(small_src, (&SMALL_VALUE as *const i32).cast(), 4),
                "dvm_tensor_write",
            );
            check(dvm_tensor_copy(small, small_src, stream), "dvm_tensor_copy");
            check(dvm_stream_sync(stream), "dvm_stream_sync");
            dvm_tensor_free(small_src);
        }

        let busy = std::array::from_fn(|i| {
            let src = new_tensor(BUSY_BYTES, u8s());
            fill(bytes_of(src, BUSY_BYTES), i as u8);
            (src, new_tensor(BUSY_BYTES, u8s()))
        });
        let big_src = new_tensor(BIG_COPY_BYTES, u8s());
        fill(bytes_of(big_src, BIG_COPY_BYTES), 3);
        let big_dst = new_tensor(BIG_COPY_BYTES, u8s());
        let c_small_src = new_tensor(SMALL_COPY_BYTES, u8s());
        fill(bytes_of(c_small_src, SMALL_COPY_BYTES), 5);
        let c_small_dst = new_tensor(SMALL_COPY_BYTES, u8s());

        let cpu = DLDevice::cpu();
        let rust_stream = ok(Stream::new(cpu), "Stream::new");
        let tensor = |n: usize| ok(Tensor::empty(&[n as i64], u8s(), cpu), "Tensor::empty");
        let rust_small = ok(Tensor::empty(&[1], i32s, cpu), "Tensor::empty");
        let rust_small_src = ok(Tensor::empty(&[1], i32s, cpu), "Tensor::empty");
        ok(
            vm::write(&rust_small_src, &SMALL_VALUE.to_ne_bytes()),
            "vm::write",
        );
        ok(
            rust_stream.copy(&rust_small, &rust_small_src),
            "Stream::copy",
        );
        ok(rust_stream.sync(), "Stream::sync");
        let chain = [
            tensor(SMALL_COPY_BYTES),
            tensor(SMALL_COPY_BYTES),
            tensor(SMALL_COPY_BYTES),
        ];
        let mut pattern = vec![0u8; SMALL_COPY_BYTES];
        fill(&mut pattern, 9);
        ok(vm::write(&chain[0], &pattern), "vm::write");
        let shared = [
            ok(Stream::new(cpu), "Stream::new"),
            ok(Stream::new(cpu), "Stream::new"),
        ];
        let own = [
            ok(
                Stream::with_placement(cpu, Placement::OwnThread),
                "Stream::with_placement",
            ),
            ok(
                Stream::with_placement(cpu, Placement::OwnThread),
                "Stream::with_placement",
            ),
        ];
        let inline = ok(
            Stream::with_placement(cpu, Placement::Inline),
            "Stream::with_placement",
        );
        let inline_small = ok(Tensor::empty(&[1], i32s, cpu), "Tensor::empty");
        ok(inline.copy(&inline_small, &rust_small_src), "Stream::copy");
        let inline_pair = [tensor(SMALL_COPY_BYTES), tensor(SMALL_COPY_BYTES)];
        ok(vm::write(&inline_pair[0], &pattern), "vm::write");
        let mut session = ptr::null_mut();
        // SAFETY: default options, a valid out pointer.
        check(
            unsafe { dvm_session_new_threaded(1, 1, ptr::null(), &mut session) },
            "dvm_session_new_threaded",
        );
        Vm {
            inline,
            inline_small,
            inline_pair,
            session,
            stream,
            small,
            busy,
            big_src,
            big_dst,
            c_small_src,
            c_small_dst,
            rust_stream,
            rust_small,
            chain,
            shared,
            own,
        }
    }

    /// `dvm_tensor_read` of the 4-byte tensor into `out`.
    #[inline]
    pub fn read_c(&self, out: &mut i32) {
        // SAFETY: a live handle; `out` holds 4 bytes.
        check(
            unsafe { dvm_tensor_read(self.small, (out as *mut i32).cast::<c_void>(), 4) },
            "dvm_tensor_read",
        );
    }

    /// `vm::read` of the 4-byte tensor into `out`.
    #[inline]
    pub fn read_rust(&self, out: &mut [u8; 4]) {
        ok(vm::read(&self.rust_small, out), "vm::read");
    }

    /// `dvm_session_sync_worker(session, 0)` on the one-worker session.
    #[inline]
    pub fn session_sync(&self) {
        // SAFETY: a live handle.
        check(
            unsafe { dvm_session_sync_worker(self.session, 0) },
            "dvm_session_sync_worker",
        );
    }

    /// `vm::read` of the 4-byte tensor last written by the inline stream: it runs on the
    /// calling thread.
    #[inline]
    pub fn read_inline(&self, out: &mut [u8; 4]) {
        ok(vm::read(&self.inline_small, out), "vm::read");
    }

    /// Checks that the small tensors still read back their value.
    pub fn check_small_reads(&self) {
        let mut c = 0;
        self.read_c(&mut c);
        let mut r = [0u8; 4];
        self.read_rust(&mut r);
        let mut i = [0u8; 4];
        self.read_inline(&mut i);
        assert_eq!(
            i32::from_ne_bytes(i),
            SMALL_VALUE,
            "an inline read returned a wrong value"
        );
        assert_eq!(c, SMALL_VALUE, "dvm_tensor_read returned a wrong value");
        assert_eq!(
            i32::from_ne_bytes(r),
            SMALL_VALUE,
            "vm::read returned a wrong value"
        );
    }

    /// Queues the busy copies on the small tensor's stream (untimed part of a busy sample).
    pub fn queue_busy_copies(&self) {
        for &(src, dst) in &self.busy {
            // SAFETY: live handles.
            check(
                unsafe { dvm_tensor_copy(dst, src, self.stream) },
                "dvm_tensor_copy",
            );
        }
    }

    pub fn sync(&self) {
        // SAFETY: a live handle.
        check(unsafe { dvm_stream_sync(self.stream) }, "dvm_stream_sync");
    }

    /// Overwrites the busy copies' destinations, queues the copies and checks that they land.
    pub fn check_busy_copies(&self) {
        self.sync();
        for &(_, dst) in &self.busy {
            fill(bytes_of(dst, BUSY_BYTES), 0xa5);
        }
        self.queue_busy_copies();
        self.sync();
        for &(src, dst) in &self.busy {
            assert!(
                bytes_of(src, BUSY_BYTES) == bytes_of(dst, BUSY_BYTES),
                "a busy copy did not land"
            );
        }
    }

    /// One 16 MiB copy through the C API, complete on return.
    pub fn big_copy(&self) {
        // SAFETY: live handles.
        check(
            unsafe { dvm_tensor_copy(self.big_dst, self.big_src, self.stream) },
            "dvm_tensor_copy",
        );
        self.sync();
    }

    /// Overwrites the 16 MiB destination, copies again and checks that the copy landed.
    pub fn check_big_copy(&self) {
        self.sync();
        fill(bytes_of(self.big_dst, BIG_COPY_BYTES), 0xa5);
        self.big_copy();
        let dst = bytes_of(self.big_dst, BIG_COPY_BYTES);
        assert!(
            bytes_of(self.big_src, BIG_COPY_BYTES) == dst,
            "a 16 MiB copy did not land"
        );
    }

    /// Page offsets of the 16 MiB tensors' memory (source, destination).
    pub fn big_page_offsets(&self) -> (usize, usize) {
        let off = |t| bytes_of(t, BIG_COPY_BYTES).as_ptr() as usize % 4096;
        (off(self.big_src), off(self.big_dst))
    }

    /// A batch of 4 KiB copies on one stream through the C API, then a sync.
    pub fn batch_c(&self) {
        for _ in 0..BATCH {
            // SAFETY: live handles.
            check(
                unsafe { dvm_tensor_copy(self.c_small_dst, self.c_small_src, self.stream) },
                "dvm_tensor_copy",
            );
        }
        self.sync();
    }

    pub fn check_batch_c(&self) {
        self.sync();
        fill(bytes_of(self.c_small_dst, SMALL_COPY_BYTES), 0);
        self.batch_c();
        assert!(
            bytes_of(self.c_small_src, SMALL_COPY_BYTES)
                == bytes_of(self.c_small_dst, SMALL_COPY_BYTES),
            "a 4 KiB copy did not land"
        );
    }

    /// A batch of 4 KiB copies a -> b on one stream, then a sync.
    pub fn batch_one_stream(&self) {
        let [a, b, _] = &self.chain;
        for _ in 0..BATCH {
            ok(self.rust_stream.copy(b, a), "Stream::copy");
        }
        ok(self.rust_stream.sync(), "Stream::sync");
    }

    /// A batch of 4 KiB copies on the inline stream: each runs before `copy` returns.
    pub fn batch_inline(&self) {
        let [a, b] = &self.inline_pair;
        for _ in 0..BATCH {
            ok(self.inline.copy(b, a), "Stream::copy");
        }
        ok(self.inline.sync(), "Stream::sync");
    }

    pub fn check_batch_inline(&self) {
        let [a, b] = &self.inline_pair;
        ok(vm::write(b, &vec![0u8; SMALL_COPY_BYTES]), "vm::write");
        self.batch_inline();
        assert!(
            tensor_bytes(a) == tensor_bytes(b),
            "an inline copy did not land"
        );
    }

    /// A batch of 4 KiB copies alternating between two streams, each depending on the one
    /// before it on the other stream: a -> b on the first, b -> c on the second. Reading b
    /// waits for the other stream's write of it, and the next write of b waits for that read
    /// (soft sync both ways, every copy).
    pub fn batch_two_streams(&self, own_threads: bool) {
        let [s1, s2] = if own_threads { &self.own } else { &self.shared };
        let [a, b, c] = &self.chain;
        for _ in 0..BATCH / 2 {
            ok(s1.copy(b, a), "Stream::copy");
            ok(s2.copy(c, b), "Stream::copy");
        }
        ok(s1.sync(), "Stream::sync");
        ok(s2.sync(), "Stream::sync");
    }

    /// Checks that a two-stream batch moves a's bytes all the way to c.
    pub fn check_two_streams(&self, own_threads: bool) {
        let [a, b, c] = &self.chain;
        // Clear b and c through the VM, so the check sees only this batch's copies.
        let zeros = vec![0u8; SMALL_COPY_BYTES];
        ok(vm::write(b, &zeros), "vm::write");
        ok(vm::write(c, &zeros), "vm::write");
        self.batch_two_streams(own_threads);
        assert!(
            tensor_bytes(a) == tensor_bytes(c),
            "a two-stream chain did not deliver"
        );
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        // SAFETY: handles this struct owns, freed once.
        unsafe {
            dvm_stream_sync(self.stream);
            dvm_tensor_free(self.small);
            for &(src, dst) in &self.busy {
                dvm_tensor_free(src);
                dvm_tensor_free(dst);
            }
            dvm_tensor_free(self.big_src);
            dvm_tensor_free(self.big_dst);
            dvm_tensor_free(self.c_small_src);
            dvm_tensor_free(self.c_small_dst);
            dvm_stream_free(self.stream);
            dvm_session_shutdown(self.session);
            dvm_session_free(self.session);
        }
    }
}

/// The CPU a thread of this process last ran on, found by its name (the library names the
/// shared CPU executor `dvm-vm-1-0`).
pub fn thread_cpu(name: &str) -> Option<usize> {
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let path = task.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(path.join("stat")).ok()?;
        // Fields after the name start at field 3 (state); `processor` is field 39.
        let rest = &stat[stat.rfind(')')? + 2..];
        return rest.split_whitespace().nth(36)?.parse().ok();
    }
    None
}

/// The CPU the calling thread runs on.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu has no preconditions.
    usize::try_from(unsafe { libc::sched_getcpu() }).ok()
}
