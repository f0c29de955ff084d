//! A session's status and hang reports for workers on another node: what each of them does, as
//! its node's board reports it (its call and function, its pid and its node), in a status that
//! never waits for the node; a node that goes silent shows its workers lost, saying how old
//! their last reports are, and reports again once it is heard from.
//!
//! Every session here has two nodes of two workers: workers 0 and 1 are processes of this
//! machine's node 0, workers 2 and 3 processes of the `discovm-node` the test starts.

#[path = "support/built_library.rs"]
mod built_library;
#[path = "support/c_build.rs"]
mod c_build;
#[path = "support/errors.rs"]
mod errors;
#[path = "support/gloo.rs"]
mod gloo;
#[path = "support/ports.rs"]
mod ports;
#[path = "support/session_calls.rs"]
mod session_calls;
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
use discovm::session::{Session, SessionOptions};
use discovm::{Any, ErrorKind};
use errors::assert_error;
use serde_json::{Value, json};
use session_calls::{F32, call};
use session_kinds::{Gate, Kind, start};
use statuses::{calls_sent, status_when, worker};
use worker_processes::{pids, stop};
use worker_programs::node_program;

/// How soon a stopped node's workers must show as lost.
const LOST_WITHIN: Duration = Duration::from_secs(3);

/// A session of two nodes of two workers each, with `options`.
fn session(options: SessionOptions) -> Arc<Session> {
    start(Kind::Nodes, 4, 1, options).expect("a session starts")
}

/// Whether every worker in `workers` is in `state`, having run call `call` last.
fn all_at(now: &Value, workers: std::ops::Range<usize>, state: &str, call: u64) -> bool {
    workers
        .into_iter()
        .all(|w| worker(now, w)["state"] == state && worker(now, w)["call"] == call)
}

/// The pid of the node program that started the worker process `pid`: its parent.
fn node_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The parent's pid follows the state, after the command's name in parentheses.
    let (_, rest) = stat.rsplit_once(") ").unwrap();
    let parent: i32 = rest.split(' ').nth(1).unwrap().parse().unwrap();
    let program = std::fs::read_link(format!("/proc/{parent}/exe")).unwrap();
    assert_eq!(program, node_program().canonicalize().unwrap());
    parent
}

#[test]
fn idle_workers_of_both_nodes_report_their_last_call() {
    let s = session(SessionOptions::default());
    let add = s.get_global_func("proc.add").unwrap();
    let _first = call(&s, &add, &[Any::Int(1), Any::Int(2)]);
    let _second = call(&s, &add, &[Any::Int(3), Any::Int(4)]);
    s.sync_all().unwrap();
    let now = status_when(&s, |now| all_at(now, 0..4, "idle", 2));
    assert_eq!(now["calls_sent"], 2);
    for (w, pid) in pids(&s).into_iter().enumerate() {
        let seen = worker(&now, w);
        assert_eq!(seen["worker"], w, "{now}");
        assert_eq!(seen["node"], w / 2, "{now}");
        assert_eq!(seen["pid"], pid, "{now}");
        assert_eq!(seen["last_finished_call"], 2);
        assert_eq!(seen["function"], "proc.add");
        assert!(seen["since_ms"].as_f64().unwrap() >= 0.0);
        assert_eq!(seen["waits_for"], json!([]));
        assert!(seen["last_failure"].is_null() && seen["cause"].is_null());
        // This machine's workers' rings are read; another node's are on its machine.
        let calls = seen["last_events"].as_array().map(|events| {
            events
                .iter()
                .filter(|e| e["cat"] == "call" && e["name"] == "proc.add")
                .count()
        });
        assert_eq!(calls, (w < 2).then_some(2), "{now}");
    }
}

#[test]
fn a_held_worker_of_node_1_runs_its_call_while_the_other_is_idle() {
    let s = session(SessionOptions::default());
    let pid = pids(&s)[3];
    let gate = Gate::new();
    let held = gate.hold(&s, 3);
    let number = calls_sent(&s);
    let now = status_when(&s, |now| worker(now, 3)["state"] == "running");
    let running = worker(&now, 3);
    assert_eq!(running["call"], number, "{now}");
    assert_eq!(running["function"], "proc.wait_for");
    assert_eq!(
        (&running["node"], &running["pid"]),
        (&json!(1), &json!(pid))
    );
    assert_eq!(running["last_finished_call"], number - 1);
    assert_eq!(worker(&now, 2)["state"], "idle", "{now}");
    assert_eq!(worker(&now, 2)["call"], number - 1);
    gate.release_one();
    s.sync_all().unwrap();
    let now = status_when(&s, |now| worker(now, 3)["state"] == "idle");
    assert_eq!(worker(&now, 3)["last_finished_call"], number, "{now}");
    drop(held);
}

#[test]
fn a_sync_that_times_out_names_the_held_worker_by_its_node_and_pid() {
    let options = SessionOptions {
        timeout: Some(Duration::from_millis(500)),
        ..SessionOptions::default()
    };
    let s = session(options);
    let pid = pids(&s)[3];
    let gate = Gate::new();
    let held = gate.hold(&s, 3);
    let number = calls_sent(&s);
    status_when(&s, |now| worker(now, 3)["state"] == "running");
    let err = s.sync_all().unwrap_err();
    assert_error(
        &err,
        ErrorKind::Timeout,
        &format!(
            "sync of all timed out after 500 ms: worker 3 (node 1, pid {pid}) has run call \
             {number} (`proc.wait_for`) for "
        ),
    );
    assert_error(&err, ErrorKind::Timeout, "; workers 0, 1 and 2 are idle");
    gate.release_one();
    drop(held);
    let until = Instant::now() + Duration::from_secs(10);
    while s.sync_all().is_err() {
        assert!(Instant::now() < until, "the worker never came back");
    }
}

