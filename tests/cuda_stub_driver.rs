//! Runs the CUDA C test programs and the copy benchmark against stand-ins for the CUDA driver
//! (`support/cuda_driver_stub.c`) and NCCL (`support/nccl_cuda_stub.c`), so the CUDA
//! backend is exercised on machines without a GPU. The stand-in driver runs each stream's work
//! only when something waits for it and aborts on misuse a GPU would punish (see its header
//! comment), so a missing synchronization, event wait or legacy-stream ordering shows up as
//! wrong bytes or an abort here. Each program must exit 0: a skip (77) fails.
//!
//! The stand-ins are built into one directory as `libcuda.so.1` (with `libcuda.so` linking to
//! it, as a driver installation has) and `libnccl.so.2`; the programs run with it first on
//! `LD_LIBRARY_PATH`, the number of GPUs in `DISCOVM_STUB_GPUS` and NCCL named by
//! `DISCOVM_NCCL_LIBRARY`. Programs that use a second GPU when there is one run with one GPU
//! and with two. The last tests check the stand-in itself (`support/cuda_driver_stub_checks.c`):
//! that it defers work and orders streams as the tests above rely on, and that it aborts on
//! misuse.

#[path = "support/built_library.rs"]
mod built_library;
#[path = "support/c_build.rs"]
mod c_build;
#[path = "../src/device/nccl/stub.rs"]
mod nccl_stub;

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use c_build::{Link, describe};

/// Where the stand-ins and the programs go.
fn out_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cuda_stub_driver");
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// The directory holding the stand-in driver and NCCL, built once.
fn stub_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = out_dir().join("lib");
        fs::create_dir_all(&dir).unwrap();
        let driver = dir.join("libcuda.so.1");
        nccl_stub::build_shared(
            "tests/support/cuda_driver_stub.c",
            &driver,
            &["-Wl,-soname,libcuda.so.1", "-lpthread"],
        );
        // cudarc loads libcuda.so, the benchmark and NCCL libcuda.so.1: one library for all.
        let link = dir.join("libcuda.so");
        let _ = fs::remove_file(&link);
        std::os::unix::fs::symlink("libcuda.so.1", &link).unwrap();
        nccl_stub::build_shared(
            "tests/support/nccl_cuda_stub.c",
            &dir.join("libnccl.so.2"),
            &["-ldl"],
        );
        dir
    })
}

/// Compiles `source` (relative to the repository root) once, for every test that runs it.
fn program(source: &'static str) -> PathBuf {
    static BUILT: Mutex<Option<HashMap<&str, PathBuf>>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let built = built.get_or_insert_with(HashMap::new);
    if let Some(binary) = built.get(source) {
        return binary.clone();
    }
    let binary = out_dir().join(Path::new(source).file_stem().unwrap());
    c_build::compile(source, &binary, Link::Library, &[]);
    built.insert(source, binary.clone());
    binary
}

/// Runs `binary` with `args` against the stand-ins, with `gpus` GPUs and the extra environment
/// `env`; prints what it printed and returns its exit code (None: killed by a signal, as an
/// abort of the stand-in driver) with a description for assertion messages.
fn run_on_stub_raw(
    binary: &Path,
    args: &[&str],
    gpus: u32,
    env: &[(&str, &str)],
) -> (Option<i32>, String) {
    let dir = stub_dir();
    let mut library_path = dir.as_os_str().to_owned();
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
        library_path.push(":");
        library_path.push(old);
    }
    let mut command = Command::new(binary);
    command
        .args(args)
        .env("LD_LIBRARY_PATH", library_path)
        .env("DISCOVM_STUB_GPUS", gpus.to_string())
        .env("DISCOVM_NCCL_LIBRARY", dir.join("libnccl.so.2"))
        .envs(env.iter().copied());
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    print!("{}", String::from_utf8_lossy(&output.stdout));
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    (output.status.code(), describe(&command, &output))
}

/// As [`run_on_stub_raw`], for a program that must exit (an abort fails the test).
fn run_on_stub(binary: &Path, args: &[&str], gpus: u32, env: &[(&str, &str)]) -> (i32, String) {
    match run_on_stub_raw(binary, args, gpus, env) {
        (Some(code), described) => (code, described),
        (None, described) => {
            panic!("killed by a signal (the stand-in driver aborts on misuse):\n{described}")
        }
    }
}

/// Runs a CUDA test program with `args` and `gpus` stand-in GPUs and expects it to pass (not
/// to skip); returns what it printed.
fn passes(source: &'static str, args: &[&str], gpus: u32, env: &[(&str, &str)]) -> String {
    let (code, described) = run_on_stub(&program(source), args, gpus, env);
    assert_eq!(
        code, 0,
        "{source} did not pass with {gpus} stand-in GPU(s):\n{described}"
    );
    described
}

