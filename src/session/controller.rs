//! The controller side of a threaded session: N worker threads, each with its own queue.
//! Messages are typed values; a broadcast is built once and shared. Any host thread may use a
//! session; a send gate makes shutdown wait for sends in progress, so nothing is queued after
//! the final `Shutdown` and no wait can outlive its worker.

// Model-checking builds have thread links alone.
#![cfg_attr(loom, allow(irrefutable_let_patterns))]

use std::sync::{Arc, OnceLock, PoisonError};
use std::time::Duration;

use super::builtins;
use super::ccl::{self, CpuCcl, CurrentCcl};
use super::completion::Completion;
use super::dref::DRef;
use super::health::Health;
use super::link::{self, ThreadLink, WorkerLink};
use super::message::{Arg, CopyDirection, GlobalLookup, HostCopy, Message, Reply, Store};
#[cfg(not(loom))]
use super::node::{self, NodeLink};
#[cfg(not(loom))]
use super::process;
use super::registers::{Reg, RegisterIds};
use super::worker::{self, Exited, Signals, SignalsAt, WorkerInfo, WorkerShared};
use super::worker_env::WorkerThreads;
use crate::abi::DLDevice;
use crate::channel::Channel;
use crate::channel::SpinPolicy;
use crate::device::cpu::{HostTensor, available_cpus, pin_current_thread};
#[cfg(not(loom))]
use crate::net::auth::Secret;
use crate::object::{Any, AnyView, Error, ErrorKind, Function, Result, registry};
use crate::sync::Mutex;
use crate::sync::atomic::{AtomicBool, AtomicUsize, Ordering, fence};
use crate::sync::thread;
use crate::sync::time::Instant;

crate::sync::thread_local! {
    /// Each host thread reuses one reply slot for its syncs.
    static SYNC_REPLY: std::cell::Cell<Option<Reply<()>>> = const { std::cell::Cell::new(None) };
}

/// The most workers a threaded session may have.
pub const MAX_WORKERS: usize = 1024;
/// Each worker queue holds this many messages before senders wait for room.
pub const QUEUE_CAPACITY: usize = 4096;

/// How a session is set up.
#[derive(Clone, Debug, Default)]
pub struct SessionOptions {
    /// How long any wait may take; `None` waits as long as it takes.
    pub timeout: Option<Duration>,
    /// How long waiting threads (workers and controller) spin and yield before parking.
    pub spin: SpinPolicy,
    /// The CPU each worker is pinned to (`None`: not pinned); empty pins nobody.
    pub cpu_affinity: Vec<Option<usize>>,
    /// The device of each worker; empty means CPU for every worker.
    pub devices: Vec<DLDevice>,
    /// The program worker processes run (process sessions); `None`: `$DISCOVM_WORKER`, else
    /// `discovm-worker` next to this library.
    pub worker_program: Option<String>,
    /// Arguments put before the session's own on each worker's command line (`-m
    /// discovm.worker` when the program is a Python interpreter).
    pub worker_args: Vec<String>,
    /// Python modules every worker process imports before it serves its first call (a name
    /// ending in `?` only where its package is installed); the nodes' workers too. Only a
    /// Python worker program can: any other fails to start when asked for one without `?`.
    pub worker_imports: Vec<String>,
    /// How many threads the OpenMP and BLAS libraries of each worker process start (worker
    /// processes of this machine and of every node).
    pub threads_per_worker: WorkerThreads,
    /// Sessions across machines: the secret every node must prove it holds (`None`:
    /// `$DISCOVM_SESSION_TOKEN`; without either, nodes may join from the loopback interface
    /// only).
    pub session_token: Option<String>,
    /// Sessions across machines: how long a silent node (or controller) counts as alive
    /// (`None`: 2 s).
    pub heartbeat: Option<Duration>,
    /// Sessions across machines: `load_module` sends the module's bytes to the other nodes,
    /// which load their own copy (otherwise each node loads the path it is given).
    pub upload_modules: bool,
    /// Sessions across machines: this machine's workers are threads of this process, not
    /// worker processes.
    pub local_threads: bool,
}

impl SessionOptions {
    /// Options from the numbers a caller gives: `timeout_ms` bounds every wait (0: no bound),
    /// `spin_us` is how long waiters spin and yield before they park (0: the default, negative:
    /// park at once), `cpu_affinity` has the CPU of each worker (-1: not pinned) or nothing,
    /// `devices` the device of each worker or nothing. Counts are checked against the workers
    /// when the session starts.
    pub fn from_values(
        timeout_ms: i64,
        spin_us: i64,
        cpu_affinity: impl IntoIterator<Item = i64>,
        devices: Vec<DLDevice>,
    ) -> Result<SessionOptions> {
        let timeout = match timeout_ms {
            0 => None,
            ms if ms > 0 => Some(Duration::from_millis(ms as u64)),
            ms => return Err(Error::value(format!("timeout_ms is negative ({ms})"))),
        };
        let budget = match spin_us {
            0 => SpinPolicy::DEFAULT_BUDGET,
            us if us < 0 => Duration::ZERO,
            us => Duration::from_micros(us as u64),
        };
        let cpu_affinity = cpu_affinity
            .into_iter()
            .enumerate()
            .map(|(w, cpu)| match cpu {
                -1 => Ok(None),
                cpu => usize::try_from(cpu).map(Some).map_err(|_| {
                    Error::value(format!(
                        "cpu_affinity[{w}] is {cpu} (use -1 for no pinning)"
                    ))
                }),
            })
            .collect::<Result<_>>()?;
        Ok(SessionOptions {
            timeout,
            spin: SpinPolicy { budget },
            cpu_affinity,
            devices,
            worker_program: None,
            worker_args: Vec::new(),
            worker_imports: Vec::new(),
            threads_per_worker: WorkerThreads::default(),
            session_token: None,
            heartbeat: None,
            upload_modules: false,
            local_threads: false,
        })
    }
}

