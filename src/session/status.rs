//! What every worker of a session is doing, read from the board (each worker's record of its
//! activity) without sending any worker a message: the status document, and the hang report a
//! timed-out wait gives.
//!
//! The one idea: each link says what it knows of its worker (its last report, and the
//! controller's verdict when it is dead or lost), and one place turns that into JSON for a
//! status and into a sentence for an error, so both always say the same.

use std::time::Duration;

use serde_json::{Value, json};

use super::controller::Session;
use crate::ccl::Collective;
use crate::object::{Error, ErrorKind, Result};
use crate::sync::atomic::Ordering;
use crate::worker::activity::{Snapshot, State};
use crate::worker::events::{Names, Ring, now_ns};

/// The controller's verdict on a worker that can no longer report.
#[derive(Clone, Debug)]
pub(crate) enum Verdict {
    /// Its process died (or its thread left its loop), for this reason.
    Dead(String),
    /// Its node is gone, or has not been heard from, for this reason.
    Lost(String),
}

/// What the controller knows of one worker.
#[derive(Clone, Debug)]
pub(crate) struct WorkerStatus {
    pub worker: usize,
    pub node: usize,
    /// Its process, when known.
    pub pid: Option<u32>,
    /// Whether it runs in the controller's process (a thread).
    pub in_process: bool,
    /// Its last report (None: it could not be read).
    pub report: Option<Snapshot>,
    /// How old the report was when it reached the controller (a node's relay sends them).
    pub report_age: Duration,
    pub verdict: Option<Verdict>,
}

impl WorkerStatus {
    /// What the status calls its state.
    fn state(&self) -> &'static str {
        match (&self.verdict, &self.report) {
            (Some(Verdict::Dead(_)), _) => "dead",
            (Some(Verdict::Lost(_)), _) => "lost",
            (None, Some(report)) => report.state.name(),
            (None, None) => "unknown",
        }
    }

    /// How long it has been in its state, by its report.
    fn for_duration(&self) -> Option<Duration> {
        let report = self.report.as_ref()?;
        Some(Duration::from_nanos(report.for_ns) + self.report_age)
    }

    fn to_json(&self) -> Value {
        let report = self.report.as_ref();
        let collective = report
            .filter(|r| r.state == State::Collective)
            .and_then(|r| Collective::from_code(r.collective))
            .map(Collective::what);
        let failure = report.and_then(|r| r.failure.as_ref());
        json!({
            "worker": self.worker,
            "node": self.node,
            "pid": self.pid,
            "state": self.state(),
            "call": report.map(|r| r.call),
            "function": report.and_then(|r| r.function.clone()),
            "since_ms": self.for_duration().map(|d| d.as_secs_f64() * 1e3),
            "collective": collective,
            "waits_for": report.map_or(&[][..], |r| &r.waits_for[..]),
            "last_finished_call": report.map(|r| r.finished),
            "last_failure": failure.map(|(call, error)| json!({"call": call, "error": error})),
            "cause": match &self.verdict {
                Some(Verdict::Dead(cause) | Verdict::Lost(cause)) => Some(cause.as_str()),
                None => None,
            },
        })
    }

    /// Who it is, in a sentence: "worker 1 (pid 4711)", "worker 3 (node 1, pid 80)".
    fn who(&self) -> String {
        let mut about = Vec::new();
        if self.node != 0 {
            about.push(format!("node {}", self.node));
        }
        if let Some(pid) = self.pid.filter(|_| !self.in_process) {
            about.push(format!("pid {pid}"));
        }
        match about.is_empty() {
            true => format!("worker {}", self.worker),
            false => format!("worker {} ({})", self.worker, about.join(", ")),
        }
    }

    /// What it is doing, in a sentence, or None when it is idle (idle workers are named
    /// together).
    fn doing(&self) -> Option<String> {
        let who = self.who();
        let report = match (&self.verdict, &self.report) {
            (Some(Verdict::Dead(cause)), _) => return Some(format!("{who} is dead: {cause}")),
            (Some(Verdict::Lost(cause)), _) => return Some(format!("{who} is lost: {cause}")),
            (None, None) => return Some(format!("{who} has not said what it does")),
            (None, Some(report)) => report,
        };
        let call = format!("call {}", report.call);
        let function = match &report.function {
            Some(name) => format!("`{name}`"),
            None => "an unnamed function".to_string(),
        };
        let span = seconds(self.for_duration().unwrap_or_default());
        Some(match report.state {
            State::Idle => return None,
            State::Running => format!("{who} has run {call} ({function}) for {span}"),
            State::Syncing => format!("{who} has waited for its device after {call} for {span}"),
            State::Collective => {
                let collective = Collective::from_code(report.collective)
                    .map_or("a collective", Collective::what);
                match report.waits_for.as_slice() {
                    [] => format!("{who} has waited in {collective} of {call} for {span}"),
                    peers => format!(
                        "{who} waits in {collective} of {call} for {}",
                        workers(peers)
                    ),
                }
            }
        })
    }
}

