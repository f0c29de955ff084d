//! The CUDA driver, reached through cudarc with the library loaded at run time: the project
//! builds and runs on machines without CUDA. The driver is probed once, before any other cudarc
//! call (cudarc panics when libcuda is missing), and every cudarc call runs inside
//! `catch_unwind`, so no CUDA failure aborts the process or reaches C as a panic.
//!
//! The backend: [`CudaDevice`] works in the device's primary context, which every call first
//! makes current on the calling thread (so any thread may use a device without setting anything
//! up); a context the thread already had (a user's thread working on another GPU) is put back
//! afterwards, and a session worker binds its device for good. Its streams are blocking CUDA
//! streams, ordered with the legacy default stream as Disco's are (kernels a worker's functions
//! launch there come before the copies and collectives queued after them, and the other way
//! round), whose copies are queued with the `cuMemcpy*Async` calls on raw pointers (between
//! two GPUs' memory `cuMemcpyPeerAsync`); markers are CUDA events (`record` = `cuEventRecord`, `wait` =
//! `cuStreamWaitEvent`: one stream waits for another on the GPU, never on the host). A thread
//! whose device work may wait forever for another thread's (an NCCL collective) waits on the
//! host by polling an event, and can give up ([`DeviceStream::synchronize_checked`]).
//!
//! Device memory is stream-ordered where the GPU has memory pools (every GPU since Volta with a
//! recent driver): it comes from the device's pool (`cuMemAllocAsync` on a stream of its own,
//! waited for before the memory is handed out), and a free is queued with `cuMemFreeAsync` on a
//! second stream after that stream waited, on the GPU, for the work issued so far on every
//! stream of this library (the VM keeps a tensor until the GPU passed its instructions, but
//! work the VM does not see may use the memory too: a kernel a callback launched) and on the
//! device's legacy default stream (where a DLPack consumer such as PyTorch queues its work by
//! default). No free blocks the host, and the pool is told not to hand out memory whose free is
//! still queued (an allocation, waited for on the host, would otherwise wait for every stream).
//! A GPU without memory pools falls back to `cuMemAlloc`, and a free there synchronizes the
//! context.
//!
//! Host memory: large copies from and to pageable host memory go through the driver's own
//! page-locked staging (a host-to-device copy returns once the host bytes were taken, a
//! device-to-host copy once they arrived), which is what a VM copy needs from a caller's buffer.
//! `kDLCUDAHost` tensors ([`PinnedHost`]) are page-locked host memory from `cuMemHostAlloc`
//! (portable, cached: not write-combined, since the host reads it too), copied directly and
//! asynchronously; a free records an event on every stream of this library and every open
//! device's legacy default stream and releases the memory once all have passed, checked at
//! every page-locked allocation and free and after every stream sync (no host wait). Small
//! device-to-host copies into `kDLCPU` memory (the VM's small reads) land in a page-locked
//! buffer of the stream (flags 0) and are copied out after a stream sync, which is the driver's
//! fast path.

use std::any::Any as StdAny;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use cudarc::driver::CudaContext;
use cudarc::driver::result::{self, DriverError};
use cudarc::driver::sys::{self, CUresult};

use super::poll::{self, poll_until};
use super::{Device, DeviceStream, Marker, MemPtr, is_host_memory};
use crate::abi::{DLDevice, KDL_CPU, KDL_CUDA, KDL_CUDA_HOST};
use crate::object::{Error, ErrorKind, Result};

/// What the probe found: the number of devices, or why there are none.
fn probe() -> &'static std::result::Result<i32, String> {
    static PROBE: OnceLock<std::result::Result<i32, String>> = OnceLock::new();
    PROBE.get_or_init(|| {
        // SAFETY: only tries to load the driver library; never panics.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err("the CUDA driver library (libcuda.so) could not be loaded".into());
        }
        match catch_unwind(AssertUnwindSafe(cudarc::driver::CudaContext::device_count)) {
            Ok(Ok(count)) => Ok(count),
            Ok(Err(DriverError(CUresult::CUDA_ERROR_NO_DEVICE))) => Ok(0),
            Ok(Err(error)) => Err(format!("the CUDA driver failed to start: {error}")),
            Err(_) => Err("the CUDA driver library lacks an entry point this library needs".into()),
        }
    })
}

/// The number of CUDA devices: 0 without a driver or without a GPU.
pub fn device_count() -> i32 {
    probe().as_ref().map_or(0, |&count| count)
}

/// Why a CUDA device cannot be used here: `DeviceUnavailable` with a message that says why.
pub fn unavailable(device_id: i32) -> Error {
    let why = match probe() {
        Err(why) => why.clone(),
        Ok(0) => "the CUDA driver found no GPU".to_string(),
        Ok(count) if !(0..*count).contains(&device_id) => {
            format!("CUDA device {device_id} is out of range ({count} devices)")
        }
        Ok(_) => "the device could not be opened".to_string(),
    };
    Error::new(
        ErrorKind::DeviceUnavailable,
        format!("CUDA device {device_id}: {why}"),
    )
}

