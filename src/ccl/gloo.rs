//! The Gloo backend, for the CPU workers of sessions across machines: every worker is a rank
//! of a Gloo context of the whole session and, with several groups, of one of its group (set up
//! by `rendezvous`); where every node runs several workers, the session is also hierarchical
//! (see `hierarchy`).
//!
//! The one idea: before each collective the team's members exchange what they called and
//! their buffers' shapes (a small allgather), so workers that disagree all fail with an error
//! that names them, as in shared memory, instead of leaving Gloo to wait. Every wait inside Gloo
//! ends at the session's timeout (without one, after [`GLOO_WITHOUT_TIMEOUT`](crate::channel::deadline::GLOO_WITHOUT_TIMEOUT)), and a failed
//! collective leaves the meshes broken until `init_ccl` is called again.

use std::sync::{Arc, OnceLock};

use super::args::{buffer, root_send, sized};
use super::backend::Backend;
use super::board::{Buf, MAX_DIMS};
use super::collective::{Arg, Collective, Transfer, what_of};
use super::cpu::{Member, copy};
use super::hierarchy::Hierarchy;
use super::reduce::{Buffers, Elem, ReduceOp, average, reduce};
use crate::abi::DLDataType;
use crate::device::gloo::Mesh;
use crate::object::{AnyView, Error, Result};
use crate::worker::WorkerInfo;
use crate::worker::activity::{self, Comm};

mod watch;

pub(super) use watch::Watch;

pub(crate) const OPEN: &str = "runtime.disco.gloo.open_per_worker";
pub(crate) const CONNECT: &str = "runtime.disco.gloo.connect_per_worker";

/// Whether every group of a session lies within one node of `per_node` workers, when groups
/// have `per_group` workers, and how many groups each node's workers then form (1 otherwise).
pub(crate) fn node_groups(per_node: usize, per_group: usize) -> (bool, usize) {
    let inside = per_group <= per_node && per_node.is_multiple_of(per_group);
    (inside, if inside { per_node / per_group } else { 1 })
}

/// One worker's Gloo contexts, and its node's shared memory when the session runs
/// hierarchically.
pub(super) struct Meshes {
    pub info: WorkerInfo,
    world: Arc<Mesh>,
    /// The worker's group, when the session has more than one.
    group: Option<Arc<Mesh>>,
    /// The node's workers in shared memory, with the leaders' mesh on each node's first
    /// worker, when the session runs hierarchically (see `hierarchy`).
    pub local: Option<Local>,
    /// Why a collective failed, once one did: later ones fail at once.
    broken: OnceLock<String>,
    /// The watch that ends the worker's Gloo waits the controller rules hopeless (from when
    /// the meshes are connected).
    pub watch: Option<Watch>,
}

/// A worker's part in its node's shared-memory communicator.
pub(super) struct Local {
    /// The worker as the node's communicator knows it (its index on the node, the node's
    /// workers, and the groups among them), and that communicator: in the node's arena (worker
    /// processes), or staged by the controller (its own worker threads).
    pub member: Member,
    /// The session's id of the node's first worker.
    pub first: usize,
    /// Whether every group lies within one node (its collectives stay in shared memory).
    pub groups_inside: bool,
    /// The mesh of the nodes' first workers, on those workers.
    pub leaders: Option<Arc<Mesh>>,
}

impl Meshes {
    pub fn new(
        info: WorkerInfo,
        world: Arc<Mesh>,
        group: Option<Arc<Mesh>>,
        local: Option<Local>,
    ) -> Self {
        Meshes {
            info,
            world,
            group,
            local,
            broken: OnceLock::new(),
            watch: None,
        }
    }

    /// Every mesh of this worker, for its watch to abort.
    pub fn all(&self) -> Vec<Arc<Mesh>> {
        let leaders = self.local.as_ref().and_then(|l| l.leaders.clone());
        std::iter::once(self.world.clone())
            .chain(self.group.clone())
            .chain(leaders)
            .collect()
    }