/// "worker 1", "workers 1 and 2", "workers 0, 2 and 5".
fn workers(ids: &[usize]) -> String {
    match ids {
        [one] => format!("worker {one}"),
        [rest @ .., last] => {
            let rest: Vec<String> = rest.iter().map(usize::to_string).collect();
            format!("workers {} and {last}", rest.join(", "))
        }
        [] => "no worker".to_string(),
    }
}

/// How the waits for room in a full worker queue name themselves (a thread's queue, a worker
/// process's ring).
const FULL: &str = "sending ";

/// Whether `error` is the timeout of the wait `what` names (its own message), not a failure a
/// worker reported, which may be a timeout of its own.
pub(crate) fn is_wait_timeout(error: &Error, what: &str) -> bool {
    error.kind == ErrorKind::Timeout && error.message.strip_suffix(" timed out") == Some(what)
}

/// A span as a report gives it: "2.0 s", "350 ms".
pub(crate) fn seconds(span: Duration) -> String {
    if span >= Duration::from_secs(1) {
        format!("{:.1} s", span.as_secs_f64())
    } else {
        format!("{} ms", span.as_millis())
    }
}

/// What `workers` are doing, in one sentence: each busy, dead or lost worker in turn, then
/// those that are idle together.
pub(crate) fn describe(workers_seen: &[WorkerStatus]) -> String {
    let mut parts: Vec<String> = workers_seen
        .iter()
        .filter_map(WorkerStatus::doing)
        .collect();
    let idle: Vec<usize> = workers_seen
        .iter()
        .filter(|w| w.doing().is_none())
        .map(|w| w.worker)
        .collect();
    match idle.len() {
        0 => {}
        1 => parts.push(format!("{} is idle", workers(&idle))),
        _ => parts.push(format!("{} are idle", workers(&idle))),
    }
    parts.join("; ")
}

/// Events of each worker the status shows: its last ones.
const LAST_EVENTS: u64 = 8;

/// The last [`LAST_EVENTS`] events of `ring`, oldest first, with how long ago each began (from
/// `now_ns`) and how long it took, in milliseconds.
fn last_events(ring: &Ring, now_ns: u64) -> Value {
    let reading = ring.read_from(
        ring.written().saturating_sub(LAST_EVENTS),
        &mut Names::default(),
    );
    let events: Vec<Value> = reading
        .events
        .iter()
        .map(|event| {
            json!({
                "name": &*event.name,
                "cat": event.kind.category(),
                "call": event.call,
                "began_ms_ago": now_ns.saturating_sub(event.start_ns) as f64 / 1e6,
                "dur_ms": event.dur_ns as f64 / 1e6,
            })
        })
        .collect();
    Value::Array(events)
}

/// Where a hang report sends its reader for what the workers did before.
const DUMP_HINT: &str = "each worker's last events: trace_dump(path), dvm_session_trace_dump in C";

impl Session {
    /// What each of `workers` is doing, from the board.
    pub(crate) fn observe(&self, workers: impl IntoIterator<Item = usize>) -> Vec<WorkerStatus> {
        workers
            .into_iter()
            .map(|worker| self.workers[worker].observe(worker))
            .collect()
    }

    /// The status document: what every worker is doing, and how many calls were sent. It never
    /// waits for a worker.
    ///
    /// Errors: `SessionClosed` after shutdown.
    pub fn status(&self) -> Result<String> {
        if self.is_closed() {
            return Err(super::controller::closed_error());
        }
        let now_ns = now_ns();
        let workers: Vec<Value> = self
            .observe(0..self.workers.len())
            .iter()
            .map(|seen| {
                let mut status = seen.to_json();
                // A node's workers' rings are on their machine: the dump asks for them.
                status["last_events"] = self.workers[seen.worker]
                    .events()
                    .map_or(Value::Null, |ring| last_events(ring, now_ns));
                status
            })
            .collect();
        let status = json!({
            "workers": workers,
            "calls_sent": self.calls_sent.load(Ordering::Relaxed),
        });
        Ok(status.to_string())
    }

    /// `error`, or, when it is the timeout of the wait `what` names, the timeout that says what
    /// the workers it waited for (`waited`) are doing: "`report_as` timed out after 2.0 s:
    /// worker 1 (pid 4711) has run call 6 (`f`) for 2.0 s".
    pub(crate) fn hang_report(
        &self,
        error: Error,
        what: &str,
        report_as: &str,
        waited: impl IntoIterator<Item = usize>,
    ) -> Error {
        if !is_wait_timeout(&error, what) {
            return error;
        }
        self.timeout_report(report_as, waited)
    }

