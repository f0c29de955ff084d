//! Process sessions from Rust: workers as OS processes running a worker program (the tests'
//! own, `support/process_worker.c`, and the default `discovm-worker`). What crosses and what
//! is refused at the call, order, errors as values, copies, modules, timeouts, several host
//! threads, and the faults processes exist for: a worker that dies (SIGKILL, SIGSEGV, abort,
//! exit) fails the wait in progress and every later call with its pid and cause, shutdown
//! reaps it, and a controller that dies takes its workers with it.

#[path = "support/built_library.rs"]
mod built_library;
#[path = "support/c_build.rs"]
mod c_build;
#[path = "support/errors.rs"]
mod errors;
#[path = "support/ports.rs"]
mod ports;
#[path = "support/session_calls.rs"]
mod session_calls;
#[path = "support/session_kinds.rs"]
mod session_kinds;
#[path = "support/worker_processes.rs"]
mod worker_processes;
#[path = "support/worker_programs.rs"]
mod worker_programs;

use std::sync::Arc;
use std::time::{Duration, Instant};

use discovm::abi::DLDevice;
use discovm::object::{Bytes, Shape};
use discovm::session::{CopyDirection, Session, SessionOptions, Target};
use discovm::{Any, ErrorKind};
use errors::assert_error;
use session_calls::{F32, call, host_tensor, int};
use session_kinds::{Kind, process_options};
use worker_processes::{exists, gone_within, pids, stop, unreaped};
use worker_programs::{default_worker_program, test_worker_program};

fn session(n: i64) -> Arc<Session> {
    session_kinds::session(Kind::Processes, n)
}

#[test]
fn each_worker_is_a_process_of_its_own_running_calls_in_order() {
    let s = session(3);
    let ids = pids(&s);
    assert!(ids.iter().all(|&p| p != std::process::id() as i32));
    assert_eq!(ids.len(), 3);
    assert!(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2]);
    // Each leads a process group of its own: a terminal's Ctrl-C reaches the controller alone.
    // SAFETY: plain queries of process ids.
    let own_group = unsafe { libc::getpgid(0) };
    for &pid in &ids {
        assert_eq!(
            unsafe { libc::getpgid(pid) },
            pid,
            "worker {pid}'s process group"
        );
        assert_ne!(pid, own_group);
    }

    let rank = s.get_global_func("runtime.disco.worker_rank").unwrap();
    let ranks = call(&s, &rank, &[]);
    let add = s.get_global_func("proc.add").unwrap();
    // Each call takes the result of the one before on the same worker: order is kept.
    let mut total = call(&s, &add, &[Any::Int(0), Any::Int(0)]);
    for _ in 0..2000 {
        let views = [Any::from(total.clone()), Any::Int(1)];
        let views: Vec<_> = views.iter().map(Any::view).collect();
        total = s.call(Target::All, &add, &views).unwrap();
    }
    for w in 0..3 {
        assert_eq!(int(s.get_register(ranks.reg(), w).unwrap()), w as i64);
        assert_eq!(int(s.get_register(total.reg(), w).unwrap()), 2000);
    }
    drop((ranks, total, rank, add));
    for w in 0..3 {
        assert_eq!(
            s.live_registers(w).unwrap(),
            0,
            "registers freed on worker {w}"
        );
    }
    s.shutdown().unwrap();
    for pid in ids {
        assert!(
            !exists(pid) && !unreaped(pid),
            "worker {pid} reaped at shutdown"
        );
    }
}

/// What a value holds, whatever object carries it (a copy has its own object).
fn described(value: &Any) -> String {
    let view = value.view();
    if let Ok(shape) = view.as_shape() {
        return format!("Shape{:?}", shape.as_slice());
    }
    if let Ok(text) = view.as_str() {
        return format!("Str {text:?}");
    }
    if let Ok(bytes) = view.as_bytes() {
        return format!("Bytes {bytes:?}");
    }
    format!("{value:?}")
}