/// A session: its workers are threads of this process or worker processes.
/// What watches a session's worker processes (nothing in model-checking builds, which have none).
#[cfg(not(loom))]
type Watcher = process::Watcher;
#[cfg(loom)]
type Watcher = ();

pub struct Session {
    workers: Vec<WorkerLink>,
    /// The device of each worker.
    devices: Vec<DLDevice>,
    num_groups: usize,
    registers: RegisterIds,
    closed: AtomicBool,
    timeout: Option<Duration>,
    spin: SpinPolicy,
    /// The CPU communicator `init_ccl` set up, if any (kept to break its waits at shutdown;
    /// the watcher of worker processes breaks it when one dies).
    ccl: CurrentCcl,
    /// Registers of dropped DRefs that not every worker was told of yet: the next send tells
    /// every worker, before its own message (see `free_register`).
    frees: Mutex<Vec<Reg>>,
    /// Whether frees wait for the next send even when there is room for them (every worker is
    /// reached through frames, where a free of its own costs a frame).
    frees_wait: bool,
    /// Whether `frees` may hold something (so that sends skip its lock otherwise).
    has_frees: AtomicBool,
    /// The watch over worker processes (process sessions), which records a worker's death in
    /// its link as it happens.
    watcher: Option<Watcher>,
    /// Held by `init_ccl` from sending the new communicator to the workers until it keeps it,
    /// so that every worker installs the same one last, and that is the one kept. (Not `ccl`'s
    /// lock: shutdown takes that one to break waits that this call's sync may be stuck behind.)
    ccl_setup: Mutex<()>,
    /// Whether `load_module` ships modules to the other nodes (sessions across machines).
    upload_modules: bool,
    /// Whether the session is broken, for sessions whose workers can die (worker processes,
    /// nodes).
    health: Option<Arc<Health>>,
    /// How many times `init_ccl` laid out communicators in the nodes' arenas (sessions across
    /// machines): each goes to the area after the last one's.
    node_ccl_inits: AtomicUsize,
}

/// Where the workers find a new CPU communicator.
#[derive(Clone, Copy)]
enum CclPlace {
    /// Staged in this process under this number (worker threads).
    Staged(i64),
    /// In this area of the session's arena (worker processes).
    #[cfg_attr(loom, allow(dead_code))]
    Arena(usize),
}

impl CclPlace {
    /// The built-in that installs the communicator on every worker, and its arguments.
    fn init_call(self, timeout: Option<Duration>, spin: SpinPolicy) -> (&'static str, Vec<Any>) {
        match self {
            CclPlace::Staged(stage) => (
                "runtime.disco.cpu.init_ccl_per_worker",
                vec![Any::Int(stage)],
            ),
            CclPlace::Arena(area) => (
                "runtime.disco.cpu.init_ccl_in_arena",
                vec![
                    Any::Int(area as i64),
                    Any::Int(timeout.map_or(-1, |t| t.as_millis() as i64)),
                    Any::Int(spin.budget.as_micros() as i64),
                ],
            ),
        }
    }
}

/// Which workers a call goes to.
#[derive(Clone, Copy, Debug)]
pub enum Target {
    All,
    One(usize),
}

/// A function of a session bound to the workers it runs on (see [`Session::bind`]); it keeps
/// the function's register, and so the session, alive.
pub struct BoundCall {
    target: Target,
    func: DRef,
}

