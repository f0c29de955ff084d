//! A session's timeline and its flight recorder, on worker threads, worker processes and two
//! nodes (whose events cross at the trace's stop, moved onto the controller's clock): a trace
//! of calls, a collective and syncs is a Chrome Trace Event Format file whose events have the
//! format's fields, name their worker and call, nest on their tracks, overlap where workers
//! meet in a collective and are joined to the controller's sends by flows; the flight recorder
//! writes the workers' last events with no trace running, a killed worker's included; and bad
//! uses fail with errors that say what to do.

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
#[macro_use]
#[path = "support/session_kinds.rs"]
mod session_kinds;
#[path = "support/worker_processes.rs"]
mod worker_processes;
#[path = "support/worker_programs.rs"]
mod worker_programs;

use std::path::PathBuf;
use std::sync::Arc;

use discovm::object::Shape;
use discovm::session::{CopyDirection, DRef, Session};
use discovm::{Any, ErrorKind};
use errors::assert_error;
use serde_json::Value;
use session_calls::{F32, call, host_tensor};

/// A fresh path for a trace file of this test binary.
fn trace_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("trace-{}-{name}.json", std::process::id()))
}

fn read(path: &PathBuf) -> Value {
    let text = std::fs::read_to_string(path).expect("the trace was written");
    serde_json::from_str(&text).expect("the trace is JSON")
}

/// The trace's events of phase `ph`.
fn phase<'a>(trace: &'a Value, ph: &str) -> Vec<&'a Value> {
    trace["traceEvents"]
        .as_array()
        .expect("traceEvents is an array")
        .iter()
        .filter(|event| event["ph"] == ph)
        .collect()
}

/// Checks that on each track (pid, tid) any two complete events are disjoint or one holds the
/// other, as the format's viewers need.
fn assert_events_nest(complete: &[&Value]) {
    let mut tracks: std::collections::BTreeMap<(i64, i64), Vec<(f64, f64)>> = Default::default();
    for event in complete {
        let ts = event["ts"].as_f64().unwrap();
        let track = (
            event["pid"].as_i64().unwrap(),
            event["tid"].as_i64().unwrap(),
        );
        let span = (ts, ts + event["dur"].as_f64().unwrap());
        tracks.entry(track).or_default().push(span);
    }
    for (track, mut spans) in tracks {
        // Longer first among those that start together: the holder before what it holds.
        spans.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        let mut open: Vec<(f64, f64)> = Vec::new();
        for span in spans {
            while open.last().is_some_and(|last| last.1 <= span.0 + 1e-3) {
                open.pop();
            }
            if let Some(holder) = open.last() {
                assert!(
                    span.1 <= holder.1 + 1e-3,
                    "on track {track:?}, {span:?} overlaps {holder:?}"
                );
            }
            open.push(span);
        }
    }
}

/// A float32 tensor of 4 elements on every worker, ones on worker 0.
fn tensor(s: &Arc<Session>) -> DRef {
    let empty = s.get_global_func("runtime.disco.empty").unwrap();
    let tensor = call(s, &empty, &[Shape::new(&[4]).into(), Any::DataType(F32)]);
    let (mut data, mut shape) = (vec![1.0f32; 4], [4]);
    let host = host_tensor(&mut data, &mut shape);
    s.copy_worker0(host, &tensor, "dref", CopyDirection::ToWorker)
        .unwrap();
    tensor
}