    /// The communicator `mesh`, one of this worker's, counts joins on.
    fn comm_of(&self, mesh: &Mesh) -> Comm {
        let is = |other: Option<&Arc<Mesh>>| other.is_some_and(|m| std::ptr::eq(&**m, mesh));
        if is(self.group.as_ref()) {
            Comm::Group
        } else if is(self.local.as_ref().and_then(|l| l.leaders.as_ref())) {
            Comm::Leaders
        } else {
            Comm::Session
        }
    }

    /// The team's mesh and the worker id of its rank 0.
    fn team(&self, in_group: bool) -> (&Mesh, usize) {
        match &self.group {
            Some(group) if in_group => (group, self.info.id - self.info.local_id()),
            _ => (&self.world, 0),
        }
    }

    /// Every mesh of this worker, in the order of its addresses in the rendezvous, each with
    /// where its ranks are: rank r is worker `base + r * stride`.
    pub fn in_order(&self) -> Vec<(&Mesh, usize, usize)> {
        let mut all = vec![(&*self.world, 0, 1)];
        let first_of_group = self.info.id - self.info.local_id();
        all.extend(self.group.as_ref().map(|g| (&**g, first_of_group, 1)));
        if let Some(local) = &self.local {
            let per_node = local.member.info.num_workers;
            all.extend(local.leaders.as_ref().map(|l| (&**l, 0, per_node)));
        }
        all
    }

    /// Passes `result` through; a failure breaks the meshes (peers may be mid-way).
    /// On a hierarchical worker the node's communicator breaks too: the node's other workers,
    /// whose own meshes saw nothing, would otherwise wait for this one.
    pub fn kept<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(error) = &result
            && self.broken.set(error.message.clone()).is_ok()
            && let Some(local) = &self.local
        {
            local.member.ccl.abort(&Error::runtime(format!(
                "worker {}'s Gloo communicator broke: {}; call init_ccl again",
                self.info.id, error.message
            )));
        }
        result
    }

    /// Runs `collective` on the meshes alone (the whole session's or the group's), whether or
    /// not the session is hierarchical.
    pub fn flat(&self, collective: Collective, args: &[AnyView<'_>]) -> Result<()> {
        match collective {
            Collective::Allreduce => allreduce(self, args),
            Collective::Allgather => allgather(self, args),
            Collective::Broadcast | Collective::Scatter => from_worker0(self, args, collective),
            Collective::Gather => gather(self, args),
            Collective::Barrier => barrier(self, args),
            Collective::Transfer(transfer) => transfer
                .peer(args, &self.info)
                .and_then(|other| self::transfer(self, args, transfer, other)),
        }
    }
}

impl Backend for Meshes {
    /// Runs `collective` hierarchically where the session and the team call for it, else on
    /// the meshes; once the meshes broke, fails at once.
    fn run(&self, collective: Collective, args: &[AnyView<'_>]) -> Result<()> {
        if let Some(why) = self.broken.get() {
            return Err(Error::runtime(format!(
                "`{}`: worker {}'s Gloo communicator is broken (an earlier collective failed: \
                 {why}); call init_ccl again",
                collective.name(),
                self.info.id
            )));
        }
        collective.check_arity(args)?;
        let run = || match &self.local {
            Some(local) => Hierarchy {
                meshes: self,
                local,
            }
            .run(collective, args),
            None => self.flat(collective, args),
        };
        match &self.watch {
            Some(watch) => watch.during(run),
            None => run(),
        }
    }
}

/// What a member posts before a collective, for the others to check: the built-in, its
/// parameter and its buffers.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct Digest {
    what: u64,
    param: i64,
    /// Nonzero when the member's node failed the collective already (hierarchical sessions).
    failed: u64,
    send: Buf,
    recv: Buf,
}