/// Runs one driver call (or a few) so that a cudarc panic (a missing symbol, an assertion)
/// comes back as an error, and a driver error as `RuntimeError` naming what was being done.
fn driver<T>(what: &str, call: impl FnOnce() -> std::result::Result<T, DriverError>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(call)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(Error::runtime(format!(
            "CUDA: {what} failed: {}",
            describe(error)
        ))),
        Err(panic) => {
            let detail = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("no message");
            Err(Error::new(
                ErrorKind::DeviceUnavailable,
                format!("CUDA: {what}: the driver library could not serve the call ({detail})"),
            ))
        }
    }
}

/// A driver error's name and, when the driver can say, its description (asking the driver
/// may itself fail: the error's `Display` calls into the library).
fn describe(error: DriverError) -> String {
    let code = error.0;
    catch_unwind(AssertUnwindSafe(|| error.to_string()))
        .map(|text| format!("{code:?}: {text}"))
        .unwrap_or_else(|_| format!("{code:?}"))
}

/// One GPU: its primary context (the one the CUDA runtime, PyTorch and TVM use), retained for
/// the life of the process.
pub struct CudaDevice {
    id: i32,
    ctx: Arc<CudaContext>,
    /// How device memory is allocated and freed in stream order; None on a GPU without memory
    /// pools.
    pool: Option<PoolStreams>,
}

/// The streams of stream-ordered device memory (see the module docs). They live as long as
/// their device, which is the life of the process.
struct PoolStreams {
    /// Allocations are made on this stream and waited for before the memory is handed out.
    alloc: sys::CUstream,
    /// Frees are queued here, after every stream's earlier work.
    free: sys::CUstream,
    /// Recorded on the device's legacy default stream before a free.
    legacy_fence: sys::CUevent,
}

// SAFETY: CUDA streams and events may be used from any thread once their context is current
// there (every use enters it first).
unsafe impl Send for PoolStreams {}
// SAFETY: as above.
unsafe impl Sync for PoolStreams {}

/// The legacy default stream of the current context (`CU_STREAM_LEGACY` in the driver's
/// header), which synchronizes with the context's blocking streams.
const LEGACY_STREAM: sys::CUstream = 1 as sys::CUstream;

impl PoolStreams {
    /// The streams of device memory of the current context's device, or None when the GPU has
    /// no memory pools.
    fn open(device: sys::CUdevice) -> std::result::Result<Option<PoolStreams>, DriverError> {
        let pools = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED;
        // SAFETY: `device` is the device of the current context.
        if unsafe { result::device::get_attribute(device, pools) }? == 0 {
            return Ok(None);
        }
        // The pool may not hand out memory whose free is still queued by making the allocating
        // stream wait for the freeing one: that stream waits for every stream of this library,
        // and an allocation waited for on the host could then wait for a collective that
        // waits for the allocating thread.
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        let mut no = 0i32;
        // SAFETY: `device` is the current context's; the attribute takes an int.
        unsafe {
            sys::cuDeviceGetDefaultMemPool(&mut pool, device).result()?;
            sys::cuMemPoolSetAttribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES,
                (&raw mut no).cast(),
            )
            .result()?;
        }
        let stream = || result::stream::create(result::stream::StreamKind::NonBlocking);
        Ok(Some(PoolStreams {
            alloc: stream()?,
            free: stream()?,
            legacy_fence: result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?,
        }))
    }
}

/// Waits until the work queued so far on CUDA device `device_id`'s legacy default stream has
/// finished, and with it the earlier work of the device's blocking streams: how a session
/// worker's sync covers the kernels its functions launched there. A plain
/// `cuStreamSynchronize`, unless the thread's waits are watched (`poll::watch_this_thread`):
/// then the wait polls an event, calls the watch's check between polls and gives up with its
/// error.
pub fn synchronize_default_stream(device_id: i32) -> Result<()> {
    let device = CudaDevice::shared(device_id)?;
    match poll::this_threads_check() {
        Some(mut check) => {
            let marker = CudaMarker::new(&device)?;
            marker.record_on_default_stream()?;
            marker.wait_polling(&mut *check)?;
        }
        None => {
            let _ctx = device.enter()?;
            // SAFETY: the legacy stream of the context just made current.
            driver("synchronizing the default stream", || unsafe {
                result::stream::synchronize(LEGACY_STREAM)
            })?;
        }
    }
    free_retired_pinned();
    Ok(())
}

/// The devices opened so far; each stays open for the life of the process.
static DEVICES: Mutex<Vec<Arc<CudaDevice>>> = Mutex::new(Vec::new());

fn open_devices() -> Vec<Arc<CudaDevice>> {
    lock(&DEVICES).clone()
}

