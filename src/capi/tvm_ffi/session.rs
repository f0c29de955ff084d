//! Entry points for sessions, their workers and their DRefs.

use std::mem::ManuallyDrop;

use super::{Args, entry_point};
use crate::capi::dref::{dref_arg, dvm_dref};
use crate::capi::session::{copy_host, dvm_session, session_arg};
use crate::capi::worker::{dvm_worker, worker_arg};
#[cfg(not(loom))]
use crate::channel::deadline::timeout_from_signed_ms;
#[cfg(not(loom))]
use crate::object::ErrorKind;
use crate::object::{Any, AnyView, Error, ObjectRef, Result};
use crate::session::{
    CopyDirection, DRef, Session, SessionCell, SessionOptions, Target, WorkerCell,
    new_worker_handle, session_handle,
};
#[cfg(not(loom))]
use crate::session::{WorkerThreads, serve_node, serve_worker};

/// The session argument 0 holds, lent for the call.
fn session(args: &Args<'_>) -> Result<ManuallyDrop<ObjectRef<SessionCell>>> {
    let (session, _) = args.handle::<dvm_session>(0, "a session")?;
    // SAFETY: an object argument, live for the call.
    unsafe { session_arg(session) }
}

/// The options of every kind of session, from arguments `at` to `at + 3` (`timeout_ms`,
/// `spin_us`, `cpu_affinity`, `devices`) of a session's constructor.
fn session_options(args: &Args<'_>, at: usize) -> Result<SessionOptions> {
    SessionOptions::from_values(
        args.int_or(at, 0)?,
        args.int_or(at + 1, 0)?,
        args.ints(at + 2)?,
        args.devices(at + 3)?,
    )
}

/// The DRef argument `i` holds, lent for the call.
fn dref(args: &Args<'_>, i: usize) -> Result<ManuallyDrop<DRef>> {
    let (dref, name) = args.handle::<dvm_dref>(i, "a DRef")?;
    // SAFETY: an object argument, live for the call.
    unsafe { dref_arg(dref, &name) }
}

/// Copies between the host tensor in argument 1 and the tensor the DRef in argument 2 holds on
/// worker 0.
fn copy(args: &Args<'_>, direction: CopyDirection) -> Result<Any> {
    args.count(3, 3)?;
    let (session, dref) = (session(args)?, dref(args, 2)?);
    let host = args.read(1, AnyView::as_dltensor)?;
    // SAFETY: the host tensor is an argument, live until this call returns.
    unsafe { copy_host(&session, host, &dref, "dref", direction) }?;
    Ok(Any::None)
}

entry_point! {
    /// `session_new_threaded(num_workers: int, num_groups: int = 1, timeout_ms: int = 0,
    /// spin_us: int = 0, cpu_affinity: list[int] | None = None, devices: list[Device] | None =
    /// None) -> Session`: as `dvm_session_new_threaded`, with the options' fields as arguments.
    __tvm_ffi_session_new_threaded(args: [
        "num_workers", "num_groups", "timeout_ms", "spin_us", "cpu_affinity", "devices"
    ]) {
        args.count(1, 6)?;
        let options = session_options(&args, 2)?;
        let (workers, groups) = (args.int(0)?, args.int_or(1, 1)?);
        Ok(session_handle(Session::new_threaded(workers, groups, options)?).into())
    }
}

#[cfg(not(loom))]
entry_point! {
    /// `session_new_process(num_workers: int, num_groups: int = 1, timeout_ms: int = 0,
    /// spin_us: int = 0, cpu_affinity: list[int] | None = None, devices: list[Device] | None =
    /// None, worker_program: str | None = None, worker_args: list[str] | None = None,
    /// worker_imports: list[str] | None = None, threads_per_worker: int = 0) -> Session`: as
    /// `dvm_session_new_process`, with the options' fields as arguments; `worker_args` come
    /// first on each worker's command line (`["-m", "discovm.worker"]` for a Python worker
    /// program), which imports the Python modules `worker_imports` names before it serves.
    __tvm_ffi_session_new_process(args: [
        "num_workers", "num_groups", "timeout_ms", "spin_us", "cpu_affinity", "devices",
        "worker_program", "worker_args", "worker_imports", "threads_per_worker"
    ]) {
        args.count(1, 10)?;
        let mut options = session_options(&args, 2)?;
        options.worker_program = args.str_or_none(6)?.map(str::to_owned);
        options.worker_args = args.strs(7)?;
        options.worker_imports = args.strs(8)?;
        options.threads_per_worker = WorkerThreads::from_value(args.int_or(9, 0)?)?;
        let (workers, groups) = (args.int(0)?, args.int_or(1, 1)?);
        Ok(session_handle(Session::new_process(workers, groups, options)?).into())
    }
}

