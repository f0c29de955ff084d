//! Sessions whose workers are processes: starting and watching them, the controller's link to
//! each, and the loop a worker process runs (beside the link, as the two speak one protocol
//! over the same rings and arena).

mod link;
mod serve;

use std::sync::{Arc, OnceLock};

pub(crate) use crate::os::DeathWatch;
pub(crate) use crate::worker::arena::CCL_AREAS;
pub(crate) use link::ProcessLink;
pub(crate) use link::ProcessSet;
pub(crate) use serve::Here;
pub(crate) use serve::serve;

use super::options::SessionOptions;
use super::state::SessionState;
use super::worker_env::{check_imports, worker_environment};
use crate::abi::DLDevice;
use crate::ccl::CpuCcl;
use crate::channel::ring::{Consumer, Producer, init_ring, ring_bytes};
use crate::channel::shm::SharedMemory;
use crate::object::{Error, Result};
use crate::os::{spawn, worker_program};
use crate::worker::WorkerInfo;
use crate::worker::arena::Arena;
use serve::WorkerArgs;

/// Data bytes of each ring between the controller and a worker process (one each way). A frame
/// (a call's arguments, a tensor copied to or from worker 0) must fit in one.
pub(crate) const RING_CAPACITY: usize = 8 << 20;

/// Bytes of one communicator's records in the arena of `workers` worker processes.
pub(crate) fn ccl_bytes(workers: usize) -> Result<usize> {
    CpuCcl::shared_bytes(workers)
        .ok_or_else(|| Error::value(format!("a communicator of {workers} workers is too large")))
}

/// Starts one worker process per device of `devices` (the workers `here` of a session of
/// `num_workers`; on a node, `uploads` is where it keeps the modules uploaded to it), each with
/// its rings and the environment the options ask for, and a watcher that records the death of
/// any of them in its link and breaks the session (`state`) with it.
pub(crate) fn start_workers(
    num_workers: usize,
    num_groups: usize,
    options: &SessionOptions,
    devices: &[DLDevice],
    (here, uploads): (Here, Option<&std::path::Path>),
    state: Arc<SessionState>,
) -> Result<(Vec<ProcessLink>, DeathWatch)> {
    let program = worker_program(options.worker_program.as_deref())?;
    check_imports(&options.worker_imports)?;
    // Only nodes keep uploads; the controller, not a node, tells the user what workers get.
    let env = worker_environment(
        &options.worker_imports,
        options.threads_per_worker,
        devices.len(),
        uploads.is_none(),
    );
    let half = ring_bytes(RING_CAPACITY)?;
    let mut links = Vec::with_capacity(devices.len());
    let session = Arc::new(ProcessSet {
        state,
        arena: Arc::new(Arena::create(devices.len(), ccl_bytes(devices.len())?)?),
    });
    for (local, &device) in devices.iter().enumerate() {
        let id = here.first + local;
        let mut memory = SharedMemory::create(&format!("discovm-worker-{id}"), 2 * half)?;
        init_ring(&mut memory, 0, RING_CAPACITY)?;
        init_ring(&mut memory, half, RING_CAPACITY)?;
        let args = WorkerArgs {
            info: WorkerInfo {
                id,
                num_workers,
                num_groups,
                device,
            },
            spin: options.spin,
            cpu: options.cpu_affinity.get(local).copied().flatten(),
            timeout: options.timeout,
            ring_capacity: RING_CAPACITY,
            here,
            uploads: uploads.map(|dir| dir.to_string_lossy().into_owned()),
        };
        let command_line = options.worker_args.iter().cloned().chain(args.to_args());
        let inherit = [memory.fd(), session.arena.fd()];
        let child = spawn(&program, command_line, &inherit, &env)
            .map_err(|e| e.context(format_args!("starting worker {id}")))?;
        let memory = Arc::new(memory);
        let requests = Producer::attach(memory.clone(), 0)?;
        let replies = Consumer::attach(memory, half)?;
        let death = Arc::new(OnceLock::new());
        links.push(ProcessLink::new(
            id,
            local,
            child,
            requests,
            replies,
            death,
            session.clone(),
        ));
    }
    let deaths: Vec<(Arc<OnceLock<Error>>, i32)> =
        links.iter().map(|l| (l.death(), l.pid())).collect();
    let wakers: Vec<_> = links.iter().map(ProcessLink::wakers).collect();
    // The watcher counts the workers here from 0.
    let watcher = DeathWatch::new(move |worker, cause| {
        if let Some((death, pid)) = deaths.get(worker) {
            // A worker that ends after the session told it to stop has not broken it.
            session
                .state
                .record_death(death, cause.worker_error(here.first + worker, *pid));
            // Every wait on the session fails now: wake those parked on any worker's rings.
            for waiting in &wakers {
                waiting.wake_all();
            }
        }
    })?;
    for (worker, link) in links.iter().enumerate() {
        watcher.watch(worker, link.child());
    }
    Ok((links, watcher))
}
