//! NCCL, loaded at run time: the project builds and runs without it, and only the collectives
//! of sessions whose workers are on GPUs need it.
//!
//! Which library: the path in the environment variable `DISCOVM_NCCL_LIBRARY` when it is set
//! (only that one is tried), else `libnccl.so.2` (the name the runtime packages and the
//! `nvidia-nccl-cu*` Python wheels ship), then `libnccl.so` (the development symlink), from the
//! dynamic loader's search path. A copy already loaded into the process (by PyTorch, say) is
//! found by its name without a search. A Python wheel's copy lies in the environment's
//! `site-packages/nvidia/nccl/lib/`, outside the search path: point the variable at it.
//!
//! The handful of entry points used here are declared with NCCL's C ABI (`ncclUniqueId` is 128
//! bytes passed by value to `ncclCommInitRank`; `ncclResult_t`, `ncclDataType_t` and
//! `ncclRedOp_t` are C enums, i.e. `int`). `ncclCommSplit` (NCCL 2.18), `ncclGetLastError`
//! (2.13), and `ncclCommInitRankConfig` with `ncclCommFinalize` (2.14) are optional. Every call
//! returns `ncclResult_t`; a failure becomes a `RuntimeError` with NCCL's description.
//! Collectives are enqueued on the CUDA stream under a VM stream ([`super::DeviceStream`]), so
//! they are ordered with the VM's copies on that stream.
//!
//! Non-blocking communicators: joining a communicator is collective, and so is its
//! finalization: a rank waits there for every other. With `ncclCommInitRankConfig` the
//! communicators are made non-blocking (`blocking = 0`): NCCL does such work in the background,
//! a call may return `ncclInProgress`, and the caller polls `ncclCommGetAsyncError` until it is
//! no longer in progress before the next call on that communicator. Those waits poll with a
//! back-off and ask the communicator's [`Interrupts`] between polls, so the owner of the
//! communicator (a worker that is shutting down, or was given new communicators) can give up;
//! joining also gives up after its timeout. A wait that ends without NCCL finishing, or with an
//! error, aborts the communicator (`ncclCommAbort`), as NCCL requires. Without
//! `ncclCommInitRankConfig` (NCCL before 2.14) the communicators are blocking: joining waits
//! in NCCL for every rank, with no way out.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use super::DeviceStream;
use super::cuda::{self, CudaDevice};
use super::dynlib::{self, symbol};
use super::poll::poll_until;
use crate::abi::{DLDataType, KDL_BFLOAT, KDL_CUDA, KDL_FLOAT, KDL_INT, KDL_UINT};
use crate::object::tensor::dtype_name;
use crate::object::{Error, ErrorKind, Result, Tensor};

/// The environment variable that names the NCCL library to load (a path).
pub const LIBRARY_VAR: &str = "DISCOVM_NCCL_LIBRARY";

/// The names tried, in order, when the variable is not set.
const DEFAULT_NAMES: [&str; 2] = ["libnccl.so.2", "libnccl.so"];

type NcclResult = c_int;
type RawComm = *mut c_void;
type RawStream = *mut c_void;

const NCCL_SUCCESS: NcclResult = 0;
/// `ncclInProgress`: a non-blocking operation has not finished yet.
const NCCL_IN_PROGRESS: NcclResult = 7;

/// The bytes every rank of a new communicator starts from (`ncclUniqueId`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    internal: [c_char; UniqueId::BYTES],
}

impl UniqueId {
    pub const BYTES: usize = 128;

    pub fn as_bytes(&self) -> [u8; Self::BYTES] {
        self.internal.map(|b| b as u8)
    }

    /// The id in `bytes`, which must be one id's worth.
    pub fn from_bytes(bytes: &[u8]) -> Result<UniqueId> {
        let bytes: &[u8; Self::BYTES] = bytes.try_into().map_err(|_| {
            Error::value(format!(
                "an NCCL unique id has {} bytes, not {}",
                Self::BYTES,
                bytes.len()
            ))
        })?;
        Ok(UniqueId {
            internal: bytes.map(|b| b as c_char),
        })
    }
}

/// NCCL's communicator configuration (`ncclConfig_t`) as NCCL 2.14, the first version with
/// one, lays it out. NCCL reads the first `size` bytes and keeps its defaults for the fields
/// later versions added.
#[repr(C)]
struct Config {
    size: usize,
    magic: u32,
    version: u32,
    blocking: c_int,
    cga_cluster_size: c_int,
    min_ctas: c_int,
    max_ctas: c_int,
    net_name: *const c_char,
}