impl BoundCall {
    /// Calls the function with `args`, as [`Session::call`] does.
    pub fn call(&self, args: &[AnyView<'_>]) -> Result<DRef> {
        self.func
            .session()
            .call_register(self.target, self.func.reg(), args)
    }

    /// The worker thread a call goes to, when it goes to one: only such a call can be tried
    /// without waiting ([`BoundCall::try_call`]).
    pub fn single_thread(&self) -> Option<usize> {
        let session = self.func.session();
        let worker = match self.target {
            Target::One(worker) => worker,
            Target::All if session.workers.len() == 1 => 0,
            Target::All => return None,
        };
        matches!(session.workers[worker], WorkerLink::Thread(_)).then_some(worker)
    }

    /// [`BoundCall::call`] if it sends without waiting; `Ok(None)`, having queued no call, when
    /// it would wait: for room in the worker's queue (frees waiting for a send may have been
    /// queued ahead of it), for frees to queue on other workers, or for more than one worker or
    /// a worker process (see [`BoundCall::single_thread`]). A caller
    /// that holds a lock a worker may need (Python's GIL) can call this while holding it.
    pub fn try_call(&self, args: &[AnyView<'_>]) -> Result<Option<DRef>> {
        match self.single_thread() {
            Some(worker) => self
                .func
                .session()
                .try_call_register(worker, self.func.reg(), args),
            None => Ok(None),
        }
    }

    /// [`BoundCall::call`] as a function of the call's arguments, which returns the DRef.
    pub fn into_function(self) -> Function {
        Function::from_closure(move |args| {
            AnyView::validate_all(args, |i| format!("args[{i}]"))?;
            Ok(self.call(args)?.into())
        })
    }

    /// [`BoundCall::try_call`] as a function of the call's arguments, which returns the DRef,
    /// or None for a call it did not send; None for a call that is never tried.
    pub fn into_try_function(self) -> Option<Function> {
        self.single_thread()?;
        Some(Function::from_closure(move |args| {
            AnyView::validate_all(args, |i| format!("args[{i}]"))?;
            Ok(self.try_call(args)?.map_or(Any::None, Any::from))
        }))
    }
}

fn closed_error() -> Error {
    Error::new(ErrorKind::SessionClosed, "the session has been shut down")
}

fn check_counts(num_workers: i64, num_groups: i64) -> Result<(usize, usize)> {
    let workers = usize::try_from(num_workers)
        .ok()
        .filter(|n| (1..=MAX_WORKERS).contains(n))
        .ok_or_else(|| {
            Error::value(format!(
                "num_workers {num_workers} is out of range (1..={MAX_WORKERS})"
            ))
        })?;
    let groups = usize::try_from(num_groups)
        .ok()
        .filter(|g| (1..=workers).contains(g))
        .ok_or_else(|| {
            Error::value(format!(
                "num_groups {num_groups} is out of range (1..={workers})"
            ))
        })?;
    if workers % groups != 0 {
        return Err(Error::value(format!(
            "num_workers {workers} is not a multiple of num_groups {groups}"
        )));
    }
    Ok((workers, groups))
}

/// The devices of `workers` workers, of which the first `here` run on this machine: each of
/// those needs a backend here (the host, or a GPU the CUDA driver found).
fn check_devices(options: &SessionOptions, workers: usize, here: usize) -> Result<Vec<DLDevice>> {
    if options.devices.is_empty() {
        return Ok(vec![DLDevice::cpu(); workers]);
    }
    if options.devices.len() != workers {
        return Err(Error::value(format!(
            "devices holds {} devices for {workers} workers",
            options.devices.len()
        )));
    }
    for (w, device) in options.devices.iter().enumerate().take(here) {
        crate::device::backend(*device).map_err(|e| e.context(format_args!("devices[{w}]")))?;
    }
    Ok(options.devices.clone())
}

fn check_affinity(options: &SessionOptions, workers: usize) -> Result<()> {
    let given = options.cpu_affinity.len();
    if given != 0 && given != workers {
        return Err(Error::value(format!(
            "cpu_affinity holds {given} CPU ids for {workers} workers"
        )));
    }
    let cpus = available_cpus();
    match options
        .cpu_affinity
        .iter()
        .enumerate()
        .find(|(_, c)| c.is_some_and(|c| c >= cpus))
    {
        Some((w, cpu)) => Err(Error::value(format!(
            "cpu_affinity[{w}] is {}, out of range (this process may use {cpus} CPUs)",
            cpu.unwrap_or_default()
        ))),
        None => Ok(()),
    }
}

impl Session {
    /// What every kind of session checks before it starts a worker: the counts and the
    /// options (the devices of the first `here` workers, those on this machine, or of all);
    /// the number of groups and each worker's device.
    fn check_start(
        num_workers: i64,
        num_groups: i64,
        options: &SessionOptions,
        here: Option<usize>,
    ) -> Result<(usize, Vec<DLDevice>)> {
        let (num_workers, num_groups) = check_counts(num_workers, num_groups)?;
        let devices = check_devices(options, num_workers, here.unwrap_or(num_workers))?;
        check_affinity(options, num_workers)?;
        builtins::register();
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
        let ccl = CurrentCcl::default();
        let session = Self::assemble(workers, devices, num_groups, &options, None, ccl, None);
        session.threads_started(started)?;
        Ok(session)
    }

    /// Starts a worker thread on each of `devices`, workers `0 ..` of a session of
    /// `num_workers`; returns their links and the replies that say they run (see
    /// [`Session::threads_started`]).
    fn start_threads(
        devices: &[DLDevice],
        num_workers: usize,
        num_groups: usize,
        options: &SessionOptions,
    ) -> Result<(Vec<WorkerLink>, Vec<Reply<()>>)> {
        super::tvm_dispatch::install()?;
        let mut workers = Vec::with_capacity(devices.len());
        let mut started = Vec::with_capacity(devices.len());
        for (id, &device) in devices.iter().enumerate() {
            let shared = Arc::new(WorkerShared {
                exited: Exited::default(),
                signals: SignalsAt::Own(Signals::default()),
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
    fn threads_started(self: &Arc<Self>, started: Vec<Reply<()>>) -> Result<()> {
        for link in &self.workers {
            if let WorkerLink::Thread(link) = link {
                let _ = link.shared.session.set(Arc::downgrade(self));
            }
        }
        for ready in started {
            ready.wait(self.spin, None, || "starting a worker".into(), || Ok(()))??;
        }
        Ok(())
    }

    /// Starts a worker process on each of `devices`, workers `0 ..` of a session of
    /// `num_workers` on this machine; returns their links, their watcher and the record of
    /// whether the session is broken.
    #[cfg(not(loom))]
    fn start_processes(
        devices: &[DLDevice],
        num_workers: usize,
        num_groups: usize,
        options: &SessionOptions,
        ccl: &CurrentCcl,
    ) -> Result<(Vec<WorkerLink>, Watcher, Arc<Health>)> {
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
            ccl.clone(),
        )?;
        let health = links[0].session().health.clone();
        let links = links
            .into_iter()
            .map(|l| WorkerLink::Process(Box::new(l)))
            .collect();
        Ok((links, watcher, health))
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
        let ccl = CurrentCcl::default();
        let (links, watcher, health) =
            Self::start_processes(&devices, devices.len(), num_groups, &options, &ccl)?;
        let session = Self::assemble(
            links,
            devices,
            num_groups,
            &options,
            Some(watcher),
            ccl,
            Some(health),
        );
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
        let ccl = CurrentCcl::default();
        let here = &devices[..per_node];
        let (mut links, watcher, health, started) = if options.local_threads {
            let (links, started) = Self::start_threads(here, devices.len(), num_groups, &options)?;
            (links, None, Arc::new(Health::new(ccl.clone())), started)
        } else {
            let (links, watcher, health) =
                Self::start_processes(here, devices.len(), num_groups, &options, &ccl)?;
            (links, Some(watcher), health, Vec::new())
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
        let heartbeat = options.heartbeat.unwrap_or(node::HEARTBEAT);
        let joined = node::join_nodes(
            &listener,
            shape,
            options.timeout,
            heartbeat,
            &secret,
            &health,
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
        let session = Self::assemble(
            links,
            devices,
            num_groups,
            &options,
            watcher,
            ccl,
            Some(health),
        );
        session.threads_started(started)?;
        session
            .sync_all()
            .map_err(|e| e.context("starting the workers of the session's nodes"))?;
        Ok(session)
    }

    /// A session of started workers.
    fn assemble(
        workers: Vec<WorkerLink>,
        devices: Vec<DLDevice>,
        num_groups: usize,
        options: &SessionOptions,
        watcher: Option<Watcher>,
        ccl: CurrentCcl,
        health: Option<Arc<Health>>,
    ) -> Arc<Session> {
        let frees_wait = workers
            .iter()
            .all(|link| !matches!(link, WorkerLink::Thread(_)));
        Arc::new(Session {
            frees_wait,
            workers,
            devices,
            num_groups,
            registers: RegisterIds::default(),
            closed: AtomicBool::new(false),
            timeout: options.timeout,
            spin: options.spin,
            ccl,
            frees: Mutex::new(Vec::new()),
            has_frees: AtomicBool::new(false),
            watcher,
            ccl_setup: Mutex::new(()),
            upload_modules: options.upload_modules,
            health,
            node_ccl_inits: AtomicUsize::new(0),
        })
    }

    /// Whether the workers are processes.
    fn has_processes(&self) -> bool {
        self.watcher.is_some()
    }

    /// Stops workers started before a failure to start another.
    fn stop_partial(workers: &[WorkerLink]) {
        for (worker, link) in workers.iter().enumerate() {
            let _ = link.stop(worker, SpinPolicy::default(), None);
            fence(Ordering::SeqCst);
            link.wake_fenced();
            let _ = link.join(worker, None, None);
        }
    }

    pub fn num_workers(&self) -> usize {
        self.workers.len()
    }

    pub fn worker_device(&self, worker: usize) -> DLDevice {
        self.devices[worker]
    }

    pub fn num_groups(&self) -> usize {
        self.num_groups
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Checks a worker index from C.
    pub fn worker_index(&self, worker: i64) -> Result<usize> {
        usize::try_from(worker)
            .ok()
            .filter(|&w| w < self.workers.len())
            .ok_or_else(|| {
                Error::index(format!(
                    "worker {worker} out of range (session has {} workers)",
                    self.workers.len()
                ))
            })
    }

    fn deadline(&self) -> Option<Instant> {
        self.timeout.map(|t| Instant::now() + t)
    }

    /// Fails with `SessionClosed` after shutdown.
    pub fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(closed_error());
        }
        // A session whose worker process or node died is broken: everything fails with that
        // cause (worker 0's link may see its own death before anyone recorded it).
        if let Some(health) = &self.health {
            health.check()?;
        }
        if self.has_processes() {
            self.alive(0)?;
        }
        Ok(())
    }

    fn alive(&self, worker: usize) -> Result<()> {
        self.workers[worker].alive(worker)
    }

    /// Queues a message for `worker` without waking it.
    fn push(&self, worker: usize, message: Message) -> Result<()> {
        self.workers[worker].push(message, self.spin, self.deadline(), || self.alive(worker))
    }

    /// Wakes the sleeping workers among `workers` after one fence for all the pushes before.
    fn wake(&self, workers: impl Iterator<Item = usize>) {
        fence(Ordering::SeqCst);
        for worker in workers {
            self.workers[worker].wake_fenced();
        }
    }

    fn targets(&self, target: Target) -> std::ops::Range<usize> {
        match target {
            Target::All => 0..self.workers.len(),
            Target::One(worker) => worker..worker + 1,
        }
    }

    /// Queues `message()` for every targeted worker and wakes those that sleep.
    ///
    /// Nothing here orders sends against a concurrent shutdown: a message queued after the
    /// final `Shutdown` is never run, and its waiter learns so from the worker's exit.
    fn run(&self, target: Target, message: impl Fn() -> Message) -> Result<()> {
        self.check_open()?;
        self.queue_frees()?;
        let pushed = self.push_range(self.targets(target), message, &[]);
        self.wake(self.targets(target));
        pushed
    }

    /// [`Session::run`] of a call for every worker: the frees waiting for a send ride on it,
    /// one message per worker for both.
    fn run_call_on_all(&self, call: impl Fn() -> Message) -> Result<()> {
        self.check_open()?;
        let kills = self.take_frees();
        let all = 0..self.workers.len();
        let pushed = self.push_range(all.clone(), call, &kills);
        self.settle_frees(kills, pushed.is_ok());
        self.wake(all);
        pushed
    }

    /// Queues `message()` for the workers of `range` without waking them, after `kills`
    /// (registers they empty first; only a call takes them).
    fn push_range(
        &self,
        range: std::ops::Range<usize>,
        message: impl Fn() -> Message,
        kills: &[Reg],
    ) -> Result<()> {
        link::push_to(
            &self.workers,
            range,
            message,
            kills,
            self.spin,
            self.deadline(),
            |w| self.alive(w),
        )
    }

    fn store(&self, target: Target, reg: Reg, value: Any, name: Option<Arc<str>>) -> Result<()> {
        let store = Arc::new(Store { reg, value, name });
        self.run(target, || Message::Store(store.clone()))
    }

    /// Waits for a worker's reply.
    fn wait<T>(
        &self,
        worker: usize,
        reply: &Reply<T>,
        what: &str,
        deadline: Option<Instant>,
    ) -> Result<T> {
        self.workers[worker].wait(
            reply,
            self.spin,
            deadline,
            || format!("{what} on worker {worker}"),
            || self.alive(worker),
        )
    }

    /// Sends a request that carries `reply` to one worker and waits for the answer.
    fn request<T>(
        &self,
        worker: usize,
        what: &str,
        make: impl FnOnce(Reply<T>) -> Message,
    ) -> Result<T> {
        self.request_with(worker, what, Reply::new(Completion::new()), make)
    }

    fn request_with<T>(
        &self,
        worker: usize,
        what: &str,
        reply: Reply<T>,
        make: impl FnOnce(Reply<T>) -> Message,
    ) -> Result<T> {
        self.check_open()?;
        self.queue_frees()?;
        self.push(worker, make(reply.clone()))?;
        self.wake(worker..worker + 1);
        self.wait(worker, &reply, what, self.deadline())
    }

    pub(super) fn check_owner(
        self: &Arc<Self>,
        dref: &DRef,
        name: impl std::fmt::Display,
    ) -> Result<()> {
        if Arc::ptr_eq(dref.session(), self) {
            Ok(())
        } else {
            Err(Error::value(format!(
                "`{name}` is a DRef of another session"
            )))
        }
    }

    /// Resolves a global function now (a missing name is a `KeyError` here, not later on the
    /// workers) and stores it in a new register on every worker.
    pub fn get_global_func(self: &Arc<Self>, name: &str) -> Result<DRef> {
        if self.is_closed() {
            return Err(closed_error());
        }
        super::tvm_dispatch::install()?;
        let name: Arc<str> = name.into();
        // A function object cannot cross to a worker in another process: each looks it up.
        if self
            .workers
            .iter()
            .any(|w| !matches!(w, WorkerLink::Thread(_)))
        {
            return self.get_global_func_of_workers(name);
        }
        let function = registry::get_global(&name)?;
        let dref = DRef::new(self.clone(), self.registers.allocate(), Some(name.clone()));
        self.store(Target::All, dref.reg(), function.into(), Some(name))?;
        Ok(dref)
    }

    /// [`Session::get_global_func`] for sessions with workers in other processes: every worker
    /// looks the name up in its own registry.
    fn get_global_func_of_workers(self: &Arc<Self>, name: Arc<str>) -> Result<DRef> {
        self.look_up(name, "looking up a global function", |reg, name, reply| {
            Message::GetGlobalFunc(Box::new(GlobalLookup { reg, name, reply }))
        })
    }

    /// A new register on every worker holding the function `name` each worker finds itself, by
    /// the lookup `make` sends it with the register, the name and the reply: all asked at once,
    /// and a worker that finds nothing fails the call (the register is freed again).
    pub(super) fn look_up(
        self: &Arc<Self>,
        name: Arc<str>,
        what: &str,
        make: impl Fn(Reg, Arc<str>, Reply<()>) -> Message,
    ) -> Result<DRef> {
        self.check_open()?;
        self.queue_frees()?;
        let dref = DRef::new(self.clone(), self.registers.allocate(), Some(name.clone()));
        self.ask_workers(0..self.workers.len(), what, |reply| {
            make(dref.reg(), name.clone(), reply)
        })?;
        Ok(dref)
    }

    /// Argument `position` of a call, as the workers will get it (errors name it `args[i]`).
    fn encode(self: &Arc<Self>, position: usize, arg: &AnyView<'_>) -> Result<Arg> {
        if let Some(dref) = DRef::from_view(arg) {
            self.check_owner(&dref, format_args!("args[{position}]"))?;
            return Ok(Arg::Register(dref.reg()));
        }
        arg.to_owned()
            .map(Arg::Value)
            .map_err(|e| e.context(format_args!("`args[{position}]`")))
    }

    /// Calls the function in `func` with `args` on the target workers; DRef arguments become
    /// each worker's register value. Returns at once with a DRef to the results.
    pub fn call(
        self: &Arc<Self>,
        target: Target,
        func: &DRef,
        args: &[AnyView<'_>],
    ) -> Result<DRef> {
        self.check_owner(func, "func")?;
        self.call_register(target, func.reg(), args)
    }

    /// Calls `here.0` with the arguments `here.1` on the workers of this machine and `there.0`
    /// with `there.1` on the workers of other nodes, into one register: a call whose arguments
    /// differ by machine (a module loaded from its path here and from its upload there).
    #[cfg(not(loom))]
    pub(super) fn call_by_machine(
        self: &Arc<Self>,
        here: (&DRef, &[AnyView<'_>]),
        there: (&DRef, &[AnyView<'_>]),
    ) -> Result<DRef> {
        self.check_owner(here.0, "func")?;
        self.check_owner(there.0, "func")?;
        let (here_args, there_args) = (self.encode_args(here.1)?, self.encode_args(there.1)?);
        self.check_open()?;
        let kills = self.take_frees();
        let all = 0..self.workers.len();
        let local = all
            .clone()
            .find(|&w| matches!(self.workers[w], WorkerLink::Node(_)))
            .unwrap_or(all.end);
        let out = DRef::new(self.clone(), self.registers.allocate(), None);
        let call = |func: &DRef, args: &Option<Arc<[Arg]>>| Message::Call {
            func: func.reg(),
            out: out.reg(),
            args: args.clone(),
        };
        let pushed = self
            .push_range(0..local, || call(here.0, &here_args), &kills)
            .and_then(|()| self.push_range(local..all.end, || call(there.0, &there_args), &kills));
        self.settle_frees(kills, pushed.is_ok());
        self.wake(all);
        pushed.map(|()| out)
    }

    /// Whether `load_module` ships modules to the session's other nodes.
    pub(super) fn uploads_modules(&self) -> bool {
        self.upload_modules
    }

    /// Sends `module` (the bytes of a module file) to every other node of the session, which
    /// keeps it under its SHA-256; returns that hash in hex.
    #[cfg(not(loom))]
    pub(super) fn upload(&self, module: &[u8]) -> Result<String> {
        let hash = node::hash(module);
        for (node, first) in self.nodes() {
            node.alive(first)?;
            node.upload(&hash, module)?;
        }
        Ok(node::hex(&hash))
    }

    /// The session's other nodes, by rank, each with its first worker.
    #[cfg(not(loom))]
    fn nodes(&self) -> Vec<(&Arc<node::NodeConnection>, usize)> {
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
    fn init_gloo(self: &Arc<Self>) -> Result<()> {
        let nodes = self.nodes();
        let here = nodes[0].0.addresses().1;
        let hosts: Vec<String> = std::iter::once(here)
            .chain(nodes.iter().map(|(node, _)| node.addresses().0))
            .map(|ip| ip.to_string())
            .collect();
        let timeout_ms = self.timeout.map_or(-1, |t| t.as_millis() as i64);
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
        let set_up = self.open_gloo(&hosts, timeout_ms, area, stage);
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
    fn open_gloo(
        self: &Arc<Self>,
        hosts: &[String],
        timeout_ms: i64,
        area: i64,
        stage: i64,
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
        self.sync_all()
    }

    /// `func` of this session bound to `target`, for calls that repeat: [`BoundCall::call`] is
    /// [`Session::call`] without checking the target and the function again.
    pub fn bind(self: &Arc<Self>, target: Target, func: DRef) -> Result<BoundCall> {
        self.check_open()?;
        self.check_owner(&func, "func")?;
        if let Target::One(worker) = target {
            self.worker_index(worker as i64)?;
        }
        Ok(BoundCall { target, func })
    }

    /// The arguments of a call, as the workers will get them (one `Arc` shared by all).
    fn encode_args(self: &Arc<Self>, args: &[AnyView<'_>]) -> Result<Option<Arc<[Arg]>>> {
        if args.is_empty() {
            return Ok(None);
        }
        let args = args
            .iter()
            .enumerate()
            .map(|(i, a)| self.encode(i, a))
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(args.into()))
    }

    /// [`Session::call`] for a function of this session, in register `func`.
    fn call_register(
        self: &Arc<Self>,
        target: Target,
        func: Reg,
        args: &[AnyView<'_>],
    ) -> Result<DRef> {
        if self.is_closed() {
            return Err(closed_error());
        }
        let args = self.encode_args(args)?;
        let out = DRef::new(self.clone(), self.registers.allocate(), None);
        let reg = out.reg();
        let call = || Message::Call {
            func,
            out: reg,
            args: args.clone(),
        };
        match target {
            Target::All => self.run_call_on_all(call)?,
            Target::One(_) => self.run(target, call)?,
        }
        Ok(out)
    }

    /// [`Session::call_register`] to the thread of `worker` alone, if its queue has room now for
    /// the call and for the frees waiting for a send (which it carries when `worker` is the
    /// session's only one, and waits for otherwise); `Ok(None)`, having queued no call,
    /// otherwise.
    fn try_call_register(
        self: &Arc<Self>,
        worker: usize,
        func: Reg,
        args: &[AnyView<'_>],
    ) -> Result<Option<DRef>> {
        self.check_open()?;
        let args = self.encode_args(args)?;
        // Waiting frees go first, to every worker: here only when this one is all of them.
        let kills = self.take_frees();
        let link = &self.workers[worker];
        let told = (kills.is_empty() || self.workers.len() == 1)
            && kills
                .iter()
                .all(|&reg| link.try_push(Message::Kill(reg)).is_ok());
        let out = self.registers.allocate();
        let called = told && link.try_push(Message::Call { func, out, args }).is_ok();
        // A free queued twice empties an empty register: harmless, as it is not reused yet.
        self.settle_frees(kills, told);
        if !called {
            self.registers.release(out); // no worker saw it
            return Ok(None);
        }
        self.wake(worker..worker + 1);
        Ok(Some(DRef::new(self.clone(), out, None)))
    }

    /// Waits until everything sent to `worker` so far has run; reports the first failure there
    /// since the last wait.
    pub fn sync_worker(&self, worker: usize) -> Result<()> {
        let link = &self.workers[worker];
        if link.in_sync() {
            return self.synced(worker..worker + 1);
        }
        // The frees first: the sync's frame then comes right after the mark.
        self.check_open()?;
        self.queue_frees()?;
        let mark = link.sync_mark();
        SYNC_REPLY.with(|cached| {
            let reply = Completion::reuse(cached.take());
            let result = self.request_with(worker, "sync", reply.clone(), Message::Sync);
            cached.set(Some(reply));
            result
        })?;
        if let Some(mark) = mark {
            link.synced_after(mark);
        }
        Ok(())
    }

    /// Sends a sync to every worker first, then collects the replies (fan-out), all within one
    /// timeout. Failures of several workers are reported together, the first one's kind first.
    pub fn sync_all(&self) -> Result<()> {
        if self.workers.iter().all(WorkerLink::in_sync) {
            return self.synced(0..self.workers.len());
        }
        // The frees first: each sync's frame then comes right after its mark.
        self.check_open()?;
        self.queue_frees()?;
        // Only the workers that are not in sync are asked, each with its mark (a node's worker
        // has one): a worker on a stalled node that is in sync holds up nobody's sync.
        let asked: Vec<(usize, Option<u64>)> = (0..self.workers.len())
            .filter(|&worker| !self.workers[worker].in_sync())
            .map(|worker| (worker, self.workers[worker].sync_mark()))
            .collect();
        self.ask_workers(
            asked.iter().map(|&(worker, _)| worker),
            "sync",
            Message::Sync,
        )?;
        for (worker, mark) in asked {
            if let Some(mark) = mark {
                self.workers[worker].synced_after(mark);
            }
        }
        self.synced(0..self.workers.len())
    }

    /// A sync of `workers`, found in sync without a message (frees waiting for a send go with
    /// the next one): whether the session is open and the workers are still there.
    fn synced(&self, workers: std::ops::Range<usize>) -> Result<()> {
        self.check_open()?;
        workers
            .into_iter()
            .try_for_each(|worker| self.alive(worker))
    }

    /// Sends the request `make` builds to each of `workers` first, then collects the replies
    /// (fan-out), all within one timeout; the caller has sent the frees waiting for a send.
    /// Failures of several workers are reported together, the first one's kind first, each
    /// cause once.
    fn ask_workers(
        &self,
        workers: impl IntoIterator<Item = usize>,
        what: &str,
        make: impl Fn(Reply<()>) -> Message,
    ) -> Result<()> {
        let mut replies = Vec::new();
        let pushed = workers.into_iter().try_for_each(|worker| {
            let reply: Reply<()> = Reply::new(Completion::new());
            self.push(worker, make(reply.clone()))?;
            replies.push((worker, reply));
            Ok(())
        });
        self.wake(replies.iter().map(|&(worker, _)| worker));
        pushed?;
        let deadline = self.deadline();
        let errors: Vec<Error> = replies
            .iter()
            .filter_map(|(worker, reply)| self.wait(*worker, reply, what, deadline).err())
            .collect();
        // Every worker's report is consumed here, so all of them go into the one error.
        let mut errors = errors.into_iter();
        match errors.next() {
            None => Ok(()),
            Some(first) => Err(errors.fold(first, |mut all, next| {
                if !all.message.contains(&next.message) {
                    all.message.push_str("; ");
                    all.message.push_str(&next.message);
                }
                all
            })),
        }
    }

    /// An owned copy of a register's value on one worker.
    pub fn get_register(&self, reg: Reg, worker: usize) -> Result<Any> {
        self.request(worker, "reading a register", |reply| Message::Get {
            reg,
            reply,
        })
    }

    /// Sets a register's value on one worker (ordered after earlier calls; returns at once).
    pub fn set_register(&self, reg: Reg, worker: usize, value: Any) -> Result<()> {
        // Fails (nothing queued) after shutdown, like every call.
        self.store(Target::One(worker), reg, value, None)
    }

    /// How many registers hold something on `worker`, after everything sent before.
    pub fn live_registers(&self, worker: usize) -> Result<usize> {
        self.request(worker, "counting registers", Message::CountLive)
    }

    /// Copies between a host buffer and the tensor in `dref` on worker 0; returns when done.
    /// Errors name `dref` as `name` (the argument that gave it).
    pub fn copy_worker0(
        self: &Arc<Self>,
        host: HostTensor,
        dref: &DRef,
        name: &'static str,
        direction: CopyDirection,
    ) -> Result<()> {
        self.check_owner(dref, name)?;
        self.check_open()?;
        self.queue_frees()?;
        let (reg, deadline) = (dref.reg(), self.deadline());
        if self.workers[0].copy_in_place(reg, &host, name, direction, self.spin, deadline)? {
            return Ok(());
        }
        self.request(0, "copy", |reply| Message::Copy {
            reg: dref.reg(),
            host: Box::new(HostCopy { host, name }),
            direction,
            reply,
        })
    }

    /// Frees a register on every worker (from a dropped DRef), after all earlier calls. Worker
    /// threads are told at once, where their queues have room; otherwise, and for workers
    /// reached through frames, the next send tells every worker before its own message (a
    /// call to every worker carries the frees in its own frame). This never waits: a DRef may
    /// be dropped by a thread the workers themselves wait for (a Python thread holding the
    /// interpreter lock that a worker's Python function needs).
    pub(crate) fn free_register(&self, reg: Reg) {
        if self.check_open().is_err() {
            return;
        }
        // A worker told here and again by the next send empties an empty register.
        if !self.frees_wait
            && self
                .workers
                .iter()
                .all(|link| link.try_push(Message::Kill(reg)).is_ok())
        {
            self.registers.release(reg);
            return;
        }
        self.frees
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(reg);
        self.has_frees.store(true, Ordering::SeqCst);
    }

    /// The frees waiting for a send, taken; [`Session::settle_frees`] settles them.
    fn take_frees(&self) -> Vec<Reg> {
        // A load first: the flag is clear on most sends.
        if !self.has_frees.load(Ordering::SeqCst) || !self.has_frees.swap(false, Ordering::SeqCst) {
            return Vec::new();
        }
        std::mem::take(&mut *self.frees.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Releases taken frees for reuse once every worker was `told`, or keeps them for the next
    /// send (a worker told twice empties an empty register).
    fn settle_frees(&self, kills: Vec<Reg>, told: bool) {
        if told {
            kills
                .into_iter()
                .for_each(|reg| self.registers.release(reg));
        } else if !kills.is_empty() {
            self.frees
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend(kills);
            self.has_frees.store(true, Ordering::SeqCst);
        }
    }

    /// Queues the frees waiting for a send to every worker, waiting for room as sends do.
    fn queue_frees(&self) -> Result<()> {
        let kills = self.take_frees();
        if kills.is_empty() {
            return Ok(());
        }
        // One message per free for all the workers (one per node for a node's workers).
        let all = 0..self.workers.len();
        let queued = kills
            .iter()
            .try_for_each(|&reg| self.push_range(all.clone(), || Message::Kill(reg), &[]));
        self.settle_frees(kills, queued.is_ok());
        queued
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
        // A worker waiting for work of its NCCL communicators (a collective a peer never
        // joined) sees the count change, aborts them and gets to the new ones: the way back
        // after a sync that timed out.
        for link in &self.workers {
            link.note_new_ccl();
        }
        #[cfg(not(loom))]
        if across_nodes && backend == "cpu" {
            return self.init_gloo();
        }
        let (init, args, cpu) = if backend == "nccl" {
            // Workers can share a GPU only on one machine.
            let per_machine = workers / machines;
            let args =
                ccl::nccl::init_args(&self.devices, per_machine, self.num_groups, device_ids)?;
            (
                "runtime.disco.nccl.init_ccl_per_worker",
                args.to_vec(),
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
        self.keep_ccl(cpu.map(|(fresh, _)| fresh));
        Ok(())
    }

    /// Keeps `fresh` as the CPU communicator the workers hold (shutdown and a worker's death
    /// break its waits), ending the one it replaces.
    fn keep_ccl(&self, fresh: Option<Arc<CpuCcl>>) {
        let old = std::mem::replace(
            &mut *self.ccl.lock().unwrap_or_else(PoisonError::into_inner),
            fresh,
        );
        if let Some(old) = old {
            old.abort(&Error::runtime(
                "the communicator was replaced by a later init_ccl",
            ));
        }
    }

    /// A new CPU communicator between the workers: staged for worker threads to take, or laid
    /// out in the arena of worker processes.
    fn new_cpu_ccl(&self) -> Result<(Arc<CpuCcl>, CclPlace)> {
        #[cfg(not(loom))]
        if let Some(links) = self.workers[0].process_session() {
            let fresh = links.new_ccl(self.num_groups, self.timeout, self.spin)?;
            let area = fresh.area().expect("a communicator in the arena");
            return Ok((fresh, CclPlace::Arena(area)));
        }
        let fresh = Arc::new(CpuCcl::new(
            self.workers.len(),
            self.num_groups,
            self.timeout,
            self.spin,
        ));
        let stage = ccl::stage(fresh.clone());
        Ok((fresh, CclPlace::Staged(stage)))
    }

    /// Stops every worker after the work already queued and joins their threads. Later calls
    /// fail with `SessionClosed`; shutting down again does nothing.
    pub fn shutdown(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        // A collective some worker never joins would keep its worker from ever reading the
        // shutdown: break the communicator so its waits end. A worker waiting for NCCL work on
        // its GPU sees its flag, aborts its communicators and stops waiting.
        for link in &self.workers {
            link.mark_stopping();
        }
        if let Some(ccl) = self
            .ccl
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            ccl.abort(&Error::new(
                ErrorKind::SessionClosed,
                "the session was shut down while this collective waited for its workers",
            ));
        }
        // Worker processes get one grace period, together; those of a broken session none,
        // since nothing they still do can be seen.
        let broken = self.health.as_ref().is_some_and(|h| h.check().is_err())
            || (self.has_processes() && self.alive(0).is_err());
        let deadline = match self.deadline() {
            _ if broken => Some(Instant::now()),
            Some(deadline) => Some(deadline),
            None if self.has_processes() => Some(Instant::now() + link::PROCESS_GRACE),
            None => None,
        };
        let mut first = None;
        for (worker, link) in self.workers.iter().enumerate() {
            if let Err(error) = link.stop(worker, self.spin, deadline) {
                first.get_or_insert(error);
            }
        }
        self.wake(0..self.workers.len());
        let me = worker::current().map(|info| info.id);
        for (worker, link) in self.workers.iter().enumerate() {
            // What is left of a broken session is ended, not waited for.
            if let Err(error) = link.join(worker, deadline, me)
                && !broken
            {
                first.get_or_insert(error);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}