impl CudaDevice {
    /// The shared backend of CUDA device `device_id`, or `DeviceUnavailable` saying why.
    pub fn shared(device_id: i32) -> Result<Arc<CudaDevice>> {
        if !(0..device_count()).contains(&device_id) {
            return Err(unavailable(device_id));
        }
        let mut devices = lock(&DEVICES);
        if let Some(device) = devices.iter().find(|d| d.id == device_id) {
            return Ok(device.clone());
        }
        let what = format!("opening device {device_id}");
        let unusable = |e: Error| Error::new(ErrorKind::DeviceUnavailable, e.message);
        // Opening the device makes its context current; a context the thread had stays.
        let previous = driver(&what, || {
            result::init()?;
            result::ctx::get_current()
        })
        .map_err(unusable)?;
        let ctx = driver(&what, || CudaContext::new(device_id as usize)).map_err(unusable)?;
        let restore = Entered(previous.filter(|&p| p != ctx.cu_ctx()));
        let pool = match driver(&what, || PoolStreams::open(ctx.cu_device())) {
            Ok(pool) => pool,
            Err(error) => {
                // Releasing the context makes it current; the thread's own comes back after.
                drop(ctx);
                drop(restore);
                return Err(unusable(error));
            }
        };
        let device = Arc::new(CudaDevice {
            id: device_id,
            ctx,
            pool,
        });
        devices.push(device.clone());
        Ok(device)
    }

    /// Makes this device's context the calling thread's current one (every driver call below
    /// runs in it; a thread that never touched CUDA has none).
    pub fn bind(&self) -> Result<()> {
        driver("binding the context to the thread", || {
            self.ctx.bind_to_thread()
        })
    }

    /// Makes this device's context current for the driver calls of one operation; the guard
    /// puts back another context the calling thread had (a user's thread may work on another
    /// GPU), and leaves this one current on a thread that had none.
    pub(super) fn enter(&self) -> Result<Entered> {
        let ours = self.ctx.cu_ctx();
        let previous = driver("reading the thread's context", result::ctx::get_current)?;
        match previous {
            Some(other) if other != ours => {
                // SAFETY: `ours` is the retained primary context, alive for the process.
                driver("binding the context to the thread", || unsafe {
                    result::ctx::set_current(ours)
                })?;
                Ok(Entered(Some(other)))
            }
            Some(_) => Ok(Entered(None)),
            None => {
                self.bind()?;
                Ok(Entered(None))
            }
        }
    }

    pub(super) fn dl(&self) -> DLDevice {
        DLDevice {
            device_type: KDL_CUDA,
            device_id: self.id,
        }
    }

    /// Queues the free of `ptr` on the pool's free stream after the work issued so far on
    /// every stream of this library and on this device's legacy default stream. The caller
    /// entered this device's context.
    fn free_in_order(&self, pool: &PoolStreams, ptr: sys::CUdeviceptr) -> Result<()> {
        for queue in live_queues() {
            // A stream that cannot be fenced (no memory for the wait, a broken context) is
            // waited for on the host instead; if that fails too, its context runs nothing more.
            if queue.fence(pool.free).is_err() {
                let _ = queue.queue.synchronize();
            }
        }
        // SAFETY: the pool's event and stream live as long as the device; the legacy stream
        // is the current context's.
        driver(
            "ordering a free after the legacy default stream",
            || unsafe {
                result::event::record(pool.legacy_fence, LEGACY_STREAM)?;
                result::stream::wait_event(
                    pool.free,
                    pool.legacy_fence,
                    sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                )
            },
        )?;
        // SAFETY: from the pool (`allocate`); every use of it was issued before the waits
        // above, as the caller of `free` promises.
        driver("freeing device memory", || unsafe {
            result::free_async(ptr, pool.free)
        })
    }
}

/// The context a thread had before [`CudaDevice::enter`], put back when this goes.
pub(super) struct Entered(Option<sys::CUcontext>);

impl Drop for Entered {
    fn drop(&mut self) {
        if let Some(previous) = self.0 {
            // SAFETY: the thread's own context a moment ago, which its owner keeps alive.
            let _ = driver("restoring the thread's context", || unsafe {
                result::ctx::set_current(previous)
            });
        }
    }
}

impl Device for CudaDevice {
    fn dl_device(&self) -> DLDevice {
        self.dl()
    }

    fn allocate(&self, nbytes: usize) -> Result<NonNull<u8>> {
        let _ctx = self.enter()?;
        let what = format!("allocating {nbytes} bytes on device {}", self.id);
        let ptr = match &self.pool {
            // SAFETY: the pool's stream is alive; once it is synchronized the memory may be
            // used on any stream.
            Some(pool) => driver(&what, || unsafe {
                let ptr = result::malloc_async(pool.alloc, nbytes.max(1))?;
                result::stream::synchronize(pool.alloc)?;
                Ok(ptr)
            })?,
            // SAFETY: the context is current; the pointer is only used as this device's memory.
            None => driver(&what, || unsafe { result::malloc_sync(nbytes.max(1)) })?,
        };
        NonNull::new(ptr as usize as *mut u8)
            .ok_or_else(|| Error::runtime(format!("CUDA: {what} returned NULL")))
    }