const _: () = assert!(std::mem::size_of::<Config>() == 40);

impl Config {
    /// `NCCL_API_MAGIC`: marks a configuration made as NCCL's initializer makes it.
    const MAGIC: u32 = 0xcafe_beef;
    /// `NCCL_VERSION(2, 14, 0)`: the layout above.
    const VERSION: u32 = 2 * 10_000 + 14 * 100;
    /// `NCCL_CONFIG_UNDEF_INT`: NCCL's default.
    const UNDEF: c_int = c_int::MIN;

    /// A non-blocking communicator, with NCCL's defaults for everything else.
    fn non_blocking() -> Config {
        Config {
            size: std::mem::size_of::<Config>(),
            magic: Self::MAGIC,
            version: Self::VERSION,
            blocking: 0,
            cga_cluster_size: Self::UNDEF,
            min_ctas: Self::UNDEF,
            max_ctas: Self::UNDEF,
            net_name: std::ptr::null(),
        }
    }
}

/// The entry points of non-blocking communicators (NCCL 2.14).
#[derive(Clone, Copy)]
struct NonBlockingApi {
    comm_init_rank_config:
        unsafe extern "C" fn(*mut RawComm, c_int, UniqueId, c_int, *mut Config) -> NcclResult,
    comm_finalize: unsafe extern "C" fn(RawComm) -> NcclResult,
}

/// The signature of `ncclAllReduce` and `ncclBroadcast`: the int before the communicator is
/// the reduction or the root.
type CollectiveFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    RawComm,
    RawStream,
) -> NcclResult;

/// NCCL's entry points, resolved once.
struct Api {
    get_version: unsafe extern "C" fn(*mut c_int) -> NcclResult,
    get_unique_id: unsafe extern "C" fn(*mut UniqueId) -> NcclResult,
    comm_init_rank: unsafe extern "C" fn(*mut RawComm, c_int, UniqueId, c_int) -> NcclResult,
    comm_split: Option<
        unsafe extern "C" fn(RawComm, c_int, c_int, *mut RawComm, *mut c_void) -> NcclResult,
    >,
    /// `None` before NCCL 2.14: communicators are blocking.
    non_blocking: Option<NonBlockingApi>,
    comm_destroy: unsafe extern "C" fn(RawComm) -> NcclResult,
    comm_abort: unsafe extern "C" fn(RawComm) -> NcclResult,
    comm_get_async_error: unsafe extern "C" fn(RawComm, *mut NcclResult) -> NcclResult,
    get_error_string: unsafe extern "C" fn(NcclResult) -> *const c_char,
    get_last_error: Option<unsafe extern "C" fn(RawComm) -> *const c_char>,
    all_reduce: CollectiveFn,
    all_gather: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        RawComm,
        RawStream,
    ) -> NcclResult,
    broadcast: CollectiveFn,
    send:
        unsafe extern "C" fn(*const c_void, usize, c_int, c_int, RawComm, RawStream) -> NcclResult,
    recv: unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, RawComm, RawStream) -> NcclResult,
    group_start: unsafe extern "C" fn() -> NcclResult,
    group_end: unsafe extern "C" fn() -> NcclResult,
}

/// A loaded NCCL library.
pub struct Nccl {
    api: Api,
    /// The name or path it was loaded under.
    name: String,
    /// `ncclGetVersion`'s code.
    version: c_int,
}