fn a_trace_shows_calls_collectives_and_syncs_on_one_timeline(kind: session_kinds::Kind) {
    let s = session_kinds::session(kind, 2);
    s.init_ccl("cpu", &[]).unwrap();
    let (send, recv) = (tensor(&s), tensor(&s));
    let add = s.get_global_func("proc.add").unwrap();
    let but = s.get_global_func("proc.allreduce_but").unwrap();
    s.sync_all().unwrap();
    s.trace_start().unwrap();
    for i in 0..3 {
        let _sum = call(&s, &add, &[Any::Int(i), Any::Int(1)]);
    }
    let reduce = [
        Any::Int(-1),
        Any::Bool(false),
        send.clone().into(),
        recv.into(),
    ];
    let _reduced = call(&s, &but, &reduce);
    s.sync_all().unwrap();
    let (mut back, mut shape) = (vec![0.0f32; 4], [4]);
    let host = host_tensor(&mut back, &mut shape);
    s.copy_worker0(host, &send, "dref", CopyDirection::FromWorker)
        .unwrap();
    let path = trace_path(&format!("{kind:?}"));
    s.trace_stop(path.to_str().unwrap()).unwrap();
    let trace = read(&path);

    // Every event has the format's fields; complete events their duration and category.
    for event in trace["traceEvents"].as_array().unwrap() {
        for field in ["ph", "name", "pid", "tid"] {
            assert!(!event[field].is_null(), "{field} missing in {event}");
        }
    }
    let complete = phase(&trace, "X");
    for event in &complete {
        assert!(event["ts"].as_f64().unwrap() >= 0.0, "{event}");
        assert!(event["dur"].as_f64().unwrap() >= 0.0, "{event}");
        let category = event["cat"].as_str().unwrap();
        assert!(["call", "sync", "copy", "collective", "module", "stream"].contains(&category));
    }
    // A worker thread copies through its own stream, whose instructions have a track of their
    // own (worker processes copy through the session's shared memory instead).
    if kind == session_kinds::Kind::Threads {
        let copies: Vec<&Value> = complete
            .iter()
            .copied()
            .filter(|e| e["cat"] == "stream")
            .collect();
        assert_eq!(copies.len(), 1, "{copies:?}");
        let copy = copies[0];
        assert_eq!(copy["name"], "copy to host");
        assert_eq!(
            (&copy["args"]["worker"], &copy["args"]["bytes"]),
            (&0.into(), &16.into())
        );
        let track = phase(&trace, "M")
            .into_iter()
            .find(|m| m["name"] == "thread_name" && m["tid"] == copy["tid"])
            .expect("the stream's track is named");
        assert_eq!(track["args"]["name"], "worker 0 stream 1");
    }
    assert_events_nest(&complete);
    // The tracks are named: the controller, and each worker.
    let names: Vec<&str> = phase(&trace, "M")
        .iter()
        .filter(|m| m["name"] == "thread_name")
        .map(|m| m["args"]["name"].as_str().unwrap())
        .collect();
    for track in ["controller", "worker 0", "worker 1"] {
        assert!(names.contains(&track), "no track {track} in {names:?}");
    }
    // Each worker ran the four calls, each event naming its worker and call.
    let runs = |worker: i64, name: &str| -> Vec<&Value> {
        complete
            .iter()
            .copied()
            .filter(|e| e["args"]["worker"] == worker && e["name"] == name)
            .collect()
    };
    // How far another node's clock may be from the controller's (0 on one machine).
    let error = trace["otherData"]["nodes"][0]["clock_error_us"]
        .as_f64()
        .unwrap_or(0.0);
    for worker in 0..2 {
        let adds = runs(worker, "proc.add");
        assert_eq!(adds.len(), 3, "worker {worker}: {adds:?}");
        assert!(adds.iter().all(|e| e["args"]["call"].as_u64().unwrap() > 0));
        let calls = runs(worker, "proc.allreduce_but");
        let reduces = runs(worker, "allreduce");
        assert_eq!((calls.len(), reduces.len()), (1, 1), "worker {worker}");
        // The collective nests in its call.
        let (outer, inner) = (calls[0], reduces[0]);
        let end = |e: &Value| e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap();
        assert!(
            inner["ts"].as_f64() >= outer["ts"].as_f64(),
            "{outer} {inner}"
        );
        assert!(end(inner) <= end(outer) + 1e-3, "{outer} {inner}");
        assert_eq!(inner["args"]["call"], outer["args"]["call"]);
        assert_eq!(inner["args"]["bytes"], 16);
        assert_eq!(inner["args"]["team"], "every worker");
        // The time it waited for its peer is apart from the rest: measured in shared memory,
        // told from the arrivals between nodes (whose clocks agree within their error).
        let wait = inner["args"]["wait_us"].as_f64().expect("wait_us");
        assert!(
            wait <= inner["dur"].as_f64().unwrap() + error + 1e-3,
            "{inner}"
        );
    }
    // Both workers' allreduce events overlap: they met (between nodes, within the clock error).
    let (first, second) = (runs(0, "allreduce")[0], runs(1, "allreduce")[0]);
    let span = |e: &Value| {
        let ts = e["ts"].as_f64().unwrap();
        (ts, ts + e["dur"].as_f64().unwrap())
    };
    let ((a0, a1), (b0, b1)) = (span(first), span(second));
    assert!(
        a0 <= b1 + error && b0 <= a1 + error,
        "no overlap: {first} {second}"
    );
    // Flows join the controller's sends to each worker's runs: one per call and worker, each
    // run after its send (on another node, within that node's clock error).
    let starts = phase(&trace, "s");
    let finishes = phase(&trace, "f");
    assert_eq!(starts.len(), 8, "{starts:?}");
    for start in &starts {
        assert_eq!(start["tid"], 0, "a flow starts on the controller's track");
        let id = &start["id"];
        let finish = finishes
            .iter()
            .find(|f| &f["id"] == id)
            .expect("its finish");
        let slack = if finish["pid"] == 0 { 0.0 } else { error };
        assert!(
            finish["ts"].as_f64().unwrap() + slack >= start["ts"].as_f64().unwrap(),
            "{start} {finish}"
        );
    }
    // The controller's sends and syncs are on its track.
    let controller: Vec<&str> = complete
        .iter()
        .filter(|e| e["tid"] == 0 && e["pid"] == 0)
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(controller.contains(&"sync all"), "{controller:?}");
    assert!(
        controller.iter().any(|n| n.starts_with("copy")),
        "{controller:?}"
    );
    assert_eq!(
        controller
            .iter()
            .filter(|n| n.starts_with("send call"))
            .count(),
        4
    );
    assert_eq!(trace["otherData"]["workers"], 2);
    assert_eq!(trace["otherData"]["events_lost"], 0);
    check_nodes(&trace, kind);
    let _ = std::fs::remove_file(path);
}
each_kind_and_nodes!(a_trace_shows_calls_collectives_and_syncs_on_one_timeline);

