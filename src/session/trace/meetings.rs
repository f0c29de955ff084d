//! How long each collective of a trace waited for its peers, told from their arrivals where no
//! worker measured it (runs on GPUs; the queued collectives of a backend that does not).
//!
//! The one idea: the workers of a team join their collectives of a call in one order, so the
//! k-th collective of a call under one name on every member of its team is one meeting, found
//! by numbering each worker's collectives per call and kind as its events come; each member
//! waited from its own start until the last member's (on another node, within the clocks'
//! error).

use std::collections::HashMap;
use std::ops::Range;

use super::collect::Collected;
use crate::worker::events::{Event, Kind};

/// The waits told, in ns, by worker and the place of the event among that worker's events.
pub(super) struct Waits(HashMap<(usize, usize), u64>);

/// Numbers one worker's collectives within each call, in the order of its events: those it
/// queued, and apart from them their runs on its GPU.
#[derive(Default)]
struct Places(HashMap<(u32, u64), usize>);

impl Places {
    /// Whether every collective its worker queued in call `call` has its run on the GPU, once
    /// all its events are counted: a run missing (not timed, or not finished) would shift the
    /// places of the later ones.
    fn runs_complete(&self, call: u64) -> bool {
        let count = |kind: Kind| self.0.get(&(kind.code(), call)).copied().unwrap_or(0);
        count(Kind::Gpu) == count(Kind::Collective)
    }

    /// The place of `event` among its worker's collectives of its kind in its call, if it is
    /// one of them.
    fn of(&mut self, event: &Event) -> Option<usize> {
        let counted = matches!(event.kind, Kind::Collective | Kind::Gpu);
        (counted && event.call != 0).then(|| {
            let next = self.0.entry((event.kind.code(), event.call)).or_default();
            *next += 1;
            *next - 1
        })
    }
}

impl Waits {
    /// The waits of `collected`'s collectives that meet: their runs on GPUs, and the queued
    /// ones where `queued_meet` (collectives on the host). `team` gives the workers of a
    /// collective event's team (None for a transfer, whose other side is not known). Meetings
    /// some member's events miss, or whose names differ, are left out; so are the runs on a GPU
    /// of a call some of whose collectives have no run there.
    pub(super) fn from_arrivals(
        collected: &Collected,
        queued_meet: bool,
        team: impl Fn(usize, &Event) -> Option<Range<usize>>,
    ) -> Waits {
        // By kind, call, place and the team's first worker: the team, and the members found
        // (worker, index of the event, the event).
        type Meeting<'a> = (Range<usize>, Vec<(usize, usize, &'a Event)>);
        let mut meetings: HashMap<(u32, u64, usize, usize), Meeting<'_>> = HashMap::new();
        for (worker, recorded) in collected.workers.iter().enumerate() {
            let mut places = Places::default();
            let placed: Vec<(usize, &Event, usize)> = (recorded.iter().enumerate())
                .filter_map(|(index, event)| Some((index, event, places.of(event)?)))
                .collect();
            for (index, event, k) in placed {
                let meets = match event.kind {
                    Kind::Gpu => places.runs_complete(event.call),
                    _ => queued_meet,
                };
                let members = meets.then(|| team(worker, event)).flatten();
                let Some(members) = members else {
                    continue;
                };
                let key = (event.kind.code(), event.call, k, members.start);
                let meeting = meetings.entry(key).or_insert_with(|| (members, Vec::new()));
                meeting.1.push((worker, index, event));
            }
        }
        let mut waits = HashMap::new();
        for (members, found) in meetings.into_values() {
            let one_name = found.iter().all(|(_, _, e)| e.name == found[0].2.name);
            let whole = found.iter().map(|&(w, _, _)| w).eq(members);
            if !whole || !one_name {
                continue;
            }
            let last = found.iter().map(|(_, _, e)| e.start_ns).max().unwrap_or(0);
            for (worker, index, event) in found {
                waits.insert((worker, index), last.saturating_sub(event.start_ns));
            }
        }
        Waits(waits)
    }

    /// The wait told of event `index` of worker `worker`, if it met its team.
    pub(super) fn of(&self, worker: usize, index: usize) -> Option<u64> {
        self.0.get(&(worker, index)).copied()
    }
}

#[cfg(all(test, not(loom)))]
pub(super) mod tests {
    use super::*;
    use crate::worker::events::Team;
    use crate::worker::group_members;