#[test]
fn values_cross_both_ways_and_what_cannot_cross_is_refused_at_the_call() {
    let s = session(2);
    let echo = s.get_global_func("proc.echo").unwrap();
    let long = "a string longer than seven bytes";
    let values = [
        Any::None,
        Any::Int(-7),
        Any::Float(2.5),
        Any::Bool(true),
        Any::from("short"),
        Any::from(long),
        Any::Bytes(Bytes::new(b"\x00\x01bytes")),
        Shape::new(&[2, 3, 4]).into(),
        Any::DataType(F32),
        Any::Device(DLDevice::cpu()),
    ];
    for value in &values {
        let back = call(&s, &echo, std::slice::from_ref(value));
        let got = s.get_register(back.reg(), 1).unwrap();
        assert_eq!(described(&got), described(value), "{value:?} came back");
    }

    let function = discovm::object::registry::get_global("runtime.disco.worker_rank").unwrap();
    let views = [Any::Int(1), Any::from(function)];
    let views: Vec<_> = views.iter().map(Any::view).collect();
    let err = s.call(Target::All, &echo, &views).unwrap_err();
    assert_error(
        &err,
        ErrorKind::Type,
        "`args[1]`: a ffi.Function cannot cross",
    );
    // The session goes on.
    let back = call(&s, &echo, &[Any::Int(5)]);
    assert_eq!(int(s.get_register(back.reg(), 0).unwrap()), 5);
}

#[test]
fn failures_are_values_and_missing_functions_fail_at_lookup() {
    let s = session(2);
    let err = s.get_global_func("proc.no_such_function").unwrap_err();
    assert_error(&err, ErrorKind::Key, "proc.no_such_function");

    let fail = s.get_global_func("proc.fail").unwrap();
    let failed = call(&s, &fail, &[]);
    let err = s.sync_worker(1).unwrap_err();
    assert_error(&err, ErrorKind::Worker, "worker 1");
    assert_error(&err, ErrorKind::Worker, "proc.fail was asked to fail");
    let err = s.get_register(failed.reg(), 0).unwrap_err();
    assert_error(&err, ErrorKind::Worker, "proc.fail was asked to fail");
    s.sync_all().expect("each failure was reported once");
    let add = s.get_global_func("proc.add").unwrap();
    let sum = call(&s, &add, &[Any::Int(2), Any::Int(3)]);
    assert_eq!(int(s.get_register(sum.reg(), 1).unwrap()), 5);
}

