//! The process-wide registry of global functions, safe under concurrent use. A name missing here
//! is looked up in libtvm_ffi's registry when that library is in the process, so functions
//! registered through tvm-ffi (`tvm_ffi.register_global_func` in Python) are found too.

use std::collections::HashMap;
use std::sync::{LazyLock, PoisonError, RwLock};

use super::error::{Error, Result};
use super::function::Function;
use super::libtvm_ffi;
use super::object_ref::{AnyObject, ObjectRef};

static GLOBALS: LazyLock<RwLock<HashMap<String, Function>>> = LazyLock::new(Default::default);

/// Registers `function` under `name`; an existing name is an error unless `allow_override`.
pub fn register_global(name: &str, function: Function, allow_override: bool) -> Result<()> {
    if name.is_empty() {
        return Err(Error::value("a global function needs a non-empty name"));
    }
    let mut globals = GLOBALS.write().unwrap_or_else(PoisonError::into_inner);
    if !allow_override && globals.contains_key(name) {
        return Err(Error::value(format!(
            "global function `{name}` is already registered (pass allow_override to replace it)"
        )));
    }
    globals.insert(name.to_string(), function);
    Ok(())
}

/// The function registered under `name` here, else in libtvm_ffi's registry, or a `KeyError`
/// naming it.
pub fn get_global(name: &str) -> Result<Function> {
    get_own(name)
        .or_else(|| {
            let object = libtvm_ffi::get()?.global_function(name)?;
            // SAFETY: a new reference to a live object, now ours.
            let object = unsafe { ObjectRef::<AnyObject>::from_raw(object) };
            object.downcast().ok().map(Function::from_object)
        })
        .ok_or_else(|| missing(name))
}

/// The function registered under `name` in this library's registry alone, or None.
pub fn get_own(name: &str) -> Option<Function> {
    GLOBALS
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(name)
        .cloned()
}

/// Removes `name`, or fails with a `KeyError` naming it.
pub fn remove_global(name: &str) -> Result<()> {
    GLOBALS
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(name)
        .map(drop)
        .ok_or_else(|| missing(name))
}

/// The error for a name nothing is registered under.
fn missing(name: &str) -> Error {
    Error::key(format!("no global function has the name `{name}`"))
}

/// The registered names, sorted.
pub fn global_names() -> Vec<String> {
    let globals = GLOBALS.read().unwrap_or_else(PoisonError::into_inner);
    let mut names: Vec<String> = globals.keys().cloned().collect();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Any, ErrorKind};

    fn constant(v: i64) -> Function {
        Function::from_closure(move |_| Ok(Any::Int(v)))
    }

    #[test]
    fn duplicate_registration_needs_override() {
        register_global("test.registry.dup", constant(1), false).unwrap();
        let err = register_global("test.registry.dup", constant(2), false).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Value);
        assert!(err.message.contains("test.registry.dup"));
        register_global("test.registry.dup", constant(3), true).unwrap();
        let f = get_global("test.registry.dup").unwrap();
        assert!(matches!(f.call(&[]).unwrap(), Any::Int(3)));
        remove_global("test.registry.dup").unwrap();
        let err = get_global("test.registry.dup").unwrap_err();
        assert_eq!(
            (err.kind, err.message.as_str()),
            (
                ErrorKind::Key,
                "no global function has the name `test.registry.dup`"
            )
        );
    }

    #[test]
    fn eight_threads_register_and_look_up_concurrently() {
        std::thread::scope(|scope| {
            for t in 0..8i64 {
                scope.spawn(move || {
                    for i in 0..200i64 {
                        let name = format!("test.registry.t{t}.f{i}");
                        register_global(&name, constant(t * 1000 + i), false).unwrap();
                        let got = get_global(&name).unwrap().call(&[]).unwrap();
                        assert!(matches!(got, Any::Int(v) if v == t * 1000 + i));
                        let shared = format!("test.registry.shared{}", i % 10);
                        register_global(&shared, constant(i), true).unwrap();
                        assert!(get_global(&shared).is_ok());
                    }
                });
            }
        });
        let names = global_names();
        for t in 0..8 {
            for i in 0..200 {
                assert!(
                    names
                        .binary_search(&format!("test.registry.t{t}.f{i}"))
                        .is_ok()
                );
            }
        }
    }
}
