//! Sessions: N worker threads driven by one controller (Disco's threaded session, with its
//! defects fixed: worker errors come back as values, missing functions fail at once, calls after
//! shutdown fail at once, waits can time out).

use std::ffi::c_char;
use std::mem::ManuallyDrop;
use std::sync::Arc;

use super::dref::{dref_arg, dref_handle, dvm_dref};
use super::value::count_slice;
use super::{boundary, boundary_or, c_str, dvm_status, handle_ref, non_null, write_out};
use crate::abi::{DLDevice, DLTensor, DVMAny};
use crate::channel::deadline::timeout_from_signed_ms;
use crate::device::cpu::HostTensor;
use crate::object::{AnyView, ObjectRef};
use crate::session::{
    CopyDirection, DRef, Session, SessionCell, SessionOptions, Target, WorkerThreads,
    session_handle,
};

/// A threaded session (an object; `dvm_object_*` work on it).
#[allow(non_camel_case_types)]
pub struct dvm_session {
    _opaque: [u8; 0],
}

/// Session options. A zero-initialised struct (`dvm_session_options o = {0};`) gives the
/// defaults; passing NULL does too.
#[allow(non_camel_case_types)]
#[repr(C)]
pub struct dvm_session_options {
    /// Upper bound of every wait (sync, copy, register read, room in a full queue, shutdown), in
    /// milliseconds; a wait that runs past it fails with `TimeoutError`. 0: no bound.
    pub timeout_ms: i64,
    /// How long waiting threads spin, then yield, before they park, in microseconds. 0: the
    /// default (200 µs, best measured for more workers than cores); negative: park at once.
    pub spin_us: i32,
    /// Entries in `cpu_affinity`: 0 (no pinning) or the number of workers.
    pub num_cpu_affinity: i32,
    /// The CPU each worker is pinned to; -1 leaves a worker unpinned.
    pub cpu_affinity: *const i32,
    /// Entries in `devices`: 0 (every worker on the CPU) or the number of workers.
    pub num_devices: i32,
    /// The device of each worker: `kDLCPU` device 0, or a GPU the CUDA driver found
    /// (`kDLCUDA`, id below `dvm_device_count(kDLCUDA)`); the worker binds it on its thread.
    pub devices: *const DLDevice,
    /// Process sessions: the program each worker process runs (NULL: `$DISCOVM_WORKER`, else
    /// `discovm-worker` next to this library, in `../bin/` or the same directory). Read only
    /// by `dvm_session_new_process`, so programs built against a header without it stay
    /// correct with `dvm_session_new_threaded`.
    pub worker_program: *const c_char,
    /// Sessions across machines: the secret every node must prove it holds (NULL:
    /// `$DISCOVM_SESSION_TOKEN`; without either, nodes may join from the loopback interface
    /// only). Read only by `dvm_session_new_socket`, as are the fields after it up to
    /// `local_threads`.
    pub session_token: *const c_char,
    /// Sessions across machines: how long a silent node counts as alive, in milliseconds
    /// (0: 2000).
    pub heartbeat_ms: i64,
    /// Sessions across machines: nonzero makes `dvm_session_load_module` send the module's
    /// bytes to the other nodes, which load their own copy, kept under its SHA-256 in a private
    /// directory removed when the node ends (0: each node loads the path it is given).
    pub upload_modules: i32,
    /// Sessions across machines: nonzero makes this machine's workers threads of this process
    /// (0: worker processes).
    pub local_threads: i32,
    /// Process sessions and sessions across machines: the threads each worker process's OpenMP
    /// and BLAS libraries may start (`OMP_NUM_THREADS`, `OPENBLAS_NUM_THREADS` and
    /// `MKL_NUM_THREADS`, set when none of them is set here). 0: the machine's cores divided by
    /// its workers, at least 1 (said once on stderr); -1: leave the environment as it is; n > 0:
    /// n. Nodes apply it to their own cores and workers.
    pub threads_per_worker: i32,
}

