//! When work ran on a GPU, on the host's monotonic clock ([`GpuSpan`]): two timing events
//! recorded on the work's stream around it, read once the GPU passed the second.
//!
//! The one idea: a GPU times its events only relative to each other, so each device keeps an
//! anchor, an event recorded on an idle stream of its own and waited for at once, whose host
//! time is known to within that wait; a span began at the anchor's host time plus the GPU's
//! time from the anchor to the span's first event. The anchor is set again when it is a second
//! old, so that the time from it stays short (the driver gives it in float milliseconds) and
//! the two clocks cannot drift apart.

use std::sync::{Arc, Mutex};

use cudarc::driver::result::{self, DriverError};
use cudarc::driver::sys::{self, CUresult};

use super::device::CudaDevice;
use super::driver::driver;
use super::lock;
use super::stream::raw_stream;
use crate::device::DeviceStream;
use crate::object::Result;
use crate::sync::clock::now_ns;

/// How old an anchor may be, in ns, before a span read against it sets it again.
const ANCHOR_LIFE_NS: u64 = 1_000_000_000;

/// A device's timing state: its anchor, once set, and the timing events spans gave back.
#[derive(Default)]
pub(super) struct Timing {
    anchor: Mutex<Option<Anchor>>,
    spare: Mutex<Vec<RawEvent>>,
}

/// An event whose host time is known: recorded on an idle stream of its own and waited for.
struct Anchor {
    stream: sys::CUstream,
    event: sys::CUevent,
    /// The host's time, in ns, halfway through the recording and the wait.
    host_ns: u64,
}

/// A timing event of a device, owned by whoever holds it.
struct RawEvent(sys::CUevent);

// SAFETY: CUDA streams and events may be used from any thread once their context is current
// there (every use enters it first).
unsafe impl Send for Anchor {}
// SAFETY: as above.
unsafe impl Send for RawEvent {}

/// Work on a GPU stream between two points, whose times the host reads once the GPU passed
/// the second ([`GpuSpan::times`]). Its events go back to the device when it is dropped.
pub struct GpuSpan {
    device: Arc<CudaDevice>,
    start: sys::CUevent,
    end: sys::CUevent,
}

// SAFETY: as above.
unsafe impl Send for GpuSpan {}

impl GpuSpan {
    /// A span that begins after the work issued so far on `stream`; None when `stream` is not a
    /// CUDA stream.
    pub fn begin(stream: &dyn DeviceStream) -> Result<Option<GpuSpan>> {
        let Some((device, raw)) = raw_stream(stream) else {
            return Ok(None);
        };
        let _ctx = device.enter()?;
        let span = GpuSpan {
            device: device.clone(),
            start: device.timing_event()?,
            end: device.timing_event()?,
        };
        // SAFETY: the event is the span's, the stream the caller's, both of the context entered.
        driver("recording a timing event", || unsafe {
            result::event::record(span.start, raw)
        })?;
        Ok(Some(span))
    }

    /// Ends the span after the work issued so far on `stream`, the stream it began on.
    pub fn end(&self, stream: &dyn DeviceStream) -> Result<()> {
        let Some((device, raw)) = raw_stream(stream) else {
            return Ok(());
        };
        let _ctx = device.enter()?;
        // SAFETY: as in `begin`.
        driver("recording a timing event", || unsafe {
            result::event::record(self.end, raw)
        })
    }

    /// When the span began and how long it lasted, in ns on the host's monotonic clock, once
    /// the GPU passed its end; None before (never waits).
    pub fn times(&self) -> Result<Option<(u64, u64)>> {
        let _ctx = self.device.enter()?;
        let took = driver("reading a timing event", || {
            // SAFETY: both events are the span's, recorded by `begin` and `end`.
            match unsafe { result::event::elapsed(self.start, self.end) } {
                Ok(ms) => Ok(Some(ms)),
                Err(DriverError(CUresult::CUDA_ERROR_NOT_READY)) => Ok(None),
                Err(error) => Err(error),
            }
        })?;
        let Some(took) = took else {
            return Ok(None);
        };
        let (anchor_ns, since_ms) = self.device.timing.since_anchor(self.start)?;
        let start_ns = anchor_ns as f64 + f64::from(since_ms) * 1e6;
        Ok(Some((
            start_ns.max(0.0) as u64,
            (f64::from(took) * 1e6).max(0.0) as u64,
        )))
    }
}

impl Drop for GpuSpan {
    fn drop(&mut self) {
        let mut spare = lock(&self.device.timing.spare);
        spare.push(RawEvent(self.start));
        spare.push(RawEvent(self.end));
    }
}

impl CudaDevice {
    /// A timing event of this device (one a span gave back, or a new one); the caller entered
    /// the device's context.
    fn timing_event(&self) -> Result<sys::CUevent> {
        if let Some(RawEvent(event)) = lock(&self.timing.spare).pop() {
            return Ok(event);
        }
        driver("creating a timing event", || {
            result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
        })
    }
}

impl Timing {
    /// The anchor's host time and the GPU's time from the anchor to `event` (passed), in ms;
    /// the anchor is set first when there is none or it is too old. The caller entered the
    /// device's context.
    fn since_anchor(&self, event: sys::CUevent) -> Result<(u64, f32)> {
        let mut anchor = lock(&self.anchor);
        let anchor = match &mut *anchor {
            Some(set) if now_ns().saturating_sub(set.host_ns) < ANCHOR_LIFE_NS => set,
            Some(set) => {
                set.host_ns = set.reset()?;
                set
            }
            None => anchor.insert(Anchor::new()?),
        };
        // SAFETY: the anchor's event, recorded and passed, and the caller's, passed.
        let since = driver("reading a timing event", || unsafe {
            result::event::elapsed(anchor.event, event)
        })?;
        Ok((anchor.host_ns, since))
    }
}

impl Anchor {
    /// A new anchor on a stream of its own, set. The caller entered the device's context.
    fn new() -> Result<Anchor> {
        let stream = driver("creating a stream for timing", || {
            result::stream::create(result::stream::StreamKind::NonBlocking)
        })?;
        let event = driver("creating a timing event", || {
            result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
        })?;
        let mut anchor = Anchor {
            stream,
            event,
            host_ns: 0,
        };
        anchor.host_ns = anchor.reset()?;
        Ok(anchor)
    }

    /// Records the anchor's event on its idle stream and waits for it; returns the host's time
    /// halfway through (the GPU passed the event within that time).
    fn reset(&self) -> Result<u64> {
        let before = now_ns();
        // SAFETY: the anchor's own stream and event, of the context the caller entered.
        driver("setting the GPU's clock against the host's", || unsafe {
            result::event::record(self.event, self.stream)?;
            result::event::synchronize(self.event)
        })?;
        let after = now_ns();
        Ok(before + (after - before) / 2)
    }
}
