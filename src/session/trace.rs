//! A session's timeline: `trace_start` begins collecting every worker's events (from the rings
//! of the flight recorder, `worker::events`) and the controller's own (its calls sent, its
//! waits, its copies); `trace_stop` writes them to a file in the Chrome Trace Event Format;
//! `trace_dump` writes the flight recorder's last events of every worker without a trace.
//!
//! The one idea: the workers only ever write their rings, at the same cost whether a trace runs
//! or not; a collector thread drains the rings every few milliseconds while a trace runs (the
//! controller's for its machine, each other node's for its own, sent at the stop), so one
//! mechanism serves the flight recorder and the timeline, and a ring that overflowed between
//! two drains shows as events counted lost, never as a wait.

pub(crate) mod collect;
#[cfg(not(loom))]
mod nodes;
mod timeline;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::link::WorkerLink;
use super::state::SessionState;
use crate::object::{Error, Result};
use crate::worker::events::{Ring, now_ns};
use collect::{Collected, Collector, Doing, MAX_NOTED_BYTES, Noted, Rings, lock};

impl Rings for [WorkerLink] {
    fn count(&self) -> usize {
        self.len()
    }

    fn ring(&self, index: usize) -> Option<&Ring> {
        self[index].events()
    }
}

/// A session's tracer.
#[derive(Default)]
pub(crate) struct Tracer {
    /// Set while a trace runs: the controller notes what it does.
    on: AtomicBool,
    running: Mutex<Option<Running>>,
    /// What the controller did while the trace runs: apart from the workers' events, so that
    /// noting a call takes one lock nobody holds long.
    noted: Mutex<NotedSoFar>,
}

/// The controller's events of the running trace.
#[derive(Default)]
struct NotedSoFar {
    list: Vec<Noted>,
    /// Left out past [`MAX_NOTED_BYTES`].
    dropped: u64,
}

/// A trace that runs.
struct Running {
    started_ns: u64,
    /// Drains the rings this process reads (its worker threads', its worker processes').
    collector: Collector,
    /// The other nodes, which collect their workers' events themselves.
    #[cfg(not(loom))]
    nodes: nodes::Nodes,
}

impl Tracer {
    /// Whether a trace runs (what the controller does is noted only then).
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Notes what the controller did, from `start_ns` until now, when a trace runs.
    pub fn note(&self, doing: Doing, start_ns: u64) {
        if !self.is_on() {
            return;
        }
        let dur_ns = now_ns().saturating_sub(start_ns);
        let mut noted = lock(&self.noted);
        if (noted.list.len() + 1) * size_of::<Noted>() > MAX_NOTED_BYTES {
            noted.dropped += 1;
            return;
        }
        noted.list.push(Noted {
            doing,
            start_ns,
            dur_ns,
        });
    }

