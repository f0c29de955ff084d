//! Sessions from Rust, each test on worker threads and on worker processes alike (`name::threads`,
//! `name::processes`): broadcast, order, registers, errors, shutdown, concurrency. The few that
//! run on threads only say why.

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
#[macro_use]
#[path = "support/session_kinds.rs"]
mod session_kinds;
#[path = "support/statuses.rs"]
mod statuses;
#[path = "support/worker_programs.rs"]
mod worker_programs;

use std::sync::Arc;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use discovm::abi::DLTensor;
use discovm::device::cpu::HostTensor;
use discovm::object::{Function, Shape, registry};
use discovm::session::{CopyDirection, DRef, QUEUE_CAPACITY, SessionOptions, Target};
use discovm::worker::{current as current_worker, with_stream as with_worker_stream};
use discovm::{Any, Error, ErrorKind};
use errors::assert_error;
use session_calls::{F32, call, host_dl, host_tensor, int};
use session_kinds::{Gate, Kind, session, start};
use statuses::{status_when, worker};

/// Registers a test function of this process (for worker threads only) under `name`.
fn global(
    name: &str,
    f: impl Fn(&[discovm::AnyView<'_>]) -> discovm::Result<Any> + Send + Sync + 'static,
) {
    registry::register_global(name, Function::from_closure(f), true).unwrap();
}

each_kind!(broadcast_reaches_every_worker_with_its_own_identity);
fn broadcast_reaches_every_worker_with_its_own_identity(kind: Kind) {
    let s = session(kind, 4);
    let rank = s.get_global_func("runtime.disco.worker_rank").unwrap();
    let size = s.get_global_func("runtime.disco.world_size").unwrap();
    let id = s.get_global_func("runtime.disco.worker_id").unwrap();
    let (ranks, sizes, ids) = (
        call(&s, &rank, &[]),
        call(&s, &size, &[]),
        call(&s, &id, &[]),
    );
    for w in 0..4 {
        assert_eq!(int(s.get_register(ranks.reg(), w).unwrap()), w as i64);
        assert_eq!(int(s.get_register(sizes.reg(), w).unwrap()), 4);
        let shape = s.get_register(ids.reg(), w).unwrap();
        assert_eq!(shape.view().as_shape().unwrap().as_slice(), &[w as i64]);
    }
    assert_eq!(current_worker(), None, "the controller is not a worker");
}

/// Threads only: work reaches a worker's stream through the Rust API, from a function of the
/// worker's own process, and worker processes run the worker program's C functions.
#[test]
fn a_sync_waits_for_the_workers_stream_and_reports_its_failures() {
    global("test.session.queue_on_stream", |args| {
        let fail = args[0].as_bool()?;
        with_worker_stream(|stream| {
            stream.launch(
                vec![],
                Box::new(move |_| match fail {
                    true => Err(Error::value("the device said no")),
                    false => Ok(()),
                }),
            )
        })?;
        Ok(Any::None)
    });
    let s = session(Kind::Threads, 2);
    let queue = s.get_global_func("test.session.queue_on_stream").unwrap();
    let out = call(&s, &queue, &[Any::Bool(false)]);
    s.sync_all().unwrap();
    let failing = s
        .call(Target::One(1), &queue, &[Any::Bool(true).view()])
        .unwrap();
    let err = s.sync_worker(1).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Worker);
    assert_eq!(
        err.message,
        "worker 1: work on its stream failed: ValueError: the device said no"
    );
    s.sync_worker(1).unwrap();
    assert!(
        with_worker_stream(|_| Ok(())).is_err(),
        "the controller has no worker stream"
    );
    drop((out, failing));
    s.shutdown().unwrap();
}

each_kind!(dref_arguments_become_each_workers_register_value);
fn dref_arguments_become_each_workers_register_value(kind: Kind) {
    let s = session(kind, 3);
    let rank = s.get_global_func("runtime.disco.worker_rank").unwrap();
    let add = s.get_global_func("proc.add").unwrap();
    let ranks = call(&s, &rank, &[]);
    let sums = call(&s, &add, &[Any::from(ranks.clone()), Any::Int(100)]);
    for w in 0..3 {
        assert_eq!(int(s.get_register(sums.reg(), w).unwrap()), 100 + w as i64);
    }
}

each_kind!(a_call_on_one_worker_runs_there_only);
fn a_call_on_one_worker_runs_there_only(kind: Kind) {
    let s = session(kind, 2);
    let rank = s.get_global_func("runtime.disco.worker_rank").unwrap();
    let only = s.call(Target::One(1), &rank, &[]).unwrap();
    assert_eq!(int(s.get_register(only.reg(), 1).unwrap()), 1);
    let err = s.get_register(only.reg(), 0).unwrap_err();
    assert_error(&err, ErrorKind::Worker, "is empty on worker 0");
}

each_kind!(a_hundred_thousand_calls_keep_per_worker_order);
fn a_hundred_thousand_calls_keep_per_worker_order(kind: Kind) {
    let s = session(kind, 2);
    let f = s.get_global_func("proc.expect_next").unwrap();
    for i in 0..100_000i64 {
        drop(call(&s, &f, &[Any::Int(i)]));
    }
    s.sync_all().expect("every worker saw the calls in order");
    drop(f);
    for w in 0..2 {
        assert_eq!(
            s.live_registers(w).unwrap(),
            0,
            "worker {w} still holds registers"
        );
    }
}

each_kind!(registers_are_empty_once_every_dref_is_dropped);
fn registers_are_empty_once_every_dref_is_dropped(kind: Kind) {
    let s = session(kind, 2);
    let rank = s.get_global_func("runtime.disco.worker_rank").unwrap();
    let kept: Vec<DRef> = (0..50).map(|_| call(&s, &rank, &[])).collect();
    assert_eq!(s.live_registers(0).unwrap(), 51);
    drop(kept);
    drop(rank);
    assert_eq!(
        (s.live_registers(0).unwrap(), s.live_registers(1).unwrap()),
        (0, 0)
    );
}

each_kind!(a_dropped_drefs_register_is_empty_once_the_next_call_ran);
fn a_dropped_drefs_register_is_empty_once_the_next_call_ran(kind: Kind) {
    let s = session(kind, 2);
    let rank = s.get_global_func("runtime.disco.worker_rank").unwrap();
    let kept = [call(&s, &rank, &[]), call(&s, &rank, &[])];
    let freed = kept.each_ref().map(DRef::reg);
    drop(kept);
    // Worker processes hear of the frees with this call, in its frame; it may reuse one of
    // the two registers (worker threads were told at once), not both.
    let after = call(&s, &rank, &[]);
    let empty: Vec<_> = freed.into_iter().filter(|&r| r != after.reg()).collect();
    assert!(!empty.is_empty());
    for w in 0..2 {
        assert_eq!(int(s.get_register(after.reg(), w).unwrap()), w as i64);
        for &reg in &empty {
            let err = s.get_register(reg, w).unwrap_err();
            assert_error(&err, ErrorKind::Worker, &format!("is empty on worker {w}"));
        }
    }
}

each_kind!(dropping_drefs_never_waits_for_room_in_a_full_queue);
fn dropping_drefs_never_waits_for_room_in_a_full_queue(kind: Kind) {
    // A DRef may be dropped by a thread the worker waits for (a Python thread holding the
    // interpreter lock that the worker's Python function needs), so freeing its register must
    // not wait for room: here the worker is held inside a call while a worker thread's whole
    // queue of calls waits behind it.
    let s = session(kind, 1);
    let gate = Gate::new();
    let hold = s.get_global_func("proc.wait_for").unwrap();
    let rank = s.get_global_func("runtime.disco.worker_rank").unwrap();
    let first = call(&s, &hold, &[Any::from(gate.path())]);
    // With the first call taken off the queue or not, these fill a worker thread's queue without
    // ever waiting.
    let queued: Vec<DRef> = (1..QUEUE_CAPACITY).map(|_| call(&s, &rank, &[])).collect();
    let (dropped, done) = std::sync::mpsc::channel();
    let dropper = std::thread::spawn(move || {
        drop(queued);
        dropped.send(()).unwrap();
    });
    let returned = done.recv_timeout(Duration::from_secs(60));
    gate.release_one();
    dropper.join().unwrap();
    assert!(
        returned.is_ok(),
        "dropping DRefs waited for the held worker"
    );
    // The next send queues the frees that found no room; then every register is free again.
    s.sync_all().unwrap();
    drop((first, hold, rank));
    assert_eq!(s.live_registers(0).unwrap(), 0);
}

each_kind!(a_bound_call_is_a_call_with_its_function_checked_once);
fn a_bound_call_is_a_call_with_its_function_checked_once(kind: Kind) {
    let s = session(kind, 2);
    let rank = s.get_global_func("runtime.disco.worker_rank").unwrap();
    let bound = s.bind(Target::All, rank.clone()).unwrap();
    let ranks = bound.call(&[]).unwrap();
    let on_one = s
        .bind(Target::One(1), rank.clone())
        .unwrap()
        .call(&[])
        .unwrap();
    assert_eq!(
        (0..2)
            .map(|w| int(s.get_register(ranks.reg(), w).unwrap()))
            .collect::<Vec<_>>(),
        [0, 1]
    );
    assert_eq!(int(s.get_register(on_one.reg(), 1).unwrap()), 1);
    let other = session(kind, 2);
    let foreign = other.get_global_func("runtime.disco.worker_rank").unwrap();
    let refused = s.bind(Target::All, foreign).err().unwrap();
    assert_error(
        &refused,
        ErrorKind::Value,
        "`func` is a DRef of another session",
    );
    let refused = s.bind(Target::One(2), rank).err().unwrap();
    assert_error(&refused, ErrorKind::Index, "worker 2 out of range");
    // Only a call to one worker thread can be tried without waiting.
    assert_eq!(bound.single_thread(), None);
    assert!(bound.try_call(&[]).unwrap().is_none());
}

/// Threads only: a try queues into one worker thread's queue, which worker processes do not
/// have (a bound call to one of them is never tried).
#[test]
fn a_bound_call_tried_without_waiting_sends_nothing_when_it_would_wait() {
    let s = session(Kind::Threads, 1);
    let gate = Gate::new();
    let hold = registry::get_global("proc.wait_for").unwrap();
    let rank = s.get_global_func("runtime.disco.worker_rank").unwrap();
    let bound = s.bind(Target::All, rank.clone()).unwrap();
    assert_eq!(bound.single_thread(), Some(0));
    s.sync_all().unwrap(); // the queue is empty
    // The worker runs the held call (out of its queue) before the tries begin.
    let entered = Arc::new(AtomicBool::new(false));
    let (entering, wait_for) = (entered.clone(), hold);
    let enter_and_hold = Function::from_closure(move |args| {
        entering.store(true, Ordering::SeqCst);
        wait_for.call(args)
    });
    registry::register_global("test.bound_try.hold", enter_and_hold, true).unwrap();
    let hold = s.get_global_func("test.bound_try.hold").unwrap();
    let first = call(&s, &hold, &[Any::from(gate.path())]);
    while !entered.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
    // The worker is held: tries fill its queue, and the first that finds no room sends nothing.
    let mut sent = Vec::new();
    while let Some(dref) = bound.try_call(&[]).unwrap() {
        sent.push(dref);
        assert!(
            sent.len() <= QUEUE_CAPACITY,
            "a try queued past the queue's capacity"
        );
    }
    assert!(
        sent.len() >= QUEUE_CAPACITY - 1,
        "only {} tries were sent",
        sent.len()
    );
    // A free waits for the next send, which queues it first: a try finds no room for it.
    drop(sent.pop());
    assert!(
        bound.try_call(&[]).unwrap().is_none(),
        "a try went out with no room for the free before it"
    );
    gate.release_one();
    // Once the worker makes room, a try takes the free along.
    let along = std::iter::repeat_with(|| {
        std::thread::yield_now();
        bound.try_call(&[]).unwrap()
    })
    .take(1_000_000)
    .find_map(|tried| tried)
    .expect("a try goes out once the worker made room");
    sent.push(along);
    let waited = bound.call(&[]).unwrap();
    s.sync_all().unwrap();
    let tried = bound
        .try_call(&[])
        .unwrap()
        .expect("a try with room is sent");
    s.sync_all().unwrap();
    for dref in sent.iter().chain([&waited, &tried]) {
        assert_eq!(int(s.get_register(dref.reg(), 0).unwrap()), 0);
    }
    drop((sent, waited, tried, first));
    // The tries that were refused left no register behind.
    assert_eq!(s.live_registers(0).unwrap(), 2, "hold and rank remain");
    drop((hold, rank, bound));
}

each_kind!(eight_host_threads_lose_no_call);
fn eight_host_threads_lose_no_call(kind: Kind) {
    let s = session(kind, 2);
    let f = s.get_global_func("proc.count").unwrap();
    std::thread::scope(|scope| {
        for _ in 0..8 {
            scope.spawn(|| {
                for i in 0..10_000 {
                    drop(call(&s, &f, &[]));
                    if i % 1000 == 0 {
                        s.sync_worker(i % 2).unwrap();
                    }
                }
                s.sync_all().unwrap();
            });
        }
    });
    // One more call counts itself after the 80 000 of the threads.
    let counts = call(&s, &f, &[]);
    for w in 0..2 {
        assert_eq!(
            int(s.get_register(counts.reg(), w).unwrap()),
            80_001,
            "worker {w}"
        );
    }
    drop((counts, f));
    assert_eq!(s.live_registers(0).unwrap(), 0);
}

each_kind!(shutdown_during_load_is_clean_and_later_calls_fail_at_once);
fn shutdown_during_load_is_clean_and_later_calls_fail_at_once(kind: Kind) {
    let s = session(kind, 4);
    let rank = s.get_global_func("runtime.disco.worker_rank").unwrap();
    let start = Barrier::new(5);
    let closed_seen = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                start.wait();
                for _ in 0..1_000_000 {
                    match s
                        .call(Target::All, &rank, &[])
                        .and_then(|_| s.sync_worker(0))
                    {
                        Ok(()) => {}
                        Err(e) => {
                            assert_eq!(e.kind, ErrorKind::SessionClosed, "{e}");
                            closed_seen.fetch_add(1, Ordering::SeqCst);
                            return;
                        }
                    }
                }
            });
        }
        start.wait();
        s.shutdown().unwrap();
    });
    assert_eq!(
        closed_seen.load(Ordering::SeqCst),
        4,
        "every thread saw the session close"
    );
    assert!(s.is_closed());
    for result in [
        s.sync_all(),
        s.sync_worker(1),
        s.get_global_func("runtime.disco.worker_rank").map(drop),
    ] {
        assert_eq!(result.unwrap_err().kind, ErrorKind::SessionClosed);
    }
    s.shutdown().expect("shutting down twice is fine");
}

