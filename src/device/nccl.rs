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
//! `ncclRedOp_t` are C enums, i.e. `int`). `ncclCommSplit` (NCCL 2.18) and `ncclGetLastError`
//! (2.13) are optional. Every call returns `ncclResult_t`; a failure becomes a `RuntimeError`
//! with NCCL's description. Collectives are enqueued on the CUDA stream under a VM stream
//! ([`super::DeviceStream`]), so they are ordered with the VM's copies on that stream.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use super::DeviceStream;
use super::cuda::{self, CudaDevice};
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

/// NCCL's entry points, resolved once.
struct Api {
    get_version: unsafe extern "C" fn(*mut c_int) -> NcclResult,
    get_unique_id: unsafe extern "C" fn(*mut UniqueId) -> NcclResult,
    comm_init_rank: unsafe extern "C" fn(*mut RawComm, c_int, UniqueId, c_int) -> NcclResult,
    comm_split: Option<
        unsafe extern "C" fn(RawComm, c_int, c_int, *mut RawComm, *mut c_void) -> NcclResult,
    >,
    comm_destroy: unsafe extern "C" fn(RawComm) -> NcclResult,
    comm_abort: unsafe extern "C" fn(RawComm) -> NcclResult,
    comm_get_async_error: unsafe extern "C" fn(RawComm, *mut NcclResult) -> NcclResult,
    get_error_string: unsafe extern "C" fn(NcclResult) -> *const c_char,
    get_last_error: Option<unsafe extern "C" fn(RawComm) -> *const c_char>,
    all_reduce: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        RawComm,
        RawStream,
    ) -> NcclResult,
    all_gather: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        RawComm,
        RawStream,
    ) -> NcclResult,
    broadcast: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        RawComm,
        RawStream,
    ) -> NcclResult,
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

/// The address of `name` in the library `handle`, as a function pointer of type `F`.
///
/// # Safety
/// `handle` is a live `dlopen` handle and `F` is the function pointer type of `name`'s C
/// declaration.
unsafe fn symbol<F: Copy>(handle: *mut c_void, name: &CStr) -> Option<F> {
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>()) };
    // SAFETY: a live handle and a terminated name.
    let address = unsafe { libc::dlsym(handle, name.as_ptr()) };
    // SAFETY: a non-NULL address of that function, reinterpreted as its own pointer type (the
    // sizes match, asserted above).
    (!address.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&address) })
}

/// The loader's last error message.
fn dlerror() -> String {
    // SAFETY: dlerror returns NULL or a terminated message owned by the loader.
    let message = unsafe { libc::dlerror() };
    if message.is_null() {
        return "unknown error".into();
    }
    // SAFETY: as above; copied at once.
    unsafe { CStr::from_ptr(message) }
        .to_string_lossy()
        .into_owned()
}

