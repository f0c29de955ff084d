//! Collectives of a session across machines whose nodes run several worker processes each:
//! within a node the workers meet in shared memory (the CPU backend's communicator in the
//! node's arena), and between nodes only each node's first worker, its leader, takes part,
//! through Gloo.
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
//! Everything else (allgather, scatter, gather, groups across nodes, transfers) runs on the
//! flat Gloo meshes.

use super::builtins::{self, Collective, buffer, in_group, reduce_kind};
use super::gloo::{Digest, Local, Meshes, agree, exchange};
use super::reduce::{Buffers, Elem, ReduceOp, average, reduce};
use crate::object::args::is_none;
use crate::object::{Any, AnyView, Error, Result, Shape};

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
        _ => return None,
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
    match name {
        "runtime.disco.allreduce" => Some(allreduce(meshes, local, args)),
        "runtime.disco.broadcast_from_worker0" => Some(broadcast(meshes, local, args)),
        "runtime.disco.barrier" => Some(barrier(meshes, local)),
        _ => None,
    }
}

/// Runs `body` among the node's workers; its errors say that they number the node's workers
/// from 0.
fn meet(local: &Local, body: Collective, args: &[AnyView<'_>]) -> Result<()> {
    body(local.info, &local.ccl, args).map(|_| ()).map_err(|e| {
        Error::new(
            e.kind,
            format!(
                "{} (among the workers of this node, numbered from 0 = worker {})",
                e.message, local.first
            ),
        )
    })
}

fn views(values: &[Any]) -> Vec<AnyView<'_>> {
    values.iter().map(Any::view).collect()
}

/// The node's last meeting, a broadcast from the leader of `recv` (argument `at` of `args`):
/// on the leader, of what it holds when `leading` is Ok, else its failure.
fn to_the_node(local: &Local, args: &[AnyView<'_>], at: usize, leading: Result<()>) -> Result<()> {
    if local.info.num_workers == 1 {
        return leading;
    }
    let recv = args[at].to_owned()?;
    let mine = match (&local.leaders, leading) {
        (Some(_), Err(error)) => {
            builtins::fail_next(local.info, &local.ccl, "broadcast_from_worker0", &error);
            return Err(error);
        }
        (Some(_), Ok(())) => recv.clone(),
        (None, _) => Any::None,
    };
    let values = [mine, Any::Bool(false), recv];
    meet(local, builtins::broadcast, &views(&values))
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
        Ok((kind?, send, recv))
    });
    let digest = match &prepared {
        Ok((kind, send, recv)) => Digest::new(WHAT, *kind as i64, Some(*send), Some(*recv)),
        Err(_) => Digest::new(WHAT, 0, None, None).failed(),
    };
    let posts = meshes.kept(exchange(leaders, &digest));
    // A node that failed has told its workers already.
    node?;
    let across = prepared.and_then(|(kind, _, recv)| {
        agree(&posts?, 0, true, true)?;
        let elem = Elem::of(recv.dtype).expect("checked by `buffer`");
        let op = if kind == ReduceOp::Avg {
            ReduceOp::Sum
        } else {
            kind
        };
        let combine = |out: *mut u8, a: *const u8, b: *const u8, n: usize| {
            let buffers = Buffers {
                inputs: &[a as usize, b as usize],
                outputs: &[out as usize],
            };
            // SAFETY: Gloo passes `n` aligned elements of the buffer's type in each of its
            // arrays, which only this call touches now (the output may be an input).
            unsafe { reduce(elem, op, &buffers, 0, n) };
        };
        let count = recv.nbytes / elem.size();
        let at = recv.addr as *mut u8;
        // SAFETY: `recv` holds `count` elements that only this collective touches.
        meshes.kept(unsafe { leaders.allreduce(at, at, count, elem.size(), &combine) })?;
        if kind == ReduceOp::Avg {
            // SAFETY: as above.
            unsafe { average(elem, recv.addr, count, meshes.info.num_workers) };
        }
        Ok(())
    });
    to_the_node(local, args, 3, across)
}

fn broadcast(meshes: &Meshes, local: &Local, args: &[AnyView<'_>]) -> Result<()> {
    const WHAT: &str = "broadcast_from_worker0";
    let Some(leaders) = &local.leaders else {
        return to_the_node(local, args, 2, Ok(()));
    };
    let root = leaders.rank == 0;
    let across = (|| {
        let send = buffer(args, 0, "send", root)?.filter(|_| root);
        let recv = buffer(args, 2, "recv", true)?.expect("required");
        if let Some(send) = &send {
            builtins::sized(WHAT, &recv, "recv", send, 1)?;
        }
        let posts = meshes.kept(exchange(leaders, &Digest::new(WHAT, 0, send, Some(recv))))?;
        agree(&posts, 0, false, true)?;
        if let Some(send) = &send
            && send.addr != recv.addr
        {
            // SAFETY: two tensors of this worker of `nbytes` (checked above), which only
            // this collective touches.
            unsafe { std::ptr::copy(send.addr as *const u8, recv.addr as *mut u8, recv.nbytes) };
        }
        // SAFETY: `recv` holds `nbytes`, which only this collective touches.
        meshes.kept(unsafe { leaders.broadcast(recv.addr as *mut u8, recv.nbytes, 0) })
    })();
    to_the_node(local, args, 2, across)
}

fn barrier(meshes: &Meshes, local: &Local) -> Result<()> {
    let node = meet(local, builtins::barrier, &[]);
    let Some(leaders) = &local.leaders else {
        node?;
        return meet(local, builtins::barrier, &[]);
    };
    let digest = Digest::new("barrier", 0, None, None);
    let digest = if node.is_err() {
        digest.failed()
    } else {
        digest
    };
    let posts = meshes.kept(exchange(leaders, &digest));
    node?;
    match posts.and_then(|posts| agree(&posts, 0, false, false)) {
        Ok(()) => meet(local, builtins::barrier, &[]),
        Err(error) => {
            builtins::fail_next(local.info, &local.ccl, "barrier", &error);
            Err(error)
        }
    }
}
