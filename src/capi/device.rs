//! Devices: how many of each kind this library can use.

use super::{boundary, dvm_status, non_null, write_out};

/// How many devices of a DLPack device type (`kDLCPU`, `kDLCUDA`, ...) this library can use:
/// 1 for `kDLCPU`; for `kDLCUDA` the number of GPUs the CUDA driver reports, 0 on machines
/// without the driver or without a GPU (the driver is loaded at run time and never required);
/// for `kDLCUDAHost` (page-locked host memory) 1 where there is a GPU, else 0; 0 for other
/// device types, which have no backend yet.
///
/// Errors: `ValueError` for an unknown device type or a NULL `out`.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_device_count(device_type: i32, out: *mut i32) -> dvm_status {
    boundary(|| {
        let out = non_null(out, "out")?;
        let count = crate::device::count(device_type).map_err(|e| e.context("`device_type`"))?;
        // SAFETY: checked non-NULL above.
        unsafe { write_out(out, count) };
        Ok(())
    })
}