/// A trace of two nodes names node 1's process, and gives its clock's offset and error bound
/// (small on one machine); a trace of one node has no other nodes.
fn check_nodes(trace: &Value, kind: session_kinds::Kind) {
    let nodes = trace["otherData"]["nodes"]
        .as_array()
        .expect("a list of nodes");
    if kind != session_kinds::Kind::Nodes {
        assert!(nodes.is_empty(), "{nodes:?}");
        return;
    }
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    let node = &nodes[0];
    assert_eq!(node["node"], 1);
    assert!(node["events_missing"].is_null(), "{node}");
    let (offset, error) = (
        node["clock_offset_us"].as_f64().unwrap(),
        node["clock_error_us"].as_f64().unwrap(),
    );
    assert!(error < 100_000.0, "a loopback round trip: {node}");
    assert!(offset.abs() <= error + 1.0, "one machine's clock: {node}");
    let process = phase(trace, "M")
        .into_iter()
        .any(|m| m["name"] == "process_name" && m["pid"] == 1);
    assert!(process, "node 1 has its process");
    let on_node_1 = phase(trace, "X")
        .into_iter()
        .filter(|e| e["pid"] == 1)
        .all(|e| e["args"]["worker"] == 1);
    assert!(on_node_1, "only worker 1 runs on node 1");
}

fn the_flight_recorder_keeps_the_last_events_with_no_trace(kind: session_kinds::Kind) {
    let s = session_kinds::session(kind, 2);
    let add = s.get_global_func("proc.add").unwrap();
    for i in 0..1100 {
        let _sum = call(&s, &add, &[Any::Int(i), Any::Int(1)]);
    }
    s.sync_all().unwrap();
    let path = trace_path(&format!("dump-{kind:?}"));
    s.trace_dump(path.to_str().unwrap()).unwrap();
    let trace = read(&path);
    let complete = phase(&trace, "X");
    for worker in 0..2 {
        let calls = complete
            .iter()
            .filter(|e| e["args"]["worker"] == worker && e["cat"] == "call")
            .count();
        assert_eq!(
            calls, 1024,
            "worker {worker}: the last 1024 of its 1100 calls"
        );
    }
    check_nodes(&trace, kind);
    let _ = std::fs::remove_file(path);
}
each_kind_and_nodes!(the_flight_recorder_keeps_the_last_events_with_no_trace);

