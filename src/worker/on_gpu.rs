//! When a worker's collectives ran on its GPU (NCCL's kernels), for its flight recorder: a
//! collective is timed on the GPU as it is queued, and its event recorded once the GPU passed
//! it.
//!
//! The one idea: the worker's own thread queues the work on its own stream and alone writes
//! its ring, so it keeps what it timed, in the order it queued it, and records what the GPU
//! passed whenever it queues more, goes idle, or polls in a long wait for its GPU. Work the GPU
//! never finishes (a collective a peer never joined, or one its communicator's abort ended) is
//! never recorded: the bar of its queueing tells of it.

use std::cell::RefCell;
use std::collections::VecDeque;

use super::activity::Activity;
use super::events::{Collective, Event, Kind, RING};
use crate::device::DeviceStream;
use crate::device::cuda::GpuSpan;
use crate::object::Result;

/// A collective timed on the GPU, not yet recorded.
struct Timed {
    span: GpuSpan,
    about: Collective,
    /// The call it was queued in.
    call: u64,
}

thread_local! {
    /// What the worker running on this thread timed, oldest first.
    static TIMED: RefCell<VecDeque<Timed>> = const { RefCell::new(VecDeque::new()) };
}

/// Runs `queue`, which queues the GPU's work of collective `about` on `stream`, timing that
/// work on the GPU for the calling worker's ring. Where nothing can time it (a stream that is
/// not a GPU's, a thread that is no worker's, a timing event that fails), the work is queued
/// untimed.
pub(crate) fn timed(
    stream: &dyn DeviceStream,
    about: Collective,
    queue: impl FnOnce() -> Result<()>,
) -> Result<()> {
    record_passed();
    let call = super::with_own_activity(Activity::running_call);
    let span = match call {
        Some(_) => GpuSpan::begin(stream).ok().flatten(),
        None => None,
    };
    queue()?;
    if let (Some(mut span), Some(call)) = (span, call)
        && span.end(stream).is_ok()
    {
        let _ = TIMED.try_with(|timed| {
            let mut timed = timed.borrow_mut();
            // A GPU that stopped passing its work keeps no more than a ring of it.
            if timed.len() >= RING {
                timed.pop_front();
            }
            timed.push_back(Timed { span, about, call });
        });
    }
    Ok(())
}

/// Records, in the calling worker's ring, the timed work its GPU passed, in the order it was
/// queued (it may poll the GPU for a moment to set its clock against the host's, never longer).
/// Work whose times cannot be read (the context failed) is dropped.
pub(crate) fn record_passed() {
    let _ = TIMED.try_with(|timed| {
        let mut timed = timed.borrow_mut();
        while let Some(first) = timed.front() {
            // Until its times can be read, so can none of the later.
            match first.span.times() {
                Ok(None) => return,
                Ok(Some((start_ns, dur_ns))) => {
                    super::with_own_events(|ring, _| {
                        ring.record(&Event {
                            kind: Kind::Gpu,
                            start_ns,
                            dur_ns,
                            call: first.call,
                            bytes: first.about.bytes,
                            wait_ns: 0,
                            detail: first.about.detail,
                            name: first.about.name,
                        })
                    });
                }
                Err(_) => {}
            }
            timed.pop_front();
        }
    });
}

/// Records the timed work the GPU passed, and forgets the rest: the worker's communicators
/// were aborted, and NCCL's kernels that had not finished end without having run.
pub(crate) fn abandon() {
    record_passed();
    let _ = TIMED.try_with(|timed| timed.borrow_mut().clear());
}