each_kind!(a_failing_worker_function_is_reported_and_the_session_goes_on);
fn a_failing_worker_function_is_reported_and_the_session_goes_on(kind: Kind) {
    let s = session(kind, 2);
    let fail = s.get_global_func("proc.fail_on").unwrap();
    let identity = s.get_global_func("proc.echo").unwrap();
    let out = call(&s, &fail, &[Any::Int(1), Any::Int(7)]);
    s.sync_worker(0).expect("worker 0 is fine");
    let err = s.sync_worker(1).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Worker);
    assert_eq!(
        err.message,
        "worker 1: `proc.fail_on` failed: ValueError: boom on purpose"
    );
    s.sync_worker(1).expect("the error is reported once");

    // A call that depends on the failed register fails with the same cause; worker 0 goes on.
    let dependent = call(&s, &identity, &[Any::from(out.clone())]);
    assert_eq!(int(s.get_register(dependent.reg(), 0).unwrap()), 7);
    let err = s.sync_worker(1).unwrap_err();
    assert!(err.message.contains("boom on purpose"), "{}", err.message);
    assert!(
        err.message.contains("`proc.echo` was not run"),
        "{}",
        err.message
    );
    let err = s.get_register(dependent.reg(), 1).unwrap_err();
    assert!(err.message.contains("boom on purpose"), "{}", err.message);
    s.sync_all().expect("both workers reported and go on");
    let rank = s.get_global_func("runtime.disco.worker_rank").unwrap();
    let ranks = call(&s, &rank, &[]);
    assert_eq!(int(s.get_register(ranks.reg(), 1).unwrap()), 1);
}

