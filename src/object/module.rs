//! Modules: shared libraries that export packed functions under tvm-ffi's convention, a
//! `DVMSafeCall` named `__tvm_ffi_<name>`, called with a NULL handle (this library is one).
//!
//! A module is loaded once per path by the dynamic loader and never unloaded: values its
//! functions return (objects whose deleters, functions whose code, live in the library) may
//! outlive every reference to the module, so unloading could never be proven safe.

use std::ffi::{CStr, CString, c_void};
use std::ptr::NonNull;
use std::sync::LazyLock;

use super::any::{Any, AnyView};
use super::error::{Error, Result};
use super::function::{Function, call_safe};
use super::object_ref::{ObjectRef, ObjectType, alloc_object};
use super::registry;
use super::type_key;
use crate::abi::{DVMSafeCall, type_index as ti};

/// The prefix of every exported packed function's symbol.
pub const SYMBOL_PREFIX: &str = "__tvm_ffi_";

/// The cell of a Module object: a loaded library and the path it was loaded from.
pub struct ModuleCell {
    path: String,
    handle: NonNull<c_void>,
}

// SAFETY: the loader's handle may be used from any thread (dlsym is thread-safe).
unsafe impl Send for ModuleCell {}
// SAFETY: as above; the cell is never mutated.
unsafe impl Sync for ModuleCell {}

static MODULE_INDEX: LazyLock<i32> = LazyLock::new(|| type_key::dynamic_index("discovm.Module"));

// SAFETY: objects with this dynamic index are only made by `Module::load`.
unsafe impl ObjectType for ModuleCell {
    fn type_index() -> i32 {
        *MODULE_INDEX
    }
}

/// The absolute form of `path`, which must name a file (else a `ValueError` naming it). The
/// loader searches its library path for a name without a slash; an absolute path is the file
/// the caller named, relative to the current directory.
pub fn check_file(path: &str) -> Result<String> {
    let not_a_file = || {
        Error::value(format!(
            "module path `{path}` is not a file (no such file, or a directory)"
        ))
    };
    if !std::path::Path::new(path).is_file() {
        return Err(not_a_file());
    }
    let absolute = std::path::absolute(path).map_err(|_| not_a_file())?;
    absolute
        .into_os_string()
        .into_string()
        .map_err(|_| Error::value(format!("module path `{path}` is not valid UTF-8")))
}

/// A loaded module.
#[derive(Clone)]
pub struct Module(ObjectRef<ModuleCell>);

/// The loader's description of its last failure on this thread.
fn loader_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next loader call
    // on this thread, copied at once.
    let message = unsafe { libc::dlerror() };
    if message.is_null() {
        return "unknown loader error".to_string();
    }
    // SAFETY: checked non-NULL; NUL-terminated by contract.
    unsafe { CStr::from_ptr(message) }
        .to_string_lossy()
        .into_owned()
}

impl Module {
    /// Loads the shared library at `path` (resolving every symbol now, so a library that
    /// cannot run fails here). A missing file is a `ValueError` naming it; a file the loader
    /// refuses, a `RuntimeError` with the loader's reason.
    pub fn load(path: &str) -> Result<Module> {
        let c_path = CString::new(check_file(path)?)
            .map_err(|_| Error::value(format!("module path `{path}` contains a NUL byte")))?;
        // SAFETY: a NUL-terminated path; loading runs the library's initialisers, which is
        // what loading a module means.
        let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        let handle = NonNull::new(handle).ok_or_else(|| {
            Error::runtime(format!("cannot load module `{path}`: {}", loader_error()))
        })?;
        let cell = ModuleCell {
            path: path.to_string(),
            handle,
        };
        Ok(Module(alloc_object(ModuleCell::type_index(), cell)))
    }

    /// The module a value holds, if it holds one of this library's modules.
    pub fn from_view(view: &AnyView<'_>) -> Option<Module> {
        if view.type_index() != ModuleCell::type_index() {
            return None;
        }
        view.as_object()
            .ok()?
            .downcast::<ModuleCell>()
            .ok()
            .map(Module)
    }

    pub fn path(&self) -> &str {
        &self.0.path
    }

    /// The exported function `name`, or a `KeyError` naming it, its symbol and the module.
    pub fn function(&self, name: &str) -> Result<Function> {
        let missing = || {
            Error::key(format!(
                "module `{}` has no function `{name}` (no symbol `{SYMBOL_PREFIX}{name}`)",
                self.path()
            ))
        };
        let symbol = CString::new(format!("{SYMBOL_PREFIX}{name}")).map_err(|_| missing())?;
        // SAFETY: a lookup in a library this object keeps loaded; nothing is called.
        let address = unsafe { libc::dlsym(self.0.handle.as_ptr(), symbol.as_ptr()) };
        if address.is_null() {
            return Err(missing());
        }
        // SAFETY: by the module convention, the symbol is a function of this exact signature.
        let call = unsafe { std::mem::transmute::<*mut c_void, DVMSafeCall>(address) };
        Ok(Function::from_closure(move |args| {
            // SAFETY: the library stays loaded for the rest of the process; the views are
            // valid packed arguments for the call; the convention's handle is NULL.
            unsafe {
                call_safe(
                    call,
                    std::ptr::null_mut(),
                    AnyView::as_raw_slice(args),
                    args.len(),
                )
            }
        }))
    }

    pub fn into_object(self) -> ObjectRef<ModuleCell> {
        self.0
    }
}

impl From<Module> for Any {
    fn from(module: Module) -> Any {
        Any::from_object(module.0.erase())
    }
}

/// The function `name` of the module `module` holds: one of this library's modules, or one of
/// tvm-ffi's (type `ffi.Module`, such as TVM's compiled modules), looked up through tvm-ffi's
/// `ffi.ModuleGetFunction`. Anything else is a `TypeError`; a missing name a `KeyError`.
pub fn module_function(module: &AnyView<'_>, name: &str) -> Result<Function> {
    if let Some(module) = Module::from_view(module) {
        return module.function(name);
    }
    if module.type_index() != ti::MODULE {
        return Err(Error::type_error(format!(
            "expected a module but got {}",
            module.type_name()
        )));
    }
    let lookup = registry::get_global("ffi.ModuleGetFunction")?;
    let found = lookup.call(&[*module, Any::from(name).view(), Any::Bool(true).view()])?;
    match found {
        Any::None => Err(Error::key(format!(
            "{} has no function `{name}`",
            describe_tvm_ffi_module(module)
        ))),
        other => other.view().as_function(),
    }
}

/// How errors name one of tvm-ffi's modules, which need not know a path: by its kind (such as
/// TVM's `relax.VMExecutable`), where tvm-ffi says it.
fn describe_tvm_ffi_module(module: &AnyView<'_>) -> String {
    let kind = registry::get_global("ffi.ModuleGetKind").and_then(|get| get.call(&[*module]));
    let kind = kind.as_ref().map(Any::view);
    match kind.as_ref().map(AnyView::as_str) {
        Ok(Ok(kind)) => format!("the tvm-ffi module of kind `{kind}`"),
        _ => "the tvm-ffi module".to_string(),
    }
}
