//! Gloo, PyTorch's CPU collective library, through the plugin `libdiscovm_gloo.so`
//! (`plugins/gloo`, built where Debian's libgloo-dev is installed), loaded at run time: the
//! library builds and runs without Gloo, and only collectives between nodes need it.
//!
//! A [`Mesh`] is one rank's Gloo context: [`Mesh::open`] binds a TCP pair for every peer,
//! whose addresses the caller carries to the peers (the session does it over its own
//! authenticated connections), and [`Mesh::connect`] joins them. Every operation waits at
//! most the mesh's timeout and reports Gloo's error text; [`Mesh::abort`], from any thread,
//! ends the waits at once.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::OnceLock;
use std::time::Duration;

use super::dynlib::{self, symbol};
use crate::object::{Error, ErrorKind, Result};

/// The environment variable that names the plugin (a path).
pub const PLUGIN_VAR: &str = "DISCOVM_GLOO_PLUGIN";
/// The plugin's file name, next to the library.
pub const PLUGIN_FILE: &str = "libdiscovm_gloo.so";
/// The version of the plugin's C ABI this library speaks.
const ABI_VERSION: c_int = 3;
/// Room for Gloo's error messages.
const ERR_CAP: usize = 1024;
/// Room for one pair's address (a socket address and a sequence number).
const ADDRESS_CAP: usize = 512;

/// A collective with a root: context, input, output, bytes per rank, root, error buffer.
type Rooted = unsafe extern "C" fn(
    *mut c_void,
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    *mut c_char,
    usize,
) -> c_int;

type Reduce = unsafe extern "C" fn(*mut c_void, *mut c_void, *const c_void, *const c_void, usize);

struct Api {
    open: unsafe extern "C" fn(*const c_char, c_int, c_int, i64, *mut c_char, usize) -> *mut c_void,
    address:
        unsafe extern "C" fn(*mut c_void, c_int, *mut c_char, usize, *mut c_char, usize) -> i64,
    connect:
        unsafe extern "C" fn(*mut c_void, c_int, *const c_char, usize, *mut c_char, usize) -> c_int,
    allreduce: unsafe extern "C" fn(
        *mut c_void,
        *const c_void,
        *mut c_void,
        usize,
        usize,
        Reduce,
        *mut c_void,
        *mut c_char,
        usize,
    ) -> c_int,
    allgather: unsafe extern "C" fn(
        *mut c_void,
        *const c_void,
        *mut c_void,
        usize,
        *mut c_char,
        usize,
    ) -> c_int,
    broadcast:
        unsafe extern "C" fn(*mut c_void, *mut c_void, usize, c_int, *mut c_char, usize) -> c_int,
    scatter: Rooted,
    gather: Rooted,
    barrier: unsafe extern "C" fn(*mut c_void, *mut c_char, usize) -> c_int,
    send:
        unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int, *mut c_char, usize) -> c_int,
    recv: unsafe extern "C" fn(*mut c_void, *mut c_void, usize, c_int, *mut c_char, usize) -> c_int,
    abort: unsafe extern "C" fn(*mut c_void, *const c_char),
    close: unsafe extern "C" fn(*mut c_void),
}

