//! One GPU ([`CudaDevice`]): its primary context, which every operation first makes current on
//! the calling thread, so any thread may use a device without setting anything up. A context
//! the thread already had (a user's thread working on another GPU) is put back afterwards
//! ([`Entered`]); a session worker binds its device for good. Devices open once and stay open.

use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use cudarc::driver::CudaContext;
use cudarc::driver::result;
use cudarc::driver::sys;

use super::driver::{device_count, driver, unavailable};
use super::lock;
use super::pool::PoolStreams;
use super::stream::CudaStream;
use super::timing::Timing;
use crate::abi::{DLDevice, KDL_CUDA};
use crate::device::{Device, DeviceStream};
use crate::object::{Error, ErrorKind, Result};

/// One GPU: its primary context (the one the CUDA runtime, PyTorch and TVM use), retained for
/// the life of the process.
pub struct CudaDevice {
    pub(super) id: i32,
    pub(super) ctx: Arc<CudaContext>,
    /// How device memory is allocated and freed in stream order; None on a GPU without memory
    /// pools.
    pub(super) pool: Option<PoolStreams>,
    /// When its work ran, on the host's clock (see [`GpuSpan`](super::GpuSpan)).
    pub(super) timing: Timing,
}

/// The devices opened so far; each stays open for the life of the process.
static DEVICES: Mutex<Vec<Arc<CudaDevice>>> = Mutex::new(Vec::new());

pub(super) fn open_devices() -> Vec<Arc<CudaDevice>> {
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
            timing: Timing::default(),
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
    pub(in crate::device) fn enter(&self) -> Result<Entered> {
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

    pub(in crate::device) fn dl(&self) -> DLDevice {
        DLDevice {
            device_type: KDL_CUDA,
            device_id: self.id,
        }
    }
}

/// The context a thread had before [`CudaDevice::enter`], put back when this goes.
pub(in crate::device) struct Entered(Option<sys::CUcontext>);

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
        Ok(Box::new(CudaStream::open(device)?))
    }
}
