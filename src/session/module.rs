//! Modules on workers: every worker loads a shared library into a register, and its exported
//! functions become DRefs.
//!
//! A load is an ordinary call of a worker built-in, so it travels to workers as any call does
//! and every kind of session runs it unchanged: a worker loads the library itself, in its own
//! process, and a failure is an error value of that worker's call. A function is looked up as a
//! global function is, by a request every worker answers from the module it holds, so a name a
//! module lacks fails the lookup itself.

use std::sync::{Arc, Once};

use super::builtins::on_worker;
use super::controller::{Session, Target};
use super::dref::DRef;
use super::message::{Message, ModuleLookup};
use crate::object::args::{arity, optional};
use crate::object::module::{Module, check_file, module_function};
use crate::object::{Any, AnyView, Error, Function, Result, registry};

/// `discovm.load_module(path) -> Module`: loads a shared library on the calling worker.
const LOAD: &str = "discovm.load_module";
/// `discovm.module_get_function(module, name) -> Function`: one of a module's functions.
const GET_FUNCTION: &str = "discovm.module_get_function";
/// `discovm.load_uploaded_module(sha256_hex) -> Module`: loads, on a worker of a node, the module
/// the controller uploaded to that node with that hash.
#[cfg(not(loom))]
const LOAD_UPLOADED: &str = "discovm.load_uploaded_module";
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
    Ok(Module::load(&super::node::uploaded_path(name)?)?.into())
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

/// Registers the built-ins once per process.
pub(super) fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for (name, body) in [
            (LOAD, load as fn(&[AnyView<'_>]) -> Result<Any>),
            (GET_FUNCTION, get_function),
            (LOAD_VM, load_vm),
            #[cfg(not(loom))]
            (LOAD_UPLOADED, load_uploaded),
        ] {
            registry::register_global(name, Function::from_closure(body), true)
                .expect("built-in names are valid");
        }
    });
}

impl Session {
    /// Loads the shared library at `path` on every worker, after the calls sent before; returns
    /// at once with a DRef to the module on each. A path that is not a file here is a
    /// `ValueError` now; a library a worker cannot load fails that worker's next wait. Workers
    /// get the absolute path, so a relative one means the file relative to the caller. A
    /// session across machines that uploads modules sends the file's bytes to its other nodes
    /// first, and their workers load the copy their node keeps.
    pub fn load_module(self: &Arc<Self>, path: &str) -> Result<DRef> {
        self.check_open()?;
        let path = check_file(path)?;
        let load = self.get_global_func(LOAD)?;
        let here = [Any::from(path.as_str())];
        let here = (&load, &[here[0].view()][..]);
        #[cfg(not(loom))]
        if self.uploads_modules() {
            let module = std::fs::read(&path)
                .map_err(|e| Error::value(format!("cannot read the module `{path}`: {e}")))?;
            let name = Any::from(self.upload(&module)?.as_str());
            let load_uploaded = self.get_global_func(LOAD_UPLOADED)?;
            return self.call_by_machine(here, (&load_uploaded, &[name.view()]));
        }
        self.call(Target::All, here.0, here.1)
    }

    /// The function `name` of the module `module` holds on every worker (loaded by
    /// [`Session::load_module`], or a tvm-ffi module a worker function returned), in a new
    /// register on each, after the calls sent before. Every worker looks it up in its own
    /// module, all asked at once, and the call returns once all have it: a module that lacks
    /// it is a `KeyError` naming the function and the module (its path, for one loaded from a
    /// file); a module whose load failed, that load's error; a value that is no module, a
    /// `TypeError`. Failures of earlier calls are not reported here but at the next wait.
    pub fn module_func(self: &Arc<Self>, module: &DRef, name: &str) -> Result<DRef> {
        self.check_owner(module, "module")?;
        if name.is_empty() {
            return Err(Error::value("a module function needs a non-empty name"));
        }
        let module = module.reg();
        let lookup = |reg, name, reply| {
            let lookup = ModuleLookup {
                reg,
                module,
                name,
                reply,
            };
            Message::GetModuleFunc(Box::new(lookup))
        };
        self.look_up(name.into(), "looking up a module function", lookup)
    }
}
