//! CPU collectives benchmark: allreduce (sum, float32), allgather and broadcast for 4 KiB to
//! 64 MiB with N = 2 and 4 worker threads, and allreduce between as many worker processes, in
//! GB/s of algorithm bandwidth (bytes of one buffer / time per collective; for allgather the
//! gathered buffer), plus the 4 KiB allreduce latency. In the same run: the floors, a plain
//! `memcpy` and a single-thread `c = a + b` over the same sizes. The benchmark is its own worker
//! program: started with a worker's arguments, it registers its loop and serves the session. The collectives loop on the workers (timed on worker 0), so controller round trips
//! are not counted. Every figure is the median of 11 to 101 samples, each a short batch of
//! calls after a barrier, so that samples another process interrupted do not move it.
//!
//! Run: `cargo bench --bench ccl_bench` (add `-- --quick` for a smoke test).
//! `DVM_CCL_WORKERS=2,4` and `DVM_CCL_SIZES=4,1024` (KiB) choose what runs. Absolute numbers
//! on small shared machines drift between runs; compare ratios within one run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use discovm::abi::{DLDataType, KDL_FLOAT};
use discovm::object::{Function, Shape, Tensor, registry};
use discovm::session::{Session, SessionOptions, Target};
use discovm::worker::current as current_worker;
use discovm::{Any, AnyView, Result};

const F32: DLDataType = DLDataType::new(KDL_FLOAT, 32, 1);
const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;
/// Rounds of the allreduce on each kind of session, taken in turns.
const ROUNDS: usize = 3;

/// A tensor as the session's workers make them (in the session's shared memory on a worker
/// process).
fn tensor(bytes: usize) -> Result<Tensor> {
    let shape = Shape::new(&[(bytes / 4) as i64]);
    let empty = registry::get_global("runtime.disco.empty")?;
    empty
        .call(&[Any::from(shape).view(), Any::DataType(F32).view()])?
        .view()
        .as_tensor()
}

/// How a figure is sampled: `samples` batches of `batch` calls each (the median is reported),
/// about 512 MiB of buffers in all (8 MiB with `--quick`), each batch short enough (about
/// 1 MiB) that most batches run without another process taking the CPU.
fn sampling(bytes: usize, quick: bool) -> (usize, usize) {
    let per_figure = if quick { 8 * MIB } else { 512 * MIB };
    let batch = (MIB / bytes).clamp(1, 200);
    (batch, (per_figure / bytes / batch).clamp(11, 101))
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// `bench.ccl(kind, bytes, batch, samples)` on every worker: after one warm-up call,
/// `samples` times a barrier and `batch` collectives; returns the median seconds per
/// collective on this worker.
fn worker_loop(args: &[AnyView<'_>]) -> Result<Any> {
    let kind = args[0].as_i64()?;
    let bytes = args[1].as_i64()? as usize;
    let batch = args[2].as_i64()? as usize;
    let samples = args[3].as_i64()? as usize;
    let n = current_worker().expect("on a worker").num_workers;
    let (name, send, recv): (&str, Tensor, Tensor) = match kind {
        0 => ("runtime.disco.allreduce", tensor(bytes)?, tensor(bytes)?),
        1 => (
            "runtime.disco.allgather",
            tensor(bytes / n)?,
            tensor(bytes / n * n)?,
        ),
        _ => (
            "runtime.disco.broadcast_from_worker0",
            tensor(bytes)?,
            tensor(bytes)?,
        ),
    };
    for t in [&send, &recv] {
        // Touch the buffers first: fresh memory would measure page faults and whatever bits
        // the allocator left (denormals slow float arithmetic down).
        // SAFETY: the tensor owns `nbytes` bytes at `data_ptr`, and nothing else uses it yet.
        unsafe { std::ptr::write_bytes(t.data_ptr(), 0, t.nbytes()) };
    }
    let f = registry::get_global(name)?;
    let args: Vec<Any> = if kind == 0 {
        vec![
            send.into(),
            Shape::new(&[0]).into(),
            Any::Bool(false),
            recv.into(),
        ]
    } else {
        vec![send.into(), Any::Bool(false), recv.into()]
    };
    let views: Vec<AnyView<'_>> = args.iter().map(Any::view).collect();
    let barrier = registry::get_global("runtime.disco.barrier")?;
    f.call(&views)?;
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        barrier.call(&[])?;
        let start = Instant::now();
        for _ in 0..batch {
            f.call(&views)?;
        }
        times.push(start.elapsed().as_secs_f64() / batch as f64);
    }
    Ok(Any::Float(median(times)))
}

fn collective(s: &Arc<Session>, kind: i64, bytes: usize, (batch, samples): (usize, usize)) -> f64 {
    let f = s.get_global_func("bench.ccl").unwrap();
    let args = [
        Any::Int(kind),
        Any::Int(bytes as i64),
        Any::Int(batch as i64),
        Any::Int(samples as i64),
    ];
    let views: Vec<_> = args.iter().map(Any::view).collect();
    let out = s.call(Target::All, &f, &views).unwrap();
    s.sync_all().unwrap();
    match s.get_register(out.reg(), 0).unwrap() {
        Any::Float(seconds) => seconds,
        other => panic!("unexpected {other:?}"),
    }
}

fn time_per((batch, samples): (usize, usize), mut body: impl FnMut()) -> f64 {
    body();
    let times = (0..samples)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..batch {
                body();
            }
            start.elapsed().as_secs_f64() / batch as f64
        })
        .collect();
    median(times)
}

