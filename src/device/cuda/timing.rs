//! When work ran on a GPU, on the host's monotonic clock ([`GpuSpan`]): two timing events
//! recorded on the work's stream around it, read once the GPU passed the second.
//!
//! The one idea: a GPU times its events only relative to each other, so each device keeps
//! anchors, events recorded on an idle stream of their own and polled at once, whose host times
//! are known to within that poll; a span began at the host time of the anchor nearest its
//! queueing plus the GPU's time from that anchor to the span's first event. A new anchor is set
//! once the newest is a second old, so that the time from one stays short (the driver gives it
//! in float milliseconds) and the two clocks cannot drift apart. An anchor the GPU does not pass
//! at once (its streams share one busy queue) is tried again once the GPU passed it, which one
//! query tells; until one is set, spans wait to be read rather than hold the host.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use cudarc::driver::result::{self, DriverError};
use cudarc::driver::sys::{self, CUresult};

use super::device::CudaDevice;
use super::driver::driver;
use super::lock;
use super::marker::event_passed;
use super::stream::raw_stream;
use crate::device::DeviceStream;
use crate::object::Result;
use crate::sync::clock::now_ns;

/// How old the newest anchor may be, in ns, before a new one is set.
const ANCHOR_LIFE_NS: u64 = 1_000_000_000;

/// How soon the GPU must pass an anchor's event, in ns, for its host time to count: the host's
/// time of the anchor is known to within half of it.
const ANCHOR_WITHIN_NS: u64 = 200_000;

/// Anchors a device keeps: spans read long after they ran find one set near their queueing.
const ANCHORS: usize = 4;

/// A device's timing state: its anchors, once made, and the timing events spans gave back.
#[derive(Default)]
pub(super) struct Timing {
    anchors: Mutex<Option<Anchors>>,
    spare: Mutex<Vec<RawEvent>>,
}

/// A device's anchors, and the idle stream they are recorded on.
struct Anchors {
    stream: sys::CUstream,
    /// Those set, oldest first.
    kept: VecDeque<Anchor>,
    /// The event the next anchor is recorded with.
    next: sys::CUevent,
    /// Whether `next` was recorded for an anchor the GPU did not pass in time, and has not been
    /// seen passed since: no other is tried before it is (the GPU is still busy).
    outstanding: bool,
}

/// An event whose host time is known.
struct Anchor {
    event: sys::CUevent,
    /// The host's time, in ns, halfway through the event's recording and the poll that found
    /// it passed.
    host_ns: u64,
}

/// A timing event of a device, owned by whoever holds it.
struct RawEvent(sys::CUevent);

// SAFETY: CUDA streams and events may be used from any thread once their context is current
// there (every use enters it first).
unsafe impl Send for Anchors {}
// SAFETY: as above.
unsafe impl Send for RawEvent {}

/// Work on a GPU stream between two points, whose times the host reads once the GPU passed
/// the second ([`GpuSpan::times`]). Its events go back to the device when it is dropped.
pub(crate) struct GpuSpan {
    device: Arc<CudaDevice>,
    start: sys::CUevent,
    end: sys::CUevent,
    /// The host's time when it began: the GPU began it no earlier.
    queued_ns: u64,
    /// Whether [`GpuSpan::end`] recorded its end.
    ended: bool,
}

// SAFETY: as above.
unsafe impl Send for GpuSpan {}

impl GpuSpan {
    /// A span that begins after the work issued so far on `stream`; None when `stream` is not a
    /// CUDA stream.
    pub(crate) fn begin(stream: &dyn DeviceStream) -> Result<Option<GpuSpan>> {
        let Some((device, raw)) = raw_stream(stream) else {
            return Ok(None);
        };
        let _ctx = device.enter()?;
        // An anchor near the span's queueing, for a span read long after it ran; failing to
        // set one costs the span nothing yet.
        let _ = device.timing.refresh();
        let span = GpuSpan {
            device: device.clone(),
            start: device.timing_event()?,
            end: device.timing_event()?,
            queued_ns: now_ns(),
            ended: false,
        };
        // SAFETY: the event is the span's, the stream the caller's, both of the context entered.
        driver("recording a timing event", || unsafe {
            result::event::record(span.start, raw)
        })?;
        Ok(Some(span))
    }

    /// Ends the span after the work issued so far on `stream`, the stream it began on.
    pub(crate) fn end(&mut self, stream: &dyn DeviceStream) -> Result<()> {
        let Some((device, raw)) = raw_stream(stream) else {
            return Ok(());
        };
        let _ctx = device.enter()?;
        // SAFETY: as in `begin`.
        driver("recording a timing event", || unsafe {
            result::event::record(self.end, raw)
        })?;
        self.ended = true;
        Ok(())
    }