    unsafe fn free(&self, ptr: NonNull<u8>, _nbytes: usize) {
        // A failure here has nobody to go to; the memory is then left to the driver.
        let Ok(_ctx) = self.enter() else {
            return;
        };
        let raw = ptr.as_ptr() as usize as sys::CUdeviceptr;
        match &self.pool {
            Some(pool) => {
                let _ = self.free_in_order(pool, raw);
            }
            None => {
                let _ = driver("synchronizing before a free", result::ctx::synchronize);
                // SAFETY: from `allocate` on this context, as the caller promises; no work uses
                // it once the context finished.
                let _ = driver("freeing device memory", || unsafe {
                    result::free_sync(raw)
                });
            }
        }
    }

    fn bind_thread(&self) -> Result<()> {
        self.bind()
    }

    fn new_stream(&self) -> Result<Box<dyn DeviceStream>> {
        let device = Self::shared(self.id)?;
        let _ctx = self.enter()?;
        // A blocking stream: ordered with the legacy default stream, where kernels go by
        // default (a worker's functions launch theirs there), as streams are in Disco.
        let raw = driver("creating a stream", || {
            result::stream::create(result::stream::StreamKind::Default)
        })?;
        let queue = Queue { device, raw };
        let fence = queue.new_event()?;
        let queue = Arc::new(QueueWithFence { queue, fence });
        register(&queue);
        Ok(Box::new(CudaStream {
            queue,
            staging: Mutex::new(None),
        }))
    }
}

/// Page-locked host memory (`kDLCUDAHost`): host memory the CPU reads and writes directly and
/// every GPU copies to and from without staging, from `cuMemHostAlloc` with
/// `CU_MEMHOSTALLOC_PORTABLE` (page-locked for every context; not write-combined). Its streams
/// are host streams. A free is released (`cuMemFreeHost`) once the GPUs passed the work issued
/// before it on every CUDA stream of this library and on every open device's legacy default
/// stream (any of them may still copy to or from the memory): see `free_retired_pinned`.
pub struct PinnedHost {
    /// The device whose context allocates (device 0; the memory serves every GPU).
    device: Arc<CudaDevice>,
}

impl PinnedHost {
    /// The one page-locked host device, or `DeviceUnavailable` when there is no GPU.
    pub fn shared() -> Result<Arc<PinnedHost>> {
        static PINNED: OnceLock<Arc<PinnedHost>> = OnceLock::new();
        if let Some(pinned) = PINNED.get() {
            return Ok(pinned.clone());
        }
        let device = CudaDevice::shared(0).map_err(|e| {
            Error::new(
                e.kind,
                format!("page-locked host memory needs a GPU: {}", e.message),
            )
        })?;
        Ok(PINNED
            .get_or_init(|| Arc::new(PinnedHost { device }))
            .clone())
    }
}

/// Page-locked memory freed while work issued before the free may still use it.
struct Retired {
    ptr: usize,
    /// Events recorded at the free on every stream that may still use the memory.
    fences: Vec<CudaMarker>,
}

static RETIRED: Mutex<Vec<Retired>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Events recorded now on every CUDA stream of this library and on every open device's legacy
/// default stream: once all have passed, the GPUs finished the work issued so far. A stream
/// that cannot take an event (no memory for one, a broken context) is waited for on the host
/// instead; if that fails too its context can run nothing more.
fn fences_everywhere() -> Vec<CudaMarker> {
    let mut fences = Vec::new();
    for queue in live_queues() {
        let queue = &queue.queue;
        match queue.new_event().and_then(|event| {
            queue.record(&event)?;
            Ok(event)
        }) {
            Ok(event) => fences.push(event),
            Err(_) => {
                let _ = queue.synchronize();
            }
        }
    }
    for device in open_devices() {
        match CudaMarker::new(&device).and_then(|event| {
            event.record_on_default_stream()?;
            Ok(event)
        }) {
            Ok(event) => fences.push(event),
            Err(_) => {
                let _ = synchronize_default_stream(device.id);
            }
        }
    }
    fences
}

