//! The collectives, in one table: each one's name in the registry (Disco's), its arguments in
//! their places and how many a call may leave out, and the code its posts carry.
//!
//! The one idea: a collective is named by a string once, when its built-in is registered; from
//! then on the built-in, the TVM dispatchers and every backend hold a [`Collective`] and read
//! from here how many arguments it takes, where each lies, and whom a transfer meets.

use std::fmt;

use super::reduce::ReduceOp;
use crate::object::args::{argument, arity, is_none};
use crate::object::{AnyView, Error, Result};
use crate::worker::WorkerInfo;

/// A collective built-in, as Disco names and calls it
/// (`runtime.disco.allreduce(send, Shape([kind]), in_group, recv)`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Collective {
    Allreduce,
    Allgather,
    /// `broadcast_from_worker0`: rank 0 of the team sends its buffer to every member.
    Broadcast,
    /// `scatter_from_worker0`: rank 0 sends one part of its buffer to each member.
    Scatter,
    /// `gather_to_worker0`: every member sends its buffer to rank 0.
    Gather,
    Barrier,
    /// One side of a transfer between two workers.
    Transfer(Transfer),
}

/// The point-to-point transfers, each named for the worker at its other end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transfer {
    SendToWorker,
    RecvFromWorker,
    /// Every worker but worker 0 receives from worker 0.
    RecvFromWorker0,
    /// To the worker of the same place in the next group.
    SendToNextGroup,
    /// From the worker of the same place in the previous group.
    RecvFromPrevGroup,
}

/// An argument of a collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arg {
    /// The tensor a worker sends (or reduces).
    Send,
    /// The reduction, `Shape([kind])`.
    Kind,
    /// Whether the team is the worker's group (else the session).
    InGroup,
    /// The tensor a worker receives into.
    Recv,
    /// The worker at the other end of a transfer.
    Peer,
}

impl Arg {
    /// How errors name it.
    pub fn name(self) -> &'static str {
        match self {
            Arg::Send => "send",
            Arg::Kind => "kind",
            Arg::InGroup => "in_group",
            Arg::Recv => "recv",
            Arg::Peer => "peer",
        }
    }
}

/// One collective's line of the table.
struct Entry {
    collective: Collective,
    name: &'static str,
    /// Its arguments in their places.
    args: &'static [Arg],
    /// How many of them a call passes at least (the rest, when absent, are None).
    required: usize,
}

/// Every collective's name and arguments, in the order of the codes their posts carry.
const TABLE: [Entry; 11] = {
    use Arg::{InGroup, Kind, Peer, Recv, Send};
    use Collective::Transfer as T;
    [
        entry(
            Collective::Allreduce,
            "runtime.disco.allreduce",
            &[Send, Kind, InGroup, Recv],
            4,
        ),
        entry(
            Collective::Allgather,
            "runtime.disco.allgather",
            &[Send, InGroup, Recv],
            3,
        ),
        entry(
            Collective::Broadcast,
            "runtime.disco.broadcast_from_worker0",
            &[Send, InGroup, Recv],
            3,
        ),
        entry(
            Collective::Scatter,
            "runtime.disco.scatter_from_worker0",
            &[Send, InGroup, Recv],
            3,
        ),
        entry(
            Collective::Gather,
            "runtime.disco.gather_to_worker0",
            &[Send, InGroup, Recv],
            2,
        ),
        entry(Collective::Barrier, "runtime.disco.barrier", &[InGroup], 0),
        entry(
            T(Transfer::SendToWorker),
            "runtime.disco.send_to_worker",
            &[Send, Peer],
            2,
        ),
        entry(
            T(Transfer::RecvFromWorker),
            "runtime.disco.recv_from_worker",
            &[Recv, Peer],
            2,
        ),
        entry(
            T(Transfer::RecvFromWorker0),
            "runtime.disco.recv_from_worker0",
            &[Recv],
            1,
        ),
        entry(
            T(Transfer::SendToNextGroup),
            "runtime.disco.send_to_next_group",
            &[Send],
            1,
        ),
        entry(
            T(Transfer::RecvFromPrevGroup),
            "runtime.disco.recv_from_prev_group",
            &[Recv],
            1,
        ),
    ]
};

