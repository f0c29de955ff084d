//! A session's status and hang reports, on worker threads and worker processes: what each
//! worker is doing (idle, running a function, waiting in a collective and for whom, dead),
//! read without asking any worker, and what a wait that timed out says of every worker it
//! waited for.

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
#[path = "support/worker_processes.rs"]
mod worker_processes;
#[path = "support/worker_programs.rs"]
mod worker_programs;

use std::sync::Arc;
use std::time::{Duration, Instant};

use discovm::object::Shape;
use discovm::session::{DRef, Session, SessionOptions, Target};
use discovm::{Any, ErrorKind};
use errors::assert_error;
use session_calls::{F32, call};
use session_kinds::{Gate, Kind, start};
use statuses::{calls_sent, status, status_when, worker};
use worker_processes::pids;

/// The pid each worker reports under: the controller's for threads.
fn expected_pids(s: &Arc<Session>, kind: Kind) -> Vec<i64> {
    match kind {
        Kind::Threads => vec![std::process::id().into(); s.num_workers()],
        _ => pids(s).into_iter().map(i64::from).collect(),
    }
}

fn idle_workers_report_their_last_call(kind: Kind) {
    let s = session_kinds::session(kind, 3);
    let add = s.get_global_func("proc.add").unwrap();
    let _first = call(&s, &add, &[Any::Int(1), Any::Int(2)]);
    let _second = call(&s, &add, &[Any::Int(3), Any::Int(4)]);
    s.sync_all().unwrap();
    let now = status_when(&s, |now| (0..3).all(|w| worker(now, w)["state"] == "idle"));
    assert_eq!(now["calls_sent"], 2);
    let pids = expected_pids(&s, kind);
    for (w, pid) in pids.iter().enumerate() {
        let seen = worker(&now, w);
        assert_eq!(seen["worker"], w, "{now}");
        assert_eq!(seen["node"], 0);
        assert_eq!(seen["pid"], *pid);
        assert_eq!(seen["call"], 2, "the last call it ran: {now}");
        assert_eq!(seen["last_finished_call"], 2);
        assert_eq!(seen["function"], "proc.add");
        assert!(seen["since_ms"].as_f64().unwrap() >= 0.0);
        assert_eq!(seen["waits_for"], serde_json::json!([]));
        assert!(seen["last_failure"].is_null() && seen["cause"].is_null());
        assert_last_calls(seen);
    }
}
each_kind!(idle_workers_report_their_last_call);

/// The worker's last events hold its two calls, oldest first, each begun before it ended.
fn assert_last_calls(seen: &serde_json::Value) {
    let calls: Vec<&serde_json::Value> = seen["last_events"]
        .as_array()
        .expect("the last events of a worker of this machine")
        .iter()
        .filter(|event| event["cat"] == "call")
        .collect();
    let numbers: Vec<&serde_json::Value> = calls.iter().map(|event| &event["call"]).collect();
    assert_eq!(numbers, [1, 2], "{seen}");
    for event in calls {
        assert_eq!(event["name"], "proc.add");
        let (ago, dur) = (event["began_ms_ago"].as_f64(), event["dur_ms"].as_f64());
        assert!(
            dur.unwrap() >= 0.0 && ago.unwrap() >= dur.unwrap(),
            "{event}"
        );
    }
}

fn a_failed_call_is_the_workers_last_failure(kind: Kind) {
    let s = session_kinds::session(kind, 2);
    let fail_on = s.get_global_func("proc.fail_on").unwrap();
    let _failed = call(&s, &fail_on, &[Any::Int(1), Any::Int(0)]);
    let err = s.sync_all().unwrap_err();
    assert_error(&err, ErrorKind::Worker, "boom on purpose");
    let now = status(&s);
    assert!(worker(&now, 0)["last_failure"].is_null(), "{now}");
    let failure = &worker(&now, 1)["last_failure"];
    assert_eq!(failure["call"], 1, "{now}");
    let error = failure["error"].as_str().unwrap();
    assert!(error.contains("boom on purpose"), "{error}");
}
each_kind!(a_failed_call_is_the_workers_last_failure);

