//! Page-locked host memory (`kDLCUDAHost`, [`PinnedHost`]): host memory from `cuMemHostAlloc`,
//! portable and cached (not write-combined, since the host reads it too), that GPUs copy to and
//! from directly and asynchronously. Copies issued on any stream may still use memory when it
//! is freed, so a free records an event on every stream of this library and every open
//! device's legacy default stream, and the memory goes back to the driver once all have passed,
//! looked at on every page-locked allocation and free and after every stream sync (no host wait).

use std::ptr::NonNull;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::result;
use cudarc::driver::sys;

use super::device::{CudaDevice, open_devices};
use super::driver::driver;
use super::lock;
use super::marker::CudaMarker;
use super::stream::{live_queues, synchronize_default_stream};
use crate::abi::{DLDevice, KDL_CUDA_HOST};
use crate::device::{Device, DeviceStream};
use crate::object::{Error, Result};

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
pub(super) fn free_retired_pinned() {
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
        Ok(crate::device::cpu::host_stream())
    }
}
