//! A futex word: a 32-bit atomic that a thread sleeps on until another thread wakes it, in this
//! process or in another one that maps the same shared memory. The kernel compares the word with
//! the value the sleeper expects and queues the sleeper in one step, so a wake-up that changed
//! the word first is never lost: the sleeper does not sleep at all.
//!
//! The operations are the process-shared ones (no `FUTEX_PRIVATE_FLAG`): the kernel keys a
//! shared futex by the page it lives in, so a word in a `MAP_SHARED` mapping is the same futex
//! in every process that maps it. Under `cfg(loom)` the word is modelled with loom's lock and
//! condition variable (the lock stands for the kernel's hash-bucket lock: compare and queue
//! under it, wake under it), and a timed wait is a plain wait, as every timed park is in a model.

use std::time::Duration;

#[cfg(not(loom))]
use std::sync::atomic::AtomicU32;

#[cfg(loom)]
use loom::sync::atomic::AtomicU32;

/// A futex word. Without loom it is exactly an `AtomicU32`, so it can live at a fixed offset
/// of memory shared with another process.
#[cfg(not(loom))]
#[repr(transparent)]
pub(crate) struct Futex(AtomicU32);

#[cfg(not(loom))]
impl Futex {
    pub(crate) const fn new(value: u32) -> Futex {
        Futex(AtomicU32::new(value))
    }

    /// The word itself.
    pub(crate) fn word(&self) -> &AtomicU32 {
        &self.0
    }

    /// Sleeps while the word holds `expected`, for at most `timeout`. Returns at once if it
    /// holds another value; may return early (a signal, a spurious wake-up), so callers
    /// re-check what they wait for.
    pub(crate) fn wait(&self, expected: u32, timeout: Duration) {
        let timeout = libc::timespec {
            tv_sec: timeout.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: the word is an aligned `u32` that stays mapped for the whole call (`self`
        // borrows it); FUTEX_WAIT only reads it, and reads the relative timeout, a valid
        // `timespec` on this stack; the last two arguments are unused by FUTEX_WAIT. Every
        // outcome (woken, EAGAIN when the word changed, ETIMEDOUT, EINTR) means "look again".
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.0.as_ptr(),
                libc::FUTEX_WAIT,
                expected,
                &timeout as *const libc::timespec,
                std::ptr::null::<u32>(),
                0u32,
            );
        }
    }

    /// Wakes one thread sleeping on the word, in any process.
    pub(crate) fn wake_one(&self) {
        // SAFETY: FUTEX_WAKE does not touch the word's memory, only the kernel's queue for its
        // address; the timeout and second-word arguments are unused by it.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.0.as_ptr(),
                libc::FUTEX_WAKE,
                1i32,
                std::ptr::null::<libc::timespec>(),
                std::ptr::null::<u32>(),
                0u32,
            );
        }
    }
}

/// The model of a futex word: the word, and the kernel's queue of its sleepers.
#[cfg(loom)]
pub(crate) struct Futex {
    word: AtomicU32,
    queue: loom::sync::Mutex<()>,
    woken: loom::sync::Condvar,
}

#[cfg(loom)]
impl Futex {
    pub(crate) fn new(value: u32) -> Futex {
        Futex {
            word: AtomicU32::new(value),
            queue: loom::sync::Mutex::new(()),
            woken: loom::sync::Condvar::new(),
        }
    }

    pub(crate) fn word(&self) -> &AtomicU32 {
        &self.word
    }

    /// Compares and queues under the queue's lock, as the kernel does under its bucket lock.
    pub(crate) fn wait(&self, expected: u32, _timeout: Duration) {
        let queued = self.queue.lock().unwrap();
        if self.word.load(std::sync::atomic::Ordering::SeqCst) == expected {
            drop(self.woken.wait(queued).unwrap());
        }
    }

    pub(crate) fn wake_one(&self) {
        let _queued = self.queue.lock().unwrap();
        self.woken.notify_one();
    }
}
