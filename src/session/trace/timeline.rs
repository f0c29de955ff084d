//! Writing a trace as the Chrome Trace Event Format, which ui.perfetto.dev and chrome://tracing
//! open: a process per node, a track per worker, per worker's stream and GPU and one for the
//! controller, complete events ("X") for calls, syncs, collectives (as queued, and as run on a
//! GPU), module loads, stream instructions and the controller's waits, and flows
//! ("s" to "f") from the controller's send of a call to each worker's run of it.
//!
//! The one idea: every time is the controller's machine's monotonic clock, which the controller
//! and its worker processes share (another node's events were moved onto it when they came),
//! so an event's place on the timeline is its start less the trace's.

use std::collections::HashMap;
use std::io::{self, Write};

use serde_json::{Value, json};

use super::collect::{Collected, Doing};
use super::meetings::Waits;
use crate::object::{Error, Result};
use crate::worker::events::{Event, Kind, Team};
use crate::worker::group_members;

/// What a trace's file says of its session.
pub(crate) struct About {
    /// The session's kind: `threaded`, `process` or `socket`.
    pub kind: &'static str,
    /// Each worker's node.
    pub nodes: Vec<usize>,
    /// Workers in each of its groups.
    pub per_group: usize,
    /// Whether the k-th collective of a call on every member of its team is one meeting of
    /// them all (collectives on the host), so that each one's wait for its peers can be told
    /// from their arrivals where it was not measured ([`Waits`]). Their runs on GPUs always
    /// are.
    pub meetings: bool,
}

/// What the trace calls a collective's team: its [`Team`], and the worker's group.
#[derive(Clone, Copy)]
struct TeamName(Option<Team>, usize);

impl std::fmt::Display for TeamName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(Team::Session) => f.write_str("every worker"),
            Some(Team::Group) => write!(f, "group {}", self.1),
            Some(Team::Pair) | None => f.write_str("two workers"),
        }
    }
}

impl About {
    /// What the trace calls the team of collective event `event` of worker `worker`.
    fn team_name(&self, worker: usize, event: &Event) -> TeamName {
        TeamName(Team::of(event.detail), worker / self.per_group.max(1))
    }

    /// The workers of that team (a transfer's other worker is not known here).
    fn team_members(&self, worker: usize, event: &Event) -> Option<std::ops::Range<usize>> {
        match Team::of(event.detail)? {
            Team::Session => Some(0..self.nodes.len()),
            Team::Group => Some(group_members(worker, self.per_group)),
            Team::Pair => None,
        }
    }
}

/// The controller's track.
const CONTROLLER: usize = 0;

/// The track of worker `w`.
fn track(worker: usize) -> usize {
    worker + 1
}

/// Streams of a worker that have a track each; later ones share the last. Track ids and sort
/// indices stay below 2^31 for up to 2^16 workers (viewers read them as 32-bit numbers).
const STREAMS: usize = 1 << 14;

/// The track of stream `stream` of worker `w`: apart from the workers' own, as a worker's
/// streams run beside it.
fn stream_track(worker: usize, stream: u32) -> usize {
    (1 << 30) + worker * STREAMS + (stream as usize).min(STREAMS - 1)
}

/// The track of worker `w`'s GPU: apart from the workers' and the streams'.
fn gpu_track(worker: usize) -> usize {
    (1 << 29) + worker
}

/// Where a track goes among the others: each worker's GPU (`Some(0)`) and streams right after
/// it.
fn sort_index(worker: usize, stream: Option<u32>) -> usize {
    (worker + 1) * (STREAMS + 1) + stream.map_or(0, |s| (s as usize).min(STREAMS - 1) + 1)
}

/// Microseconds from `origin_ns` to `ns`.
fn micros(ns: u64, origin_ns: u64) -> f64 {
    ns.saturating_sub(origin_ns) as f64 / 1e3
}

/// A flow's id, one per call and worker (a call to every worker has a flow to each).
fn flow_id(call: u64, worker: usize) -> u64 {
    call.wrapping_mul(1 << 16).wrapping_add(worker as u64)
}

/// One event of the file: the few metadata events as JSON values, the many complete events and
/// flows written field by field (a JSON value of each would cost a map and strings per event).
enum Record<'a> {
    Meta(Value),
    Complete(Complete<'a>),
    /// A flow's start (`start`) or its end, which binds to the enclosing slice.
    Flow {
        start: bool,
        id: u64,
        ts: f64,
        pid: usize,
        tid: usize,
    },
}

