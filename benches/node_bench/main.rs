//! Sessions across machines against the network's floors, in one run: a session of 2 nodes of
//! 1 worker each (node 1 another process, on loopback, and, where the kernel allows network
//! namespaces, across a veth pair into a namespace of its own), and between the same endpoints
//! a raw TCP ping-pong of 8-byte messages and a raw TCP stream.
//!
//! Figures, each the median of its rounds (the two paths and the floors taken in turns):
//! - sync with the worker on node 1, against the ping-pong's round trip (target: at most 1.5x):
//!   a sync with nothing sent since the last (which needs no message), and a call to the
//!   worker then a sync (one round trip, through the worker);
//! - pipelined calls to both workers (10 000 calls, then a sync of all), per call;
//! - a 64 MiB float32 tensor stored on the worker on node 1 (`set_register`, then a sync),
//!   against the raw stream's bandwidth (target: at least 0.8x);
//! - CPU allreduce of 4 KiB and 16 MiB float32 between the two workers (Gloo between nodes),
//!   batches of calls then a sync, against the raw stream's bandwidth (target: at least 0.5x)
//!   and, on loopback, against Open MPI over TCP (`--mca btl tcp,self`, the same sizes and
//!   method, `benches/ccl_bench/mpi_collectives.c allreduce`; target: no slower). The Gloo
//!   plugin is built for the run where Gloo is installed (Debian: libgloo-dev), and Open MPI
//!   is used where `mpicc` and `mpirun` are (Debian: openmpi-bin, libopenmpi-dev).
//!
//! The benchmark is its own node program and worker program: started as `node HOST PORT
//! WORKERS` it joins the session, started with a worker's arguments it serves one, and started
//! as `echo HOST PORT` or `sink HOST PORT BYTES` it is the far end of a floor.
//!
//! Run: `cargo bench --bench node_bench` (add `-- --quick` for a smoke test).

#[path = "../../tests/support/netns.rs"]
mod netns;
#[path = "../../tests/support/ports.rs"]
mod ports;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use discovm::Any;
use discovm::abi::DLDevice;
use discovm::abi::{DLDataType, KDL_FLOAT};
use discovm::object::Tensor;
use discovm::session::{Session, SessionOptions, Target};

const F32: DLDataType = DLDataType::new(KDL_FLOAT, 32, 1);
const TOKEN: &str = "the node benchmark's secret";
const COPY_BYTES: usize = 64 << 20;
const PIPELINED: usize = 10_000;

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn this_program() -> PathBuf {
    std::env::current_exe().expect("the benchmark's own path")
}

/// Runs the C entry point `main` on this process's arguments from `skip` on (the program's
/// name first).
fn c_main(
    main: unsafe extern "C" fn(i32, *const *mut std::ffi::c_char) -> i32,
    skip: usize,
) -> i32 {
    let args: Vec<std::ffi::CString> = std::env::args()
        .enumerate()
        .filter(|(i, _)| *i == 0 || *i > skip)
        .map(|(_, a)| std::ffi::CString::new(a).expect("no NUL in arguments"))
        .collect();
    let argv: Vec<*mut std::ffi::c_char> = args.iter().map(|a| a.as_ptr().cast_mut()).collect();
    // SAFETY: `argv` holds `args.len()` NUL-terminated strings, alive for the call.
    unsafe { main(argv.len() as i32, argv.as_ptr()) }
}

fn connect(host: &str, port: &str) -> TcpStream {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        match TcpStream::connect((host, port.parse::<u16>().expect("a port"))) {
            Ok(stream) => {
                stream.set_nodelay(true).unwrap();
                return stream;
            }
            Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!("cannot reach {host}:{port}: {e}"),
        }
    }
}

/// Reads exactly `buf` from a non-blocking `stream`, spinning while nothing is there (the
/// ping-pong's floor does not count a wake-up from a blocking read); false once it closed.
fn read_spinning(stream: &mut TcpStream, buf: &mut [u8]) -> bool {
    let mut at = 0;
    while at < buf.len() {
        match stream.read(&mut buf[at..]) {
            Ok(0) => return false,
            Ok(n) => at += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(_) => return false,
        }
    }
    true
}