/// Releases the freed page-locked memory whose fences have all passed: at every allocation and
/// free of page-locked memory and after every synchronization of a CUDA stream, so memory
/// freed before a sync is back with the driver after it.
fn free_retired_pinned() {
    let passed: Vec<Retired> = {
        let mut retired = lock(&RETIRED);
        if retired.is_empty() {
            return;
        }
        let (passed, waiting) = std::mem::take(&mut *retired)
            .into_iter()
            .partition(|r| r.fences.iter().all(CudaMarker::passed));
        *retired = waiting;
        passed
    };
    if passed.is_empty() {
        return;
    }
    // Memory was retired, so the page-locked device (device 0's context) exists.
    let Ok(pinned) = PinnedHost::shared() else {
        return;
    };
    let Ok(_ctx) = pinned.device.enter() else {
        return;
    };
    for retired in passed {
        // SAFETY: from `cuMemHostAlloc` (`allocate`), freed by its owner; the GPU work
        // issued before that has finished (every fence passed).
        let _ = driver("freeing page-locked host memory", || unsafe {
            result::free_host(retired.ptr as *mut std::ffi::c_void)
        });
    }
}

impl Device for PinnedHost {
    fn dl_device(&self) -> DLDevice {
        DLDevice {
            device_type: KDL_CUDA_HOST,
            device_id: 0,
        }
    }

    fn allocate(&self, nbytes: usize) -> Result<NonNull<u8>> {
        free_retired_pinned();
        let _ctx = self.device.enter()?;
        let what = format!("allocating {nbytes} bytes of page-locked host memory");
        // SAFETY: a context is current; portable, cached page-locked memory.
        let ptr = driver(&what, || unsafe {
            result::malloc_host(nbytes.max(1), sys::CU_MEMHOSTALLOC_PORTABLE)
        })?;
        let ptr = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| Error::runtime(format!("CUDA: {what} returned NULL")))?;
        // SAFETY: fresh host memory of at least `nbytes`; zeroed as host tensors are.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, nbytes) };
        Ok(ptr)
    }

    unsafe fn free(&self, ptr: NonNull<u8>, _nbytes: usize) {
        // Copies issued on any stream may still read or write the memory. Rather than wait for
        // them on the host (which could wait for a collective that waits for this very
        // thread), it is released once events recorded now have passed.
        let fences = fences_everywhere();
        lock(&RETIRED).push(Retired {
            ptr: ptr.as_ptr() as usize,
            fences,
        });
        free_retired_pinned();
    }

    fn new_stream(&self) -> Result<Box<dyn DeviceStream>> {
        Ok(super::cpu::host_stream())
    }
}

/// A raw CUDA stream of this library on one device.
struct Queue {
    device: Arc<CudaDevice>,
    raw: sys::CUstream,
}

impl Queue {
    fn new_event(&self) -> Result<CudaMarker> {
        CudaMarker::new(&self.device)
    }

    fn record(&self, event: &CudaMarker) -> Result<()> {
        let _ctx = self.device.enter()?;
        // SAFETY: the event and the stream are alive (owned by the caller and self).
        driver("recording an event", || unsafe {
            result::event::record(event.raw, self.raw)
        })
    }

    /// Waits on the host for the work issued so far by polling an event recorded after it,
    /// calling `check` between polls (see [`poll_until`]).
    fn synchronize_polling(&self, check: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        let marker = self.new_event()?;
        self.record(&marker)?;
        marker.wait_polling(check)
    }

    /// Waits on the host for the work issued so far: in the driver, or polling an event
    /// where the thread's waits are watched (see [`poll::watch_this_thread`]).
    fn synchronize(&self) -> Result<()> {
        if let Some(mut check) = poll::this_threads_check() {
            return self.synchronize_polling(&mut *check);
        }
        let _ctx = self.device.enter()?;
        // SAFETY: the stream is alive (owned by self).
        driver("synchronizing a stream", || unsafe {
            result::stream::synchronize(self.raw)
        })
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        if let Ok(_ctx) = self.device.enter() {
            // SAFETY: the stream is ours; its work finishes before it goes.
            let _ = driver("destroying a stream", || unsafe {
                result::stream::synchronize(self.raw)?;
                result::stream::destroy(self.raw)
            });
        }
    }
}

/// A stream with the event a free records on it (see [`CudaDevice::free_in_order`]).
struct QueueWithFence {
    // Dropped first: the event goes before its stream.
    fence: CudaMarker,
    queue: Queue,
}