impl Digest {
    pub fn new(what: Collective, param: i64, send: Option<Buf>, recv: Option<Buf>) -> Digest {
        Digest {
            what: u64::from(what.code()),
            param,
            failed: 0,
            send: send.unwrap_or(Buf::NONE),
            recv: recv.unwrap_or(Buf::NONE),
        }
    }

    /// The digest of a member whose node failed the collective already.
    pub fn failed(mut self) -> Digest {
        self.failed = 1;
        self
    }

    fn name(&self) -> &'static str {
        what_of(u32::try_from(self.what).unwrap_or(0))
    }
}

/// Every member's digest, by rank in the team.
fn exchange(mesh: &Mesh, mine: &Digest) -> Result<Vec<Digest>> {
    let size = size_of::<Digest>();
    let mut bytes = vec![0u8; size * mesh.size];
    // SAFETY: `mine` is `size` plain bytes; `bytes` holds one digest per member.
    unsafe { mesh.allgather((mine as *const Digest).cast(), bytes.as_mut_ptr(), size)? };
    Ok(bytes
        .chunks_exact(size)
        // SAFETY: each chunk is a member's digest, plain old data; read unaligned.
        .map(|chunk| unsafe { std::ptr::read_unaligned(chunk.as_ptr().cast::<Digest>()) })
        .collect())
}

/// Every member called the same collective with the same parameter and buffers of the same
/// shapes (rank r is worker `base + r * stride`), and none failed before it could join; the
/// flags say which buffers every member passes.
pub(super) fn agree(
    posts: &[Digest],
    (base, stride): (usize, usize),
    send_everywhere: bool,
    recv_everywhere: bool,
) -> Result<()> {
    if let Some(rank) = posts.iter().position(|p| p.failed != 0) {
        return Err(Error::value(format!(
            "{}: worker {} could not take part (its error is its own)",
            posts[rank].name(),
            base + rank * stride
        )));
    }
    let first = &posts[0];
    for (rank, post) in posts.iter().enumerate().skip(1) {
        let (worker, leader) = (base + rank * stride, base);
        if post.what != first.what {
            return Err(Error::value(format!(
                "worker {worker} called `{}` while worker {leader} called `{}`",
                post.name(),
                first.name()
            )));
        }
        if post.param != first.param {
            return Err(Error::value(format!(
                "{}: worker {worker} passed {} while worker {leader} passed {}",
                first.name(),
                post.param,
                first.param
            )));
        }
        let roles = [
            ("send", send_everywhere, &post.send, &first.send),
            ("recv", recv_everywhere, &post.recv, &first.recv),
        ];
        for (role, _, buf, lead) in roles.into_iter().filter(|r| r.1) {
            if buf.shape() != lead.shape() || buf.dtype != lead.dtype {
                return Err(Error::value(format!(
                    "{}: worker {worker} passed a {role} buffer of {} but worker {leader} passed {}",
                    first.name(),
                    buf.describe(),
                    lead.describe()
                )));
            }
        }
    }
    Ok(())
}

/// Checks this worker's arguments with `prepare` (its digest and what `body` needs), then
/// meets the team (see [`across`]).
fn collective<T>(
    meshes: &Meshes,
    what: Collective,
    grouped: bool,
    prepare: impl FnOnce(&Mesh) -> Result<(Digest, T)>,
    check: impl Fn(&[Digest], (usize, usize)) -> Result<()>,
    body: impl FnOnce(&Mesh, T) -> Result<()>,
) -> Result<()> {
    let (mesh, base) = meshes.team(grouped);
    across(
        meshes,
        mesh,
        (base, 1),
        what,
        prepare(mesh),
        check,
        |ready| body(mesh, ready),
    )
}