const fn entry(
    collective: Collective,
    name: &'static str,
    args: &'static [Arg],
    required: usize,
) -> Entry {
    Entry {
        collective,
        name,
        args,
        required,
    }
}

/// What every registered name starts with.
const PREFIX: &str = "runtime.disco.";

impl Collective {
    /// Every collective, in the order of their codes.
    pub fn all() -> impl Iterator<Item = Collective> {
        TABLE.iter().map(|e| e.collective)
    }

    fn entry(self) -> &'static Entry {
        TABLE
            .iter()
            .find(|e| e.collective == self)
            .expect("every collective has its line in the table")
    }

    /// Its name in the registry.
    pub fn name(self) -> &'static str {
        self.entry().name
    }

    /// How posts and errors name it: its name without `runtime.disco.`.
    pub fn what(self) -> &'static str {
        let name = self.name();
        name.strip_prefix(PREFIX).unwrap_or(name)
    }

    /// Whether TVM's Disco registers a built-in of the same name (which code TVM compiled finds
    /// in tvm-ffi's registry): all but the barrier, which is discovm's own.
    pub fn in_disco(self) -> bool {
        self != Collective::Barrier
    }

    /// The code its posts carry (0 is none).
    pub fn code(self) -> u32 {
        let at = TABLE.iter().position(|e| e.collective == self);
        at.map_or(0, |i| i as u32 + 1)
    }

    /// The collective whose posts carry `code`.
    pub fn from_code(code: u32) -> Option<Collective> {
        let at = code.checked_sub(1)? as usize;
        TABLE.get(at).map(|e| e.collective)
    }

    /// Its arguments, in their places.
    pub fn args(self) -> &'static [Arg] {
        self.entry().args
    }

    /// Where argument `arg` lies in a call.
    ///
    /// Panics if the collective takes no such argument: the backends ask only for those it has.
    pub fn at(self, arg: Arg) -> usize {
        let args = self.entry().args;
        args.iter()
            .position(|&a| a == arg)
            .unwrap_or_else(|| panic!("`{}` takes no {} argument", self.name(), arg.name()))
    }

    /// Fails with a `TypeError` unless the call passes as many arguments as the collective
    /// takes (those it may leave out left out or not).
    pub fn check_arity(self, args: &[AnyView<'_>]) -> Result<()> {
        let entry = self.entry();
        arity(entry.name, args, entry.required, entry.args.len())
    }

    /// Whether the call's team is the worker's group: its `in_group` argument, which a barrier
    /// may leave out or pass None for (the session). The transfers have none.
    pub fn in_group(self, args: &[AnyView<'_>]) -> Result<bool> {
        let entry = self.entry();
        let Some(i) = entry.args.iter().position(|&a| a == Arg::InGroup) else {
            return Ok(false);
        };
        if i >= entry.required && is_none(args, i) {
            return Ok(false);
        }
        argument(i, Arg::InGroup.name(), || args[i].as_bool())
    }

    /// The reduction of an allreduce: Disco's `Shape([kind])`.
    pub fn kind(self, args: &[AnyView<'_>]) -> Result<ReduceOp> {
        let i = self.at(Arg::Kind);
        argument(i, Arg::Kind.name(), || {
            let shape = args[i].as_shape()?;
            match shape.as_slice() {
                [kind] => ReduceOp::from_code(*kind),
                other => Err(Error::value(format!(
                    "expected Shape([kind]) with one entry, got {other:?}"
                ))),
            }
        })
    }
}

impl fmt::Display for Collective {
    /// Its name in posts and errors ([`Collective::what`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.what())
    }
}

/// How errors name the collective whose posts carry `code`, which may come from another
/// machine.
pub(super) fn what_of(code: u32) -> &'static str {
    Collective::from_code(code).map_or("an unknown collective", Collective::what)
}