impl QueueWithFence {
    /// Makes `waiter` (a stream of the current context) wait for the work issued so far here.
    fn fence(&self, waiter: sys::CUstream) -> Result<()> {
        self.queue.record(&self.fence)?;
        // SAFETY: the event is alive (owned by self); `waiter` is the caller's.
        driver("waiting for an event", || unsafe {
            result::stream::wait_event(
                waiter,
                self.fence.raw,
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        })
    }
}

/// Every CUDA stream of this library that is alive, for frees that must follow their work.
static QUEUES: Mutex<Vec<Weak<QueueWithFence>>> = Mutex::new(Vec::new());

fn register(queue: &Arc<QueueWithFence>) {
    let mut queues = lock(&QUEUES);
    queues.retain(|q| q.strong_count() > 0);
    queues.push(Arc::downgrade(queue));
}

fn live_queues() -> Vec<Arc<QueueWithFence>> {
    lock(&QUEUES).iter().filter_map(Weak::upgrade).collect()
}

/// A blocking CUDA stream: copies are queued on the GPU and finish later; markers are
/// events.
struct CudaStream {
    queue: Arc<QueueWithFence>,
    /// Page-locked bytes (not write-combined: the host reads them) that small device-to-host
    /// copies land in, made on first use.
    staging: Mutex<Option<Staging>>,
}

/// Device-to-host copies of at most this many bytes go through the stream's staging buffer.
const STAGING_BYTES: usize = 64 * 1024;

/// A page-locked host buffer from `cuMemHostAlloc` (flags 0).
struct Staging(NonNull<u8>);

// SAFETY: a CUstream may be used from any thread once its context is current there (every
// call binds it first); the VM uses a stream from one executor thread at a time.
unsafe impl Send for CudaStream {}
// SAFETY: as above.
unsafe impl Sync for CudaStream {}
// SAFETY: as above.
unsafe impl Send for Queue {}
// SAFETY: as above.
unsafe impl Sync for Queue {}

/// A CUDA event, recorded on one stream and waited for by others.
struct CudaMarker {
    device: Arc<CudaDevice>,
    raw: sys::CUevent,
}

// SAFETY: CUDA events may be recorded and waited for from any thread.
unsafe impl Send for CudaMarker {}
// SAFETY: as above.
unsafe impl Sync for CudaMarker {}

impl Marker for CudaMarker {
    fn as_any(&self) -> &dyn StdAny {
        self
    }

    fn synchronize(&self) -> Result<()> {
        if let Some(mut check) = poll::this_threads_check() {
            return self.wait_polling(&mut *check);
        }
        let _ctx = self.device.enter()?;
        // SAFETY: the event is alive (owned by self).
        driver("waiting for an event on the host", || unsafe {
            result::event::synchronize(self.raw)
        })
    }

    /// Whether the GPU has passed the event's latest recording (`cuEventQuery`): `Ok(false)`
    /// while the work before it runs; a failure of that work or of the context as an error.
    fn is_passed(&self) -> Result<bool> {
        let _ctx = self.device.enter()?;
        driver("querying an event", || {
            // SAFETY: the event is ours and alive.
            match unsafe { result::event::query(self.raw) } {
                Ok(()) => Ok(true),
                Err(DriverError(CUresult::CUDA_ERROR_NOT_READY)) => Ok(false),
                Err(error) => Err(error),
            }
        })
    }
}

impl CudaMarker {
    /// A new event of `device`, recorded nowhere yet.
    fn new(device: &Arc<CudaDevice>) -> Result<CudaMarker> {
        let _ctx = device.enter()?;
        let raw = driver("creating an event", || {
            result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
        })?;
        Ok(CudaMarker {
            device: device.clone(),
            raw,
        })
    }

    /// Whether the GPU has passed the event's latest recording. A failed query (a context
    /// that can run nothing any more) counts as passed: nothing will touch the memory again.
    fn passed(&self) -> bool {
        self.is_passed().unwrap_or(true)
    }

    /// Records the event on its device's legacy default stream.
    fn record_on_default_stream(&self) -> Result<()> {
        let _ctx = self.device.enter()?;
        // SAFETY: the event is alive (owned by self); the legacy stream is the current
        // context's.
        driver("recording an event on the default stream", || unsafe {
            result::event::record(self.raw, LEGACY_STREAM)
        })
    }

    /// Waits on the host until the GPU passed the event's latest recording, polling it and
    /// calling `check` between polls (see [`poll_until`]).
    fn wait_polling(&self, check: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        poll_until(|| self.is_passed(), check)
    }
}

impl Drop for CudaMarker {
    fn drop(&mut self) {
        if let Ok(_ctx) = self.device.enter() {
            // SAFETY: the event is ours and nothing records it any more.
            let _ = driver("destroying an event", || unsafe {
                result::event::destroy(self.raw)
            });
        }
    }
}

impl Drop for CudaStream {
    fn drop(&mut self) {
        let staging = self
            .staging
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(Staging(buffer)) = staging
            && let Ok(_ctx) = self.queue.queue.device.enter()
        {
            // SAFETY: from `cuMemHostAlloc`; every copy into it was waited for before the call
            // that made it returned.
            let _ = driver("freeing the staging buffer", || unsafe {
                result::free_host(buffer.as_ptr().cast())
            });
        }
    }
}

fn device_ptr(mem: MemPtr) -> sys::CUdeviceptr {
    mem.ptr as usize as sys::CUdeviceptr
}

/// The CUDA stream under a device stream of this backend, with its device, for libraries that
/// enqueue their own work on it; `None` for another backend's stream.
pub(super) fn raw_stream(stream: &dyn DeviceStream) -> Option<(&Arc<CudaDevice>, sys::CUstream)> {
    stream
        .as_any()
        .downcast_ref::<CudaStream>()
        .map(|s| (&s.queue.queue.device, s.queue.queue.raw))
}

impl CudaStream {
    fn device(&self) -> &Arc<CudaDevice> {
        &self.queue.queue.device
    }

