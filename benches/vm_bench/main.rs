//! Stream VM benchmark: small-read latency, throughput of enqueued copies and copy bandwidth,
//! each against a floor measured in the same run, and heap allocations per small read.
//!
//! ```sh
//! cargo bench --bench vm_bench               # 11 rounds, about 10 s on a 2-CPU machine
//! cargo bench --bench vm_bench -- --quick    # 3 short rounds, a smoke test
//! cargo bench --bench vm_bench -- --help
//! ```
//!
//! Every round measures every metric once, the groups in an order that rotates from round to
//! round; a cell is the median of the round medians with the best round in brackets. Absolute
//! times on small virtual machines drift by up to 10x between runs; compare the ratios, which
//! divide figures taken in the same rounds. BENCHMARKS.md ("Stream VM") describes each metric
//! and the targets.

mod counting;
mod floors;
mod stats;
mod vm;

use std::ffi::CStr;
use std::time::{Duration, Instant};

use floors::{AlignedBuffer, fill};
use stats::{Across, Budget, CpuClock, Summary, across, back_to_back, interleaved};
use vm::{BATCH, BIG_COPY_BYTES, BUSY_BYTES, BUSY_COPIES, SMALL_COPY_BYTES, Vm};

#[global_allocator]
static ALLOCATOR: counting::Counting = counting::Counting;

/// What is measured; each has one summary per round.
#[derive(Clone, Copy)]
enum Metric {
    PingPong,
    ReadIdleC,
    ReadIdleRust,
    ReadInline,
    SessionSync,
    ReadAfterIdle,
    SessionAfterIdle,
    BusySync,
    BusyRead,
    Memcpy4K,
    CopiesC,
    CopiesOne,
    CopiesTwoShared,
    CopiesTwoOwn,
    CopiesInline,
    Memcpy16M,
    Copy16M,
}

/// How many metrics there are (`Copy16M` is the last).
const METRICS: usize = Metric::Copy16M as usize + 1;

struct Options {
    rounds: usize,
    /// Scales every sampling budget.
    scale: f64,
}

const QUICK: Options = Options {
    rounds: 3,
    scale: 0.2,
};

fn usage() -> ! {
    println!(
        "usage: cargo bench --bench vm_bench [-- OPTIONS]\n\
         \n\
         Measures the stream VM against floors taken in the same run and prints a table,\n\
         the ratios and a verdict per target.\n\
         \n\
         options:\n  \
           --quick       3 rounds with a fifth of the sampling time (a smoke test)\n  \
           --rounds N    number of rounds (default 11)\n  \
           --help        this text"
    );
    std::process::exit(0)
}

fn parse_options() -> Options {
    // An unoptimised build (`cargo test --all-targets` runs this program too) makes a smoke
    // test of it: its figures would mean nothing anyway.
    let mut options = if cfg!(debug_assertions) {
        QUICK
    } else {
        Options {
            rounds: 11,
            scale: 1.0,
        }
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            // `cargo bench` passes this to every bench program.
            "--bench" => {}
            "--quick" => options = QUICK,
            "--rounds" => {
                options.rounds = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|&n| n > 0)
                    .unwrap_or_else(|| {
                        eprintln!("vm_bench: --rounds takes a positive number");
                        std::process::exit(2)
                    })
            }
            "--help" | "-h" => usage(),
            other => {
                eprintln!("vm_bench: unknown option {other:?} (see --help)");
                std::process::exit(2)
            }
        }
    }
    options
}

fn budget(options: &Options, warm_ms: u64, time_ms: u64, max: usize, min: usize) -> Budget {
    let scaled = |ms: u64| Duration::from_secs_f64(ms as f64 * options.scale / 1000.0);
    Budget {
        warm: scaled(warm_ms),
        time: scaled(time_ms),
        max,
        min,
    }
}

/// One round's summaries, per metric.
type Round = [Option<Summary>; METRICS];

/// Blocks of idle reads whose median exceeded `SLOW_BLOCK_NS`, and how many of them ended with
/// the executor thread on the reading thread's CPU.
#[derive(Clone, Copy, Default)]
struct SlowBlocks {
    slow: usize,
    colocated: usize,
}