/// A stream that a worker's function made, which a thread of the library runs, is on a track of
/// its own under its worker, with what it ran and the call it ran in.
fn a_stream_a_function_made_has_a_track_of_its_own(kind: session_kinds::Kind) {
    let s = session_kinds::session(kind, 2);
    let copy = s.get_global_func("proc.stream_copy").unwrap();
    s.sync_all().unwrap();
    s.trace_start().unwrap();
    let _copied = call(&s, &copy, &[Any::Int(4096)]);
    s.sync_all().unwrap();
    let path = trace_path(&format!("streams_{kind:?}"));
    s.trace_stop(path.to_str().unwrap()).unwrap();
    let trace = read(&path);
    let complete = phase(&trace, "X");
    for worker in 0..2 {
        let copies: Vec<&Value> = complete
            .iter()
            .copied()
            .filter(|e| e["cat"] == "stream" && e["args"]["worker"] == worker)
            .collect();
        assert_eq!(copies.len(), 1, "worker {worker}: {copies:?}");
        let copy = copies[0];
        assert_eq!(copy["name"], "copy");
        assert_eq!(copy["args"]["bytes"], 4096);
        assert_eq!(copy["args"]["stream"], 2, "the first stream it made");
        let run = complete
            .iter()
            .find(|e| e["name"] == "proc.stream_copy" && e["args"]["worker"] == worker)
            .expect("the call's run");
        assert_eq!(copy["args"]["call"], run["args"]["call"]);
        let track = phase(&trace, "M")
            .into_iter()
            .find(|m| m["name"] == "thread_name" && m["tid"] == copy["tid"])
            .expect("the stream's track is named");
        assert_eq!(track["args"]["name"], format!("worker {worker} stream 2"));
    }
    assert_events_nest(&complete);
}

each_kind!(a_stream_a_function_made_has_a_track_of_its_own);

#[test]
fn a_killed_worker_process_leaves_its_events_to_the_flight_recorder() {
    let s = session_kinds::session(session_kinds::Kind::Processes, 2);
    let add = s.get_global_func("proc.add").unwrap();
    let _sum = call(&s, &add, &[Any::Int(1), Any::Int(2)]);
    s.sync_all().unwrap();
    let pid = worker_processes::pids(&s)[1];
    // SAFETY: kill only sends a signal to the test's own worker process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    assert!(worker_processes::gone_within(
        pid,
        std::time::Duration::from_secs(5)
    ));
    let path = trace_path("killed");
    // The session is broken by the death; the recorder is read from the arena all the same.
    let _ = s.sync_all();
    let dumped = s.trace_dump(path.to_str().unwrap());
    match dumped {
        Ok(()) => {
            let trace = read(&path);
            let worker_1 = phase(&trace, "X")
                .into_iter()
                .filter(|e| e["args"]["worker"] == 1 && e["name"] == "proc.add")
                .count();
            assert_eq!(worker_1, 1, "the dead worker's call is in the dump");
            let _ = std::fs::remove_file(path);
        }
        Err(error) => panic!("the dump of a session with a dead worker failed: {error:?}"),
    }
}

/// Whether a sync fails within 5 s (a death on another node is heard of a moment after it).
fn broken_within(s: &Arc<Session>) -> bool {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::time::Instant::now() < end {
        if s.sync_all().is_err() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    false
}

/// Worker 1 is killed mid-trace: the trace still stops, and holds that worker's calls and its
/// streams' instructions up to its death (from the session's arena on this machine; on
/// another, sent by its node as it died).
fn a_worker_killed_mid_trace_leaves_its_events_up_to_its_death(kind: session_kinds::Kind) {
    let s = session_kinds::session(kind, 2);
    let add = s.get_global_func("proc.add").unwrap();
    let copy = s.get_global_func("proc.stream_copy").unwrap();
    let pid = worker_processes::pids(&s)[1];
    s.trace_start().unwrap();
    let _sum = call(&s, &add, &[Any::Int(1), Any::Int(2)]);
    let _copied = call(&s, &copy, &[Any::Int(64)]);
    s.sync_all().unwrap();
    // SAFETY: kill only sends a signal to the test's own worker process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    assert!(worker_processes::gone_within(
        pid,
        std::time::Duration::from_secs(5)
    ));
    assert!(broken_within(&s), "the death breaks the session");
    let path = trace_path(&format!("killed-mid-trace-{kind:?}"));
    s.trace_stop(path.to_str().unwrap()).unwrap();
    let trace = read(&path);
    let runs = phase(&trace, "X")
        .into_iter()
        .filter(|e| e["args"]["worker"] == 1 && e["name"] == "proc.add")
        .count();
    assert_eq!(
        runs, 1,
        "the dead worker's call is in the trace: {}",
        trace["otherData"]
    );
    let copies = phase(&trace, "X")
        .into_iter()
        .filter(|e| e["args"]["worker"] == 1 && e["cat"] == "stream")
        .count();
    assert_eq!(copies, 1, "its stream's copy is in the trace");
    if kind == session_kinds::Kind::Nodes {
        // The death ends the node's connection: the node sent that worker's last events first.
        let node = &trace["otherData"]["nodes"][0];
        assert!(node["events_missing"].is_string(), "{node}");
        assert_eq!(
            node["last_events_of_dead_workers"],
            serde_json::json!([1]),
            "{node}"
        );
    }
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_worker_process_killed_mid_trace_leaves_its_events_up_to_its_death() {
    a_worker_killed_mid_trace_leaves_its_events_up_to_its_death(session_kinds::Kind::Processes);
}