/// The far end of the ping-pong: echoes 8-byte messages until the connection closes.
fn echo(host: &str, port: &str) {
    let mut stream = connect(host, port);
    stream.set_nonblocking(true).unwrap();
    let mut message = [0u8; 8];
    while read_spinning(&mut stream, &mut message) {
        if stream.write_all(&message).is_err() {
            break;
        }
    }
}

/// The far end of the stream: reads `bytes`, answers one byte, again until it closes.
fn sink(host: &str, port: &str, bytes: usize) {
    let mut stream = connect(host, port);
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let mut left = bytes;
        while left > 0 {
            match stream.read(&mut buffer[..left.min(1 << 20)]) {
                Ok(0) | Err(_) => return,
                Ok(n) => left -= n,
            }
        }
        if stream.write_all(&[1]).is_err() {
            return;
        }
    }
}

/// Where the far ends run: this machine's loopback, or a namespace behind a veth pair.
struct Path {
    name: &'static str,
    host: String,
    namespace: Option<netns::Namespace>,
}

impl Path {
    /// This program, started as the far end with `args`.
    fn start(&self, args: &[&str]) -> Child {
        let mut command = match &self.namespace {
            Some(ns) => ns.command(&this_program()),
            None => Command::new(this_program()),
        };
        command
            .args(args)
            .env("DISCOVM_SESSION_TOKEN", TOKEN)
            .env("DISCOVM_WORKER", this_program())
            .spawn()
            .expect("the benchmark starts itself")
    }

    fn listen(&self) -> (TcpListener, String) {
        let listener = TcpListener::bind((self.host.as_str(), 0)).unwrap();
        let port = listener.local_addr().unwrap().port().to_string();
        (listener, port)
    }

    /// Round trips of 8 bytes over raw TCP, both ends spinning on non-blocking reads: seconds
    /// each, one figure per round of `count`.
    fn ping_pong(&self, rounds: usize, count: usize) -> Vec<f64> {
        let (listener, port) = self.listen();
        let mut far = self.start(&["echo", &self.host, &port]);
        let (mut stream, _) = listener.accept().unwrap();
        stream.set_nodelay(true).unwrap();
        stream.set_nonblocking(true).unwrap();
        let mut message = [7u8; 8];
        let mut out = Vec::new();
        for round in 0..=rounds {
            let started = Instant::now();
            for _ in 0..count {
                stream.write_all(&message).unwrap();
                assert!(read_spinning(&mut stream, &mut message), "the echo ended");
            }
            if round > 0 {
                out.push(started.elapsed().as_secs_f64() / count as f64);
            }
        }
        drop(stream);
        let _ = far.wait();
        out
    }

    /// Bytes per second of a raw TCP stream of `bytes`, acknowledged: one figure per round.
    fn stream(&self, rounds: usize, bytes: usize) -> Vec<f64> {
        let (listener, port) = self.listen();
        let mut far = self.start(&["sink", &self.host, &port, &bytes.to_string()]);
        let (mut stream, _) = listener.accept().unwrap();
        let data = vec![3u8; bytes];
        let mut ack = [0u8; 1];
        let mut out = Vec::new();
        for round in 0..=rounds {
            let started = Instant::now();
            stream.write_all(&data).unwrap();
            stream.read_exact(&mut ack).unwrap();
            if round > 0 {
                out.push(bytes as f64 / started.elapsed().as_secs_f64());
            }
        }
        drop(stream);
        let _ = far.wait();
        out
    }