#[cfg(not(loom))]
entry_point! {
    /// `session_new_socket(num_nodes: int, workers_per_node: int, num_groups: int, host: str,
    /// port: int, timeout_ms: int = 0, spin_us: int = 0, cpu_affinity: list[int] | None = None,
    /// devices: list[Device] | None = None, worker_program: str | None = None, worker_args:
    /// list[str] | None = None, session_token: str | None = None, heartbeat_ms: int = 0,
    /// upload_modules: bool = False, local_threads: bool = False, worker_imports: list[str] |
    /// None = None, threads_per_worker: int = 0) -> Session`: as `dvm_session_new_socket`,
    /// with the options' fields as arguments; every node's workers import `worker_imports`
    /// too.
    __tvm_ffi_session_new_socket(args: [
        "num_nodes", "workers_per_node", "num_groups", "host", "port", "timeout_ms", "spin_us",
        "cpu_affinity", "devices", "worker_program", "worker_args", "session_token",
        "heartbeat_ms", "upload_modules", "local_threads", "worker_imports",
        "threads_per_worker"
    ]) {
        args.count(5, 17)?;
        let mut options = session_options(&args, 5)?;
        options.worker_program = args.str_or_none(9)?.map(str::to_owned);
        options.worker_args = args.strs(10)?;
        options.worker_imports = args.strs(15)?;
        options.threads_per_worker = WorkerThreads::from_value(args.int_or(16, 0)?)?;
        options.session_token = args.str_or_none(11)?.map(str::to_owned);
        options.upload_modules = args.bool_or(13, false)?;
        options.local_threads = args.bool_or(14, false)?;
        options.heartbeat = timeout_from_signed_ms(args.int_or(12, 0)?, "heartbeat_ms")?;
        let session = Session::new_socket(
            args.int(0)?,
            args.int(1)?,
            args.int(2)?,
            args.str(3)?,
            args.int(4)?,
            options,
        )?;
        Ok(session_handle(session).into())
    }
}

#[cfg(not(loom))]
entry_point! {
    /// `node_main(args: list[str], worker_program: str | None = None, worker_args: list[str] |
    /// None = None) -> int`: as `dvm_node_main`, with the arguments after the program's name;
    /// the node's workers run `worker_program` (else `$DISCOVM_WORKER`, else `discovm-worker`)
    /// with `worker_args` first on their command lines (a Python node's own interpreter and
    /// `["-m", "discovm.worker"]`).
    __tvm_ffi_node_main(args: ["args", "worker_program", "worker_args"]) {
        args.count(1, 3)?;
        let program = args.str_or_none(1)?.map(str::to_owned);
        serve_node(&args.strs(0)?, program, args.strs(2)?)?;
        Ok(Any::Int(0))
    }
}

#[cfg(not(loom))]
entry_point! {
    /// `worker_main(args: list[str], unready_kind: str | None = None, unready: str | None =
    /// None) -> int`: as `dvm_worker_main`, with the arguments after the program's name:
    /// serves the controller that started this process until it shuts the session down, and
    /// returns the exit status (a Python worker program's `main`). `unready` says why the
    /// worker is not what the session asked for (an error of kind `unready_kind`, such as a
    /// module it could not import): the session's start then fails with it.
    __tvm_ffi_worker_main(args: ["args", "unready_kind", "unready"]) {
        args.count(1, 3)?;
        let unready = args.str_or_none(2)?.map(|message| {
            let kind = args.str_or_none(1).ok().flatten().unwrap_or("RuntimeError");
            Error::new(ErrorKind::from_name(kind), message)
        });
        serve_worker(&args.strs(0)?, unready)?;
        Ok(Any::Int(0))
    }
}

entry_point! {
    /// `session_num_workers(session: Session) -> int`: as `dvm_session_num_workers`.
    __tvm_ffi_session_num_workers(args: ["session"]) {
        args.count(1, 1)?;
        Ok(Any::Int(session(&args)?.num_workers() as i64))
    }
}

entry_point! {
    /// `session_get_global_func(session: Session, name: str) -> DRef`: as
    /// `dvm_session_get_global_func`.
    __tvm_ffi_session_get_global_func(args: ["session", "name"]) {
        args.count(2, 2)?;
        Ok(session(&args)?.get_global_func(args.str(1)?)?.into())
    }
}