/// A complete event ("X").
struct Complete<'a> {
    name: &'a str,
    cat: &'static str,
    ts: f64,
    dur: f64,
    pid: usize,
    tid: usize,
    args: Args<'a>,
}

/// A complete event's arguments: those it has.
#[derive(Default)]
struct Args<'a> {
    worker: Option<usize>,
    call: Option<u64>,
    to: Option<&'a str>,
    to_every_worker: Option<bool>,
    team: Option<TeamName>,
    stream: Option<u32>,
    bytes: Option<u64>,
    wait_us: Option<f64>,
}

impl Record<'_> {
    fn write(&self, out: &mut dyn Write) -> io::Result<()> {
        match self {
            Record::Meta(value) => serde_json::to_writer(out, value).map_err(io::Error::from),
            Record::Complete(event) => {
                out.write_all(b"{\"ph\":\"X\",\"name\":")?;
                serde_json::to_writer(&mut *out, event.name)?;
                write!(
                    out,
                    ",\"cat\":\"{}\",\"ts\":{},\"dur\":{},\"pid\":{},\"tid\":{},\"args\":{{",
                    event.cat, event.ts, event.dur, event.pid, event.tid
                )?;
                event.args.write(out)?;
                out.write_all(b"}}")
            }
            Record::Flow {
                start,
                id,
                ts,
                pid,
                tid,
            } => {
                let (ph, bind) = if *start {
                    ("s", "")
                } else {
                    ("f", ",\"bp\":\"e\"")
                };
                write!(
                    out,
                    "{{\"ph\":\"{ph}\"{bind},\"name\":\"call\",\"cat\":\"call\",\"id\":{id},\
                     \"ts\":{ts},\"pid\":{pid},\"tid\":{tid}}}"
                )
            }
        }
    }
}

/// A text that needs no escaping (a team's name), as a JSON string.
struct Quoted<T>(T);

impl<T: std::fmt::Display> std::fmt::Display for Quoted<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "\"{}\"", self.0)
    }
}

impl Args<'_> {
    fn write(&self, out: &mut dyn Write) -> io::Result<()> {
        let mut first = true;
        let mut field = |out: &mut dyn Write, key: &str, value: Option<&dyn std::fmt::Display>| {
            let Some(value) = value else {
                return Ok(());
            };
            let comma = if std::mem::take(&mut first) { "" } else { "," };
            write!(out, "{comma}\"{key}\":{value}")
        };
        field(out, "worker", self.worker.as_ref().map(|v| v as _))?;
        field(out, "call", self.call.as_ref().map(|v| v as _))?;
        // A JSON string, escaped.
        let to = self.to.map(serde_json::Value::from);
        field(out, "to", to.as_ref().map(|v| v as _))?;
        field(
            out,
            "to_every_worker",
            self.to_every_worker.as_ref().map(|v| v as _),
        )?;
        let team = self.team.map(Quoted);
        field(out, "team", team.as_ref().map(|v| v as _))?;
        field(out, "stream", self.stream.as_ref().map(|v| v as _))?;
        field(out, "bytes", self.bytes.as_ref().map(|v| v as _))?;
        field(out, "wait_us", self.wait_us.as_ref().map(|v| v as _))
    }
}

