//! Writing a trace as the Chrome Trace Event Format, which ui.perfetto.dev and chrome://tracing
//! open: a process per node, a track per worker, per worker's stream and one for the
//! controller, complete events ("X") for calls, syncs, collectives, module loads, stream
//! instructions and the controller's waits, and flows
//! ("s" to "f") from the controller's send of a call to each worker's run of it.
//!
//! The one idea: every time is the controller's machine's monotonic clock, which the controller
//! and its worker processes share (another node's events were moved onto it when they came),
//! so an event's place on the timeline is its start less the trace's.

use std::collections::HashMap;
use std::io::Write;

use serde_json::{Value, json};

use super::collect::{Collected, Doing};
use crate::object::{Error, Result};
use crate::worker::events::Kind;

/// What a trace's file says of its session.
pub(crate) struct About {
    /// The session's kind: `threaded`, `process` or `socket`.
    pub kind: &'static str,
    /// Each worker's node.
    pub nodes: Vec<usize>,
}

/// The controller's track.
const CONTROLLER: usize = 0;

/// The track of worker `w`.
fn track(worker: usize) -> usize {
    worker + 1
}

/// The track of stream `stream` of worker `w`: apart from the workers' own, as a worker's
/// streams run beside it.
fn stream_track(worker: usize, stream: u32) -> usize {
    (1 << 20) + worker * 64 + stream as usize
}

/// Where a track goes among the others: each worker's streams right after it.
fn sort_index(worker: usize, stream: Option<u32>) -> usize {
    (worker + 1) * 64 + stream.map_or(0, |s| s as usize)
}

/// Microseconds from `origin_ns` to `ns`.
fn micros(ns: u64, origin_ns: u64) -> f64 {
    ns.saturating_sub(origin_ns) as f64 / 1e3
}

/// A flow's id, one per call and worker (a call to every worker has a flow to each).
fn flow_id(call: u64, worker: usize) -> u64 {
    call.wrapping_mul(1 << 16).wrapping_add(worker as u64)
}

/// Gives each event of `collected` to `emit`, its times from `origin_ns`: one at a time, so a
/// trace is written without a second copy of it in memory.
fn write_events(
    about: &About,
    origin_ns: u64,
    collected: &Collected,
    emit: &mut impl FnMut(Value) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut nodes: Vec<usize> = about.nodes.clone();
    nodes.push(0);
    nodes.sort_unstable();
    nodes.dedup();
    for node in nodes {
        let name = if node == 0 {
            "node 0 (the controller's machine)".to_string()
        } else {
            format!("node {node}")
        };
        emit(
            json!({"ph": "M", "name": "process_name", "pid": node, "tid": 0,
                           "args": {"name": name}}),
        )?;
    }
    emit(
        json!({"ph": "M", "name": "thread_name", "pid": 0, "tid": CONTROLLER,
                       "args": {"name": "controller"}}),
    )?;
    for (worker, &node) in about.nodes.iter().enumerate() {
        emit(
            json!({"ph": "M", "name": "thread_name", "pid": node, "tid": track(worker),
                           "args": {"name": format!("worker {worker}")}}),
        )?;
        emit(json!({"ph": "M", "name": "thread_sort_index", "pid": node,
                           "tid": track(worker), "args": {"sort_index": sort_index(worker, None)}}))?;
    }
    // A track for each stream a worker's events show.
    let mut streams: Vec<(usize, u32)> = collected
        .workers
        .iter()
        .enumerate()
        .flat_map(|(worker, recorded)| {
            recorded
                .iter()
                .filter(|event| event.kind == Kind::Stream)
                .map(move |event| (worker, event.detail))
        })
        .collect();
    streams.sort_unstable();
    streams.dedup();
    for (worker, stream) in streams {
        let (node, tid) = (
            about.nodes.get(worker).copied().unwrap_or(0),
            stream_track(worker, stream),
        );
        emit(
            json!({"ph": "M", "name": "thread_name", "pid": node, "tid": tid,
                           "args": {"name": format!("worker {worker} stream {stream}")}}),
        )?;
        emit(
            json!({"ph": "M", "name": "thread_sort_index", "pid": node, "tid": tid,
                           "args": {"sort_index": sort_index(worker, Some(stream))}}),
        )?;
    }
    // Where each worker ran each call: the flows end there.
    let mut runs: HashMap<(u64, usize), u64> = HashMap::new();
    for (worker, recorded) in collected.workers.iter().enumerate() {
        let node = about.nodes.get(worker).copied().unwrap_or(0);
        for event in recorded {
            if event.kind == Kind::Call {
                runs.insert((event.call, worker), event.start_ns);
            }
            let mut args = json!({"worker": worker, "call": event.call});
            match event.kind {
                Kind::Collective => {
                    args["bytes"] = json!(event.bytes);
                    if event.wait_ns != 0 {
                        args["wait_us"] = json!(event.wait_ns as f64 / 1e3);
                    }
                }
                Kind::Call => args["to_every_worker"] = json!(event.detail == 1),
                Kind::Stream => {
                    args["stream"] = json!(event.detail);
                    if event.bytes != 0 {
                        args["bytes"] = json!(event.bytes);
                    }
                }
                Kind::Sync | Kind::Module => {}
            }
            let tid = match event.kind {
                Kind::Stream => stream_track(worker, event.detail),
                _ => track(worker),
            };
            let name = match (event.kind, event.name.is_empty()) {
                (Kind::Call, true) => "an unnamed function",
                _ => &event.name,
            };
            emit(json!({
                "ph": "X", "name": name, "cat": event.kind.category(),
                "ts": micros(event.start_ns, origin_ns), "dur": event.dur_ns as f64 / 1e3,
                "pid": node, "tid": tid, "args": args,
            }))?;
        }
    }
    for noted in &collected.controller {
        let ts = micros(noted.start_ns, origin_ns);
        match &noted.doing {
            Doing::Sent { call, worker } => {
                let to = worker.map_or("every worker".to_string(), |w| format!("worker {w}"));
                emit(json!({
                    "ph": "X", "name": format!("send call {call}"), "cat": "call", "ts": ts,
                    "dur": noted.dur_ns as f64 / 1e3, "pid": 0, "tid": CONTROLLER,
                    "args": {"call": call, "to": to},
                }))?;
                let targets: Vec<usize> = match worker {
                    Some(w) => vec![*w],
                    None => (0..about.nodes.len()).collect(),
                };
                for w in targets {
                    let Some(&ran) = runs.get(&(*call, w)) else {
                        continue;
                    };
                    let id = flow_id(*call, w);
                    let node = about.nodes[w];
                    emit(json!({"ph": "s", "name": "call", "cat": "call", "id": id,
                                       "ts": ts, "pid": 0, "tid": CONTROLLER}))?;
                    emit(json!({"ph": "f", "bp": "e", "name": "call", "cat": "call",
                                       "id": id, "ts": micros(ran, origin_ns), "pid": node,
                                       "tid": track(w)}))?;
                }
            }
            Doing::Waited { what, bytes } => {
                let category = if what.starts_with("copy") {
                    "copy"
                } else {
                    "sync"
                };
                let mut args = json!({});
                if *bytes != 0 {
                    args["bytes"] = json!(bytes);
                }
                emit(json!({
                    "ph": "X", "name": &**what, "cat": category, "ts": ts,
                    "dur": noted.dur_ns as f64 / 1e3, "pid": 0, "tid": CONTROLLER, "args": args,
                }))?;
            }
        }
    }
    Ok(())
}

