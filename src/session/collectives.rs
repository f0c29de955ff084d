//! The controller's side of the collectives: setting up CPU, NCCL and Gloo communicators
//! between the workers (`init_ccl`), keeping the current one, and where workers find it.

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use super::controller::{Session, Target};
use super::link::WorkerLink;
#[cfg(not(loom))]
use super::node;
#[cfg(not(loom))]
use super::process;
use crate::abi::DLDevice;
use crate::ccl::{self, CpuCcl};
use crate::channel::SpinPolicy;
use crate::channel::deadline::timeout_ms;
#[cfg(not(loom))]
use crate::object::ErrorKind;
use crate::object::{Any, AnyView, Error, Result};
#[cfg(not(loom))]
use crate::sync::atomic::Ordering;
use crate::worker::activity::Record;

/// Where the workers find a new CPU communicator.
#[derive(Clone, Copy)]
pub(super) enum CclPlace {
    /// Staged in this process under this number (worker threads).
    Staged(i64),
    /// In this area of the session's arena (worker processes).
    #[cfg_attr(loom, allow(dead_code))]
    Arena(usize),
}

impl CclPlace {
    /// The built-in that installs the communicator on every worker, and its arguments.
    pub(super) fn init_call(
        self,
        timeout: Option<Duration>,
        spin: SpinPolicy,
    ) -> (&'static str, Vec<Any>) {
        match self {
            CclPlace::Staged(stage) => (
                "runtime.disco.cpu.init_ccl_per_worker",
                vec![Any::Int(stage)],
            ),
            CclPlace::Arena(area) => (
                "runtime.disco.cpu.init_ccl_in_arena",
                vec![
                    Any::Int(area as i64),
                    Any::Int(timeout_ms(timeout) as i64),
                    Any::Int(spin.budget.as_micros() as i64),
                ],
            ),
        }
    }
}

impl Session {
    /// The session's other nodes, by rank, each with its first worker.
    #[cfg(not(loom))]
    pub(super) fn nodes(&self) -> Vec<(&Arc<node::NodeConnection>, usize)> {
        let mut nodes: Vec<(&Arc<node::NodeConnection>, usize)> = Vec::new();
        for (w, link) in self.workers.iter().enumerate() {
            if let WorkerLink::Node(link) = link
                && !nodes
                    .last()
                    .is_some_and(|(node, _)| Arc::ptr_eq(node, link.node()))
            {
                nodes.push((link.node(), w));
            }
        }
        nodes
    }

    /// Sets up Gloo between the workers of a session with nodes: every worker binds its pairs
    /// on its node's address, the controller collects their addresses and gives every worker
    /// the table, and the workers connect (see `ccl::gloo`).
    #[cfg(not(loom))]
    pub(super) fn init_gloo(self: &Arc<Self>) -> Result<()> {
        self.make_gloo(true)?;
        self.start_referee()
    }

    /// Starts the referee of a session across machines (see `session::referee`), unless it
    /// runs: a worker cannot read the records of its peers on other machines.
    #[cfg(not(loom))]
    fn start_referee(&self) -> Result<()> {
        if self.referee.get().is_none() {
            let per_node = self.workers.len() / (self.nodes().len() + 1);
            super::referee::start(
                self.workers.clone(),
                self.state.clone(),
                per_node,
                self.num_groups,
            )?;
            let _ = self.referee.set(());
        }
        Ok(())
    }