impl Transfer {
    /// Whether this worker sends (else it receives).
    pub fn sends(self) -> bool {
        matches!(self, Transfer::SendToWorker | Transfer::SendToNextGroup)
    }

    /// The worker at the other end of this worker's (`info`'s) call with `args`; the error
    /// says why the call names none.
    pub fn peer(self, args: &[AnyView<'_>], info: &WorkerInfo) -> Result<usize> {
        match self {
            Transfer::SendToWorker | Transfer::RecvFromWorker => {
                peer_argument(args, Collective::Transfer(self).at(Arg::Peer), info)
            }
            Transfer::RecvFromWorker0 if info.id == 0 => Err(Error::value(
                "worker 0 cannot receive from itself (recv_from_worker0 runs on the other workers)",
            )),
            Transfer::RecvFromWorker0 => Ok(0),
            Transfer::SendToNextGroup => {
                let to = info.id + info.workers_per_group();
                if to < info.num_workers {
                    Ok(to)
                } else {
                    Err(Error::value(format!(
                        "worker {} is in the last group: there is no next group to send to",
                        info.id
                    )))
                }
            }
            Transfer::RecvFromPrevGroup => info
                .id
                .checked_sub(info.workers_per_group())
                .ok_or_else(|| {
                    Error::value(format!(
                        "worker {} is in the first group: there is no previous group to receive \
                         from",
                        info.id
                    ))
                }),
        }
    }
}

/// The peer argument `i`: another worker of the session.
fn peer_argument(args: &[AnyView<'_>], i: usize, info: &WorkerInfo) -> Result<usize> {
    let peer = argument(i, Arg::Peer.name(), || args[i].as_i64())?;
    let peer = usize::try_from(peer)
        .ok()
        .filter(|&p| p < info.num_workers)
        .ok_or_else(|| {
            Error::index(format!(
                "peer worker {peer} out of range (session has {} workers)",
                info.num_workers
            ))
        })?;
    if peer == info.id {
        return Err(Error::value(format!(
            "worker {peer} cannot send to or receive from itself"
        )));
    }
    Ok(peer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_collective_has_one_line_and_a_code_of_its_own() {
        let all: Vec<Collective> = Collective::all().collect();
        assert_eq!(all.len(), TABLE.len());
        for (i, &c) in all.iter().enumerate() {
            assert_eq!(all.iter().filter(|&&o| o == c).count(), 1, "{c:?}");
            assert_eq!(c.code(), i as u32 + 1);
            assert_eq!(Collective::from_code(c.code()), Some(c));
            assert!(c.name().starts_with(PREFIX), "{}", c.name());
            assert!(c.entry().required <= c.entry().args.len());
        }
        assert_eq!(Collective::from_code(0), None);
        assert_eq!(what_of(0), "an unknown collective");
        assert_eq!(what_of(TABLE.len() as u32 + 1), "an unknown collective");
    }

    #[test]
    fn the_table_says_disco_s_names_and_argument_counts() {
        let line = |c: Collective| {
            let e = c.entry();
            (c.what(), e.required, e.args.len())
        };
        assert_eq!(line(Collective::Allreduce), ("allreduce", 4, 4));
        assert_eq!(line(Collective::Gather), ("gather_to_worker0", 2, 3));
        assert_eq!(line(Collective::Barrier), ("barrier", 0, 1));
        assert_eq!(
            line(Collective::Transfer(Transfer::RecvFromWorker0)),
            ("recv_from_worker0", 1, 1)
        );
        assert_eq!(Collective::Allreduce.at(Arg::Recv), 3);
        assert_eq!(Collective::Broadcast.at(Arg::InGroup), 1);
        assert_eq!(Collective::Scatter.to_string(), "scatter_from_worker0");
        let disco: Vec<&str> = Collective::all()
            .filter(|c| !c.in_disco())
            .map(Collective::name)
            .collect();
        assert_eq!(disco, ["runtime.disco.barrier"]);
    }
}