impl Nccl {
    /// Loads the library `name` (a file name the loader searches for, or a path) and resolves
    /// its entry points. The library stays loaded for the life of the process.
    pub fn open(name: &str) -> std::result::Result<Nccl, String> {
        // NCCL keeps its initialisers free of side effects beyond its own state.
        let handle = dynlib::open(name)?;
        let lacks = |symbol: &CStr| format!("{name} lacks {}", symbol.to_string_lossy());
        macro_rules! required {
            ($symbol:literal) => {
                // SAFETY: the handle is live (never closed) and the field's type is the
                // function's C declaration.
                unsafe { symbol(handle, $symbol) }.ok_or_else(|| lacks($symbol))?
            };
        }
        let api = Api {
            get_version: required!(c"ncclGetVersion"),
            get_unique_id: required!(c"ncclGetUniqueId"),
            comm_init_rank: required!(c"ncclCommInitRank"),
            // SAFETY: as in `required!`.
            comm_split: unsafe { symbol(handle, c"ncclCommSplit") },
            // SAFETY: as in `required!`.
            non_blocking: unsafe {
                symbol(handle, c"ncclCommInitRankConfig")
                    .zip(symbol(handle, c"ncclCommFinalize"))
                    .map(|(comm_init_rank_config, comm_finalize)| NonBlockingApi {
                        comm_init_rank_config,
                        comm_finalize,
                    })
            },
            comm_destroy: required!(c"ncclCommDestroy"),
            comm_abort: required!(c"ncclCommAbort"),
            comm_get_async_error: required!(c"ncclCommGetAsyncError"),
            get_error_string: required!(c"ncclGetErrorString"),
            // SAFETY: as in `required!`.
            get_last_error: unsafe { symbol(handle, c"ncclGetLastError") },
            all_reduce: required!(c"ncclAllReduce"),
            all_gather: required!(c"ncclAllGather"),
            broadcast: required!(c"ncclBroadcast"),
            send: required!(c"ncclSend"),
            recv: required!(c"ncclRecv"),
            group_start: required!(c"ncclGroupStart"),
            group_end: required!(c"ncclGroupEnd"),
        };
        let mut version = 0;
        // SAFETY: writes one int.
        let code = unsafe { (api.get_version)(&mut version) };
        if code != NCCL_SUCCESS {
            return Err(format!("{name}: ncclGetVersion failed with code {code}"));
        }
        Ok(Nccl {
            api,
            name: name.to_string(),
            version,
        })
    }