impl Api {
    fn load(name: &str) -> std::result::Result<Api, String> {
        let handle = dynlib::open(name)?;
        let lacks = |symbol: &CStr| format!("{name} lacks {}", symbol.to_string_lossy());
        macro_rules! required {
            ($symbol:literal) => {
                // SAFETY: the handle is live (never closed) and the field's type is the
                // function's C declaration in the plugin.
                unsafe { symbol(handle, $symbol) }.ok_or_else(|| lacks($symbol))?
            };
        }
        let version: unsafe extern "C" fn() -> c_int = required!(c"dvm_gloo_abi_version");
        // SAFETY: takes nothing, returns an int.
        let found = unsafe { version() };
        if found != ABI_VERSION {
            return Err(format!(
                "{name} speaks version {found} of the plugin ABI, this library version \
                 {ABI_VERSION}: rebuild the plugin with this library"
            ));
        }
        Ok(Api {
            open: required!(c"dvm_gloo_open"),
            address: required!(c"dvm_gloo_address"),
            connect: required!(c"dvm_gloo_connect"),
            allreduce: required!(c"dvm_gloo_allreduce"),
            allgather: required!(c"dvm_gloo_allgather"),
            broadcast: required!(c"dvm_gloo_broadcast"),
            scatter: required!(c"dvm_gloo_scatter"),
            gather: required!(c"dvm_gloo_gather"),
            barrier: required!(c"dvm_gloo_barrier"),
            send: required!(c"dvm_gloo_send"),
            recv: required!(c"dvm_gloo_recv"),
            abort: required!(c"dvm_gloo_abort"),
            close: required!(c"dvm_gloo_close"),
        })
    }

    /// The plugin the process uses, loaded once: `$DISCOVM_GLOO_PLUGIN`, else
    /// `libdiscovm_gloo.so` next to this library, else wherever the loader finds it.
    /// `DeviceUnavailable` says what was tried, why it failed, and what to install.
    fn shared() -> Result<&'static Api> {
        static LOADED: OnceLock<std::result::Result<Api, String>> = OnceLock::new();
        LOADED
            .get_or_init(|| {
                let names: Vec<String> = match std::env::var(PLUGIN_VAR) {
                    Ok(path) if !path.is_empty() => vec![path],
                    _ => dynlib::library_file()
                        .and_then(|file| Some(file.parent()?.join(PLUGIN_FILE)))
                        .and_then(|path| path.to_str().map(String::from))
                        .into_iter()
                        .chain([PLUGIN_FILE.to_string()])
                        .collect(),
                };
                let mut failures = Vec::new();
                for name in &names {
                    match Api::load(name) {
                        Ok(api) => return Ok(api),
                        Err(why) => failures.push(why),
                    }
                }
                Err(format!(
                    "the Gloo plugin could not be loaded ({}); install Gloo (Debian: apt-get \
                     install libgloo-dev) and build the plugin with `make lib`, or set \
                     {PLUGIN_VAR} to the path of {PLUGIN_FILE}",
                    failures.join("; ")
                ))
            })
            .as_ref()
            .map_err(|why| Error::new(ErrorKind::DeviceUnavailable, why.clone()))
    }
}

/// Whether the plugin loads here (`DeviceUnavailable` saying why not).
pub fn available() -> Result<()> {
    Api::shared().map(|_| ())
}

/// Runs a plugin call that reports failure with a nonzero code and a message.
fn checked(what: &str, call: impl FnOnce(*mut c_char, usize) -> bool) -> Result<()> {
    let mut err = vec![0 as c_char; ERR_CAP];
    if call(err.as_mut_ptr(), ERR_CAP) {
        return Ok(());
    }
    // SAFETY: the plugin wrote a terminated message into the buffer (or left it zeroed).
    let message = unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy();
    Err(Error::runtime(format!("Gloo: {what} failed: {message}")))
}

/// How to combine two arrays of elements: `out[i] = a[i] (op) b[i]` for `n` elements.
pub type Combine<'a> = &'a dyn Fn(*mut u8, *const u8, *const u8, usize);