    /// When the span began and how long it lasted, in ns on the host's monotonic clock, once
    /// the GPU passed its end and an anchor is set; None before (it may poll an anchor for a
    /// moment, never longer).
    pub(crate) fn times(&self) -> Result<Option<(u64, u64)>> {
        if !self.ended {
            return Ok(None);
        }
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
        let Some((anchor_ns, since_ms)) = self.device.timing.since_anchor(self)? else {
            return Ok(None);
        };
        let start_ns = (anchor_ns as f64 + f64::from(since_ms) * 1e6).max(0.0) as u64;
        let took_ns = (f64::from(took) * 1e6).max(0.0) as u64;
        Ok(Some((start_ns.max(self.queued_ns), took_ns)))
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
        new_timing_event()
    }
}

fn new_timing_event() -> Result<sys::CUevent> {
    driver("creating a timing event", || {
        result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
    })
}

impl Timing {
    /// Sets a new anchor when the newest is too old (or there is none) and a try is due. The
    /// caller entered the device's context.
    fn refresh(&self) -> Result<()> {
        self.with_anchors(Anchors::refresh)
    }

    /// `f` of the device's anchors, made on first use. The caller entered the device's context.
    fn with_anchors<R>(&self, f: impl FnOnce(&mut Anchors) -> Result<R>) -> Result<R> {
        let mut anchors = lock(&self.anchors);
        match &mut *anchors {
            Some(anchors) => f(anchors),
            None => f(anchors.insert(Anchors::new()?)),
        }
    }

    /// The host time of the anchor nearest `span`'s queueing and the GPU's time from it to the
    /// span's start (passed), in ms; None while no anchor is set. The caller entered the
    /// device's context.
    fn since_anchor(&self, span: &GpuSpan) -> Result<Option<(u64, f32)>> {
        self.with_anchors(|anchors| anchors.since(span))
    }
}

impl Anchors {
    /// The host time of the anchor nearest `span`'s queueing and the GPU's time from it to the
    /// span's start (passed), in ms; None while no anchor is set. The caller entered the
    /// device's context.
    fn since(&mut self, span: &GpuSpan) -> Result<Option<(u64, f32)>> {
        // A span read without an anchor of its time still gets one of now.
        let _ = self.refresh();
        let nearest = self
            .kept
            .iter()
            .min_by_key(|anchor| anchor.host_ns.abs_diff(span.queued_ns));
        let Some(anchor) = nearest else {
            return Ok(None);
        };
        // The driver times two events of one context, on any of its streams.
        // SAFETY: the anchor's event, recorded and passed, and the span's start, passed.
        let since = driver("reading a timing event", || unsafe {
            result::event::elapsed(anchor.event, span.start)
        })?;
        Ok(Some((anchor.host_ns, since)))
    }

    /// A device's anchors, none set yet. The caller entered the device's context.
    fn new() -> Result<Anchors> {
        let stream = driver("creating a stream for timing", || {
            result::stream::create(result::stream::StreamKind::NonBlocking)
        })?;
        Ok(Anchors {
            stream,
            kept: VecDeque::with_capacity(ANCHORS),
            next: new_timing_event()?,
            outstanding: false,
        })
    }

    /// Sets a new anchor when the newest is too old (or there is none): records its event on
    /// the idle stream and polls it for [`ANCHOR_WITHIN_NS`] at most. An event the GPU passed
    /// later, or not yet, sets nothing; while it stays unpassed, no other is tried.
    fn refresh(&mut self) -> Result<()> {
        let fresh = self
            .kept
            .back()
            .is_some_and(|newest| now_ns().saturating_sub(newest.host_ns) < ANCHOR_LIFE_NS);
        if fresh || (self.outstanding && !self.next_passed()?) {
            return Ok(());
        }
        self.outstanding = true;
        let before = now_ns();
        // SAFETY: the anchors' own stream and event, of the context the caller entered.
        driver("setting the GPU's clock against the host's", || unsafe {
            result::event::record(self.next, self.stream)
        })?;
        let after = loop {
            let passed = self.next_passed()?;
            let now = now_ns();
            if passed {
                break now;
            }
            if now - before > ANCHOR_WITHIN_NS {
                return Ok(());
            }
            std::hint::spin_loop();
        };
        self.outstanding = false;
        if after - before > ANCHOR_WITHIN_NS {
            return Ok(());
        }
        let next = match self.kept.len() {
            ANCHORS => self.kept.pop_front().map(|oldest| oldest.event),
            _ => None,
        };
        let next = match next {
            Some(event) => event,
            None => new_timing_event()?,
        };
        let event = std::mem::replace(&mut self.next, next);
        self.kept.push_back(Anchor {
            event,
            host_ns: before + (after - before) / 2,
        });
        Ok(())
    }

    /// Whether the GPU passed the latest recording of `next` (never waits).
    fn next_passed(&self) -> Result<bool> {
        // SAFETY: the anchors' own event, of the context the caller entered.
        unsafe { event_passed(self.next) }
    }
}
