//! CUDA events as the markers of CUDA streams: `record` is `cuEventRecord` and a stream's
//! `wait` is `cuStreamWaitEvent`, so one stream waits for another on the GPU, never on the host.
//! A host wait for an event blocks in the driver, unless the thread's waits are watched
//! (`device::poll`): then it polls the event and can give up.

use std::any::Any as StdAny;
use std::sync::Arc;

use cudarc::driver::result::{self, DriverError};
use cudarc::driver::sys::{self, CUresult};

use super::LEGACY_STREAM;
use super::device::CudaDevice;
use super::driver::driver;
use crate::device::Marker;
use crate::device::poll::{self, poll_until};
use crate::object::Result;

/// A CUDA event, recorded on one stream and waited for by others.
pub(super) struct CudaMarker {
    device: Arc<CudaDevice>,
    pub(super) raw: sys::CUevent,
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
        // SAFETY: the event is ours and alive.
        unsafe { event_passed(self.raw) }
    }
}

/// Whether the GPU passed the latest recording of `event` (`cuEventQuery`, which never waits):
/// `Ok(false)` while the work before it runs; a failure of that work or of the context as an
/// error.
///
/// # Safety
/// `event` is alive, of the context the caller entered.
pub(super) unsafe fn event_passed(event: sys::CUevent) -> Result<bool> {
    driver("querying an event", || {
        // SAFETY: as the caller promises.
        match unsafe { result::event::query(event) } {
            Ok(()) => Ok(true),
            Err(DriverError(CUresult::CUDA_ERROR_NOT_READY)) => Ok(false),
            Err(error) => Err(error),
        }
    })
}

impl CudaMarker {
    /// A new event of `device`, recorded nowhere yet.
    pub(super) fn new(device: &Arc<CudaDevice>) -> Result<CudaMarker> {
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
    pub(super) fn passed(&self) -> bool {
        self.is_passed().unwrap_or(true)
    }

    /// Records the event on its device's legacy default stream.
    pub(super) fn record_on_default_stream(&self) -> Result<()> {
        let _ctx = self.device.enter()?;
        // SAFETY: the event is alive (owned by self); the legacy stream is the current
        // context's.
        driver("recording an event on the default stream", || unsafe {
            result::event::record(self.raw, LEGACY_STREAM)
        })
    }

    /// Waits on the host until the GPU passed the event's latest recording, polling it and
    /// calling `check` between polls (see [`poll_until`]).
    pub(super) fn wait_polling(&self, check: &mut dyn FnMut() -> Result<()>) -> Result<()> {
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
