//! Sampling loops, per-round summaries, and the load other processes put on the machine.

use std::time::{Duration, Instant};

/// How long and how often one metric is sampled in one round.
#[derive(Clone, Copy)]
pub struct Budget {
    /// Time spent running the operation untimed first, so threads are placed and caches warm.
    pub warm: Duration,
    /// Sampling stops after this long (but takes at least `min` samples) ...
    pub time: Duration,
    /// ... or after this many samples.
    pub max: usize,
    pub min: usize,
}

/// Times `op` back to back: a sample is the time from the end of the previous call to the end
/// of this one, one clock read per sample (the ping-pong floor is measured the same way).
pub fn back_to_back(budget: Budget, mut op: impl FnMut()) -> Vec<f64> {
    let warm_end = Instant::now() + budget.warm;
    while Instant::now() < warm_end {
        op();
    }
    let mut samples = Vec::with_capacity(budget.max);
    let start = Instant::now();
    let mut t0 = start;
    while samples.len() < budget.max && (samples.len() < budget.min || t0 - start < budget.time) {
        op();
        let t1 = Instant::now();
        samples.push((t1 - t0).as_nanos() as f64);
        t0 = t1;
    }
    samples
}

/// Times several operations in turn, one sample of each per pass, so that drift during the
/// round touches all of them alike. Before each timed call, `prepare(i)` runs untimed; then
/// the clock is read around `timed(i)`.
pub fn interleaved<const N: usize>(
    budget: Budget,
    mut prepare: impl FnMut(usize),
    mut timed: impl FnMut(usize),
) -> [Vec<f64>; N] {
    let warm_end = Instant::now() + budget.warm;
    while Instant::now() < warm_end {
        for i in 0..N {
            prepare(i);
            timed(i);
        }
    }
    let mut samples: [Vec<f64>; N] = std::array::from_fn(|_| Vec::with_capacity(budget.max));
    let start = Instant::now();
    let mut passes = 0;
    while passes < budget.max && (passes < budget.min || start.elapsed() < budget.time) {
        for (i, out) in samples.iter_mut().enumerate() {
            prepare(i);
            let t0 = Instant::now();
            timed(i);
            out.push((t0.elapsed()).as_nanos() as f64);
        }
        passes += 1;
    }
    samples
}

/// One metric in one round.
#[derive(Clone, Copy, Debug)]
pub struct Summary {
    pub median: f64,
    pub p90: f64,
}

fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

impl Summary {
    /// Median and 90th percentile of `samples`, each divided by `per` (operations per sample).
    pub fn of(mut samples: Vec<f64>, per: f64) -> Summary {
        assert!(!samples.is_empty(), "a metric took no samples");
        samples.sort_by(f64::total_cmp);
        Summary {
            median: quantile_sorted(&samples, 0.5) / per,
            p90: quantile_sorted(&samples, 0.9) / per,
        }
    }
}

/// The median of `values` (the middle two averaged for an even count).
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    quantile_sorted(&sorted, 0.5)
}

/// A metric over all rounds: the median of the round medians, the best round median (the
/// lowest time) and the median of the round p90s.
#[derive(Clone, Copy, Debug)]
pub struct Across {
    pub median: f64,
    pub best: f64,
    pub p90: f64,
}

pub fn across(rounds: &[Summary]) -> Across {
    let medians: Vec<f64> = rounds.iter().map(|s| s.median).collect();
    let p90s: Vec<f64> = rounds.iter().map(|s| s.p90).collect();
    Across {
        median: median(&medians),
        best: medians.iter().copied().fold(f64::INFINITY, f64::min),
        p90: median(&p90s),
    }
}

/// CPU time used on the whole machine and by this process, to tell how much other processes
/// took while we measured.
#[derive(Clone, Copy)]
pub struct CpuClock {
    at: Instant,
    machine_ticks: u64,
    own_ticks: u64,
}

fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 { hz as f64 } else { 100.0 }
}

impl CpuClock {
    /// Reads /proc/stat and /proc/self/stat; `None` where they cannot be read.
    pub fn now() -> Option<CpuClock> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let cpu = stat.lines().next()?.strip_prefix("cpu ")?;
        let fields: Vec<u64> = cpu
            .split_whitespace()
            .map(|f| f.parse().unwrap_or(0))
            .collect();
        // user nice system idle iowait irq softirq steal ...: busy = all but idle, iowait, steal.
        let busy: u64 = [0, 1, 2, 5, 6]
            .iter()
            .map(|&i| fields.get(i).copied().unwrap_or(0))
            .sum();
        let own = std::fs::read_to_string("/proc/self/stat").ok()?;
        // Fields after the command name (which may hold spaces) start at the state, field 3;
        // utime and stime are fields 14 and 15.
        let rest = &own[own.rfind(')')? + 2..];
        let own_fields: Vec<&str> = rest.split_whitespace().collect();
        let utime: u64 = own_fields.get(11)?.parse().ok()?;
        let stime: u64 = own_fields.get(12)?.parse().ok()?;
        Some(CpuClock {
            at: Instant::now(),
            machine_ticks: busy,
            own_ticks: utime + stime,
        })
    }

    /// CPUs' worth of work other processes did between `self` and `later`.
    pub fn foreign_cpus(&self, later: &CpuClock) -> f64 {
        let seconds = (later.at - self.at).as_secs_f64();
        if seconds <= 0.0 {
            return 0.0;
        }
        let machine = later.machine_ticks.saturating_sub(self.machine_ticks) as f64;
        let own = later.own_ticks.saturating_sub(self.own_ticks) as f64;
        ((machine - own).max(0.0) / ticks_per_second()) / seconds
    }
}

/// Waits up to `limit` for other processes to take less than `quiet` CPUs over 100 ms.
/// Returns the foreign load of the last window.
pub fn wait_for_quiet(limit: Duration, quiet: f64) -> Option<f64> {
    let end = Instant::now() + limit;
    loop {
        let a = CpuClock::now()?;
        std::thread::sleep(Duration::from_millis(100));
        let b = CpuClock::now()?;
        let load = a.foreign_cpus(&b);
        if load < quiet || Instant::now() >= end {
            return Some(load);
        }
    }
}