entry_point! {
    /// `session_load_module(session: Session, path: str) -> DRef`: as
    /// `dvm_session_load_module`.
    __tvm_ffi_session_load_module(args: ["session", "path"]) {
        args.count(2, 2)?;
        Ok(session(&args)?.load_module(args.str(1)?)?.into())
    }
}

entry_point! {
    /// `session_module_func(session: Session, module: DRef, name: str) -> DRef`: as
    /// `dvm_session_module_func`.
    __tvm_ffi_session_module_func(args: ["session", "module", "name"]) {
        args.count(3, 3)?;
        let (session, module) = (session(&args)?, dref(&args, 1)?);
        Ok(session.module_func(&module, args.str(2)?)?.into())
    }
}

entry_point! {
    /// `session_call(session: Session, func: DRef, *args) -> DRef`: as `dvm_session_call`.
    __tvm_ffi_session_call(args: ["session", "func", "*args"]) {
        args.count(2, usize::MAX)?;
        let (session, func) = (session(&args)?, dref(&args, 1)?);
        Ok(session.call(Target::All, &func, args.rest(2))?.into())
    }
}

entry_point! {
    /// `session_bind(session: Session, func: DRef, wait: bool = True) -> Function | None`:
    /// `func` bound to `session`: calling the function with `*args` is `session_call(session,
    /// func, *args)`, with the two read and checked once here instead of on every call. The
    /// function keeps `func` (and so its register and the session) alive.
    ///
    /// With `wait` false, the function never waits: a call that would wait for room in the
    /// worker's queue (or for frees to be queued before it) sends nothing and returns None.
    /// Only a call to one worker thread can be sent so; for a session of several workers, or
    /// of worker processes, this returns None instead of a function. A caller may hold a lock
    /// a worker needs (Python's GIL) across such a call.
    __tvm_ffi_session_bind(args: ["session", "func", "wait"]) {
        args.count(2, 3)?;
        let (session, func) = (session(&args)?, dref(&args, 1)?);
        let bound = session.bind(Target::All, DRef::clone(&func))?;
        Ok(match args.bool_or(2, true)? {
            true => bound.into_function().into(),
            false => bound.into_try_function().map_or(Any::None, Any::from),
        })
    }
}

entry_point! {
    /// `session_sync_worker(session: Session, worker: int)`: as `dvm_session_sync_worker`.
    __tvm_ffi_session_sync_worker(args: ["session", "worker"]) {
        args.count(2, 2)?;
        let session = session(&args)?;
        session.sync_worker(session.worker_index(args.int(1)?)?)?;
        Ok(Any::None)
    }
}

entry_point! {
    /// `session_sync_all(session: Session)`: as `dvm_session_sync_all`.
    __tvm_ffi_session_sync_all(args: ["session"]) {
        args.count(1, 1)?;
        session(&args)?.sync_all()?;
        Ok(Any::None)
    }
}

entry_point! {
    /// `session_init_ccl(session: Session, backend: str, device_ids: list[int] | None = None)`:
    /// as `dvm_session_init_ccl`.
    __tvm_ffi_session_init_ccl(args: ["session", "backend", "device_ids"]) {
        args.count(2, 3)?;
        let session = session(&args)?;
        let ids = args
            .ints(2)?
            .into_iter()
            .map(|id| {
                i32::try_from(id).map_err(|_| {
                    Error::value(format!("argument 2 (device_ids): {id} is out of range"))
                })
            })
            .collect::<Result<Vec<i32>>>()?;
        session.init_ccl(args.str(1)?, &ids)?;
        Ok(Any::None)
    }
}

entry_point! {
    /// `session_copy_to_worker0(session: Session, host: Tensor, dref: DRef)`: as
    /// `dvm_session_copy_to_worker0`; `host` may be a numpy array, which tvm-ffi wraps.
    __tvm_ffi_session_copy_to_worker0(args: ["session", "host", "dref"]) {
        copy(&args, CopyDirection::ToWorker)
    }
}

entry_point! {
    /// `session_copy_from_worker0(session: Session, host: Tensor, dref: DRef)`: as
    /// `dvm_session_copy_from_worker0`; `host` may be a writable numpy array.
    __tvm_ffi_session_copy_from_worker0(args: ["session", "host", "dref"]) {
        copy(&args, CopyDirection::FromWorker)
    }
}