unsafe extern "C" fn combine(
    user: *mut c_void,
    out: *mut c_void,
    a: *const c_void,
    b: *const c_void,
    n: usize,
) {
    // SAFETY: `user` is the `Combine` that `Mesh::allreduce` passed, alive for its call.
    let f = unsafe { &*(user as *const Combine<'_>) };
    f(out.cast(), a.cast(), b.cast(), n);
}

/// One rank's Gloo context.
pub struct Mesh {
    api: &'static Api,
    raw: *mut c_void,
    pub rank: usize,
    pub size: usize,
}

// SAFETY: a Gloo context may be used from any thread, one operation at a time (the owner's
// `&mut self` or single worker thread guarantees that).
unsafe impl Send for Mesh {}
// SAFETY: as above: the session's worker runs one operation at a time, and `abort`, the one
// call another thread makes, is safe beside it.
unsafe impl Sync for Mesh {}

impl Mesh {
    /// Rank `rank` of `size`, with a TCP pair for every peer bound on `host` (an address of
    /// this machine the peers reach); every later operation waits at most `timeout`.
    pub fn open(host: &str, rank: usize, size: usize, timeout: Duration) -> Result<Mesh> {
        let api = Api::shared()?;
        let c_host = CString::new(host)
            .map_err(|_| Error::value(format!("host {host:?} contains a NUL byte")))?;
        let mut raw = std::ptr::null_mut();
        checked(
            &format!("binding rank {rank} of {size} on {host}"),
            |err, cap| {
                // SAFETY: a terminated host and an error buffer of `cap` bytes.
                raw = unsafe {
                    (api.open)(
                        c_host.as_ptr(),
                        rank as c_int,
                        size as c_int,
                        timeout.as_millis().min(i64::MAX as u128) as i64,
                        err,
                        cap,
                    )
                };
                !raw.is_null()
            },
        )?;
        Ok(Mesh {
            api,
            raw,
            rank,
            size,
        })
    }

    /// The address of this rank's pair for `peer`, for `peer` to connect to.
    pub fn address(&self, peer: usize) -> Result<Vec<u8>> {
        let mut bytes = vec![0u8; ADDRESS_CAP];
        let mut len = 0;
        checked(&format!("the address for rank {peer}"), |err, cap| {
            // SAFETY: a live context and buffers of the sizes given.
            len = unsafe {
                (self.api.address)(
                    self.raw,
                    peer as c_int,
                    bytes.as_mut_ptr().cast(),
                    bytes.len(),
                    err,
                    cap,
                )
            };
            len >= 0
        })?;
        bytes.truncate(len as usize);
        Ok(bytes)
    }

    /// Connects this rank's pair for `peer` to `address`, `peer`'s pair for this rank; waits
    /// for the peer.
    pub fn connect(&self, peer: usize, address: &[u8]) -> Result<()> {
        checked(&format!("connecting to rank {peer}"), |err, cap| {
            // SAFETY: a live context, an address of `len` bytes and an error buffer.
            unsafe {
                (self.api.connect)(
                    self.raw,
                    peer as c_int,
                    address.as_ptr().cast(),
                    address.len(),
                    err,
                    cap,
                ) == 0
            }
        })
    }

    /// Reduces `count` elements of `elem_size` bytes at `input` across the ranks into `output`
    /// (which may be `input`).
    ///
    /// # Safety
    /// `input` and `output` hold `count * elem_size` bytes nobody else touches during the
    /// call.
    pub unsafe fn allreduce(
        &self,
        input: *const u8,
        output: *mut u8,
        count: usize,
        elem_size: usize,
        how: Combine<'_>,
    ) -> Result<()> {
        let user = &how as *const Combine<'_> as *mut c_void;
        checked("allreduce", |err, cap| {
            // SAFETY: by the contract; `user` outlives the call.
            unsafe {
                (self.api.allreduce)(
                    self.raw,
                    input.cast(),
                    output.cast(),
                    count,
                    elem_size,
                    combine,
                    user,
                    err,
                    cap,
                ) == 0
            }
        })
    }

    /// Every rank's `len` bytes at `input`, by rank, into `output`.
    ///
    /// # Safety
    /// `input` holds `len` bytes, `output` `len * size` bytes nobody else touches meanwhile.
    pub unsafe fn allgather(&self, input: *const u8, output: *mut u8, len: usize) -> Result<()> {
        checked("allgather", |err, cap| {
            // SAFETY: by the contract.
            unsafe {
                (self.api.allgather)(self.raw, input.cast(), output.cast(), len, err, cap) == 0
            }
        })
    }

    /// Rank `root`'s `len` bytes at `buf` into every rank's `buf`.
    ///
    /// # Safety
    /// `buf` holds `len` bytes nobody else touches meanwhile.
    pub unsafe fn broadcast(&self, buf: *mut u8, len: usize, root: usize) -> Result<()> {
        checked("broadcast", |err, cap| {
            // SAFETY: by the contract.
            unsafe { (self.api.broadcast)(self.raw, buf.cast(), len, root as c_int, err, cap) == 0 }
        })
    }

    /// Part `r` of `root`'s `input` (`len` bytes each) into rank `r`'s `output`.
    ///
    /// # Safety
    /// On the root `input` holds `len * size` bytes (elsewhere it is not read); `output` holds
    /// `len` bytes nobody else touches meanwhile.
    pub unsafe fn scatter(
        &self,
        input: *const u8,
        output: *mut u8,
        len: usize,
        root: usize,
    ) -> Result<()> {
        // SAFETY: forwarded.
        unsafe { self.rooted("scatter", self.api.scatter, input, output, len, root) }
    }

    /// Every rank's `len` bytes at `input`, by rank, into `root`'s `output`.
    ///
    /// # Safety
    /// `input` holds `len` bytes; on the root `output` holds `len * size` bytes nobody else
    /// touches meanwhile (elsewhere it is not written).
    pub unsafe fn gather(
        &self,
        input: *const u8,
        output: *mut u8,
        len: usize,
        root: usize,
    ) -> Result<()> {
        // SAFETY: forwarded.
        unsafe { self.rooted("gather", self.api.gather, input, output, len, root) }
    }

    /// Runs `call`, a collective with a root.
    ///
    /// # Safety
    /// As for the collective `call` is.
    unsafe fn rooted(
        &self,
        what: &str,
        call: Rooted,
        input: *const u8,
        output: *mut u8,
        len: usize,
        root: usize,
    ) -> Result<()> {
        checked(what, |err, cap| {
            // SAFETY: by the caller's contract.
            unsafe {
                call(
                    self.raw,
                    input.cast(),
                    output.cast(),
                    len,
                    root as c_int,
                    err,
                    cap,
                ) == 0
            }
        })
    }

    pub fn barrier(&self) -> Result<()> {
        checked("barrier", |err, cap| {
            // SAFETY: a live context and an error buffer.
            unsafe { (self.api.barrier)(self.raw, err, cap) == 0 }
        })
    }

    /// Sends `len` bytes at `buf` to `peer`.
    ///
    /// # Safety
    /// `buf` holds `len` bytes that stay unchanged during the call.
    pub unsafe fn send(&self, buf: *const u8, len: usize, peer: usize) -> Result<()> {
        checked(&format!("sending to rank {peer}"), |err, cap| {
            // SAFETY: by the contract.
            unsafe { (self.api.send)(self.raw, buf.cast(), len, peer as c_int, err, cap) == 0 }
        })
    }

    /// Receives `len` bytes from `peer` into `buf`.
    ///
    /// # Safety
    /// `buf` holds `len` bytes nobody else touches during the call.
    pub unsafe fn recv(&self, buf: *mut u8, len: usize, peer: usize) -> Result<()> {
        checked(&format!("receiving from rank {peer}"), |err, cap| {
            // SAFETY: by the contract.
            unsafe { (self.api.recv)(self.raw, buf.cast(), len, peer as c_int, err, cap) == 0 }
        })
    }
}

impl Mesh {
    /// Fails every operation waiting on the mesh, now and later, with `why` (from any thread;
    /// the peers' operations with this rank fail too, as its connections close).
    pub fn abort(&self, why: &str) {
        let why = CString::new(why.replace('\0', " ")).expect("NUL bytes replaced");
        // SAFETY: a live context and a terminated message; the plugin catches everything.
        unsafe { (self.api.abort)(self.raw, why.as_ptr()) };
    }
}

impl Drop for Mesh {
    fn drop(&mut self) {
        // SAFETY: the context from `open`, closed once.
        unsafe { (self.api.close)(self.raw) };
    }
}