/// Blocks of idle-read measurements per round, alternating with the floor.
const LATENCY_BLOCKS: usize = 6;

/// How long the caller pauses before an "after idle" request: longer than the executor's and
/// the session worker's spin budget (200 us), so they have parked.
const IDLE_PAUSE: Duration = Duration::from_millis(1);

/// Far above any cross-CPU round trip seen on these machines (about 1.4 us when the vCPUs
/// sit far apart): a block this slow had its reads wait for a context switch.
const SLOW_BLOCK_NS: f64 = 2000.0;

/// Results of all rounds: per metric, one summary per round; and per round, its slow blocks of
/// idle reads.
struct Results {
    rounds: Vec<Round>,
    slow_blocks: Vec<SlowBlocks>,
}

impl Results {
    fn all(&self, m: Metric) -> Vec<Summary> {
        self.rounds.iter().filter_map(|r| r[m as usize]).collect()
    }

    fn across(&self, m: Metric) -> Across {
        across(&self.all(m))
    }

    /// Per-round ratios `num / den` of the round medians.
    fn round_ratios(&self, num: Metric, den: Metric) -> Vec<f64> {
        self.rounds
            .iter()
            .filter_map(|r| Some(r[num as usize]?.median / r[den as usize]?.median))
            .collect()
    }
}

/// Floor buffers for the copy metrics.
struct FloorBuffers {
    small_src: AlignedBuffer,
    small_dst: AlignedBuffer,
    big_src: AlignedBuffer,
    big_dst: AlignedBuffer,
}

impl FloorBuffers {
    fn new() -> FloorBuffers {
        let mut b = FloorBuffers {
            small_src: AlignedBuffer::new(SMALL_COPY_BYTES),
            small_dst: AlignedBuffer::new(SMALL_COPY_BYTES),
            big_src: AlignedBuffer::new(BIG_COPY_BYTES),
            big_dst: AlignedBuffer::new(BIG_COPY_BYTES),
        };
        fill(b.small_src.as_mut_slice(), 5);
        fill(b.big_src.as_mut_slice(), 3);
        b
    }
}

/// Whether the shared CPU executor last ran on the calling thread's CPU.
fn executor_on_my_cpu() -> bool {
    vm::thread_cpu("dvm-vm-1-0").is_some_and(|cpu| Some(cpu) == vm::current_cpu())
}

