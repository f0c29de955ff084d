//! Entry points for the library itself, the global function registry, devices and the worker
//! a function runs on.

use super::entry_point;
use crate::capi::func::function_arg;
use crate::object::{Any, Array, Error, Str, registry};
use crate::session::current_worker_handle;
use crate::worker::current as current_worker;

entry_point! {
    /// `version() -> str`: the library version, as `dvm_version`.
    __tvm_ffi_version(args: []) {
        args.count(0, 0)?;
        Ok(Any::from(env!("CARGO_PKG_VERSION")))
    }
}

entry_point! {
    /// `object_type_keys() -> list[str]`: the type keys of the objects this library hands out,
    /// each in tvm-ffi's type registry from now on, so that a binding can register its class
    /// for one before the first object of that type exists.
    __tvm_ffi_object_type_keys(args: []) {
        args.count(0, 0)?;
        let keys = crate::object_type_keys().into_iter().map(|k| Any::Str(Str::from(k)));
        Ok(Array::new(keys).into())
    }
}

entry_point! {
    /// `device_count(device_type: int) -> int`: as `dvm_device_count`.
    __tvm_ffi_device_count(args: ["device_type"]) {
        args.count(1, 1)?;
        let count = args.read(0, |view| crate::device::count(super::int32(view)?))?;
        Ok(Any::Int(count.into()))
    }
}

entry_point! {
    /// `func_register_global(name: str, f: Function, allow_override: bool = False)`: as
    /// `dvm_func_register_global`; `f` may be a Python callable, which tvm-ffi wraps.
    __tvm_ffi_func_register_global(args: ["name", "f", "allow_override"]) {
        args.count(2, 3)?;
        let name = args.str(0)?;
        let (f, f_name) = args.handle(1, "a function")?;
        // SAFETY: an object argument, live for the call.
        let function = unsafe { function_arg(f, &f_name) }?;
        let allow_override = args.bool_or(2, false)?;
        registry::register_global(name, (*function).clone(), allow_override)?;
        Ok(Any::None)
    }
}

entry_point! {
    /// `func_get_global(name: str) -> Function`: as `dvm_func_get_global`.
    __tvm_ffi_func_get_global(args: ["name"]) {
        args.count(1, 1)?;
        Ok(registry::get_global(args.str(0)?)?.into())
    }
}

entry_point! {
    /// `func_remove_global(name: str)`: as `dvm_func_remove_global`.
    __tvm_ffi_func_remove_global(args: ["name"]) {
        args.count(1, 1)?;
        registry::remove_global(args.str(0)?)?;
        Ok(Any::None)
    }
}

entry_point! {
    /// `func_list_global_names() -> list[str]`: as `dvm_func_list_global_names`.
    __tvm_ffi_func_list_global_names(args: []) {
        args.count(0, 0)?;
        let names = registry::global_names().into_iter().map(|n| Any::Str(Str::from(n.as_str())));
        Ok(Array::new(names).into())
    }
}

entry_point! {
    /// `func_call(f: Function, *args) -> Any`: as `dvm_func_call`.
    __tvm_ffi_func_call(args: ["f", "*args"]) {
        args.count(1, usize::MAX)?;
        let (f, name) = args.handle(0, "a function")?;
        // SAFETY: an object argument, live for the call.
        let function = unsafe { function_arg(f, &name) }?;
        function.call(args.rest(1))
    }
}

entry_point! {
    /// `current_worker_id() -> int`: as `dvm_current_worker_id` (-1 off worker threads).
    __tvm_ffi_current_worker_id(args: []) {
        args.count(0, 0)?;
        Ok(Any::Int(current_worker().map_or(-1, |info| info.id as i64)))
    }
}

entry_point! {
    /// `current_worker() -> Worker`: as `dvm_current_worker`, but a new reference.
    __tvm_ffi_current_worker(args: []) {
        args.count(0, 0)?;
        current_worker_handle()
            .ok_or_else(|| Error::runtime("current_worker called off a worker thread"))
    }
}