#[test]
fn device_count_1_gpu() {
    passes("tests/c/device_count.c", &[], 1, &[]);
}

#[test]
fn device_count_2_gpus() {
    passes("tests/c/device_count.c", &[], 2, &[]);
}

#[test]
fn cuda_roundtrip_1_gpu() {
    passes("tests/c/cuda_roundtrip.c", &[], 1, &[]);
}

/// Adds copies between two GPUs.
#[test]
fn cuda_roundtrip_2_gpus() {
    passes("tests/c/cuda_roundtrip.c", &[], 2, &[]);
}

/// The path of GPUs without memory pools: `cuMemAlloc`, and a context sync before each free.
#[test]
fn cuda_roundtrip_without_memory_pools() {
    passes(
        "tests/c/cuda_roundtrip.c",
        &[],
        1,
        &[("DISCOVM_STUB_NO_POOLS", "1")],
    );
}

#[test]
fn cuda_soft_sync() {
    passes("tests/c/cuda_soft_sync.c", &[], 1, &[]);
}

#[test]
fn cuda_small_access() {
    passes("tests/c/cuda_small_access.c", &[], 1, &[]);
}

/// Fails if the library's streams do not follow the legacy default stream.
#[test]
fn cuda_default_stream() {
    passes("tests/c/cuda_default_stream.c", &[], 1, &[]);
}

#[test]
fn cuda_session_1_gpu() {
    passes("tests/c/cuda_session.c", &[], 1, &[]);
}

/// The session's workers on two GPUs.
#[test]
fn cuda_session_2_gpus() {
    passes("tests/c/cuda_session.c", &[], 2, &[]);
}

/// One worker, one rank: the stand-in NCCL has no more (with two GPUs the program would make
/// two ranks).
#[test]
fn cuda_nccl_1_gpu() {
    passes("tests/c/cuda_nccl.c", &[], 1, &[]);
}

/// Two nodes of one worker, each on a GPU of its own: the stand-in NCCL has one rank only, so
/// the run ends in its refusal of two, from the workers of both nodes: the unique ids crossed
/// the node's connection, and node 1's worker joined on its GPU.
#[test]
fn cuda_nccl_on_two_nodes_reaches_nccl_on_every_worker() {
    let (code, described) = run_on_stub(&program("tests/c/cuda_nccl.c"), &["nodes"], 2, &[]);
    assert_eq!(code, 1, "{described}");
    assert!(described.contains("nodes: init_ccl failed"), "{described}");
    for rank in ["worker 0", "worker 1"] {
        let joined = format!("{rank}: `runtime.disco.nccl.init_ccl_per_worker` failed");
        assert!(described.contains(&joined), "{described}");
    }
    assert!(
        described.contains("rank 1 of 2 on CUDA device 0 could not join its communicator"),
        "{described}"
    );
}

/// NCCL communicators aborted under a collective that failed are made again before the
/// session's next call, without `init_ccl`, on worker threads and worker processes: the
/// stand-in fails the second all-reduce of each process.
#[test]
fn cuda_nccl_communicators_aborted_are_made_again_before_the_next_call() {
    let described = passes(
        "tests/c/cuda_nccl_remade.c",
        &[],
        1,
        &[("NCCL_STUB_FAIL_ALLREDUCE", "2")],
    );
    for kind in ["threads", "processes"] {
        let remade = format!("cuda_nccl_remade: {kind}: the communicators were made again");
        assert!(described.contains(&remade), "{described}");
    }
}

/// An NCCL collective whose peer passed it (failed first, returned, or queued another collective,
/// or another size, in its place) fails the wait for the GPU within a second, without a session
/// timeout, and the next one works without `init_ccl`; so does the first collective on new
/// communicators, which the stand-in keeps queueing until every rank queued its own (NCCL's
/// lazy connection), and an in-place one of what that left unwritten on one worker; with a
/// session timeout, a copy and a sync end at it while a peer comes late: on two GPUs, with the
/// stand-in's communicators of two ranks, on worker threads, worker processes (each judges from
/// its peers' records) and two nodes (the controller's referee rules).
#[test]
fn cuda_nccl_a_peer_that_passed_the_collective_fails_the_wait_and_the_session_goes_on() {
    let described = passes(
        "tests/c/cuda_nccl_peers.c",
        &[],
        2,
        &[("NCCL_STUB_SHARED_RANKS", "1"), ("NCCL_STUB_CONNECT", "1")],
    );
    let done = [
        "failed before the all-reduce",
        "returned before the all-reduce",
        "all-gathered in place of the all-reduce",
        "all-reduced half as many elements",
    ];
    for kind in ["threads", "processes", "nodes"] {
        for how in done {
            let line = format!("cuda_nccl_peers: {kind}: worker 1 {how}: the sync failed");
            assert!(described.contains(&line), "{described}");
        }
        let late =
            format!("cuda_nccl_peers: {kind}: worker 1 came 6000 ms late: a copy and a sync");
        assert!(described.contains(&late), "{described}");
        let in_place =
            format!("cuda_nccl_peers: {kind}: an in-place all-reduce of what the failed one left");
        assert!(described.contains(&in_place), "{described}");
    }
}