/// Threads only: a worker function that panics is a Rust function of this process; those of
/// worker processes are the worker program's C functions.
#[test]
fn a_panicking_worker_function_is_reported_and_the_session_goes_on() {
    global("test.session.panic", |_| panic!("a deliberate panic"));
    let s = session(Kind::Threads, 2);
    let panics = s.get_global_func("test.session.panic").unwrap();
    drop(call(&s, &panics, &[]));
    let err = s.sync_all().unwrap_err();
    assert_error(
        &err,
        ErrorKind::Worker,
        "worker 0: `test.session.panic` failed: Panic: panic: a deliberate panic",
    );
    s.sync_all().expect("both workers reported and go on");
    let rank = s.get_global_func("runtime.disco.worker_rank").unwrap();
    let ranks = call(&s, &rank, &[]);
    assert_eq!(int(s.get_register(ranks.reg(), 1).unwrap()), 1);
}

each_kind!(missing_global_functions_fail_at_lookup);
fn missing_global_functions_fail_at_lookup(kind: Kind) {
    let s = session(kind, 1);
    let err = s
        .get_global_func("test.session.no_such_function")
        .unwrap_err();
    assert_error(&err, ErrorKind::Key, "test.session.no_such_function");
    s.sync_all().unwrap();
}

each_kind!(missing_module_functions_fail_at_lookup);
fn missing_module_functions_fail_at_lookup(kind: Kind) {
    let s = session(kind, 2);
    let baseline: Vec<usize> = (0..2).map(|w| s.live_registers(w).unwrap()).collect();
    let path = built_library::shared_library().to_str().unwrap();
    let module = s.load_module(path).unwrap();
    let err = s.module_func(&module, "no_such_function").unwrap_err();
    assert_error(&err, ErrorKind::Key, "has no function `no_such_function`");
    assert!(err.message.contains(path), "{}", err.message);
    s.sync_all()
        .expect("a failed lookup leaves nothing for the next wait");

    // A lookup after an unrelated failed call: it succeeds, and the sync reports the failure.
    let fail = s.get_global_func("proc.fail_on").unwrap();
    let failed = call(&s, &fail, &[Any::Int(1), Any::Int(7)]);
    let version = s.module_func(&module, "version").unwrap();
    let err = s.module_func(&module, "nope").unwrap_err();
    assert_error(&err, ErrorKind::Key, "nope");
    assert!(!err.message.contains("boom"), "{}", err.message);
    assert_error(
        &s.sync_all().unwrap_err(),
        ErrorKind::Worker,
        "boom on purpose",
    );
    let versions = call(&s, &version, &[]);
    let on_1 = s.get_register(versions.reg(), 1).unwrap();
    assert_eq!(on_1.view().as_str().unwrap(), env!("CARGO_PKG_VERSION"));

    // A module whose load failed fails the lookup with the loader's reason; its load's failure
    // still goes to the next wait.
    // Named for the kind too: each kind's test runs at once in this process.
    let text = std::env::temp_dir().join(format!(
        "discovm-no-library-{}-{kind:?}",
        std::process::id()
    ));
    std::fs::write(&text, "not a shared library\n").unwrap();
    let bad = s.load_module(text.to_str().unwrap()).unwrap();
    let err = s.module_func(&bad, "version").unwrap_err();
    assert_error(&err, ErrorKind::Worker, "cannot load module");
    assert!(
        err.message.contains(text.to_str().unwrap()),
        "{}",
        err.message
    );
    assert_error(
        &s.sync_all().unwrap_err(),
        ErrorKind::Worker,
        "cannot load module",
    );
    std::fs::remove_file(&text).unwrap();

    drop((module, fail, failed, version, versions, bad));
    let live: Vec<usize> = (0..2).map(|w| s.live_registers(w).unwrap()).collect();
    assert_eq!(live, baseline, "every register is free again");
}