#[test]
fn a_node_s_worker_killed_mid_trace_leaves_its_events_up_to_its_death() {
    a_worker_killed_mid_trace_leaves_its_events_up_to_its_death(session_kinds::Kind::Nodes);
}

/// A node lost mid-trace costs its events, never the trace: the file is written, and says
/// why node 1's events are missing.
#[test]
fn a_node_lost_mid_trace_is_named_in_the_trace_without_its_events() {
    let s = session_kinds::session(session_kinds::Kind::Nodes, 2);
    let add = s.get_global_func("proc.add").unwrap();
    let pid = worker_processes::pids(&s)[1];
    s.trace_start().unwrap();
    let _sum = call(&s, &add, &[Any::Int(1), Any::Int(2)]);
    s.sync_all().unwrap();
    // The node is the worker's parent: killing it closes its connection.
    let node = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(") ")?
                .1
                .split(' ')
                .nth(1)?
                .parse::<i32>()
                .ok()
        })
        .expect("the worker's parent");
    // SAFETY: kill only sends a signal to the node program this test started.
    assert_eq!(unsafe { libc::kill(node, libc::SIGKILL) }, 0);
    assert!(broken_within(&s), "the loss breaks the session");
    let path = trace_path("node-lost");
    s.trace_stop(path.to_str().unwrap()).unwrap();
    let trace = read(&path);
    let nodes = trace["otherData"]["nodes"].as_array().unwrap();
    let missing = nodes[0]["events_missing"]
        .as_str()
        .expect("why they are missing");
    assert!(missing.contains("node 1"), "{missing}");
    let worker_0 = phase(&trace, "X")
        .into_iter()
        .any(|e| e["args"]["worker"] == 0 && e["name"] == "proc.add");
    assert!(worker_0, "the controller's machine's events are kept");
    let _ = std::fs::remove_file(path);
}

/// A call tried without waiting (what Python's calls on one worker thread do) is in the trace
/// as every call is: the controller's send, joined by a flow to the worker's run.
#[test]
fn a_call_tried_without_waiting_is_joined_to_its_run() {
    let s = session_kinds::session(session_kinds::Kind::Threads, 1);
    let add = s.get_global_func("proc.add").unwrap();
    let bound = s.bind(discovm::session::Target::All, add).unwrap();
    s.trace_start().unwrap();
    let sum = bound
        .try_call(&[Any::Int(1).view(), Any::Int(2).view()])
        .unwrap();
    assert!(sum.is_some(), "an empty queue takes the call at once");
    s.sync_all().unwrap();
    let path = trace_path("tried");
    s.trace_stop(path.to_str().unwrap()).unwrap();
    let trace = read(&path);
    let sends = phase(&trace, "X")
        .into_iter()
        .filter(|e| e["tid"] == 0 && e["name"].as_str().unwrap().starts_with("send call"))
        .count();
    assert_eq!(sends, 1);
    assert_eq!(phase(&trace, "s").len(), 1, "a flow from the send");
    assert_eq!(phase(&trace, "f").len(), 1, "to the run");
    let _ = std::fs::remove_file(path);
}

#[test]
fn bad_uses_of_traces_say_what_to_do() {
    let s = session_kinds::session(session_kinds::Kind::Threads, 1);
    let path = trace_path("bad");
    let path = path.to_str().unwrap();
    let stopped = s.trace_stop(path).unwrap_err();
    assert_error(
        &stopped,
        ErrorKind::Value,
        "no trace of this session runs: start one",
    );
    s.trace_start().unwrap();
    let twice = s.trace_start().unwrap_err();
    assert_error(
        &twice,
        ErrorKind::Value,
        "a trace of this session runs already",
    );
    let unwritable = "/nonexistent-folder/trace.json";
    let error = s.trace_stop(unwritable).unwrap_err();
    assert_error(
        &error,
        ErrorKind::Value,
        "cannot write a trace to the path `/nonexistent-folder/trace.json`",
    );
    let error = s.trace_dump(unwritable).unwrap_err();
    assert_error(&error, ErrorKind::Value, "cannot write a trace to");
    s.shutdown().unwrap();
    for error in [
        s.trace_start().unwrap_err(),
        s.trace_stop(path).unwrap_err(),
        s.trace_dump(path).unwrap_err(),
    ] {
        assert_eq!(error.kind, ErrorKind::SessionClosed, "{error:?}");
    }
}