/// The file's `otherData`: the session, the events lost and dropped, the clock and the nodes.
fn other_data(about: &About, collected: &Collected) -> Value {
    let nodes: Vec<Value> = collected
        .nodes
        .iter()
        .map(|part| {
            let mut node = json!({"node": part.node});
            if let Some(clock) = part.clock {
                node["clock_offset_us"] = json!(clock.offset_ns as f64 / 1e3);
                node["clock_error_us"] = json!(clock.bound_ns as f64 / 1e3);
            }
            if let Some(why) = &part.missing {
                node["events_missing"] = json!(why);
            }
            if !part.last_words.is_empty() {
                node["last_events_of_dead_workers"] = json!(part.last_words);
            }
            node
        })
        .collect();
    json!({
        "session": about.kind,
        "workers": about.nodes.len(),
        "events_lost": collected.lost,
        "events_dropped": collected.dropped,
        "clock": "CLOCK_MONOTONIC of the controller's machine, from the trace's start; \
                  another node's events are moved onto it by the node's clock offset \
                  (its clock less the controller's), within its error",
        "nodes": nodes,
    })
}

/// Writes the trace of `collected` to `path`.
pub(crate) fn write(
    path: &str,
    about: &About,
    origin_ns: u64,
    collected: &Collected,
) -> Result<()> {
    let cannot =
        |e: std::io::Error| Error::value(format!("cannot write a trace to the path `{path}`: {e}"));
    let file = std::fs::File::create(path).map_err(cannot)?;
    let mut out = std::io::BufWriter::new(file);
    let written = (|| {
        out.write_all(b"{\"traceEvents\":[")?;
        let mut first = true;
        write_events(about, origin_ns, collected, &mut |event| {
            if !std::mem::take(&mut first) {
                out.write_all(b",")?;
            }
            serde_json::to_writer(&mut out, &event).map_err(std::io::Error::from)
        })?;
        out.write_all(b"],\"displayTimeUnit\":\"ms\",\"otherData\":")?;
        serde_json::to_writer(&mut out, &other_data(about, collected))?;
        out.write_all(b"}")?;
        out.flush()
    })();
    written.map_err(cannot)
}
