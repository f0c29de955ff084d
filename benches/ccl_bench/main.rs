//! CPU collectives benchmark: allreduce (sum, float32), allgather and broadcast for 4 KiB to
//! 64 MiB with N = 2 and 4 workers, in GB/s of algorithm bandwidth (bytes of one buffer / time
//! per collective; for allgather the gathered buffer), plus the 4 KiB allreduce latency. In
//! the same run: the floors, a plain `memcpy` and a single-thread `c = a + b` over the same
//! sizes. The collectives loop on the workers (timed on worker 0), so controller round trips
//! are not counted.
//!
//! Run: `cargo bench --bench ccl_bench` (add `-- --quick` for a smoke test). Absolute numbers
//! on small shared machines drift between runs; compare ratios within one run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use discovm::abi::{DLDataType, DLDevice, KDL_FLOAT};
use discovm::object::{Function, Shape, Tensor, registry};
use discovm::session::{Session, SessionOptions, Target, current_worker};
use discovm::{Any, AnyView, Result};

const F32: DLDataType = DLDataType::new(KDL_FLOAT, 32, 1);
const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

fn tensor(bytes: usize) -> Tensor {
    discovm::device::empty(&[(bytes / 4) as i64], F32, DLDevice::cpu()).expect("tensor")
}

/// How many repetitions make a measurement of roughly `budget`.
fn iterations(bytes: usize, quick: bool) -> usize {
    let per_round = if quick { 8 * MIB } else { 512 * MIB };
    (per_round / bytes).clamp(3, 20_000)
}

/// `bench.ccl(kind, bytes, iters)` on every worker: runs the collective `iters` times after
/// one warm-up; returns the mean seconds per collective measured on this worker.
fn worker_loop(args: &[AnyView<'_>]) -> Result<Any> {
    let kind = args[0].as_i64()?;
    let bytes = args[1].as_i64()? as usize;
    let iters = args[2].as_i64()? as usize;
    let n = current_worker().expect("on a worker").num_workers;
    let (name, send, recv): (&str, Tensor, Tensor) = match kind {
        0 => ("runtime.disco.allreduce", tensor(bytes), tensor(bytes)),
        1 => (
            "runtime.disco.allgather",
            tensor(bytes / n),
            tensor(bytes / n * n),
        ),
        _ => (
            "runtime.disco.broadcast_from_worker0",
            tensor(bytes),
            tensor(bytes),
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
    barrier.call(&[])?;
    let start = Instant::now();
    for _ in 0..iters {
        f.call(&views)?;
    }
    barrier.call(&[])?;
    Ok(Any::Float(start.elapsed().as_secs_f64() / iters as f64))
}

fn collective(s: &Arc<Session>, kind: i64, bytes: usize, iters: usize) -> f64 {
    let f = s.get_global_func("bench.ccl").unwrap();
    let args = [
        Any::Int(kind),
        Any::Int(bytes as i64),
        Any::Int(iters as i64),
    ];
    let views: Vec<_> = args.iter().map(Any::view).collect();
    let out = s.call(Target::All, &f, &views).unwrap();
    s.sync_all().unwrap();
    match s.get_register(out.reg(), 0).unwrap() {
        Any::Float(seconds) => seconds,
        other => panic!("unexpected {other:?}"),
    }
}

fn time_per(iters: usize, mut body: impl FnMut()) -> f64 {
    body();
    let start = Instant::now();
    for _ in 0..iters {
        body();
    }
    start.elapsed().as_secs_f64() / iters as f64
}

fn floors(bytes: usize, quick: bool) -> (f64, f64) {
    let len = bytes / 4;
    let a = vec![1.0f32; len];
    let b = vec![2.0f32; len];
    let mut c = vec![0.0f32; len];
    let iters = iterations(bytes, quick);
    let copy = time_per(iters, || {
        c.copy_from_slice(std::hint::black_box(&a));
        std::hint::black_box(&mut c);
    });
    let add = time_per(iters, || {
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
    let quick = std::env::args().any(|a| a == "--quick");
    registry::register_global("bench.ccl", Function::from_closure(worker_loop), true).unwrap();
    let sizes = [4 * KIB, MIB, 16 * MIB, 64 * MIB];
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
        "| size | memcpy | c=a+b | N | allreduce | allgather | broadcast | allreduce / memcpy |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut latency = Vec::new();
    for &bytes in &sizes {
        let (copy, add) = floors(bytes, quick);
        let workers: Vec<i64> = std::env::var("DVM_CCL_WORKERS")
            .map(|v| {
                v.split(',')
                    .map(|n| n.parse().expect("a worker count"))
                    .collect()
            })
            .unwrap_or_else(|_| vec![2, 4]);
        for &n in &workers {
            let options = SessionOptions {
                timeout: Some(Duration::from_secs(120)),
                ..SessionOptions::default()
            };
            let s = Session::new_threaded(n, 1, options).unwrap();
            s.init_ccl("cpu", &[]).unwrap();
            let iters = iterations(bytes, quick);
            let ar = collective(&s, 0, bytes, iters);
            let ag = collective(&s, 1, bytes, iters);
            let bc = collective(&s, 2, bytes, iters);
            if bytes == 4 * KIB {
                latency.push((n, ar));
            }
            println!(
                "| {} | {:.2} | {:.2} | {n} | {:.2} | {:.2} | {:.2} | {:.2} |",
                label(bytes),
                gbps(bytes, copy),
                gbps(bytes, add),
                gbps(bytes, ar),
                gbps(bytes, ag),
                gbps(bytes, bc),
                copy / ar,
            );
            s.shutdown().unwrap();
        }
    }
    println!();
    for (n, seconds) in latency {
        println!(
            "4 KiB allreduce (sum, float32), N = {n}: {:.2} µs",
            seconds * 1e6
        );
    }
}
