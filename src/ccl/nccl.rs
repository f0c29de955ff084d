//! The NCCL backend: the collectives on CUDA tensors, for sessions whose workers each have a
//! GPU of their own, queued on each worker's stream under Disco's names and with its arguments.
//!
//! The one idea: a collective is work on the worker's stream like any other, ordered after the
//! earlier uses of its tensors, and timed on the GPU for the worker's flight recorder; NCCL's
//! kernels wait on the GPU, without end, for a peer that never comes, so every wait of the
//! worker for its GPU is watched ([`watch`]), as are the host waits inside NCCL (joining,
//! connecting, finalizing; docs/collectives.md says how).

mod watch;

use std::sync::{Arc, Mutex, Once, OnceLock};

use super::ReduceOp;
use super::args::{Extent, sized, tensor};
use super::backend::{self, Backend};
use super::collective::{Arg, Collective, Transfer};
use crate::abi::{DLDataType, DLDevice, KDL_CUDA, KDL_INT};
use crate::device::DeviceStream;
use crate::device::nccl::{Comm, Interrupts, Nccl, RedOp, Region, UniqueId};
use crate::object::args::{argument, arity};
use crate::object::tensor::dtype_name;
use crate::object::{Any, AnyView, Bytes, Error, Function, Result, Shape, registry};
use crate::vm::{DeviceWork, Operand, poisoned_input};
use crate::worker::activity::Record;
use crate::worker::builtins::on_worker;
use crate::worker::{self, WorkerInfo, WorkerShared, on_gpu, with_stream};

pub(crate) use watch::{CommsCheck, aborted_in, comms_check, stage_peers, unstage_peers};
use watch::{Queued, WorkerInterrupts, check_worker_thread_waits, peer_records};

const INIT: &str = "runtime.disco.nccl.init_ccl_per_worker";

/// One worker's communicators.
pub(super) struct Comms {
    info: WorkerInfo,
    /// The worker's group, when the session has more than one. Split from `world`, it is
    /// dropped (finalized) before it.
    group: Option<Comm>,
    world: Comm,
    /// One int32 on the worker's GPU that `barrier` reduces.
    flag: Region,
    /// Why the communicators were aborted, once they were: later collectives fail at once.
    aborted: OnceLock<String>,
    /// What the worker shares with the controller: the flags a wait watches.
    shared: Arc<WorkerShared>,
    /// Every worker's record of its activity, by id, where this worker can read them (empty
    /// where it cannot: on a session across machines).
    peers: Vec<Record>,
    /// The last collective the worker queued, when its call went to every worker.
    last: Mutex<Option<Queued>>,
}

impl Comms {
    /// The team's communicator and this worker's rank in it.
    fn team(&self, in_group: bool) -> (&Comm, usize) {
        match &self.group {
            Some(group) if in_group => (group, self.info.local_id()),
            _ => (&self.world, self.info.id),
        }
    }
}

/// Checks that the session's workers can use NCCL and makes the arguments of the per-worker
/// init: the workers' GPUs and the unique ids (the session's, then each group's). Workers run
/// on machines of `per_machine` workers each (in order), and no two on one machine share a
/// GPU.
pub(crate) fn init_args(
    devices: &[DLDevice],
    per_machine: usize,
    num_groups: usize,
    device_ids: &[i32],
) -> Result<[Any; 2]> {
    let nccl = Nccl::with_gpu().map_err(|e| {
        Error::new(
            e.kind,
            format!(
                "the nccl backend needs a GPU for each worker and NCCL: {}",
                e.message
            ),
        )
    })?;
    if let Some((w, device)) = devices
        .iter()
        .enumerate()
        .find(|(_, d)| d.device_type != KDL_CUDA)
    {
        return Err(Error::value(format!(
            "the nccl backend needs every worker on a CUDA device; worker {w} is on device type \
             {}",
            device.device_type
        )));
    }
    if let Some((w, id)) = device_ids
        .iter()
        .enumerate()
        .find(|&(w, &id)| id != devices[w].device_id)
    {
        return Err(Error::value(format!(
            "device_ids[{w}] is {id} but worker {w} runs on CUDA device {}",
            devices[w].device_id
        )));
    }
    for (b, device) in devices.iter().enumerate() {
        let machine = b - b % per_machine;
        if let Some(a) = (machine..b).find(|&a| devices[a] == *device) {
            return Err(Error::value(format!(
                "workers {a} and {b} share CUDA device {}: NCCL needs a GPU of its own for each \
                 worker",
                device.device_id
            )));
        }
    }
    let ids = if num_groups > 1 { 1 + num_groups } else { 1 };
    let mut bytes = Vec::with_capacity(ids * UniqueId::BYTES);
    for _ in 0..ids {
        bytes.extend_from_slice(&nccl.unique_id()?.as_bytes());
    }
    let gpus: Vec<i64> = devices.iter().map(|d| i64::from(d.device_id)).collect();
    Ok([Shape::new(&gpus).into(), Any::Bytes(Bytes::new(&bytes))])
}