/// # Safety
/// The arrays hold the counts they claim.
unsafe fn session_options(opts: *const dvm_session_options) -> crate::Result<SessionOptions> {
    let Some(opts) = std::ptr::NonNull::new(opts.cast_mut()) else {
        return Ok(SessionOptions::default());
    };
    // SAFETY: the caller vouches for the struct.
    let opts = unsafe { opts.as_ref() };
    // SAFETY: the caller vouches for the arrays.
    let (cpus, devices) = unsafe {
        (
            count_slice(
                opts.cpu_affinity,
                opts.num_cpu_affinity,
                "cpu_affinity",
                "num_cpu_affinity",
            )?,
            count_slice(opts.devices, opts.num_devices, "devices", "num_devices")?,
        )
    };
    SessionOptions::from_values(
        opts.timeout_ms,
        opts.spin_us.into(),
        cpus.iter().map(|&cpu| cpu.into()),
        devices.to_vec(),
    )
}

/// The options of a process session: those of every session, the worker program and the
/// threads of each worker.
///
/// # Safety
/// As for [`session_options`]; `worker_program` is NULL or NUL-terminated.
pub(crate) unsafe fn process_options(
    opts: *const dvm_session_options,
) -> crate::Result<SessionOptions> {
    // SAFETY: as the caller promises.
    let mut options = unsafe { session_options(opts) }?;
    if let Some(opts) = std::ptr::NonNull::new(opts.cast_mut()) {
        // SAFETY: as the caller promises.
        let program = unsafe { opts.as_ref() }.worker_program;
        if !program.is_null() {
            // SAFETY: NUL-terminated, as the caller promises.
            options.worker_program = Some(unsafe { c_str(program, "worker_program") }?.to_owned());
        }
        // SAFETY: as the caller promises.
        let threads = unsafe { opts.as_ref() }.threads_per_worker;
        options.threads_per_worker = WorkerThreads::from_value(threads.into())?;
    }
    Ok(options)
}

/// The options of a session across machines: those of a process session, the secret and the
/// heartbeat.
///
/// # Safety
/// As for [`process_options`]; `session_token` is NULL or NUL-terminated.
pub(crate) unsafe fn socket_options(
    opts: *const dvm_session_options,
) -> crate::Result<SessionOptions> {
    // SAFETY: as the caller promises.
    let mut options = unsafe { process_options(opts) }?;
    if let Some(opts) = std::ptr::NonNull::new(opts.cast_mut()) {
        // SAFETY: as the caller promises.
        let opts = unsafe { opts.as_ref() };
        if !opts.session_token.is_null() {
            // SAFETY: NUL-terminated, as the caller promises.
            options.session_token =
                Some(unsafe { c_str(opts.session_token, "session_token") }?.to_owned());
        }
        options.upload_modules = opts.upload_modules != 0;
        options.local_threads = opts.local_threads != 0;
        options.heartbeat = timeout_from_signed_ms(opts.heartbeat_ms, "heartbeat_ms")?;
    }
    Ok(options)
}

/// The session behind a handle, lent for the call (`&session.0` is the session).
///
/// # Safety
/// `s` is NULL or a live object handle.
pub(crate) unsafe fn session_arg(
    s: *const dvm_session,
) -> crate::Result<ManuallyDrop<ObjectRef<SessionCell>>> {
    // SAFETY: as the caller promises.
    unsafe { handle_ref::<SessionCell, _>(s, "session", "a session") }
}

/// # Safety
/// As for [`session_arg`] and [`dref_arg`].
pub(crate) unsafe fn call_with(
    session: &Arc<Session>,
    target: Target,
    func: *const dvm_dref,
    args: *const DVMAny,
    num_args: i32,
    out: *mut *mut dvm_dref,
) -> crate::Result<()> {
    let out = non_null(out, "out")?;
    // SAFETY: NULL or a live handle, by contract.
    let func = unsafe { dref_arg(func, "func") }?;
    // SAFETY: the caller vouches for `num_args` values.
    let raw = unsafe { count_slice(args, num_args, "args", "num_args") }?;
    // SAFETY: the values outlive this call.
    let views = unsafe { AnyView::slice(raw.as_ptr(), raw.len()) };
    AnyView::validate_all(views, |i| format!("`args[{i}]`"))?;
    let result = session.call(target, &func, views)?;
    // SAFETY: checked non-NULL above.
    unsafe { write_out(out, dref_handle(result)) };
    Ok(())
}