/// Worker 1 held in `proc.wait_for` at `gate` (a call to it alone), then an allreduce on every
/// worker, which worker 0 enters and waits in for worker 1. Returns the two calls' numbers.
fn hold_worker_1_with_worker_0_in_an_allreduce(s: &Arc<Session>, gate: &Gate) -> (u64, u64) {
    s.init_ccl("cpu", &[]).unwrap();
    let wait_for = s.get_global_func("proc.wait_for").unwrap();
    let empty = s.get_global_func("runtime.disco.empty").unwrap();
    let allreduce = s.get_global_func("runtime.disco.allreduce").unwrap();
    let shape: Any = Shape::new(&[4]).into();
    let (send, recv) = (
        call(s, &empty, &[shape.clone(), Any::DataType(F32)]),
        call(s, &empty, &[shape, Any::DataType(F32)]),
    );
    let path: Any = gate.path().into();
    let held = s
        .call(Target::One(1), &wait_for, &[path.view()])
        .expect("the call is sent");
    let held_number = calls_sent(s);
    let args: [Any; 4] = [
        send.clone().into(),
        Shape::new(&[0]).into(),
        Any::Bool(false),
        recv.clone().into(),
    ];
    let reduced = call(s, &allreduce, &args);
    let numbers = (held_number, calls_sent(s));
    assert_eq!(numbers.1, numbers.0 + 1, "each call takes the next number");
    std::mem::forget::<[DRef; 4]>([send, recv, held, reduced]); // freed at shutdown
    numbers
}

fn a_worker_in_a_collective_names_the_peer_it_waits_for(kind: Kind) {
    let s = session_kinds::session(kind, 2);
    let gate = Gate::new();
    let (held, reduced) = hold_worker_1_with_worker_0_in_an_allreduce(&s, &gate);
    let now = status_when(&s, |now| {
        worker(now, 0)["waits_for"] == serde_json::json!([1])
            && worker(now, 1)["state"] == "running"
    });
    let waiting = worker(&now, 0);
    assert_eq!(waiting["state"], "collective", "{now}");
    assert_eq!(waiting["collective"], "allreduce");
    assert_eq!(waiting["call"], reduced);
    assert_eq!(waiting["function"], "runtime.disco.allreduce");
    let running = worker(&now, 1);
    assert_eq!(running["call"], held, "{now}");
    assert_eq!(running["function"], "proc.wait_for");
    assert!(running["collective"].is_null());
    assert_eq!(now["calls_sent"], reduced);
    gate.release_one();
    s.sync_all().unwrap();
    let now = status_when(&s, |now| (0..2).all(|w| worker(now, w)["state"] == "idle"));
    assert_eq!(worker(&now, 1)["last_finished_call"], reduced, "{now}");
    assert_eq!(worker(&now, 0)["waits_for"], serde_json::json!([]));
}
each_kind!(a_worker_in_a_collective_names_the_peer_it_waits_for);

