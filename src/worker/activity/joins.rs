//! How many collectives a worker joined on each of its communicators since they were made, in
//! its record: what lets anyone who reads the records of a team tell that a worker waiting in
//! its k-th collective on a communicator waits for a peer that finished the call having joined
//! fewer there, and so will never join it.
//!
//! The one idea: the counts are written before the call ends, and a reader reads the call's end
//! first (an acquire), so a reader that sees the call finished sees every join of it.

use std::sync::atomic::Ordering;

use super::Activity;

/// The communicators a worker counts its collectives on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Comm {
    /// The whole session's.
    Session,
    /// The worker's group's.
    Group,
    /// The mesh of the nodes' first workers (sessions across machines with several workers on
    /// every node).
    Leaders,
}

/// How many communicators a record counts on.
pub const COMMS: usize = 3;

impl Comm {
    /// Its index in a record's counts (and its code on a node's board).
    pub fn code(self) -> usize {
        match self {
            Comm::Session => 0,
            Comm::Group => 1,
            Comm::Leaders => 2,
        }
    }

    pub fn from_code(code: u32) -> Option<Comm> {
        [Comm::Session, Comm::Group, Comm::Leaders]
            .into_iter()
            .find(|comm| comm.code() as u32 == code)
    }
}

/// A reading of a worker's joins, with the calls it finished (read first).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Joins {
    /// The last call that went to every worker it finished.
    pub finished_all: u64,
    /// The call it joined its last collective in (or made its communicators in).
    pub call: u64,
    /// Whether the call it runs, or ran last, went to every worker.
    pub to_all: bool,
    /// The communicator of its last collective.
    pub on: u32,
    /// That collective's code (`ccl::Collective::code`) when its call went to every worker;
    /// 0 otherwise, and before its first.
    pub what: u32,
    /// The bytes its members must agree on in it (the same on every member: an allreduce's
    /// send buffer, a broadcast's receive buffer); 0 when not said.
    pub size: u64,
    /// Its collectives on each communicator since they were made, by [`Comm::code`].
    pub counts: [u64; COMMS],
}

impl Joins {
    /// Whether a worker of these joins finished call `call` having joined fewer than `count`
    /// collectives on `on`: it will never join the `count`-th. Unknown (false) when it joined
    /// one in a later call since: its counts no longer say what it did in `call`.
    pub fn passed(&self, call: u64, on: Comm, count: u64) -> bool {
        self.finished_all >= call && self.call <= call && self.counts[on.code()] < count
    }

    /// The collective (its code, and its size) a worker of these joins joined as its
    /// `count`-th on `on` in call `call`, when that is its last and is not `what` of `size`
    /// bytes (sizes not said are not compared): where NCCL pairs collectives by their order
    /// alone, the two would meet as one (and never complete, or mix their bytes).
    pub fn crossed(
        &self,
        call: u64,
        on: Comm,
        count: u64,
        what: u32,
        size: u64,
    ) -> Option<(u32, u64)> {
        let same_place =
            self.call == call && self.on == on.code() as u32 && self.counts[on.code()] == count;
        let sizes_differ = size != 0 && self.size != 0 && self.size != size;
        (same_place && self.what != 0 && (self.what != what || sizes_differ))
            .then_some((self.what, self.size))
    }
}

impl Activity {
    /// The worker's call made its communicators: it has joined no collective on them, and the
    /// count starts in that call, so that nobody judges an earlier one by it.
    pub(crate) fn comms_made(&self) {
        let call = self.call.load(Ordering::Relaxed);
        self.change(|a| {
            a.joined
                .iter()
                .for_each(|count| count.store(0, Ordering::Relaxed));
            a.joined_call.store(call, Ordering::Relaxed);
            a.joined_what.store(0, Ordering::Relaxed);
            a.joined_size.store(0, Ordering::Relaxed);
        });
    }

    /// The worker's call joins collective `what` (its code) on `on`, whose members agree on
    /// `size` bytes (0: not said); returns how many it joined there since the communicators
    /// were made, this one included (the worker's thread only).
    pub(crate) fn joined_one(&self, on: Comm, what: u32, size: u64) -> u64 {
        let count = self.joined[on.code()].load(Ordering::Relaxed) + 1;
        let call = self.call.load(Ordering::Relaxed);
        let to_all = self.to_all.load(Ordering::Relaxed) == 1;
        self.change(|a| {
            a.joined[on.code()].store(count, Ordering::Relaxed);
            a.joined_call.store(call, Ordering::Relaxed);
            a.joined_on.store(on.code() as u32, Ordering::Relaxed);
            a.joined_what
                .store(if to_all { what } else { 0 }, Ordering::Relaxed);
            a.joined_size.store(size, Ordering::Relaxed);
        });
        count
    }

