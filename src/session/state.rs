//! Whether a session is open, stopping or broken, and why: one state for every kind of session,
//! which its links to workers that can die (worker processes, nodes) share.
//!
//! The one idea: the first death breaks the session once, for everyone. Whoever notices a death
//! first (a watcher, a waiting thread, a node's reader) records it here, unless the session was
//! stopping, and breaks the session's CPU communicator with it, so that workers waiting for the
//! dead one in a collective fail too; every later call and wait on the session fails with that
//! first cause. Once the session stops, a worker that ends has stopped, not died.

use std::sync::{OnceLock, PoisonError};

use crate::ccl::CurrentCcl;
use crate::object::{Error, ErrorKind, Result};
use crate::sync::atomic::{AtomicBool, Ordering};

/// On cache lines of its own: every call reads it, and no worker's writes may share them.
#[repr(align(128))]
pub(crate) struct SessionState {
    /// Why the session is broken: the first death of one of its workers or nodes.
    broken: OnceLock<Error>,
    /// Set once shutdown began (or a failed start stops what it started).
    stopping: AtomicBool,
    /// The CPU communicator the workers hold (the session's own), if `init_ccl` made one.
    pub ccl: CurrentCcl,
    /// Set when the referee ruled a collective hopeless, which aborts the waiting worker's
    /// communicators: they are made again before the session's next call.
    ruled: AtomicBool,
}

impl SessionState {
    pub fn new() -> SessionState {
        SessionState {
            broken: OnceLock::new(),
            stopping: AtomicBool::new(false),
            ccl: CurrentCcl::default(),
            ruled: AtomicBool::new(false),
        }
    }

    /// Notes that a ruling aborted a worker's communicators.
    pub fn note_ruling(&self) {
        self.ruled.store(true, Ordering::SeqCst);
    }

    /// Whether a ruling aborted communicators since the last time this said so.
    pub fn take_ruling(&self) -> bool {
        self.ruled.load(Ordering::Relaxed) && self.ruled.swap(false, Ordering::SeqCst)
    }

    /// Marks the session stopping; true for the first call only (the one that stops it).
    pub fn begin_stopping(&self) -> bool {
        !self.stopping.swap(true, Ordering::SeqCst)
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    pub fn is_broken(&self) -> bool {
        self.broken.get().is_some()
    }

    /// Records a death in `death` (the first record stays), after breaking the session with it
    /// unless the session was stopping: whoever sees the death then sees the session broken
    /// too.
    pub fn record_death<'a>(&self, death: &'a OnceLock<Error>, error: Error) -> &'a Error {
        if !self.is_stopping() {
            let _ = self.broken.set(error.clone());
            // The others may wait for the dead worker in a collective: they fail with its
            // death.
            if let Some(ccl) = &*self.ccl.lock().unwrap_or_else(PoisonError::into_inner) {
                ccl.abort(&error);
            }
        }
        death.get_or_init(|| error)
    }

    /// Fails with the first death once the session is broken.
    pub fn check(&self) -> Result<()> {
        match self.broken.get() {
            Some(first) => Err(first.clone()),
            None => Ok(()),
        }
    }

    /// The liveness rule of a worker that can die, given its own `death` if it is gone: a
    /// worker gone after the session stopped has exited (`SessionClosed`); one gone before has
    /// died of its cause; one that lives fails with the session's first death, if any.
    pub fn alive(&self, worker: usize, death: Option<&Error>) -> Result<()> {
        match death {
            Some(_) if self.is_stopping() => Err(Error::new(
                ErrorKind::SessionClosed,
                format!("worker {worker} has exited"),
            )),
            Some(death) => Err(death.clone()),
            None => self.check(),
        }
    }
}