impl Nccl {
    /// Loads the library `name` (a file name the loader searches for, or a path) and resolves
    /// its entry points. The library stays loaded for the life of the process.
    pub fn open(name: &str) -> std::result::Result<Nccl, String> {
        let c_name = CString::new(name).map_err(|_| format!("{name:?} contains a NUL byte"))?;
        // SAFETY: a terminated name; loading runs the library's initialisers, which NCCL keeps
        // free of side effects beyond its own state.
        let handle = unsafe { libc::dlopen(c_name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(dlerror());
        }
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

    /// Runs `issue` between `ncclGroupStart` and `ncclGroupEnd`: the point-to-point calls it
    /// makes are matched as one operation. The group ends even when `issue` fails.
    pub fn group(&self, issue: impl FnOnce() -> Result<()>) -> Result<()> {
        // SAFETY: no arguments.
        self.check("ncclGroupStart", unsafe { (self.api.group_start)() }, None)?;
        let issued = issue();
        // SAFETY: as above; closes the group opened above.
        let ended = self.check("ncclGroupEnd", unsafe { (self.api.group_end)() }, None);
        issued.and(ended)
    }
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

    /// See [`Comm::async_error`].
    fn async_error(&self) -> Result<()> {
        let comm = self.lock();
        if comm.0.is_null() {
            return Ok(());
        }
        let mut state = NCCL_SUCCESS;
        // SAFETY: a live communicator (under its lock); writes one result code.
        let asked = unsafe { (self.nccl.api.comm_get_async_error)(comm.0, &mut state) };
        self.nccl
            .check("ncclCommGetAsyncError", asked, Some(comm.0))?;
        // ncclInProgress: a non-blocking communicator still setting up, not a failure.
        if state == NCCL_SUCCESS || state == NCCL_IN_PROGRESS {
            return Ok(());
        }
        Err(Error::runtime(format!(
            "NCCL reported an asynchronous error: {}",
            self.nccl.describe(state, Some(comm.0))
        )))
    }

    /// Takes the handle out, for its destruction; `None` when it was taken before. Every later
    /// call fails (or, for [`CommHandle::async_error`], passes) without reaching NCCL.
    fn take(&self) -> Option<RawComm> {
        let raw = std::mem::replace(&mut self.lock().0, std::ptr::null_mut());
        (!raw.is_null()).then_some(raw)
    }
}

impl Comm {
    /// Rank `rank` of a communicator of `size` ranks on CUDA device `device_id`, from the
    /// unique id every rank got. Blocks until every rank has joined (each from its own thread).
    pub fn init_rank(device_id: i32, size: usize, rank: usize, id: &UniqueId) -> Result<Comm> {
        let nccl = Nccl::shared()?;
        let device = CudaDevice::shared(device_id)?;
        let (size_c, rank_c) = (as_int(size, "size")?, as_int(rank, "rank")?);
        // NCCL picks the GPU from the calling thread's current context.
        let _ctx = device.enter()?;
        let mut raw: RawComm = std::ptr::null_mut();
        // SAFETY: writes one communicator handle; the id is passed by value as declared.
        let code = unsafe { (nccl.api.comm_init_rank)(&mut raw, size_c, *id, rank_c) };
        nccl.check("ncclCommInitRank", code, None)?;
        Ok(Comm {
            handle: CommHandle::new(nccl, raw),
            device,
            size,
        })
    }

    /// This rank's part of a new communicator among the ranks that pass the same `color`,
    /// ordered by `key` (`ncclCommSplit`, every rank of this communicator calls it); `None`
    /// when the library has no `ncclCommSplit` (before NCCL 2.18).
    pub fn split(&self, color: usize, key: usize, size: usize) -> Result<Option<Comm>> {
        let Some(split) = self.nccl().api.comm_split else {
            return Ok(None);
        };
        let (color, key) = (as_int(color, "color")?, as_int(key, "key")?);
        let _ctx = self.device.enter()?;
        let comm = self.handle.live()?;
        let mut raw: RawComm = std::ptr::null_mut();
        // SAFETY: a live communicator; writes one handle; a NULL config inherits this one's.
        let code = unsafe { split(comm.0, color, key, &mut raw, std::ptr::null_mut()) };
        self.handle
            .nccl
            .check("ncclCommSplit", code, Some(comm.0))?;
        Ok(Some(Comm {
            handle: CommHandle::new(self.nccl(), raw),
            device: self.device.clone(),
            size,
        }))
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Whether the communicator failed asynchronously (`ncclCommGetAsyncError`: a peer lost,
    /// a network or internal error in a running collective); `Ok` while it is healthy or was
    /// aborted. Cheap: NCCL reads a field of the communicator.
    pub fn async_error(&self) -> Result<()> {
        self.handle.async_error()
    }

    /// Aborts the communicator (`ncclCommAbort`): its kernels stop without waiting for the
    /// peers, and its resources go. Later calls on it fail at once; aborting again, or
    /// dropping it, does nothing more.
    pub fn abort(&self) {
        let Some(raw) = self.handle.take() else {
            return;
        };
        // NCCL frees the communicator in its own context; a failure to enter leaves it be.
        let Ok(_ctx) = self.device.enter() else {
            return;
        };
        // SAFETY: a live communicator, which nothing uses again (its handle is gone).
        unsafe { (self.nccl().api.comm_abort)(raw) };
    }

    /// The loaded library, for its group calls.
    pub fn nccl(&self) -> &'static Nccl {
        self.handle.nccl
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

    /// Makes one NCCL call named `name` on this communicator's GPU, enqueued on `stream` after
    /// checking that it and `regions` are on that GPU; `call` gets the communicator and the raw
    /// stream.
    fn enqueue(
        &self,
        name: &str,
        stream: &dyn DeviceStream,
        regions: &[&Region],
        call: impl FnOnce(RawComm, RawStream) -> NcclResult,
    ) -> Result<()> {
        let raw = self.stream(stream, regions)?;
        let _ctx = self.device.enter()?;
        let comm = self.handle.live()?;
        let code = call(comm.0, raw);
        self.nccl().check(name, code, Some(comm.0))
    }

    /// Enqueues `ncclAllReduce` of `send` into `recv` (the same count and type) on `stream`.
    pub fn all_reduce(
        &self,
        send: &Region,
        recv: &Region,
        op: RedOp,
        stream: &dyn DeviceStream,
    ) -> Result<()> {
        self.enqueue("ncclAllReduce", stream, &[send, recv], |comm, raw| {
            // SAFETY: both regions lie in live CUDA tensors of this GPU (the regions hold them;
            // frees are ordered after this stream's work), `recv` holds `send.count` elements.
            unsafe {
                (self.nccl().api.all_reduce)(
                    send.ptr(),
                    recv.ptr(),
                    send.count,
                    send.nccl_type,
                    op as c_int,
                    comm,
                    raw,
                )
            }
        })
    }

    /// Enqueues `ncclAllGather`: every rank's `send` into its place in `recv`.
    pub fn all_gather(
        &self,
        send: &Region,
        recv: &Region,
        stream: &dyn DeviceStream,
    ) -> Result<()> {
        self.enqueue("ncclAllGather", stream, &[send, recv], |comm, raw| {
            // SAFETY: as in `all_reduce`; `recv` holds `size * send.count` elements.
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
        let send = send.unwrap_or(recv);
        let root = as_int(root, "root")?;
        self.enqueue("ncclBroadcast", stream, &[send, recv], |comm, raw| {
            // SAFETY: as in `all_reduce`.
            unsafe {
                (self.nccl().api.broadcast)(
                    send.ptr(),
                    recv.ptr(),
                    recv.count,
                    recv.nccl_type,
                    root,
                    comm,
                    raw,
                )
            }
        })
    }

    /// Enqueues `ncclSend` of `buf` to rank `peer`.
    pub fn send(&self, buf: &Region, peer: usize, stream: &dyn DeviceStream) -> Result<()> {
        let peer = as_int(peer, "peer")?;
        self.enqueue("ncclSend", stream, &[buf], |comm, raw| {
            // SAFETY: as in `all_reduce`.
            unsafe { (self.nccl().api.send)(buf.ptr(), buf.count, buf.nccl_type, peer, comm, raw) }
        })
    }

    /// Enqueues `ncclRecv` into `buf` from rank `peer`.
    pub fn recv(&self, buf: &Region, peer: usize, stream: &dyn DeviceStream) -> Result<()> {
        let peer = as_int(peer, "peer")?;
        self.enqueue("ncclRecv", stream, &[buf], |comm, raw| {
            // SAFETY: as in `all_reduce`.
            unsafe { (self.nccl().api.recv)(buf.ptr(), buf.count, buf.nccl_type, peer, comm, raw) }
        })
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        // A communicator that failed asynchronously (a peer lost) is aborted, which does not
        // wait for its peers; a healthy one is destroyed after its work; an aborted one is
        // gone already.
        let healthy = self.handle.async_error().is_ok();
        let Some(raw) = self.handle.take() else {
            return;
        };
        let Ok(_ctx) = self.device.enter() else {
            return;
        };
        // SAFETY: the communicator is ours and nothing uses it any more.
        unsafe {
            if healthy {
                (self.nccl().api.comm_destroy)(raw);
            } else {
                (self.nccl().api.comm_abort)(raw);
            }
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
        let c_path = CString::new(path).unwrap();
        // SAFETY: a terminated path of the library just loaded (this only takes another
        // reference to it); it stays loaded for the process.
        let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!handle.is_null(), "{}", dlerror());
        let _ = std::fs::remove_file(&library);
        (nccl, handle)
    }

    #[test]
    fn a_communicators_async_error_is_reported_and_an_aborted_one_never_reaches_nccl() {
        let (nccl, lib) = stub();
        // SAFETY: a live handle; the types are the stub's C declarations.
        let (new, set, aborts, free) = unsafe {
            (
                symbol::<unsafe extern "C" fn() -> RawComm>(lib, c"ncclStubCommNew").unwrap(),
                symbol::<unsafe extern "C" fn(RawComm, c_int)>(lib, c"ncclStubSetAsyncError")
                    .unwrap(),
                symbol::<unsafe extern "C" fn(RawComm) -> c_int>(lib, c"ncclStubAborts").unwrap(),
                symbol::<unsafe extern "C" fn(RawComm)>(lib, c"ncclStubCommFree").unwrap(),
            )
        };
        // SAFETY: no arguments; a fresh stub communicator.
        let raw = unsafe { new() };
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
        let taken = handle.take().expect("a live handle");
        assert_eq!(taken, raw);
        // SAFETY: the stub communicator, taken out of the handle.
        unsafe { (nccl.api.comm_abort)(taken) };
        let error = handle.live().err().expect("aborted");
        assert_eq!(
            error.message,
            "NCCL: the communicator was aborted and can run nothing more"
        );
        handle.async_error().expect("nothing more to report");
        assert!(handle.take().is_none(), "aborted once");
        // SAFETY: as above.
        assert_eq!(unsafe { aborts(raw) }, 1);
        // SAFETY: nothing uses the stub communicator any more.
        unsafe { free(raw) };
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
