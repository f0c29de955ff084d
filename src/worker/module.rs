//! Modules on workers: every worker loads a shared library into a register, and its exported
//! functions become DRefs.
//!
//! A load is an ordinary call of a worker built-in, so it travels to workers as any call does
//! and every kind of session runs it unchanged: a worker loads the library itself, in its own
//! process, and a failure is an error value of that worker's call. A function is looked up as a
//! global function is, by a request every worker answers from the module it holds, so a name a
//! module lacks fails the lookup itself.

use std::sync::Once;

use super::builtins::on_worker;
use super::events;
use crate::object::args::{arity, optional};
use crate::object::module::{Module, check_file, module_function};
use crate::object::{Any, AnyView, Error, Function, Result, registry};

/// `discovm.load_module(path) -> Module`: loads a shared library on the calling worker.
pub(crate) const LOAD: &str = "discovm.load_module";
/// `discovm.module_get_function(module, name) -> Function`: one of a module's functions.
const GET_FUNCTION: &str = "discovm.module_get_function";
/// `discovm.load_uploaded_module(sha256_hex) -> Module`: loads, on a worker of a node, the module
/// the controller uploaded to that node with that hash.
#[cfg(not(loom))]
pub(crate) const LOAD_UPLOADED: &str = "discovm.load_uploaded_module";
/// `runtime.disco.load_vm_module(path, device=None) -> Module`: Disco's loader of a model TVM
/// compiled for its Relax VM, on the worker's device by default.
const LOAD_VM: &str = "runtime.disco.load_vm_module";

/// The allocator TVM's VM is initialised with for the device and for the host (its "pooled"
/// allocator, as Disco's loader chooses).
const VM_POOLED_ALLOCATOR: i64 = 2;

fn load(args: &[AnyView<'_>]) -> Result<Any> {
    arity(LOAD, args, 1, 1)?;
    let path = args[0]
        .as_str()
        .map_err(|e| e.context("argument 0 (path)"))?;
    Ok(Module::load(path)?.into())
}

#[cfg(not(loom))]
fn load_uploaded(args: &[AnyView<'_>]) -> Result<Any> {
    arity(LOAD_UPLOADED, args, 1, 1)?;
    let name = args[0]
        .as_str()
        .map_err(|e| e.context("argument 0 (sha256_hex)"))?;
    Ok(Module::load(&super::uploads::uploaded_path(name)?)?.into())
}

fn get_function(args: &[AnyView<'_>]) -> Result<Any> {
    arity(GET_FUNCTION, args, 2, 2)?;
    let name = args[1]
        .as_str()
        .map_err(|e| e.context("argument 1 (name)"))?;
    Ok(module_function(&args[0], name)
        .map_err(|e| e.context("argument 0 (module)"))?
        .into())
}

fn load_vm(args: &[AnyView<'_>]) -> Result<Any> {
    let info = on_worker(LOAD_VM)?;
    arity(LOAD_VM, args, 1, 2)?;
    let path = args[0]
        .as_str()
        .map_err(|e| e.context("argument 0 (path)"))?;
    let device = optional(args, 1, "device", info.device, AnyView::as_device)?;
    let path = &check_file(path)?;
    let loader = registry::get_global("ffi.ModuleLoadFromFile").map_err(|_| {
        Error::runtime(format!(
            "cannot load the VM module `{path}`: TVM's runtime is not in this process (in \
             Python, install apache-tvm; in C, link libtvm_runtime)"
        ))
    })?;
    let library = loader.call(&[Any::from(path.as_str()).view()])?;
    let executable = module_function(&library.view(), "vm_load_executable")?.call(&[])?;
    let host = Any::Int(i64::from(crate::abi::KDL_CPU));
    // The VM takes the collectives it calls from tvm-ffi's registry as it initialises: TVM's
    // runtime may have been loaded only now, so its built-ins are dispatched first.
    super::tvm_dispatch::install()?;
    let initialize = module_function(&executable.view(), "vm_initialization")?;
    initialize.call(&[
        Any::Int(device.device_type.into()).view(),
        Any::Int(device.device_id.into()).view(),
        Any::Int(VM_POOLED_ALLOCATOR).view(),
        host.view(),
        Any::Int(0).view(),
        Any::Int(VM_POOLED_ALLOCATOR).view(),
    ])?;
    Ok(executable)
}

/// `load`, recording each load as an event of the worker's, named by the end of its path (the
/// file's name).
fn recorded(load: fn(&[AnyView<'_>]) -> Result<Any>) -> impl Fn(&[AnyView<'_>]) -> Result<Any> {
    move |args| {
        let started = events::now_ns();
        let loaded = load(args);
        let path = args.first().and_then(|arg| arg.as_str().ok()).unwrap_or("");
        let mut tail = path.len().saturating_sub(events::NAME_BYTES);
        while !path.is_char_boundary(tail) {
            tail += 1;
        }
        events::record_own(events::Kind::Module, &path[tail..], started, 0, 0, 0);
        loaded
    }
}

/// Registers the built-ins once per process.
pub(super) fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        registry::register_global(GET_FUNCTION, Function::from_closure(get_function), true)
            .expect("built-in names are valid");
        for (name, body) in [
            (LOAD, load as fn(&[AnyView<'_>]) -> Result<Any>),
            (LOAD_VM, load_vm),
            #[cfg(not(loom))]
            (LOAD_UPLOADED, load_uploaded),
        ] {
            registry::register_global(name, Function::from_closure(recorded(body)), true)
                .expect("built-in names are valid");
        }
    });
}