/// Starts `num_workers` worker threads in `num_groups` groups of equal size.
///
/// Ownership: `*out` is a new reference; release it with `dvm_session_free` (which shuts the
/// session down once no DRef or worker handle keeps it alive).
/// Errors: `ValueError` if `num_workers` is not in 1..=1024, `num_groups` not in
/// 1..=num_workers, `num_workers % num_groups != 0`, or an option is malformed (a CPU id out of
/// range, array lengths that differ from `num_workers`); `DeviceUnavailable` for a device
/// without a backend.
/// Undefined: `opts` arrays with fewer entries than their counts.
/// Thread safety: any thread. The session may then be used from several threads at once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_session_new_threaded(
    num_workers: i32,
    num_groups: i32,
    opts: *const dvm_session_options,
    out: *mut *mut dvm_session,
) -> dvm_status {
    boundary(|| {
        start_into(out, || {
            // SAFETY: NULL or a valid options struct, by contract.
            let options = unsafe { session_options(opts) }?;
            Session::new_threaded(num_workers.into(), num_groups.into(), options)
        })
    })
}

/// Starts a session with `start` and writes its handle (a new reference) to `out`, which is
/// checked first.
pub(crate) fn start_into(
    out: *mut *mut dvm_session,
    start: impl FnOnce() -> crate::Result<Arc<Session>>,
) -> crate::Result<()> {
    let out = non_null(out, "out")?;
    let session = start()?;
    // SAFETY: checked non-NULL above.
    unsafe { write_out(out, session_handle(session).into_raw().as_ptr().cast()) };
    Ok(())
}

/// The number of workers, or -1 if `session` is not a session.
///
/// Undefined: `session` after its last release.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_session_num_workers(session: *const dvm_session) -> i32 {
    // SAFETY: NULL or a live handle, by contract.
    boundary_or(
        |_| -1,
        || Ok(unsafe { session_arg(session) }?.num_workers() as i32),
    )
}

/// Looks up a global function for use on the workers, as `dvm_func_get_global` does. The name
/// is resolved now, so a missing function fails here rather than later on the workers.
///
/// Ownership: `*out` is a new DRef; release it with `dvm_dref_free`.
/// Errors: `KeyError` naming `name` if no such global function exists; `SessionClosed` after
/// shutdown; `ValueError` for NULL arguments.
/// Undefined: `session` after its last release; `name` that is not
/// NUL-terminated.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_session_get_global_func(
    session: *mut dvm_session,
    name: *const c_char,
    out: *mut *mut dvm_dref,
) -> dvm_status {
    boundary(|| {
        let out = non_null(out, "out")?;
        // SAFETY: NULL or a live handle / NUL-terminated string, by contract.
        let (session, name) = unsafe { (session_arg(session)?, c_str(name, "name")?) };
        let dref = session.get_global_func(name)?;
        // SAFETY: checked non-NULL above.
        unsafe { write_out(out, dref_handle(dref)) };
        Ok(())
    })
}

/// Loads the shared library at `path` on every worker, after the calls sent before, and returns
/// at once with a DRef to the module on each. The library exports packed functions under
/// tvm-ffi's convention (`__tvm_ffi_<name>`, a `DVMSafeCall` called with a NULL handle), as
/// this library does; `dvm_session_module_func` reaches them. Loaded libraries stay loaded for
/// the rest of the process.
///
/// Ownership: `*out` is a new DRef; release it with `dvm_dref_free`.
/// Errors: `ValueError` naming `path` if it is not a file, or for NULL arguments;
/// `SessionClosed` after shutdown. A library a worker cannot load (not a shared library, or
/// with unresolved symbols) fails that worker's next wait with a `WorkerError` whose message
/// names the path and gives the loader's reason.
/// Undefined: `session` after its last release; `path` that is not NUL-terminated.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_session_load_module(
    session: *mut dvm_session,
    path: *const c_char,
    out: *mut *mut dvm_dref,
) -> dvm_status {
    boundary(|| {
        let out = non_null(out, "out")?;
        // SAFETY: NULL or a live handle / NUL-terminated string, by contract.
        let (session, path) = unsafe { (session_arg(session)?, c_str(path, "path")?) };
        let dref = session.load_module(path)?;
        // SAFETY: checked non-NULL above.
        unsafe { write_out(out, dref_handle(dref)) };
        Ok(())
    })
}

