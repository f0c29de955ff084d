//! Sessions across machines: the controller's machine is node 0, with worker processes of its
//! own; every other node joins over TCP, proves it holds the session's secret, starts its
//! workers as processes and relays their frames.
//!
//! The one idea: a node is a relay, not a second controller. The controller keeps the requests
//! of every worker, as it does for its own worker processes, and writes each worker's frames,
//! routed, on its node's connection (a broadcast once per node, fanned out there); the node
//! copies them into its workers' rings and their replies back, unread. Liveness is a heartbeat
//! both ways: a silent peer is a lost one. What the node's workers do crosses as the node's
//! board: their records, read from the node's arena, sent whenever one changed.

pub mod board;
mod link;
mod outbox;
mod serve;
pub(crate) mod trace;

use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

pub(crate) use crate::worker::uploads::{hash, hex, keep_uploads_at};
pub(crate) use link::{NodeConnection, NodeLink};
pub(crate) use serve::serve as serve_node;

use crate::abi::{DLDevice, KDL_CPU, KDL_CUDA};
use crate::channel::Deadline;
use crate::channel::deadline::{HANDSHAKE_STEP, NODE_JOIN, timeout_ms};
use crate::net::auth::{self, Answer, Refusal, Secret, Welcome, WorkerSetup};
use crate::object::{Error, ErrorKind, Result};
use crate::session::state::SessionState;

/// How often a node looks at its workers' records: it sends the controller those that
/// changed, or a heartbeat when none did, so the controller hears from a healthy node at least
/// this often.
const BOARD_PERIOD: Duration = Duration::from_millis(100);

/// The shape of a session across machines.
#[derive(Clone, Debug)]
pub(crate) struct Shape {
    pub num_nodes: usize,
    pub workers_per_node: usize,
    pub num_groups: usize,
    /// The device type of each node's workers, by rank (see [`node_device_types`]).
    pub device_types: Vec<i32>,
    /// What every node starts its workers with.
    pub setup: WorkerSetup,
}

/// The devices of a node's `count` workers, all of `device_type` (worker `i` on device `i`
/// of a GPU type, on device 0 of the CPU).
pub(crate) fn workers_devices(device_type: i32, count: usize) -> Result<Vec<DLDevice>> {
    match device_type {
        KDL_CPU => Ok(vec![DLDevice::cpu(); count]),
        KDL_CUDA => Ok((0..count)
            .map(|i| DLDevice {
                device_type,
                device_id: i as i32,
            })
            .collect()),
        other => Err(Error::value(format!(
            "the controller asked for workers on device type {other}, which nodes do not run \
             (1: the CPU, 2: CUDA)"
        ))),
    }
}

/// The device type of each node's workers, by rank, from the session's `devices` (one per
/// worker, node-major; empty: every worker on the CPU). A node's workers run on the CPU, or
/// each on the CUDA device of its index on the node: what the node is told when it joins.
/// Node 0's workers (this machine's) may run anywhere.
///
/// Errors: `ValueError` naming the first entry of another node that breaks that rule.
pub(crate) fn node_device_types(
    devices: &[DLDevice],
    num_nodes: usize,
    per_node: usize,
) -> Result<Vec<i32>> {
    let mut types = vec![KDL_CPU; num_nodes];
    if devices.is_empty() {
        return Ok(types);
    }
    for (rank, kind) in types.iter_mut().enumerate().skip(1) {
        let first = rank * per_node;
        let node = &devices[first..first + per_node];
        *kind = node[0].device_type;
        // What the node starts for its workers (nothing of a type it does not run).
        let expected = workers_devices(*kind, per_node).unwrap_or_default();
        let odd = node
            .iter()
            .enumerate()
            .find(|&(i, d)| expected.get(i) != Some(d));
        if let Some((i, d)) = odd {
            return Err(Error::value(format!(
                "devices[{}] is ({}, {}): the workers of node {rank} (and of every node but \
                 this one) run on the CPU, or each on the CUDA device of its index on the node \
                 (its worker {i} on CUDA device {i})",
                first + i,
                d.device_type,
                d.device_id
            )));
        }
    }
    Ok(types)
}

