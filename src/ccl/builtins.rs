//! The collective built-ins, under Disco's names and with its arguments
//! (`runtime.disco.allreduce(send, Shape([kind]), in_group, recv)`, ...), running on the
//! communicator `init_ccl` gave this worker.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, Once, PoisonError};

use super::reduce::{Buffers, Elem, ReduceOp, reduce};
use super::{Buf, CpuCcl, Post, Posts, Team};
use crate::abi::KDL_CPU;
use crate::object::args::{argument, arity, is_none};
use crate::object::{Any, AnyView, Error, Function, Result, registry};
use crate::worker::WorkerInfo;
use crate::worker::builtins::on_worker;

thread_local! {
    /// The communicator of the worker running on this thread.
    static CCL: RefCell<Option<Arc<CpuCcl>>> = const { RefCell::new(None) };
}

/// Communicators on their way to the workers, by the number `init_ccl` passes them.
static STAGED: Mutex<Option<HashMap<i64, Arc<CpuCcl>>>> = Mutex::new(None);
static NEXT_STAGE: AtomicI64 = AtomicI64::new(1);

/// Makes `ccl` available to `init_ccl_per_worker` under the number returned.
pub fn stage(ccl: Arc<CpuCcl>) -> i64 {
    let id = NEXT_STAGE.fetch_add(1, Ordering::Relaxed);
    STAGED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_or_insert_with(HashMap::new)
        .insert(id, ccl);
    id
}

/// The communicator staged under `id`.
pub(super) fn staged(id: i64) -> Result<Arc<CpuCcl>> {
    STAGED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .and_then(|m| m.get(&id).cloned())
        .ok_or_else(|| Error::value(format!("no communicator is staged under {id}")))
}

/// Forgets a staged communicator (the workers keep theirs).
pub fn unstage(id: i64) {
    if let Some(map) = STAGED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_mut()
    {
        map.remove(&id);
    }
}

