//! The watch over a worker's Gloo waits. Gloo waits for a peer until its timeout, even for one
//! that finished the call without joining, or is gone; only the controller, which reads every
//! worker's record, can tell. It rules so in the worker's signals, and this watch, a thread of
//! the worker's own, aborts the worker's meshes, which ends the wait at once.
//!
//! The one idea: the thread sleeps until the worker enters a Gloo operation, then reads the
//! signals every few milliseconds until it leaves: a ruling on the worker's call, the session's
//! shutdown, or a later `init_ccl` (whose new communicators the worker could not get to).

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::device::gloo::Mesh;
use crate::object::{Error, ErrorKind, Result};
use crate::sync::atomic::Ordering;
use crate::worker::activity::own_call_stamp;
use crate::worker::{Signals, WorkerShared};

/// How often the watch reads the signals while the worker waits.
const POLL: Duration = Duration::from_millis(5);

/// A worker's watch over the Gloo operations of its meshes; dropping it ends the thread.
pub(crate) struct Watch {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<Watched>,
    wake: Condvar,
    meshes: Vec<Arc<Mesh>>,
    worker: Arc<WorkerShared>,
}

#[derive(Default)]
struct Watched {
    /// The operation the worker is in, if any.
    waiting: Option<Wait>,
    /// Why the watch aborted the meshes, once it did.
    aborted: Option<Error>,
    closed: bool,
}

#[derive(Clone, Copy, PartialEq)]
struct Wait {
    /// The worker's call, if it went to every worker (0 otherwise: never ruled on).
    call: u64,
    /// The worker's `ccl_generation` when the operation began.
    generation: u64,
}

impl Wait {
    /// Why an operation begun so must end now, if it must.
    fn hopeless(&self, signals: &Signals) -> Option<Error> {
        if signals.stopping.load(Ordering::SeqCst) {
            return Some(Error::new(
                ErrorKind::SessionClosed,
                "the session was shut down",
            ));
        }
        if signals.ccl_generation.load(Ordering::SeqCst) != self.generation {
            return Some(Error::runtime("init_ccl was called again"));
        }
        let ruled = (self.call != 0).then(|| signals.ruling.on(self.call));
        ruled.flatten().map(Error::runtime)
    }
}

impl Watch {
    /// Starts the watch of `meshes`, the meshes of the worker that `worker` is.
    pub(crate) fn start(meshes: Vec<Arc<Mesh>>, worker: Arc<WorkerShared>) -> Result<Watch> {
        let shared = Arc::new(Shared {
            state: Mutex::new(Watched::default()),
            wake: Condvar::new(),
            meshes,
            worker,
        });
        let watching = shared.clone();
        let thread = std::thread::Builder::new()
            .name("discovm-gloo-watch".into())
            .spawn(move || watching.run())
            .map_err(|e| Error::runtime(format!("cannot start the Gloo watch thread: {e}")))?;
        Ok(Watch {
            shared,
            thread: Some(thread),
        })
    }

    /// Runs `body`, an operation on the meshes, under the watch: when the watch aborted it,
    /// the error is the watch's reason rather than Gloo's report of the abort.
    pub(crate) fn during<T>(&self, body: impl FnOnce() -> Result<T>) -> Result<T> {
        let signals = &*self.shared.worker.signals;
        let wait = Wait {
            call: own_call_stamp(),
            generation: signals.ccl_generation.load(Ordering::SeqCst),
        };
        {
            let mut state = self.shared.lock();
            if let Some(why) = &state.aborted {
                return Err(why.clone());
            }
            state.waiting = Some(wait);
        }
        self.shared.wake.notify_one();
        let done = body();
        let mut state = self.shared.lock();
        state.waiting = None;
        match (&state.aborted, done) {
            (Some(why), Err(_)) => Err(why.clone()),
            (_, done) => done,
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Watched> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The watch thread: sleeps while no operation runs; while one does, reads the signals
    /// every [`POLL`] and aborts the meshes once the wait is hopeless.
    fn run(&self) {
        let mut state = self.lock();
        loop {
            if state.closed {
                return;
            }
            let Some(wait) = state.waiting.filter(|_| state.aborted.is_none()) else {
                state = self
                    .wake
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
                continue;
            };
            if let Some(why) = wait.hopeless(&self.worker.signals) {
                for mesh in &self.meshes {
                    mesh.abort(&why.message);
                }
                state.aborted = Some(why);
                continue;
            }
            state = self
                .wake
                .wait_timeout(state, POLL)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