    /// The worker's joins, with the last call to every worker it finished; None when the
    /// record could not be read.
    pub(crate) fn joins(&self) -> Option<Joins> {
        self.read(Activity::joins_now)
    }

    /// The joins as they read now (inside a reading of the record).
    pub(super) fn joins_now(&self) -> Joins {
        // The call's end first: the joins it made were written before it.
        let finished_all = self.finished_all.load(Ordering::Acquire);
        Joins {
            finished_all,
            call: self.joined_call.load(Ordering::Relaxed),
            to_all: self.to_all.load(Ordering::Relaxed) == 1,
            on: self.joined_on.load(Ordering::Relaxed),
            what: self.joined_what.load(Ordering::Relaxed),
            size: self.joined_size.load(Ordering::Relaxed),
            counts: std::array::from_fn(|i| self.joined[i].load(Ordering::Relaxed)),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Collective codes, as `ccl::Collective::code` gives them.
    const ALLREDUCE: u32 = 1;
    const BARRIER: u32 = 6;

    #[test]
    fn collectives_count_per_communicator_from_their_making() {
        let activity = Activity::default();
        assert_eq!(activity.joins(), Some(Joins::default()), "zeroed");
        activity.begin_call(4, true, Some("f"));
        assert_eq!(activity.joined_one(Comm::Session, ALLREDUCE, 64), 1);
        assert_eq!(activity.joined_one(Comm::Group, ALLREDUCE, 64), 1);
        activity.begin_call(5, true, None);
        assert_eq!(activity.joined_one(Comm::Session, BARRIER, 4), 2);
        let joins = activity.joins().unwrap();
        assert_eq!(
            (joins.call, joins.on, joins.what, joins.size, joins.counts),
            (5, 0, BARRIER, 4, [2, 1, 0])
        );
        let cases = [
            (
                (5, Comm::Session, 2, ALLREDUCE, 4),
                Some((BARRIER, 4)),
                "another collective",
            ),
            (
                (5, Comm::Session, 2, BARRIER, 8),
                Some((BARRIER, 4)),
                "another size",
            ),
            ((5, Comm::Session, 2, BARRIER, 4), None, "the same"),
            ((5, Comm::Session, 2, BARRIER, 0), None, "no size said"),
            ((5, Comm::Session, 1, ALLREDUCE, 4), None, "its first"),
            ((5, Comm::Group, 2, ALLREDUCE, 4), None, "elsewhere"),
            ((4, Comm::Session, 2, ALLREDUCE, 4), None, "another call"),
        ];
        for ((call, on, count, what, size), crossed, case) in cases {
            assert_eq!(
                joins.crossed(call, on, count, what, size),
                crossed,
                "{case}"
            );
        }
        // A call to this worker alone: counted, but its collective is not said.
        activity.begin_call(6, false, None);
        assert_eq!(activity.joined_one(Comm::Session, ALLREDUCE, 64), 3);
        assert_eq!(activity.joins().unwrap().what, 0);
        activity.begin_call(7, true, Some("runtime.disco.nccl.init_ccl_per_worker"));
        activity.comms_made();
        let joins = activity.joins().unwrap();
        assert_eq!(
            (joins.call, joins.what, joins.size, joins.counts),
            (7, 0, 0, [0, 0, 0])
        );
    }

    #[test]
    fn a_peer_passed_a_collective_once_it_finished_the_call_with_fewer_joins() {
        let peer = Activity::default();
        peer.begin_call(3, true, Some("f"));
        peer.joined_one(Comm::Leaders, ALLREDUCE, 0);
        // The waiter is in its second collective on the leaders' mesh in call 3.
        assert!(
            !peer.joins().unwrap().passed(3, Comm::Leaders, 2),
            "running"
        );
        peer.end_call(Some("ValueError: boom"));
        assert!(peer.joins().unwrap().passed(3, Comm::Leaders, 2));
        assert!(
            !peer.joins().unwrap().passed(3, Comm::Leaders, 1),
            "joined it"
        );
        assert!(!peer.joins().unwrap().passed(3, Comm::Session, 0));
        peer.begin_call(4, true, None);
        peer.joined_one(Comm::Leaders, ALLREDUCE, 0);
        assert!(
            !peer.joins().unwrap().passed(3, Comm::Leaders, 2),
            "a later call's join says nothing of call 3"
        );
    }
}