/// Exchanges digests on `mesh` (rank r is worker `at.0 + r * at.1`), checks them with `check`,
/// and runs `body` with what `prepared` made when everyone agreed. A worker whose `prepared`
/// failed still joins the exchange, with a digest that says so, so the others fail at once
/// too, and gets its own error back; a failure inside Gloo breaks the meshes.
pub(super) fn across<T, U>(
    meshes: &Meshes,
    mesh: &Mesh,
    at: (usize, usize),
    what: Collective,
    prepared: Result<(Digest, T)>,
    check: impl Fn(&[Digest], (usize, usize)) -> Result<()>,
    body: impl FnOnce(T) -> Result<U>,
) -> Result<U> {
    let digest = match &prepared {
        Ok((digest, _)) => *digest,
        Err(_) => Digest::new(what, 0, None, None).failed(),
    };
    // The controller judges the wait by the count (see `activity::Joins`), and names the
    // peers it may wait for.
    activity::note_joined(meshes.comm_of(mesh), what.code());
    let (base, stride) = at;
    activity::note_waiting_for(
        (0..mesh.size)
            .filter(|&rank| rank != mesh.rank)
            .map(|rank| base + rank * stride),
    );
    let posts = meshes.kept(exchange(mesh, &digest));
    let (_, ready) = prepared?;
    check(&posts?, at)?;
    meshes.kept(body(ready))
}

fn allreduce(meshes: &Meshes, args: &[AnyView<'_>]) -> Result<()> {
    const WHAT: Collective = Collective::Allreduce;
    let grouped = WHAT.in_group(args)?;
    let prepare = |_: &Mesh| {
        let send = buffer(args, WHAT, Arg::Send, true)?.expect("required");
        let kind = WHAT.kind(args)?;
        let recv = buffer(args, WHAT, Arg::Recv, true)?.expect("required");
        sized(WHAT, &recv, Arg::Recv, &send, 1)?;
        let digest = Digest::new(WHAT, kind as i64, Some(send), Some(recv));
        Ok((digest, (kind, send, recv)))
    };
    collective(
        meshes,
        WHAT,
        grouped,
        prepare,
        |posts, at| agree(posts, at, true, true),
        |mesh, (kind, send, recv)| reduce_across(mesh, kind, &send, &recv, mesh.size),
    )
}

/// Reduces `input` across `mesh` with `kind` into `output` (which may be `input`); an average
/// divides the sum by `over`, the number of workers whose values it holds.
pub(super) fn reduce_across(
    mesh: &Mesh,
    kind: ReduceOp,
    input: &Buf,
    output: &Buf,
    over: usize,
) -> Result<()> {
    let elem = Elem::of(output.dtype).expect("checked by `buffer`");
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
        // SAFETY: Gloo passes `n` aligned elements of the buffer's type in each of its arrays,
        // which only this call touches now (the output may be an input).
        unsafe { reduce(elem, op, &buffers, 0, n) };
    };
    let count = output.nbytes / elem.size();
    // SAFETY: `input` and `output` hold `count` elements (checked by the caller) that only
    // this collective touches.
    unsafe {
        let (from, to) = (input.addr as *const u8, output.addr as *mut u8);
        mesh.allreduce(from, to, count, elem.size(), &combine)?;
        if kind == ReduceOp::Avg {
            average(elem, output.addr, count, over);
        }
    }
    Ok(())
}