#[test]
fn copies_to_and_from_worker0_round_trip_through_worker_functions() {
    let s = session(2);
    let empty = s.get_global_func("runtime.disco.empty").unwrap();
    let remote = call(
        &s,
        &empty,
        &[Shape::new(&[2, 3]).into(), Any::DataType(F32)],
    );
    let (mut input, mut output) = ([1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [0.0f32; 6]);
    let (mut shape_in, mut shape_out) = ([2i64, 3], [2i64, 3]);
    s.copy_worker0(
        host_tensor(&mut input, &mut shape_in),
        &remote,
        "remote",
        CopyDirection::ToWorker,
    )
    .unwrap();
    let scale = s.get_global_func("proc.scale").unwrap();
    let _ = call(&s, &scale, &[Any::from(remote.clone()), Any::Float(10.0)]);
    s.copy_worker0(
        host_tensor(&mut output, &mut shape_out),
        &remote,
        "remote",
        CopyDirection::FromWorker,
    )
    .unwrap();
    assert_eq!(output, [10.0, 20.0, 30.0, 40.0, 50.0, 60.0]);

    let (mut wrong, mut wrong_shape) = ([0.0f32; 6], [3i64, 2]);
    let err = s
        .copy_worker0(
            host_tensor(&mut wrong, &mut wrong_shape),
            &remote,
            "remote",
            CopyDirection::FromWorker,
        )
        .unwrap_err();
    assert_error(
        &err,
        ErrorKind::Value,
        "does not match the remote tensor [2, 3] float32",
    );
    let err = s
        .copy_worker0(
            host_tensor(&mut wrong, &mut wrong_shape),
            &remote,
            "remote",
            CopyDirection::ToWorker,
        )
        .unwrap_err();
    assert_error(
        &err,
        ErrorKind::Value,
        "does not match the remote tensor [2, 3] float32",
    );
    // A tensor read back is a host copy of the worker's.
    let tensor = s.get_register(remote.reg(), 0).unwrap();
    assert_eq!(tensor.view().as_tensor().unwrap().shape(), &[2, 3]);
}

#[test]
fn tensors_in_the_arena_copy_in_place_at_any_size() {
    let s = session(2);
    let empty = s.get_global_func("runtime.disco.empty").unwrap();
    let elements = 3 << 20; // 12 MiB of float32: more than a ring holds
    let big = call(
        &s,
        &empty,
        &[Shape::new(&[elements]).into(), Any::DataType(F32)],
    );
    let mut data: Vec<f32> = (0..elements).map(|i| i as f32).collect();
    let mut back = vec![0.0f32; elements as usize];
    let mut shape = [elements];
    s.copy_worker0(
        host_tensor(&mut data, &mut shape),
        &big,
        "big",
        CopyDirection::ToWorker,
    )
    .unwrap();
    let scale = s.get_global_func("proc.scale").unwrap();
    let _ = call(&s, &scale, &[Any::from(big.clone()), Any::Float(2.0)]);
    s.copy_worker0(
        host_tensor(&mut back, &mut shape),
        &big,
        "big",
        CopyDirection::FromWorker,
    )
    .unwrap();
    assert!(back.iter().enumerate().all(|(i, &x)| x == 2.0 * i as f32));
    // A register read crosses as a frame longer than the ring, in parts.
    let read = s.get_register(big.reg(), 0).unwrap();
    let read = read.view().as_tensor().unwrap();
    assert_eq!(read.nbytes(), back.len() * 4);
    // SAFETY: a compact float32 host tensor of that many bytes.
    let values = unsafe { std::slice::from_raw_parts(read.data_ptr().cast::<f32>(), back.len()) };
    assert_eq!(values, &back[..]);
    // Freed tensors give their room back: many more than the arena holds at once.
    for _ in 0..64 {
        let t = call(
            &s,
            &empty,
            &[Shape::new(&[elements]).into(), Any::DataType(F32)],
        );
        s.copy_worker0(
            host_tensor(&mut data, &mut shape),
            &t,
            "t",
            CopyDirection::ToWorker,
        )
        .unwrap();
    }
    s.sync_all().unwrap();
}

#[test]
fn a_tensor_outside_the_arena_larger_than_a_ring_crosses_in_parts() {
    let s = session(1);
    let heap_empty = s.get_global_func("proc.heap_empty").unwrap();
    let elements = 3 << 20; // 12 MiB of float32: more than the 8 MiB ring holds
    let big = call(&s, &heap_empty, &[Any::Int(elements)]);
    let mut data: Vec<f32> = (0..elements).map(|i| i as f32).collect();
    let mut shape = [elements];
    s.copy_worker0(
        host_tensor(&mut data, &mut shape),
        &big,
        "big",
        CopyDirection::ToWorker,
    )
    .unwrap();
    let scale = s.get_global_func("proc.scale").unwrap();
    let _ = call(&s, &scale, &[Any::from(big.clone()), Any::Float(3.0)]);
    let mut back = vec![0.0f32; elements as usize];
    s.copy_worker0(
        host_tensor(&mut back, &mut shape),
        &big,
        "big",
        CopyDirection::FromWorker,
    )
    .unwrap();
    assert!(back.iter().enumerate().all(|(i, &x)| x == 3.0 * i as f32));
    // Small ones cross in a frame.
    let small = call(&s, &heap_empty, &[Any::Int(4)]);
    let (mut four, mut four_shape) = ([1.0f32, 2.0, 3.0, 4.0], [4i64]);
    s.copy_worker0(
        host_tensor(&mut four, &mut four_shape),
        &small,
        "small",
        CopyDirection::ToWorker,
    )
    .unwrap();
    let (mut got, mut got_shape) = ([0.0f32; 4], [4i64]);
    s.copy_worker0(
        host_tensor(&mut got, &mut got_shape),
        &small,
        "small",
        CopyDirection::FromWorker,
    )
    .unwrap();
    assert_eq!(got, [1.0, 2.0, 3.0, 4.0]);
    // Its errors name the caller's argument, as every copy's do.
    for direction in [CopyDirection::ToWorker, CopyDirection::FromWorker] {
        let (mut five, mut five_shape) = ([0.0f32; 5], [5i64]);
        let err = s
            .copy_worker0(
                host_tensor(&mut five, &mut five_shape),
                &small,
                "small",
                direction,
            )
            .unwrap_err();
        assert_error(&err, ErrorKind::Value, &direction.describe("small"));
        assert_error(
            &err,
            ErrorKind::Value,
            "does not match the remote tensor [4]",
        );
        assert!(!err.message.contains("`dref`"), "{err}");
    }
    s.sync_all().expect("the worker goes on");
}

#[test]
fn a_broken_session_shuts_down_at_once_ending_busy_workers() {
    let s = session(3);
    let ids = pids(&s);
    let sleep = s.get_global_func("proc.sleep_ms").unwrap();
    let _ = s
        .call(Target::One(0), &sleep, &[Any::Int(60_000).view()])
        .unwrap();
    let _ = s
        .call(Target::One(2), &sleep, &[Any::Int(60_000).view()])
        .unwrap();
    // SAFETY: a signal to a child process this test started.
    unsafe { libc::kill(ids[1], libc::SIGKILL) };
    assert!(
        gone_within(ids[1], Duration::from_secs(10)),
        "worker 1 died"
    );
    assert!(s.sync_worker(1).is_err());
    let started = Instant::now();
    s.shutdown()
        .expect("shutting down a broken session ends what is left");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    for pid in ids {
        assert!(
            !exists(pid) && !unreaped(pid),
            "worker {pid} ended and reaped"
        );
    }
}

#[test]
fn modules_load_in_every_worker_process() {
    let s = session(3);
    let path = built_library::shared_library().to_str().unwrap();
    let module = s.load_module(path).unwrap();
    let id = s.module_func(&module, "current_worker_id").unwrap();
    let ids = call(&s, &id, &[]);
    for w in 0..3 {
        assert_eq!(int(s.get_register(ids.reg(), w).unwrap()), w as i64);
    }
    // Each worker process looks a function up in its own copy: one it lacks fails the lookup.
    let err = s.module_func(&module, "no_such_function").unwrap_err();
    assert_error(&err, ErrorKind::Key, "has no function `no_such_function`");
    assert!(err.message.contains(path), "{}", err.message);
}

#[test]
fn a_worker_program_that_cannot_import_python_modules_fails_to_start_when_asked_for_one() {
    let options = |imports: &[&str]| SessionOptions {
        worker_imports: imports.iter().map(|m| m.to_string()).collect(),
        ..process_options()
    };
    let err = Session::new_process(2, 1, options(&["tvm.exec.disco_worker?", "my.functions"]))
        .err()
        .expect("the session must not start");
    assert_error(
        &err,
        ErrorKind::Runtime,
        "starting the worker processes: worker 0: the session asks its workers to import the \
         Python modules `my.functions`, which only a Python worker program",
    );
    // Modules wanted only where they are installed are left alone.
    let s = Session::new_process(2, 1, options(&["tvm.exec.disco_worker?"])).unwrap();
    s.sync_all().unwrap();
    let err = Session::new_process(1, 1, options(&["not a module"]))
        .err()
        .expect("a bad name must be refused");
    assert_error(
        &err,
        ErrorKind::Value,
        "`not a module` is not the name of a Python module",
    );
}

#[test]
fn the_default_worker_program_serves_the_built_ins() {
    let options = SessionOptions {
        worker_program: Some(default_worker_program().to_str().unwrap().to_string()),
        ..SessionOptions::default()
    };
    let s = Session::new_process(2, 2, options).unwrap();
    let groups = s.get_global_func("runtime.disco.num_groups").unwrap();
    let groups = call(&s, &groups, &[]);
    assert_eq!(int(s.get_register(groups.reg(), 1).unwrap()), 2);
    let err = s.get_global_func("proc.pid").unwrap_err();
    assert_error(&err, ErrorKind::Key, "proc.pid");
    s.init_ccl("cpu", &[]).unwrap();
    let barrier = s.get_global_func("runtime.disco.barrier").unwrap();
    let _ = call(&s, &barrier, &[]);
    s.sync_all().unwrap();
    // Workers on the CPU: refused as on threads, by the same checks.
    let err = s.init_ccl("nccl", &[]).unwrap_err();
    let threads = Session::new_threaded(2, 2, SessionOptions::default()).unwrap();
    let on_threads = threads.init_ccl("nccl", &[]).unwrap_err();
    assert_eq!(
        (&err.kind, &err.message),
        (&on_threads.kind, &on_threads.message)
    );
    assert!(err.message.contains("nccl backend"), "{err}");
}

#[test]
fn a_missing_worker_program_is_a_clear_error() {
    let options = SessionOptions {
        worker_program: Some("/nonexistent/worker".into()),
        ..SessionOptions::default()
    };
    let err = Session::new_process(1, 1, options).err().expect("refused");
    assert_error(&err, ErrorKind::Value, "/nonexistent/worker");
}

/// A session of `n` workers whose waits time out after 300 ms.
fn session_timing_out(n: i64) -> Arc<Session> {
    let options = SessionOptions {
        timeout: Some(Duration::from_millis(300)),
        ..process_options()
    };
    Session::new_process(n, 1, options).unwrap()
}

#[test]
fn a_stuck_worker_times_out_and_shutdown_kills_it() {
    let s = session_timing_out(1);
    let pid = pids(&s)[0];
    let sleep = s.get_global_func("proc.sleep_ms").unwrap();
    let _ = call(&s, &sleep, &[Any::Int(60_000)]);
    let started = Instant::now();
    let err = s.sync_worker(0).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout, "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    let _ = s.shutdown();
    assert!(
        gone_within(pid, Duration::from_secs(5)),
        "the stuck worker was killed and reaped"
    );
}

/// A sync of a worker that ran everything sent to it, with no failure to report, sends no
/// message: it returns while the worker is stopped. One with a call still to run, or with a
/// failure to report, asks the worker.
#[test]
fn a_sync_of_a_worker_with_nothing_outstanding_needs_no_message() {
    let s = session_timing_out(2);
    let ids = pids(&s);
    let add = s.get_global_func("proc.add").unwrap();
    let sum = call(&s, &add, &[Any::Int(1), Any::Int(2)]);
    s.sync_all().unwrap();
    let stopped = stop(ids[0]);
    s.sync_worker(0).unwrap();
    s.sync_all().unwrap();

    let again = call(&s, &add, &[Any::Int(3), Any::Int(4)]);
    let err = s.sync_worker(0).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout, "{err:?}");
    let err = s.sync_all().unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout, "{err:?}");
    stopped.resume();
    s.sync_all().unwrap();
    assert_eq!(int(s.get_register(again.reg(), 0).unwrap()), 7);

    let fail = s.get_global_func("proc.fail").unwrap();
    drop(call(&s, &fail, &[]));
    s.sync_worker(1).unwrap_err();
    for _ in 0..2 {
        let err = s.sync_worker(0).unwrap_err();
        assert_error(&err, ErrorKind::Worker, "proc.fail was asked to fail");
        // Reported once: the next sync finds nothing to report.
        s.sync_worker(0).unwrap();
        drop(call(&s, &fail, &[]));
    }
    drop((sum, again, add, fail));
    s.shutdown().unwrap();
}

