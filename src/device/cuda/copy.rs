//! Copies on a CUDA stream, queued with the `cuMemcpy*Async` calls on raw pointers (between two
//! GPUs' memory `cuMemcpyPeerAsync`). Large copies from and to pageable host memory go through
//! the driver's own page-locked staging, which returns once the host bytes were taken or have
//! arrived: what a VM copy from a caller's buffer needs. Small device-to-host copies into
//! `kDLCPU` memory (the VM's small reads) land in a page-locked buffer of the stream and are
//! copied out after a stream sync, which is the driver's fast path.

use std::ptr::NonNull;

use cudarc::driver::result;
use cudarc::driver::sys;

use super::device::CudaDevice;
use super::driver::driver;
use super::lock;
use super::stream::{CudaStream, Staging};
use crate::abi::{KDL_CPU, KDL_CUDA};
use crate::device::{DeviceStream, MemPtr, is_host_memory};
use crate::object::{Error, ErrorKind, Result};

/// Device-to-host copies of at most this many bytes go through the stream's staging buffer.
const STAGING_BYTES: usize = 64 * 1024;

fn device_ptr(mem: MemPtr) -> sys::CUdeviceptr {
    mem.ptr as usize as sys::CUdeviceptr
}

impl CudaStream {
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

    /// Issues a copy of `nbytes` from `src` to `dst` on this stream (see
    /// [`DeviceStream::copy`]).
    ///
    /// # Safety
    /// As for [`DeviceStream::copy`].
    pub(super) unsafe fn issue_copy(&self, dst: MemPtr, src: MemPtr, nbytes: usize) -> Result<()> {
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
}