fn allgather(meshes: &Meshes, args: &[AnyView<'_>]) -> Result<()> {
    const WHAT: Collective = Collective::Allgather;
    let grouped = WHAT.in_group(args)?;
    let prepare = |mesh: &Mesh| {
        let send = buffer(args, WHAT, Arg::Send, true)?.expect("required");
        let recv = buffer(args, WHAT, Arg::Recv, true)?.expect("required");
        sized(WHAT, &recv, Arg::Recv, &send, mesh.size)?;
        Ok((Digest::new(WHAT, 0, Some(send), Some(recv)), (send, recv)))
    };
    collective(
        meshes,
        WHAT,
        grouped,
        prepare,
        |posts, at| agree(posts, at, true, true),
        |mesh, (send, recv)| {
            // SAFETY: `send` holds `len` bytes, `recv` `len * size` (checked above).
            unsafe { mesh.allgather(send.addr as *const u8, recv.addr as *mut u8, send.nbytes) }
        },
    )
}

/// Rank 0 of the team sends: the whole `send` buffer to everyone (broadcast) or one
/// `recv`-sized part of it to each member in rank order (scatter).
fn from_worker0(meshes: &Meshes, args: &[AnyView<'_>], what: Collective) -> Result<()> {
    let split = what == Collective::Scatter;
    let grouped = what.in_group(args)?;
    let prepare = |mesh: &Mesh| {
        let parts = split.then_some(mesh.size);
        let (send, recv) = root_send(args, what, mesh.rank == 0, parts)?;
        Ok((Digest::new(what, 0, send, Some(recv)), (send, recv)))
    };
    collective(
        meshes,
        what,
        grouped,
        prepare,
        |posts, at| agree(posts, at, false, true),
        |mesh, (send, recv)| {
            // SAFETY: the buffers hold the sizes checked above (every member's `recv` has the
            // root's shape, checked by `agree`).
            unsafe {
                if split {
                    let input = send.map_or(std::ptr::null(), |s| s.addr as *const u8);
                    mesh.scatter(input, recv.addr as *mut u8, recv.nbytes, 0)
                } else {
                    if let Some(send) = send {
                        copy(send.addr, recv.addr, recv.nbytes);
                    }
                    mesh.broadcast(recv.addr as *mut u8, recv.nbytes, 0)
                }
            }
        },
    )
}

fn gather(meshes: &Meshes, args: &[AnyView<'_>]) -> Result<()> {
    const WHAT: Collective = Collective::Gather;
    let grouped = WHAT.in_group(args)?;
    let prepare = |mesh: &Mesh| {
        let root = mesh.rank == 0;
        let send = buffer(args, WHAT, Arg::Send, true)?.expect("required");
        let recv = buffer(args, WHAT, Arg::Recv, root)?.filter(|_| root);
        if let Some(recv) = &recv {
            sized(WHAT, recv, Arg::Recv, &send, mesh.size)?;
        }
        Ok((Digest::new(WHAT, 0, Some(send), recv), (send, recv)))
    };
    collective(
        meshes,
        WHAT,
        grouped,
        prepare,
        |posts, at| agree(posts, at, true, false),
        |mesh, (send, recv)| {
            let out = recv.map_or(std::ptr::null_mut(), |r| r.addr as *mut u8);
            // SAFETY: `send` holds `len` bytes; the root's `recv` holds `len * size` (checked
            // above), and elsewhere it is not written.
            unsafe { mesh.gather(send.addr as *const u8, out, send.nbytes, 0) }
        },
    )
}

fn barrier(meshes: &Meshes, args: &[AnyView<'_>]) -> Result<()> {
    const WHAT: Collective = Collective::Barrier;
    let grouped = WHAT.in_group(args)?;
    collective(
        meshes,
        WHAT,
        grouped,
        |_| Ok((Digest::new(WHAT, 0, None, None), ())),
        |posts, at| agree(posts, at, false, false),
        |mesh, ()| mesh.barrier(),
    )
}

/// This worker's side of `transfer` of its buffer argument with worker `other`. The sender
/// sends its tensor's header, then its bytes; a receiver whose tensor differs takes the bytes
/// aside and fails, naming both tensors, and the pair stays in step.
fn transfer(meshes: &Meshes, args: &[AnyView<'_>], transfer: Transfer, other: usize) -> Result<()> {
    let sending = transfer.sends();
    let role = if sending { Arg::Send } else { Arg::Recv };
    let buf = buffer(args, Collective::Transfer(transfer), role, true)?.expect("required");
    let mesh = &meshes.world;
    let own = TransferHeader::of(&buf);
    if sending {
        // SAFETY: the header and the tensor hold what is sent, unchanged during the calls.
        return meshes.kept(unsafe {
            mesh.send(own.0.as_ptr(), own.0.len(), other)
                .and_then(|()| mesh.send(buf.addr as *const u8, buf.nbytes, other))
        });
    }
    let mut theirs = TransferHeader([0; TransferHeader::BYTES]);
    // SAFETY: the header's bytes are this call's own.
    meshes.kept(unsafe { mesh.recv(theirs.0.as_mut_ptr(), theirs.0.len(), other) })?;
    if theirs.0 == own.0 {
        // SAFETY: the tensor holds `nbytes`, which only this transfer touches meanwhile.
        return meshes.kept(unsafe { mesh.recv(buf.addr as *mut u8, buf.nbytes, other) });
    }
    let (sent, nbytes) = meshes.kept(theirs.read(other))?;
    let mut aside = Vec::new();
    meshes.kept(aside.try_reserve_exact(nbytes).map_err(|_| {
        Error::runtime(format!(
            "worker {other} sends a tensor of {nbytes} bytes, more than this worker can take"
        ))
    }))?;
    aside.resize(nbytes, 0);
    // SAFETY: `aside` holds `nbytes` of this call's own.
    meshes.kept(unsafe { mesh.recv(aside.as_mut_ptr(), nbytes, other) })?;
    Err(Error::value(format!(
        "worker {other} sent {sent} but worker {} receives {}",
        meshes.info.id,
        buf.describe()
    )))
}

/// What a transfer's sender tells the receiver first: its tensor's dtype (code, bits, lanes)
/// and shape (the number of dimensions, then each), as little-endian 64-bit words.
struct TransferHeader([u8; TransferHeader::BYTES]);

impl TransferHeader {
    const WORDS: usize = 4 + MAX_DIMS;
    const BYTES: usize = 8 * Self::WORDS;

    fn of(buf: &Buf) -> TransferHeader {
        let shape = buf.shape();
        let dtype = [
            buf.dtype.code.into(),
            buf.dtype.bits.into(),
            buf.dtype.lanes.into(),
        ];
        let words = dtype
            .into_iter()
            .chain([shape.len() as i64])
            .chain(shape.iter().copied());
        let mut bytes = [0; Self::BYTES];
        for (at, word) in bytes.chunks_exact_mut(8).zip(words) {
            at.copy_from_slice(&word.to_le_bytes());
        }
        TransferHeader(bytes)
    }

    /// The tensor worker `from` described: how it reads, and its size in bytes.
    fn read(&self, from: usize) -> Result<(String, usize)> {
        let mut words = [0i64; Self::WORDS];
        for (word, at) in words.iter_mut().zip(self.0.chunks_exact(8)) {
            *word = i64::from_le_bytes(at.try_into().expect("8 bytes"));
        }
        let bad = || {
            Error::runtime(format!(
                "worker {from} sent a transfer header no sender writes"
            ))
        };
        let [code, bits, lanes, ndim] = [words[0], words[1], words[2], words[3]];
        let dtype = DLDataType {
            code: u8::try_from(code).map_err(|_| bad())?,
            bits: u8::try_from(bits).map_err(|_| bad())?,
            lanes: u16::try_from(lanes).map_err(|_| bad())?,
        };
        let ndim = usize::try_from(ndim)
            .ok()
            .filter(|&n| n <= MAX_DIMS)
            .ok_or_else(bad)?;
        let shape = &words[4..4 + ndim];
        let element = (usize::from(dtype.bits) * usize::from(dtype.lanes)).div_ceil(8);
        let nbytes = shape
            .iter()
            .try_fold(element, |total, &dim| {
                total.checked_mul(usize::try_from(dim).ok()?)
            })
            .ok_or_else(bad)?;
        Ok((Buf::new(0, dtype, shape, nbytes)?.describe(), nbytes))
    }
}