entry_point! {
    /// `session_live_registers(session: Session, worker: int) -> int`: as
    /// `dvm_session_live_registers`.
    __tvm_ffi_session_live_registers(args: ["session", "worker"]) {
        args.count(2, 2)?;
        let session = session(&args)?;
        let live = session.live_registers(session.worker_index(args.int(1)?)?)?;
        Ok(Any::Int(live as i64))
    }
}

entry_point! {
    /// `session_status(session: Session) -> str`: as `dvm_session_status`.
    __tvm_ffi_session_status(args: ["session"]) {
        args.count(1, 1)?;
        let status = session(&args)?.status()?;
        Ok(Any::Str(status.as_str().into()))
    }
}

entry_point! {
    /// `session_trace_start(session: Session)`: as `dvm_session_trace_start`.
    __tvm_ffi_session_trace_start(args: ["session"]) {
        args.count(1, 1)?;
        session(&args)?.trace_start()?;
        Ok(Any::None)
    }
}

entry_point! {
    /// `session_trace_stop(session: Session, path: str)`: as `dvm_session_trace_stop`.
    __tvm_ffi_session_trace_stop(args: ["session", "path"]) {
        args.count(2, 2)?;
        session(&args)?.trace_stop(args.str(1)?)?;
        Ok(Any::None)
    }
}

entry_point! {
    /// `session_trace_dump(session: Session, path: str)`: as `dvm_session_trace_dump`.
    __tvm_ffi_session_trace_dump(args: ["session", "path"]) {
        args.count(2, 2)?;
        session(&args)?.trace_dump(args.str(1)?)?;
        Ok(Any::None)
    }
}

entry_point! {
    /// `session_shutdown(session: Session)`: as `dvm_session_shutdown`.
    __tvm_ffi_session_shutdown(args: ["session"]) {
        args.count(1, 1)?;
        session(&args)?.shutdown()?;
        Ok(Any::None)
    }
}

entry_point! {
    /// `session_worker(session: Session, worker: int) -> Worker`: as `dvm_session_worker`.
    __tvm_ffi_session_worker(args: ["session", "worker"]) {
        args.count(2, 2)?;
        Ok(new_worker_handle(&session(&args)?.0, args.int(1)?)?.into())
    }
}

/// The worker argument 0 holds, lent for the call.
fn worker(args: &Args<'_>) -> Result<ManuallyDrop<ObjectRef<WorkerCell>>> {
    let (worker, _) = args.handle::<dvm_worker>(0, "a worker")?;
    // SAFETY: an object argument, live for the call.
    unsafe { worker_arg(worker) }
}

entry_point! {
    /// `worker_call(worker: Worker, func: DRef, *args) -> DRef`: as `dvm_worker_call`.
    __tvm_ffi_worker_call(args: ["worker", "func", "*args"]) {
        args.count(2, usize::MAX)?;
        let (worker, func) = (worker(&args)?, dref(&args, 1)?);
        Ok(worker.session()?.call(Target::One(worker.id), &func, args.rest(2))?.into())
    }
}

entry_point! {
    /// `worker_sync(worker: Worker)`: as `dvm_worker_sync`.
    __tvm_ffi_worker_sync(args: ["worker"]) {
        args.count(1, 1)?;
        let worker = worker(&args)?;
        worker.session()?.sync_worker(worker.id)?;
        Ok(Any::None)
    }
}

entry_point! {
    /// `worker_id(worker: Worker) -> int`: as `dvm_worker_id`.
    __tvm_ffi_worker_id(args: ["worker"]) {
        args.count(1, 1)?;
        Ok(Any::Int(worker(&args)?.id as i64))
    }
}

entry_point! {
    /// `worker_device(worker: Worker) -> Device`: as `dvm_worker_device`.
    __tvm_ffi_worker_device(args: ["worker"]) {
        args.count(1, 1)?;
        let worker = worker(&args)?;
        Ok(Any::Device(worker.session()?.worker_device(worker.id)))
    }
}

entry_point! {
    /// `dref_get(dref: DRef, worker: int) -> Any`: as `dvm_dref_get`.
    __tvm_ffi_dref_get(args: ["dref", "worker"]) {
        args.count(2, 2)?;
        dref(&args, 0)?.get(args.int(1)?)
    }
}

entry_point! {
    /// `dref_set(dref: DRef, worker: int, value: Any)`: as `dvm_dref_set`.
    __tvm_ffi_dref_set(args: ["dref", "worker", "value"]) {
        args.count(3, 3)?;
        let value = args.read(2, AnyView::to_owned)?;
        dref(&args, 0)?.set(args.int(1)?, value)?;
        Ok(Any::None)
    }
}