/// The function `name` of the module `module` holds on every worker (a DRef from
/// `dvm_session_load_module`, or a tvm-ffi module that a worker function returned), after the
/// calls sent before. Every worker looks it up in its own module, all asked at once, so a
/// missing function fails here rather than later on the workers; returns once every worker has
/// it, with a DRef to the function on each, ready for `dvm_session_call`.
///
/// Ownership: `module` is borrowed; `*out` is a new DRef; release it with `dvm_dref_free`.
/// Errors: `KeyError` naming the function and the module (its path and the symbol
/// `__tvm_ffi_<name>`, for a module `dvm_session_load_module` loaded) if a worker's module
/// lacks it; `WorkerError` with the loader's reason if the module failed to load on a worker;
/// `TypeError` if `module` is not a DRef, or a worker holds no module in it; `ValueError` for
/// NULL arguments, an empty `name` or a `module` of another session; `SessionClosed` after
/// shutdown. Failures of earlier calls are not reported here but by the next wait.
/// Undefined: `session` or `module` after their last release; `name` that is not
/// NUL-terminated.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_session_module_func(
    session: *mut dvm_session,
    module: *const dvm_dref,
    name: *const c_char,
    out: *mut *mut dvm_dref,
) -> dvm_status {
    boundary(|| {
        let out = non_null(out, "out")?;
        // SAFETY: NULL or live handles / a NUL-terminated string, by contract.
        let (session, module, name) = unsafe {
            (
                session_arg(session)?,
                dref_arg(module, "module")?,
                c_str(name, "name")?,
            )
        };
        let dref = session.module_func(&module, name)?;
        // SAFETY: checked non-NULL above.
        unsafe { write_out(out, dref_handle(dref)) };
        Ok(())
    })
}

/// Broadcasts a call of the function in `func` to every worker. Arguments are copied once and
/// shared by all workers; a DRef argument becomes each worker's own register value. Returns at
/// once; failures on the workers are reported by the next wait (sync, copy, register read).
///
/// Ownership: arguments are borrowed; `*out` is a new DRef to the results.
/// Errors: `ValueError` for NULL handles, a DRef of another session, or a malformed argument
/// (as for `dvm_func_call`); `TypeError` for an argument that cannot be kept (a borrowed
/// `DLTensor*`: pass a Tensor object), an unknown type index or an object of another type than
/// its index says (errors name the argument `args[i]`); `SessionClosed` after shutdown.
/// Undefined: `args` with fewer than `num_args` values, or values whose pointers do
/// not point at what their type indices say; handles after their last release.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_session_call(
    session: *mut dvm_session,
    func: *const dvm_dref,
    args: *const DVMAny,
    num_args: i32,
    out: *mut *mut dvm_dref,
) -> dvm_status {
    boundary(|| {
        // SAFETY: NULL or a live handle, by contract.
        let session = unsafe { session_arg(session) }?;
        // SAFETY: as documented above.
        unsafe { call_with(&session.0, Target::All, func, args, num_args, out) }
    })
}

/// Waits until every call sent so far to `worker` has finished.
///
/// Errors: `IndexError` if `worker` is out of range; `WorkerError` if a call on that worker
/// failed since the last wait (the message names the worker, the function and the cause);
/// `TimeoutError` past the session's timeout; `SessionClosed` after shutdown.
/// Undefined: `session` after its last release.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_session_sync_worker(
    session: *mut dvm_session,
    worker: i32,
) -> dvm_status {
    boundary(|| {
        // SAFETY: NULL or a live handle, by contract.
        let session = unsafe { session_arg(session) }?;
        session.sync_worker(session.worker_index(worker.into())?)
    })
}

