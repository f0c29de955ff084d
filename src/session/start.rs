//! Starting a session of each kind (worker threads, worker processes, nodes), and stopping
//! what started when a later worker cannot.

// Model-checking builds have thread links alone.
#![cfg_attr(loom, allow(irrefutable_let_patterns))]

use std::sync::{Arc, OnceLock};

use super::controller::{DeathWatch, Session};
use super::link::{ThreadLink, WorkerLink};
#[cfg(not(loom))]
use super::node::{self, NodeLink};
#[cfg(not(loom))]
use super::options::MAX_WORKERS;
use super::options::{QUEUE_CAPACITY, SessionOptions, check_affinity, check_counts, check_devices};
#[cfg(not(loom))]
use super::process;
use super::state::SessionState;
use crate::abi::DLDevice;
use crate::channel::Channel;
use crate::channel::Deadline;
use crate::channel::SpinPolicy;
use crate::device::cpu::pin_current_thread;
#[cfg(not(loom))]
use crate::net::auth::Secret;
use crate::object::{Error, Result};
use crate::sync::Mutex;
use crate::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering, fence};
use crate::sync::thread;
use crate::worker::completion::Completion;
use crate::worker::events::Ring;
use crate::worker::message::Reply;
use crate::worker::registers::RegisterIds;
use crate::worker::{self, Exited, Placed, WorkerInfo, WorkerShared};

impl Session {
    /// What every kind of session checks before it starts a worker: the counts and the
    /// options (the devices of the first `here` workers, those on this machine, or of all);
    /// the number of groups and each worker's device.
    pub(super) fn check_start(
        num_workers: i64,
        num_groups: i64,
        options: &SessionOptions,
        here: Option<usize>,
    ) -> Result<(usize, Vec<DLDevice>)> {
        let (num_workers, num_groups) = check_counts(num_workers, num_groups)?;
        let devices = check_devices(options, num_workers, here.unwrap_or(num_workers))?;
        check_affinity(options, num_workers)?;
        crate::session::register_builtins();
        Ok((num_groups, devices))
    }

    /// Starts `num_workers` worker threads in `num_groups` groups of equal size.
    pub fn new_threaded(
        num_workers: i64,
        num_groups: i64,
        options: SessionOptions,
    ) -> Result<Arc<Session>> {
        let (num_groups, devices) = Self::check_start(num_workers, num_groups, &options, None)?;
        let (workers, started) =
            Self::start_threads(&devices, devices.len(), num_groups, &options)?;
        let state = Arc::new(SessionState::new());
        let session = Self::assemble(workers, devices, num_groups, &options, None, state);
        session.threads_started(started)?;
        Ok(session)
    }

    /// Starts a worker thread on each of `devices`, workers `0 ..` of a session of
    /// `num_workers`; returns their links and the replies that say they run (see
    /// [`Session::threads_started`]).
    pub(super) fn start_threads(
        devices: &[DLDevice],
        num_workers: usize,
        num_groups: usize,
        options: &SessionOptions,
    ) -> Result<(Vec<WorkerLink>, Vec<Reply<()>>)> {
        crate::worker::tvm_dispatch::install()?;
        let mut workers = Vec::with_capacity(devices.len());
        let mut started = Vec::with_capacity(devices.len());
        for (id, &device) in devices.iter().enumerate() {
            let shared = Arc::new(WorkerShared {
                exited: Exited::default(),
                signals: Placed::Own(Box::default()),
                activity: Placed::Own(Box::default()),
                events: Placed::Own(Ring::boxed()),
                stream_events: Placed::Own(Ring::boxed()),
                timeout: options.timeout,
                session: OnceLock::new(),
            });
            let info = WorkerInfo {
                id,
                num_workers,
                num_groups,
                device,
            };
            let cpu = options.cpu_affinity.get(id).copied().flatten();
            let ready: Reply<()> = Reply::new(Completion::new());
            let channel = Arc::new(Channel::new(QUEUE_CAPACITY));
            let (thread_shared, thread_ready, spin) = (shared.clone(), ready.clone(), options.spin);
            let thread_channel = channel.clone();
            let thread = thread::Builder::new()
                .name(format!("dvm-worker-{id}"))
                .spawn(move || {
                    let pinned = cpu.map_or(Ok(()), pin_current_thread);
                    let failed = pinned.is_err();
                    thread_ready.complete(pinned);
                    if !failed {
                        worker::run(thread_shared, &thread_channel, info, spin, cpu.is_some());
                    } else {
                        thread_shared.exited.mark();
                    }
                })
                .map_err(|e| Error::runtime(format!("cannot start worker thread {id}: {e}")));
            let thread = match thread {
                Ok(thread) => thread,
                Err(error) => {
                    Self::stop_partial(&workers);
                    return Err(error);
                }
            };
            workers.push(WorkerLink::Thread(ThreadLink {
                shared,
                channel,
                thread: Mutex::new(Some(thread)),
            }));
            started.push(ready);
        }
        Ok((workers, started))
    }