/// One round: every group of metrics once, starting with group `first`.
fn round(
    options: &Options,
    vm: &Vm,
    floor: &mut FloorBuffers,
    first: usize,
) -> (Round, SlowBlocks) {
    let mut out = [None; METRICS];
    let mut slow_blocks = SlowBlocks::default();
    let mut put = |m: Metric, samples: Vec<f64>, per: f64| {
        out[m as usize] = Some(Summary::of(samples, per));
    };
    const GROUPS: usize = 5;
    for g in (0..GROUPS).map(|i| (first + i) % GROUPS) {
        match g {
            0 => {
                // The floor and the round trips in short alternating blocks: the host moves
                // the vCPUs around (a cross-CPU round trip can triple for a while), and blocks
                // a few milliseconds apart see the same placement far more often than metrics
                // measured a hundred milliseconds apart.
                vm.check_small_reads();
                let b = budget(options, 2, 10, 10_000, 20);
                let mut samples: [Vec<f64>; 5] = Default::default();
                let (mut value, mut bytes) = (0i32, [0u8; 4]);
                for block in 0..LATENCY_BLOCKS {
                    for i in (0..5).map(|i| (i + block) % 5) {
                        let taken = match i {
                            0 => floors::spin_pingpong(b),
                            1 => {
                                let taken = back_to_back(b, || vm.read_c(&mut value));
                                if stats::median(&taken) > SLOW_BLOCK_NS {
                                    slow_blocks.slow += 1;
                                    // The executor still polls its queue right after the reads.
                                    slow_blocks.colocated += usize::from(executor_on_my_cpu());
                                }
                                taken
                            }
                            2 => back_to_back(b, || vm.read_rust(&mut bytes)),
                            3 => back_to_back(b, || vm.read_inline(&mut bytes)),
                            _ => back_to_back(b, || vm.session_sync()),
                        };
                        samples[i].extend(taken);
                    }
                }
                vm.check_small_reads();
                let [ping, read_c, read_rust, read_inline, session] = samples;
                put(Metric::PingPong, ping, 1.0);
                put(Metric::ReadIdleC, read_c, 1.0);
                put(Metric::ReadIdleRust, read_rust, 1.0);
                put(Metric::ReadInline, read_inline, 1.0);
                put(Metric::SessionSync, session, 1.0);
            }
            1 => {
                vm.check_busy_copies();
                let [sync, read] = interleaved::<2>(
                    budget(options, 10, 100, 20_000, 50),
                    |_| vm.queue_busy_copies(),
                    |i| {
                        if i == 0 { vm.sync() } else { vm.read_c(&mut 0) }
                    },
                );
                put(Metric::BusySync, sync, 1.0);
                put(Metric::BusyRead, read, 1.0);
                vm.check_small_reads();
            }
            2 => {
                vm.check_batch_c();
                vm.check_two_streams(false);
                vm.check_two_streams(true);
                vm.check_batch_inline();
                let [memcpy, c, one, shared, own, inline] = interleaved::<6>(
                    budget(options, 10, 150, 1000, 3),
                    |_| {},
                    |i| match i {
                        0 => {
                            for _ in 0..BATCH {
                                floors::copy(&mut floor.small_dst, &floor.small_src);
                            }
                        }
                        1 => vm.batch_c(),
                        2 => vm.batch_one_stream(),
                        3 => vm.batch_two_streams(false),
                        4 => vm.batch_two_streams(true),
                        _ => vm.batch_inline(),
                    },
                );
                assert!(floor.small_dst.as_slice() == floor.small_src.as_slice());
                let per = BATCH as f64;
                put(Metric::Memcpy4K, memcpy, per);
                put(Metric::CopiesC, c, per);
                put(Metric::CopiesOne, one, per);
                put(Metric::CopiesTwoShared, shared, per);
                put(Metric::CopiesTwoOwn, own, per);
                put(Metric::CopiesInline, inline, per);
            }
            3 => {
                // The first request after a pause: the executor (or the session's worker) has
                // parked, so the request has to wake it, as a caller that reads a flag once per
                // step of a longer computation would.
                let [read, session] = interleaved::<2>(
                    budget(options, 0, 40, 200, 10),
                    |_| std::thread::sleep(IDLE_PAUSE),
                    |i| {
                        if i == 0 {
                            vm.read_c(&mut 0)
                        } else {
                            vm.session_sync()
                        }
                    },
                );
                put(Metric::ReadAfterIdle, read, 1.0);
                put(Metric::SessionAfterIdle, session, 1.0);
            }
            _ => {
                vm.check_big_copy();
                let [memcpy, copy] = interleaved::<2>(
                    budget(options, 5, 200, 500, 5),
                    |_| {},
                    |i| {
                        if i == 0 {
                            floors::copy(&mut floor.big_dst, &floor.big_src)
                        } else {
                            vm.big_copy()
                        }
                    },
                );
                assert!(floor.big_dst.as_slice() == floor.big_src.as_slice());
                put(Metric::Memcpy16M, memcpy, 1.0);
                put(Metric::Copy16M, copy, 1.0);
            }
        }
    }
    (out, slow_blocks)
}

/// Heap allocations per operation in steady state.
struct Allocations {
    read_c_idle: f64,
    read_rust_idle: f64,
    read_inline: f64,
    read_c_busy: f64,
    copy_enqueue: f64,
}

