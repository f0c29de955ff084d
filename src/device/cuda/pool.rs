//! Stream-ordered device memory, where the GPU has memory pools (every GPU since Volta with a
//! recent driver): memory comes from the device's pool (`cuMemAllocAsync` on a stream of its
//! own, waited for before it is handed out), and a free is queued (`cuMemFreeAsync`) on a second
//! stream once that stream waited, on the GPU, for the work issued so far on every stream of
//! this library and on the device's legacy default stream (where a DLPack consumer such as
//! PyTorch queues its work): work the VM does not see (a kernel a callback launched) may use the
//! memory too. No free blocks the host. A GPU without memory pools falls back to `cuMemAlloc`,
//! and a free there synchronizes the context.

use cudarc::driver::result::{self, DriverError};
use cudarc::driver::sys;

use super::LEGACY_STREAM;
use super::device::CudaDevice;
use super::driver::driver;
use super::stream::live_queues;
use crate::object::Result;

/// The streams of stream-ordered device memory (see the module docs). They live as long as
/// their device, which is the life of the process.
pub(super) struct PoolStreams {
    /// Allocations are made on this stream and waited for before the memory is handed out.
    pub(super) alloc: sys::CUstream,
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

impl PoolStreams {
    /// The streams of device memory of the current context's device, or None when the GPU has
    /// no memory pools.
    pub(super) fn open(
        device: sys::CUdevice,
    ) -> std::result::Result<Option<PoolStreams>, DriverError> {
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

impl CudaDevice {
    /// Queues the free of `ptr` on the pool's free stream after the work issued so far on
    /// every stream of this library and on this device's legacy default stream. The caller
    /// entered this device's context.
    pub(super) fn free_in_order(&self, pool: &PoolStreams, ptr: sys::CUdeviceptr) -> Result<()> {
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