    /// Gives the session's worker threads their session and waits until each runs (`started`,
    /// from [`Session::start_threads`]).
    pub(super) fn threads_started(self: &Arc<Self>, started: Vec<Reply<()>>) -> Result<()> {
        for link in self.workers.iter() {
            if let WorkerLink::Thread(link) = link {
                let session: Arc<dyn std::any::Any + Send + Sync> = self.clone();
                let _ = link.shared.session.set(Arc::downgrade(&session));
            }
        }
        for ready in started {
            ready.wait(
                self.spin,
                Deadline::NEVER,
                || "starting a worker".into(),
                || Ok(()),
            )??;
        }
        Ok(())
    }

    /// Starts a worker process on each of `devices`, workers `0 ..` of a session of
    /// `num_workers` on this machine, which share the session's `state`; returns their links
    /// and their watcher.
    #[cfg(not(loom))]
    pub(super) fn start_processes(
        devices: &[DLDevice],
        num_workers: usize,
        num_groups: usize,
        options: &SessionOptions,
        state: &Arc<SessionState>,
    ) -> Result<(Vec<WorkerLink>, DeathWatch)> {
        let here = process::Here {
            first: 0,
            count: devices.len(),
        };
        let (links, watcher) = process::start_workers(
            num_workers,
            num_groups,
            options,
            devices,
            (here, None),
            state.clone(),
        )?;
        let links = links
            .into_iter()
            .map(|l| WorkerLink::Process(Box::new(l)))
            .collect();
        Ok((links, watcher))
    }

    #[cfg(not(loom))]
    /// Starts `num_workers` worker processes in `num_groups` groups of equal size, each
    /// running the worker program (`options.worker_program`, else `$DISCOVM_WORKER`, else
    /// `discovm-worker` next to this library), and returns once every one has answered.
    pub fn new_process(
        num_workers: i64,
        num_groups: i64,
        options: SessionOptions,
    ) -> Result<Arc<Session>> {
        let (num_groups, devices) = Self::check_start(num_workers, num_groups, &options, None)?;
        let state = Arc::new(SessionState::new());
        let (links, watcher) =
            Self::start_processes(&devices, devices.len(), num_groups, &options, &state)?;
        let session = Self::assemble(links, devices, num_groups, &options, Some(watcher), state);
        // Every worker answers once it runs: one that cannot start is reported here.
        session
            .sync_all()
            .map_err(|e| e.context("starting the worker processes"))?;
        Ok(session)
    }

