//! Devices and memory: the [`Device`](crate::device::Device) trait the VM drives, and its
//! backends (the host, and CUDA GPUs when the driver finds them), reached through
//! [`backend`](crate::device::backend).
//!
//! The one idea: a backend gives the VM only memory (allocate, free), streams on which copies
//! are issued in order, and markers that order one stream after a point on another; the VM
//! keeps the instruction order, the dependence tracking and the host-side waits. Host memory is
//! the host's own (`kDLCPU`) or page-locked (`kDLCUDAHost`, which GPUs copy without staging);
//! both are host memory to the VM ([`is_host_memory`](crate::device::is_host_memory)).

use std::any::Any as StdAny;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::abi::{DLDataType, DLDevice, KDL_CPU, KDL_CUDA, KDL_CUDA_HOST};
use crate::object::tensor::{check_new, release_with};
use crate::object::{Error, ErrorKind, Result, Tensor};

pub mod cpu;
pub mod cuda;
pub(crate) mod dynlib;
pub mod gloo;
pub mod nccl;
pub(crate) mod poll;

/// A place tensors live and work runs: the host, one GPU, ...
pub trait Device: Send + Sync + 'static {
    /// The DLPack device this backend serves.
    fn dl_device(&self) -> DLDevice;

    /// Allocates `nbytes` (at least one byte is reserved) of this device's memory.
    fn allocate(&self, nbytes: usize) -> Result<NonNull<u8>>;

    /// Frees memory from [`Device::allocate`].
    ///
    /// # Safety
    /// `ptr` came from `allocate(nbytes)` on this device and is no longer used.
    unsafe fn free(&self, ptr: NonNull<u8>, nbytes: usize);

    /// Creates a stream: work issued on it runs in issue order.
    fn new_stream(&self) -> Result<Box<dyn DeviceStream>>;

    /// Prepares the calling thread, which will run this device's streams, for its work: a
    /// GPU's context becomes current there, so that the callbacks it runs reach the device.
    /// Nothing to do by default.
    fn bind_thread(&self) -> Result<()> {
        Ok(())
    }
}

/// One side of a copy: an address and the device whose memory it is.
#[derive(Clone, Copy, Debug)]
pub struct MemPtr {
    pub ptr: *mut u8,
    pub device: DLDevice,
}

/// An ordered queue of device work, owned by one VM stream and used only from the thread that
/// executes that stream's instructions (markers are also recorded from threads that wait).
pub trait DeviceStream: Send + Sync {
    /// The backend's own type, for work a backend's libraries issue on its streams (a
    /// collective library enqueues on the CUDA stream underneath).
    fn as_any(&self) -> &dyn StdAny;

    /// Whether copies on this stream can read and write `device`'s memory.
    fn can_reach(&self, device: DLDevice) -> bool;

    /// Issues a copy of `nbytes` from `src` to `dst`; either side may be host memory or this
    /// stream's device memory.
    ///
    /// # Safety
    /// Both ranges are valid for `nbytes` until the copy finished (see
    /// [`DeviceStream::synchronize`]) and do not overlap.
    unsafe fn copy(&self, dst: MemPtr, src: MemPtr, nbytes: usize) -> Result<()>;

    /// Whether work is finished once the host-side call that issued it returned (the host: yes;
    /// an asynchronous GPU stream: no, it needs markers).
    fn completes_on_host(&self) -> bool;

    /// A marker that [`DeviceStream::record`] can place on this stream.
    fn new_marker(&self) -> Result<Box<dyn Marker>>;

    /// Places `marker` after the work issued so far (from any thread: a stream about to wait
    /// for this one records it).
    fn record(&self, marker: &dyn Marker) -> Result<()>;

    /// Makes later work on this stream wait until the device passed `marker` (recorded on any
    /// stream of a backend that understands it).
    fn wait(&self, marker: &dyn Marker) -> Result<()>;

