//! Whether a session whose workers can die (worker processes, nodes) is broken, and why.
//!
//! The one idea: the first death breaks the session once, for everyone. Whoever notices a death
//! first (a watcher, a waiting thread, a node's reader) records it here, unless the session was
//! stopping, and breaks the session's CPU communicator with it, so that workers waiting for the
//! dead one in a collective fail too; every later call and wait on the session fails with that
//! first cause.

use std::sync::{OnceLock, PoisonError};

use crate::ccl::CurrentCcl;
use crate::object::{Error, Result};
use crate::sync::atomic::{AtomicBool, Ordering};

pub(crate) struct Health {
    /// Why the session is broken: the first death of one of its workers or nodes.
    pub broken: OnceLock<Error>,
    /// Set once the session sent `Shutdown`: a worker or node that ends then has stopped, not
    /// died.
    pub stopping: AtomicBool,
    /// The CPU communicator the workers hold (the session's own).
    pub ccl: CurrentCcl,
}

impl Health {
    pub fn new(ccl: CurrentCcl) -> Health {
        Health {
            broken: OnceLock::new(),
            stopping: AtomicBool::new(false),
            ccl,
        }
    }

    /// Records a death in `death` (the first record stays), after breaking the session with it
    /// unless the session was stopping: whoever sees the death then sees the session broken
    /// too.
    pub fn record_death<'a>(&self, death: &'a OnceLock<Error>, error: Error) -> &'a Error {
        if !self.stopping.load(Ordering::SeqCst) {
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
}
