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
//! Gathers meet in the node first, on its first worker, which then meets the others (an
//! allgather then broadcasts the whole to its node); a scatter goes from leader to leader, then
//! within each node. Groups across nodes and transfers run on the flat Gloo meshes.

use super::Buf;
use super::builtins::{self, Collective, buffer, in_group, reduce_kind};
use super::gloo::{Digest, Local, Meshes, agree, exchange, reduce_across};
use super::reduce::ReduceOp;
use crate::abi::{DLDataType, DLDevice};
use crate::device::gloo::Mesh;
use crate::object::args::is_none;
use crate::object::{Any, AnyView, Error, Result, Shape, Tensor};

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
    Some(match name {
        "runtime.disco.allreduce" => allreduce(meshes, local, args),
        "runtime.disco.allgather" => allgather(meshes, local, args),
        "runtime.disco.broadcast_from_worker0" => broadcast(meshes, local, args),
        "runtime.disco.scatter_from_worker0" => scatter(meshes, local, args),
        "runtime.disco.gather_to_worker0" => gather(meshes, local, args),
        _ => barrier(meshes, local),
    })
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
        let over = meshes.info.num_workers;
        meshes.kept(reduce_across(leaders, kind, &recv, &recv, over))
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

/// A host tensor of `count` elements of `dtype` for a node's part of a gather, on its first
/// worker: in the node's arena while it has room (the others write into it directly there).
fn node_part(count: usize, dtype: DLDataType) -> Result<Tensor> {
    let dims = [count as i64];
    match crate::session::process::arena_empty(&dims, dtype, DLDevice::cpu())? {
        Some(tensor) => Ok(tensor),
        None => crate::device::empty(&dims, dtype, DLDevice::cpu()),
    }
}

