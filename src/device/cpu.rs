//! The host: the CPU backend of the VM, copies between host buffers and tensors, and pinning
//! threads to cores.

use std::any::Any as StdAny;
use std::ptr::NonNull;
use std::sync::{Arc, LazyLock};

use super::{Device, DeviceStream, Marker, MemPtr, is_host_memory};
use crate::abi::{DLDevice, DLTensor, KDL_CPU};
use crate::object::tensor::{
    check_dltensor, dl_shape, dtype_name, host_alloc, host_free, is_contiguous,
};
use crate::object::{Error, ErrorKind, Result, Tensor};

/// The host as a VM device: 64-byte aligned memory, streams whose work is done when the call
/// that issued it returns.
pub struct CpuDevice;

impl CpuDevice {
    /// The one host device.
    pub fn shared() -> Arc<dyn Device> {
        static HOST: LazyLock<Arc<dyn Device>> = LazyLock::new(|| Arc::new(CpuDevice));
        HOST.clone()
    }
}

impl Device for CpuDevice {
    fn dl_device(&self) -> DLDevice {
        DLDevice::cpu()
    }

    fn allocate(&self, nbytes: usize) -> Result<NonNull<u8>> {
        host_alloc(nbytes)
    }

    unsafe fn free(&self, ptr: NonNull<u8>, nbytes: usize) {
        // SAFETY: from `allocate(nbytes)`, which is `host_alloc`, as the caller promises.
        unsafe { host_free(ptr, nbytes) }
    }

    fn new_stream(&self) -> Result<Box<dyn DeviceStream>> {
        Ok(host_stream())
    }
}

/// A host stream: copies between host memory of either kind run on the calling thread, so
/// issuing is finishing.
pub(super) fn host_stream() -> Box<dyn DeviceStream> {
    Box::new(CpuStream)
}

struct CpuStream;

/// Host markers carry nothing: the VM's own sequence numbers order host streams.
struct CpuMarker;

impl Marker for CpuMarker {
    fn as_any(&self) -> &dyn StdAny {
        self
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    fn is_passed(&self) -> Result<bool> {
        Ok(true)
    }
}

fn check_host(side: &str, mem: MemPtr) -> Result<()> {
    if is_host_memory(mem.device) {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::DeviceUnavailable,
            format!(
                "a host stream cannot copy {side} device type {} memory",
                mem.device.device_type
            ),
        ))
    }
}

impl DeviceStream for CpuStream {
    fn as_any(&self) -> &dyn StdAny {
        self
    }

    fn can_reach(&self, device: DLDevice) -> bool {
        is_host_memory(device)
    }

    unsafe fn copy(&self, dst: MemPtr, src: MemPtr, nbytes: usize) -> Result<()> {
        check_host("to", dst)?;
        check_host("from", src)?;
        if nbytes > 0 {
            // SAFETY: both ranges are valid for `nbytes` and disjoint, as the caller promises.
            unsafe { std::ptr::copy_nonoverlapping(src.ptr.cast_const(), dst.ptr, nbytes) };
        }
        Ok(())
    }

    fn completes_on_host(&self) -> bool {
        true
    }

    fn new_marker(&self) -> Result<Box<dyn Marker>> {
        Ok(Box::new(CpuMarker))
    }

    fn record(&self, _marker: &dyn Marker) -> Result<()> {
        Ok(())
    }

    fn wait(&self, marker: &dyn Marker) -> Result<()> {
        // A host marker is passed once the VM saw its instruction finish; a device's marker
        // (a copy into host memory queued on a GPU) is waited for here, on the host.
        marker.synchronize()
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}

/// A compact host tensor whose memory the caller vouched for: valid, and used by nobody else,
/// for as long as the value is used (a stream copies into and out of it safely).
#[derive(Clone, Copy)]
pub struct HostTensor {
    dl: DLTensor,
    nbytes: usize,
}

// SAFETY: the creator promised the memory stays valid and unshared until it is done with it.
unsafe impl Send for HostTensor {}

impl HostTensor {
    /// Checks a host DLTensor: CPU, compact, a valid description.
    ///
    /// # Safety
    /// `dl` describes readable and writable memory (and `shape`/`strides` arrays) that stay
    /// valid, and are not used by anyone else, for as long as the returned value is used.
    pub unsafe fn new(dl: &DLTensor) -> Result<HostTensor> {
        if dl.device.device_type != KDL_CPU {
            return Err(Error::value(format!(
                "the host tensor must be on kDLCPU (1), not device type {}",
                dl.device.device_type
            )));
        }
        // SAFETY: as the caller promises.
        let nbytes = unsafe { check_dltensor(dl) }.map_err(|e| e.context("the host tensor"))?;
        // SAFETY: as above.
        if !unsafe { is_contiguous(dl) } {
            return Err(Error::value(
                "the host tensor is not contiguous (row-major compact)",
            ));
        }
        Ok(HostTensor { dl: *dl, nbytes })
    }

    fn shape(&self) -> &[i64] {
        // SAFETY: checked in `new`, valid while self is used.
        unsafe { dl_shape(&self.dl) }.unwrap_or(&[])
    }

