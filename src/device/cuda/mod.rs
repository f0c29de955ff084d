//! CUDA GPUs as devices of the VM, through cudarc with the driver loaded at run time: the
//! library builds and runs on machines without CUDA, and no CUDA failure aborts the process or
//! reaches C as a panic (the driver is probed before any other call, and every call is guarded).
//!
//! The one idea: the GPU keeps the order, and the host waits only when asked. Streams are
//! blocking CUDA streams, ordered with the legacy default stream as Disco's are; one waits for
//! another on the GPU through an event; memory is freed in stream order after the work issued
//! before the free, never by a host wait; and a thread whose GPU work may wait forever for a
//! peer waits by polling, so it can give up.

mod copy;
mod device;
mod driver;
mod marker;
mod pinned;
mod pool;
mod stream;
#[cfg(test)]
mod tests;
mod timing;

use std::sync::{Mutex, PoisonError};

use cudarc::driver::sys;

pub use device::CudaDevice;
pub use driver::{device_count, unavailable};
pub use pinned::PinnedHost;
pub(super) use stream::raw_stream;
pub use stream::synchronize_default_stream;
pub(crate) use timing::GpuSpan;

/// The legacy default stream of the current context (`CU_STREAM_LEGACY` in the driver's
/// header), which synchronizes with the context's blocking streams.
const LEGACY_STREAM: sys::CUstream = 1 as sys::CUstream;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
