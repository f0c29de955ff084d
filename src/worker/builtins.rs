//! Worker-side built-ins under the names Disco's workers use (`runtime.disco.*`), so code
//! written for Disco carries over. Each runs on a worker thread and fails clearly elsewhere.

use std::sync::Once;

use super::runtime::{self as worker, WorkerInfo};
use crate::abi::{DLDataType, DLDevice};
use crate::device;
use crate::device::cpu::pin_current_thread;
use crate::object::args::{argument, arity, optional};
use crate::object::{Any, AnyView, Error, Function, Result, Shape, Tensor, registry};

/// The worker running the calling thread, or an error naming the built-in `name`.
pub(crate) fn on_worker(name: &str) -> Result<WorkerInfo> {
    worker::current()
        .ok_or_else(|| Error::runtime(format!("`{name}` must run on a session worker thread")))
}

/// `empty(shape, dtype, device=None, worker0_only=False, in_group=True)`: a tensor on this
/// worker's device, or None on workers other than (group-local) worker 0 when `worker0_only`.
fn empty(info: WorkerInfo, args: &[AnyView<'_>]) -> Result<Any> {
    arity("runtime.disco.empty", args, 2, 5)?;
    let shape = argument(0, "shape", || args[0].as_shape())?;
    let dtype = argument(1, "dtype", || args[1].as_dtype())?;
    let device: DLDevice = optional(args, 2, "device", info.device, AnyView::as_device)?;
    let worker0_only = optional(args, 3, "worker0_only", false, AnyView::as_bool)?;
    let in_group = optional(args, 4, "in_group", true, AnyView::as_bool)?;
    let first = if in_group {
        info.local_id() == 0
    } else {
        info.id == 0
    };
    if worker0_only && !first {
        return Ok(Any::None);
    }
    Ok(worker_empty(shape.as_slice(), dtype, device)?.into())
}

/// A tensor of `dims` and `dtype` on `device`, as `runtime.disco.empty` makes it: in a worker
/// process, a host tensor goes to the session's arena while it has room.
pub(crate) fn worker_empty(dims: &[i64], dtype: DLDataType, device: DLDevice) -> Result<Tensor> {
    #[cfg(not(loom))]
    if let Some(tensor) = super::arena::empty(dims, dtype, device)? {
        return Ok(tensor);
    }
    device::empty(dims, dtype, device)
}

/// `bind_worker_to_cpu_core(cpu_ids)`: pins this worker to `cpu_ids[worker_id]`.
fn bind_to_core(info: WorkerInfo, args: &[AnyView<'_>]) -> Result<Any> {
    arity("runtime.disco.bind_worker_to_cpu_core", args, 1, 1)?;
    let ids = args[0].as_shape()?;
    let cpu = ids.as_slice().get(info.id).copied().ok_or_else(|| {
        Error::index(format!(
            "worker {} has no entry in {} CPU ids",
            info.id,
            ids.as_slice().len()
        ))
    })?;
    let cpu = usize::try_from(cpu).map_err(|_| Error::value(format!("cpu {cpu} is negative")))?;
    pin_current_thread(cpu)?;
    Ok(Any::None)
}

fn builtin(
    name: &'static str,
    body: impl Fn(WorkerInfo, &[AnyView<'_>]) -> Result<Any> + Send + Sync + 'static,
) {
    let function = Function::from_closure(move |args| body(on_worker(name)?, args));
    registry::register_global(name, function, true).expect("built-in names are valid");
}

fn no_args(name: &'static str, value: impl Fn(WorkerInfo) -> Any + Send + Sync + 'static) {
    builtin(name, move |info, args| {
        arity(name, args, 0, 0)?;
        Ok(value(info))
    });
}

/// Registers the built-ins once per process.
pub fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        no_args("runtime.disco.worker_id", |info| {
            Shape::new(&[info.id as i64]).into()
        });
        no_args("runtime.disco.worker_rank", |info| Any::Int(info.id as i64));
        no_args("runtime.disco.world_size", |info| {
            Any::Int(info.num_workers as i64)
        });
        no_args("runtime.disco.num_groups", |info| {
            Any::Int(info.num_groups as i64)
        });
        no_args("runtime.disco.device", |info| Any::Device(info.device));
        builtin("runtime.disco.empty", empty);
        builtin("runtime.disco.bind_worker_to_cpu_core", bind_to_core);
        super::module::register();
    });
}