/// The node's `send` buffers (argument 0) gathered, in the order of the node's workers, on its
/// first worker, which gets the node's part back; the first meeting of the gathers.
fn gather_in_node(local: &Local, args: &[AnyView<'_>]) -> Result<Option<(Tensor, Buf)>> {
    let part = match &local.leaders {
        Some(_) => {
            let send = buffer(args, 0, "send", true)?.expect("required");
            let count = send.shape().iter().product::<i64>() as usize;
            Some(node_part(count * local.info.num_workers, send.dtype)?)
        }
        None => None,
    };
    let values = [
        args[0].to_owned()?,
        Any::Bool(false),
        part.clone().map_or(Any::None, Any::from),
    ];
    meet(local, builtins::gather, &views(&values))?;
    Ok(part.map(|tensor| {
        let buf = Buf::new(
            tensor.data_ptr() as usize,
            tensor.dl().dtype,
            tensor.shape(),
            tensor.nbytes(),
        )
        .expect("one dimension");
        (tensor, buf)
    }))
}

fn allgather(meshes: &Meshes, local: &Local, args: &[AnyView<'_>]) -> Result<()> {
    const WHAT: &str = "allgather";
    let node = gather_in_node(local, args);
    let Some(leaders) = &local.leaders else {
        node?;
        return to_the_node(local, args, 2, Ok(()));
    };
    let part = match node {
        Ok(part) => part.expect("on the node's first worker"),
        Err(error) => return failed_in_node(meshes, leaders, WHAT, error),
    };
    let prepared = (|| {
        let recv = buffer(args, 2, "recv", true)?.expect("required");
        builtins::sized(WHAT, &recv, "recv", &part.1, leaders.size)?;
        Ok((part, recv))
    })();
    let digest = match &prepared {
        Ok(((_, part), recv)) => Digest::new(WHAT, 0, Some(*part), Some(*recv)),
        Err(_) => Digest::new(WHAT, 0, None, None).failed(),
    };
    let posts = meshes.kept(exchange(leaders, &digest));
    let across = prepared.and_then(|((_part, buf), recv)| {
        agree(&posts?, 0, true, true)?;
        // SAFETY: the node's part holds `nbytes`, `recv` that many for every node (checked
        // above); only this collective touches them.
        meshes.kept(unsafe {
            leaders.allgather(buf.addr as *const u8, recv.addr as *mut u8, buf.nbytes)
        })
    });
    to_the_node(local, args, 2, across)
}

fn gather(meshes: &Meshes, local: &Local, args: &[AnyView<'_>]) -> Result<()> {
    const WHAT: &str = "gather_to_worker0";
    let node = gather_in_node(local, args);
    let Some(leaders) = &local.leaders else {
        node?;
        return confirmed_by_the_node(local, WHAT, Ok(()));
    };
    let root = leaders.rank == 0;
    let part = match node {
        Ok(part) => part.expect("on the node's first worker"),
        Err(error) => return failed_in_node(meshes, leaders, WHAT, error),
    };
    let prepared = (|| {
        let recv = buffer(args, 2, "recv", root)?.filter(|_| root);
        if let Some(recv) = &recv {
            builtins::sized(WHAT, recv, "recv", &part.1, leaders.size)?;
        }
        Ok((part, recv))
    })();
    let digest = match &prepared {
        Ok(((_, part), recv)) => Digest::new(WHAT, 0, Some(*part), *recv),
        Err(_) => Digest::new(WHAT, 0, None, None).failed(),
    };
    let posts = meshes.kept(exchange(leaders, &digest));
    let across = prepared.and_then(|((_part, buf), recv)| {
        agree(&posts?, 0, true, false)?;
        let out = recv.map_or(std::ptr::null_mut(), |r| r.addr as *mut u8);
        // SAFETY: the node's part holds `nbytes`; the root's `recv` that many for every node
        // (checked above), and elsewhere it is not written.
        meshes.kept(unsafe { leaders.gather(buf.addr as *const u8, out, buf.nbytes, 0) })
    });
    confirmed_by_the_node(local, WHAT, across)
}

/// On a node's first worker, after its node failed `what` (its workers know): tells the other
/// leaders, which fail it too.
fn failed_in_node(meshes: &Meshes, leaders: &Mesh, what: &str, error: Error) -> Result<()> {
    let _ = meshes.kept(exchange(
        leaders,
        &Digest::new(what, 0, None, None).failed(),
    ));
    Err(error)
}

/// The node's last meeting when nothing comes back to it: a barrier, which its first worker
/// fails when the collective failed after the node met.
fn confirmed_by_the_node(local: &Local, what: &'static str, leading: Result<()>) -> Result<()> {
    match (&local.leaders, leading) {
        (Some(_), Err(error)) => {
            builtins::fail_next(local.info, &local.ccl, what, &error);
            Err(error)
        }
        _ => meet(local, builtins::barrier, &[]),
    }
}

fn scatter(meshes: &Meshes, local: &Local, args: &[AnyView<'_>]) -> Result<()> {
    const WHAT: &str = "scatter_from_worker0";
    let Some(leaders) = &local.leaders else {
        return meet(local, builtins::scatter, args);
    };
    let root = leaders.rank == 0;
    let across = (|| {
        let send = buffer(args, 0, "send", root)?.filter(|_| root);
        let recv = buffer(args, 2, "recv", true)?.expect("required");
        let count = recv.shape().iter().product::<i64>() as usize;
        let part = node_part(count * local.info.num_workers, recv.dtype)?;
        let nbytes = recv.nbytes * local.info.num_workers;
        if let Some(send) = &send {
            builtins::sized(WHAT, send, "send", &recv, meshes.info.num_workers)?;
        }
        let digest = Digest::new(WHAT, 0, send, Some(recv));
        let posts = meshes.kept(exchange(leaders, &digest))?;
        agree(&posts, 0, false, true)?;
        let input = send.map_or(std::ptr::null(), |s| s.addr as *const u8);
        // SAFETY: the root's `send` holds `nbytes` for every node, the node's part `nbytes`
        // (checked above); only this collective touches them.
        meshes.kept(unsafe { leaders.scatter(input, part.data_ptr(), nbytes, 0) })?;
        Ok(part)
    })();
    match across {
        Ok(part) => {
            let values = [Any::from(part), Any::Bool(false), args[2].to_owned()?];
            meet(local, builtins::scatter, &views(&values))
        }
        Err(error) => {
            builtins::fail_next(local.info, &local.ccl, WHAT, &error);
            Err(error)
        }
    }
}
