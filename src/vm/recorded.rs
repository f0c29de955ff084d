//! What a stream's instructions tell as they run: a recorder hears of each instruction that
//! ran, what it was, when it began and how long it took (a worker's go into its flight
//! recorder).
//!
//! The one idea: a stream run inline is recorded by the recorder of the thread that runs it
//! (the worker's own stream, on the worker's thread, which alone writes the worker's ring), and
//! a thread without one pays a thread-local read; a stream that an executor thread runs (one
//! that code on a worker made) carries the recorder its maker's thread gave it, as an executor
//! thread may run several workers' streams.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use crate::sync::clock::now_ns;

/// An instruction that ran.
pub struct Ran {
    /// What it was: `copy`, `copy to host`, `copy from host`, `call`, `device work`, `wait`.
    pub what: &'static str,
    /// When it began, in ns on the machine's monotonic clock.
    pub start_ns: u64,
    pub dur_ns: u64,
    /// Bytes it copied (0 for others).
    pub bytes: u64,
}

/// Hears of each instruction the thread ran.
type Recorder = Rc<dyn Fn(&Ran)>;

/// Hears of each instruction a stream ran, on whichever thread ran it.
pub(crate) type StreamRecorder = Arc<dyn Fn(&Ran) + Send + Sync>;

/// Gives a stream that the calling thread makes its recorder, if any.
pub(crate) type StreamRecorders = Rc<dyn Fn() -> Option<StreamRecorder>>;

thread_local! {
    static RECORDER: RefCell<Option<Recorder>> = const { RefCell::new(None) };
    static STREAM_RECORDERS: RefCell<Option<StreamRecorders>> = const { RefCell::new(None) };
}

/// Has the instructions the calling thread runs from now on told to `recorder`.
pub(crate) fn record_on_this_thread(recorder: Recorder) {
    RECORDER.with(|r| *r.borrow_mut() = Some(recorder));
}

/// Gives each stream the calling thread makes from now on, other than those run inline, the
/// recorder `make` makes for it.
pub(crate) fn record_streams_made_on_this_thread(make: StreamRecorders) {
    STREAM_RECORDERS.with(|r| *r.borrow_mut() = Some(make));
}

/// The recorder of a stream the calling thread makes now (run by an executor thread).
pub(super) fn new_streams_recorder() -> Option<StreamRecorder> {
    let make = STREAM_RECORDERS
        .try_with(|r| r.borrow().clone())
        .ok()
        .flatten()?;
    make()
}

/// Runs `run` (an instruction that is `what`, copying `bytes`, of a stream whose recorder is
/// `stream`'s), telling that recorder, else the calling thread's, if there is one.
pub(super) fn recording<T>(
    stream: Option<&StreamRecorder>,
    what: &'static str,
    bytes: u64,
    run: impl FnOnce() -> T,
) -> T {
    // A thread's last destructors may still run instructions: by then there is no recorder.
    let thread = match stream {
        Some(_) => None,
        None => RECORDER.try_with(|r| r.borrow().clone()).ok().flatten(),
    };
    let recorder: &dyn Fn(&Ran) = match (stream, &thread) {
        (Some(recorder), _) => &**recorder,
        (None, Some(recorder)) => &**recorder,
        (None, None) => return run(),
    };
    let start_ns = now_ns();
    let done = run();
    recorder(&Ran {
        what,
        start_ns,
        dur_ns: now_ns().saturating_sub(start_ns),
        bytes,
    });
    done
}