/// The controller learns of a dead worker through a mutex in the session's arena: sessions
/// whose worker died, one after another on one thread, each fail the sync and go away, and the
/// next one works.
#[test]
fn sessions_whose_worker_died_go_away_one_after_another() {
    for _ in 0..3 {
        let s = session(1);
        let pid = pids(&s)[0];
        s.sync_worker(0).unwrap();
        // SAFETY: a signal to this session's own worker.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
        assert!(
            gone_within(pid, Duration::from_secs(10)),
            "worker {pid} died"
        );
        let err = s.sync_worker(0).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Worker, "{err:?}");
        let _ = s.shutdown();
        drop(s);
    }
    let s = session(1);
    s.sync_all().unwrap();
    s.shutdown().unwrap();
}

#[test]
fn several_host_threads_share_a_process_session() {
    let s = session(2);
    let add = s.get_global_func("proc.add").unwrap();
    std::thread::scope(|scope| {
        for t in 0..4 {
            let (s, add) = (&s, &add);
            scope.spawn(move || {
                for i in 0..300 {
                    let sum = call(s, add, &[Any::Int(t), Any::Int(i)]);
                    assert_eq!(
                        int(s.get_register(sum.reg(), (i % 2) as usize).unwrap()),
                        t + i
                    );
                }
            });
        }
    });
    s.sync_all().unwrap();
}

