//! Collectives of a session across machines whose nodes run several workers each: within a
//! node the workers meet in shared memory (the CPU backend's communicator, in the node's arena
//! for worker processes, in this process for the controller's own worker threads), and between
//! nodes only each node's first worker, its leader, takes part, through Gloo.
//!
//! The one idea: a session-wide collective is three meetings, the node's workers, then the
//! leaders, then the node's workers again. An allreduce reduces on each node, the leaders
//! reduce those across nodes, and each leader broadcasts the result to its node; a broadcast
//! goes from leader to leader, then within each node; a barrier is three barriers. A group
//! that lies within a node meets in shared memory alone. Verdicts carry across: a node's
//! workers agree with their leader (the shared-memory checks), and the leaders with each other
//! (their digests, which also say whether their node failed already), so every worker of an
//! allreduce or a barrier reaches the same verdict; a leader that fails after its node met
//! fails its node's last meeting, so its workers fail with it. In a broadcast the nodes meet
//! only after the leaders: a worker whose own arguments are wrong fails its node's workers.
//!
//! Gathers meet in the node first, on its first worker, which then meets the others (an
//! allgather then broadcasts the whole to its node); a scatter goes from leader to leader, then
//! within each node. Groups across nodes, and transfers between nodes, run on the flat Gloo
//! meshes; a transfer within a node stays in its shared memory.

use super::Buf;
use super::builtins::{self, Collective, buffer, in_group, reduce_kind, root_send};
use super::gloo::{Digest, Local, Meshes, across, agree, reduce_across};
use super::reduce::ReduceOp;
use crate::abi::{DLDataType, DLDevice};
use crate::object::args::is_none;
use crate::object::{Any, AnyView, Error, Result, Shape, Tensor};
use crate::worker::builtins::worker_empty;