    /// The device ids of the session's NCCL communicators, while they are its.
    pub(super) fn nccl_made(&self) -> Option<Vec<i32>> {
        self.nccl_ids
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_nccl_made(&self, device_ids: Option<Vec<i32>>) {
        *self.nccl_ids.lock().unwrap_or_else(PoisonError::into_inner) = device_ids;
    }

    /// Notes, from a sync's `error`, that a worker's NCCL communicators were aborted (they
    /// failed, or a peer passed their collective): the session makes them again before its
    /// next call ([`Session::remake_comms`]).
    pub(super) fn note_aborted_comms(&self, error: &Error) {
        if self.nccl_made().is_some() && ccl::nccl::aborted_in(error) {
            self.state.note_ruling();
        }
    }

    /// Makes the session's communicators again after a worker's were aborted, before the
    /// session's next call: NCCL's as the last `init_ccl` made them (with a sync: a failure of
    /// the making is the next call's), or Gloo's after a ruling.
    #[cfg(not(loom))]
    pub(super) fn remake_comms(self: &Arc<Self>) -> Result<()> {
        match self.nccl_made() {
            Some(device_ids) => self.init_ccl("nccl", &device_ids).map_err(|e| {
                e.context("making the session's NCCL communicators again (a worker's were aborted)")
            }),
            None => self.remake_gloo(),
        }
    }

    /// Makes the Gloo communicators again after the referee ruled a wait hopeless, which
    /// aborted the waiting worker's: before the session's next call, in order with it, as
    /// `init_ccl` would, but without a sync (a failure of an earlier call stays for the sync
    /// that reports it).
    #[cfg(not(loom))]
    fn remake_gloo(self: &Arc<Self>) -> Result<()> {
        let _one_at_a_time = self
            .ccl_setup
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for link in self.workers.iter() {
            link.note_new_ccl();
        }
        self.make_gloo(false).map_err(|e| {
            e.context("making the session's Gloo communicators again (a collective was aborted)")
        })
    }

    /// [`Session::init_gloo`]'s making of the communicators; `confirm`: sync the workers after
    /// they connect.
    #[cfg(not(loom))]
    fn make_gloo(self: &Arc<Self>, confirm: bool) -> Result<()> {
        let nodes = self.nodes();
        let here = nodes[0].0.addresses().1;
        let hosts: Vec<String> = std::iter::once(here)
            .chain(nodes.iter().map(|(node, _)| node.addresses().0))
            .map(|ip| ip.to_string())
            .collect();
        let timeout = timeout_ms(self.timeout) as i64;
        // Several workers per node meet in their node first (hierarchical): worker processes in
        // their node's arena, in the communicator area after the last one's, and this
        // machine's worker threads in a communicator staged here.
        let per_node = self.workers.len() / hosts.len();
        let area = if per_node > 1 {
            let last = self.node_ccl_inits.fetch_add(1, Ordering::SeqCst);
            (last % process::CCL_AREAS) as i64
        } else {
            -1
        };
        let threads = (area >= 0 && matches!(self.workers[0], WorkerLink::Thread(_))).then(|| {
            let per_group = self.workers.len() / self.num_groups;
            let (_, groups) = ccl::gloo::node_groups(per_node, per_group);
            let fresh = Arc::new(CpuCcl::new(per_node, groups, self.timeout, self.spin));
            (ccl::stage(fresh.clone()), fresh)
        });
        let stage = threads.as_ref().map_or(-1, |(stage, _)| *stage);
        let set_up = self.open_gloo(&hosts, timeout, area, stage, confirm);
        if let Some((stage, fresh)) = threads {
            ccl::unstage(stage);
            if set_up.is_ok() {
                self.keep_ccl(Some(fresh));
            } else {
                // Threads that took it would wait for those that did not.
                fresh.abort(&Error::runtime(
                    "the init_ccl that made this communicator failed; call init_ccl again",
                ));
            }
        }
        set_up
    }

    /// Has every worker open its Gloo pairs (`ccl::gloo::OPEN`, with `hosts`, `timeout_ms`,
    /// `area` and `stage`), gives every worker the table of their addresses and has them
    /// connect.
    #[cfg(not(loom))]
    pub(super) fn open_gloo(
        self: &Arc<Self>,
        hosts: &[String],
        timeout_ms: i64,
        area: i64,
        stage: i64,
        confirm: bool,
    ) -> Result<()> {
        // A worker that cannot load Gloo says so: the backend is unavailable.
        let kinded = |e: Error| {
            let unavailable = ErrorKind::DeviceUnavailable;
            if e.message
                .contains(&format!("failed: {}: ", unavailable.name()))
            {
                Error::new(unavailable, e.message)
            } else {
                e
            }
        };
        let open = self.get_global_func(ccl::gloo::OPEN)?;
        let opened = self.call(
            Target::All,
            &open,
            &[
                Any::from(hosts.join(",").as_str()).view(),
                Any::Int(timeout_ms).view(),
                Any::Int(area).view(),
                Any::Int(self.spin.budget.as_micros() as i64).view(),
                Any::Int(stage).view(),
            ],
        )?;
        let mut table = Vec::new();
        for w in 0..self.workers.len() {
            let row = opened.get(w as i64).map_err(&kinded)?;
            let view = row.view();
            let row = view.as_bytes().map_err(|e| {
                Error::runtime(format!(
                    "worker {w} returned no Gloo addresses: {}",
                    e.message
                ))
            })?;
            table.extend_from_slice(&(row.len() as u32).to_le_bytes());
            table.extend_from_slice(row);
        }
        let connect = self.get_global_func(ccl::gloo::CONNECT)?;
        let _ = self.call(
            Target::All,
            &connect,
            &[Any::Bytes(crate::object::Bytes::new(&table)).view()],
        )?;
        if confirm { self.sync_all() } else { Ok(()) }
    }

    /// Sets up collectives between the workers: `"cpu"` (shared memory, every worker on the
    /// CPU; Gloo between nodes) or `"nccl"` (NCCL, every worker on a GPU of its own, on every
    /// node). `device_ids`
    /// may be empty; otherwise it has one entry per worker (for `"nccl"`, each worker's CUDA
    /// device id). The workers install the communicator in order with earlier calls, so a
    /// collective sent before this fails; calling it again replaces the communicator.
    pub fn init_ccl(self: &Arc<Self>, backend: &str, device_ids: &[i32]) -> Result<()> {
        self.check_open()?;
        if !matches!(backend, "cpu" | "nccl") {
            return Err(Error::value(format!(
                "unknown collective backend {backend:?} (expected \"cpu\" or \"nccl\")"
            )));
        }
        #[cfg(not(loom))]
        let machines = self.nodes().len() + 1;
        #[cfg(loom)]
        let machines = 1;
        let across_nodes = machines > 1;
        let workers = self.workers.len();
        if !device_ids.is_empty() && device_ids.len() != workers {
            return Err(Error::value(format!(
                "device_ids holds {} device ids for {workers} workers",
                device_ids.len()
            )));
        }
        let _one_at_a_time = self
            .ccl_setup
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if backend == "cpu"
            && let Some(w) = (0..workers).find(|&w| self.worker_device(w) != DLDevice::cpu())
        {
            return Err(Error::value(format!(
                "the cpu backend needs every worker on the CPU; worker {w} is not"
            )));
        }
        // The communicators made last are the session's no more, whatever comes of this.
        self.set_nccl_made(None);
        // A worker waiting for work of its NCCL communicators (a collective a peer never
        // joined) sees the count change, aborts them and gets to the new ones: the way back
        // after a sync that timed out.
        for link in self.workers.iter() {
            link.note_new_ccl();
        }
        #[cfg(not(loom))]
        if across_nodes && backend == "cpu" {
            return self.init_gloo();
        }
        let (init, args, cpu) = if backend == "nccl" {
            // Workers can share a GPU only on one machine.
            let per_machine = workers / machines;
            let [gpus, ids] =
                ccl::nccl::init_args(&self.devices, per_machine, self.num_groups, device_ids)?;
            // Worker threads read each other's records through these (worker processes find
            // them in their arena).
            let peers = ccl::nccl::stage_peers(self.thread_records());
            (
                "runtime.disco.nccl.init_ccl_per_worker",
                vec![gpus, ids, Any::Int(peers)],
                None,
            )
        } else {
            let (fresh, place) = self.new_cpu_ccl()?;
            let (init, args) = place.init_call(self.timeout, self.spin);
            (init, args, Some((fresh, place)))
        };
        let views: Vec<AnyView<'_>> = args.iter().map(Any::view).collect();
        let installed = self.get_global_func(init).and_then(|func| {
            let _out = self.call(Target::All, &func, &views)?;
            self.sync_all()
        });
        if cpu.is_none()
            && let Some(Any::Int(peers)) = args.get(2)
        {
            ccl::nccl::unstage_peers(*peers);
        }
        if let Some((fresh, place)) = &cpu {
            if let CclPlace::Staged(stage) = place {
                ccl::unstage(*stage);
            }
            if installed.is_err() {
                // Workers that installed it would wait for those that did not.
                fresh.abort(&Error::runtime(
                    "the init_ccl that made this communicator failed; call init_ccl again",
                ));
            }
        }
        installed?;
        #[cfg(not(loom))]
        if across_nodes {
            self.start_referee()?;
        }
        self.set_nccl_made((backend == "nccl").then(|| device_ids.to_vec()));
        self.keep_ccl(cpu.map(|(fresh, _)| fresh));
        Ok(())
    }

    /// Keeps `fresh` as the CPU communicator the workers hold (shutdown and a worker's death
    /// break its waits), ending the one it replaces.
    pub(super) fn keep_ccl(&self, fresh: Option<Arc<CpuCcl>>) {
        let old = std::mem::replace(
            &mut *self
                .state
                .ccl
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
            fresh,
        );
        if let Some(old) = old {
            old.abort(&Error::runtime(
                "the communicator was replaced by a later init_ccl",
            ));
        }
    }

    /// The records of the session's worker threads, by id (none unless every worker is one).
    fn thread_records(&self) -> Vec<Record> {
        self.workers
            .iter()
            .map(WorkerLink::thread_record)
            .collect::<Option<_>>()
            .unwrap_or_default()
    }

    /// A new CPU communicator between the workers: staged for worker threads to take, or laid
    /// out in the arena of worker processes.
    pub(super) fn new_cpu_ccl(&self) -> Result<(Arc<CpuCcl>, CclPlace)> {
        #[cfg(not(loom))]
        if let Some(links) = self.workers[0].process_session() {
            let fresh = links.new_ccl(self.num_groups, self.timeout, self.spin)?;
            let area = fresh.area().expect("a communicator in the arena");
            return Ok((fresh, CclPlace::Arena(area)));
        }
        let fresh = CpuCcl::new(self.workers.len(), self.num_groups, self.timeout, self.spin);
        let fresh = Arc::new(fresh.watching(self.thread_records()));
        let stage = ccl::stage(fresh.clone());
        Ok((fresh, CclPlace::Staged(stage)))
    }
}