#[test]
fn calls_after_shutdown_fail_at_once() {
    let s = session(1);
    let add = s.get_global_func("proc.add").unwrap();
    s.shutdown().unwrap();
    let err = s.get_global_func("proc.add").unwrap_err();
    assert_eq!(err.kind, ErrorKind::SessionClosed);
    let views = [Any::Int(1), Any::Int(2)];
    let views: Vec<_> = views.iter().map(Any::view).collect();
    let err = s.call(Target::All, &add, &views).unwrap_err();
    assert_eq!(err.kind, ErrorKind::SessionClosed);
    s.shutdown().expect("shutting down again does nothing");
}

/// Ends worker 1 with `how` while the controller waits for it, then checks what a user sees.
fn worker_death(how: &str, args: &[Any], cause: &str) {
    let s = session(2);
    let ids = pids(&s);
    let end = s.get_global_func(how).unwrap();
    let views: Vec<_> = args.iter().map(Any::view).collect();
    let _ = s.call(Target::One(1), &end, &views).unwrap();
    let started = Instant::now();
    let err = s.sync_worker(1).unwrap_err();
    let noticed = started.elapsed();
    let expected = format!("worker 1 (pid {}) {cause}", ids[1]);
    assert_error(&err, ErrorKind::Worker, &expected);
    assert!(noticed < Duration::from_secs(2), "noticed in {noticed:?}");
    // The session is broken: every later call and wait fails at once with that cause.
    let err = s.sync_worker(0).unwrap_err();
    assert_error(&err, ErrorKind::Worker, &expected);
    let err = s.get_global_func("proc.add").unwrap_err();
    assert_error(&err, ErrorKind::Worker, &expected);
    s.shutdown().expect("shutdown reaps what is left");
    assert!(
        !exists(ids[1]) && !unreaped(ids[1]),
        "the dead worker was reaped"
    );
    assert!(
        gone_within(ids[0], Duration::from_secs(5)),
        "the live worker stopped"
    );
}

