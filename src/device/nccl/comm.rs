//! One rank's NCCL communicator: joining it, enqueueing collectives, giving it up. Every call
//! on a communicator ends in one place, which waits out a non-blocking NCCL still at the call,
//! asking the owner's [`Interrupts`] between polls, and aborts the communicator when the wait
//! ends without NCCL finishing.

use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::loader::{
    CollectiveFn, Config, NCCL_IN_PROGRESS, NCCL_SUCCESS, Nccl, NcclResult, RawComm, RawStream,
    UniqueId,
};
use crate::abi::{DLDataType, KDL_BFLOAT, KDL_CUDA, KDL_FLOAT, KDL_INT, KDL_UINT};
use crate::device::DeviceStream;
use crate::device::cuda::{self, CudaDevice};
use crate::device::poll::poll_until;
use crate::object::tensor::dtype_name;
use crate::object::{Error, Result, Tensor};

/// What may end a wait on a non-blocking communicator from outside: its owner giving it up (a
/// shutdown, newer communicators). A wait takes a mark when it begins and checks it between
/// polls; an error ends the wait (and aborts the communicator), with that error as the cause.
pub trait Interrupts: Send + Sync {
    /// The mark of a wait that begins now.
    fn mark(&self) -> u64;

    /// Fails when the wait that began at `mark` must end.
    fn check(&self, mark: u64) -> Result<()>;
}

/// The check of a wait on a communicator with `interrupts` that begins now.
fn beginning(interrupts: &dyn Interrupts) -> impl FnMut() -> Result<()> + '_ {
    let mark = interrupts.mark();
    move || interrupts.check(mark)
}

/// NCCL's element type for a dtype, or a `ValueError` naming the dtype.
pub(super) fn nccl_type(dtype: DLDataType) -> Result<c_int> {
    Ok(match (dtype.code, dtype.bits, dtype.lanes) {
        (KDL_INT, 8, 1) => 0,
        (KDL_UINT, 8, 1) => 1,
        (KDL_INT, 32, 1) => 2,
        (KDL_UINT, 32, 1) => 3,
        (KDL_INT, 64, 1) => 4,
        (KDL_UINT, 64, 1) => 5,
        (KDL_FLOAT, 16, 1) => 6,
        (KDL_FLOAT, 32, 1) => 7,
        (KDL_FLOAT, 64, 1) => 8,
        (KDL_BFLOAT, 16, 1) => 9,
        _ => {
            return Err(Error::value(format!(
                "NCCL has no element type for dtype {}",
                dtype_name(dtype)
            )));
        }
    })
}

/// A reduction, in NCCL's numbering (`ncclRedOp_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedOp {
    Sum = 0,
    Prod = 1,
    Max = 2,
    Min = 3,
    Avg = 4,
}

/// A run of elements of a compact CUDA tensor that a collective reads or writes. It holds the
/// tensor, so its memory lives at least as long as the region.
#[derive(Clone)]
pub struct Region {
    tensor: Tensor,
    /// The first element.
    start: usize,
    count: usize,
    elem_bytes: usize,
    nccl_type: c_int,
}

impl Region {
    /// The whole of `tensor`: a compact CUDA tensor of a dtype NCCL has.
    pub fn of(tensor: &Tensor) -> Result<Region> {
        let dl = tensor.dl();
        if dl.device.device_type != KDL_CUDA {
            return Err(Error::value(format!(
                "NCCL works on CUDA tensors (kDLCUDA = 2), not device type {}",
                dl.device.device_type
            )));
        }
        if !tensor.is_contiguous() {
            return Err(Error::value("the tensor is not contiguous"));
        }
        let nccl_type = nccl_type(dl.dtype)?;
        let elem_bytes = usize::from(dl.dtype.bits / 8);
        Ok(Region {
            tensor: tensor.clone(),
            start: 0,
            count: tensor.nbytes() / elem_bytes,
            elem_bytes,
            nccl_type,
        })
    }

    /// How many elements the region holds.
    pub fn count(&self) -> usize {
        self.count
    }

    /// How many bytes the region holds.
    pub fn bytes(&self) -> u64 {
        (self.count * self.elem_bytes) as u64
    }

    /// The tensor's dtype.
    pub fn dtype(&self) -> DLDataType {
        self.tensor.dl().dtype
    }

    /// The tensor the region lies in.
    pub fn tensor(&self) -> &Tensor {
        &self.tensor
    }