    /// Checks that `tensor` has this host tensor's shape and dtype and is compact, so the two
    /// hold the same bytes.
    pub fn check_matches(&self, tensor: &Tensor) -> Result<()> {
        let remote = tensor.dl();
        if self.shape() != tensor.shape() || self.dl.dtype != remote.dtype {
            return Err(Error::value(format!(
                "host tensor {:?} {} does not match the remote tensor {:?} {}",
                self.shape(),
                dtype_name(self.dl.dtype),
                tensor.shape(),
                dtype_name(remote.dtype)
            )));
        }
        if !tensor.is_contiguous() {
            return Err(Error::value("the remote tensor is not contiguous"));
        }
        Ok(())
    }

    /// The first byte of the host buffer.
    pub fn ptr(&self) -> *mut u8 {
        // Checked in `new` to fit in the address space when there are bytes to copy.
        self.dl
            .data
            .cast::<u8>()
            .wrapping_add(self.dl.byte_offset as usize)
    }

    /// Bytes the host tensor holds.
    pub fn nbytes(&self) -> usize {
        self.nbytes
    }

    /// A tensor object over the host memory, without a copy, for code that takes tensors.
    ///
    /// # Safety
    /// The tensor is used only while this host tensor's memory stays valid (its creator's
    /// promise), and does not outlive that.
    pub unsafe fn borrow_as_tensor(&self) -> Tensor {
        let data = std::ptr::NonNull::new(self.ptr()).unwrap_or(std::ptr::NonNull::dangling());
        // SAFETY: compact memory of `nbytes` (checked in `new`), which the caller keeps valid;
        // the tensor releases nothing.
        unsafe {
            Tensor::from_memory(
                self.shape(),
                self.dl.dtype,
                self.dl.device,
                data,
                Box::new(|| {}),
            )
        }
    }
}

/// The number of CPUs this process may run on.
pub fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The CPU the calling thread runs on (it may move at any time), if the system says.
pub fn current_cpu() -> Option<usize> {
    if cfg!(miri) {
        return None; // the interpreter that checks the unsafe code has no such call
    }
    // SAFETY: sched_getcpu has no preconditions.
    usize::try_from(unsafe { libc::sched_getcpu() }).ok()
}

/// Moves the calling thread off the CPU it runs on, leaving it free to run anywhere it could
/// before: the scheduler places it on another allowed CPU right away. Does nothing when the
/// thread may run on only one CPU. Returns whether it moved.
fn move_off_current_cpu() -> bool {
    let Some(cpu) = current_cpu() else {
        return false;
    };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the calls read and write whole sets of
    // the size given, for the calling thread (pid 0); CPU_* stay within CPU_SETSIZE.
    unsafe {
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size, &mut allowed) != 0 || libc::CPU_COUNT(&allowed) < 2 {
            return false;
        }
        if cpu >= libc::CPU_SETSIZE as usize || !libc::CPU_ISSET(cpu, &allowed) {
            return false;
        }
        let mut elsewhere = allowed;
        libc::CPU_CLR(cpu, &mut elsewhere);
        let moved = libc::sched_setaffinity(0, size, &elsewhere) == 0;
        libc::sched_setaffinity(0, size, &allowed);
        moved
    }
}

/// Watches the requests a serving thread answers. A waiter that spins on the CPU its server runs
/// on only hands that CPU back and forth (two context switches, a few us per request) while
/// another CPU may idle, and the scheduler does not always separate two busy threads; after a
/// run of such requests the server moves itself to another CPU it may use.
#[derive(Default)]
pub struct SharedCpuWatch {
    run: u32,
}

impl SharedCpuWatch {
    /// Requests in a row from the server's own CPU before it moves.
    pub const RUN: u32 = 32;

    /// Notes a request whose waiter ran on `waiter_cpu`; may move the calling thread.
    pub fn note(&mut self, waiter_cpu: Option<usize>) {
        if waiter_cpu.is_none() || waiter_cpu != current_cpu() {
            self.run = 0;
            return;
        }
        self.run += 1;
        if self.run >= Self::RUN {
            self.run = 0;
            move_off_current_cpu();
        }
    }
}

/// Lowers the calling thread's scheduling priority to the least (a nice value of 19), for a
/// thread whose work may wait while others are busy: where threads outnumber the CPUs, it runs
/// in their idle time rather than taking its share of theirs. Best effort: a failure changes
/// nothing.
pub fn yield_priority_of_current_thread() {
    // SAFETY: setpriority has no memory preconditions; on Linux, PRIO_PROCESS with the
    // thread's id applies to that thread alone.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19);
    }
}

/// Pins the calling thread to one CPU.
pub fn pin_current_thread(cpu: usize) -> Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(Error::value(format!("cpu {cpu} is out of range")));
    }
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET stays within it (checked above);
    // sched_setaffinity(0, ...) applies to the calling thread.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        let os = std::io::Error::last_os_error();
        return Err(Error::value(format!(
            "cannot pin a worker to cpu {cpu}: {os}"
        )));
    }
    Ok(())
}
