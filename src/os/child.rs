//! A child process of this one, and how it ends: reaped exactly once, never signalled after
//! that, and never left behind (dropping a [`Child`] kills and reaps it).
//!
//! The idea that makes it work: a child is reaped once, by whoever notices its death first,
//! under a per-child lock that also records the cause; everyone else reads the record. Waiting
//! and signalling go through the child's pidfd where the kernel has one, so a recycled pid is
//! never signalled; where it has none, waiting falls back to polling `waitpid(WNOHANG)`.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use super::exit::ExitCause;
use super::pidfd::{send_signal, wait_readable};
use crate::channel::Deadline;

/// How often waiting without a pidfd looks at the child again, at most.
const LONGEST_NAP: Duration = Duration::from_millis(10);

/// A child process of this one. Dropping it kills the process (if it is still running) and
/// reaps it. Any thread may use it.
pub(crate) struct Child {
    process: Arc<Process>,
}

/// What the owner and the watcher share about one child.
pub(super) struct Process {
    pid: libc::pid_t,
    /// The child's pidfd; `None` where the kernel has none to give.
    pidfd: Option<OwnedFd>,
    /// How it ended, once it was reaped; set once, under `reaping`.
    cause: OnceLock<ExitCause>,
    /// Held around each `waitpid` and each signal, so the pid is reaped once and never
    /// signalled after it was reaped (when it may name another process).
    reaping: Mutex<()>,
    /// A watcher reaps it, so [`Child::try_exit`] need only read the record.
    watched: AtomicBool,
}

impl Process {
    pub(super) fn pidfd(&self) -> Option<RawFd> {
        self.pidfd.as_ref().map(AsRawFd::as_raw_fd)
    }

    pub(super) fn recorded(&self) -> Option<ExitCause> {
        self.cause.get().copied()
    }

    pub(super) fn set_watched(&self, watched: bool) {
        self.watched.store(watched, Ordering::Release);
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        self.reaping.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reaps the child if it has ended, without blocking; the cause, once it has.
    pub(super) fn try_reap(&self) -> Option<ExitCause> {
        if let Some(cause) = self.recorded() {
            return Some(cause);
        }
        let _reaping = self.lock();
        if let Some(cause) = self.recorded() {
            return Some(cause);
        }
        let mut status = 0;
        let cause = loop {
            // SAFETY: `status` is writable; the child is not reaped yet (no cause recorded, and
            // every reap records one under this lock), so `pid` still names it.
            let reaped = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            if reaped == self.pid {
                break ExitCause::from_wait_status(status);
            }
            if reaped == 0 {
                return None;
            }
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                // Collected by someone else in this process: it has ended all the same.
                _ => break ExitCause::Unknown,
            }
        };
        Some(*self.cause.get_or_init(|| cause))
    }

    /// Waits until the child has ended and is reaped, or until `deadline`.
    fn wait_until(&self, deadline: Deadline) -> Option<ExitCause> {
        let mut nap = Duration::from_millis(1);
        // The pidfd said "ended" last time round, yet waitpid did not agree (a tracer holds
        // the child): it would say so again at once, so nap instead.
        let mut said_ended = false;
        // Not channel::wait: poll() on the pidfd wakes at the death; without one, waitpid naps.
        loop {
            if let Some(cause) = self.try_reap() {
                return Some(cause);
            }
            let left = deadline.remaining();
            if left.is_some_and(|left| left.is_zero()) {
                return None;
            }
            match &self.pidfd {
                Some(pidfd) if !said_ended => said_ended = wait_readable(pidfd.as_raw_fd(), left),
                _ => {
                    std::thread::sleep(left.map_or(nap, |left| left.min(nap)));
                    nap = (nap * 2).min(LONGEST_NAP);
                    said_ended = false;
                }
            }
        }
    }

    /// Sends SIGKILL, unless the child was reaped already.
    fn kill(&self) {
        let _reaping = self.lock();
        if self.recorded().is_some() {
            return;
        }
        // Failures mean the child has ended already (ESRCH): waiting will reap it.
        match &self.pidfd {
            Some(pidfd) => {
                let _ = send_signal(pidfd.as_fd(), libc::SIGKILL);
            }
            None => {
                // SAFETY: kill takes plain numbers; the child is not reaped (checked under the
                // lock every reaper takes), so `pid` still names it.
                unsafe { libc::kill(self.pid, libc::SIGKILL) };
            }
        }
    }
}

impl Child {
    /// The child `pid`, just started by this process, with its pidfd where there is one.
    pub(super) fn new(pid: libc::pid_t, pidfd: Option<OwnedFd>) -> Child {
        Child {
            process: Arc::new(Process {
                pid,
                pidfd,
                cause: OnceLock::new(),
                reaping: Mutex::new(()),
                watched: AtomicBool::new(false),
            }),
        }
    }

    pub(crate) fn pid(&self) -> i32 {
        self.process.pid
    }

    pub(super) fn process(&self) -> &Arc<Process> {
        &self.process
    }

    /// How the child ended, or `None` while it runs. Cheap: with a watcher (which reaps it) a
    /// read of what the watcher recorded; without one, a non-blocking `waitpid`.
    pub(crate) fn try_exit(&self) -> Option<ExitCause> {
        match self.process.recorded() {
            Some(cause) => Some(cause),
            None if self.process.watched.load(Ordering::Acquire) => None,
            None => self.process.try_reap(),
        }
    }

    /// Waits up to `timeout` for the child to end; how it ended, or `None` if it still runs.
    pub(crate) fn wait_timeout(&self, timeout: Duration) -> Option<ExitCause> {
        self.process.wait_until(Deadline::after(Some(timeout)))
    }

    /// Ends the child: waits up to `grace` for it to exit by itself (after it was told to shut
    /// down), then kills it with SIGKILL and reaps it. How it ended. Several children share
    /// one grace period when each gets what is left of it (`deadline - now`).
    pub(crate) fn terminate(&self, grace: Duration) -> ExitCause {
        if let Some(cause) = self.wait_timeout(grace) {
            return cause;
        }
        self.process.kill();
        self.wait()
    }

    /// Waits until the child has ended, however long that takes, and reaps it.
    fn wait(&self) -> ExitCause {
        loop {
            if let Some(cause) = self.process.wait_until(Deadline::NEVER) {
                return cause;
            }
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.process.try_reap().is_none() {
            self.process.kill();
            self.wait();
        }
    }
}