    fn check_device(&self, side: &str, mem: MemPtr) -> Result<()> {
        if mem.device.device_type == KDL_CUDA {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::DeviceUnavailable,
            format!(
                "a CUDA stream cannot copy {side} device type {} memory",
                mem.device.device_type
            ),
        ))
    }

    /// Checks that the device side of a copy with host memory is this stream's GPU: another
    /// GPU's memory (from its pool, say) need not be reachable from this one's context.
    fn check_own_device(&self, side: &str, mem: MemPtr) -> Result<()> {
        self.check_device(side, mem)?;
        let own = self.device().id;
        if mem.device.device_id == own {
            return Ok(());
        }
        Err(Error::value(format!(
            "a stream of CUDA device {own} cannot copy between host memory and the memory of \
             CUDA device {} (use a stream of that device)",
            mem.device.device_id
        )))
    }

    /// A small device-to-host copy through the page-locked staging buffer, then into `dst`.
    /// It returns with the bytes in `dst`, as the driver's own copy into pageable memory does,
    /// but takes the fast path of a page-locked destination (small reads hit this).
    ///
    /// # Safety
    /// `dst` is valid for `nbytes` host bytes, `src` for `nbytes` of this device's memory;
    /// `nbytes <= STAGING_BYTES`.
    unsafe fn copy_small_to_host(
        &self,
        dst: *mut u8,
        src: sys::CUdeviceptr,
        nbytes: usize,
    ) -> Result<()> {
        let mut staging = lock(&self.staging);
        let buffer = match &*staging {
            Some(Staging(buffer)) => *buffer,
            None => {
                // SAFETY: the context is current (the caller bound it); flags 0: page-locked,
                // cached (the host reads these bytes).
                let ptr = driver("allocating a page-locked staging buffer", || unsafe {
                    result::malloc_host(STAGING_BYTES, 0)
                })?;
                let buffer = NonNull::new(ptr.cast::<u8>())
                    .ok_or_else(|| Error::runtime("CUDA: cuMemHostAlloc returned NULL"))?;
                *staging = Some(Staging(buffer));
                buffer
            }
        };
        // SAFETY: the staging buffer holds STAGING_BYTES >= nbytes and only this stream uses
        // it, under the lock, and only until the synchronize below.
        let landing = unsafe { std::slice::from_raw_parts_mut(buffer.as_ptr(), nbytes) };
        let stream = self.queue.queue.raw;
        driver("copying device to host", || unsafe {
            // SAFETY: `src` is valid for `nbytes` (the caller).
            result::memcpy_dtoh_async(landing, src, stream)
        })?;
        self.queue.queue.synchronize()?;
        // SAFETY: the copy has landed; `dst` holds `nbytes` (the caller) and is not staging.
        unsafe { std::ptr::copy_nonoverlapping(buffer.as_ptr().cast_const(), dst, nbytes) };
        Ok(())
    }
}

impl DeviceStream for CudaStream {
    fn as_any(&self) -> &dyn StdAny {
        self
    }

    fn can_reach(&self, device: DLDevice) -> bool {
        is_host_memory(device) || device.device_type == KDL_CUDA
    }

