//! What a stream's instructions tell as they run: the thread that runs them may have a recorder
//! (a worker's thread records into its flight recorder), which hears of each instruction it ran,
//! what it was, when it began and how long it took.
//!
//! The one idea: the recorder is the running thread's own, so an instruction is recorded by the
//! thread that alone writes its worker's ring (the worker's stream runs inline, on the worker's
//! thread), and a thread without one pays a thread-local read.

use std::cell::RefCell;
use std::rc::Rc;

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

thread_local! {
    static RECORDER: RefCell<Option<Recorder>> = const { RefCell::new(None) };
}

/// Has the instructions the calling thread runs from now on told to `recorder`.
pub(crate) fn record_on_this_thread(recorder: Recorder) {
    RECORDER.with(|r| *r.borrow_mut() = Some(recorder));
}

/// Runs `run` (an instruction that is `what`, copying `bytes`), telling the calling thread's
/// recorder, if it has one.
pub(super) fn recording<T>(what: &'static str, bytes: u64, run: impl FnOnce() -> T) -> T {
    // A thread's last destructors may still run instructions: by then there is no recorder.
    let Some(recorder) = RECORDER.try_with(|r| r.borrow().clone()).ok().flatten() else {
        return run();
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