    /// Part `index` of `parts` equal parts (the remainder of an uneven split is left out).
    pub fn part(&self, index: usize, parts: usize) -> Region {
        let count = self.count / parts;
        Region {
            start: self.start + index * count,
            count,
            ..self.clone()
        }
    }

    fn ptr(&self) -> *mut c_void {
        // SAFETY: `start` lies within the tensor (parts never pass its end).
        unsafe { self.tensor.data_ptr().add(self.start * self.elem_bytes) }.cast()
    }
}

/// One rank's communicator (`ncclComm_t`) on one GPU. Calls on it take its lock: NCCL allows
/// one thread at a time on a communicator. Collectives are enqueued on the CUDA stream under a
/// VM stream ([`DeviceStream`]), so they are ordered with the VM's copies on that stream.
///
/// Non-blocking communicators: joining a communicator is collective, and so is its
/// finalization: a rank waits there for every other. With `ncclCommInitRankConfig` the
/// communicators are made non-blocking (`blocking = 0`): NCCL does such work in the background,
/// a call may return `ncclInProgress`, and the caller polls `ncclCommGetAsyncError` until it is
/// no longer in progress before the next call on that communicator. Those waits poll with a
/// back-off and ask the communicator's [`Interrupts`] between polls, so the owner of the
/// communicator (a worker that is shutting down, or was given new communicators) can give up;
/// joining also gives up after its timeout. A wait that ends without NCCL finishing, or with an
/// error, aborts the communicator (`ncclCommAbort`), as NCCL requires. Without
/// `ncclCommInitRankConfig` (NCCL before 2.14) the communicators are blocking: joining waits
/// in NCCL for every rank, with no way out.
pub struct Comm {
    handle: CommHandle,
    device: Arc<CudaDevice>,
    size: usize,
    /// What may end its waits.
    interrupts: Arc<dyn Interrupts>,
}

/// A communicator handle.
pub(super) struct Handle(RawComm);

// SAFETY: an NCCL communicator may be used from any thread, one at a time (the lock in
// `CommHandle` sees to that), and destroyed from any thread.
unsafe impl Send for Handle {}

/// A communicator's handle under its lock, with the library that made it: what the calls that
/// need no GPU of their own (its state, giving it up) work on. The handle is NULL once the
/// communicator was aborted; NCCL never sees it again.
pub(super) struct CommHandle {
    pub(super) nccl: &'static Nccl,
    raw: Mutex<Handle>,
}

