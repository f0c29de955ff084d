//! Loading NCCL: which library, and its entry points with NCCL's C ABI. Every entry point is
//! resolved once, when the library loads; those of newer NCCL versions are optional, so what a
//! library lacks is known before any call.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::OnceLock;

use crate::device::cuda;
use crate::device::dynlib::{self, symbol};
use crate::object::{Error, ErrorKind, Result};

/// The environment variable that names the NCCL library to load (a path).
pub const LIBRARY_VAR: &str = "DISCOVM_NCCL_LIBRARY";

/// The names tried, in order, when the variable is not set.
const DEFAULT_NAMES: [&str; 2] = ["libnccl.so.2", "libnccl.so"];

pub(super) type NcclResult = c_int;
pub(super) type RawComm = *mut c_void;
pub(super) type RawStream = *mut c_void;

pub(super) const NCCL_SUCCESS: NcclResult = 0;
/// `ncclInProgress`: a non-blocking operation has not finished yet.
pub(super) const NCCL_IN_PROGRESS: NcclResult = 7;

/// The bytes every rank of a new communicator starts from (`ncclUniqueId`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    pub(super) internal: [c_char; UniqueId::BYTES],
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
pub(super) struct Config {
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
    pub(super) fn non_blocking() -> Config {
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
pub(super) struct NonBlockingApi {
    pub(super) comm_init_rank_config:
        unsafe extern "C" fn(*mut RawComm, c_int, UniqueId, c_int, *mut Config) -> NcclResult,
    pub(super) comm_finalize: unsafe extern "C" fn(RawComm) -> NcclResult,
}

/// The signature of `ncclAllReduce` and `ncclBroadcast`: the int before the communicator is
/// the reduction or the root.
pub(super) type CollectiveFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    RawComm,
    RawStream,
) -> NcclResult;

/// NCCL's entry points, resolved once, declared with NCCL's C ABI: `ncclUniqueId` is 128 bytes
/// passed by value to `ncclCommInitRank`; `ncclResult_t`, `ncclDataType_t` and `ncclRedOp_t`
/// are C enums, i.e. `int`. Every call returns `ncclResult_t`; a failure becomes a
/// `RuntimeError` with NCCL's description ([`Nccl::check`]). `ncclCommSplit` (NCCL 2.18),
/// `ncclGetLastError` (2.13), and `ncclCommInitRankConfig` with `ncclCommFinalize` (2.14) are
/// optional.
pub(super) struct Api {
    pub(super) get_version: unsafe extern "C" fn(*mut c_int) -> NcclResult,
    pub(super) get_unique_id: unsafe extern "C" fn(*mut UniqueId) -> NcclResult,
    pub(super) comm_init_rank:
        unsafe extern "C" fn(*mut RawComm, c_int, UniqueId, c_int) -> NcclResult,
    pub(super) comm_split: Option<
        unsafe extern "C" fn(RawComm, c_int, c_int, *mut RawComm, *mut c_void) -> NcclResult,
    >,
    /// `None` before NCCL 2.14: communicators are blocking.
    pub(super) non_blocking: Option<NonBlockingApi>,
    pub(super) comm_destroy: unsafe extern "C" fn(RawComm) -> NcclResult,
    pub(super) comm_abort: unsafe extern "C" fn(RawComm) -> NcclResult,
    pub(super) comm_get_async_error: unsafe extern "C" fn(RawComm, *mut NcclResult) -> NcclResult,
    pub(super) get_error_string: unsafe extern "C" fn(NcclResult) -> *const c_char,
    pub(super) get_last_error: Option<unsafe extern "C" fn(RawComm) -> *const c_char>,
    pub(super) all_reduce: CollectiveFn,
    pub(super) all_gather: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        RawComm,
        RawStream,
    ) -> NcclResult,
    pub(super) broadcast: CollectiveFn,
    pub(super) send:
        unsafe extern "C" fn(*const c_void, usize, c_int, c_int, RawComm, RawStream) -> NcclResult,
    pub(super) recv:
        unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, RawComm, RawStream) -> NcclResult,
    pub(super) group_start: unsafe extern "C" fn() -> NcclResult,
    pub(super) group_end: unsafe extern "C" fn() -> NcclResult,
}

/// A loaded NCCL library.
pub struct Nccl {
    pub(super) api: Api,
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
    ///
    /// Which library: the path in `DISCOVM_NCCL_LIBRARY` when it is set (only that one is
    /// tried), else `libnccl.so.2` (the name the runtime packages and the `nvidia-nccl-cu*`
    /// Python wheels ship), then `libnccl.so` (the development symlink), from the dynamic
    /// loader's search path. A copy already loaded into the process (by PyTorch, say) is found
    /// by its name without a search. A Python wheel's copy lies in the environment's
    /// `site-packages/nvidia/nccl/lib/`, outside the search path: point the variable at it.
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
    pub(super) fn check(&self, what: &str, code: NcclResult, comm: Option<RawComm>) -> Result<()> {
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
    pub(super) fn describe(&self, code: NcclResult, comm: Option<RawComm>) -> String {
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
