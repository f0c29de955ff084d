//! The other nodes' part in a session's trace, on the controller: each node collects its own
//! workers' events while a trace runs and sends them at its stop; the controller reads each
//! node's clock at the start and at the stop and moves the node's events onto its own clock.
//!
//! The one idea: a node that is gone costs its events, never the trace: its part says why its
//! events are missing, and the rest of the session's timeline is written.

use std::sync::Arc;

use super::collect::{Clock, Collected, NodePart};
use crate::session::link::WorkerLink;
use crate::session::node::NodeConnection;

/// The session's other nodes in a trace that runs.
pub(super) struct Nodes {
    parts: Vec<(Arc<NodeConnection>, NodePart)>,
}

/// The session's nodes other than the controller's, each once.
fn nodes_of(workers: &[WorkerLink]) -> Vec<Arc<NodeConnection>> {
    let mut nodes: Vec<Arc<NodeConnection>> = Vec::new();
    for link in workers {
        if let WorkerLink::Node(link) = link
            && !nodes.iter().any(|node| Arc::ptr_eq(node, link.node()))
        {
            nodes.push(link.node().clone());
        }
    }
    nodes
}

/// The reading of `now` and `before` with the smaller error bound.
fn better(before: Option<Clock>, now: Clock) -> Clock {
    match before {
        Some(before) if before.bound_ns <= now.bound_ns => before,
        _ => now,
    }
}

/// Takes `node`'s events (with `dump`, its workers' last ones) into `collected`, as its
/// `part` of the trace says.
fn take_events(node: &NodeConnection, mut part: NodePart, dump: bool, collected: &mut Collected) {
    if part.missing.is_none() {
        let taken = node.clock().and_then(|clock| {
            let clock = better(part.clock, clock);
            part.clock = Some(clock);
            Ok((clock, node.trace_events(dump)?))
        });
        match taken {
            Ok((clock, events)) => collected.take_node(node.workers().start, events, clock),
            Err(error) => part.missing = Some(error.message),
        }
    }
    if part.missing.is_some() {
        // A node lost when one of its workers died sent that worker's last events first.
        let (last_words, clock) = node.last_words();
        part.clock = part.clock.or(clock);
        part.last_words = (0..last_words.workers.len())
            .filter(|&local| !last_words.workers[local].is_empty())
            .map(|local| node.workers().start + local)
            .collect();
        // With no reading of its clock ever, they are placed as the node timed them.
        let unread = Clock {
            offset_ns: 0,
            bound_ns: 0,
        };
        collected.take_node(
            node.workers().start,
            last_words,
            part.clock.unwrap_or(unread),
        );
    }
    collected.nodes.push(part);
}

impl Nodes {
    /// Has every other node of `workers` collect its events, and reads its clock.
    pub fn start(workers: &[WorkerLink]) -> Nodes {
        let parts = nodes_of(workers)
            .into_iter()
            .map(|node| {
                let started = node.trace_start().and_then(|()| node.clock());
                let part = NodePart {
                    node: node.rank(),
                    clock: started.as_ref().ok().copied(),
                    missing: started.err().map(|e| e.message),
                    last_words: Vec::new(),
                };
                (node, part)
            })
            .collect();
        Nodes { parts }
    }

    /// Stops every node's collecting and takes its events into `collected`.
    pub fn stop(self, collected: &mut Collected) {
        for (node, part) in self.parts {
            take_events(&node, part, false, collected);
        }
    }

    /// Takes every other node's last events into `collected`.
    pub fn dump(workers: &[WorkerLink], collected: &mut Collected) {
        for node in nodes_of(workers) {
            let part = NodePart {
                node: node.rank(),
                clock: None,
                missing: None,
                last_words: Vec::new(),
            };
            take_events(&node, part, true, collected);
        }
    }
}