    /// `error`, the failure of `worker` to stop in time at shutdown, with what its record says
    /// it was doing (a worker process was killed for it: its last report stands).
    pub(crate) fn did_not_stop(&self, error: Error, worker: usize) -> Error {
        if error.kind != ErrorKind::Timeout {
            return error;
        }
        let mut seen = self.workers[worker].observe(worker);
        seen.verdict = None;
        let doing = describe(std::slice::from_ref(&seen));
        Error::new(ErrorKind::Timeout, format!("{}: {doing}", error.message))
    }

    /// `error`, or, when it is the timeout of a wait for room in a worker's full queue (a
    /// worker that does not take its messages), that timeout saying what `waited`, the
    /// workers sent to, are doing.
    pub(crate) fn full_queue_report(&self, error: Error, waited: std::ops::Range<usize>) -> Error {
        match error.message.strip_suffix(" timed out") {
            Some(what) if error.kind == ErrorKind::Timeout && what.starts_with(FULL) => {
                let whom = match waited.len() {
                    1 => format!("worker {}", waited.start),
                    _ => "every worker".to_string(),
                };
                self.timeout_report(&format!("{what} of {whom}"), waited)
            }
            _ => error,
        }
    }

    /// The timeout of the wait `what` names, saying what `waited`, the workers it waited
    /// for, are doing.
    fn timeout_report(&self, what: &str, waited: impl IntoIterator<Item = usize>) -> Error {
        let after = match self.timeout {
            Some(timeout) => format!(" after {}", seconds(timeout)),
            None => String::new(),
        };
        let seen = self.observe(waited);
        Error::new(
            ErrorKind::Timeout,
            format!("{what} timed out{after}: {} ({DUMP_HINT})", describe(&seen)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(worker: usize, state: State, call: u64, peers: &[usize]) -> WorkerStatus {
        WorkerStatus {
            worker,
            node: 0,
            pid: Some(4711 + worker as u32),
            in_process: false,
            report: Some(Snapshot {
                state,
                call,
                function: Some("pain.sleep_on".to_string()),
                for_ns: 2_000_000_000,
                collective: Collective::Allreduce.code(),
                waits_for: peers.to_vec(),
                finished: call - 1,
                failure: None,
                joins: Default::default(),
            }),
            report_age: Duration::ZERO,
            verdict: None,
        }
    }

    #[test]
    fn a_report_names_what_each_worker_does_and_the_idle_ones_together() {
        let report = describe(&[
            seen(0, State::Idle, 7, &[]),
            seen(1, State::Running, 6, &[]),
            seen(2, State::Idle, 7, &[]),
            seen(3, State::Collective, 7, &[1]),
        ]);
        assert_eq!(
            report,
            "worker 1 (pid 4712) has run call 6 (`pain.sleep_on`) for 2.0 s; worker 3 (pid \
             4714) waits in allreduce of call 7 for worker 1; workers 0 and 2 are idle"
        );
    }

    #[test]
    fn dead_lost_and_silent_workers_say_so() {
        let mut dead = seen(1, State::Running, 3, &[]);
        dead.verdict = Some(Verdict::Dead("killed by signal 9".into()));
        let mut lost = seen(2, State::Running, 3, &[]);
        (lost.node, lost.pid) = (1, None);
        lost.verdict = Some(Verdict::Lost("nothing came from it for 2000 ms".into()));
        let mut silent = seen(3, State::Running, 3, &[]);
        silent.report = None;
        assert_eq!(
            describe(&[dead.clone(), lost.clone(), silent.clone()]),
            "worker 1 (pid 4712) is dead: killed by signal 9; worker 2 (node 1) is lost: \
             nothing came from it for 2000 ms; worker 3 (pid 4714) has not said what it does"
        );
        assert_eq!(dead.to_json()["state"], "dead");
        assert_eq!(lost.to_json()["cause"], "nothing came from it for 2000 ms");
        assert_eq!(silent.to_json()["state"], "unknown");
    }

    #[test]
    fn lists_of_workers_read_as_english() {
        assert_eq!(workers(&[4]), "worker 4");
        assert_eq!(workers(&[0, 2]), "workers 0 and 2");
        assert_eq!(workers(&[0, 2, 5]), "workers 0, 2 and 5");
        assert_eq!(seconds(Duration::from_millis(350)), "350 ms");
        assert_eq!(seconds(Duration::from_millis(2049)), "2.0 s");
    }
}