/// Runs collective built-in `name` on a hierarchical session when its team calls for it;
/// `None` leaves it to the flat meshes.
pub(super) fn dispatch(
    meshes: &Meshes,
    local: &Local,
    name: &str,
    args: &[AnyView<'_>],
) -> Option<Result<()>> {
    let in_group_at = match name {
        "runtime.disco.allreduce" => Some(2),
        "runtime.disco.allgather"
        | "runtime.disco.broadcast_from_worker0"
        | "runtime.disco.scatter_from_worker0"
        | "runtime.disco.gather_to_worker0" => Some(1),
        "runtime.disco.barrier" => (!is_none(args, 0)).then_some(0),
        _ => return transfer_on_node(meshes, local, name, args),
    };
    // A bad `in_group` is the flat path's to report.
    let grouped = match in_group_at {
        Some(i) => in_group(args, i).ok()?,
        None => false,
    };
    if grouped && meshes.info.num_groups > 1 {
        if !local.groups_inside {
            return None;
        }
        let body = builtins::by_name(name)?;
        return Some(meet(local, body, args));
    }
    Some(match name {
        "runtime.disco.allreduce" => allreduce(meshes, local, args),
        "runtime.disco.allgather" => gathers(meshes, local, args, true),
        "runtime.disco.broadcast_from_worker0" => broadcast(meshes, local, args),
        "runtime.disco.scatter_from_worker0" => scatter(meshes, local, args),
        "runtime.disco.gather_to_worker0" => gathers(meshes, local, args, false),
        _ => barrier(meshes, local),
    })
}

/// Runs `body` among the node's workers; its errors say that they number the node's workers
/// from 0.
fn meet(local: &Local, body: Collective, args: &[AnyView<'_>]) -> Result<()> {
    on_the_node(local, body(local.info, &local.ccl, args).map(|_| ()))
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

/// Transfer built-in `name` between two workers of this node, in its shared memory; `None`
/// for one whose other end is on another node, or that names no other end (the flat path
/// reports why).
fn transfer_on_node(
    meshes: &Meshes,
    local: &Local,
    name: &str,
    args: &[AnyView<'_>],
) -> Option<Result<()>> {
    let what = builtins::TRANSFERS.into_iter().find(|t| *t == name)?;
    let (other, sending) = builtins::transfer_peer(what, args, &meshes.info)?.ok()?;
    let other = other
        .checked_sub(local.first)
        .filter(|&o| o < local.info.num_workers)?;
    let what = what.strip_prefix("runtime.disco.").unwrap_or(what);
    let moved = builtins::transfer(args, what, local.info, &local.ccl, other, sending);
    Some(on_the_node(local, moved))
}

fn views(values: &[Any]) -> Vec<AnyView<'_>> {
    values.iter().map(Any::view).collect()
}

/// The node's last meeting, a broadcast from the leader of `recv` (argument `at` of `args`):
/// on the leader, of what it holds when `leading` is Ok, else its failure.
fn to_the_node(local: &Local, args: &[AnyView<'_>], at: usize, leading: Result<()>) -> Result<()> {
    let recv = args[at].to_owned()?;
    let mine = match (&local.leaders, leading) {
        (Some(_), Err(error)) => return fail_node(local, "broadcast_from_worker0", error),
        (Some(_), Ok(())) => recv.clone(),
        (None, _) => Any::None,
    };
    let values = [mine, Any::Bool(false), recv];
    meet(local, builtins::broadcast, &views(&values))
}

/// Where rank r of the leaders' mesh is: worker `r * workers per node`.
fn leaders_at(local: &Local) -> (usize, usize) {
    (0, local.info.num_workers)
}

fn allreduce(meshes: &Meshes, local: &Local, args: &[AnyView<'_>]) -> Result<()> {
    const WHAT: &str = "allreduce";
    let kind = reduce_kind(args, 1);
    // An average is a sum on the way, divided once at the end.
    let on_the_way = match kind {
        Ok(ReduceOp::Avg) => Shape::new(&[ReduceOp::Sum as i64]).into(),
        _ => args[1].to_owned()?,
    };
    let values = [
        args[0].to_owned()?,
        on_the_way,
        Any::Bool(false),
        args[3].to_owned()?,
    ];
    let node = meet(local, builtins::allreduce, &views(&values));
    let Some(leaders) = &local.leaders else {
        node?;
        return to_the_node(local, args, 3, Ok(()));
    };
    let prepared = node.clone().and_then(|()| {
        let send = buffer(args, 0, "send", true)?.expect("required");
        let recv = buffer(args, 3, "recv", true)?.expect("required");
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
    to_the_node(local, args, 3, result)
}

fn broadcast(meshes: &Meshes, local: &Local, args: &[AnyView<'_>]) -> Result<()> {
    const WHAT: &str = "broadcast_from_worker0";
    let Some(leaders) = &local.leaders else {
        return to_the_node(local, args, 2, Ok(()));
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
                builtins::copy(send.addr, recv.addr, recv.nbytes);
            }
            // SAFETY: `recv` holds `nbytes`, which only this collective touches.
            unsafe { leaders.broadcast(recv.addr as *mut u8, recv.nbytes, 0) }
        },
    );
    to_the_node(local, args, 2, result)
}

fn barrier(meshes: &Meshes, local: &Local) -> Result<()> {
    const WHAT: &str = "barrier";
    let node = meet(local, builtins::barrier, &[]);
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

/// The node's `send` buffers (argument 0) gathered, in the order of the node's workers, on its
/// first worker, which gets the node's part back; the first meeting of the gathers, as
/// collective `what` (so an allgather and a gather do not meet).
fn gather_in_node(
    local: &Local,
    what: &'static str,
    args: &[AnyView<'_>],
) -> Result<Option<(Tensor, Buf)>> {
    let part = match &local.leaders {
        Some(_) => {
            let made = buffer(args, 0, "send", true).and_then(|send| {
                let send = send.expect("required");
                let count = send.shape().iter().product::<i64>() as usize;
                node_part(count * local.info.num_workers, send.dtype)
            });
            match made {
                Ok(part) => Some(part),
                // The node's workers are in the meeting already.
                Err(error) => return fail_node(local, what, error),
            }
        }
        None => None,
    };
    let values = [
        args[0].to_owned()?,
        Any::Bool(false),
        part.clone().map_or(Any::None, Any::from),
    ];
    let met = builtins::gather_as(what, local.info, &local.ccl, &views(&values));
    on_the_node(local, met.map(drop))?;
    Ok(part.map(|tensor| {
        let buf = Buf::of(&tensor).expect("one dimension");
        (tensor, buf)
    }))
}

/// An allgather (`all`: every worker gets the whole) or a gather to worker 0: the node's parts
/// meet on its first worker, the first workers meet, and the node hears the outcome (the whole,
/// for an allgather).
fn gathers(meshes: &Meshes, local: &Local, args: &[AnyView<'_>], all: bool) -> Result<()> {
    let what = if all {
        "allgather"
    } else {
        "gather_to_worker0"
    };
    let node = gather_in_node(local, what, args);
    let finish = |result| match all {
        true => to_the_node(local, args, 2, result),
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
        let recv = buffer(args, 2, "recv", receives)?.filter(|_| receives);
        if let Some(recv) = &recv {
            builtins::sized(what, recv, "recv", &part, leaders.size)?;
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
fn confirmed_by_the_node(local: &Local, what: &'static str, leading: Result<()>) -> Result<()> {
    match (&local.leaders, leading) {
        (Some(_), Err(error)) => fail_node(local, what, error),
        _ => meet(local, builtins::barrier, &[]),
    }
}

/// Fails the node's next meeting with `error` (on its first worker, after the node met: its
/// other workers are waiting there), and returns it.
fn fail_node<T>(local: &Local, what: &'static str, error: Error) -> Result<T> {
    builtins::fail_next(local.info, &local.ccl, what, &error);
    Err(error)
}

fn scatter(meshes: &Meshes, local: &Local, args: &[AnyView<'_>]) -> Result<()> {
    const WHAT: &str = "scatter_from_worker0";
    let Some(leaders) = &local.leaders else {
        // The node's meeting is session-wide, whatever `in_group` said.
        let values = [args[0].to_owned()?, Any::Bool(false), args[2].to_owned()?];
        return meet(local, builtins::scatter, &views(&values));
    };
    let prepared = (|| {
        let parts = Some(meshes.info.num_workers);
        let (send, recv) = root_send(args, WHAT, leaders.rank == 0, parts)?;
        let count = recv.shape().iter().product::<i64>() as usize;
        let part = node_part(count * local.info.num_workers, recv.dtype)?;
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
            let values = [Any::from(part), Any::Bool(false), args[2].to_owned()?];
            meet(local, builtins::scatter, &views(&values))
        }
        Err(error) => fail_node(local, WHAT, error),
    }
}