/// The NCCL all-reduces of a trace ran on each worker's GPU after the worker queued them and
/// before its sync ended, on a track of the worker's GPU, and the two workers' runs overlap:
/// on worker threads, worker processes and two nodes, with the stand-in's GPUs (which stamp a
/// timing event when their stream's work reaches it); on threads also with GPUs whose streams
/// share one queue, where the GPU's clock is set against the host's behind the collectives.
/// With one GPU, the program checks that one worker's runs are there.
#[test]
fn cuda_nccl_a_trace_shows_each_collective_run_on_its_gpu() {
    let traces = |name: &str, args: &[&str], gpus: u32, env: &[(&str, &str)]| {
        let dir = out_dir().join(name);
        fs::create_dir_all(&dir).unwrap();
        let mut env = env.to_vec();
        env.push(("CUDA_NCCL_TRACE_DIR", dir.to_str().unwrap()));
        passes("tests/c/cuda_nccl_trace.c", args, gpus, &env);
        move |file: &str| -> serde_json::Value {
            let path = dir.join(file);
            let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
            serde_json::from_str(&text).unwrap()
        }
    };
    let _ = traces("traces_1_gpu", &[], 1, &[]);
    let ranks = ("NCCL_STUB_SHARED_RANKS", "1");
    let read = traces("traces", &[], 2, &[ranks]);
    for kind in ["threads", "processes", "nodes"] {
        runs_on_gpus_are_in(kind, &read(&format!("{kind}.json")));
        let dump = read(&format!("{kind}-dump.json"));
        a_waiting_worker_recorded_what_its_gpu_passed(kind, &dump);
    }
    let one_queue = ("DISCOVM_STUB_ONE_QUEUE", "1");
    let read = traces("traces_one_queue", &["threads"], 2, &[ranks, one_queue]);
    runs_on_gpus_are_in("threads (one queue)", &read("threads.json"));
}

/// In a dump taken while worker 0 waited for its second late all-reduce, worker 0's GPU ran the
/// first and not the second (see `tests/c/cuda_nccl_trace.c`).
fn a_waiting_worker_recorded_what_its_gpu_passed(kind: &str, dump: &serde_json::Value) {
    let of_worker_0 = |cat: &str| -> Vec<u64> {
        let events = dump["traceEvents"].as_array().unwrap().iter();
        events
            .filter(|e| e["ph"] == "X" && e["cat"] == cat && e["name"] == "allreduce")
            .filter(|e| e["args"]["worker"] == 0)
            .map(|e| e["args"]["call"].as_u64().unwrap())
            .collect()
    };
    let queued = of_worker_0("collective");
    let ran = of_worker_0("gpu");
    let [.., first, second] = queued[..] else {
        panic!("{kind}: worker 0 queued {queued:?}");
    };
    assert!(
        ran.contains(&first) && !ran.contains(&second),
        "{kind}: worker 0 queued the late all-reduces in calls {first} and {second}; its GPU \
         ran those of calls {ran:?}"
    );
}

