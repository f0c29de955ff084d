//! Test doubles: a device stream whose work outlives the host call, as a GPU's does, so that
//! the VM's device paths are tested without a GPU; and tensors whose memory another library
//! owns (DLPack imports whose deleter counts its calls).

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::abi::{
    DLDataType, DLDevice, DLManagedTensorVersioned, DLPackVersion, DLTensor, KDL_UINT,
};
use crate::device::{DeviceStream, Marker, MemPtr};
use crate::object::{Result, Tensor};
use crate::vm::{Placement, Stream};

/// The device underneath mock streams: what they logged (which markers they recorded and
/// waited for), and whether it is busy: a busy device passes no marker until the host waits
/// for it (a stream sync or a marker's), which finishes all its work.
#[derive(Default)]
pub(crate) struct MockDevice {
    pub log: Mutex<Vec<String>>,
    pub busy: AtomicBool,
}

impl MockDevice {
    fn finish_work(&self) {
        self.busy.store(false, Ordering::Release);
    }

    /// A stream named `name` (in the log) on this device, run where `placement` says.
    pub fn stream(self: &Arc<Self>, name: &'static str, placement: Placement) -> Stream {
        let dev = Box::new(Asynchronous {
            name,
            device: self.clone(),
        });
        Stream::on_device_stream(DLDevice::cpu(), dev, placement).unwrap()
    }

    pub fn take_log(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

/// A device stream whose work outlives the host call that issued it (its copies are plain
/// host copies).
pub(crate) struct Asynchronous {
    name: &'static str,
    device: Arc<MockDevice>,
}

struct Mark {
    device: Arc<MockDevice>,
}

impl Marker for Mark {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn synchronize(&self) -> Result<()> {
        self.device.finish_work();
        Ok(())
    }
    fn is_passed(&self) -> Result<bool> {
        Ok(!self.device.busy.load(Ordering::Acquire))
    }
}

impl DeviceStream for Asynchronous {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn can_reach(&self, _: DLDevice) -> bool {
        true
    }
    unsafe fn copy(&self, dst: MemPtr, src: MemPtr, nbytes: usize) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src.ptr.cast_const(), dst.ptr, nbytes) };
        Ok(())
    }
    fn completes_on_host(&self) -> bool {
        false
    }
    fn new_marker(&self) -> Result<Box<dyn Marker>> {
        Ok(Box::new(Mark {
            device: self.device.clone(),
        }))
    }
    fn record(&self, _: &dyn Marker) -> Result<()> {
        let mut log = self.device.log.lock().unwrap();
        log.push(format!("{} records", self.name));
        Ok(())
    }
    fn wait(&self, _: &dyn Marker) -> Result<()> {
        let mut log = self.device.log.lock().unwrap();
        log.push(format!("{} waits", self.name));
        Ok(())
    }
    fn synchronize(&self) -> Result<()> {
        self.device.finish_work();
        Ok(())
    }
}

/// A 64-byte host tensor of this library's.
pub(crate) fn tensor() -> Tensor {
    crate::device::empty(&[64], DLDataType::new(KDL_UINT, 8, 1), DLDevice::cpu()).unwrap()
}

/// What a DLPack producer hands over: the managed tensor, with the memory and shape it
/// describes and the count its deleter increments.
#[repr(C)]
struct Produced {
    managed: DLManagedTensorVersioned,
    shape: [i64; 1],
    bytes: Vec<u8>,
    deleted: Arc<AtomicUsize>,
}

unsafe extern "C" fn delete_produced(managed: *mut DLManagedTensorVersioned) {
    // SAFETY: `managed` is the first field of a `Produced` boxed by `imported`, and DLPack
    // calls the deleter once.
    let produced = unsafe { Box::from_raw(managed.cast::<Produced>()) };
    produced.deleted.fetch_add(1, Ordering::AcqRel);
}

/// A 64-byte host tensor imported through DLPack (its memory is the producer's), and how many
/// times the producer's deleter ran.
pub(crate) fn imported() -> (Tensor, Arc<AtomicUsize>) {
    let deleted = Arc::new(AtomicUsize::new(0));
    let produced = Box::into_raw(Box::new(Produced {
        managed: DLManagedTensorVersioned {
            version: DLPackVersion {
                major: crate::abi::DLPACK_MAJOR_VERSION,
                minor: crate::abi::DLPACK_MINOR_VERSION,
            },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete_produced),
            flags: 0,
            dl_tensor: DLTensor {
                data: std::ptr::null_mut(),
                device: DLDevice::cpu(),
                ndim: 1,
                dtype: DLDataType::new(KDL_UINT, 8, 1),
                shape: std::ptr::null_mut(),
                strides: std::ptr::null_mut(),
                byte_offset: 0,
            },
        },
        shape: [64],
        bytes: vec![7; 64],
        deleted: deleted.clone(),
    }));
    // SAFETY: `produced` is a live allocation no one else knows of yet; every pointer into it
    // comes from the one pointer the deleter will free it through.
    unsafe {
        (*produced).managed.dl_tensor.data = (*produced).bytes.as_mut_ptr().cast::<c_void>();
        (*produced).managed.dl_tensor.shape = (&raw mut (*produced).shape).cast::<i64>();
    }
    let managed = NonNull::new(produced.cast::<DLManagedTensorVersioned>()).expect("boxed");
    // SAFETY: a valid managed tensor whose deleter (any thread) frees what it describes.
    let tensor = unsafe { Tensor::from_dlpack(managed) }.unwrap();
    (tensor, deleted)
}
