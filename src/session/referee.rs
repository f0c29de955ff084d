//! The referee of a session across machines: it finds, in every worker's record, a worker
//! waiting in a collective for a peer that will never join it (the peer finished the call
//! having joined fewer collectives on that communicator, joined another in its place, or it is
//! dead or lost), and rules so
//! in the waiting worker's signals; the worker's watch then ends its Gloo wait at once, and a
//! worker waiting for its GPU after queueing an NCCL collective ends that wait at its next
//! poll. Gloo itself would wait for the peer until its timeout, NCCL for ever.
//!
//! The one idea: the records say everything needed (each worker's call, its joins per
//! communicator, the calls it finished), so judging asks no worker anything: a thread reads
//! them every few milliseconds, and a ruling is one signal.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use super::link::WorkerLink;
use super::signal::Signal;
use super::state::SessionState;
use super::status::{Verdict, WorkerStatus};
use crate::ccl::{Awaited, Collective};
use crate::object::{Error, Result};
use crate::worker::activity::{Comm, Snapshot, State};
use crate::worker::group_members;

/// How often the referee reads the records.
const PERIOD: Duration = Duration::from_millis(10);

/// A ruling: worker `worker` waits in call `call` for a collective that will never complete.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Ruling {
    pub worker: usize,
    pub call: u64,
    /// Its collective's count on its communicator (a worker is ruled on once per collective).
    pub count: u64,
    pub why: String,
}

/// Starts the referee of the session whose workers are `workers` (`per_node` on each node, in
/// `num_groups` groups); it ends when the session stops. A ruling marks the session's
/// communicators to be made again before its next call.
pub(crate) fn start(
    workers: Arc<[WorkerLink]>,
    state: Arc<SessionState>,
    per_node: usize,
    num_groups: usize,
) -> Result<()> {
    let shape = Shape {
        num_workers: workers.len(),
        per_node,
        per_group: workers.len() / num_groups.max(1),
    };
    std::thread::Builder::new()
        .name("discovm-referee".into())
        .spawn(move || {
            let mut ruled = HashSet::new();
            while !state.is_stopping() {
                std::thread::sleep(PERIOD);
                let seen: Vec<WorkerStatus> =
                    (0..workers.len()).map(|w| workers[w].observe(w)).collect();
                for ruling in judge(&seen, &shape) {
                    if ruled.insert((ruling.worker, ruling.call, ruling.count)) {
                        state.note_ruling();
                        workers[ruling.worker].signal(&Signal::Ruling {
                            call: ruling.call,
                            why: ruling.why,
                        });
                    }
                }
            }
        })
        .map(drop)
        .map_err(|e| Error::runtime(format!("cannot start the referee thread: {e}")))
}

/// How a session's workers are laid out.
pub(crate) struct Shape {
    pub num_workers: usize,
    pub per_node: usize,
    pub per_group: usize,
}

impl Shape {
    /// The workers of `worker`'s team on communicator `on`.
    fn team(&self, worker: usize, on: Comm) -> std::iter::StepBy<std::ops::Range<usize>> {
        match on {
            Comm::Session => (0..self.num_workers).step_by(1),
            Comm::Group => group_members(worker, self.per_group).step_by(1),
            Comm::Leaders => (0..self.num_workers).step_by(self.per_node),
        }
    }
}

/// The rulings `seen` (every worker's status, by id) calls for.
pub(crate) fn judge(seen: &[WorkerStatus], shape: &Shape) -> Vec<Ruling> {
    seen.iter()
        .filter_map(|waiter| {
            let report = waiter.report.as_ref()?;
            if waiter.verdict.is_some() {
                return None;
            }
            let (what, call, in_it) = awaited(report)?;
            let joins = &report.joins;
            let on = Comm::from_code(joins.on)?;
            let awaited = Awaited {
                what,
                call,
                // The function is known for the call the worker runs, or ran last.
                function: report.function.as_deref().filter(|_| call == report.call),
                worker: waiter.worker,
                on,
                count: joins.counts[on.code()],
                size: joins.size,
                // Gloo's members find out about another collective themselves, as they meet.
                by_order: !in_it,
            };
            let why = shape
                .team(waiter.worker, awaited.on)
                .filter(|&peer| peer != waiter.worker)
                .find_map(|peer| {
                    let other = seen.get(peer)?;
                    // A worker waiting for its device may wait for other work than the
                    // collective: a peer whose node is lost for a while says nothing of it. A
                    // dead one broke the session, whatever the wait was for.
                    match &other.verdict {
                        Some(Verdict::Dead(cause)) => {
                            return Some(gone(&awaited, peer, "is dead", cause));
                        }
                        Some(Verdict::Lost(cause)) if in_it => {
                            return Some(gone(&awaited, peer, "is lost", cause));
                        }
                        _ => {}
                    }
                    let theirs = other.report.as_ref()?;
                    let failure = theirs.failure.as_ref().filter(|(c, _)| *c == call);
                    let failure = failure.map(|(_, text)| text.as_str());
                    let error = awaited.hopeless(peer, &theirs.joins, failure)?;
                    Some(error.message)
                })?;
            Some(Ruling {
                worker: waiter.worker,
                call,
                count: awaited.count,
                why,
            })
        })
        .collect()
}