    /// Begins a trace of `workers`' events from now on; its collector ends with the trace, or
    /// when the session (`state`) stops.
    pub fn start(&self, workers: Arc<[WorkerLink]>, state: Arc<SessionState>) -> Result<()> {
        let mut running = lock(&self.running);
        if running.is_some() {
            return Err(Error::value(
                "a trace of this session runs already: stop it (trace_stop) before starting \
                 another",
            ));
        }
        #[cfg(not(loom))]
        let nodes = nodes::Nodes::start(&workers);
        let started_ns = now_ns();
        let collector = Collector::start(workers, move || state.is_stopping())?;
        *lock(&self.noted) = NotedSoFar::default();
        *running = Some(Running {
            started_ns,
            collector,
            #[cfg(not(loom))]
            nodes,
        });
        self.on.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Ends the running trace and writes it to `path`, with `about` (the session's kind and
    /// its workers' nodes) in its metadata.
    pub fn stop(&self, path: &str, about: &timeline::About) -> Result<()> {
        let running = lock(&self.running).take().ok_or_else(|| {
            Error::value("no trace of this session runs: start one (trace_start) first")
        })?;
        self.on.store(false, Ordering::SeqCst);
        let mut collected = running.collector.finish();
        let noted = std::mem::take(&mut *lock(&self.noted));
        collected.controller = noted.list;
        collected.dropped += noted.dropped;
        #[cfg(not(loom))]
        running.nodes.stop(&mut collected);
        timeline::write(path, about, running.started_ns, &collected)
    }

    /// Writes the flight recorder's last events of every worker to `path`.
    pub fn dump(workers: &[WorkerLink], path: &str, about: &timeline::About) -> Result<()> {
        #[allow(unused_mut)]
        let mut collected = Collected::last(workers);
        #[cfg(not(loom))]
        nodes::Nodes::dump(workers, &mut collected);
        let first = collected
            .workers
            .iter()
            .flatten()
            .map(|event| event.start_ns)
            .min()
            .unwrap_or_else(now_ns);
        timeline::write(path, about, first, &collected)
    }
}

pub(crate) use timeline::About;

impl super::controller::Session {
    /// Runs `body`, a wait of the controller's (`what`, moving `bytes`), noted when a trace
    /// runs.
    pub(super) fn traced<T>(&self, what: &'static str, bytes: u64, body: impl FnOnce() -> T) -> T {
        let started = self.tracer.is_on().then(now_ns);
        let done = body();
        if let Some(started) = started {
            self.tracer.note(Doing::Waited { what, bytes }, started);
        }
        done
    }

    /// A trace ends, and the flight recorder is read, on a session a death broke too (that is
    /// when they matter most); only after shutdown do they fail.
    fn check_not_closed(&self) -> Result<()> {
        match self.is_closed() {
            true => Err(super::controller::closed_error()),
            false => Ok(()),
        }
    }

    /// What a trace's file says of the session: its kind, and each worker's node.
    fn about(&self) -> About {
        let nodes: Vec<usize> = (0..self.workers.len())
            .map(|worker| self.workers[worker].observe(worker).node)
            .collect();
        let kind = if nodes.iter().any(|&node| node != 0) {
            "socket"
        } else if matches!(self.workers[0], WorkerLink::Thread(_)) {
            "threaded"
        } else {
            "process"
        };
        About { kind, nodes }
    }

    /// Begins a trace: from now on, every worker's events and the controller's calls, syncs and
    /// copies are kept (up to 1 GiB of them), until [`Session::trace_stop`].
    ///
    /// Errors: `ValueError` when a trace runs already; `SessionClosed` after shutdown.
    pub fn trace_start(&self) -> Result<()> {
        self.check_open()?;
        self.tracer.start(self.workers.clone(), self.state.clone())
    }

    /// Ends the trace and writes it to `path` in the Chrome Trace Event Format (JSON that
    /// ui.perfetto.dev and chrome://tracing open).
    ///
    /// Errors: `ValueError` when no trace runs, or when `path` cannot be written (the trace is
    /// lost then); `SessionClosed` after shutdown. A session a death broke still writes it.
    pub fn trace_stop(&self, path: &str) -> Result<()> {
        self.check_not_closed()?;
        self.tracer.stop(path, &self.about())
    }

    /// Writes the flight recorder to `path`, in the format of a trace: the last 1024 events of
    /// every worker (a worker process's, after its death too; another node's, as the node sends
    /// them), with no trace running.
    ///
    /// Errors: `ValueError` when `path` cannot be written; `SessionClosed` after shutdown. A
    /// session a death broke still writes it.
    pub fn trace_dump(&self, path: &str) -> Result<()> {
        self.check_not_closed()?;
        Tracer::dump(&self.workers, path, &self.about())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_trace_left_running_ends_its_collector_when_the_session_stops() {
        let (tracer, state) = (Tracer::default(), Arc::new(SessionState::new()));
        tracer.start(Arc::from(Vec::new()), state.clone()).unwrap();
        state.begin_stopping();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let finished = || {
            lock(&tracer.running)
                .as_ref()
                .is_some_and(|running| running.collector.is_finished())
        };
        while !finished() {
            assert!(
                std::time::Instant::now() < deadline,
                "the collector runs on"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}
