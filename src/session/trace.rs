//! A session's timeline: `trace_start` begins collecting every worker's events (from the rings
//! of the flight recorder, `worker::events`) and the controller's own (its calls sent, its
//! waits, its copies); `trace_stop` writes them to a file in the Chrome Trace Event Format;
//! `trace_dump` writes the flight recorder's last events of every worker without a trace.
//!
//! The one idea: the workers only ever write their rings, at the same cost whether a trace runs
//! or not; a collector thread drains the rings every few milliseconds while a trace runs (the
//! controller's for its machine, each other node's for its own, sent at the stop), so one
//! mechanism serves the flight recorder and the timeline, and a ring that overflowed between
//! two drains shows as events counted lost, never as a wait. While a trace runs, the controller
//! writes a ring of its own the same way, in ticks of the time-stamp counter (one reading a
//! send), which the stop converts to the workers' clock.

pub(crate) mod collect;
mod meetings;
#[cfg(not(loom))]
mod nodes;
mod timeline;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::link::WorkerLink;
use super::state::SessionState;
use crate::object::{Error, Result};
use crate::sync::clock::{Calibration, ticks};
use crate::worker::events::LANES;
use crate::worker::events::{Ring, now_ns};
use collect::{Collected, Collector, Doing, Rings, lock};

impl Rings for [WorkerLink] {
    fn count(&self) -> usize {
        self.len()
    }

    fn rings(&self, index: usize) -> [Option<&Ring>; LANES] {
        self[index].rings()
    }
}

/// The rings a trace drains on the controller's machine: every worker's, then the controller's.
struct Traced {
    workers: Arc<[WorkerLink]>,
    controller: Arc<Ring>,
}

impl Rings for Traced {
    fn count(&self) -> usize {
        self.workers.len() + 1
    }

    fn rings(&self, index: usize) -> [Option<&Ring>; LANES] {
        match index.checked_sub(self.workers.len()) {
            Some(_) => [Some(&self.controller), None],
            None => self.workers.rings(index),
        }
    }
}

/// A session's tracer.
#[derive(Default)]
pub(crate) struct Tracer {
    /// Set while a trace runs: the controller notes what it does.
    on: AtomicBool,
    running: Mutex<Option<Running>>,
    /// The ring of what the controller does while a trace runs, made by the first trace, which
    /// the collector drains with the workers': noting a call writes memory that was written
    /// before and takes no lock (the controller's threads take their events' numbers).
    noted: OnceLock<Arc<Ring>>,
}

/// A trace that runs.
struct Running {
    started_ns: u64,
    /// The clocks at the start: the controller notes its events in [`ticks`].
    started: Calibration,
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

    /// Notes what the controller did from `start` ([`ticks`]), when a trace runs: a wait until
    /// now, a send at `start` alone (one reading of the clock a call).
    pub fn note(&self, doing: Doing, start: u64) {
        if !self.is_on() {
            return;
        }
        let end = match doing {
            Doing::Sent { .. } => start,
            Doing::Waited { .. } => ticks(),
        };
        if let Some(ring) = self.noted.get() {
            ring.record_shared(&doing.event(start, end));
        }
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
        let started = Calibration::now();
        let started_ns = now_ns();
        let controller = self.noted.get_or_init(|| Arc::from(Ring::boxed())).clone();
        let rings = Arc::new(Traced {
            workers,
            controller,
        });
        let collector = Collector::start(rings, move || state.is_stopping())?;
        *running = Some(Running {
            started_ns,
            started,
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
        collected.take_controllers(running.started, Calibration::now());
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
        let started = self.tracer.is_on().then(ticks);
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
        // Collectives on the host: the k-th collective of a call on every member of its team
        // is one meeting of them all.
        let nccl = self.nccl_made().is_some();
        About {
            kind,
            per_group: nodes.len() / self.num_groups.max(1),
            nodes,
            meetings: !nccl,
        }
    }

    /// Begins a trace: from now on, every worker's events and the controller's calls, syncs and
    /// copies are kept (up to 1 GiB of them), until `trace_stop`.
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
