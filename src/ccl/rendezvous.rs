//! Setting up a worker's Gloo contexts for a session across machines (`init_ccl("cpu")` on a
//! session with nodes), and, where every node runs several workers, the node's shared-memory
//! communicator beside them.
//!
//! The one idea: the rendezvous rides on the session's own connections. Every worker binds a
//! Gloo pair for each peer on its node's address and returns the pairs' addresses
//! (`runtime.disco.gloo.open_per_worker`); the controller hands every worker the whole table
//! (`runtime.disco.gloo.connect_per_worker`), which connects them. Nothing of Gloo's own
//! rendezvous (a TCP store, files, Redis) is used, and only nodes that proved the session's
//! secret learn the addresses.

use std::sync::{Arc, Once};
use std::time::Duration;

use super::backend;
use super::communicator::{fresh_in_this_arena, in_this_arena};
use super::cpu::{self, Member};
use super::gloo::{CONNECT, Local, Meshes, OPEN, Watch, node_groups};
use crate::channel::SpinPolicy;
use crate::channel::deadline::{GLOO_WITHOUT_TIMEOUT, timeout_from_signed_ms};
use crate::device::gloo::Mesh;
use crate::object::args::{argument, arity};
use crate::object::{Any, AnyView, Bytes, Error, Function, Result, registry};
use crate::worker::WorkerInfo;
use crate::worker::builtins::on_worker;

/// The contexts `open_per_worker` bound, until `connect_per_worker` connects them, with where
/// the node's other workers take the shared-memory communicator then.
struct Opened {
    meshes: Meshes,
    attach: Option<Attach>,
}

/// The pairs' addresses of every mesh, in the order `connect_per_worker` reads them: for each
/// mesh, for each peer but this rank, a u32 length and the address.
fn addresses(meshes: &[(&Mesh, usize, usize)]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for (mesh, _, _) in meshes {
        for peer in (0..mesh.size).filter(|&p| p != mesh.rank) {
            let address = mesh.address(peer)?;
            out.extend_from_slice(&(address.len() as u32).to_le_bytes());
            out.extend_from_slice(&address);
        }
    }
    Ok(out)
}

/// Reads length-prefixed entries.
struct Entries<'a>(&'a [u8]);

impl<'a> Entries<'a> {
    fn next(&mut self, what: &str) -> Result<&'a [u8]> {
        let bad = || Error::value(format!("the address table is cut short in {what}"));
        let len = self.0.get(..4).ok_or_else(bad)?;
        let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
        let entry = self.0.get(4..4 + len).ok_or_else(bad)?;
        self.0 = &self.0[4 + len..];
        Ok(entry)
    }
}

/// Where a worker takes its node's shared-memory communicator in `connect_per_worker`.
struct Attach {
    area: usize,
    timeout: Option<Duration>,
    spin: SpinPolicy,
    /// The worker as the communicator knows it (see [`Local`]).
    info: WorkerInfo,
    groups_inside: bool,
}