impl CommHandle {
    pub(super) fn new(nccl: &'static Nccl, raw: RawComm) -> CommHandle {
        CommHandle {
            nccl,
            raw: Mutex::new(Handle(raw)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Handle> {
        self.raw.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The locked handle, or a `RuntimeError` when the communicator was aborted.
    pub(super) fn live(&self) -> Result<MutexGuard<'_, Handle>> {
        let comm = self.lock();
        if comm.0.is_null() {
            return Err(Error::runtime(
                "NCCL: the communicator was aborted and can run nothing more",
            ));
        }
        Ok(comm)
    }

    /// Whether NCCL is still at the communicator's last operation (`ncclCommGetAsyncError`
    /// says `ncclInProgress`: a non-blocking communicator joining, finalizing, or enqueuing),
    /// or the asynchronous error it reports, as a `RuntimeError` with NCCL's text. An aborted
    /// communicator has nothing in progress.
    fn in_progress(&self) -> Result<bool> {
        let comm = self.lock();
        if comm.0.is_null() {
            return Ok(false);
        }
        let mut state = NCCL_SUCCESS;
        // SAFETY: a live communicator (under its lock); writes one result code.
        let asked = unsafe { (self.nccl.api.comm_get_async_error)(comm.0, &mut state) };
        self.nccl
            .check("ncclCommGetAsyncError", asked, Some(comm.0))?;
        match state {
            NCCL_SUCCESS => Ok(false),
            NCCL_IN_PROGRESS => Ok(true),
            _ => Err(Error::runtime(format!(
                "NCCL reported an asynchronous error: {}",
                self.nccl.describe(state, Some(comm.0))
            ))),
        }
    }

    /// See [`Comm::async_error`].
    pub(super) fn async_error(&self) -> Result<()> {
        self.in_progress().map(drop)
    }

    /// Takes the handle out, for its destruction; `None` when it was taken before. Every later
    /// call fails (or, for [`CommHandle::async_error`], passes) without reaching NCCL.
    pub(super) fn take(&self) -> Option<RawComm> {
        let raw = std::mem::replace(&mut self.lock().0, std::ptr::null_mut());
        (!raw.is_null()).then_some(raw)
    }

    /// Aborts the communicator (`ncclCommAbort`) unless that was done before. The caller has
    /// entered its GPU: NCCL frees the communicator in its own context.
    pub(super) fn abort(&self) {
        if let Some(raw) = self.take() {
            // SAFETY: a live communicator, which nothing uses again (its handle is gone).
            unsafe { (self.nccl.api.comm_abort)(raw) };
        }
    }

    /// Waits until NCCL is no longer at the communicator's last operation, polling
    /// `ncclCommGetAsyncError` and calling `check` between polls. When NCCL reports an error, or
    /// `check` gives up, the communicator is aborted (an operation NCCL did not finish leaves
    /// it unusable) and that is the error.
    /// A communicator aborted meanwhile (by another thread) ends the wait with an error too.
    fn settle(&self, check: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        poll_until(|| self.in_progress().map(|busy| !busy), check)
            .and_then(|()| match self.lock().0.is_null() {
                true => Err(Error::runtime("it was aborted while NCCL was at it")),
                false => Ok(()),
            })
            .inspect_err(|_| self.abort())
    }

    /// Checks the result `code` of call `what` on the communicator (`comm`, its handle while
    /// the caller holds the lock, for NCCL's last error): `ncclInProgress`, a non-blocking
    /// communicator still at it, is waited for (see [`CommHandle::settle`]), so that the next
    /// call may follow. Every call on a communicator ends here.
    fn finish(
        &self,
        what: &str,
        code: NcclResult,
        comm: Option<MutexGuard<'_, Handle>>,
        check: &mut dyn FnMut() -> Result<()>,
    ) -> Result<()> {
        if code != NCCL_IN_PROGRESS {
            return self.nccl.check(what, code, comm.map(|c| c.0));
        }
        drop(comm);
        self.settle(check).map_err(|cause| {
            Error::new(
                cause.kind,
                format!(
                    "NCCL: {what} did not finish: {}; the communicator was aborted",
                    cause.message
                ),
            )
        })
    }

    /// Makes call `what` on the live communicator (`call` gets its handle) and checks its
    /// result (see [`CommHandle::finish`]). The caller has entered the communicator's GPU.
    pub(super) fn call(
        &self,
        what: &str,
        check: &mut dyn FnMut() -> Result<()>,
        call: impl FnOnce(RawComm) -> NcclResult,
    ) -> Result<()> {
        let comm = self.live()?;
        let code = call(comm.0);
        self.finish(what, code, Some(comm), check)
    }

    /// Runs `issue` between `ncclGroupStart` and `ncclGroupEnd`: the point-to-point calls it
    /// makes on this communicator are matched as one operation. The group ends even when
    /// `issue` fails. The caller has entered the communicator's GPU.
    pub(super) fn group(
        &self,
        issue: impl FnOnce() -> Result<()>,
        check: &mut dyn FnMut() -> Result<()>,
    ) -> Result<()> {
        let nccl = self.nccl;
        // SAFETY: no arguments.
        nccl.check("ncclGroupStart", unsafe { (nccl.api.group_start)() }, None)?;
        let issued = issue();
        // SAFETY: as above; closes the group opened above.
        let code = unsafe { (nccl.api.group_end)() };
        let ended = self.finish("ncclGroupEnd", code, None, check);
        issued.and(ended)
    }

    /// A new communicator from `start` (`what`: `ncclCommInitRankConfig`, `ncclCommSplit`, ...),
    /// which writes its handle; NCCL still making it (`ncclInProgress`) is waited for (see
    /// [`CommHandle::settle`]). On a failure what was made is aborted, and the error says who
    /// could not join (`who`: the rank, size and GPU) and why. The caller has entered the GPU.
    pub(super) fn join(
        nccl: &'static Nccl,
        what: &str,
        who: &str,
        start: impl FnOnce(&mut RawComm) -> NcclResult,
        check: &mut dyn FnMut() -> Result<()>,
    ) -> Result<CommHandle> {
        let mut raw: RawComm = std::ptr::null_mut();
        let code = start(&mut raw);
        let handle = CommHandle::new(nccl, raw);
        let made = match code {
            NCCL_SUCCESS => Ok(()),
            NCCL_IN_PROGRESS => handle.settle(check),
            _ => Err(Error::runtime(format!(
                "{what} failed: {}",
                nccl.describe(code, None)
            ))),
        };
        if let Err(cause) = made {
            // Settling aborted it already; a handle NCCL wrote before failing goes the same way.
            handle.abort();
            let aborted = match raw.is_null() {
                true => "",
                false => "; the half-made communicator was aborted",
            };
            return Err(Error::new(
                cause.kind,
                format!(
                    "NCCL: {who} could not join its communicator: {}{aborted}",
                    cause.message
                ),
            ));
        }
        Ok(handle)
    }

    /// Gives the communicator up. A healthy one is finalized (`ncclCommFinalize` on a
    /// non-blocking one, which waits for its work and its peers' finalization: a wait like any
    /// other, see [`CommHandle::settle`]) and destroyed (`ncclCommDestroy`); one that failed,
    /// or whose finalization did, is aborted; an aborted one is gone already. The caller has
    /// entered the communicator's GPU.
    pub(super) fn close(&self, check: &mut dyn FnMut() -> Result<()>) {
        let finalized = self
            .async_error()
            .and_then(|()| match self.nccl.api.non_blocking {
                // SAFETY: a live communicator (under its lock), finalized once.
                Some(api) => self.call("ncclCommFinalize", check, |comm| unsafe {
                    (api.comm_finalize)(comm)
                }),
                None => Ok(()),
            });
        if finalized.is_err() {
            return self.abort();
        }
        if let Some(raw) = self.take() {
            // SAFETY: the communicator is ours, finalized where NCCL has that, and nothing
            // uses it any more.
            unsafe { (self.nccl.api.comm_destroy)(raw) };
        }
    }
}

impl Comm {
    /// Rank `rank` of a communicator of `size` ranks on CUDA device `device_id`, from the
    /// unique id every rank got; every rank joins it, each from its own thread. A
    /// non-blocking one (NCCL 2.14 and later) is waited for while `interrupts` let the wait go
    /// on and `timeout` (if any) has not passed; every later wait on it asks `interrupts` too.
    /// Before NCCL 2.14 this blocks in NCCL until every rank has joined.
    pub fn init_rank(
        device_id: i32,
        size: usize,
        rank: usize,
        id: &UniqueId,
        interrupts: Arc<dyn Interrupts>,
        timeout: Option<Duration>,
    ) -> Result<Comm> {
        let nccl = Nccl::shared()?;
        let device = CudaDevice::shared(device_id)?;
        let (size_c, rank_c) = (as_int(size, "size")?, as_int(rank, "rank")?);
        let who = format!("rank {rank} of {size} on CUDA device {device_id}");
        // NCCL picks the GPU from the calling thread's current context.
        let _ctx = device.enter()?;
        let handle = {
            let check = &mut joining(&*interrupts, timeout);
            match nccl.api.non_blocking {
                Some(api) => {
                    let mut config = Config::non_blocking();
                    let start = |raw: &mut RawComm| {
                        // SAFETY: writes one communicator handle; the id is passed by value as
                        // declared, the configuration is read during the call.
                        unsafe {
                            (api.comm_init_rank_config)(raw, size_c, *id, rank_c, &mut config)
                        }
                    };
                    CommHandle::join(nccl, "ncclCommInitRankConfig", &who, start, check)
                }
                None => {
                    let start = |raw: &mut RawComm| {
                        // SAFETY: as above, without a configuration.
                        unsafe { (nccl.api.comm_init_rank)(raw, size_c, *id, rank_c) }
                    };
                    CommHandle::join(nccl, "ncclCommInitRank", &who, start, check)
                }
            }
        }?;
        Ok(Comm {
            handle,
            device,
            size,
            interrupts,
        })
    }

    /// This rank's part of a new communicator among the ranks that pass the same `color`,
    /// ordered by `key` (`ncclCommSplit`, every rank of this communicator calls it); `None`
    /// when the library has no `ncclCommSplit` (before NCCL 2.18). The new communicator
    /// inherits this one's mode and interrupts; a non-blocking one is waited for as in
    /// [`Comm::init_rank`].
    pub fn split(
        &self,
        color: usize,
        key: usize,
        size: usize,
        timeout: Option<Duration>,
    ) -> Result<Option<Comm>> {
        let Some(split) = self.nccl().api.comm_split else {
            return Ok(None);
        };
        let (color_c, key_c) = (as_int(color, "color")?, as_int(key, "key")?);
        let who = format!(
            "rank {key} of {size} on CUDA device {} (split from a communicator of {}, color \
             {color})",
            self.device.dl().device_id,
            self.size
        );
        let _ctx = self.device.enter()?;
        let handle = {
            let check = &mut joining(&*self.interrupts, timeout);
            let comm = self.handle.live()?;
            let start = |raw: &mut RawComm| {
                // SAFETY: a live communicator (under its lock); writes one handle; a NULL
                // config inherits this one's.
                unsafe { split(comm.0, color_c, key_c, raw, std::ptr::null_mut()) }
            };
            CommHandle::join(self.nccl(), "ncclCommSplit", &who, start, check)?
        };
        Ok(Some(Comm {
            handle,
            device: self.device.clone(),
            size,
            interrupts: self.interrupts.clone(),
        }))
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Whether the communicator failed asynchronously (`ncclCommGetAsyncError`: a peer lost,
    /// a network or internal error in a running collective); `Ok` while it is healthy (or
    /// still at a non-blocking operation) or was aborted. Cheap: NCCL reads a field of the
    /// communicator.
    pub fn async_error(&self) -> Result<()> {
        self.handle.async_error()
    }

    /// Aborts the communicator (`ncclCommAbort`): its kernels stop without waiting for the
    /// peers, and its resources go. Later calls on it fail at once; aborting again, or
    /// dropping it, does nothing more.
    pub fn abort(&self) {
        self.in_context(CommHandle::abort);
    }

    /// Runs `f` on the handle in the communicator's GPU context. NCCL frees a communicator in
    /// its own context: without it, the communicator is left be.
    fn in_context(&self, f: impl FnOnce(&CommHandle)) {
        match self.device.enter() {
            Ok(_ctx) => f(&self.handle),
            Err(_) => drop(self.handle.take()),
        }
    }

    /// The loaded library.
    fn nccl(&self) -> &'static Nccl {
        self.handle.nccl
    }

    /// Runs `issue` between `ncclGroupStart` and `ncclGroupEnd`: the point-to-point calls it
    /// makes on this communicator are matched as one operation. The group ends even when
    /// `issue` fails; a non-blocking group end is waited for like any call.
    pub fn group(&self, issue: impl FnOnce() -> Result<()>) -> Result<()> {
        let _ctx = self.device.enter()?;
        self.handle.group(issue, &mut beginning(&*self.interrupts))
    }

    /// The CUDA stream of `stream`, checked to be on this communicator's GPU, as are the
    /// regions.
    fn stream(&self, stream: &dyn DeviceStream, regions: &[&Region]) -> Result<RawStream> {
        let Some((device, raw)) = cuda::raw_stream(stream) else {
            return Err(Error::value("NCCL enqueues only on CUDA streams"));
        };
        let mine = self.device.dl();
        if device.dl() != mine {
            return Err(Error::value(format!(
                "the stream is on CUDA device {} but the communicator on {}",
                device.dl().device_id,
                mine.device_id
            )));
        }
        if let Some(region) = regions.iter().find(|r| r.tensor.dl().device != mine) {
            return Err(Error::value(format!(
                "a tensor is on CUDA device {} but the communicator on {}",
                region.tensor.dl().device.device_id,
                mine.device_id
            )));
        }
        Ok(raw.cast())
    }

    /// Makes NCCL call `name` on this communicator's GPU, enqueued on `stream` after checking
    /// that it and `regions` are on that GPU; `call` gets the communicator and the raw stream.
    /// A non-blocking call still in progress is waited for (see [`Interrupts`]).
    fn enqueue(
        &self,
        name: &str,
        stream: &dyn DeviceStream,
        regions: &[&Region],
        call: impl FnOnce(RawComm, RawStream) -> NcclResult,
    ) -> Result<()> {
        let raw = self.stream(stream, regions)?;
        let _ctx = self.device.enter()?;
        self.handle
            .call(name, &mut beginning(&*self.interrupts), |comm| {
                call(comm, raw)
            })
    }

    /// Enqueues `collective` (`ncclAllReduce` or `ncclBroadcast`, named `name`, with `arg` its
    /// reduction or root) of `count` elements from `send` into `recv`.
    fn enqueue_collective(
        &self,
        name: &str,
        collective: CollectiveFn,
        (send, recv): (&Region, &Region),
        count: usize,
        arg: c_int,
        stream: &dyn DeviceStream,
    ) -> Result<()> {
        self.enqueue(name, stream, &[send, recv], |comm, raw| {
            // SAFETY: both regions lie in live CUDA tensors of this GPU (the regions hold them;
            // frees are ordered after this stream's work), and hold `count` elements of the
            // type they give.
            unsafe {
                collective(
                    send.ptr(),
                    recv.ptr(),
                    count,
                    recv.nccl_type,
                    arg,
                    comm,
                    raw,
                )
            }
        })
    }

    /// Enqueues `ncclAllReduce` of `send` into `recv` (the same count and type) on `stream`.
    pub fn all_reduce(
        &self,
        send: &Region,
        recv: &Region,
        op: RedOp,
        stream: &dyn DeviceStream,
    ) -> Result<()> {
        let all_reduce = self.nccl().api.all_reduce;
        let regions = (send, recv);
        self.enqueue_collective(
            "ncclAllReduce",
            all_reduce,
            regions,
            send.count,
            op as c_int,
            stream,
        )
    }

    /// Enqueues `ncclAllGather`: every rank's `send` into its place in `recv`.
    pub fn all_gather(
        &self,
        send: &Region,
        recv: &Region,
        stream: &dyn DeviceStream,
    ) -> Result<()> {
        self.enqueue("ncclAllGather", stream, &[send, recv], |comm, raw| {
            // SAFETY: as in `enqueue_collective`; `recv` holds `size * send.count` elements.
            unsafe {
                (self.nccl().api.all_gather)(
                    send.ptr(),
                    recv.ptr(),
                    send.count,
                    send.nccl_type,
                    comm,
                    raw,
                )
            }
        })
    }

    /// Enqueues `ncclBroadcast` of the root's `send` into every rank's `recv` (`send` is read
    /// only on the root, and may be `None` elsewhere).
    pub fn broadcast(
        &self,
        send: Option<&Region>,
        recv: &Region,
        root: usize,
        stream: &dyn DeviceStream,
    ) -> Result<()> {
        let regions = (send.unwrap_or(recv), recv);
        let root = as_int(root, "root")?;
        let broadcast = self.nccl().api.broadcast;
        self.enqueue_collective(
            "ncclBroadcast",
            broadcast,
            regions,
            recv.count,
            root,
            stream,
        )
    }

    /// Enqueues `ncclSend` of `buf` to rank `peer`.
    pub fn send(&self, buf: &Region, peer: usize, stream: &dyn DeviceStream) -> Result<()> {
        let peer = as_int(peer, "peer")?;
        self.enqueue("ncclSend", stream, &[buf], |comm, raw| {
            // SAFETY: as in `enqueue_collective`.
            unsafe { (self.nccl().api.send)(buf.ptr(), buf.count, buf.nccl_type, peer, comm, raw) }
        })
    }

    /// Enqueues `ncclRecv` into `buf` from rank `peer`.
    pub fn recv(&self, buf: &Region, peer: usize, stream: &dyn DeviceStream) -> Result<()> {
        let peer = as_int(peer, "peer")?;
        self.enqueue("ncclRecv", stream, &[buf], |comm, raw| {
            // SAFETY: as in `enqueue_collective`.
            unsafe { (self.nccl().api.recv)(buf.ptr(), buf.count, buf.nccl_type, peer, comm, raw) }
        })
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        self.in_context(|handle| handle.close(&mut beginning(&*self.interrupts)));
    }
}

/// The check of a wait for a communicator being joined: `interrupts`' check, and then the
/// `timeout`, counted from now.
pub(super) fn joining(
    interrupts: &dyn Interrupts,
    timeout: Option<Duration>,
) -> impl FnMut() -> Result<()> + '_ {
    let mut interrupted = beginning(interrupts);
    let deadline = timeout.map(|t| (Instant::now() + t, t));
    move || {
        interrupted()?;
        match deadline {
            Some((at, t)) if Instant::now() >= at => Err(Error::runtime(format!(
                "the other ranks did not join within the timeout ({} ms)",
                t.as_millis()
            ))),
            _ => Ok(()),
        }
    }
}

fn as_int(value: usize, what: &str) -> Result<c_int> {
    c_int::try_from(value).map_err(|_| Error::value(format!("NCCL: {what} {value} is too large")))
}
