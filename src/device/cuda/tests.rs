use cudarc::driver::result::DriverError;
use cudarc::driver::sys::CUresult;

use super::driver::driver;
use super::*;
use crate::abi::{DLDataType, DLDevice, KDL_CUDA, KDL_FLOAT};
use crate::object::ErrorKind;

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
