//! The clocks the board's and the flight recorder's times are read from: ones that every
//! process of a machine shares, so that a time a worker process wrote means the same to its
//! controller.
//!
//! The one idea: `CLOCK_MONOTONIC_COARSE` is the kernel's monotonic clock as of its last tick,
//! read from memory the kernel shares with every process: a reading costs a few loads, which a
//! worker can afford at every call, and its resolution (a tick) is far finer than the waits a
//! status or a hang report speaks of. A timeline needs finer times: `CLOCK_MONOTONIC` itself,
//! a little dearer (the vDSO reads the time-stamp counter).

/// Nanoseconds on the machine's coarse monotonic clock.
pub(crate) fn coarse_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec to write; the clock id is one Linux always has.
    let code = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut now) };
    debug_assert_eq!(code, 0, "CLOCK_MONOTONIC_COARSE is always there");
    (now.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(now.tv_nsec as u64)
}

/// Nanoseconds on the machine's monotonic clock.
pub(crate) fn now_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec to write; the clock id is one Linux always has.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    (now.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(now.tv_nsec as u64)
}
