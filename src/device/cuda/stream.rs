//! CUDA streams of this library ([`CudaStream`]): blocking streams, ordered with the device's
//! legacy default stream as Disco's are, so kernels a worker's functions launch there come
//! before the copies and collectives queued after them, and the other way round. Every live
//! stream is registered, with an event of its own, so that a free can be ordered after the work
//! issued so far on all of them. A host wait blocks in the driver, unless the thread's waits are
//! watched (`device::poll`): then it polls an event and can give up.

use std::any::Any as StdAny;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use cudarc::driver::result;
use cudarc::driver::sys;

use super::device::CudaDevice;
use super::driver::driver;
use super::marker::CudaMarker;
use super::pinned::free_retired_pinned;
use super::{LEGACY_STREAM, lock};
use crate::abi::{DLDevice, KDL_CUDA};
use crate::device::poll;
use crate::device::{DeviceStream, Marker, MemPtr, is_host_memory};
use crate::object::{Error, Result};

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

/// A raw CUDA stream of this library on one device.
pub(super) struct Queue {
    pub(super) device: Arc<CudaDevice>,
    pub(super) raw: sys::CUstream,
}

impl Queue {
    pub(super) fn new_event(&self) -> Result<CudaMarker> {
        CudaMarker::new(&self.device)
    }

    pub(super) fn record(&self, event: &CudaMarker) -> Result<()> {
        let _ctx = self.device.enter()?;
        // SAFETY: the event and the stream are alive (owned by the caller and self).
        driver("recording an event", || unsafe {
            result::event::record(event.raw, self.raw)
        })
    }

    /// Waits on the host for the work issued so far by polling an event recorded after it,
    /// calling `check` between polls (see [`poll::poll_until`]).
    pub(super) fn synchronize_polling(&self, check: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        let marker = self.new_event()?;
        self.record(&marker)?;
        marker.wait_polling(check)
    }

    /// Waits on the host for the work issued so far: in the driver, or polling an event
    /// where the thread's waits are watched (see [`poll::watch_this_thread`]).
    pub(super) fn synchronize(&self) -> Result<()> {
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
pub(super) struct QueueWithFence {
    // Dropped first: the event goes before its stream.
    fence: CudaMarker,
    pub(super) queue: Queue,
}

impl QueueWithFence {
    /// Makes `waiter` (a stream of the current context) wait for the work issued so far here.
    pub(super) fn fence(&self, waiter: sys::CUstream) -> Result<()> {
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

pub(super) fn live_queues() -> Vec<Arc<QueueWithFence>> {
    lock(&QUEUES).iter().filter_map(Weak::upgrade).collect()
}

/// A blocking CUDA stream: copies are queued on the GPU and finish later; markers are
/// events.
pub(super) struct CudaStream {
    pub(super) queue: Arc<QueueWithFence>,
    /// Page-locked bytes (not write-combined: the host reads them) that small device-to-host
    /// copies land in, made on first use.
    pub(super) staging: Mutex<Option<Staging>>,
}

/// A page-locked host buffer from `cuMemHostAlloc` (flags 0).
pub(super) struct Staging(pub(super) NonNull<u8>);

// SAFETY: a CUstream may be used from any thread once its context is current there (every
// call binds it first); the VM uses a stream from one executor thread at a time.
unsafe impl Send for CudaStream {}
// SAFETY: as above.
unsafe impl Sync for CudaStream {}
// SAFETY: as above.
unsafe impl Send for Queue {}
// SAFETY: as above.
unsafe impl Sync for Queue {}

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

/// The CUDA stream under a device stream of this backend, with its device, for libraries that
/// enqueue their own work on it; `None` for another backend's stream.
pub(in crate::device) fn raw_stream(
    stream: &dyn DeviceStream,
) -> Option<(&Arc<CudaDevice>, sys::CUstream)> {
    stream
        .as_any()
        .downcast_ref::<CudaStream>()
        .map(|s| (&s.queue.queue.device, s.queue.queue.raw))
}

impl CudaStream {
    /// A new stream of `device`, registered for the frees that must follow its work.
    pub(super) fn open(device: Arc<CudaDevice>) -> Result<CudaStream> {
        let _ctx = device.enter()?;
        // A blocking stream: ordered with the legacy default stream, where kernels go by
        // default (a worker's functions launch theirs there), as streams are in Disco.
        let raw = driver("creating a stream", || {
            result::stream::create(result::stream::StreamKind::Default)
        })?;
        let queue = Queue { device, raw };
        let fence = queue.new_event()?;
        let queue = Arc::new(QueueWithFence { queue, fence });
        register(&queue);
        Ok(CudaStream {
            queue,
            staging: Mutex::new(None),
        })
    }

    pub(super) fn device(&self) -> &Arc<CudaDevice> {
        &self.queue.queue.device
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
        // SAFETY: as the caller promises.
        unsafe { self.issue_copy(dst, src, nbytes) }
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