    unsafe fn copy(&self, dst: MemPtr, src: MemPtr, nbytes: usize) -> Result<()> {
        if nbytes == 0 {
            return Ok(());
        }
        let _ctx = self.device().enter()?;
        let stream = self.queue.queue.raw;
        match (is_host_memory(dst.device), is_host_memory(src.device)) {
            (false, true) => {
                self.check_own_device("to", dst)?;
                // SAFETY: the host range is valid for `nbytes` until the copy finished, as the
                // caller promises.
                let host = unsafe { std::slice::from_raw_parts(src.ptr.cast_const(), nbytes) };
                driver("copying host to device", || unsafe {
                    // SAFETY: the device range is valid for `nbytes` (the caller).
                    result::memcpy_htod_async(device_ptr(dst), host, stream)
                })
            }
            (true, false) if dst.device.device_type == KDL_CPU && nbytes <= STAGING_BYTES => {
                self.check_own_device("from", src)?;
                // SAFETY: as above.
                unsafe { self.copy_small_to_host(dst.ptr, device_ptr(src), nbytes) }
            }
            (true, false) => {
                self.check_own_device("from", src)?;
                // SAFETY: as above.
                let host = unsafe { std::slice::from_raw_parts_mut(dst.ptr, nbytes) };
                driver("copying device to host", || unsafe {
                    // SAFETY: as above.
                    result::memcpy_dtoh_async(host, device_ptr(src), stream)
                })
            }
            (false, false) => {
                self.check_device("to", dst)?;
                self.check_device("from", src)?;
                let own = self.device().id;
                if dst.device.device_id == own && src.device.device_id == own {
                    driver("copying device to device", || unsafe {
                        // SAFETY: both device ranges are valid for `nbytes` (the caller).
                        result::memcpy_dtod_async(device_ptr(dst), device_ptr(src), nbytes, stream)
                    })
                } else {
                    let to = CudaDevice::shared(dst.device.device_id)?;
                    let from = CudaDevice::shared(src.device.device_id)?;
                    driver("copying between two GPUs", || unsafe {
                        // SAFETY: as above; each pointer belongs to its device's context.
                        result::memcpy_peer_async(
                            to.ctx.cu_ctx(),
                            device_ptr(dst),
                            from.ctx.cu_ctx(),
                            device_ptr(src),
                            nbytes,
                            stream,
                        )
                    })
                }
            }
            (true, true) => {
                // Host memory a GPU copy of this stream may still be filling: the copy comes
                // after the stream's earlier work, on the host.
                self.synchronize()?;
                // SAFETY: both ranges are valid for `nbytes` and disjoint (the caller).
                unsafe { std::ptr::copy_nonoverlapping(src.ptr.cast_const(), dst.ptr, nbytes) };
                Ok(())
            }
        }
    }

    fn completes_on_host(&self) -> bool {
        false
    }

    fn new_marker(&self) -> Result<Box<dyn Marker>> {
        Ok(Box::new(self.queue.queue.new_event()?))
    }

    fn record(&self, marker: &dyn Marker) -> Result<()> {
        let Some(marker) = marker.as_any().downcast_ref::<CudaMarker>() else {
            return Err(Error::runtime("a CUDA stream records only CUDA events"));
        };
        self.queue.queue.record(marker)
    }

    fn wait(&self, marker: &dyn Marker) -> Result<()> {
        // A marker of a host stream: the VM already waited for it on the host.
        let Some(marker) = marker.as_any().downcast_ref::<CudaMarker>() else {
            return Ok(());
        };
        let _ctx = self.device().enter()?;
        // SAFETY: the event and the stream are alive (owned by `marker` and `self`).
        driver("waiting for an event", || unsafe {
            result::stream::wait_event(
                self.queue.queue.raw,
                marker.raw,
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        })
    }

    fn synchronize(&self) -> Result<()> {
        self.queue.queue.synchronize()?;
        free_retired_pinned();
        Ok(())
    }

    fn synchronize_checked(&self, check: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        self.queue.queue.synchronize_polling(check)?;
        free_retired_pinned();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{DLDataType, KDL_FLOAT};

    fn gpu(device_id: i32) -> DLDevice {
        DLDevice {
            device_type: KDL_CUDA,
            device_id,
        }
    }

    #[test]
    fn without_a_gpu_every_entry_point_says_why() {
        if device_count() > 0 {
            return;
        }
        let f32 = DLDataType::new(KDL_FLOAT, 32, 1);
        let errors = [
            CudaDevice::shared(0).err().expect("no device"),
            super::super::backend(gpu(0)).err().expect("no backend"),
            super::super::bind_to_thread(gpu(0)).unwrap_err(),
            super::super::empty(&[4], f32, gpu(0)).unwrap_err(),
            crate::vm::Stream::new(gpu(0)).err().expect("no stream"),
        ];
        for error in errors {
            assert_eq!(error.kind, ErrorKind::DeviceUnavailable, "{error}");
            assert!(error.message.starts_with("CUDA device 0: "), "{error}");
            assert!(
                error.message.contains("could not be loaded") || error.message.contains("no GPU"),
                "{error}"
            );
        }
    }

    #[test]
    fn device_ids_out_of_range_are_refused() {
        let count = device_count();
        for id in [-1, count, count + 7] {
            let error = CudaDevice::shared(id).err().expect("out of range");
            assert_eq!(error.kind, ErrorKind::DeviceUnavailable);
            assert!(
                error.message.starts_with(&format!("CUDA device {id}: ")),
                "{error}"
            );
        }
    }

    #[test]
    fn driver_panics_and_failures_become_errors() {
        let error = driver("testing", || -> std::result::Result<(), DriverError> {
            panic!("Missing symbol cuTest")
        })
        .unwrap_err();
        assert_eq!(error.kind, ErrorKind::DeviceUnavailable);
        assert!(error.message.contains("Missing symbol cuTest"), "{error}");
        let error = driver("testing", || {
            Err::<(), _>(DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY))
        })
        .unwrap_err();
        assert_eq!(error.kind, ErrorKind::Runtime);
        assert!(
            error.message.starts_with("CUDA: testing failed: "),
            "{error}"
        );
    }
}