    #[cfg(not(loom))]
    /// Starts a session across `num_nodes` machines of `workers_per_node` workers each (worker
    /// ids node-major): this machine is node 0, with worker processes of its own (worker
    /// threads with `options.local_threads`); it listens on
    /// `host:port` until every other node joined (`discovm-node HOST PORT WORKERS` there), within
    /// the session's timeout (two minutes without one), then stops listening. A node joins only
    /// if it proves it holds the session's secret (`options.session_token`, else
    /// `$DISCOVM_SESSION_TOKEN`); without one, only nodes on the loopback interface may. Workers
    /// on other nodes are processes on the CPU.
    pub fn new_socket(
        num_nodes: i64,
        workers_per_node: i64,
        num_groups: i64,
        host: &str,
        port: i64,
        options: SessionOptions,
    ) -> Result<Arc<Session>> {
        let nodes = usize::try_from(num_nodes)
            .ok()
            .filter(|&n| (1..=MAX_WORKERS).contains(&n))
            .ok_or_else(|| {
                Error::value(format!(
                    "num_nodes {num_nodes} is out of range (1..={MAX_WORKERS})"
                ))
            })?;
        let per_node = usize::try_from(workers_per_node)
            .ok()
            .filter(|&n| n >= 1 && n * nodes <= MAX_WORKERS)
            .ok_or_else(|| {
                Error::value(format!(
                    "workers_per_node {workers_per_node} is out of range (1..={} for {nodes} \
                     nodes)",
                    MAX_WORKERS / nodes
                ))
            })?;
        let port = u16::try_from(port)
            .map_err(|_| Error::value(format!("port {port} is out of range (0..=65535)")))?;
        let total = (nodes * per_node) as i64;
        let (num_groups, devices) = Self::check_start(total, num_groups, &options, Some(per_node))?;
        let device_types = node::node_device_types(&options.devices, nodes, per_node)?;
        let listener = std::net::TcpListener::bind((host, port))
            .map_err(|e| Error::value(format!("cannot listen for nodes on {host}:{port}: {e}")))?;
        let state = Arc::new(SessionState::new());
        let here = &devices[..per_node];
        let (mut links, watcher, started) = if options.local_threads {
            let (links, started) = Self::start_threads(here, devices.len(), num_groups, &options)?;
            (links, None, started)
        } else {
            let (links, watcher) =
                Self::start_processes(here, devices.len(), num_groups, &options, &state)?;
            (links, Some(watcher), Vec::new())
        };
        let shape = node::Shape {
            num_nodes: nodes,
            workers_per_node: per_node,
            num_groups,
            device_types,
            setup: crate::net::auth::WorkerSetup {
                imports: options.worker_imports.clone(),
                threads_per_worker: options.threads_per_worker.to_value() as i32,
            },
        };
        let secret = match &options.session_token {
            Some(token) => Secret::new(token.as_bytes()),
            None => Secret::from_env(),
        };
        let heartbeat = options
            .heartbeat
            .unwrap_or(crate::channel::deadline::HEARTBEAT);
        let joined = node::join_nodes(
            &listener,
            shape,
            options.timeout,
            heartbeat,
            &secret,
            &state,
        );
        drop(listener);
        let nodes = match joined {
            Ok(nodes) => nodes,
            Err(error) => {
                Self::stop_partial(&links);
                return Err(error);
            }
        };
        for node in &nodes {
            links.extend(
                (0..per_node)
                    .map(|local| WorkerLink::Node(Box::new(NodeLink::new(node.clone(), local)))),
            );
        }
        let session = Self::assemble(links, devices, num_groups, &options, watcher, state);
        session.threads_started(started)?;
        session
            .sync_all()
            .map_err(|e| e.context("starting the workers of the session's nodes"))?;
        Ok(session)
    }

    /// A session of started workers.
    pub(super) fn assemble(
        workers: Vec<WorkerLink>,
        devices: Vec<DLDevice>,
        num_groups: usize,
        options: &SessionOptions,
        watcher: Option<DeathWatch>,
        state: Arc<SessionState>,
    ) -> Arc<Session> {
        let frees_wait = workers
            .iter()
            .all(|link| !matches!(link, WorkerLink::Thread(_)));
        Arc::new(Session {
            frees_wait,
            workers: workers.into(),
            devices,
            num_groups,
            registers: RegisterIds::default(),
            timeout: options.timeout,
            spin: options.spin,
            frees: Mutex::new(Vec::new()),
            has_frees: AtomicBool::new(false),
            watcher,
            ccl_setup: Mutex::new(()),
            upload_modules: options.upload_modules,
            state,
            node_ccl_inits: AtomicUsize::new(0),
            calls_sent: AtomicU64::new(0),
            nccl_ids: Mutex::new(None),
            referee: std::sync::OnceLock::new(),
            tracer: Default::default(),
        })
    }

    /// Stops workers started before a failure to start another.
    pub(super) fn stop_partial(workers: &[WorkerLink]) {
        for (worker, link) in workers.iter().enumerate() {
            let _ = link.stop(worker, SpinPolicy::default(), Deadline::NEVER);
            fence(Ordering::SeqCst);
            link.wake_fenced();
            let _ = link.join(worker, Deadline::NEVER, None);
        }
    }
}