fn count_allocations(vm: &Vm) -> Allocations {
    const READS: u64 = 10_000;
    const BUSY: u64 = 1_000;
    let mut value = 0i32;
    let mut bytes = [0u8; 4];
    for _ in 0..1000 {
        vm.read_c(&mut value);
        vm.read_rust(&mut bytes);
        vm.read_inline(&mut bytes);
    }
    // Idle: nothing else runs, so everything the process allocates is the reads' doing.
    let before = counting::process();
    for _ in 0..READS {
        vm.read_c(&mut value);
    }
    let read_c_idle = (counting::process() - before) as f64 / READS as f64;
    let before = counting::process();
    for _ in 0..READS {
        vm.read_rust(&mut bytes);
    }
    let read_rust_idle = (counting::process() - before) as f64 / READS as f64;
    let before = counting::process();
    for _ in 0..READS {
        vm.read_inline(&mut bytes);
    }
    let read_inline = (counting::process() - before) as f64 / READS as f64;
    // Busy: the queued copies allocate; count the reading thread around the read calls only.
    let (mut reads, mut copies) = (0, 0);
    for _ in 0..BUSY {
        let t0 = counting::this_thread();
        vm.queue_busy_copies();
        let t1 = counting::this_thread();
        vm.read_c(&mut value);
        reads += counting::this_thread() - t1;
        copies += t1 - t0;
    }
    vm.sync();
    Allocations {
        read_c_idle,
        read_rust_idle,
        read_inline,
        read_c_busy: reads as f64 / BUSY as f64,
        copy_enqueue: copies as f64 / (BUSY * BUSY_COPIES as u64) as f64,
    }
}

/// Three significant digits.
fn fmt(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    let a = x.abs();
    if a >= 100.0 || a == 0.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

fn ratio(x: f64) -> String {
    format!("{}x", fmt(x))
}

fn range(values: &[f64]) -> String {
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{}-{}", fmt(lo), fmt(hi))
}

fn machine() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cpus} CPUs, {model}")
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn main() {
    let options = parse_options();
    let started = Instant::now();
    // SAFETY: a static NUL-terminated string.
    let version = unsafe { CStr::from_ptr(discovm::capi::dvm_version()) };
    println!(
        "discovm {} stream VM benchmark: {} rounds; {}; load average {} at start",
        version.to_string_lossy(),
        options.rounds,
        machine(),
        loadavg()
    );
    if cfg!(debug_assertions) {
        println!("Unoptimised build: a quick smoke run; use `cargo bench --bench vm_bench`.");
    }

    let vm = Vm::new();
    let mut floor = FloorBuffers::new();
    let mut results = Results {
        rounds: Vec::new(),
        slow_blocks: Vec::new(),
    };
    let mut foreign = Vec::new();
    let mut noisy_starts = 0;
    for r in 0..options.rounds {
        // Let other processes quiet down first (up to 2 s), and note what they took meanwhile.
        if let Some(load) = stats::wait_for_quiet(Duration::from_secs(2), 0.25)
            && load >= 0.25
        {
            noisy_starts += 1;
        }
        let clock = CpuClock::now();
        let (summaries, slow_blocks) = round(&options, &vm, &mut floor, r);
        let load = match (clock, CpuClock::now()) {
            (Some(a), Some(b)) => a.foreign_cpus(&b),
            _ => f64::NAN,
        };
        foreign.push(load);
        results.rounds.push(summaries);
        results.slow_blocks.push(slow_blocks);
        let median = |m: Metric| summaries[m as usize].map_or(f64::NAN, |s| s.median);
        eprintln!(
            "vm_bench: round {}/{}: floor {} ns, idle read {} ns, {} slow blocks of reads ({} \
             with the executor on the reader's CPU), other processes {} CPUs",
            r + 1,
            options.rounds,
            fmt(median(Metric::PingPong)),
            fmt(median(Metric::ReadIdleC)),
            slow_blocks.slow,
            slow_blocks.colocated,
            fmt(load)
        );
    }
    let allocations = count_allocations(&vm);
    let (vm_src_off, vm_dst_off) = vm.big_page_offsets();
    let floor_offsets = (
        floor.big_src.as_mut_ptr() as usize % 4096,
        floor.big_dst.as_mut_ptr() as usize % 4096,
    );
    drop(vm);

    report(&results, &allocations);
    println!();
    println!(
        "16 MiB buffers, page offsets (src, dst): VM tensors ({vm_src_off:#x}, {vm_dst_off:#x}), \
         memcpy floor\n({:#x}, {:#x}); both 64-byte aligned allocations.",
        floor_offsets.0, floor_offsets.1
    );
    foreign.retain(|x| x.is_finite());
    let mean = foreign.iter().sum::<f64>() / foreign.len().max(1) as f64;
    let max = foreign.iter().copied().fold(0.0, f64::max);
    println!(
        "Other processes took {} CPUs on average during the rounds (at most {} in one round);\n\
         {noisy_starts} of {} rounds started while they took 0.25 CPUs or more. Load average \
         {} at the end;\n{:.1} s in all.",
        fmt(mean),
        fmt(max),
        options.rounds,
        loadavg(),
        started.elapsed().as_secs_f64()
    );
}