/// Accepts the session's other nodes on `listener` until every rank joined: each proves that
/// it holds `secret` (without one, only peers on the loopback interface are let in), gets its
/// rank (the one it asked for, or the lowest free one) and the session's shape. Strangers,
/// peers that fail the handshake and nodes turned away are dropped with the reason on stderr,
/// and the wait goes on. Returns the nodes' connections, by rank from 1, their readers running.
///
/// Errors: `TimeoutError` naming the ranks still missing when `timeout` (or, without one, two
/// minutes) passed.
pub(crate) fn join_nodes(
    listener: &TcpListener,
    shape: Shape,
    timeout: Option<Duration>,
    heartbeat: Duration,
    secret: &Secret,
    state: &Arc<SessionState>,
) -> Result<Vec<Arc<NodeConnection>>> {
    let io = |e: std::io::Error| Error::runtime(format!("listening for nodes: {e}"));
    listener.set_nonblocking(true).map_err(io)?;
    if !secret.is_set() {
        eprintln!(
            "discovm: no {} is set: the session accepts nodes from the loopback interface only",
            auth::TOKEN_VAR
        );
    }
    let deadline = Deadline::after(Some(timeout.unwrap_or(NODE_JOIN)));
    let welcome = |rank: usize| Welcome {
        rank: rank as u32,
        num_nodes: shape.num_nodes as u32,
        workers_per_node: shape.workers_per_node as u32,
        num_groups: shape.num_groups as u32,
        device_type: shape.device_types[rank],
        timeout_ms: timeout_ms(timeout),
        heartbeat_ms: heartbeat.as_millis() as u64,
        setup: shape.setup.clone(),
    };
    let mut joined: Vec<Option<TcpStream>> = (0..shape.num_nodes).map(|_| None).collect();
    let (done, handshakes) = mpsc::channel();
    while joined[1..].iter().any(Option::is_none) {
        match listener.accept() {
            Ok((stream, peer)) => {
                if !secret.is_set() && !peer.ip().is_loopback() {
                    eprintln!(
                        "discovm: dropped a peer at {peer}: without {} only loopback peers may \
                         join",
                        auth::TOKEN_VAR
                    );
                    continue;
                }
                let (secret, done) = (secret.clone(), done.clone());
                // Each handshake on a thread of its own: a silent stranger holds up nobody.
                let _ = std::thread::Builder::new()
                    .name("discovm-handshake".into())
                    .spawn(move || {
                        let _ = done.send(handshake(stream, &secret).map_err(|e| (peer, e)));
                    });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(io(e)),
        }
        while let Ok(result) = handshakes.try_recv() {
            match result {
                Ok((mut stream, join, answer)) => {
                    let peer = stream.peer_addr().ok();
                    match place(join, &shape, |rank| joined[rank].is_none()) {
                        Ok(rank) => {
                            if answer.welcome(&mut stream, &welcome(rank)).is_ok() {
                                joined[rank] = Some(stream);
                            }
                        }
                        Err(why) => {
                            eprintln!(
                                "discovm: turned away a node at {peer:?} that asked for rank \
                                 {:?} with {} workers: {}",
                                join.rank,
                                join.workers,
                                why.describe()
                            );
                            let _ = answer.refuse(&mut stream, why);
                        }
                    }
                }
                Err((peer, error)) => {
                    eprintln!("discovm: dropped a peer at {peer}: {}", error.message);
                }
            }
        }
        if deadline.passed() {
            let missing: Vec<String> = (1..shape.num_nodes)
                .filter(|&r| joined[r].is_none())
                .map(|r| r.to_string())
                .collect();
            return Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "waiting for the session's nodes timed out: node(s) {} of {} did not join",
                    missing.join(", "),
                    shape.num_nodes
                ),
            ));
        }
        // Not channel::wait: a non-blocking accept has nobody to wake this loop.
        std::thread::sleep(Duration::from_millis(5));
    }
    let wpn = shape.workers_per_node;
    let nodes = joined
        .into_iter()
        .enumerate()
        .skip(1)
        .map(|(rank, stream)| {
            let stream = stream.expect("every rank joined");
            NodeConnection::start(rank, rank * wpn, wpn, stream, heartbeat, state.clone())
        })
        .collect::<Result<Vec<_>>>()?;
    start_heartbeats(nodes.clone(), heartbeat);
    Ok(nodes)
}

/// The rank a node that asked to `join` gets in a session of `shape`, where `free` says which
/// ranks no node holds yet; or why it is turned away.
fn place(
    join: auth::Join,
    shape: &Shape,
    free: impl Fn(usize) -> bool,
) -> std::result::Result<usize, Refusal> {
    let others = 1..shape.num_nodes;
    let rank = match join.rank.map(|r| r as usize) {
        Some(rank) if !others.contains(&rank) => Err(Refusal::BadRank),
        Some(rank) if free(rank) => Ok(rank),
        Some(_) => Err(Refusal::RankTaken),
        None => others
            .into_iter()
            .find(|&r| free(r))
            .ok_or(Refusal::RankTaken),
    }?;
    if join.workers as usize != shape.workers_per_node {
        return Err(Refusal::WrongWorkers);
    }
    Ok(rank)
}

/// The controller's side of one handshake, on a blocking stream with a bound on each read.
fn handshake(mut stream: TcpStream, secret: &Secret) -> Result<(TcpStream, auth::Join, Answer)> {
    let io = |e: std::io::Error| Error::runtime(format!("the connection: {e}"));
    stream.set_nonblocking(false).map_err(io)?;
    stream.set_read_timeout(Some(HANDSHAKE_STEP)).map_err(io)?;
    let (join, answer) = auth::authenticate(&mut stream, secret)?;
    Ok((stream, join, answer))
}

/// Tells every node, four times per `interval`, that the controller is alive (and sends what
/// was written to it meanwhile), until every connection closed.
fn start_heartbeats(nodes: Vec<Arc<NodeConnection>>, interval: Duration) {
    let _ = std::thread::Builder::new()
        .name("discovm-heartbeat".into())
        .spawn(move || {
            while !nodes.iter().all(|node| node.ended()) {
                for node in &nodes {
                    node.heartbeat();
                }
                // A period, not a wait: nothing is awaited between beats.
                std::thread::sleep(interval / 4);
            }
        });
}