/// `runtime.disco.gloo.open_per_worker(hosts, timeout_ms, area, spin_us, stage)`: binds this
/// worker's Gloo pairs on its node's address (`hosts`: every node's, comma-separated, by
/// rank), waiting at most `timeout_ms` in every later operation (0: no bound), and returns
/// their addresses. With `area` not negative the session runs hierarchically: a node's worker
/// processes meet in that area of their arena, which the node's first worker lays out
/// (spinning `spin_us` before parking), and the controller's worker threads in the
/// communicator it staged under `stage`; each node's first worker binds its pairs in the
/// leaders' mesh too.
fn open_per_worker(args: &[AnyView<'_>]) -> Result<Any> {
    arity(OPEN, args, 5, 5)?;
    let info = on_worker(OPEN)?;
    let hosts = argument(0, "hosts", || args[0].as_str().map(String::from))?;
    let number = |i: usize, what: &str| argument(i, what, || args[i].as_i64());
    let timeout_ms = number(1, "timeout_ms")?;
    let ccl_timeout = timeout_from_signed_ms(timeout_ms, "argument 1 (timeout_ms)")?;
    let area = number(2, "area")?;
    let spin = SpinPolicy {
        budget: Duration::from_micros(number(3, "spin_us")?.max(0) as u64),
    };
    let stage = number(4, "stage")?;
    let hosts: Vec<&str> = hosts.split(',').collect();
    let nodes = hosts.len();
    if info.num_workers % nodes != 0 {
        return Err(Error::value(format!(
            "argument 0 (hosts): {nodes} nodes cannot share {} workers",
            info.num_workers
        )));
    }
    let per_node = info.num_workers / nodes;
    let (node, here) = (info.id / per_node, info.id % per_node);
    let host = hosts[node];
    let hierarchical = area >= 0 && per_node > 1;
    // Node 0's workers are the controller's threads where it staged their communicator.
    let threads = stage >= 0 && node == 0;
    let staged = match (hierarchical, threads) {
        (true, true) => Some(cpu::staged(stage).map_err(|_| {
            Error::value(format!(
                "argument 4 (stage): no communicator is staged under {stage} for this \
                 machine's worker threads (the init_ccl that staged it has ended; call init_ccl \
                 again)"
            ))
        })?),
        (true, false) => {
            check_arena(per_node)?;
            None
        }
        (false, _) => None,
    };
    backend::forget();
    let timeout = ccl_timeout.unwrap_or(GLOO_WITHOUT_TIMEOUT);
    let world = Arc::new(Mesh::open(host, info.id, info.num_workers, timeout)?);
    let group = if info.num_groups > 1 {
        Some(Arc::new(Mesh::open(
            host,
            info.local_id(),
            info.workers_per_group(),
            timeout,
        )?))
    } else {
        None
    };
    let (groups_inside, local_groups) = node_groups(per_node, info.workers_per_group());
    let local_info = WorkerInfo {
        id: here,
        num_workers: per_node,
        num_groups: local_groups,
        device: info.device,
    };
    let attach = Attach {
        area: area.max(0) as usize,
        timeout: ccl_timeout,
        spin,
        info: local_info,
        groups_inside,
    };
    let leaders = || Mesh::open(host, node, nodes, timeout).map(Arc::new);
    let (local, attach) = match (hierarchical, here, staged) {
        (false, ..) => (None, None),
        (true, _, Some(ccl)) => {
            let local = Local {
                member: Member {
                    info: local_info,
                    ccl,
                },
                first: info.id - here,
                groups_inside,
                leaders: (here == 0).then(leaders).transpose()?,
            };
            (Some(local), None)
        }
        (true, 0, None) => {
            let ccl = fresh_in_this_arena(attach.area, local_groups, attach.timeout, attach.spin)?;
            let local = Local {
                member: Member {
                    info: local_info,
                    ccl: Arc::new(ccl),
                },
                first: info.id,
                groups_inside,
                leaders: Some(leaders()?),
            };
            (Some(local), None)
        }
        (true, _, None) => (None, Some(attach)),
    };
    let meshes = Meshes::new(info, world, group, local);
    let out = addresses(&meshes.in_order())?;
    backend::hold_pending(Opened { meshes, attach });
    Ok(Any::Bytes(Bytes::new(&out)))
}

/// The worker process shares its machine's arena with the `per_node` workers of its node.
fn check_arena(per_node: usize) -> Result<()> {
    match crate::worker::arena::workers_in_arena() {
        Some(workers) if workers == per_node => Ok(()),
        found => Err(Error::runtime(format!(
            "a hierarchical communicator needs the {per_node} worker processes of this node to \
             share an arena; this worker has {}",
            found.map_or("none".into(), |w| format!("one of {w} workers"))
        ))),
    }
}

/// `runtime.disco.gloo.connect_per_worker(table)`: connects the pairs `open_per_worker` bound
/// to the peers' (`table`: every worker's addresses, by worker, each with a u32 length), takes
/// the node's shared-memory communicator where the session runs hierarchically, and makes them
/// this worker's communicator.
fn connect_per_worker(args: &[AnyView<'_>]) -> Result<Any> {
    arity(CONNECT, args, 1, 1)?;
    let info = on_worker(CONNECT)?;
    let table = argument(0, "table", || args[0].as_bytes().map(<[u8]>::to_vec))?;
    let Opened { mut meshes, attach } = backend::take_pending::<Opened>()
        .ok_or_else(|| Error::runtime(format!("{CONNECT} runs after {OPEN} on the same worker")))?;
    let mut rows = Entries(&table);
    let rows: Vec<&[u8]> = (0..info.num_workers)
        .map(|w| rows.next(&format!("worker {w}'s row")))
        .collect::<Result<_>>()?;
    // Each peer's row lists its addresses mesh by mesh, peer by peer: this worker's entry in
    // a mesh is the one at its rank there, counting without the peer itself.
    let meshes_of = meshes.in_order();
    for (index, &(mesh, base, stride)) in meshes_of.iter().enumerate() {
        for peer in (0..mesh.size).filter(|&p| p != mesh.rank) {
            let worker = base + peer * stride;
            let mut entries = Entries(rows[worker]);
            let skipped: usize = meshes_of[..index]
                .iter()
                .map(|&(m, _, _)| m.size - 1)
                .sum::<usize>()
                + if mesh.rank < peer {
                    mesh.rank
                } else {
                    mesh.rank - 1
                };
            let what = format!("worker {worker}'s addresses");
            for _ in 0..skipped {
                entries.next(&what)?;
            }
            mesh.connect(peer, entries.next(&what)?)?;
        }
    }
    if let Some(attach) = attach {
        let ccl = in_this_arena(
            attach.area,
            attach.info.num_groups,
            attach.timeout,
            attach.spin,
        )?;
        meshes.local = Some(Local {
            member: Member {
                info: attach.info,
                ccl: Arc::new(ccl),
            },
            first: info.id - attach.info.id,
            groups_inside: attach.groups_inside,
            leaders: None,
        });
    }
    let worker = crate::worker::shared()
        .ok_or_else(|| Error::runtime(format!("`{CONNECT}` must run on a session worker")))?;
    meshes.watch = Some(Watch::start(meshes.all(), worker.clone())?);
    worker.activity.comms_made();
    backend::install(meshes);
    Ok(Any::None)
}

/// The body of a built-in.
type Builtin = fn(&[AnyView<'_>]) -> Result<Any>;

/// Registers the Gloo init built-ins once per process.
pub(super) fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for (name, body) in [
            (OPEN, open_per_worker as Builtin),
            (CONNECT, connect_per_worker),
        ] {
            registry::register_global(name, Function::from_closure(body), true)
                .expect("built-in names are valid");
        }
    });
}