/// Checks the GPU runs of a trace of `kind` (see the test above).
fn runs_on_gpus_are_in(kind: &str, trace: &serde_json::Value) {
    let events = trace["traceEvents"].as_array().unwrap();
    // A node's clock is known to within its error (0 on one machine).
    let slack_us = 50.0
        + trace["otherData"]["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|node| node["clock_error_us"].as_f64())
            .fold(0.0, f64::max);
    let of = |worker: u64, cat: &str, name: &str| -> Vec<&serde_json::Value> {
        events
            .iter()
            .filter(|e| e["ph"] == "X" && e["cat"] == cat && e["name"] == name)
            .filter(|e| e["args"]["worker"] == worker)
            .collect()
    };
    let span = |e: &serde_json::Value| {
        let ts = e["ts"].as_f64().unwrap();
        (ts, ts + e["dur"].as_f64().unwrap())
    };
    let mut runs = Vec::new();
    for worker in 0..2u64 {
        let on_gpu = of(worker, "gpu", "allreduce");
        let queued = of(worker, "collective", "allreduce");
        assert_eq!(on_gpu.len(), 2, "{kind}: worker {worker}: {on_gpu:?}");
        assert_eq!(queued.len(), 2, "{kind}: worker {worker}: {queued:?}");
        let track = events
            .iter()
            .find(|e| {
                e["name"] == "thread_name" && e["args"]["name"] == format!("worker {worker} GPU")
            })
            .unwrap_or_else(|| panic!("{kind}: no track of worker {worker}'s GPU"));
        let sync_end = of(worker, "sync", "sync")
            .into_iter()
            .map(|e| span(e).1)
            .fold(f64::NEG_INFINITY, f64::max);
        for (ran, queued) in on_gpu.iter().zip(&queued) {
            let context = format!("{kind}: worker {worker}: {ran} (queued: {queued})");
            assert_eq!(
                (&ran["pid"], &ran["tid"]),
                (&track["pid"], &track["tid"]),
                "{context}"
            );
            assert_eq!(ran["args"]["call"], queued["args"]["call"], "{context}");
            assert_eq!(ran["args"]["bytes"], 1024, "{context}");
            assert_eq!(ran["args"]["team"], "every worker", "{context}");
            assert!(ran["args"]["wait_us"].as_f64().is_some(), "{context}");
            let ((ran_from, ran_to), (queued_from, _)) = (span(ran), span(queued));
            assert!(
                ran_from + slack_us >= queued_from,
                "{context}: ran before it was queued"
            );
            assert!(
                ran_to <= sync_end + slack_us,
                "{context}: ran past the sync, {sync_end}"
            );
        }
        let on_gpu: Vec<(f64, f64)> = on_gpu.iter().map(|e| span(e)).collect();
        for pair in on_gpu.windows(2) {
            assert!(
                pair[1].0 + slack_us >= pair[0].1,
                "{kind}: worker {worker}'s GPU began an all-reduce before the one before ended: \
                 {pair:?}"
            );
        }
        runs.push(on_gpu);
    }
    for (a, b) in runs[0].iter().zip(&runs[1]) {
        assert!(
            a.0.max(b.0) <= a.1.min(b.1) + slack_us,
            "{kind}: the two workers' runs of one all-reduce do not overlap: {a:?} {b:?}"
        );
    }
}

/// The benchmark's smoke run: small sizes, both its raw driver calls and the library's.
#[test]
fn bench_cuda_copy_quick() {
    let described = passes("benches/cuda_copy/main.c", &["--quick"], 1, &[]);
    // The last table's last row: the benchmark ran to its end.
    assert!(
        described.contains("| dvm_tensor_read 4 B, back to back |"),
        "{described}"
    );
}

/// A driver without a GPU (cuInit says CUDA_ERROR_NO_DEVICE): the count is 0 and the programs
/// that need a GPU skip, after checking what the entry points say.
#[test]
fn without_a_gpu_the_programs_skip() {
    let (code, described) = run_on_stub(&program("tests/c/device_count.c"), &[], 0, &[]);
    assert_eq!(code, 0, "{described}");
    let (code, described) = run_on_stub(&program("tests/c/cuda_roundtrip.c"), &[], 0, &[]);
    assert_eq!(code, 77, "{described}");
    assert!(described.contains("skipped: no CUDA device"), "{described}");
}

/// The stand-in's own checks (`support/cuda_driver_stub_checks.c`), linked with it directly.
fn stub_checks() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let binary = out_dir().join("cuda_driver_stub_checks");
        let stubs = format!("-L{}", stub_dir().display());
        // Linked with the stand-in driver, not with the library.
        c_build::compile(
            "tests/support/cuda_driver_stub_checks.c",
            &binary,
            Link::Dlopen,
            &[&stubs, "-lcuda"],
        );
        binary
    })
}

/// What the tests above rely on: work runs only when waited for, the legacy stream follows
/// the blocking streams (and not the non-blocking ones), a pending event is not ready, and a
/// timing event is stamped when its stream's work reaches it.
#[test]
fn the_stand_in_defers_work_and_orders_the_legacy_stream() {
    for scenario in ["deferred", "legacy_order", "event_query", "event_timing"] {
        let (code, described) = run_on_stub(stub_checks(), &[scenario], 1, &[]);
        assert_eq!(code, 0, "{scenario}: {described}");
    }
}

/// Misuse a GPU would punish aborts, saying what was wrong.
#[test]
fn the_stand_in_aborts_on_misuse() {
    let cases = [
        ("free_pinned_in_use", 1, "cuMemFreeHost of 0x"),
        ("use_after_free", 1, "is not live device memory"),
        ("free_async_unordered", 1, "and not ordered before the free"),
        (
            "no_context",
            1,
            "cuStreamCreate called without a current context",
        ),
        (
            "event_of_another_context",
            2,
            "of device 0 recorded on a stream of device 1",
        ),
    ];
    for (scenario, gpus, message) in cases {
        let (code, described) = run_on_stub_raw(stub_checks(), &[scenario], gpus, &[]);
        assert_eq!(code, None, "{scenario} was not aborted: {described}");
        assert!(
            described.contains("CUDA driver stub: ") && described.contains(message),
            "{scenario}: {described}"
        );
    }
}