/// Why `awaited` never completes when its worker's peer `peer` is gone (`how`), for `cause`.
fn gone(awaited: &Awaited<'_>, peer: usize, how: &str, cause: &str) -> String {
    let function = awaited
        .function
        .map_or_else(|| "its function".into(), |f| format!("`{f}`"));
    format!(
        "{} in call {} ({function}) on worker {}: worker {peer} {how}: {cause}",
        awaited.what.what(),
        awaited.call,
        awaited.worker
    )
}

/// The collective a worker of `report` may wait for, its call, and whether the worker waits in
/// it: the one it is in (Gloo waits there), or, while it waits for its device, the last it
/// joined (NCCL's work, queued, waits on the GPU for its peers). Only a collective joined in a
/// call that went to every worker is judged; a transfer is between two workers and counts for
/// no team.
fn awaited(report: &Snapshot) -> Option<(Collective, u64, bool)> {
    let joins = &report.joins;
    let (code, call, in_it) = match report.state {
        State::Collective if joins.to_all && joins.call == report.call => {
            (report.collective, report.call, true)
        }
        State::Syncing => (joins.what, joins.call, false),
        _ => return None,
    };
    let what = Collective::from_code(code)?;
    (!matches!(what, Collective::Transfer(_))).then_some((what, call, in_it))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::worker::activity::{Activity, Comm};

    /// Four workers, two on each node: worker 0 leads node 0, worker 2 node 1.
    const SHAPE: Shape = Shape {
        num_workers: 4,
        per_node: 2,
        per_group: 4,
    };

    fn status(worker: usize, record: &Activity) -> WorkerStatus {
        WorkerStatus {
            worker,
            node: worker / 2,
            pid: None,
            in_process: false,
            report: record.snapshot(),
            report_age: Duration::ZERO,
            verdict: None,
        }
    }

    fn records() -> Vec<Activity> {
        (0..4).map(|_| Activity::default()).collect()
    }

    /// Worker `w` in call 7's first allreduce on the leaders' mesh.
    fn leader_waits(records: &[Activity], w: usize) {
        records[w].begin_call(7, true, Some("mlp.step"));
        records[w].joined_one(Comm::Leaders, Collective::Allreduce.code(), 0);
        records[w].enter_collective(Collective::Allreduce.code());
    }

    fn seen(records: &[Activity]) -> Vec<WorkerStatus> {
        records
            .iter()
            .enumerate()
            .map(|(w, r)| status(w, r))
            .collect()
    }

    #[test]
    fn a_leader_whose_peer_finished_the_call_without_joining_is_ruled_on() {
        let records = records();
        leader_waits(&records, 2);
        assert!(judge(&seen(&records), &SHAPE).is_empty(), "worker 0 runs");
        records[0].begin_call(7, true, Some("mlp.step"));
        records[0].end_call(Some("`mlp.step` failed: ValueError: boom"));
        let rulings = judge(&seen(&records), &SHAPE);
        assert_eq!(
            rulings,
            [Ruling {
                worker: 2,
                call: 7,
                count: 1,
                why: "allreduce in call 7 (`mlp.step`) on worker 2: worker 0 finished call 7 \
                      without joining it: `mlp.step` failed: ValueError: boom"
                    .into(),
            }]
        );
    }

    #[test]
    fn peers_that_joined_or_are_outside_the_team_are_not_judged() {
        let records = records();
        leader_waits(&records, 2);
        // Worker 1 (no leader) finished the call: it is not in the leaders' team.
        records[1].begin_call(7, true, Some("mlp.step"));
        records[1].end_call(None);
        // Worker 0 joined the collective and finished the call.
        records[0].begin_call(7, true, Some("mlp.step"));
        records[0].joined_one(Comm::Leaders, Collective::Allreduce.code(), 0);
        records[0].end_call(None);
        assert!(judge(&seen(&records), &SHAPE).is_empty());
    }

    /// Worker `w` queued call 7's allreduce on the session's NCCL communicator, finished the
    /// call, and waits for its GPU.
    fn waits_for_its_gpu(records: &[Activity], w: usize, to_all: bool) {
        records[w].begin_call(7, to_all, Some("mlp.step"));
        records[w].joined_one(Comm::Session, Collective::Allreduce.code(), 0);
        records[w].end_call(None);
        records[w].enter(State::Syncing);
    }

    #[test]
    fn a_worker_waiting_for_its_gpu_after_a_collective_a_peer_passed_is_ruled_on() {
        let records = records();
        waits_for_its_gpu(&records, 1, true);
        for w in [0, 2] {
            records[w].begin_call(7, true, Some("mlp.step"));
            records[w].joined_one(Comm::Session, Collective::Allreduce.code(), 0);
            records[w].end_call(None);
        }
        assert!(judge(&seen(&records), &SHAPE).is_empty(), "worker 3 runs");
        records[3].begin_call(7, true, Some("mlp.step"));
        records[3].end_call(Some("`mlp.step` failed: ValueError: boom"));
        let mut seen = seen(&records);
        assert_eq!(
            judge(&seen, &SHAPE),
            [Ruling {
                worker: 1,
                call: 7,
                count: 1,
                why: "allreduce in call 7 (`mlp.step`) on worker 1: worker 3 finished call 7 \
                      without joining it: `mlp.step` failed: ValueError: boom"
                    .into(),
            }]
        );
        // Its wait may be for other work than the collective: a peer whose node is lost for a
        // while says nothing of it; a dead one broke the session anyway.
        seen[3].report = Activity::default().snapshot();
        seen[3].verdict = Some(Verdict::Lost("nothing heard from node 1 for 1.0 s".into()));
        assert!(judge(&seen, &SHAPE).is_empty());
        seen[3].verdict = Some(Verdict::Dead("its process was killed".into()));
        assert_eq!(
            judge(&seen, &SHAPE)[0].why,
            "allreduce in call 7 (`mlp.step`) on worker 1: worker 3 is dead: its process was \
             killed"
        );
    }

    #[test]
    fn a_gpu_wait_whose_peer_joined_another_collective_or_size_in_its_place_is_ruled_on() {
        let records = records();
        waits_for_its_gpu(&records, 1, true);
        for w in [0, 2, 3] {
            records[w].begin_call(7, true, Some("mlp.step"));
            let what = if w == 3 {
                Collective::Allgather
            } else {
                Collective::Allreduce
            };
            records[w].joined_one(Comm::Session, what.code(), 0);
        }
        let rulings = judge(&seen(&records), &SHAPE);
        assert_eq!(rulings.len(), 1, "{rulings:?}");
        assert_eq!(
            (rulings[0].worker, rulings[0].why.as_str()),
            (
                1,
                "allreduce in call 7 (`mlp.step`) on worker 1: worker 3 joined allgather in \
                 its place: the workers disagree on which collective comes next"
            )
        );
        // The same collective of another size.
        records[3].begin_call(7, true, Some("mlp.step"));
        records[3].joined_one(Comm::Session, Collective::Allreduce.code(), 512);
        records[1].begin_call(7, true, Some("mlp.step"));
        records[1].joined_one(Comm::Session, Collective::Allreduce.code(), 1024);
        records[1].end_call(None);
        records[1].enter(State::Syncing);
        assert_eq!(
            judge(&seen(&records), &SHAPE)[0].why,
            "allreduce in call 7 (`mlp.step`) on worker 1: worker 3 joined it with 512 bytes \
             where worker 1 has 1024: the workers disagree on its size"
        );
        // Gloo's members, in the collective, find that out as they meet.
        records[1].begin_call(8, true, Some("mlp.step"));
        records[1].joined_one(Comm::Session, Collective::Allreduce.code(), 0);
        records[1].enter_collective(Collective::Allreduce.code());
        records[3].begin_call(8, true, Some("mlp.step"));
        records[3].joined_one(Comm::Session, Collective::Allgather.code(), 0);
        assert!(judge(&seen(&records), &SHAPE).is_empty());
    }

    #[test]
    fn a_gpu_wait_after_a_collective_in_a_call_to_one_worker_is_not_judged() {
        let records = records();
        waits_for_its_gpu(&records, 1, false);
        records[3].begin_call(8, true, Some("mlp.step"));
        records[3].end_call(None);
        assert!(judge(&seen(&records), &SHAPE).is_empty());
    }

    #[test]
    fn a_dead_or_lost_peer_is_named_with_its_cause() {
        let records = records();
        leader_waits(&records, 0);
        let mut seen = seen(&records);
        seen[2].verdict = Some(Verdict::Lost("nothing heard from node 1 for 1.0 s".into()));
        let rulings = judge(&seen, &SHAPE);
        assert_eq!(
            rulings[0].why,
            "allreduce in call 7 (`mlp.step`) on worker 0: worker 2 is lost: nothing heard \
             from node 1 for 1.0 s"
        );
    }
}