    /// Blocks the calling thread until all work issued so far has finished.
    fn synchronize(&self) -> Result<()>;

    /// Like [`DeviceStream::synchronize`], for a thread that must be able to give up on work
    /// that may never finish (an NCCL collective a peer never joins): a device stream polls
    /// the device instead of blocking in its driver, calls `check` between polls, and returns
    /// `check`'s error when it fails. A stream whose work finishes on the host has nothing to
    /// poll and synchronizes.
    fn synchronize_checked(&self, check: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        let _ = check;
        self.synchronize()
    }
}

/// A point on a device stream that other streams can wait for.
pub trait Marker: Send + Sync {
    fn as_any(&self) -> &dyn StdAny;

    /// Blocks the calling thread until the device passed the marker's latest recording (how a
    /// host stream waits for a device stream).
    fn synchronize(&self) -> Result<()>;

    /// Whether the device passed the marker's latest recording (never blocks: how a stream
    /// finds which of the tensors its finished instructions held it may let go).
    fn is_passed(&self) -> Result<bool>;
}

/// Whether `device` is host memory the CPU reads and writes directly: the host's own, or
/// page-locked host memory.
pub fn is_host_memory(device: DLDevice) -> bool {
    matches!(device.device_type, KDL_CPU | KDL_CUDA_HOST)
}

/// How many devices of a DLPack device type this library can use: the host is one device;
/// CUDA devices are counted by the driver (0 without one), and page-locked host memory is one
/// device where there is a GPU; other types have no backend.
pub fn count(device_type: i32) -> Result<i32> {
    match device_type {
        KDL_CPU => Ok(1),
        KDL_CUDA => Ok(cuda::device_count()),
        KDL_CUDA_HOST => Ok(cuda::device_count().min(1)),
        known if (1..=18).contains(&known) => Ok(0),
        other => Err(Error::value(format!("unknown DLPack device type {other}"))),
    }
}

/// A compact tensor of `dims` and `dtype` in `device`'s memory (zero-filled in host memory),
/// allocated through the device's backend and given back to it when the tensor dies.
pub fn empty(dims: &[i64], dtype: DLDataType, device: DLDevice) -> Result<Tensor> {
    let nbytes = check_new(dims, dtype)?;
    let backend = backend(device)?;
    let ptr = backend.allocate(nbytes)?;
    let release = release_with(ptr, move |ptr| {
        // SAFETY: `ptr` came from this backend's `allocate(nbytes)`; the tensor that owned it
        // is gone.
        unsafe { backend.free(ptr, nbytes) }
    });
    // SAFETY: fresh memory of `nbytes` on `device`, owned by the tensor from now on.
    Ok(unsafe { Tensor::from_memory(dims, dtype, device, ptr, release) })
}

/// The backend for `device`, or `DeviceUnavailable`.
pub fn backend(device: DLDevice) -> Result<Arc<dyn Device>> {
    match device.device_type {
        KDL_CPU if device.device_id == 0 => Ok(cpu::CpuDevice::shared()),
        KDL_CPU => Err(Error::value(format!(
            "CPU device id {} is out of range (the host is device 0)",
            device.device_id
        ))),
        KDL_CUDA => Ok(cuda::CudaDevice::shared(device.device_id)?),
        KDL_CUDA_HOST if device.device_id == 0 => Ok(cuda::PinnedHost::shared()?),
        KDL_CUDA_HOST => Err(Error::value(format!(
            "kDLCUDAHost device id {} is out of range (page-locked host memory is device 0)",
            device.device_id
        ))),
        other => Err(Error::new(
            ErrorKind::DeviceUnavailable,
            format!(
                "device type {other} has no backend here (only kDLCPU = 1, kDLCUDA = 2 and \
                 kDLCUDAHost = 3)"
            ),
        )),
    }
}