/// The unique id number `index` in the init's bytes.
fn unique_id(bytes: &[u8], index: usize) -> Result<UniqueId> {
    let start = index * UniqueId::BYTES;
    let id = bytes.get(start..start + UniqueId::BYTES).ok_or_else(|| {
        Error::value(format!(
            "unique id {index} is missing ({} bytes given)",
            bytes.len()
        ))
    })?;
    UniqueId::from_bytes(id)
}

/// `runtime.disco.nccl.init_ccl_per_worker(device_ids, unique_ids)`: joins the communicators
/// of the session and of this worker's group, replacing the worker's earlier ones. Joining
/// waits for the other workers; with non-blocking communicators the wait gives up at the
/// session's timeout, at shutdown, or when `init_ccl` is called again (docs/collectives.md).
fn init_per_worker(args: &[AnyView<'_>]) -> Result<Any> {
    arity(INIT, args, 2, 3)?;
    let info = on_worker(INIT)?;
    let gpus = argument(0, "device_ids", || args[0].as_shape())?;
    let bytes = argument(1, "unique_ids", || args[1].as_bytes())?;
    let stage = match args.get(2) {
        Some(arg) => argument(2, "peers", || arg.as_i64())?,
        None => 0,
    };
    let gpu = gpus.as_slice().get(info.id).copied().ok_or_else(|| {
        Error::index(format!(
            "worker {} has no entry in {} device ids",
            info.id,
            gpus.as_slice().len()
        ))
    })?;
    if i64::from(info.device.device_id) != gpu || info.device.device_type != KDL_CUDA {
        return Err(Error::value(format!(
            "worker {} runs on device ({}, {}), not CUDA device {gpu}",
            info.id, info.device.device_type, info.device.device_id
        )));
    }
    let shared =
        worker::shared().ok_or_else(|| Error::runtime(format!("{INIT} runs on workers")))?;
    let world_id = unique_id(bytes, 0)?;
    // Every worker leaves its old communicators before joining the new ones. Their teardown
    // (`ncclCommFinalize` and `ncclCommDestroy`) waits for their work, so that is waited for
    // first, by polling: their failure, or the shutdown, aborts them instead. Such a failure is
    // reported after joining the new ones, which the other workers wait in for this one.
    let flushed = match comms_check() {
        Some(watch) => with_stream(|stream| watch.sync(stream)),
        None => Ok(()),
    };
    backend::forget();
    let (device_id, timeout) = (info.device.device_id, shared.timeout);
    let worker_interrupts = Arc::new(WorkerInterrupts::new(shared.clone()));
    let interrupts: Arc<dyn Interrupts> = worker_interrupts.clone();
    let world = Comm::init_rank(
        device_id,
        info.num_workers,
        info.id,
        &world_id,
        interrupts.clone(),
        timeout,
    )?;
    let group = if info.num_groups > 1 {
        let per_group = info.workers_per_group();
        let (group, rank) = (info.id / per_group, info.local_id());
        match world.split(group, rank, per_group, timeout)? {
            Some(comm) => Some(comm),
            None => Some(Comm::init_rank(
                device_id,
                per_group,
                rank,
                &unique_id(bytes, 1 + group)?,
                interrupts,
                timeout,
            )?),
        }
    } else {
        None
    };
    let flag = crate::device::empty(&[1], DLDataType::new(KDL_INT, 32, 1), info.device)?;
    let comms = Comms {
        info,
        world,
        group,
        flag: Region::of(&flag)?,
        aborted: OnceLock::new(),
        peers: peer_records(stage, info.num_workers),
        last: Mutex::new(None),
        shared,
    };
    comms.shared.activity.comms_made();
    let comms = Arc::new(comms);
    worker_interrupts.made(&comms);
    backend::install(comms);
    check_worker_thread_waits();
    flushed.map(|()| Any::None)
}

/// Registers the NCCL init built-in once per process.
pub(crate) fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        registry::register_global(INIT, Function::from_closure(init_per_worker), true)
            .expect("built-in names are valid");
    });
}