    /// The library the process uses: loaded once, from `DISCOVM_NCCL_LIBRARY` or the default
    /// names; `DeviceUnavailable` saying what was tried and why it failed.
    pub fn shared() -> Result<&'static Nccl> {
        static LOADED: OnceLock<std::result::Result<Nccl, String>> = OnceLock::new();
        LOADED
            .get_or_init(|| {
                let names: Vec<String> = match std::env::var(LIBRARY_VAR) {
                    Ok(path) if !path.is_empty() => vec![path],
                    _ => DEFAULT_NAMES.map(String::from).to_vec(),
                };
                let mut failures = Vec::new();
                for name in &names {
                    match Nccl::open(name) {
                        Ok(nccl) => return Ok(nccl),
                        Err(why) => failures.push(why),
                    }
                }
                Err(format!(
                    "NCCL could not be loaded ({}); install NCCL 2 or set {LIBRARY_VAR} to the \
                     path of libnccl.so.2",
                    failures.join("; ")
                ))
            })
            .as_ref()
            .map_err(|why| Error::new(ErrorKind::DeviceUnavailable, why.clone()))
    }

    /// The library, when there is also a GPU to run it on; else `DeviceUnavailable` naming
    /// what is missing (a GPU, NCCL, or both) and why.
    pub fn with_gpu() -> Result<&'static Nccl> {
        let nccl = Nccl::shared();
        let gpus = cuda::device_count();
        if gpus > 0
            && let Ok(nccl) = nccl
        {
            return Ok(nccl);
        }
        let mut missing = Vec::new();
        if gpus == 0 {
            missing.push(cuda::unavailable(0).message);
        }
        if let Err(error) = nccl {
            missing.push(error.message);
        }
        Err(Error::new(ErrorKind::DeviceUnavailable, missing.join("; ")))
    }

    /// The version, as `major.minor.patch`.
    pub fn version(&self) -> String {
        let code = self.version;
        // NCCL_VERSION_CODE is major*10000 + minor*100 + patch since 2.9, major*1000 + ... before.
        let (major, rest) = if code >= 10_000 {
            (code / 10_000, code % 10_000)
        } else {
            (code / 1_000, code % 1_000)
        };
        format!("{major}.{}.{}", rest / 100, rest % 100)
    }

    /// The name or path the library was loaded under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A new unique id (`ncclGetUniqueId`), for the ranks of one new communicator.
    pub fn unique_id(&self) -> Result<UniqueId> {
        let mut id = UniqueId {
            internal: [0; UniqueId::BYTES],
        };
        // SAFETY: writes one ncclUniqueId.
        self.check(
            "ncclGetUniqueId",
            unsafe { (self.api.get_unique_id)(&mut id) },
            None,
        )?;
        Ok(id)
    }

    /// `Ok` for success, else a `RuntimeError` with NCCL's description (and the
    /// communicator's last error, where NCCL keeps one).
    fn check(&self, what: &str, code: NcclResult, comm: Option<RawComm>) -> Result<()> {
        if code == NCCL_SUCCESS {
            return Ok(());
        }
        Err(Error::runtime(format!(
            "NCCL: {what} failed: {}",
            self.describe(code, comm)
        )))
    }

    /// NCCL's description of result `code`, with its number and the communicator's last error
    /// where NCCL keeps one.
    fn describe(&self, code: NcclResult, comm: Option<RawComm>) -> String {
        let text = |p: *const c_char| {
            // SAFETY: NCCL returns NULL or a terminated string it owns; copied at once.
            (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        };
        // SAFETY: takes any result code.
        let description = text(unsafe { (self.api.get_error_string)(code) })
            .unwrap_or_else(|| "unknown error".into());
        let last = self
            .api
            .get_last_error
            // SAFETY: the communicator is NULL or alive (NCCL accepts NULL: the thread's last).
            .and_then(|f| text(unsafe { f(comm.unwrap_or(std::ptr::null_mut())) }))
            .filter(|t| !t.is_empty())
            .map(|t| format!(" ({t})"))
            .unwrap_or_default();
        format!("{description} (code {code}){last}")
    }
}

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
fn nccl_type(dtype: DLDataType) -> Result<c_int> {
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
/// one thread at a time on a communicator.
pub struct Comm {
    handle: CommHandle,
    device: Arc<CudaDevice>,
    size: usize,
    /// What may end its waits.
    interrupts: Arc<dyn Interrupts>,
}

/// A communicator handle.
struct Handle(RawComm);

// SAFETY: an NCCL communicator may be used from any thread, one at a time (the lock in
// `CommHandle` sees to that), and destroyed from any thread.
unsafe impl Send for Handle {}

/// A communicator's handle under its lock, with the library that made it: what the calls that
/// need no GPU of their own (its state, giving it up) work on. The handle is NULL once the
/// communicator was aborted; NCCL never sees it again.
struct CommHandle {
    nccl: &'static Nccl,
    raw: Mutex<Handle>,
}

impl CommHandle {
    fn new(nccl: &'static Nccl, raw: RawComm) -> CommHandle {
        CommHandle {
            nccl,
            raw: Mutex::new(Handle(raw)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Handle> {
        self.raw.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The locked handle, or a `RuntimeError` when the communicator was aborted.
    fn live(&self) -> Result<MutexGuard<'_, Handle>> {
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
    fn async_error(&self) -> Result<()> {
        self.in_progress().map(drop)
    }

    /// Takes the handle out, for its destruction; `None` when it was taken before. Every later
    /// call fails (or, for [`CommHandle::async_error`], passes) without reaching NCCL.
    fn take(&self) -> Option<RawComm> {
        let raw = std::mem::replace(&mut self.lock().0, std::ptr::null_mut());
        (!raw.is_null()).then_some(raw)
    }

    /// Aborts the communicator (`ncclCommAbort`) unless that was done before. The caller has
    /// entered its GPU: NCCL frees the communicator in its own context.
    fn abort(&self) {
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
    fn call(
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
    fn group(
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
    fn join(
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
    fn close(&self, check: &mut dyn FnMut() -> Result<()>) {
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
fn joining(
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

/// The stand-in library's build, shared with the integration tests.
#[cfg(test)]
#[path = "../../tests/support/nccl_stub.rs"]
mod nccl_stub;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_ids_are_128_bytes_and_round_trip() {
        assert_eq!(std::mem::size_of::<UniqueId>(), 128);
        let bytes: Vec<u8> = (0..128u8).map(|b| b.wrapping_mul(3)).collect();
        let id = UniqueId::from_bytes(&bytes).unwrap();
        assert_eq!(id.as_bytes().to_vec(), bytes);
        let err = UniqueId::from_bytes(&bytes[..127]).err().unwrap();
        assert_eq!(err.message, "an NCCL unique id has 128 bytes, not 127");
    }

    #[test]
    fn element_types_and_reductions_follow_nccl_numbering() {
        let t = |code, bits| nccl_type(DLDataType::new(code, bits, 1)).unwrap();
        assert_eq!(
            [
                t(KDL_INT, 8),
                t(KDL_UINT, 8),
                t(KDL_INT, 32),
                t(KDL_UINT, 32),
                t(KDL_INT, 64),
                t(KDL_UINT, 64),
                t(KDL_FLOAT, 16),
                t(KDL_FLOAT, 32),
                t(KDL_FLOAT, 64),
                t(KDL_BFLOAT, 16),
            ],
            [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
        );
        let err = nccl_type(DLDataType::new(KDL_FLOAT, 32, 4)).unwrap_err();
        assert_eq!(err.message, "NCCL has no element type for dtype float32x4");
        assert_eq!(
            [RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min, RedOp::Avg].map(|op| op as i32),
            [0, 1, 2, 3, 4]
        );
    }

    #[test]
    fn a_missing_library_says_what_was_tried() {
        let why = Nccl::open("/nonexistent/libnccl.so.2").err().unwrap();
        assert!(why.contains("/nonexistent/libnccl.so.2"), "{why}");
        let why = Nccl::open("libc.so.6").err().unwrap();
        assert_eq!(why, "libc.so.6 lacks ncclGetVersion");
    }

    #[test]
    fn without_a_gpu_or_nccl_the_message_names_what_is_missing() {
        let Err(error) = Nccl::with_gpu() else {
            return; // a machine with both
        };
        assert_eq!(error.kind, ErrorKind::DeviceUnavailable);
        if cuda::device_count() == 0 {
            assert!(error.message.starts_with("CUDA device 0: "), "{error}");
        }
        if Nccl::shared().is_err() {
            assert!(
                error.message.contains("NCCL could not be loaded (")
                    && error.message.ends_with(
                        "install NCCL 2 or set DISCOVM_NCCL_LIBRARY to the path of libnccl.so.2"
                    ),
                "{error}"
            );
        }
    }

    /// The stand-in library (`tests/support/nccl_stub.c`), compiled for this process, loaded,
    /// and its handle for the stub-only entry points.
    fn stub() -> (&'static Nccl, *mut c_void) {
        let library = std::env::temp_dir().join(format!(
            "discovm-nccl-stub-{}-{:?}.so",
            std::process::id(),
            std::thread::current().id()
        ));
        nccl_stub::build(&library);
        let path = library.to_str().expect("a UTF-8 path");
        let nccl: &'static Nccl = Box::leak(Box::new(Nccl::open(path).expect("the stub loads")));
        // Another reference to the library just loaded; it stays loaded for the process.
        let handle = dynlib::open(path).expect("the stub loads again");
        let _ = std::fs::remove_file(&library);
        (nccl, handle)
    }

    /// An entry point of the stand-in library `lib`, of C type `F`.
    fn stub_fn<F: Copy>(lib: *mut c_void, name: &CStr) -> F {
        // SAFETY: a live handle; each use names a function of the stub with `F` its
        // declaration.
        unsafe { symbol(lib, name) }.unwrap_or_else(|| panic!("the stub has {name:?}"))
    }

    /// Reads a counter of stub communicator `comm` (`ncclStubPolls`, `ncclStubAborts`, ...).
    fn count(lib: *mut c_void, name: &CStr, comm: RawComm) -> c_int {
        let read: unsafe extern "C" fn(RawComm) -> c_int = stub_fn(lib, name);
        // SAFETY: a stub communicator, alive until the test frees it.
        unsafe { read(comm) }
    }

    /// Sets how the stub's next operation goes (`ncclStubPlan`): in progress for `polls` polls
    /// (-1: for ever), then `result`.
    fn plan(lib: *mut c_void, polls: c_int, result: NcclResult) {
        let plan: unsafe extern "C" fn(c_int, c_int) = stub_fn(lib, c"ncclStubPlan");
        // SAFETY: sets two ints of this test's copy of the stub.
        unsafe { plan(polls, result) };
    }

    /// A new stub communicator (`ncclStubCommNew`), freed by [`free`].
    fn stub_comm(lib: *mut c_void) -> RawComm {
        let new: unsafe extern "C" fn() -> RawComm = stub_fn(lib, c"ncclStubCommNew");
        // SAFETY: no arguments.
        unsafe { new() }
    }

    fn free(lib: *mut c_void, comm: RawComm) {
        let free: unsafe extern "C" fn(RawComm) = stub_fn(lib, c"ncclStubCommFree");
        // SAFETY: nothing uses the stub communicator any more.
        unsafe { free(comm) };
    }

    /// A check that counts its calls and gives up with `why` at call `at` (never if `None`).
    fn give_up_at(at: Option<usize>, why: Error, calls: &mut usize) -> impl FnMut() -> Result<()> {
        move || {
            *calls += 1;
            match at {
                Some(at) if *calls >= at => Err(why.clone()),
                _ => Ok(()),
            }
        }
    }

    /// Joins a stub communicator as `Comm::init_rank` does with a non-blocking NCCL, as rank
    /// 1 of 2 on CUDA device 0.
    fn join(
        nccl: &'static Nccl,
        check: &mut dyn FnMut() -> Result<()>,
    ) -> (Result<CommHandle>, RawComm) {
        let api = nccl
            .api
            .non_blocking
            .expect("the stub has ncclCommInitRankConfig");
        let mut config = Config::non_blocking();
        let mut made: RawComm = std::ptr::null_mut();
        let id = UniqueId {
            internal: [0; UniqueId::BYTES],
        };
        let start = |raw: &mut RawComm| {
            // SAFETY: the stub writes one handle and copies the configuration.
            let code = unsafe { (api.comm_init_rank_config)(raw, 2, id, 1, &mut config) };
            made = *raw;
            code
        };
        let who = "rank 1 of 2 on CUDA device 0";
        let joined = CommHandle::join(nccl, "ncclCommInitRankConfig", who, start, check);
        (joined, made)
    }

    #[test]
    fn a_non_blocking_join_is_polled_until_nccl_made_the_communicator() {
        let (nccl, lib) = stub();
        plan(lib, 5, NCCL_SUCCESS);
        let mut checks = 0;
        let (joined, raw) = join(nccl, &mut give_up_at(None, Error::runtime(""), &mut checks));
        let handle = joined.expect("joined after the polls");
        assert_eq!(checks, 5, "a check between two polls");
        assert_eq!(count(lib, c"ncclStubPolls", raw), 6);
        assert_eq!(count(lib, c"ncclStubAborts", raw), 0);
        assert!(handle.live().is_ok());

        // The configuration: NCCL 2.14's layout, non-blocking, NCCL's defaults elsewhere.
        let size: unsafe extern "C" fn() -> usize = stub_fn(lib, c"ncclStubConfigSize");
        let int = |name| stub_fn::<unsafe extern "C" fn() -> u32>(lib, name);
        // SAFETY: they read what the stub kept of the last configuration.
        unsafe {
            assert_eq!(size(), 40);
            assert_eq!(int(c"ncclStubConfigMagic")(), 0xcafe_beef);
            assert_eq!(int(c"ncclStubConfigVersion")(), 21400);
            assert_eq!(int(c"ncclStubConfigBlocking")(), 0);
            assert_eq!(int(c"ncclStubConfigRestUndefined")(), 1);
        }
        free(lib, raw);
    }

    #[test]
    fn a_join_that_never_finishes_is_aborted_when_its_owner_gives_up() {
        let (nccl, lib) = stub();
        plan(lib, -1, NCCL_SUCCESS);
        let shutdown = Error::new(ErrorKind::SessionClosed, "the session was shut down");
        let mut checks = 0;
        let (joined, raw) = join(nccl, &mut give_up_at(Some(100), shutdown, &mut checks));
        let error = joined.err().expect("given up");
        assert_eq!(error.kind, ErrorKind::SessionClosed);
        assert_eq!(
            error.message,
            "NCCL: rank 1 of 2 on CUDA device 0 could not join its communicator: the session was \
             shut down; the half-made communicator was aborted"
        );
        assert_eq!(checks, 100);
        assert_eq!(count(lib, c"ncclStubAborts", raw), 1);
        free(lib, raw);

        // The timeout of a join, after its interrupts.
        struct Never;
        impl Interrupts for Never {
            fn mark(&self) -> u64 {
                0
            }
            fn check(&self, _: u64) -> Result<()> {
                Ok(())
            }
        }
        let started = Instant::now();
        let (joined, raw) = join(nccl, &mut joining(&Never, Some(Duration::from_millis(20))));
        assert!(started.elapsed() >= Duration::from_millis(20));
        let error = joined.err().expect("timed out");
        assert_eq!(error.kind, ErrorKind::Runtime);
        assert_eq!(
            error.message,
            "NCCL: rank 1 of 2 on CUDA device 0 could not join its communicator: the other ranks \
             did not join within the timeout (20 ms); the half-made communicator was aborted"
        );
        assert_eq!(count(lib, c"ncclStubAborts", raw), 1);
        free(lib, raw);
    }

    #[test]
    fn a_join_that_fails_reports_nccls_error() {
        let (nccl, lib) = stub();
        // NCCL reports the failure after some polls: the half-made communicator is aborted.
        plan(lib, 3, 2);
        let (joined, raw) = join(nccl, &mut || Ok(()));
        let error = joined.err().expect("failed");
        assert_eq!(error.kind, ErrorKind::Runtime);
        assert_eq!(
            error.message,
            "NCCL: rank 1 of 2 on CUDA device 0 could not join its communicator: NCCL reported an \
             asynchronous error: stub: unhandled system error (code 2) (a peer of the stub \
             communicator is gone); the half-made communicator was aborted"
        );
        assert_eq!(count(lib, c"ncclStubAborts", raw), 1);
        free(lib, raw);

        // It fails at once, leaving no communicator.
        plan(lib, 0, 4);
        let (joined, raw) = join(nccl, &mut || panic!("nothing to wait for"));
        assert!(raw.is_null());
        assert_eq!(
            joined.err().expect("failed").message,
            "NCCL: rank 1 of 2 on CUDA device 0 could not join its communicator: \
             ncclCommInitRankConfig failed: stub: other error (code 4) (the stub's group ended \
             badly)"
        );
    }

    /// Makes an `ncclAllReduce` on stub communicator `handle` as `Comm::enqueue` does.
    fn all_reduce(handle: &CommHandle, check: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        let f = handle.nccl.api.all_reduce;
        let none = std::ptr::null_mut();
        // SAFETY: the stub reads none of the pointers.
        handle.call("ncclAllReduce", check, |comm| unsafe {
            f(none, none, 0, 7, 0, comm, none)
        })
    }

    #[test]
    fn a_call_still_in_progress_is_waited_for_before_the_next() {
        let (nccl, lib) = stub();
        let raw = stub_comm(lib);
        let handle = CommHandle::new(nccl, raw);
        plan(lib, 4, NCCL_SUCCESS);
        all_reduce(&handle, &mut || Ok(())).unwrap();
        assert_eq!(count(lib, c"ncclStubPolls", raw), 5);
        plan(lib, 0, NCCL_SUCCESS);
        all_reduce(&handle, &mut || panic!("nothing to wait for")).unwrap();
        assert_eq!(
            count(lib, c"ncclStubEarlyCalls", raw),
            0,
            "no call while NCCL was at the one before"
        );

        // One that fails while in progress is aborted; the next call never reaches NCCL.
        plan(lib, 2, 2);
        let error = all_reduce(&handle, &mut || Ok(())).unwrap_err();
        assert_eq!(
            error.message,
            "NCCL: ncclAllReduce did not finish: NCCL reported an asynchronous error: stub: \
             unhandled system error (code 2) (a peer of the stub communicator is gone); the \
             communicator was aborted"
        );
        assert_eq!(count(lib, c"ncclStubAborts", raw), 1);
        let error = all_reduce(&handle, &mut || Ok(())).unwrap_err();
        assert_eq!(
            error.message,
            "NCCL: the communicator was aborted and can run nothing more"
        );
        free(lib, raw);

        // One NCCL never finishes ends with its wait's check.
        let raw = stub_comm(lib);
        let handle = CommHandle::new(nccl, raw);
        plan(lib, -1, NCCL_SUCCESS);
        let mut checks = 0;
        let replaced = Error::runtime("init_ccl was called again");
        let error = all_reduce(&handle, &mut give_up_at(Some(3), replaced, &mut checks));
        assert_eq!(
            error.unwrap_err().message,
            "NCCL: ncclAllReduce did not finish: init_ccl was called again; the communicator was \
             aborted"
        );
        assert_eq!(count(lib, c"ncclStubAborts", raw), 1);
        free(lib, raw);

        // One whose communicator another thread aborts meanwhile (a watch that gave up).
        let raw = stub_comm(lib);
        let handle = CommHandle::new(nccl, raw);
        plan(lib, -1, NCCL_SUCCESS);
        let abort = &mut || {
            handle.abort();
            Ok(())
        };
        let error = all_reduce(&handle, abort).unwrap_err();
        assert_eq!(
            error.message,
            "NCCL: ncclAllReduce did not finish: it was aborted while NCCL was at it; the \
             communicator was aborted"
        );
        assert_eq!(count(lib, c"ncclStubAborts", raw), 1);
        free(lib, raw);
    }

    #[test]
    fn a_group_end_that_fails_reports_nccls_error_after_the_first_failure() {
        let (nccl, lib) = stub();
        let raw = stub_comm(lib);
        let handle = CommHandle::new(nccl, raw);
        let error = handle.group(|| Ok(()), &mut || Ok(())).unwrap_err();
        assert_eq!(error.kind, ErrorKind::Runtime);
        assert_eq!(
            error.message,
            "NCCL: ncclGroupEnd failed: stub: invalid usage (code 5) (the stub's group ended badly)"
        );
        let error = handle
            .group(|| Err(Error::value("issuing failed")), &mut || Ok(()))
            .unwrap_err();
        assert_eq!(error.message, "issuing failed", "the first failure wins");
        free(lib, raw);
    }

    #[test]
    fn closing_finalizes_a_healthy_communicator_and_aborts_one_that_is_not() {
        let (nccl, lib) = stub();
        let counts = |raw| {
            [
                c"ncclStubFinalizes",
                c"ncclStubDestroys",
                c"ncclStubAborts",
                c"ncclStubEarlyCalls",
            ]
            .map(|name| count(lib, name, raw))
        };
        // Finalized (NCCL at it for a while), then destroyed.
        let raw = stub_comm(lib);
        plan(lib, 3, NCCL_SUCCESS);
        CommHandle::new(nccl, raw).close(&mut || Ok(()));
        assert_eq!(counts(raw), [1, 1, 0, 0]);
        free(lib, raw);

        // A finalization its peers never join ends with its wait's check: aborted.
        let raw = stub_comm(lib);
        plan(lib, -1, NCCL_SUCCESS);
        let mut checks = 0;
        let shutdown = Error::new(ErrorKind::SessionClosed, "the session was shut down");
        CommHandle::new(nccl, raw).close(&mut give_up_at(Some(5), shutdown, &mut checks));
        assert_eq!((counts(raw), checks), ([1, 0, 1, 0], 5));
        free(lib, raw);

        // A communicator that failed is aborted without more.
        let raw = stub_comm(lib);
        let set: unsafe extern "C" fn(RawComm, c_int) = stub_fn(lib, c"ncclStubSetAsyncError");
        // SAFETY: a live stub communicator.
        unsafe { set(raw, 2) };
        CommHandle::new(nccl, raw).close(&mut || panic!("nothing to wait for"));
        assert_eq!(counts(raw), [0, 0, 1, 0]);
        free(lib, raw);
    }

    #[test]
    fn a_communicators_async_error_is_reported_and_an_aborted_one_never_reaches_nccl() {
        let (nccl, lib) = stub();
        let set: unsafe extern "C" fn(RawComm, c_int) = stub_fn(lib, c"ncclStubSetAsyncError");
        let raw = stub_comm(lib);
        let handle = CommHandle::new(nccl, raw);
        handle.async_error().unwrap();
        // SAFETY: the stub communicator is alive until the free below.
        unsafe { set(raw, NCCL_IN_PROGRESS) };
        handle
            .async_error()
            .expect("still setting up is no failure");
        // SAFETY: as above.
        unsafe { set(raw, 2) };
        let error = handle.async_error().unwrap_err();
        assert_eq!(error.kind, ErrorKind::Runtime);
        assert_eq!(
            error.message,
            "NCCL reported an asynchronous error: stub: unhandled system error (code 2) (a peer \
             of the stub communicator is gone)"
        );

        // What `Comm::abort` does once its GPU is entered: the handle goes, then NCCL aborts.
        handle.abort();
        let error = handle.live().err().expect("aborted");
        assert_eq!(
            error.message,
            "NCCL: the communicator was aborted and can run nothing more"
        );
        handle.async_error().expect("nothing more to report");
        handle.abort();
        assert!(handle.take().is_none(), "aborted once");
        assert_eq!(count(lib, c"ncclStubAborts", raw), 1);
        free(lib, raw);
    }

    #[test]
    fn regions_are_compact_cuda_tensors() {
        let host = Tensor::empty(
            &[4],
            DLDataType::new(KDL_FLOAT, 32, 1),
            crate::abi::DLDevice::cpu(),
        )
        .unwrap();
        let err = Region::of(&host).err().unwrap();
        assert_eq!(
            err.message,
            "NCCL works on CUDA tensors (kDLCUDA = 2), not device type 1"
        );
    }
}