/// Prepares the calling thread to work on `device`: a CUDA device's context becomes the
/// thread's current one; the host needs nothing. Errors as for [`backend`].
pub fn bind_to_thread(device: DLDevice) -> Result<()> {
    match device.device_type {
        KDL_CUDA => cuda::CudaDevice::shared(device.device_id)?.bind(),
        _ => backend(device).map(drop),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::KDL_FLOAT;
    use cpu::CpuDevice;

    const F32: DLDataType = DLDataType::new(KDL_FLOAT, 32, 1);

    #[test]
    fn devices_are_counted_without_requiring_a_cuda_driver() {
        assert_eq!(count(KDL_CPU).unwrap(), 1);
        assert!(count(KDL_CUDA).unwrap() >= 0);
        assert_eq!(
            count(KDL_CUDA_HOST).unwrap(),
            count(KDL_CUDA).unwrap().min(1),
            "page-locked memory exists where a GPU does"
        );
        assert_eq!(count(7).unwrap(), 0, "Vulkan has no backend");
        assert_eq!(
            count(99).unwrap_err().message,
            "unknown DLPack device type 99"
        );
        if count(KDL_CUDA).unwrap() == 0 {
            let why = cuda::unavailable(0).message;
            assert!(
                why.contains("could not be loaded") || why.contains("found no GPU"),
                "{why}"
            );
        }
    }

    #[test]
    fn empty_allocates_through_the_backend_and_checks_the_device() {
        let t = empty(&[3, 5], F32, DLDevice::cpu()).unwrap();
        assert_eq!(t.shape(), &[3, 5]);
        assert_eq!(
            t.dl().data as usize % crate::object::tensor::HOST_ALIGNMENT,
            0
        );
        // SAFETY: the tensor owns 60 readable bytes.
        let bytes = unsafe { std::slice::from_raw_parts(t.dl().data.cast::<u8>(), 60) };
        assert!(bytes.iter().all(|&b| b == 0));

        let gpu = DLDevice {
            device_type: KDL_CUDA,
            device_id: 1000,
        };
        let err = empty(&[1], F32, gpu).unwrap_err();
        assert_eq!(err.kind, ErrorKind::DeviceUnavailable);
        let err = empty(
            &[1],
            F32,
            DLDevice {
                device_type: KDL_CPU,
                device_id: 3,
            },
        )
        .unwrap_err();
        assert_eq!(
            err.message,
            "CPU device id 3 is out of range (the host is device 0)"
        );
        let err = empty(&[-1], F32, DLDevice::cpu()).unwrap_err();
        assert_eq!(err.message, "dimension 0 of shape [-1] is negative");
    }

    #[test]
    fn page_locked_host_memory_is_host_memory_of_its_own_backend() {
        let pinned = DLDevice {
            device_type: KDL_CUDA_HOST,
            device_id: 0,
        };
        assert!(is_host_memory(pinned) && is_host_memory(DLDevice::cpu()));
        assert!(!is_host_memory(DLDevice {
            device_type: KDL_CUDA,
            device_id: 0
        }));
        let err = backend(DLDevice {
            device_type: KDL_CUDA_HOST,
            device_id: 1,
        })
        .err()
        .expect("only device 0");
        assert_eq!(
            err.message,
            "kDLCUDAHost device id 1 is out of range (page-locked host memory is device 0)"
        );
        if count(KDL_CUDA).unwrap() == 0 {
            let err = empty(&[4], F32, pinned).unwrap_err();
            assert_eq!(err.kind, ErrorKind::DeviceUnavailable);
            assert!(
                err.message
                    .starts_with("page-locked host memory needs a GPU: CUDA device 0: "),
                "{err}"
            );
        }
        let host = CpuDevice::shared().new_stream().unwrap();
        assert!(host.can_reach(DLDevice::cpu()) && host.can_reach(pinned));
        assert!(!host.can_reach(DLDevice {
            device_type: KDL_CUDA,
            device_id: 0
        }));
    }
}