fn a_sync_that_times_out_says_what_every_worker_does(kind: Kind) {
    let options = SessionOptions {
        timeout: Some(Duration::from_millis(500)),
        ..SessionOptions::default()
    };
    let s = start(kind, 3, 1, options).unwrap();
    let gate = Gate::new();
    let wait_for = s.get_global_func("proc.wait_for").unwrap();
    let path: Any = gate.path().into();
    // Asked first: the pids come from a call to every worker.
    let who = match kind {
        Kind::Threads => "worker 1".to_string(),
        _ => format!("worker 1 (pid {})", pids(&s)[1]),
    };
    let held = s.call(Target::One(1), &wait_for, &[path.view()]).unwrap();
    let running = format!("{who} has run call {} (`proc.wait_for`)", calls_sent(&s));
    status_when(&s, |now| worker(now, 1)["state"] == "running");
    let err = s.sync_all().unwrap_err();
    assert_error(
        &err,
        ErrorKind::Timeout,
        "sync of all timed out after 500 ms: ",
    );
    assert_error(&err, ErrorKind::Timeout, &format!("{running} for "));
    assert_error(&err, ErrorKind::Timeout, "; workers 0 and 2 are idle");
    assert_error(
        &err,
        ErrorKind::Timeout,
        "each worker's last events: trace_dump(path)",
    );
    let err = s.sync_worker(1).unwrap_err();
    assert_error(
        &err,
        ErrorKind::Timeout,
        &format!("sync on worker 1 timed out after 500 ms: {running} for "),
    );
    // A wait that ends in time says nothing more.
    s.sync_worker(0).unwrap();
    gate.release_one();
    drop(held);
    let until = Instant::now() + Duration::from_secs(20);
    while s.sync_all().is_err() {
        assert!(Instant::now() < until, "the worker never came back");
    }
}
each_kind!(a_sync_that_times_out_says_what_every_worker_does);

#[test]
fn a_dead_worker_process_is_dead_with_its_cause_and_its_last_call() {
    let s = session_kinds::session(Kind::Processes, 2);
    let pid = pids(&s)[1];
    let calls = calls_sent(&s);
    let gate = Gate::new();
    let _held = gate.hold(&s, 1);
    status_when(&s, |now| worker(now, 1)["state"] == "running");
    // SAFETY: a child of this test's session.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let now = status_when(&s, |now| worker(now, 1)["state"] == "dead");
    let dead = worker(&now, 1);
    assert_eq!(dead["cause"], "killed by signal 9 (SIGKILL)", "{now}");
    assert_eq!(dead["pid"], pid);
    assert_eq!(
        dead["call"],
        calls + 1,
        "its last report outlives it: {now}"
    );
    assert_eq!(dead["function"], "proc.wait_for");
    assert_eq!(worker(&now, 0)["state"], "idle");
    let err = s.sync_all().unwrap_err();
    assert_error(&err, ErrorKind::Worker, "killed by signal 9");
}

#[test]
fn a_closed_session_has_no_status() {
    for kind in [Kind::Threads, Kind::Processes] {
        let s = session_kinds::session(kind, 1);
        s.shutdown().unwrap();
        let err = s.status().unwrap_err();
        assert_error(&err, ErrorKind::SessionClosed, "shut down");
    }
}

fn a_send_to_a_full_queue_that_times_out_says_what_the_worker_does(kind: Kind) {
    let options = SessionOptions {
        timeout: Some(Duration::from_millis(300)),
        ..SessionOptions::default()
    };
    let s = start(kind, 1, 1, options).unwrap();
    let gate = Gate::new();
    let wait_for = s.get_global_func("proc.wait_for").unwrap();
    let add = s.get_global_func("proc.add").unwrap();
    let path: Any = gate.path().into();
    let held = s.call(Target::All, &wait_for, &[path.view()]).unwrap();
    status_when(&s, |now| worker(now, 0)["state"] == "running");
    let args = [Any::Int(1), Any::Int(2)];
    let views: Vec<_> = args.iter().map(Any::view).collect();
    // Calls pile up behind the held one until the queue is full.
    let err = (0..10_000_000)
        .find_map(|_| s.call(Target::All, &add, &views).err())
        .expect("the queue fills");
    assert_error(
        &err,
        ErrorKind::Timeout,
        "of worker 0 timed out after 300 ms: worker 0",
    );
    assert_error(
        &err,
        ErrorKind::Timeout,
        " has run call 1 (`proc.wait_for`) for ",
    );
    gate.release_one();
    drop(held);
    let until = Instant::now() + Duration::from_secs(60);
    while s.sync_all().is_err() {
        assert!(Instant::now() < until, "the worker never caught up");
    }
}
each_kind!(a_send_to_a_full_queue_that_times_out_says_what_the_worker_does);