fn floors(bytes: usize, quick: bool) -> (f64, f64) {
    let len = bytes / 4;
    let a = vec![1.0f32; len];
    let b = vec![2.0f32; len];
    let mut c = vec![0.0f32; len];
    let sampling = sampling(bytes, quick);
    let copy = time_per(sampling, || {
        c.copy_from_slice(std::hint::black_box(&a));
        std::hint::black_box(&mut c);
    });
    let add = time_per(sampling, || {
        for ((c, a), b) in c.iter_mut().zip(std::hint::black_box(&a)).zip(&b) {
            *c = a + b;
        }
        std::hint::black_box(&mut c);
    });
    (copy, add)
}

fn gbps(bytes: usize, seconds: f64) -> f64 {
    bytes as f64 / seconds / 1e9
}

fn main() {
    registry::register_global("bench.ccl", Function::from_closure(worker_loop), true).unwrap();
    if std::env::args().any(|a| a.starts_with("--discovm-worker")) {
        std::process::exit(serve());
    }
    let quick = std::env::args().any(|a| a == "--quick");
    let list = |var: &str, default: &[usize]| -> Vec<usize> {
        std::env::var(var).map_or_else(
            |_| default.to_vec(),
            |v| v.split(',').map(|n| n.parse().expect("a number")).collect(),
        )
    };
    let sizes: Vec<usize> = list("DVM_CCL_SIZES", &[4, 1024, 16 * 1024, 64 * 1024])
        .into_iter()
        .map(|k| k * KIB)
        .collect();
    let workers = list("DVM_CCL_WORKERS", &[2, 4]);
    let label = |b: usize| {
        if b >= MIB {
            format!("{} MiB", b / MIB)
        } else {
            format!("{} KiB", b / KIB)
        }
    };
    println!("CPU collectives, algorithm bandwidth in GB/s (bytes of one buffer / time)");
    println!();
    println!(
        "| size | memcpy | c=a+b | N | allreduce | allgather | broadcast | allreduce / memcpy \
         | allreduce, processes | processes / threads |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut latency = Vec::new();
    let mut targets = Vec::new();
    for &bytes in &sizes {
        let (copy, add) = floors(bytes, quick);
        for &n in &workers {
            let sampling = sampling(bytes, quick);
            let (threads, processes) = (open(n, false), open(n, true));
            // Allreduce on threads and on processes in turns, so that drift of the machine
            // moves both alike; each figure is the median of its rounds.
            let (mut on_threads, mut on_processes) = (Vec::new(), Vec::new());
            for _ in 0..ROUNDS {
                on_threads.push(collective(&threads, 0, bytes, sampling));
                on_processes.push(collective(&processes, 0, bytes, sampling));
            }
            let (ar, ar_processes) = (median(on_threads), median(on_processes));
            let ag = collective(&threads, 1, bytes, sampling);
            let bc = collective(&threads, 2, bytes, sampling);
            threads.shutdown().unwrap();
            processes.shutdown().unwrap();
            if bytes == 4 * KIB {
                latency.push((n, ar, ar_processes));
            }
            if bytes == 16 * MIB {
                targets.push((n, ar / ar_processes));
            }
            println!(
                "| {} | {:.2} | {:.2} | {n} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
                label(bytes),
                gbps(bytes, copy),
                gbps(bytes, add),
                gbps(bytes, ar),
                gbps(bytes, ag),
                gbps(bytes, bc),
                copy / ar,
                gbps(bytes, ar_processes),
                ar / ar_processes,
            );
        }
    }
    println!();
    for (n, threads, processes) in latency {
        println!(
            "4 KiB allreduce (sum, float32), N = {n}: {:.2} µs on threads, {:.2} µs on processes",
            threads * 1e6,
            processes * 1e6
        );
    }
    for (n, ratio) in targets {
        println!(
            "target: 16 MiB allreduce on processes at least 0.8x threads, N = {n}: {ratio:.2}x, {}",
            if ratio >= 0.8 { "met" } else { "NOT met" }
        );
    }
}

/// A session of `n` workers, threads or processes (running this program), with a communicator.
fn open(n: usize, processes: bool) -> Arc<Session> {
    let options = SessionOptions {
        timeout: Some(Duration::from_secs(120)),
        ..SessionOptions::default()
    };
    let s = if processes {
        let program = std::env::current_exe().expect("this program's path");
        let options = SessionOptions {
            worker_program: Some(program.to_string_lossy().into_owned()),
            ..options
        };
        Session::new_process(n as i64, 1, options).unwrap()
    } else {
        Session::new_threaded(n as i64, 1, options).unwrap()
    };
    s.init_ccl("cpu", &[]).unwrap();
    s
}

/// Serves a controller as a worker process, with this program's functions.
fn serve() -> i32 {
    let args: Vec<std::ffi::CString> = std::env::args()
        .map(|a| std::ffi::CString::new(a).expect("no NUL in arguments"))
        .collect();
    let argv: Vec<*mut std::ffi::c_char> = args.iter().map(|a| a.as_ptr().cast_mut()).collect();
    // SAFETY: `argv` holds `args.len()` NUL-terminated strings, alive for the call.
    unsafe { discovm::capi::dvm_worker_main(argv.len() as i32, argv.as_ptr()) }
}