each_kind!(bad_inputs_are_clear_errors_and_leave_the_session_usable);
fn bad_inputs_are_clear_errors_and_leave_the_session_usable(kind: Kind) {
    let (s, other) = (session(kind, 2), session(kind, 1));
    let rank = other.get_global_func("runtime.disco.worker_rank").unwrap();
    let err = s.call(Target::All, &rank, &[]).unwrap_err();
    assert_eq!(
        (err.kind, err.message.as_str()),
        (ErrorKind::Value, "`func` is a DRef of another session")
    );
    let err = s.worker_index(2).unwrap_err();
    assert_eq!(
        (err.kind, err.message.as_str()),
        (
            ErrorKind::Index,
            "worker 2 out of range (session has 2 workers)"
        )
    );
    assert_eq!(s.worker_index(-1).unwrap_err().kind, ErrorKind::Index);
    for (workers, groups, message) in [
        (0, 1, "num_workers 0 is out of range (1..=1024)"),
        (-3, 1, "num_workers -3 is out of range (1..=1024)"),
        (100_000, 1, "num_workers 100000 is out of range (1..=1024)"),
        (4, 3, "num_workers 4 is not a multiple of num_groups 3"),
        (4, 0, "num_groups 0 is out of range (1..=4)"),
    ] {
        let err = start(kind, workers, groups, SessionOptions::default())
            .err()
            .expect("rejected");
        assert_eq!(
            (err.kind, err.message.as_str()),
            (ErrorKind::Value, message)
        );
    }
    s.sync_all().unwrap();
}