impl Backend for Arc<Comms> {
    /// Enqueues the collective on the worker's stream (a barrier also waits for it), unless
    /// the communicators were aborted.
    fn run(&self, collective: Collective, args: &[AnyView<'_>]) -> Result<()> {
        if let Some(why) = self.aborted.get() {
            return Err(Error::runtime(format!(
                "worker {} has no working NCCL communicators (they were aborted: {why}); call \
                 init_ccl again before more collectives",
                self.info.id
            )));
        }
        collective.check_arity(args)?;
        let comms = self.clone();
        // A barrier then waits for its flag, watching from before it was queued.
        let watch = (collective == Collective::Barrier).then(|| CommsCheck::new(self.clone()));
        let ready = match collective {
            Collective::Allreduce => allreduce(comms, args),
            Collective::Allgather => allgather(comms, args),
            Collective::Broadcast => broadcast(comms, args),
            Collective::Scatter => scatter(comms, args),
            Collective::Gather => gather(comms, args),
            Collective::Barrier => barrier(comms, args),
            Collective::Transfer(transfer) => {
                return transfer_built_in(comms, transfer, args);
            }
        }?;
        // Noted before it is queued, once the stream takes it: NCCL may wait in the enqueue
        // itself (connecting the team's ranks), and that wait judges the peers of this
        // collective, as the referee does. One whose input an earlier failure left unwritten
        // fails the call instead, before it counts: its peers then judge it passed.
        with_stream(|stream| stream.check_operands(&ready.uses))?;
        if let Some(cause) = poisoned_input(&ready.uses) {
            return Err(Error::new(
                cause.kind,
                format!(
                    "`{}`: an input was not written because an earlier instruction failed: {}",
                    collective.name(),
                    cause.message
                ),
            ));
        }
        self.queued(collective, collective.in_group(args)?, ready.size);
        enqueue(collective, args, ready.uses, ready.work)?;
        match watch {
            Some(watch) => with_stream(|stream| watch.sync(stream)),
            None => Ok(()),
        }
    }
}

/// Tensor argument `arg` of a call of `collective` as a region; `None` when it is None or
/// absent and not `required`.
fn region(
    args: &[AnyView<'_>],
    collective: Collective,
    arg: Arg,
    required: bool,
) -> Result<Option<Region>> {
    tensor(args, collective, arg, required, |tensor| {
        Region::of(&tensor)
    })
}

fn required(args: &[AnyView<'_>], collective: Collective, arg: Arg) -> Result<Region> {
    Ok(region(args, collective, arg, true)?.expect("required"))
}

impl Extent for Region {
    fn dtype(&self) -> DLDataType {
        Region::dtype(self)
    }

    fn amount(&self) -> usize {
        self.count()
    }

    fn describe(&self) -> String {
        format!("{} {}", self.count(), dtype_name(Region::dtype(self)))
    }
}

/// How work uses the tensors of its regions: `reads` are read, `writes` written whole.
fn uses<'a>(
    reads: impl IntoIterator<Item = &'a Region>,
    writes: impl IntoIterator<Item = &'a Region>,
) -> Vec<Operand> {
    reads
        .into_iter()
        .map(|r| Operand::Read(r.tensor().clone()))
        .chain(
            writes
                .into_iter()
                .map(|r| Operand::Overwrite(r.tensor().clone())),
        )
        .collect()
}

/// A collective checked and ready to be queued.
struct Ready {
    /// The bytes its members must agree on (see `Joins::size`).
    size: u64,
    /// How its work uses its tensors.
    uses: Vec<Operand>,
    work: DeviceWork,
}

/// Enqueues `work`, the GPU's work of `collective` called with `args`, on the worker's stream,
/// ordered after earlier uses of its tensors (`uses`), and times it on the GPU for the worker's
/// flight recorder.
fn enqueue(
    collective: Collective,
    args: &[AnyView<'_>],
    uses: Vec<Operand>,
    work: impl Fn(&dyn DeviceStream) -> Result<()> + Send + 'static,
) -> Result<()> {
    let about = backend::described(collective, args);
    let timed = move |stream: &dyn DeviceStream| on_gpu::timed(stream, about, || work(stream));
    with_stream(|stream| stream.launch(uses, Box::new(timed)))
}

fn red_op(kind: ReduceOp) -> RedOp {
    match kind {
        ReduceOp::Sum => RedOp::Sum,
        ReduceOp::Prod => RedOp::Prod,
        ReduceOp::Min => RedOp::Min,
        ReduceOp::Max => RedOp::Max,
        ReduceOp::Avg => RedOp::Avg,
    }
}

// Each collective below checks its arguments and returns its work, ready to be queued.

fn allreduce(comms: Arc<Comms>, args: &[AnyView<'_>]) -> Result<Ready> {
    const WHAT: Collective = Collective::Allreduce;
    let grouped = WHAT.in_group(args)?;
    let send = required(args, WHAT, Arg::Send)?;
    let op = red_op(WHAT.kind(args)?);
    let recv = required(args, WHAT, Arg::Recv)?;
    sized(WHAT, &recv, Arg::Recv, &send, 1)?;
    Ok(Ready {
        size: send.bytes(),
        uses: uses([&send], [&recv]),
        work: Box::new(move |stream| comms.team(grouped).0.all_reduce(&send, &recv, op, stream)),
    })
}

fn allgather(comms: Arc<Comms>, args: &[AnyView<'_>]) -> Result<Ready> {
    const WHAT: Collective = Collective::Allgather;
    let grouped = WHAT.in_group(args)?;
    let send = required(args, WHAT, Arg::Send)?;
    let recv = required(args, WHAT, Arg::Recv)?;
    let size = comms.team(grouped).0.size();
    sized(WHAT, &recv, Arg::Recv, &send, size)?;
    Ok(Ready {
        size: send.bytes(),
        uses: uses([&send], [&recv]),
        work: Box::new(move |stream| comms.team(grouped).0.all_gather(&send, &recv, stream)),
    })
}

fn broadcast(comms: Arc<Comms>, args: &[AnyView<'_>]) -> Result<Ready> {
    const WHAT: Collective = Collective::Broadcast;
    let grouped = WHAT.in_group(args)?;
    let root = comms.team(grouped).1 == 0;
    let send = region(args, WHAT, Arg::Send, root)?.filter(|_| root);
    let recv = required(args, WHAT, Arg::Recv)?;
    if let Some(send) = &send {
        sized(WHAT, &recv, Arg::Recv, send, 1)?;
    }
    Ok(Ready {
        size: recv.bytes(),
        uses: uses(&send, [&recv]),
        work: Box::new(move |stream| {
            let comm = comms.team(grouped).0;
            comm.broadcast(send.as_ref(), &recv, 0, stream)
        }),
    })
}

fn scatter(comms: Arc<Comms>, args: &[AnyView<'_>]) -> Result<Ready> {
    const WHAT: Collective = Collective::Scatter;
    let grouped = WHAT.in_group(args)?;
    let (comm, rank) = comms.team(grouped);
    let size = comm.size();
    let send = region(args, WHAT, Arg::Send, rank == 0)?.filter(|_| rank == 0);
    let recv = required(args, WHAT, Arg::Recv)?;
    if let Some(send) = &send {
        sized(WHAT, send, Arg::Send, &recv, size)?;
    }
    Ok(Ready {
        size: recv.bytes(),
        uses: uses(&send, [&recv]),
        work: Box::new(move |stream| {
            let comm = comms.team(grouped).0;
            comm.group(|| {
                if let Some(send) = &send {
                    for to in 0..size {
                        comm.send(&send.part(to, size), to, stream)?;
                    }
                }
                comm.recv(&recv, 0, stream)
            })
        }),
    })
}

fn gather(comms: Arc<Comms>, args: &[AnyView<'_>]) -> Result<Ready> {
    const WHAT: Collective = Collective::Gather;
    let grouped = WHAT.in_group(args)?;
    let (comm, rank) = comms.team(grouped);
    let size = comm.size();
    let send = required(args, WHAT, Arg::Send)?;
    let recv = region(args, WHAT, Arg::Recv, rank == 0)?.filter(|_| rank == 0);
    if let Some(recv) = &recv {
        sized(WHAT, recv, Arg::Recv, &send, size)?;
    }
    Ok(Ready {
        size: send.bytes(),
        uses: uses([&send], &recv),
        work: Box::new(move |stream| {
            let comm = comms.team(grouped).0;
            comm.group(|| {
                comm.send(&send, 0, stream)?;
                if let Some(recv) = &recv {
                    for from in 0..size {
                        comm.recv(&recv.part(from, size), from, stream)?;
                    }
                }
                Ok(())
            })
        }),
    })
}

/// Transfer built-in `transfer`: one side of a transfer with the worker its arguments name, over
/// the session's communicator.
fn transfer_built_in(comms: Arc<Comms>, transfer: Transfer, args: &[AnyView<'_>]) -> Result<()> {
    let peer = transfer.peer(args, &comms.info)?;
    let sending = transfer.sends();
    let what = Collective::Transfer(transfer);
    let buf = required(args, what, if sending { Arg::Send } else { Arg::Recv })?;
    let uses = match sending {
        true => uses([&buf], []),
        false => uses([], [&buf]),
    };
    enqueue(what, args, uses, move |stream| match sending {
        true => comms.world.send(&buf, peer, stream),
        false => comms.world.recv(&buf, peer, stream),
    })
}

/// Reduces the worker's flag across the team (the caller then waits for it: no worker of the
/// team passes before every one has queued its barrier and the work queued before it
/// finished).
fn barrier(comms: Arc<Comms>, args: &[AnyView<'_>]) -> Result<Ready> {
    let grouped = Collective::Barrier.in_group(args)?;
    let flag = comms.flag.clone();
    Ok(Ready {
        size: flag.bytes(),
        // Reduced in place, but its value is never read: a barrier only orders.
        uses: uses([], [&flag]),
        work: Box::new(move |stream| {
            let comm = comms.team(grouped).0;
            comm.all_reduce(&flag, &flag, RedOp::Sum, stream)
        }),
    })
}