    /// A session of 2 nodes of `per_node` workers, node 1 at the far end.
    fn session(&self, per_node: usize) -> (Arc<Session>, Child) {
        let port = ports::free_port(&self.host);
        let far = self.start(&["node", &self.host, &port.to_string(), &per_node.to_string()]);
        let options = SessionOptions {
            timeout: Some(Duration::from_secs(60)),
            worker_program: Some(this_program().to_str().unwrap().to_string()),
            session_token: Some(TOKEN.into()),
            ..SessionOptions::default()
        };
        let per_node = per_node as i64;
        let session = Session::new_socket(2, per_node, 1, &self.host, port.into(), options)
            .expect("a session");
        (session, far)
    }
}

/// The session's figures for one round, in seconds: sync with worker 1, a call to worker 1
/// then a sync, pipelined calls (per call); and the store of a 64 MiB tensor on worker 1 (bytes
/// per second).
fn session_round(s: &Arc<Session>, syncs: usize) -> [f64; 4] {
    let started = Instant::now();
    for _ in 0..syncs {
        s.sync_worker(1).unwrap();
    }
    let sync = started.elapsed().as_secs_f64() / syncs as f64;

    let rank = s.get_global_func("runtime.disco.worker_rank").unwrap();
    // The results are kept until the end: no frees go with the syncs.
    let mut results = Vec::with_capacity(syncs);
    let started = Instant::now();
    for _ in 0..syncs {
        results.push(s.call(Target::One(1), &rank, &[]).unwrap());
        s.sync_worker(1).unwrap();
    }
    let call_sync = started.elapsed().as_secs_f64() / syncs as f64;
    drop(results);

    let started = Instant::now();
    for _ in 0..PIPELINED {
        drop(s.call(Target::All, &rank, &[]).unwrap());
    }
    s.sync_all().unwrap();
    let pipelined = started.elapsed().as_secs_f64() / PIPELINED as f64;

    let tensor = Tensor::empty(&[(COPY_BYTES / 4) as i64], F32, DLDevice::cpu()).unwrap();
    let held = s.call(Target::All, &rank, &[]).unwrap();
    let started = Instant::now();
    s.set_register(held.reg(), 1, Any::from(tensor)).unwrap();
    s.sync_worker(1).unwrap();
    let copy = COPY_BYTES as f64 / started.elapsed().as_secs_f64();
    [sync, call_sync, pipelined, copy]
}

fn repo() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Builds `source` with `compiler` and `flags` into `target/bench/name`, linked with `libs`;
/// None, having said why, when it fails.
fn build(
    compiler: &str,
    source: &str,
    name: &str,
    flags: &[&str],
    libs: &[&str],
) -> Option<PathBuf> {
    let out = repo().join("target/bench").join(name);
    std::fs::create_dir_all(out.parent()?).ok()?;
    let built = Command::new(compiler)
        .args(flags)
        .arg(repo().join(source))
        .arg("-o")
        .arg(&out)
        .args(libs)
        .output();
    match built {
        Ok(output) if output.status.success() => Some(out),
        Ok(output) => {
            println!(
                "({compiler} failed on {source}: {})",
                String::from_utf8_lossy(&output.stderr)
            );
            None
        }
        Err(e) => {
            println!("({compiler} cannot run: {e})");
            None
        }
    }
}

/// The Gloo plugin, built for this run; None where Gloo is not installed.
fn gloo_plugin() -> Option<PathBuf> {
    if !std::path::Path::new("/usr/include/gloo/allreduce.h").exists() {
        println!("(no Gloo here: the allreduce is skipped; Debian: apt-get install libgloo-dev)");
        return None;
    }
    let flags = ["-std=c++17", "-O2", "-shared", "-fPIC"];
    build(
        "g++",
        "plugins/gloo/discovm_gloo.cc",
        "libdiscovm_gloo.so",
        &flags,
        &["-lgloo"],
    )
}

/// After `init_ccl("cpu")`, the median seconds per allreduce of 4 KiB and of 16 MiB.
fn allreduces_of(s: &Arc<Session>, rounds: usize) -> (f64, f64) {
    s.init_ccl("cpu", &[]).unwrap();
    let small = median(allreduce_rounds(s, 4 << 10, rounds));
    let large = median(allreduce_rounds(s, 16 << 20, rounds));
    (small, large)
}

