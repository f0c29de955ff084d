//! Collectives of a session across machines whose nodes run several workers each: within a
//! node the workers meet in shared memory (the CPU communicator), and between nodes only each
//! node's first worker, its leader, takes part, through Gloo.
//!
//! The one idea: a session-wide collective is three meetings, the node's workers, then the
//! leaders, then the node's workers again (an allreduce reduces on each node, the leaders
//! reduce those across nodes, and each leader broadcasts the result to its node). Verdicts
//! carry across the meetings: a node's workers agree with their leader, and the leaders with
//! each other, so every worker reaches the same verdict (docs/collectives.md says how each
//! collective goes).

use super::args::{buffer, root_send, sized};
use super::backend::Backend;
use super::board::Buf;
use super::collective::{Arg, Collective, Transfer};
use super::cpu::{self, copy};
use super::gloo::{Digest, Local, Meshes, across, agree, reduce_across};
use super::reduce::ReduceOp;
use crate::abi::{DLDataType, DLDevice};
use crate::object::{Any, AnyView, Error, Result, Shape, Tensor};
use crate::worker::builtins::worker_empty;

/// The Gloo communicator of a worker of a hierarchical session: its node's shared memory and,
/// on the node's first worker, the leaders' mesh, beside the flat meshes.
pub(super) struct Hierarchy<'a> {
    pub meshes: &'a Meshes,
    pub local: &'a Local,
}

impl Backend for Hierarchy<'_> {
    /// Runs `collective` in meetings of the node and of the leaders where its team calls for
    /// it, else on the flat meshes (the arguments' count checked already).
    fn run(&self, collective: Collective, args: &[AnyView<'_>]) -> Result<()> {
        match self.in_meetings(collective, args) {
            Some(done) => done,
            None => self.meshes.flat(collective, args),
        }
    }
}

impl Hierarchy<'_> {
    /// Runs `collective` hierarchically when its team calls for it; `None` leaves it to the
    /// flat meshes.
    fn in_meetings(&self, collective: Collective, args: &[AnyView<'_>]) -> Option<Result<()>> {
        let (meshes, local) = (self.meshes, self.local);
        if let Collective::Transfer(transfer) = collective {
            return transfer_on_node(meshes, local, transfer, args);
        }
        // A bad `in_group` is the flat path's to report.
        let grouped = collective.in_group(args).ok()?;
        if grouped && meshes.info.num_groups > 1 {
            if !local.groups_inside {
                return None;
            }
            return Some(meet(local, collective, args));
        }
        Some(match collective {
            Collective::Allreduce => allreduce(meshes, local, args),
            Collective::Allgather => gathers(meshes, local, args, Collective::Allgather),
            Collective::Broadcast => broadcast(meshes, local, args),
            Collective::Scatter => scatter(meshes, local, args),
            Collective::Gather => gathers(meshes, local, args, Collective::Gather),
            Collective::Barrier => barrier(meshes, local),
            Collective::Transfer(_) => unreachable!("transfers are met above"),
        })
    }
}

