//! The synchronisation primitives of the crate's hand-made protocols (the channel's
//! spin-then-park wait, the shared-memory ring's futex wait, the small-memory access handshake,
//! the session's queues, replies and register files), under one set of names.
//!
//! The one idea: every build uses the standard library's (crossbeam's queue, the kernel's
//! futex), and under `cfg(loom)` the same code runs on loom's model-checked ones, whose
//! interleavings the models beside each protocol explore (`loom_model` modules, driven by
//! `tests/loom.rs`). A model has no clock: a timed park is a plain park, so a model that would
//! wait for a timeout deadlocks and fails (models use no timeouts), and `time::Instant` is a
//! counter that every reading advances, so a spin bounded by time polls alike in every run.

#[cfg(not(loom))]
pub(crate) use crossbeam_queue::ArrayQueue;
#[cfg(not(loom))]
pub(crate) use std::hint::spin_loop;
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Mutex, atomic};
#[cfg(not(loom))]
pub(crate) use std::thread_local;
#[cfg(not(loom))]
pub(crate) use std::time;

pub(crate) mod clock;
pub(crate) mod futex;

#[cfg(loom)]
mod queue;
#[cfg(loom)]
pub(crate) use loom::hint::spin_loop;
#[cfg(loom)]
pub(crate) use loom::sync::{Arc, atomic};
#[cfg(loom)]
pub(crate) use queue::ArrayQueue;
/// Locks stay the standard library's in models: every critical section of these protocols is
/// a few instructions with no atomic inside, so it never spans a point where the model
/// switches threads, and the model's own lock cannot take a stray `unpark` (a waker's late
/// wake-up is legal and harmless; loom's lock asserts on it).
#[cfg(loom)]
pub(crate) use std::sync::Mutex;

/// Loom's thread-locals, declared as the standard library's `const` ones are.
#[cfg(loom)]
macro_rules! loom_thread_local {
    ($($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = const { $init:expr };)*) => {
        loom::thread_local! { $($(#[$attr])* $vis static $name: $t = $init;)* }
    };
}
#[cfg(loom)]
pub(crate) use loom_thread_local as thread_local;

/// Threads: the standard library's.
#[cfg(not(loom))]
pub(crate) mod thread {
    pub(crate) use std::thread::{Builder, JoinHandle, Thread, current, park_timeout, yield_now};
}

/// Threads: loom's, with the clock-bound calls mapped as the module documentation says.
#[cfg(loom)]
pub(crate) mod thread {
    use std::time::Duration;

    pub(crate) use loom::thread::{Builder, JoinHandle, Thread, current, yield_now};

    pub(crate) fn park_timeout(_: Duration) {
        loom::thread::park();
    }
}

/// The model clock: each reading is a fixed step later than the one before, whichever thread
/// takes it.
#[cfg(loom)]
pub(crate) mod time {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    /// How far each reading moves the clock, in nanoseconds: a default spin budget (200 µs)
    /// then polls twice.
    const STEP_NANOS: u64 = 100_000;

    static READINGS: AtomicU64 = AtomicU64::new(0);

    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
    pub struct Instant(Duration);

    impl Instant {
        pub fn now() -> Instant {
            let n = READINGS.fetch_add(1, Ordering::Relaxed);
            Instant(Duration::from_nanos(n.saturating_mul(STEP_NANOS)))
        }
    }

    impl std::ops::Add<Duration> for Instant {
        type Output = Instant;
        fn add(self, d: Duration) -> Instant {
            Instant(self.0 + d)
        }
    }

    impl std::ops::Sub for Instant {
        type Output = Duration;
        fn sub(self, earlier: Instant) -> Duration {
            self.0.saturating_sub(earlier.0)
        }
    }
}

/// Runs a loom model: every interleaving of its threads with at most `preemptions` preemptions
/// of a runnable thread (`None`: no bound; `LOOM_MAX_PREEMPTIONS` overrides either), then
/// prints how many executions that took.
#[cfg(all(test, loom))]
pub(crate) fn explore(
    name: &str,
    preemptions: Option<usize>,
    model: impl Fn() + Send + Sync + 'static,
) {
    use std::sync::atomic::{AtomicUsize, Ordering};

    let executions = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = executions.clone();
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = preemptions;
    }
    // An execution of the larger models takes a few thousand scheduling decisions.
    builder.max_branches = 100_000;
    builder.check(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        model();
    });
    let bound = builder
        .preemption_bound
        .map_or("none".to_string(), |b| b.to_string());
    println!(
        "loom model `{name}`: {} executions explored (preemption bound: {bound})",
        executions.load(Ordering::Relaxed)
    );
}
