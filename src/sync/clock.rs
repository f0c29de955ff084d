//! The clocks the board's and the flight recorder's times are read from: ones that every
//! process of a machine shares, so that a time a worker process wrote means the same to its
//! controller.
//!
//! The one idea: `CLOCK_MONOTONIC_COARSE` is the kernel's monotonic clock as of its last tick,
//! read from memory the kernel shares with every process: a reading costs a few loads, which a
//! worker can afford at every call, and its resolution (a tick) is far finer than the waits a
//! status or a hang report speaks of. A timeline needs finer times: `CLOCK_MONOTONIC` itself,
//! a little dearer (the vDSO reads the time-stamp counter). A hot path that notes many times
//! reads [`ticks`], the time-stamp counter itself (half the cost again), and converts them later
//! by two [`Calibration`]s that bracket them.

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

/// The time-stamp counter where it runs at one constant rate on every core (see [`TSC`]),
/// else [`now_ns`]: a reading for [`Calibration::to_ns`] to convert.
pub(crate) fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    if *TSC {
        // SAFETY: RDTSC exists on every x86-64 processor and has no preconditions.
        return unsafe { core::arch::x86_64::_rdtsc() };
    }
    now_ns()
}

/// Whether the time-stamp counter can stand for the monotonic clock: the processor says it is
/// invariant (CPUID leaf 0x8000_0007, EDX bit 8), and the kernel keeps its monotonic clock on it
/// (its clock source is `tsc`), which it does only after finding the cores' counters in step.
#[cfg(target_arch = "x86_64")]
static TSC: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| {
    let source = "/sys/devices/system/clocksource/clocksource0/current_clocksource";
    let kernel_uses_it = std::fs::read_to_string(source).is_ok_and(|name| name.trim() == "tsc");
    kernel_uses_it && invariant_tsc()
});

/// Whether this processor's time-stamp counter is invariant.
#[cfg(target_arch = "x86_64")]
fn invariant_tsc() -> bool {
    use core::arch::x86_64::__cpuid;
    // SAFETY: CPUID exists on every x86-64 processor, and a leaf past the highest one answers
    // zeroes; newer compilers than the crate's oldest deem it safe.
    #[allow(unused_unsafe)]
    unsafe {
        __cpuid(0x8000_0000).eax >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0
    }
}

/// A reading of [`ticks`] and [`now_ns`] at one moment: two of them map the ticks read
/// between them onto the monotonic clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Calibration {
    ticks: u64,
    ns: u64,
}

impl Calibration {
    /// Both clocks now (the ticks at the middle of the nanoseconds' reading).
    pub fn now() -> Calibration {
        let before = ticks();
        let ns = now_ns();
        let after = ticks();
        Calibration {
            ticks: before + (after.saturating_sub(before)) / 2,
            ns,
        }
    }

    /// The monotonic time of `reading` (ticks), on the line through `self` and `later`.
    pub fn to_ns(self, later: Calibration, reading: u64) -> u64 {
        let (ticks, ns) = (
            later.ticks.saturating_sub(self.ticks),
            later.ns.saturating_sub(self.ns),
        );
        if ticks == 0 {
            return self.ns;
        }
        let since = reading as i128 - self.ticks as i128;
        (self.ns as i128 + since * ns as i128 / ticks as i128).max(0) as u64
    }

    /// The nanoseconds of `span` ticks, at the rate between `self` and `later`.
    pub fn span_ns(self, later: Calibration, span: u64) -> u64 {
        let ticks = later.ticks.saturating_sub(self.ticks).max(1);
        (span as u128 * later.ns.saturating_sub(self.ns) as u128 / ticks as u128) as u64
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn ticks_read_between_two_calibrations_land_between_their_times() {
        let first = Calibration::now();
        let reading = ticks();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let between = now_ns();
        let later_reading = ticks();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let last = Calibration::now();
        let at = first.to_ns(last, reading);
        let later = first.to_ns(last, later_reading);
        assert!(first.ns <= at && at < between, "{first:?} {at} {between}");
        assert!(
            between <= later + 1_000_000 && later <= last.ns,
            "{between} {later} {last:?}"
        );
        let span = first.span_ns(last, later_reading - reading);
        assert!(
            (15_000_000..30_000_000).contains(&span),
            "{span} ns for 20 ms"
        );
    }

    #[test]
    fn a_calibration_with_itself_maps_every_reading_to_its_time() {
        let one = Calibration { ticks: 100, ns: 5 };
        assert_eq!(one.to_ns(one, 1000), 5);
        let later = Calibration {
            ticks: 300,
            ns: 105,
        };
        assert_eq!(one.to_ns(later, 200), 55);
        assert_eq!(one.to_ns(later, 0), 0, "before the first: clamped at 0");
        assert_eq!(one.span_ns(later, 20), 10);
    }
}