/// Waits until every call sent so far to every worker has finished (syncs go out to all
/// workers first, then the replies are collected).
///
/// Errors: as `dvm_session_sync_worker`; the first failing worker's error is reported.
/// Undefined: `session` after its last release.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_session_sync_all(session: *mut dvm_session) -> dvm_status {
    // SAFETY: NULL or a live handle, by contract.
    boundary(|| unsafe { session_arg(session) }?.sync_all())
}

/// Sets up collectives between the session's workers, so that worker-side functions can call
/// `runtime.disco.allreduce`, `allgather`, `broadcast_from_worker0`, `scatter_from_worker0`,
/// `gather_to_worker0`, `recv_from_worker0`, `send_to_worker` / `recv_from_worker`,
/// `send_to_next_group` / `recv_from_prev_group` and `barrier` (Disco's names and arguments).
///
/// `backend` is `"cpu"`: an in-process shared-memory communicator for the whole session and
/// one per group (every worker must be on the CPU; `device_ids` may be NULL with `n` 0, or hold
/// one entry per worker). A join waits at most the session's `timeout_ms` for every worker;
/// without a timeout it waits until shutdown, which breaks any collective still waiting.
///
/// Or `"nccl"`: NCCL communicators for the whole session and one per group (split from the
/// first with `ncclCommSplit`, or made from an id of their own before NCCL 2.18). Every worker
/// must be on a CUDA device of its own (the `devices` session option; `device_ids`, if given,
/// must repeat each worker's CUDA device id).
/// NCCL is loaded at run time: from the path in the environment variable
/// `DISCOVM_NCCL_LIBRARY` when it is set, else as `libnccl.so.2` or `libnccl.so` from the
/// loader's search path (a copy PyTorch already loaded is found too). The collectives then take
/// CUDA tensors and are queued on each worker's stream, ordered with the copies to and from
/// worker 0, and return at once; `dvm_session_sync_worker` / `dvm_session_sync_all` wait for
/// them and report their failures. NCCL does not compare the workers' arguments: workers that
/// pass different shapes, or one that never joins, leave the others' GPUs waiting until the
/// session's timeout ends the wait.
///
/// Calling this again replaces the communicator (either backend by either).
///
/// Ownership: `session`, `backend` and `device_ids` are borrowed.
/// Errors: `ValueError` for an unknown backend (naming it), a count that is neither 0 nor the
/// number of workers, a worker not on the backend's kind of device, two workers on one GPU
/// (`"nccl"`), or a device id that is not the worker's; `DeviceUnavailable` for `"nccl"`
/// without a GPU or without NCCL (the message names what is missing and what was tried);
/// `WorkerError` if a worker failed earlier work or could not join (reported by the sync this
/// makes); `SessionClosed` after shutdown. A collective called before this fails on its worker
/// with a `WorkerError` that names the worker and the call.
/// Undefined: `device_ids` with fewer than `n` entries; `backend` that is not
/// NUL-terminated; `session` after its last release.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_session_init_ccl(
    session: *mut dvm_session,
    backend: *const c_char,
    device_ids: *const i32,
    n: i32,
) -> dvm_status {
    boundary(|| {
        // SAFETY: NULL or a live handle, by contract.
        let session = unsafe { session_arg(session) }?;
        // SAFETY: NULL or a terminated string, by contract.
        let backend = unsafe { c_str(backend, "backend") }?;
        // SAFETY: `device_ids` holds `n` entries, by contract.
        let ids = unsafe { count_slice(device_ids, n, "device_ids", "n") }?;
        session.init_ccl(backend, ids)
    })
}

/// Copies between a host buffer and the tensor `dref` holds on worker 0; returns when done.
///
/// # Safety
/// `host` describes a buffer that stays valid until this call returns.
pub(crate) unsafe fn copy_host(
    session: &Arc<Session>,
    host: &DLTensor,
    dref: &DRef,
    name: &'static str,
    direction: CopyDirection,
) -> crate::Result<()> {
    // SAFETY: as the caller promises; the session waits for worker 0 (or for it to finish a
    // copy it started) before returning.
    let host = unsafe { HostTensor::new(host) }?;
    session.copy_worker0(host, dref, name, direction)
}

