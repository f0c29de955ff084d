//! Modules a session loads on every worker: the controller's side of the loaders and of the
//! lookup of a module's functions that `worker::module` serves.

use std::sync::Arc;

use super::controller::{Session, Target};
use super::dref::DRef;
use crate::object::module::check_file;
use crate::object::{Any, Error, Result};
use crate::worker::message::{Message, ModuleLookup};
use crate::worker::module::LOAD;
#[cfg(not(loom))]
use crate::worker::module::LOAD_UPLOADED;

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
