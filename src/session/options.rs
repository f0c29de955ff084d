//! How a session is set up: its options, and the checks of counts, devices and CPUs that
//! every kind of session makes before it starts a worker.

use std::time::Duration;

use super::worker_env::WorkerThreads;
use crate::abi::DLDevice;
use crate::channel::SpinPolicy;
use crate::channel::deadline::timeout_from_signed_ms;
use crate::device::cpu::available_cpus;
use crate::object::{Error, Result};

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
        let timeout = timeout_from_signed_ms(timeout_ms, "timeout_ms")?;
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

pub(super) fn check_counts(num_workers: i64, num_groups: i64) -> Result<(usize, usize)> {
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
pub(super) fn check_devices(
    options: &SessionOptions,
    workers: usize,
    here: usize,
) -> Result<Vec<DLDevice>> {
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

pub(super) fn check_affinity(options: &SessionOptions, workers: usize) -> Result<()> {
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
