//! The CPU backend: the collectives on a CPU communicator, with Disco's arguments, and how a
//! worker takes the communicator `init_ccl` made for it.
//!
//! The one idea: each collective is a post of this worker's buffers, a check of everyone's
//! posts (the same verdict on every participant), and the work each participant does on the
//! others' memory directly (see `communicator`); a worker whose own arguments are wrong still
//! joins, with a post that says so, so that the others fail at once instead of waiting.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, Once, PoisonError};

use super::args::{buffer, root_sized, sized};
use super::backend::{self, Backend};
use super::board::Buf;
use super::collective::{Arg, Collective, Transfer};
use super::communicator::{CpuCcl, Post, Posts, Team};
use super::reduce::{Buffers, Elem, reduce};
#[cfg(not(loom))]
use crate::channel::deadline::timeout_from_signed_ms;
use crate::object::args::{argument, arity};
use crate::object::{Any, AnyView, Error, Function, Result, registry};
use crate::worker::WorkerInfo;
use crate::worker::builtins::on_worker;

/// A worker's place in a CPU communicator: the worker as the communicator numbers it, and the
/// communicator.
#[derive(Clone)]
pub(super) struct Member {
    pub info: WorkerInfo,
    pub ccl: Arc<CpuCcl>,
}

impl Backend for Member {
    fn run(&self, collective: Collective, args: &[AnyView<'_>]) -> Result<()> {
        let (info, ccl) = (self.info, &*self.ccl);
        match collective {
            Collective::Allreduce => allreduce(info, ccl, args),
            Collective::Allgather => allgather(info, ccl, args),
            Collective::Broadcast | Collective::Scatter => {
                from_worker0(info, ccl, args, collective)
            }
            Collective::Gather => gather_as(collective, self, args),
            Collective::Barrier => barrier(info, ccl, args),
            Collective::Transfer(transfer) => transfer_built_in(transfer, info, ccl, args),
        }
    }
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

/// Joins this worker's next session-wide collective `what` with a post that says it failed
/// with `error`, so the others fail with it (the leader of a node tells its workers so).
pub(super) fn fail_next(member: &Member, what: Collective, error: &Error) {
    let (team, rank) = member.ccl.team(member.info.id, false);
    let _ = joined::<()>(&member.ccl, team, rank, what, Err(error.clone()));
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

/// Passes through what the arguments that say whom to meet (`in_group`, a peer) gave; when
/// they are wrong, the others cannot know that this worker will not join them, so the
/// communicator breaks and they fail at once.
fn whom<T>(ccl: &CpuCcl, info: WorkerInfo, what: Collective, found: Result<T>) -> Result<T> {
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

/// This worker's team and rank in it for a call of `what`, whose arity and `in_group` gave
/// `grouped`, through [`whom`].
fn team_of(
    ccl: &CpuCcl,
    info: WorkerInfo,
    what: Collective,
    grouped: Result<bool>,
) -> Result<(&Arc<Team>, usize)> {
    Ok(ccl.team(info.id, whom(ccl, info, what, grouped)?))
}

/// The team of a call of `collective`: its arity and its `in_group` argument, through
/// [`team_of`].
fn team_for<'c>(
    ccl: &'c CpuCcl,
    info: WorkerInfo,
    collective: Collective,
    args: &[AnyView<'_>],
) -> Result<(&'c Arc<Team>, usize)> {
    let grouped = collective
        .check_arity(args)
        .and_then(|()| collective.in_group(args));
    team_of(ccl, info, collective, grouped)
}

/// Passes `result` through; when it is an error, first joins the collective with a post that
/// says so, so the other participants fail at once instead of waiting for this one.
fn joined<T>(
    ccl: &CpuCcl,
    team: &Arc<Team>,
    rank: usize,
    what: Collective,
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
fn same_buffers(team: &Team, posts: &Posts, role: Arg, pick: impl Fn(&Post) -> &Buf) -> Result<()> {
    let first = pick(&posts[0]);
    for (rank, post) in posts.iter().enumerate().skip(1) {
        let buf = pick(post);
        if buf.shape() != first.shape() || buf.dtype != first.dtype {
            return Err(Error::value(format!(
                "{}: worker {} passed a {} buffer of {} but worker {} passed {}",
                post.what,
                team.members[rank],
                role.name(),
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
/// the send buffers.
fn same_send_recv(team: &Team, posts: &Posts, what: Collective, times: usize) -> Result<()> {
    same_call(team, posts)?;
    same_buffers(team, posts, Arg::Send, send_of)?;
    same_buffers(team, posts, Arg::Recv, recv_of)?;
    sized(
        what,
        recv_of(&posts[0]),
        Arg::Recv,
        send_of(&posts[0]),
        times,
    )
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

fn allreduce(info: WorkerInfo, ccl: &CpuCcl, args: &[AnyView<'_>]) -> Result<()> {
    const WHAT: Collective = Collective::Allreduce;
    let (team, rank) = team_for(ccl, info, WHAT, args)?;
    let join = |r| joined(ccl, team, rank, WHAT, r);
    let send = join(buffer(args, WHAT, Arg::Send, true))?.expect("required");
    let kind = joined(ccl, team, rank, WHAT, WHAT.kind(args))?;
    let recv = join(buffer(args, WHAT, Arg::Recv, true))?;
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
    })
}

fn allgather(info: WorkerInfo, ccl: &CpuCcl, args: &[AnyView<'_>]) -> Result<()> {
    const WHAT: Collective = Collective::Allgather;
    let (team, rank) = team_for(ccl, info, WHAT, args)?;
    let join = |r| joined(ccl, team, rank, WHAT, r);
    let send = join(buffer(args, WHAT, Arg::Send, true))?.expect("required");
    let recv = join(buffer(args, WHAT, Arg::Recv, true))?;
    let staged = team.staged(send.nbytes);
    let post = Post::new(WHAT, 0, Some(send), recv);
    let check = |posts: &Posts| same_send_recv(team, posts, WHAT, posts.len());
    ccl.run(team, rank, post, staged, check, |posts| {
        let mine = recv_of(&posts[rank]).addr;
        let size = send_of(&posts[0]).nbytes;
        for (j, post) in posts.iter().enumerate() {
            copy(send_of(post).addr, mine + j * size, size);
        }
    })
}

/// Who a root-based collective's root is in this team (rank 0: worker 0 or the group leader).
fn root_checks(
    team: &Team,
    posts: &Posts,
    what: Collective,
    root_role: Arg,
    root_has: fn(&Post) -> bool,
) -> Result<()> {
    same_call(team, posts)?;
    if !root_has(&posts[0]) {
        return Err(Error::value(format!(
            "{what}: worker {} is the root and must pass a {} tensor",
            team.members[0],
            root_role.name()
        )));
    }
    Ok(())
}

/// Worker 0 of the team sends: the whole `send` buffer to everyone (a broadcast) or one
/// `recv`-sized part of it to each worker in rank order (a scatter).
fn from_worker0(
    info: WorkerInfo,
    ccl: &CpuCcl,
    args: &[AnyView<'_>],
    what: Collective,
) -> Result<()> {
    let split = what == Collective::Scatter;
    let (team, rank) = team_for(ccl, info, what, args)?;
    let join = |r| joined(ccl, team, rank, what, r);
    let send = join(buffer(args, what, Arg::Send, rank == 0))?;
    let recv = join(buffer(args, what, Arg::Recv, true))?.expect("required");
    let staged = team.staged(recv.nbytes);
    let send = if rank == 0 { send } else { None };
    let post = Post::new(what, 0, send, Some(recv));
    let check = |posts: &Posts| {
        root_checks(team, posts, what, Arg::Send, |p| p.send.is_some())?;
        same_buffers(team, posts, Arg::Recv, recv_of)?;
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
    })
}

/// `runtime.disco.gather_to_worker0` on `member`, posted as collective `what`: a hierarchical
/// allgather gathers its node's parts so, and meets only workers that called an allgather too.
pub(super) fn gather_as(what: Collective, member: &Member, args: &[AnyView<'_>]) -> Result<()> {
    const CALL: Collective = Collective::Gather;
    let (info, ccl) = (member.info, &*member.ccl);
    let grouped = CALL.check_arity(args).and_then(|()| CALL.in_group(args));
    let (team, rank) = team_of(ccl, info, what, grouped)?;
    let join = |r| joined(ccl, team, rank, what, r);
    let send = join(buffer(args, CALL, Arg::Send, true))?.expect("required");
    let recv = join(buffer(args, CALL, Arg::Recv, rank == 0))?;
    let staged = team.staged(send.nbytes);
    let recv = if rank == 0 { recv } else { None };
    let post = Post::new(what, 0, Some(send), recv);
    let check = |posts: &Posts| {
        root_checks(team, posts, what, Arg::Recv, |p| p.recv.is_some())?;
        same_buffers(team, posts, Arg::Send, send_of)?;
        let n = posts.len();
        sized(what, recv_of(&posts[0]), Arg::Recv, send_of(&posts[0]), n)
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
    })
}

fn barrier(info: WorkerInfo, ccl: &CpuCcl, args: &[AnyView<'_>]) -> Result<()> {
    const WHAT: Collective = Collective::Barrier;
    let (team, rank) = team_for(ccl, info, WHAT, args)?;
    let post = Post::new(WHAT, 0, None, None);
    ccl.run(
        team,
        rank,
        post,
        true,
        |posts| same_call(team, posts),
        |_| {},
    )
}

/// This worker's side of `transfer` of its buffer argument with worker `other` (ids as `info`
/// and `ccl` number the workers).
pub(super) fn transfer(
    args: &[AnyView<'_>],
    transfer: Transfer,
    info: WorkerInfo,
    ccl: &CpuCcl,
    other: usize,
) -> Result<()> {
    let what = Collective::Transfer(transfer);
    let sending = transfer.sends();
    let (from, to) = if sending {
        (info.id, other)
    } else {
        (other, info.id)
    };
    let team = ccl.pair(from, to);
    let rank = usize::from(!sending);
    let role = if sending { Arg::Send } else { Arg::Recv };
    let buf = buffer(args, what, role, true);
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

/// Transfer built-in `transfer` on this worker's communicator: the other end its arguments
/// name, through [`whom`].
fn transfer_built_in(
    transfer: Transfer,
    info: WorkerInfo,
    ccl: &CpuCcl,
    args: &[AnyView<'_>],
) -> Result<()> {
    let what = Collective::Transfer(transfer);
    let found = what
        .check_arity(args)
        .and_then(|()| transfer.peer(args, &info));
    let other = whom(ccl, info, what, found)?;
    self::transfer(args, transfer, info, ccl, other)
}

/// `runtime.disco.cpu.init_ccl_per_worker(stage)`: installs the staged communicator on this
/// worker (`Session::init_ccl` calls it on every worker).
fn init_per_worker(args: &[AnyView<'_>]) -> Result<Any> {
    const NAME: &str = "runtime.disco.cpu.init_ccl_per_worker";
    arity(NAME, args, 1, 1)?;
    let info = on_worker(NAME)?;
    let id = argument(0, "stage", || args[0].as_i64())?;
    let ccl = staged(id)?;
    backend::install(Member { info, ccl });
    Ok(Any::None)
}

/// `runtime.disco.cpu.init_ccl_in_arena(area, timeout_ms, spin_us)`: installs on this worker
/// process the communicator the controller laid out in communicator area `area` of the
/// session's arena, waiting at most `timeout_ms` (0: no bound) for the others to join a
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
    let timeout = argument(1, "timeout_ms", || args[1].as_i64())?;
    let timeout = timeout_from_signed_ms(timeout, "argument 1 (timeout_ms)")?;
    let spin = crate::channel::SpinPolicy {
        budget: std::time::Duration::from_micros(number(2, "spin_us")?.unwrap_or(0)),
    };
    let ccl = super::communicator::in_this_arena(area as usize, info.num_groups, timeout, spin)?;
    backend::install(Member {
        info,
        ccl: Arc::new(ccl),
    });
    Ok(Any::None)
}

/// A built-in as registered.
type Builtin = fn(&[AnyView<'_>]) -> Result<Any>;

/// Registers the CPU backend's init built-ins once per process.
pub(super) fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let register = |name: &str, body: Builtin| {
            registry::register_global(name, Function::from_closure(body), true)
                .expect("built-in names are valid");
        };
        register("runtime.disco.cpu.init_ccl_per_worker", init_per_worker);
        #[cfg(not(loom))]
        register("runtime.disco.cpu.init_ccl_in_arena", init_in_arena);
    });
}