each_kind!(copies_to_and_from_worker0_round_trip_and_check_shapes);
fn copies_to_and_from_worker0_round_trip_and_check_shapes(kind: Kind) {
    let s = session(kind, 2);
    let empty = s.get_global_func("runtime.disco.empty").unwrap();
    let remote = call(
        &s,
        &empty,
        &[
            Shape::new(&[2, 3]).into(),
            Any::DataType(F32),
            Any::None,
            Any::Bool(true),
        ],
    );
    assert!(
        matches!(s.get_register(remote.reg(), 1).unwrap(), Any::None),
        "worker0_only"
    );
    let copy = |data: &mut [f32], shape: &mut [i64], direction| {
        s.copy_worker0(host_tensor(data, shape), &remote, "remote", direction)
    };
    let (mut input, mut output) = ([1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [0.0f32; 6]);
    let (mut shape_in, mut shape_out) = ([2i64, 3], [2i64, 3]);
    copy(&mut input, &mut shape_in, CopyDirection::ToWorker).unwrap();
    copy(&mut output, &mut shape_out, CopyDirection::FromWorker).unwrap();
    assert_eq!(output, input);

    let (mut wrong, mut wrong_shape) = ([0.0f32; 6], [3i64, 2]);
    let err = copy(&mut wrong, &mut wrong_shape, CopyDirection::ToWorker).unwrap_err();
    assert_error(
        &err,
        ErrorKind::Value,
        "host tensor [3, 2] float32 does not match the remote tensor [2, 3] float32",
    );

    let mut strides = [1i64, 2];
    let strided = DLTensor {
        strides: strides.as_mut_ptr(),
        ..host_dl(&mut wrong, &mut shape_in)
    };
    // SAFETY: the buffers outlive the check.
    let err = unsafe { HostTensor::new(&strided) }
        .err()
        .expect("rejected");
    assert_eq!(
        err.message,
        "the host tensor is not contiguous (row-major compact)"
    );
    copy(&mut output, &mut shape_out, CopyDirection::FromWorker).unwrap();
}

each_kind!(a_wait_with_a_timeout_returns_instead_of_hanging);
fn a_wait_with_a_timeout_returns_instead_of_hanging(kind: Kind) {
    let options = SessionOptions {
        timeout: Some(Duration::from_millis(500)),
        ..Default::default()
    };
    let s = start(kind, 1, 1, options).unwrap();
    let gate = Gate::new();
    let block = s.get_global_func("proc.wait_for").unwrap();
    drop(call(&s, &block, &[Any::from(gate.path())]));
    status_when(&s, |now| worker(now, 0)["state"] == "running");
    let err = s.sync_worker(0).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout);
    let message = err.message.as_str();
    // The report says what the worker does (docs/observability.md; tests/status.rs has more).
    assert!(
        message.starts_with("sync on worker 0 timed out after 500 ms: worker 0")
            && message.contains(" has run call 1 (`proc.wait_for`) for "),
        "{message}"
    );
    gate.release_one();
    s.sync_worker(0)
        .expect("usable again once the worker is free");
}

each_kind!(dropping_a_session_without_shutdown_is_safe);
fn dropping_a_session_without_shutdown_is_safe(kind: Kind) {
    let s = session(kind, 2);
    let rank = s.get_global_func("runtime.disco.worker_rank").unwrap();
    let ranks = call(&s, &rank, &[]);
    drop(s);
    // The DRefs keep the session alive, as Disco's do.
    assert_eq!(
        int(ranks.session().get_register(ranks.reg(), 1).unwrap()),
        1
    );
    drop((rank, ranks));
}