    /// A queued collective of `team` that took 1 µs, of 16 bytes.
    pub(in crate::session::trace) fn collective(
        start_ns: u64,
        call: u64,
        name: &str,
        team: Team,
    ) -> Event {
        Event {
            kind: Kind::Collective,
            start_ns,
            dur_ns: 1000,
            call,
            bytes: 16,
            wait_ns: 0,
            detail: team.detail(1),
            name: name.into(),
        }
    }

    /// The teams of `workers` workers in groups of two.
    fn teams(workers: usize) -> impl Fn(usize, &Event) -> Option<Range<usize>> {
        move |worker, event| match Team::of(event.detail)? {
            Team::Session => Some(0..workers),
            Team::Group => Some(group_members(worker, 2)),
            Team::Pair => None,
        }
    }

    /// Every wait told, by worker and event.
    fn told(waits: &Waits) -> Vec<((usize, usize), u64)> {
        let mut all: Vec<_> = waits.0.iter().map(|(&at, &ns)| (at, ns)).collect();
        all.sort_unstable();
        all
    }

    #[test]
    fn a_collective_waited_from_its_start_until_the_last_of_its_team_arrived() {
        let (all, group) = (Team::Session, Team::Group);
        let mut collected = Collected::for_workers(4);
        // Call 7 meets every worker twice, then each group once; in call 8 worker 3 has no
        // collective; in call 9 the names differ; a transfer is nobody's meeting.
        let starts: [[u64; 3]; 4] = [
            [100, 300, 400],
            [150, 290, 420],
            [120, 280, 500],
            [130, 310, 450],
        ];
        for (worker, [first, second, grouped]) in starts.into_iter().enumerate() {
            let mut events = vec![
                collective(first, 7, "allreduce", all),
                collective(second, 7, "allreduce", all),
                collective(grouped, 7, "allgather", group),
            ];
            if worker != 3 {
                events.push(collective(600, 8, "allreduce", all));
            }
            let name = if worker == 0 {
                "broadcast_from_worker0"
            } else {
                "allreduce"
            };
            events.push(collective(700, 9, name, all));
            events.push(collective(800, 10, "send_to_worker", Team::Pair));
            collected.keep(worker, events);
        }
        let waits = Waits::from_arrivals(&collected, true, teams(4));
        // Each worker's first three events: both meetings of all, then its group's.
        let expected = [[50, 10, 20], [0, 20, 0], [30, 30, 0], [20, 0, 50]];
        let expected: Vec<_> = (0..4)
            .flat_map(|w| (0..3).map(move |i| ((w, i), expected[w][i])))
            .collect();
        assert_eq!(told(&waits), expected);
        // Queued collectives that are no meetings (on GPUs) have none told.
        let waits = Waits::from_arrivals(&collected, false, teams(4));
        assert_eq!(told(&waits), []);
    }

    /// Two workers' NCCL all-reduces, queued and run on their GPUs: call 7's runs are one
    /// meeting; in call 8 worker 1's second collective has no run, and comes after its first
    /// run: that run could be either's, and neither worker's runs of call 8 meet.
    pub(in crate::session::trace) fn runs_on_two_gpus() -> Collected {
        let mut collected = Collected::for_workers(2);
        let ran = |start_ns, call| Event {
            kind: Kind::Gpu,
            ..collective(start_ns, call, "allreduce", Team::Session)
        };
        for (worker, on_gpu) in [(0, 1000), (1, 1400)] {
            let queued = collective(100 + worker as u64, 7, "allreduce", Team::Session);
            collected.keep(worker, [queued, ran(on_gpu, 7)]);
            let queued = |start_ns| collective(start_ns, 8, "allreduce", Team::Session);
            if worker == 0 {
                collected.keep(
                    worker,
                    [queued(2000), queued(2100), ran(3000, 8), ran(4000, 8)],
                );
            } else {
                collected.keep(worker, [queued(2000), ran(3500, 8), queued(2100)]);
            }
        }
        collected
    }

    #[test]
    fn runs_on_gpus_meet_unless_a_run_of_their_call_is_missing() {
        let collected = runs_on_two_gpus();
        let waits = Waits::from_arrivals(&collected, false, teams(2));
        assert_eq!(told(&waits), [((0, 1), 400), ((1, 1), 0)]);
    }
}
