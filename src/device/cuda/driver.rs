//! Reaching the CUDA driver: the probe that runs once, before any other cudarc call (cudarc
//! panics when libcuda is missing), and [`driver`], which runs every call inside `catch_unwind`
//! so that a missing library or entry point comes back as `DeviceUnavailable`, and a driver
//! error as `RuntimeError` naming what was being done.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

use cudarc::driver::result::DriverError;
use cudarc::driver::sys::CUresult;

use crate::object::{Error, ErrorKind, Result};

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
        Ok(_) => "the device could not be opened".to_string(),
    };
    Error::new(
        ErrorKind::DeviceUnavailable,
        format!("CUDA device {device_id}: {why}"),
    )
}

/// Runs one driver call (or a few) so that a cudarc panic (a missing symbol, an assertion)
/// comes back as an error, and a driver error as `RuntimeError` naming what was being done.
pub(super) fn driver<T>(
    what: &str,
    call: impl FnOnce() -> std::result::Result<T, DriverError>,
) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(call)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(Error::runtime(format!(
            "CUDA: {what} failed: {}",
            describe(error)
        ))),
        Err(panic) => {
            let detail = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("no message");
            Err(Error::new(
                ErrorKind::DeviceUnavailable,
                format!("CUDA: {what}: the driver library could not serve the call ({detail})"),
            ))
        }
    }
}

/// A driver error's name and, when the driver can say, its description (asking the driver
/// may itself fail: the error's `Display` calls into the library).
fn describe(error: DriverError) -> String {
    let code = error.0;
    catch_unwind(AssertUnwindSafe(|| error.to_string()))
        .map(|text| format!("{code:?}: {text}"))
        .unwrap_or_else(|_| format!("{code:?}"))
}