#[test]
fn a_worker_killed_by_a_signal_fails_the_wait_with_its_pid_and_cause() {
    let s = session(2);
    let ids = pids(&s);
    let sleep = s.get_global_func("proc.sleep_ms").unwrap();
    let _ = s
        .call(Target::One(1), &sleep, &[Any::Int(60_000).view()])
        .unwrap();
    let victim = ids[1];
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        // SAFETY: a signal to a child process this test started.
        unsafe { libc::kill(victim, libc::SIGKILL) };
    });
    let started = Instant::now();
    let err = s.sync_worker(1).unwrap_err();
    killer.join().unwrap();
    assert_error(
        &err,
        ErrorKind::Worker,
        &format!("worker 1 (pid {}) killed by signal 9 (SIGKILL)", ids[1]),
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    s.shutdown().unwrap();
    assert!(!exists(ids[1]));
}

#[test]
fn a_worker_that_segfaults_fails_the_wait() {
    worker_death("proc.segv", &[], "killed by signal 11 (SIGSEGV)");
}

#[test]
fn a_worker_that_aborts_fails_the_wait() {
    worker_death("proc.abort", &[], "killed by signal 6 (SIGABRT)");
}

#[test]
fn a_worker_that_exits_fails_the_wait_with_its_status() {
    worker_death("proc.exit", &[Any::Int(3)], "exited with status 3");
}

#[test]
fn a_dead_worker_idle_is_noticed_by_the_next_call() {
    let s = session(2);
    let ids = pids(&s);
    // SAFETY: a signal to a child process this test started.
    unsafe { libc::kill(ids[0], libc::SIGKILL) };
    assert!(
        gone_within(ids[0], Duration::from_secs(2)),
        "the watcher reaps it"
    );
    let err = s.get_global_func("proc.add").unwrap_err();
    assert_error(&err, ErrorKind::Worker, "killed by signal 9");
    s.shutdown().unwrap();
}

/// The role of the controller process in `a_controller_that_dies_takes_its_workers_with_it`:
/// starts a session and prints its workers' pids, then waits to be killed.
#[test]
fn controller_role() {
    if std::env::var_os("DVM_TEST_CONTROLLER_ROLE").is_none() {
        return;
    }
    let s = session(2);
    println!("pids {:?}", pids(&s));
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn a_controller_that_dies_takes_its_workers_with_it() {
    test_worker_program();
    let mut controller = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "controller_role",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("DVM_TEST_CONTROLLER_ROLE", "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(controller.stdout.take().unwrap());
    let mut line = String::new();
    let pids: Vec<i32> = loop {
        line.clear();
        let read = std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        assert!(
            read > 0,
            "the controller ended before it printed its workers"
        );
        // The harness prints the test's name on the same line first.
        if let Some((_, list)) = line.trim().split_once("pids [") {
            break list
                .trim_end_matches(']')
                .split(", ")
                .map(|p| p.parse().unwrap())
                .collect();
        }
    };
    controller.kill().unwrap();
    controller.wait().unwrap();
    for pid in pids {
        assert!(
            gone_within(pid, Duration::from_secs(2)),
            "worker {pid} outlived its controller"
        );
    }
}