/// Gives each event of `collected` to `emit`, its times from `origin_ns`: one at a time, so a
/// trace is written without a second copy of it in memory.
fn write_events(
    about: &About,
    origin_ns: u64,
    collected: &Collected,
    emit: &mut impl FnMut(Record<'_>) -> io::Result<()>,
) -> io::Result<()> {
    let mut meta = |value: Value| emit(Record::Meta(value));
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
        meta(
            json!({"ph": "M", "name": "process_name", "pid": node, "tid": 0,
                           "args": {"name": name}}),
        )?;
    }
    meta(
        json!({"ph": "M", "name": "thread_name", "pid": 0, "tid": CONTROLLER,
                       "args": {"name": "controller"}}),
    )?;
    // A worker's tracks: its own, its GPU's and its streams', named and placed after it.
    let mut worker_track = |worker: usize, tid: usize, name: String, stream: Option<u32>| {
        let node = about.nodes.get(worker).copied().unwrap_or(0);
        meta(
            json!({"ph": "M", "name": "thread_name", "pid": node, "tid": tid,
                    "args": {"name": name}}),
        )?;
        meta(
            json!({"ph": "M", "name": "thread_sort_index", "pid": node, "tid": tid,
                    "args": {"sort_index": sort_index(worker, stream)}}),
        )
    };
    for worker in 0..about.nodes.len() {
        worker_track(worker, track(worker), format!("worker {worker}"), None)?;
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
        let (tid, name) = (
            stream_track(worker, stream),
            format!("worker {worker} stream {stream}"),
        );
        worker_track(worker, tid, name, Some(stream))?;
    }
    // A track for each worker's GPU where it ran collectives.
    let gpus = (collected.workers.iter().enumerate())
        .filter(|(_, recorded)| recorded.iter().any(|event| event.kind == Kind::Gpu))
        .map(|(worker, _)| worker);
    for worker in gpus {
        worker_track(
            worker,
            gpu_track(worker),
            format!("worker {worker} GPU"),
            Some(0),
        )?;
    }
    // A collective's wait, where its meeting's arrivals tell it: the measured one (in shared
    // memory) or the arrivals', whichever is longer (a hierarchy measures its node's part).
    let waits = Waits::from_arrivals(collected, about.meetings, |worker, event| {
        about.team_members(worker, event)
    });
    // Where each worker ran each call: the flows end there.
    let mut runs: HashMap<(u64, usize), u64> = HashMap::new();
    for (worker, recorded) in collected.workers.iter().enumerate() {
        let node = about.nodes.get(worker).copied().unwrap_or(0);
        for (index, event) in recorded.iter().enumerate() {
            if event.kind == Kind::Call {
                runs.insert((event.call, worker), event.start_ns);
            }
            let measured = (event.wait_ns != 0).then_some(event.wait_ns);
            let wait_ns = (waits.of(worker, index))
                .map(|told| told.max(event.wait_ns))
                .or(measured);
            let args = match event.kind {
                Kind::Collective | Kind::Gpu => Args {
                    team: Some(about.team_name(worker, event)),
                    bytes: Some(event.bytes),
                    wait_us: wait_ns.map(|ns| ns as f64 / 1e3),
                    ..Args::default()
                },
                Kind::Call => Args {
                    to_every_worker: Some(event.detail == 1),
                    ..Args::default()
                },
                Kind::Stream => Args {
                    stream: Some(event.detail),
                    bytes: (event.bytes != 0).then_some(event.bytes),
                    ..Args::default()
                },
                Kind::Sync | Kind::Module => Args::default(),
            };
            let tid = match event.kind {
                Kind::Stream => stream_track(worker, event.detail),
                Kind::Gpu => gpu_track(worker),
                _ => track(worker),
            };
            let name = match (event.kind, event.name.is_empty()) {
                (Kind::Call, true) => "an unnamed function",
                _ => &event.name,
            };
            emit(Record::Complete(Complete {
                name,
                cat: event.kind.category(),
                ts: micros(event.start_ns, origin_ns),
                dur: event.dur_ns as f64 / 1e3,
                pid: node,
                tid,
                args: Args {
                    worker: Some(worker),
                    call: Some(event.call),
                    ..args
                },
            }))?;
        }
    }
    for noted in &collected.controller {
        let ts = micros(noted.start_ns, origin_ns);
        let dur = noted.dur_ns as f64 / 1e3;
        match &noted.doing {
            Doing::Sent { call, worker } => {
                let to = worker.map_or("every worker".to_string(), |w| format!("worker {w}"));
                emit(Record::Complete(Complete {
                    name: &format!("send call {call}"),
                    cat: "call",
                    ts,
                    dur,
                    pid: 0,
                    tid: CONTROLLER,
                    args: Args {
                        call: Some(*call),
                        to: Some(&to),
                        ..Args::default()
                    },
                }))?;
                let targets = match worker {
                    Some(w) => *w..*w + 1,
                    None => 0..about.nodes.len(),
                };
                for w in targets {
                    let Some(&ran) = runs.get(&(*call, w)) else {
                        continue;
                    };
                    let id = flow_id(*call, w);
                    emit(Record::Flow {
                        start: true,
                        id,
                        ts,
                        pid: 0,
                        tid: CONTROLLER,
                    })?;
                    emit(Record::Flow {
                        start: false,
                        id,
                        ts: micros(ran, origin_ns),
                        pid: about.nodes[w],
                        tid: track(w),
                    })?;
                }
            }
            Doing::Waited { what, bytes } => {
                let cat = if what.starts_with("copy") {
                    "copy"
                } else {
                    "sync"
                };
                emit(Record::Complete(Complete {
                    name: what,
                    cat,
                    ts,
                    dur,
                    pid: 0,
                    tid: CONTROLLER,
                    args: Args {
                        bytes: (*bytes != 0).then_some(*bytes),
                        ..Args::default()
                    },
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
            event.write(&mut out)
        })?;
        out.write_all(b"],\"displayTimeUnit\":\"ms\",\"otherData\":")?;
        serde_json::to_writer(&mut out, &other_data(about, collected))?;
        out.write_all(b"}")?;
        out.flush()
    })();
    written.map_err(cannot)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::meetings::tests::{collective, runs_on_two_gpus};
    use super::*;

    fn written(record: Record<'_>) -> Value {
        let mut out = Vec::new();
        record.write(&mut out).unwrap();
        serde_json::from_slice(&out).unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(&out));
        })
    }

    #[test]
    fn a_collective_is_named_by_its_team() {
        let about = About {
            kind: "threaded",
            nodes: vec![0; 4],
            per_group: 2,
            meetings: true,
        };
        let name = |worker: usize, team: Team| {
            let event = collective(0, 7, "allreduce", team);
            about.team_name(worker, &event).to_string()
        };
        assert_eq!(name(3, Team::Session), "every worker");
        assert_eq!(name(3, Team::Group), "group 1");
        assert_eq!(name(1, Team::Group), "group 0");
        assert_eq!(name(3, Team::Pair), "two workers");
    }

    #[test]
    fn runs_on_gpus_are_meetings_on_a_track_of_their_own_where_the_queued_collectives_are_not() {
        // NCCL's: collectives queued on GPUs are no meetings on the host.
        let about = About {
            kind: "threaded",
            nodes: vec![0; 2],
            per_group: 2,
            meetings: false,
        };
        let collected = runs_on_two_gpus();
        let mut records = Vec::new();
        write_events(&about, 0, &collected, &mut |record| {
            records.push(written(record));
            Ok(())
        })
        .unwrap();
        let named = |name: &str| {
            records
                .iter()
                .find(|r| r["name"] == "thread_name" && r["args"]["name"] == name)
                .map(|r| r["tid"].clone())
        };
        assert_eq!(named("worker 0 GPU"), Some(json!(gpu_track(0))));
        assert_eq!(named("worker 1 GPU"), Some(json!(gpu_track(1))));
        let on = |worker: usize, cat: &str| {
            records
                .iter()
                .find(|r| r["ph"] == "X" && r["cat"] == cat && r["args"]["worker"] == worker)
                .unwrap_or_else(|| panic!("no {cat} event of worker {worker}: {records:?}"))
        };
        let ran = on(0, "gpu");
        assert_eq!(ran["tid"], json!(gpu_track(0)));
        assert_eq!(ran["ts"].as_f64(), Some(1.0));
        assert_eq!(ran["args"]["team"], "every worker");
        assert_eq!(ran["args"]["bytes"], 16);
        assert_eq!(ran["args"]["wait_us"].as_f64(), Some(0.4));
        assert_eq!(on(1, "gpu")["args"]["wait_us"].as_f64(), Some(0.0));
        let queued = on(0, "collective");
        assert_eq!(queued["tid"], json!(track(0)));
        assert!(queued["args"].get("wait_us").is_none(), "{queued}");
        // The runs of call 8 are not matched: no wait is told of them.
        let unmatched: Vec<&Value> = (records.iter())
            .filter(|r| r["cat"] == "gpu" && r["args"]["call"] == 8)
            .collect();
        assert_eq!(unmatched.len(), 3, "{unmatched:?}");
        assert!(unmatched.iter().all(|r| r["args"].get("wait_us").is_none()));
    }

    #[test]
    fn events_written_field_by_field_are_json_with_their_names_escaped() {
        let complete = written(Record::Complete(Complete {
            name: "a \"quoted\"\n\\name",
            cat: "call",
            ts: 1.5,
            dur: 0.0,
            pid: 1,
            tid: 2,
            args: Args {
                to: Some("worker \"3\""),
                wait_us: Some(0.25),
                to_every_worker: Some(true),
                ..Args::default()
            },
        }));
        assert_eq!(
            complete,
            json!({"ph": "X", "name": "a \"quoted\"\n\\name", "cat": "call", "ts": 1.5,
                   "dur": 0, "pid": 1, "tid": 2,
                   "args": {"to": "worker \"3\"", "wait_us": 0.25, "to_every_worker": true}})
        );
        let finish = written(Record::Flow {
            start: false,
            id: 7,
            ts: 2.0,
            pid: 0,
            tid: 1,
        });
        assert_eq!(
            finish,
            json!({"ph": "f", "bp": "e", "name": "call", "cat": "call", "id": 7, "ts": 2,
                   "pid": 0, "tid": 1})
        );
    }
}