fn report(results: &Results, allocations: &Allocations) {
    use Metric::*;
    let a = |m| results.across(m);
    let ping = a(PingPong);
    let cell = |x: Across| format!("{} [{}]", fmt(x.median), fmt(x.best));

    println!();
    println!(
        "{:<54}{:>16}{:>10}{:>10}",
        "Small reads, ns per operation", "median [best]", "p90", "/ floor"
    );
    let lat = |label: &str, m: Metric| {
        let x = a(m);
        println!(
            "  {label:<52}{:>16}{:>10}{:>10}",
            cell(x),
            fmt(x.p90),
            ratio(x.median / ping.median)
        );
    };
    lat("spin ping-pong round trip (floor)", PingPong);
    lat("read 4 B, stream idle (dvm_tensor_read)", ReadIdleC);
    lat("read 4 B, stream idle (vm::read)", ReadIdleRust);
    lat("read 4 B, inline stream (runs on the caller)", ReadInline);
    lat("session sync worker 0, 1 worker (reference)", SessionSync);
    lat("read 4 B, 1 ms after the last request", ReadAfterIdle);
    lat(
        "session sync, 1 ms after the last request (reference)",
        SessionAfterIdle,
    );
    let busy = format!("{BUSY_COPIES} x {} KiB copies queued", BUSY_BYTES >> 10);
    lat(&format!("{busy}, then dvm_stream_sync"), BusySync);
    lat(&format!("{busy}, then read 4 B"), BusyRead);

    println!();
    println!(
        "{:<54}{:>16}{:>10}{:>10}",
        format!(
            "Copies of {} KiB, {BATCH} per batch, ns per copy",
            SMALL_COPY_BYTES >> 10
        ),
        "median [best]",
        "M/s",
        "/ memcpy"
    );
    let memcpy4k = a(Memcpy4K);
    let thr = |label: &str, m: Metric| {
        let x = a(m);
        println!(
            "  {label:<52}{:>16}{:>10}{:>10}",
            cell(x),
            fmt(1e3 / x.median),
            ratio(x.median / memcpy4k.median)
        );
    };
    thr("memcpy on one thread (floor)", Memcpy4K);
    thr("one stream, dvm_tensor_copy", CopiesC);
    thr("one stream, Stream::copy", CopiesOne);
    thr(
        "two streams, soft sync every copy, shared executor",
        CopiesTwoShared,
    );
    thr(
        "two streams, soft sync every copy, a thread each",
        CopiesTwoOwn,
    );
    thr("one inline stream (runs on the caller)", CopiesInline);

    println!();
    println!(
        "{:<54}{:>16}{:>10}{:>10}",
        "Copies of 16 MiB, us per copy", "median [best]", "GB/s", "bandwidth"
    );
    let memcpy16 = a(Memcpy16M);
    let big = |label: &str, m: Metric| {
        let x = a(m);
        let us = Across {
            median: x.median / 1e3,
            best: x.best / 1e3,
            p90: x.p90 / 1e3,
        };
        println!(
            "  {label:<52}{:>16}{:>10}{:>10}",
            cell(us),
            fmt(BIG_COPY_BYTES as f64 / x.median),
            ratio(memcpy16.median / x.median)
        );
    };
    big("memcpy on one thread (floor)", Memcpy16M);
    big("dvm_tensor_copy + dvm_stream_sync", Copy16M);

    println!();
    println!(
        "{:<54}{:>16}",
        "Heap allocations, steady state", "per operation"
    );
    let alloc = |label: &str, x: f64| println!("  {label:<52}{:>16}", fmt(x));
    alloc(
        "dvm_tensor_read, idle (whole process)",
        allocations.read_c_idle,
    );
    alloc("vm::read, idle (whole process)", allocations.read_rust_idle);
    alloc(
        "vm::read, inline stream (whole process)",
        allocations.read_inline,
    );
    alloc(
        "dvm_tensor_read, busy (reading thread)",
        allocations.read_c_busy,
    );
    alloc(
        "dvm_tensor_copy enqueue (calling thread; no target)",
        allocations.copy_enqueue,
    );

    let idle_ratio = a(ReadIdleC).median / ping.median;
    let bandwidth = memcpy16.median / a(Copy16M).median;
    let reads_alloc = allocations.read_c_idle
        + allocations.read_rust_idle
        + allocations.read_inline
        + allocations.read_c_busy;
    let verdict = |met: bool| if met { "met" } else { "MISSED" };
    println!();
    println!(
        "{:<48}{:>12}{:>18}{:>10}",
        "Targets", "this run", "rounds", "verdict"
    );
    println!(
        "  {:<46}{:>12}{:>18}{:>10}",
        "idle 4 B read median <= 2x spin ping-pong",
        ratio(idle_ratio),
        range(&results.round_ratios(ReadIdleC, PingPong)),
        verdict(idle_ratio <= 2.0)
    );
    let bw_rounds: Vec<f64> = results
        .round_ratios(Copy16M, Memcpy16M)
        .iter()
        .map(|r| 1.0 / r)
        .collect();
    println!(
        "  {:<46}{:>12}{:>18}{:>10}",
        "16 MiB copy bandwidth >= 0.9x memcpy",
        ratio(bandwidth),
        range(&bw_rounds),
        verdict(bandwidth >= 0.9)
    );
    println!(
        "  {:<46}{:>12}{:>18}{:>10}",
        "heap allocations per small read = 0",
        fmt(reads_alloc),
        "-",
        verdict(reads_alloc == 0.0)
    );
    let per_round: Vec<String> = results
        .rounds
        .iter()
        .zip(&results.slow_blocks)
        .map(|(r, slow)| {
            let m = |m: Metric| fmt(r[m as usize].map_or(f64::NAN, |s| s.median));
            let mark = if slow.slow > 0 {
                format!(" ({}:{})", slow.slow, slow.colocated)
            } else {
                String::new()
            };
            format!("{}/{}/{}{mark}", m(ReadIdleC), m(SessionSync), m(PingPong))
        })
        .collect();
    let slow: usize = results.slow_blocks.iter().map(|s| s.slow).sum();
    let colocated: usize = results.slow_blocks.iter().map(|s| s.colocated).sum();
    println!();
    println!(
        "Per round, ns: idle dvm_tensor_read / session sync / ping-pong floor; (s:c): s blocks\n\
         of reads had a median over {} us, c of them with the executor on the reader's CPU:",
        fmt(SLOW_BLOCK_NS / 1e3),
    );
    for line in per_round.chunks(5) {
        println!("  {}", line.join("  "));
    }
    println!(
        "Slow blocks of idle reads: {slow} of {} ({colocated} with the executor on the \
         reader's CPU).",
        results.rounds.len() * LATENCY_BLOCKS
    );
    println!();
    println!("Other ratios (of medians in this run):");
    println!(
        "  busy read / busy sync (the read's cost beyond waiting for the queue): {}",
        ratio(a(BusyRead).median / a(BusySync).median)
    );
    println!(
        "  vm::read / dvm_tensor_read (idle): {}",
        ratio(a(ReadIdleRust).median / a(ReadIdleC).median)
    );
    println!(
        "  dvm_tensor_copy / Stream::copy, one stream: {}",
        ratio(a(CopiesC).median / a(CopiesOne).median)
    );
    println!(
        "  two streams / one stream, per copy: shared executor {}, a thread each {}",
        ratio(a(CopiesTwoShared).median / a(CopiesOne).median),
        ratio(a(CopiesTwoOwn).median / a(CopiesOne).median)
    );
}