/// A tensor argument as a buffer, once the work queued on it on any stream has finished; None
/// when it is absent or None and `required` is false.
pub(super) fn buffer(
    args: &[AnyView<'_>],
    i: usize,
    what: &str,
    required: bool,
) -> Result<Option<Buf>> {
    if is_none(args, i) {
        if required {
            return Err(Error::type_error(format!(
                "argument {i} ({what}): a tensor is required, got None"
            )));
        }
        return Ok(None);
    }
    argument(i, what, || {
        let tensor = args[i].as_tensor()?;
        let dl = tensor.dl();
        if dl.device.device_type != KDL_CPU {
            return Err(Error::value(
                "the CPU collectives need tensors in host memory (kDLCPU)",
            ));
        }
        if !tensor.is_contiguous() {
            return Err(Error::value("the tensor is not contiguous"));
        }
        if tensor.is_read_only() && what != "send" {
            return Err(Error::value("the tensor is read-only"));
        }
        let elem = Elem::of(dl.dtype)?;
        // The collective reads and writes the memory directly: first let the work that
        // streams have queued on the tensor finish (a copy still filling it, say).
        crate::vm::settle(&tensor)?;
        let addr = tensor.data_ptr() as usize;
        if !addr.is_multiple_of(elem.size()) {
            return Err(Error::value(format!(
                "the data address {addr:#x} is not aligned to its {}-byte elements",
                elem.size()
            )));
        }
        Buf::of(&tensor).map(Some)
    })
}

pub(super) fn in_group(args: &[AnyView<'_>], i: usize) -> Result<bool> {
    argument(i, "in_group", || args[i].as_bool())
}

/// Disco's reduction argument, `Shape([kind])`.
pub(super) fn reduce_kind(args: &[AnyView<'_>], i: usize) -> Result<ReduceOp> {
    argument(i, "kind", || {
        let shape = args[i].as_shape()?;
        match shape.as_slice() {
            [kind] => ReduceOp::from_code(*kind),
            other => Err(Error::value(format!(
                "expected Shape([kind]) with one entry, got {other:?}"
            ))),
        }
    })
}

/// Disco's argument counts.
pub(super) fn arity_of(name: &str, args: &[AnyView<'_>]) -> Result<()> {
    let (min, max) = match name {
        "runtime.disco.allreduce" => (4, 4),
        "runtime.disco.allgather"
        | "runtime.disco.broadcast_from_worker0"
        | "runtime.disco.scatter_from_worker0" => (3, 3),
        "runtime.disco.gather_to_worker0" => (2, 3),
        "runtime.disco.send_to_worker" | "runtime.disco.recv_from_worker" => (2, 2),
        "runtime.disco.barrier" => (0, 1),
        _ => (1, 1),
    };
    arity(name, args, min, max)
}

/// Joins this worker's next session-wide collective `what` with a post that says it failed
/// with `error`, so the others fail with it (the leader of a node tells its workers so).
pub(super) fn fail_next(info: WorkerInfo, ccl: &CpuCcl, what: &'static str, error: &Error) {
    let (team, rank) = ccl.team(info.id, false);
    let _ = joined::<()>(ccl, team, rank, what, Err(error.clone()));
}

/// Every participant called the same collective with the same parameter.
fn same_call(team: &Team, posts: &Posts) -> Result<()> {
    let first = &posts[0];
    for (rank, post) in posts.iter().enumerate().skip(1) {
        if post.what != first.what {
            return Err(Error::value(format!(
                "worker {} called `{}` while worker {} called `{}`",
                team.members[rank], post.what, team.members[0], first.what
            )));
        }
        if post.param != first.param {
            return Err(Error::value(format!(
                "{}: worker {} passed {} while worker {} passed {}",
                first.what, team.members[rank], post.param, team.members[0], first.param
            )));
        }
    }
    Ok(())
}

/// The worker running on this thread, with its communicator, for built-in `name`.
fn with_ccl<T>(name: &str, body: impl FnOnce(WorkerInfo, &CpuCcl) -> Result<T>) -> Result<T> {
    let info = on_worker(name)?;
    CCL.with(|c| match &*c.borrow() {
        Some(ccl) => body(info, ccl),
        None => Err(Error::runtime(format!(
            "`{name}` needs a communicator: call init_ccl on the session first"
        ))),
    })
}

/// Passes through what the arguments that say whom to meet (`in_group`, a peer) gave; when
/// they are wrong, the others cannot know that this worker will not join them, so the
/// communicator breaks and they fail at once.
fn whom<T>(ccl: &CpuCcl, info: WorkerInfo, what: &str, found: Result<T>) -> Result<T> {
    found.map_err(|e| {
        ccl.abort(&Error::value(format!(
            "{what}: worker {} could not tell whom to meet ({}: {}); the communicator is \
             now broken (call init_ccl again)",
            info.id,
            e.kind.name(),
            e.message
        )));
        Error::new(
            e.kind,
            format!(
                "{} (the communicator is now broken: call init_ccl again)",
                e.message
            ),
        )
    })
}

/// This worker's team and rank in it for `in_group` (`grouped`), through [`whom`].
fn team_of<'c>(
    ccl: &'c CpuCcl,
    info: WorkerInfo,
    what: &str,
    grouped: Result<bool>,
) -> Result<(&'c Arc<Team>, usize)> {
    Ok(ccl.team(info.id, whom(ccl, info, what, grouped)?))
}

/// Passes `result` through; when it is an error, first joins the collective with a post that
/// says so, so the other participants fail at once instead of waiting for this one.
fn joined<T>(
    ccl: &CpuCcl,
    team: &Arc<Team>,
    rank: usize,
    what: &'static str,
    result: Result<T>,
) -> Result<T> {
    if let Err(error) = &result {
        let post = Post::failed(what, format!("{}: {}", error.kind.name(), error.message));
        let _ = ccl.run(team, rank, post, true, |_| Ok(()), |_| {});
    }
    result
}

fn send_of(post: &Post) -> &Buf {
    post.send.as_ref().expect("checked")
}

fn recv_of(post: &Post) -> &Buf {
    post.recv.as_ref().expect("checked")
}

/// Every participant's `pick` buffer has the same shape and dtype.
fn same_buffers(
    team: &Team,
    posts: &Posts,
    role: &str,
    pick: impl Fn(&Post) -> &Buf,
) -> Result<()> {
    let first = pick(&posts[0]);
    for (rank, post) in posts.iter().enumerate().skip(1) {
        let buf = pick(post);
        if buf.shape() != first.shape() || buf.dtype != first.dtype {
            return Err(Error::value(format!(
                "{}: worker {} passed a {role} buffer of {} but worker {} passed {}",
                post.what,
                team.members[rank],
                buf.describe(),
                team.members[0],
                first.describe()
            )));
        }
    }
    Ok(())
}

/// Every participant called the same collective with the same parameter, and passed send and
/// recv buffers of the same shapes and dtype, the recv buffers holding `times` the elements of
/// the send buffers (`what` names the collective).
fn same_send_recv(team: &Team, posts: &Posts, what: &str, times: usize) -> Result<()> {
    same_call(team, posts)?;
    same_buffers(team, posts, "send", send_of)?;
    same_buffers(team, posts, "recv", recv_of)?;
    sized(what, recv_of(&posts[0]), "recv", send_of(&posts[0]), times)
}

/// `bytes` of one buffer must be `times` those of another, with the same dtype.
pub(super) fn sized(
    what: &str,
    big: &Buf,
    big_role: &str,
    small: &Buf,
    times: usize,
) -> Result<()> {
    if big.dtype != small.dtype || big.nbytes != small.nbytes * times {
        let times = if times == 1 {
            String::new()
        } else {
            format!("{times} times ")
        };
        return Err(Error::value(format!(
            "{what}: the {big_role} buffer ({}) must hold {times}the elements of the other ({}), \
             with the same dtype",
            big.describe(),
            small.describe()
        )));
    }
    Ok(())
}

/// The buffers of collective `what` from a root: `send` (argument 0), the root's alone, and
/// `recv` (argument 2). The root's `send` holds `parts` recv-sized parts (a scatter), or for
/// `None` as many elements as `recv` (a broadcast).
pub(super) fn root_send(
    args: &[AnyView<'_>],
    what: &str,
    root: bool,
    parts: Option<usize>,
) -> Result<(Option<Buf>, Buf)> {
    let send = buffer(args, 0, "send", root)?.filter(|_| root);
    let recv = buffer(args, 2, "recv", true)?.expect("required");
    if let Some(send) = &send {
        root_sized(what, send, &recv, parts)?;
    }
    Ok((send, recv))
}

/// The root's `send` buffer of collective `what` holds `parts` parts the size of `recv` (a
/// scatter), or for `None` as many elements as `recv` (a broadcast).
fn root_sized(what: &str, send: &Buf, recv: &Buf, parts: Option<usize>) -> Result<()> {
    match parts {
        Some(n) => sized(what, send, "send", recv, n),
        None => sized(what, recv, "recv", send, 1),
    }
}

/// Copies `len` bytes between buffers (of different participants, or of one).
pub(super) fn copy(from: usize, to: usize, len: usize) {
    if from == to || len == 0 {
        return;
    }
    // SAFETY: both ranges lie inside tensors (or staged copies) their owners hold for the
    // whole collective; the collective's layout gives each destination range to exactly one
    // writer and no reader during the copy.
    unsafe { std::ptr::copy(from as *const u8, to as *mut u8, len) };
}

pub(super) fn allreduce(info: WorkerInfo, ccl: &CpuCcl, args: &[AnyView<'_>]) -> Result<Any> {
    const NAME: &str = "runtime.disco.allreduce";
    const WHAT: &str = "allreduce";
    let grouped = arity(NAME, args, 4, 4).and_then(|()| in_group(args, 2));
    let (team, rank) = team_of(ccl, info, WHAT, grouped)?;
    let join = |r| joined(ccl, team, rank, WHAT, r);
    let send = join(buffer(args, 0, "send", true))?.expect("required");
    let kind = joined(ccl, team, rank, WHAT, reduce_kind(args, 1))?;
    let recv = join(buffer(args, 3, "recv", true))?;
    let elem = Elem::of(send.dtype).expect("checked by `buffer`");
    let staged = team.staged(send.nbytes);
    let post = Post::new(WHAT, kind as i64, Some(send), recv);
    let check = |posts: &Posts| same_send_recv(team, posts, WHAT, 1);
    ccl.run(team, rank, post, staged, check, |posts| {
        let n = posts.len();
        let count = send_of(&posts[0]).nbytes / elem.size();
        let inputs: Vec<usize> = posts.iter().map(|p| send_of(p).addr).collect();
        let (outputs, lo, hi): (Vec<usize>, _, _) = if posts.staged() {
            // Everyone reduces the whole of the staged copies into its own output.
            (vec![recv_of(&posts[rank]).addr], 0, count)
        } else {
            let outputs = posts.iter().map(|p| recv_of(p).addr).collect();
            (outputs, rank * count / n, (rank + 1) * count / n)
        };
        let buffers = Buffers {
            inputs: &inputs,
            outputs: &outputs,
        };
        // SAFETY: every buffer holds `count` aligned elements of `elem` (checked above) and
        // stays alive until everyone is done with it; this participant alone writes
        // elements `lo..hi` of the outputs, which nobody else reads meanwhile.
        unsafe { reduce(elem, kind, &buffers, lo, hi) };
    })?;
    Ok(Any::None)
}

pub(super) fn allgather(info: WorkerInfo, ccl: &CpuCcl, args: &[AnyView<'_>]) -> Result<Any> {
    const NAME: &str = "runtime.disco.allgather";
    const WHAT: &str = "allgather";
    let grouped = arity(NAME, args, 3, 3).and_then(|()| in_group(args, 1));
    let (team, rank) = team_of(ccl, info, WHAT, grouped)?;
    let join = |r| joined(ccl, team, rank, WHAT, r);
    let send = join(buffer(args, 0, "send", true))?.expect("required");
    let recv = join(buffer(args, 2, "recv", true))?;
    let staged = team.staged(send.nbytes);
    let post = Post::new(WHAT, 0, Some(send), recv);
    let check = |posts: &Posts| same_send_recv(team, posts, WHAT, posts.len());
    ccl.run(team, rank, post, staged, check, |posts| {
        let mine = recv_of(&posts[rank]).addr;
        let size = send_of(&posts[0]).nbytes;
        for (j, post) in posts.iter().enumerate() {
            copy(send_of(post).addr, mine + j * size, size);
        }
    })?;
    Ok(Any::None)
}

/// Who a root-based collective's root is in this team (rank 0: worker 0 or the group leader).
fn root_checks(
    team: &Team,
    posts: &Posts,
    what: &str,
    root_role: &str,
    root_has: fn(&Post) -> bool,
) -> Result<()> {
    same_call(team, posts)?;
    if !root_has(&posts[0]) {
        return Err(Error::value(format!(
            "{what}: worker {} is the root and must pass a {root_role} tensor",
            team.members[0]
        )));
    }
    Ok(())
}

/// Worker 0 of the team sends: the whole `send` buffer to everyone (`split` false: broadcast)
/// or one `recv`-sized part of it to each worker in rank order (`split` true: scatter).
fn from_worker0(
    info: WorkerInfo,
    ccl: &CpuCcl,
    args: &[AnyView<'_>],
    name: &str,
    what: &'static str,
    split: bool,
) -> Result<Any> {
    let grouped = arity(name, args, 3, 3).and_then(|()| in_group(args, 1));
    let (team, rank) = team_of(ccl, info, what, grouped)?;
    let join = |r| joined(ccl, team, rank, what, r);
    let send = join(buffer(args, 0, "send", rank == 0))?;
    let recv = join(buffer(args, 2, "recv", true))?.expect("required");
    let staged = team.staged(recv.nbytes);
    let send = if rank == 0 { send } else { None };
    let post = Post::new(what, 0, send, Some(recv));
    let check = |posts: &Posts| {
        root_checks(team, posts, what, "send", |p| p.send.is_some())?;
        same_buffers(team, posts, "recv", recv_of)?;
        let parts = split.then_some(posts.len());
        root_sized(what, send_of(&posts[0]), recv_of(&posts[0]), parts)
    };
    ccl.run(team, rank, post, staged, check, |posts| {
        let size = recv_of(&posts[rank]).nbytes;
        let offset = if split { rank * size } else { 0 };
        copy(
            send_of(&posts[0]).addr + offset,
            recv_of(&posts[rank]).addr,
            size,
        );
    })?;
    Ok(Any::None)
}

pub(super) fn broadcast(info: WorkerInfo, ccl: &CpuCcl, args: &[AnyView<'_>]) -> Result<Any> {
    from_worker0(
        info,
        ccl,
        args,
        "runtime.disco.broadcast_from_worker0",
        "broadcast_from_worker0",
        false,
    )
}

pub(super) fn scatter(info: WorkerInfo, ccl: &CpuCcl, args: &[AnyView<'_>]) -> Result<Any> {
    from_worker0(
        info,
        ccl,
        args,
        "runtime.disco.scatter_from_worker0",
        "scatter_from_worker0",
        true,
    )
}

pub(super) fn gather(info: WorkerInfo, ccl: &CpuCcl, args: &[AnyView<'_>]) -> Result<Any> {
    gather_as("gather_to_worker0", info, ccl, args)
}

/// `runtime.disco.gather_to_worker0`, posted as collective `what`: a hierarchical allgather
/// gathers its node's parts so, and meets only workers that called an allgather too.
pub(super) fn gather_as(
    what: &'static str,
    info: WorkerInfo,
    ccl: &CpuCcl,
    args: &[AnyView<'_>],
) -> Result<Any> {
    const NAME: &str = "runtime.disco.gather_to_worker0";
    let grouped = arity(NAME, args, 2, 3).and_then(|()| in_group(args, 1));
    let (team, rank) = team_of(ccl, info, what, grouped)?;
    let join = |r| joined(ccl, team, rank, what, r);
    let send = join(buffer(args, 0, "send", true))?.expect("required");
    let recv = join(buffer(args, 2, "recv", rank == 0))?;
    let staged = team.staged(send.nbytes);
    let recv = if rank == 0 { recv } else { None };
    let post = Post::new(what, 0, Some(send), recv);
    let check = |posts: &Posts| {
        root_checks(team, posts, what, "recv", |p| p.recv.is_some())?;
        same_buffers(team, posts, "send", send_of)?;
        let n = posts.len();
        sized(what, recv_of(&posts[0]), "recv", send_of(&posts[0]), n)
    };
    ccl.run(team, rank, post, staged, check, |posts| {
        // The root collects the staged copies; large sends go in by their owners at once.
        let size = send_of(&posts[rank]).nbytes;
        let root = recv_of(&posts[0]).addr;
        let place = |r: usize| copy(send_of(&posts[r]).addr, root + r * size, size);
        match (posts.staged(), rank) {
            (true, 0) => (0..posts.len()).for_each(place),
            (true, _) => {}
            (false, _) => place(rank),
        }
    })?;
    Ok(Any::None)
}

pub(super) fn barrier(info: WorkerInfo, ccl: &CpuCcl, args: &[AnyView<'_>]) -> Result<Any> {
    const NAME: &str = "runtime.disco.barrier";
    const WHAT: &str = "barrier";
    let grouped = arity(NAME, args, 0, 1).and_then(|()| {
        if is_none(args, 0) {
            Ok(false)
        } else {
            in_group(args, 0)
        }
    });
    let (team, rank) = team_of(ccl, info, WHAT, grouped)?;
    let post = Post::new(WHAT, 0, None, None);
    ccl.run(
        team,
        rank,
        post,
        true,
        |posts| same_call(team, posts),
        |_| {},
    )?;
    Ok(Any::None)
}

/// This worker's side of a transfer of the buffer argument 0 with worker `other` (ids as
/// `info` and `ccl` number the workers), to it when `sending`, else from it.
pub(super) fn transfer(
    args: &[AnyView<'_>],
    what: &'static str,
    info: WorkerInfo,
    ccl: &CpuCcl,
    other: usize,
    sending: bool,
) -> Result<()> {
    let (from, to) = if sending {
        (info.id, other)
    } else {
        (other, info.id)
    };
    let team = ccl.pair(from, to);
    let rank = usize::from(!sending);
    let buf = buffer(args, 0, if sending { "send" } else { "recv" }, true);
    let buf = joined(ccl, &team, rank, what, buf)?.expect("required");
    let staged = team.staged(buf.nbytes);
    let post = if sending {
        Post::new(what, 0, Some(buf), None)
    } else {
        Post::new(what, 0, None, Some(buf))
    };
    let check = |posts: &Posts| {
        let (s, r) = (send_of(&posts[0]), recv_of(&posts[1]));
        if s.shape() != r.shape() || s.dtype != r.dtype {
            return Err(Error::value(format!(
                "worker {from} sent {} ({}) but worker {to} receives {} ({})",
                s.describe(),
                posts[0].what,
                r.describe(),
                posts[1].what
            )));
        }
        Ok(())
    };
    ccl.run(&team, rank, post, staged, check, |posts| {
        if !sending {
            let recv = recv_of(&posts[1]);
            copy(send_of(&posts[0]).addr, recv.addr, recv.nbytes);
        }
    })
}

fn peer(args: &[AnyView<'_>], i: usize, info: &WorkerInfo) -> Result<usize> {
    let peer = argument(i, "peer", || args[i].as_i64())?;
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

/// The transfer built-ins.
pub(super) const TRANSFERS: [&str; 5] = [
    "runtime.disco.send_to_worker",
    "runtime.disco.recv_from_worker",
    "runtime.disco.recv_from_worker0",
    "runtime.disco.send_to_next_group",
    "runtime.disco.recv_from_prev_group",
];

/// The other end of transfer built-in `name` (`runtime.disco.send_to_worker`, ...) on worker
/// `info`, and whether this worker sends; `None` when `name` is no transfer. The error says
/// why the call names no other worker.
pub(super) fn transfer_peer(
    name: &str,
    args: &[AnyView<'_>],
    info: &WorkerInfo,
) -> Option<Result<(usize, bool)>> {
    let found = match name {
        "runtime.disco.send_to_worker" => peer(args, 1, info).map(|to| (to, true)),
        "runtime.disco.recv_from_worker" => peer(args, 1, info).map(|from| (from, false)),
        "runtime.disco.recv_from_worker0" if info.id == 0 => Err(Error::value(
            "worker 0 cannot receive from itself (recv_from_worker0 runs on the other workers)",
        )),
        "runtime.disco.recv_from_worker0" => Ok((0, false)),
        "runtime.disco.send_to_next_group" => {
            let to = info.id + info.workers_per_group();
            if to < info.num_workers {
                Ok((to, true))
            } else {
                Err(Error::value(format!(
                    "worker {} is in the last group: there is no next group to send to",
                    info.id
                )))
            }
        }
        "runtime.disco.recv_from_prev_group" => match info.id.checked_sub(info.workers_per_group())
        {
            Some(from) => Ok((from, false)),
            None => Err(Error::value(format!(
                "worker {} is in the first group: there is no previous group to receive from",
                info.id
            ))),
        },
        _ => return None,
    };
    Some(found)
}

/// Transfer built-in `name` on this worker's communicator.
fn transfer_built_in(
    name: &'static str,
    info: WorkerInfo,
    ccl: &CpuCcl,
    args: &[AnyView<'_>],
) -> Result<Any> {
    let what = name.strip_prefix("runtime.disco.").unwrap_or(name);
    let found = arity_of(name, args)
        .and_then(|()| transfer_peer(name, args, &info).expect("a transfer built-in"));
    let (other, sending) = whom(ccl, info, what, found)?;
    transfer(args, what, info, ccl, other, sending)?;
    Ok(Any::None)
}

/// `runtime.disco.cpu.init_ccl_per_worker(stage)`: installs the staged communicator on this
/// worker (`Session::init_ccl` calls it on every worker).
fn init_per_worker(args: &[AnyView<'_>]) -> Result<Any> {
    const NAME: &str = "runtime.disco.cpu.init_ccl_per_worker";
    arity(NAME, args, 1, 1)?;
    on_worker(NAME)?;
    let id = argument(0, "stage", || args[0].as_i64())?;
    let ccl = staged(id)?;
    CCL.with(|c| *c.borrow_mut() = Some(ccl));
    Ok(Any::None)
}

/// `runtime.disco.cpu.init_ccl_in_arena(area, timeout_ms, spin_us)`: installs on this worker
/// process the communicator the controller laid out in communicator area `area` of the
/// session's arena, waiting at most `timeout_ms` (none if negative) for the others to join a
/// collective and spinning `spin_us` before parking (`Session::init_ccl` calls it on every
/// worker of a process session).
#[cfg(not(loom))]
fn init_in_arena(args: &[AnyView<'_>]) -> Result<Any> {
    const NAME: &str = "runtime.disco.cpu.init_ccl_in_arena";
    arity(NAME, args, 3, 3)?;
    let info = on_worker(NAME)?;
    let number = |i: usize, what: &str| {
        argument(i, what, || {
            let n = args[i].as_i64()?;
            Ok(u64::try_from(n).ok())
        })
    };
    let area = number(0, "area")?
        .ok_or_else(|| Error::index("argument 0 (area): a communicator area is not negative"))?;
    let timeout = number(1, "timeout_ms")?.map(std::time::Duration::from_millis);
    let spin = crate::channel::SpinPolicy {
        budget: std::time::Duration::from_micros(number(2, "spin_us")?.unwrap_or(0)),
    };
    let ccl = super::in_this_arena(area as usize, info.num_groups, timeout, spin)?;
    CCL.with(|c| *c.borrow_mut() = Some(Arc::new(ccl)));
    Ok(Any::None)
}

/// The body of a collective built-in, on this worker's communicator.
pub(super) type Collective = fn(WorkerInfo, &CpuCcl, &[AnyView<'_>]) -> Result<Any>;

/// The collective built-ins but the transfers ([`TRANSFERS`]), by name.
const COLLECTIVES: [(&str, Collective); 6] = [
    ("runtime.disco.allreduce", allreduce),
    ("runtime.disco.allgather", allgather),
    ("runtime.disco.broadcast_from_worker0", broadcast),
    ("runtime.disco.scatter_from_worker0", scatter),
    ("runtime.disco.gather_to_worker0", gather),
    ("runtime.disco.barrier", barrier),
];

/// The collective built-in `name` (not a transfer).
pub(super) fn by_name(name: &str) -> Option<Collective> {
    COLLECTIVES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, body)| body)
}

/// A built-in as registered.
type Builtin = Box<dyn Fn(&[AnyView<'_>]) -> Result<Any> + Send + Sync>;

/// Registers the CPU collective built-ins once per process.
pub(super) fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let collectives = COLLECTIVES.into_iter().map(|(name, body)| {
            let on_ccl: Builtin =
                Box::new(move |args| with_ccl(name, |info, ccl| body(info, ccl, args)));
            (name, on_ccl)
        });
        let transfers = TRANSFERS.into_iter().map(|name| {
            let on_ccl: Builtin = Box::new(move |args| {
                with_ccl(name, |info, ccl| transfer_built_in(name, info, ccl, args))
            });
            (name, on_ccl)
        });
        let mut all: Vec<(&str, Builtin)> = collectives.chain(transfers).collect();
        all.push((
            "runtime.disco.cpu.init_ccl_per_worker",
            Box::new(init_per_worker),
        ));
        #[cfg(not(loom))]
        all.push((
            "runtime.disco.cpu.init_ccl_in_arena",
            Box::new(init_in_arena),
        ));
        for (name, body) in all {
            // A worker with NCCL or Gloo communicators runs that version of the built-in.
            let dispatched = move |args: &[AnyView<'_>]| {
                let found = super::nccl::dispatch(name, args);
                #[cfg(not(loom))]
                let found = found.or_else(|| super::gloo::dispatch(name, args));
                found.unwrap_or_else(|| body(args))
            };
            registry::register_global(name, Function::from_closure(dispatched), true)
                .expect("built-in names are valid");
        }
    });
}