/// Open MPI's side of the allreduce, built for this run; None where Open MPI is not
/// installed.
fn open_mpi_program() -> Option<PathBuf> {
    let flags = ["-O3", "-march=native"];
    build(
        "mpicc",
        "benches/ccl_bench/mpi_collectives.c",
        "mpi_collectives",
        &flags,
        &[],
    )
}

/// Seconds per allreduce of 4 KiB and of 16 MiB with Open MPI's `program` over TCP on
/// loopback, `ranks` ranks; None where it does not run.
fn open_mpi_allreduce(program: &std::path::Path, ranks: usize) -> Option<(f64, f64)> {
    let output = Command::new("mpirun")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "--mca",
            "pml",
            "ob1",
        ])
        .args([
            "--mca",
            "btl",
            "tcp,self",
            "--mca",
            "btl_tcp_if_include",
            "lo",
            "-np",
        ])
        .arg(ranks.to_string())
        .arg(program)
        .arg("allreduce")
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    let figure = |bytes: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(bytes)?.trim().parse::<f64>().ok())
    };
    Some((figure("4096 ")?, figure("16777216 ")?))
}

/// Seconds per CPU allreduce of `bytes` of float32 between every worker of `s`: batches of
/// calls, then a sync, one figure per round.
fn allreduce_rounds(s: &Arc<Session>, bytes: usize, rounds: usize) -> Vec<f64> {
    let empty = s.get_global_func("runtime.disco.empty").unwrap();
    let shape = discovm::object::Shape::new(&[(bytes / 4) as i64]);
    let args = [Any::from(shape), Any::DataType(F32)];
    let views: Vec<_> = args.iter().map(Any::view).collect();
    let send = s.call(Target::All, &empty, &views).unwrap();
    let recv = s.call(Target::All, &empty, &views).unwrap();
    let allreduce = s.get_global_func("runtime.disco.allreduce").unwrap();
    let sum = Any::from(discovm::object::Shape::new(&[0]));
    let args = [Any::from(send), sum, Any::Bool(false), Any::from(recv)];
    let views: Vec<_> = args.iter().map(Any::view).collect();
    let batch = ((1 << 20) / bytes).clamp(1, 200);
    let mut out = Vec::new();
    for round in 0..=rounds {
        let started = Instant::now();
        for _ in 0..batch {
            drop(s.call(Target::All, &allreduce, &views).unwrap());
        }
        s.sync_all().unwrap();
        if round > 0 {
            out.push(started.elapsed().as_secs_f64() / batch as f64);
        }
    }
    out
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a.starts_with("--discovm-worker")) {
        std::process::exit(c_main(discovm::capi::dvm_worker_main, 0));
    }
    match args.get(1).map(String::as_str) {
        Some("node") => std::process::exit(c_main(discovm::capi::dvm_node_main, 1)),
        Some("echo") => return echo(&args[2], &args[3]),
        Some("sink") => return sink(&args[2], &args[3], args[4].parse().unwrap()),
        _ => {}
    }
    let quick = args.iter().any(|a| a == "--quick");
    let plugin = gloo_plugin();
    if let Some(plugin) = &plugin {
        // SAFETY: no other thread runs yet; the far ends and worker processes inherit it.
        unsafe { std::env::set_var("DISCOVM_GLOO_PLUGIN", plugin) };
    }
    let (rounds, pings, syncs) = if quick {
        (3, 200, 200)
    } else {
        (7, 3000, 3000)
    };
    let mut paths = vec![Path {
        name: "loopback",
        host: "127.0.0.1".into(),
        namespace: None,
    }];
    match netns::Namespace::new() {
        Some(ns) => paths.push(Path {
            name: "veth",
            host: ns.host_ip.clone(),
            namespace: Some(ns),
        }),
        None => println!("(no veth pair: the kernel refuses a network namespace here)"),
    }
    println!(
        "Sessions across machines: 2 nodes of 1 worker, node 1 another process; {rounds} \
         rounds each, medians"
    );
    println!();
    println!(
        "| path | TCP ping-pong (us) | sync worker on node 1 (us) | sync / ping-pong | call \
         then sync (us) | call then sync / ping-pong | pipelined (ns/call) | TCP stream (GB/s) \
         | 64 MiB store on node 1 (GB/s) | store / stream |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut allreduces = Vec::new();
    for path in &paths {
        let ping = median(path.ping_pong(rounds, pings));
        let stream = median(path.stream(rounds, 64 << 20));
        let (s, mut far) = path.session(1);
        let mut figures: [Vec<f64>; 4] = Default::default();
        let _ = session_round(&s, syncs / 10); // warm-up
        for _ in 0..rounds {
            for (figure, value) in figures.iter_mut().zip(session_round(&s, syncs)) {
                figure.push(value);
            }
        }
        if plugin.is_some() {
            let (small, large) = allreduces_of(&s, rounds);
            allreduces.push((path.name, 1, small, large, stream));
        }
        s.shutdown().unwrap();
        let _ = far.wait();
        if plugin.is_some() && path.namespace.is_none() {
            // Two workers per node: they meet in shared memory, their leaders through Gloo.
            let (s, mut far) = path.session(2);
            let (small, large) = allreduces_of(&s, rounds);
            allreduces.push((path.name, 2, small, large, stream));
            s.shutdown().unwrap();
            let _ = far.wait();
        }
        let [sync, call_sync, pipelined, copy] = figures.map(median);
        println!(
            "| {} | {:.1} | {:.2} | {:.3}x | {:.1} | {:.2}x | {:.0} | {:.2} | {:.2} | {:.2}x |",
            path.name,
            ping * 1e6,
            sync * 1e6,
            sync / ping,
            call_sync * 1e6,
            call_sync / ping,
            pipelined * 1e9,
            stream / 1e9,
            copy / 1e9,
            copy / stream
        );
    }
    println!();
    println!(
        "Targets: sync at most 1.5x the ping-pong (a sync with nothing sent since the last needs \
         no message; a call then a sync crosses to the worker and back); a 64 MiB store at \
         least 0.8x the stream."
    );
    if allreduces.is_empty() {
        return;
    }
    let mpi = match open_mpi_program() {
        Some(program) => [2, 4].map(|ranks| open_mpi_allreduce(&program, ranks)),
        None => [None, None],
    };
    if mpi[0].is_none() {
        println!("(no Open MPI here: Debian: apt-get install openmpi-bin libopenmpi-dev)");
    }
    println!();
    println!(
        "CPU allreduce of float32 between every worker of 2 nodes (Gloo between nodes, shared \
         memory within one), seconds per call as batches then a sync, against Open MPI with as \
         many ranks over TCP; bandwidth = bytes / time"
    );
    println!();
    println!(
        "| path | workers per node | 4 KiB (us) | Open MPI 4 KiB (us) | 16 MiB (ms) | Open MPI \
         16 MiB (ms) | 16 MiB / Open MPI (speed) | 16 MiB (GB/s) | / stream |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (name, per_node, small, large, stream) in allreduces {
        let mpi_here = mpi[per_node - 1].filter(|_| name == "loopback");
        let shown =
            |f: Option<f64>, scale: f64| f.map_or("-".into(), |v| format!("{:.1}", v * scale));
        let bandwidth = (16 << 20) as f64 / large;
        println!(
            "| {name} | {per_node} | {:.1} | {} | {:.1} | {} | {} | {:.2} | {:.2}x |",
            small * 1e6,
            shown(mpi_here.map(|m| m.0), 1e6),
            large * 1e3,
            shown(mpi_here.map(|m| m.1), 1e3),
            mpi_here.map_or("-".into(), |m| format!("{:.2}x", m.1 / large)),
            bandwidth / 1e9,
            bandwidth / stream
        );
    }
    println!();
    println!(
        "Targets: the 16 MiB allreduce no slower than Open MPI over TCP and at least 0.5x the stream."
    );
}