/// Runs `collective` among the node's workers; its errors say that they number the node's
/// workers from 0.
fn meet(local: &Local, collective: Collective, args: &[AnyView<'_>]) -> Result<()> {
    on_the_node(local, local.member.run(collective, args))
}

/// What a meeting among the node's workers gave, its error saying that they number the node's
/// workers from 0.
fn on_the_node(local: &Local, met: Result<()>) -> Result<()> {
    met.map_err(|e| {
        Error::new(
            e.kind,
            format!(
                "{} (among the workers of this node, numbered from 0 = worker {})",
                e.message, local.first
            ),
        )
    })
}

/// `transfer` between two workers of this node, in its shared memory; `None` for one whose
/// other end is on another node, or that names no other end (the flat path reports why).
fn transfer_on_node(
    meshes: &Meshes,
    local: &Local,
    transfer: Transfer,
    args: &[AnyView<'_>],
) -> Option<Result<()>> {
    let other = transfer.peer(args, &meshes.info).ok()?;
    let other = other
        .checked_sub(local.first)
        .filter(|&o| o < local.member.info.num_workers)?;
    let member = &local.member;
    let moved = cpu::transfer(args, transfer, member.info, &member.ccl, other);
    Some(on_the_node(local, moved))
}

/// The arguments of a session-wide call of `collective` among the node's workers: `send`,
/// `recv` and, for an allreduce, `kind`, in their places.
fn node_call(collective: Collective, send: Any, kind: Any, recv: Any) -> Vec<Any> {
    let value = |arg: &Arg| match arg {
        Arg::Send => send.clone(),
        Arg::Kind => kind.clone(),
        Arg::InGroup => Any::Bool(false),
        Arg::Recv => recv.clone(),
        Arg::Peer => unreachable!("the node's meetings are no transfers"),
    };
    collective.args().iter().map(value).collect()
}

/// Argument `arg` of the caller's call of `collective`, as the caller passed it.
fn passed(args: &[AnyView<'_>], collective: Collective, arg: Arg) -> Result<Any> {
    args[collective.at(arg)].to_owned()
}

fn views(values: &[Any]) -> Vec<AnyView<'_>> {
    values.iter().map(Any::view).collect()
}

/// The node's last meeting, a broadcast from the leader of `recv` (of the caller's call of
/// `caller`): on the leader, of what it holds when `leading` is Ok, else its failure.
fn to_the_node(
    local: &Local,
    args: &[AnyView<'_>],
    caller: Collective,
    leading: Result<()>,
) -> Result<()> {
    const MEETING: Collective = Collective::Broadcast;
    let recv = passed(args, caller, Arg::Recv)?;
    let mine = match (&local.leaders, leading) {
        (Some(_), Err(error)) => return fail_node(local, MEETING, error),
        (Some(_), Ok(())) => recv.clone(),
        (None, _) => Any::None,
    };
    let values = node_call(MEETING, mine, Any::None, recv);
    meet(local, MEETING, &views(&values))
}

/// Where rank r of the leaders' mesh is: worker `r * workers per node`.
fn leaders_at(local: &Local) -> (usize, usize) {
    (0, local.member.info.num_workers)
}

fn allreduce(meshes: &Meshes, local: &Local, args: &[AnyView<'_>]) -> Result<()> {
    const WHAT: Collective = Collective::Allreduce;
    let kind = WHAT.kind(args);
    // An average is a sum on the way, divided once at the end.
    let on_the_way = match kind {
        Ok(ReduceOp::Avg) => Shape::new(&[ReduceOp::Sum as i64]).into(),
        _ => passed(args, WHAT, Arg::Kind)?,
    };
    let send = passed(args, WHAT, Arg::Send)?;
    let values = node_call(WHAT, send, on_the_way, passed(args, WHAT, Arg::Recv)?);
    let node = meet(local, WHAT, &views(&values));
    let Some(leaders) = &local.leaders else {
        node?;
        return to_the_node(local, args, WHAT, Ok(()));
    };
    let prepared = node.clone().and_then(|()| {
        let send = buffer(args, WHAT, Arg::Send, true)?.expect("required");
        let recv = buffer(args, WHAT, Arg::Recv, true)?.expect("required");
        let kind = kind?;
        Ok((
            Digest::new(WHAT, kind as i64, Some(send), Some(recv)),
            (kind, recv),
        ))
    });
    let over = meshes.info.num_workers;
    let result = across(
        meshes,
        leaders,
        leaders_at(local),
        WHAT,
        prepared,
        |posts, at| agree(posts, at, true, true),
        |(kind, recv)| reduce_across(leaders, kind, &recv, &recv, over),
    );
    // A node that failed has told its workers already.
    node?;
    to_the_node(local, args, WHAT, result)
}

fn broadcast(meshes: &Meshes, local: &Local, args: &[AnyView<'_>]) -> Result<()> {
    const WHAT: Collective = Collective::Broadcast;
    let Some(leaders) = &local.leaders else {
        return to_the_node(local, args, WHAT, Ok(()));
    };
    let prepared = root_send(args, WHAT, leaders.rank == 0, None)
        .map(|(send, recv)| (Digest::new(WHAT, 0, send, Some(recv)), (send, recv)));
    let result = across(
        meshes,
        leaders,
        leaders_at(local),
        WHAT,
        prepared,
        |posts, at| agree(posts, at, false, true),
        |(send, recv)| {
            if let Some(send) = send {
                copy(send.addr, recv.addr, recv.nbytes);
            }
            // SAFETY: `recv` holds `nbytes`, which only this collective touches.
            unsafe { leaders.broadcast(recv.addr as *mut u8, recv.nbytes, 0) }
        },
    );
    to_the_node(local, args, WHAT, result)
}

fn barrier(meshes: &Meshes, local: &Local) -> Result<()> {
    const WHAT: Collective = Collective::Barrier;
    let node = meet(local, WHAT, &[]);
    let Some(leaders) = &local.leaders else {
        node?;
        return confirmed_by_the_node(local, WHAT, Ok(()));
    };
    let prepared = node
        .clone()
        .map(|()| (Digest::new(WHAT, 0, None, None), ()));
    let check = |posts: &[Digest], at| agree(posts, at, false, false);
    let result = across(
        meshes,
        leaders,
        leaders_at(local),
        WHAT,
        prepared,
        check,
        Ok,
    );
    node?;
    confirmed_by_the_node(local, WHAT, result)
}

/// A host tensor of `count` elements of `dtype` for a node's part of a gather or scatter, on
/// its first worker: in the node's arena while it has room (the others reach it directly there).
fn node_part(count: usize, dtype: DLDataType) -> Result<Tensor> {
    worker_empty(&[count as i64], dtype, DLDevice::cpu())
}

/// The node's `send` buffers of the caller's call of `what` (an allgather or a gather)
/// gathered, in the order of the node's workers, on its first worker, which gets the node's
/// part back; the first meeting of the gathers, as collective `what` (so an allgather and a
/// gather do not meet).
fn gather_in_node(
    local: &Local,
    what: Collective,
    args: &[AnyView<'_>],
) -> Result<Option<(Tensor, Buf)>> {
    let part = match &local.leaders {
        Some(_) => {
            let made = buffer(args, what, Arg::Send, true).and_then(|send| {
                let send = send.expect("required");
                let count = send.shape().iter().product::<i64>() as usize;
                node_part(count * local.member.info.num_workers, send.dtype)
            });
            match made {
                Ok(part) => Some(part),
                // The node's workers are in the meeting already.
                Err(error) => return fail_node(local, what, error),
            }
        }
        None => None,
    };
    let send = passed(args, what, Arg::Send)?;
    let recv = part.clone().map_or(Any::None, Any::from);
    let values = node_call(Collective::Gather, send, Any::None, recv);
    let met = cpu::gather_as(what, &local.member, &views(&values));
    on_the_node(local, met)?;
    Ok(part.map(|tensor| {
        let buf = Buf::of(&tensor).expect("one dimension");
        (tensor, buf)
    }))
}

/// An allgather (every worker gets the whole) or a gather to worker 0 (`what`): the node's
/// parts meet on its first worker, the first workers meet, and the node hears the outcome (the
/// whole, for an allgather).
fn gathers(meshes: &Meshes, local: &Local, args: &[AnyView<'_>], what: Collective) -> Result<()> {
    let all = what == Collective::Allgather;
    let node = gather_in_node(local, what, args);
    let finish = |result| match all {
        true => to_the_node(local, args, what, result),
        false => confirmed_by_the_node(local, what, result),
    };
    let Some(leaders) = &local.leaders else {
        node?;
        return finish(Ok(()));
    };
    let receives = all || leaders.rank == 0;
    let node_failed = node.is_err();
    let prepared = node.and_then(|part| {
        let (tensor, part) = part.expect("on the node's first worker");
        let recv = buffer(args, what, Arg::Recv, receives)?.filter(|_| receives);
        if let Some(recv) = &recv {
            sized(what, recv, Arg::Recv, &part, leaders.size)?;
        }
        Ok((Digest::new(what, 0, Some(part), recv), (tensor, part, recv)))
    });
    let result = across(
        meshes,
        leaders,
        leaders_at(local),
        what,
        prepared,
        |posts, at| agree(posts, at, true, all),
        |(_tensor, part, recv)| {
            let out = recv.map_or(std::ptr::null_mut(), |r| r.addr as *mut u8);
            let input = part.addr as *const u8;
            // SAFETY: the node's part holds `nbytes`; `recv`, where it is written, that many
            // for every node (checked above).
            unsafe {
                if all {
                    leaders.allgather(input, out, part.nbytes)
                } else {
                    leaders.gather(input, out, part.nbytes, 0)
                }
            }
        },
    );
    if node_failed {
        return result; // the node's workers know
    }
    finish(result)
}

/// The node's last meeting when nothing comes back to it: a barrier, which its first worker
/// fails when the collective failed after the node met.
fn confirmed_by_the_node(local: &Local, what: Collective, leading: Result<()>) -> Result<()> {
    match (&local.leaders, leading) {
        (Some(_), Err(error)) => fail_node(local, what, error),
        _ => meet(local, Collective::Barrier, &[]),
    }
}

/// Fails the node's next meeting with `error` (on its first worker, after the node met: its
/// other workers are waiting there), and returns it.
fn fail_node<T>(local: &Local, what: Collective, error: Error) -> Result<T> {
    cpu::fail_next(&local.member, what, &error);
    Err(error)
}

fn scatter(meshes: &Meshes, local: &Local, args: &[AnyView<'_>]) -> Result<()> {
    const WHAT: Collective = Collective::Scatter;
    let Some(leaders) = &local.leaders else {
        // The node's meeting is session-wide, whatever `in_group` said.
        let send = passed(args, WHAT, Arg::Send)?;
        let values = node_call(WHAT, send, Any::None, passed(args, WHAT, Arg::Recv)?);
        return meet(local, WHAT, &views(&values));
    };
    let prepared = (|| {
        let parts = Some(meshes.info.num_workers);
        let (send, recv) = root_send(args, WHAT, leaders.rank == 0, parts)?;
        let count = recv.shape().iter().product::<i64>() as usize;
        let part = node_part(count * local.member.info.num_workers, recv.dtype)?;
        Ok((Digest::new(WHAT, 0, send, Some(recv)), (send, part)))
    })();
    let result = across(
        meshes,
        leaders,
        leaders_at(local),
        WHAT,
        prepared,
        |posts, at| agree(posts, at, false, true),
        |(send, part)| {
            let input = send.map_or(std::ptr::null(), |s| s.addr as *const u8);
            // SAFETY: the root's `send` holds the node's part's bytes for every node (checked
            // above); only this collective touches them.
            unsafe { leaders.scatter(input, part.data_ptr(), part.nbytes(), 0) }?;
            Ok(part)
        },
    );
    match result {
        Ok(part) => {
            let values = node_call(
                WHAT,
                Any::from(part),
                Any::None,
                passed(args, WHAT, Arg::Recv)?,
            );
            meet(local, WHAT, &views(&values))
        }
        Err(error) => fail_node(local, WHAT, error),
    }
}
