//! The CUDA driver, reached through cudarc with the library loaded at run time: the project
//! builds and runs on machines without CUDA. The driver is probed once, before any other cudarc
//! call (cudarc panics when libcuda is missing), and every cudarc call runs inside
//! `catch_unwind`, so no CUDA failure aborts the process or reaches C as a panic.
//!
//! For now this module answers whether CUDA devices are there; device memory, streams and events
//! come with the CUDA backend.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

use cudarc::driver::result::DriverError;
use cudarc::driver::sys::CUresult;

use crate::object::{Error, ErrorKind};

/// What the probe found: the number of devices, or why there are none.
fn probe() -> &'static std::result::Result<i32, String> {
    static PROBE: OnceLock<std::result::Result<i32, String>> = OnceLock::new();
    PROBE.get_or_init(|| {
        // SAFETY: only tries to load the driver library; never panics.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err("the CUDA driver library (libcuda.so) could not be loaded".into());
        }
        match catch_unwind(AssertUnwindSafe(cudarc::driver::CudaContext::device_count)) {
            Ok(Ok(count)) => Ok(count),
            Ok(Err(DriverError(CUresult::CUDA_ERROR_NO_DEVICE))) => Ok(0),
            Ok(Err(error)) => Err(format!("the CUDA driver failed to start: {error}")),
            Err(_) => Err("the CUDA driver library lacks an entry point this library needs".into()),
        }
    })
}

/// The number of CUDA devices: 0 without a driver or without a GPU.
pub fn device_count() -> i32 {
    probe().as_ref().map_or(0, |&count| count)
}

/// Why a CUDA device cannot be used here: `DeviceUnavailable` with a message that says why.
pub fn unavailable(device_id: i32) -> Error {
    let why = match probe() {
        Err(why) => why.clone(),
        Ok(0) => "the CUDA driver found no GPU".to_string(),
        Ok(count) if !(0..*count).contains(&device_id) => {
            format!("CUDA device {device_id} is out of range ({count} devices)")
        }
        Ok(_) => "CUDA tensors and streams arrive with the CUDA backend".to_string(),
    };
    Error::new(
        ErrorKind::DeviceUnavailable,
        format!("CUDA device {device_id}: {why}"),
    )
}