/// # Safety
/// As for the two copy functions.
unsafe fn copy_worker0(
    session: *mut dvm_session,
    host: *const DLTensor,
    dref: *const dvm_dref,
    name: &'static str,
    direction: CopyDirection,
) -> dvm_status {
    boundary(|| {
        // SAFETY: NULL or live handles, by contract.
        let (session, dref) = unsafe { (session_arg(session)?, dref_arg(dref, name)?) };
        let host = non_null(host, "host")?;
        // SAFETY: the caller vouches for the host buffer until this call returns.
        unsafe { copy_host(&session, host.as_ref(), &dref, name, direction) }
    })
}

/// Copies a compact CPU host tensor into the tensor `dst` holds on worker 0, after every call
/// sent before. Returns when the copy is done.
///
/// Ownership: both borrowed.
/// Errors: `ValueError` for NULL pointers, a non-CPU or non-contiguous host tensor, or a shape
/// or dtype that differs from the remote tensor's; `WorkerError` if `dst` does not hold a
/// tensor on worker 0; `TimeoutError`, `SessionClosed` as for syncs.
/// Undefined: `host` describing memory that is not there (`data`, `shape` or
/// `strides` with too few bytes or values); handles after their last release.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_session_copy_to_worker0(
    session: *mut dvm_session,
    host: *const DLTensor,
    dst: *const dvm_dref,
) -> dvm_status {
    // SAFETY: as documented above.
    unsafe { copy_worker0(session, host, dst, "dst", CopyDirection::ToWorker) }
}

/// Copies the tensor `src` holds on worker 0 into a compact CPU host tensor, after every call
/// sent before. Returns with the host buffer filled (Disco's copy is asynchronous; this one is
/// not).
///
/// Ownership: both borrowed.
/// Errors: as `dvm_session_copy_to_worker0`.
/// Undefined: as for `dvm_session_copy_to_worker0`; another thread using
/// `host`'s memory during the call.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_session_copy_from_worker0(
    session: *mut dvm_session,
    host: *mut DLTensor,
    src: *const dvm_dref,
) -> dvm_status {
    // SAFETY: as documented above.
    unsafe { copy_worker0(session, host, src, "src", CopyDirection::FromWorker) }
}

/// How many registers hold a value on `worker`, after every call sent before (0 once every DRef
/// is released: a way to check for leaks).
///
/// Errors: `IndexError`, `ValueError` for NULL pointers, and the errors of a sync.
/// Undefined: `session` after its last release.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_session_live_registers(
    session: *mut dvm_session,
    worker: i32,
    out: *mut i64,
) -> dvm_status {
    boundary(|| {
        let out = non_null(out, "out")?;
        // SAFETY: NULL or a live handle, by contract.
        let session = unsafe { session_arg(session) }?;
        let live = session.live_registers(session.worker_index(worker.into())?)?;
        // SAFETY: checked non-NULL above.
        unsafe { write_out(out, live as i64) };
        Ok(())
    })
}

/// Stops the workers once the work already sent has run, and joins their threads. Every later
/// call on the session (or its DRefs and workers) fails with `SessionClosed`, except those that
/// answer from what the session knows without its workers (`dvm_session_num_workers`,
/// `dvm_worker_id`, `dvm_worker_device`); shutting down again does nothing.
///
/// Errors: `TimeoutError` if a worker did not stop within the session's timeout (its thread is
/// left running); `ValueError` for NULL.
/// Undefined: `session` after its last release.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_session_shutdown(session: *mut dvm_session) -> dvm_status {
    // SAFETY: NULL or a live handle, by contract.
    boundary(|| unsafe { session_arg(session) }?.shutdown())
}

/// Drops a reference to a session (to any object: it is dropped as by `dvm_object_dec_ref`).
/// NULL is fine. The workers stop when the last reference to
/// the session (including those held by its DRefs and worker handles) goes, if not before.
///
/// Undefined: dropping a reference the caller does not own.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_session_free(session: *mut dvm_session) {
    if !session.is_null() {
        // SAFETY: the caller gives up a reference it owns.
        unsafe { super::dvm_object_dec_ref(session.cast()) };
    }
}