#[test]
fn a_stopped_node_shows_its_workers_lost_and_they_report_again_once_it_goes_on() {
    // The session outlives the node's silence: only the status calls it lost.
    let options = SessionOptions {
        heartbeat: Some(Duration::from_secs(30)),
        timeout: Some(Duration::from_secs(2)),
        ..SessionOptions::default()
    };
    let s = session(options);
    let pids = pids(&s);
    let node = node_of(pids[2]);
    assert_eq!(node_of(pids[3]), node);
    let add = s.get_global_func("proc.add").unwrap();
    s.sync_all().unwrap();
    status_when(&s, |now| all_at(now, 0..4, "idle", 1));

    let stopped = stop(node);
    let stopped_at = Instant::now();
    let now = status_when(&s, |now| (2..4).all(|w| worker(now, w)["state"] == "lost"));
    let took = stopped_at.elapsed();
    assert!(took < LOST_WITHIN, "lost after {took:?}");
    for (w, pid) in pids.iter().enumerate().skip(2) {
        let lost = worker(&now, w);
        let cause = lost["cause"].as_str().unwrap();
        assert!(
            cause.starts_with("nothing heard from node 1 for ")
                && cause.contains(" (its last report of this worker is ")
                && cause.ends_with(" old)"),
            "{cause}"
        );
        // Its last report stays, with its pid.
        assert_eq!(
            (&lost["call"], &lost["function"]),
            (&json!(1), &json!("proc.pid"))
        );
        assert_eq!(lost["pid"], *pid);
    }
    assert!(all_at(&now, 0..2, "idle", 1), "node 0 is heard: {now}");
    // A wait for the stopped node says so too.
    let _sum = call(&s, &add, &[Any::Int(1), Any::Int(2)]);
    let err = s.sync_all().unwrap_err();
    let lost = format!(
        "worker 2 (node 1, pid {}) is lost: nothing heard from node 1",
        pids[2]
    );
    assert_error(&err, ErrorKind::Timeout, &lost);

    stopped.resume();
    s.sync_all().unwrap();
    let now = status_when(&s, |now| all_at(now, 0..4, "idle", 2));
    assert!(worker(&now, 2)["cause"].is_null(), "{now}");
    assert_eq!(worker(&now, 3)["function"], "proc.add");
}

#[test]
fn a_killed_node_shows_its_workers_lost_with_the_cause() {
    let s = session(SessionOptions::default());
    let pids = pids(&s);
    let node = node_of(pids[2]);
    s.sync_all().unwrap();
    status_when(&s, |now| all_at(now, 0..4, "idle", 1));
    // SAFETY: the node program this test started.
    assert_eq!(unsafe { libc::kill(node, libc::SIGKILL) }, 0);
    let now = status_when(&s, |now| (2..4).all(|w| worker(now, w)["state"] == "lost"));
    for w in 2..4 {
        let cause = worker(&now, w)["cause"].as_str().unwrap();
        assert!(cause.contains("node 1"), "{now}");
    }
    // The workers of node 0 still say what they do.
    assert!(all_at(&now, 0..2, "idle", 1), "{now}");
}

#[test]
fn a_worker_of_node_1_in_a_collective_names_the_peer_it_waits_for() {
    if gloo::plugin().is_none() {
        return; // the plugin says why
    }
    let s = session(SessionOptions::default());
    s.init_ccl("cpu", &[]).unwrap();
    let empty = s.get_global_func("runtime.disco.empty").unwrap();
    let shape: Any = Shape::new(&[4]).into();
    let send = call(&s, &empty, &[shape.clone(), Any::DataType(F32)]);
    let recv = call(&s, &empty, &[shape, Any::DataType(F32)]);
    // Looked up first: a lookup asks every worker, the held one too.
    let allreduce = s.get_global_func("runtime.disco.allreduce").unwrap();
    let gate = Gate::new();
    let held = gate.hold(&s, 3);
    let args: [Any; 4] = [
        send.clone().into(),
        Shape::new(&[0]).into(),
        Any::Bool(false),
        recv.clone().into(),
    ];
    let reduced = call(&s, &allreduce, &args);
    let number = calls_sent(&s);
    // Worker 2 meets its node's other worker first, and waits for it.
    let now = status_when(&s, |now| worker(now, 2)["waits_for"] == json!([3]));
    let waiting = worker(&now, 2);
    assert_eq!(
        (&waiting["state"], &waiting["collective"], &waiting["call"]),
        (&json!("collective"), &json!("allreduce"), &json!(number)),
        "{now}"
    );
    assert_eq!(waiting["node"], 1);
    assert_eq!(worker(&now, 3)["function"], "proc.wait_for", "{now}");
    gate.release_one();
    s.sync_all().unwrap();
    status_when(&s, |now| all_at(now, 0..4, "idle", number));
    drop((held, reduced, send, recv));
}
