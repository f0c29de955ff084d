//! Functions: made from C callbacks, called through the packed convention, kept in the
//! global registry.

use std::ffi::{c_char, c_void};
use std::mem::ManuallyDrop;

use super::value::count_slice;
use super::{boundary, c_str, dvm_status, handle_ref, lend, non_null, write_out};
use crate::abi::DVMAny;
use crate::object::{Any, AnyView, Array, Function, FunctionCell, Str, registry};

/// A packed function (a Function object; `dvm_object_*` work on it).
#[allow(non_camel_case_types)]
pub struct dvm_func {
    _opaque: [u8; 0],
}

/// The function behind a handle, lent for the call.
///
/// # Safety
/// `f` is NULL or a live object handle.
pub(crate) unsafe fn function_arg(
    f: *const dvm_func,
    name: &str,
) -> crate::Result<ManuallyDrop<Function>> {
    // SAFETY: as the caller promises.
    let object = unsafe { handle_ref::<FunctionCell, _>(f, name, "a function") }?;
    Ok(lend(object, Function::from_object))
}

pub(super) fn into_handle(f: Function) -> *mut dvm_func {
    f.into_object().into_raw().as_ptr().cast()
}

/// Makes a function from a C callback (a `DVMSafeCall`). Calls run `call(self, args, num_args, result)`; when the
/// function dies, `deleter(self)` runs (if not NULL). As in tvm-ffi, when `self` and `deleter`
/// are both NULL the callback receives the function object itself as its first argument.
///
/// Ownership: `*out` is a new reference; free it with `dvm_func_free`.
/// Errors: `ValueError` if `call` or `out` is NULL.
/// Undefined: `call` or `deleter` that is not a function of its type; a callback that
/// returns 0 without an owned value in `result`.
/// Thread safety: any thread; the callback may later run on any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_func_new(
    self_: *mut c_void,
    call: Option<unsafe extern "C" fn(*mut c_void, *const DVMAny, i32, *mut DVMAny) -> i32>,
    deleter: Option<unsafe extern "C" fn(*mut c_void)>,
    out: *mut *mut dvm_func,
) -> dvm_status {
    boundary(|| {
        let out = non_null(out, "out")?;
        let call = call.ok_or_else(|| crate::Error::value("`call` is NULL"))?;
        // SAFETY: the C caller vouches for the callback and `self`.
        let function = unsafe { Function::from_c(self_, call, deleter) };
        // SAFETY: checked non-NULL above.
        unsafe { write_out(out, into_handle(function)) };
        Ok(())
    })
}

/// Drops a reference to a function (to any object: it is dropped as by `dvm_object_dec_ref`).
/// NULL is fine.
///
/// Undefined: dropping a reference the caller does not own.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_func_free(f: *mut dvm_func) {
    if !f.is_null() {
        // SAFETY: the caller gives up a reference it owns.
        unsafe { super::dvm_object_dec_ref(f.cast()) };
    }
}

/// Calls a function with `num_args` borrowed arguments. On success `*result` receives an owned
/// value (release it with `dvm_any_release`); on failure `*result` is untouched and the error
/// the function raised is reported with its kind and message.
///
/// Errors: `ValueError` for NULL `f` or `result`, negative `num_args`, NULL `args` with
/// `num_args > 0`, or a malformed argument (a small string or byte string of more than 7
/// bytes, a NULL object or borrowed pointer); `TypeError` if `f` is not a function, or an
/// argument has an unknown type index or holds an object of another type than its index says
/// (errors name the argument `args[i]`); any error the function raises, with its kind.
/// Undefined: `args` with fewer than `num_args` values, or values whose pointers do
/// not point at what their type indices say; `f` after its last release.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_func_call(
    f: *mut dvm_func,
    args: *const DVMAny,
    num_args: i32,
    result: *mut DVMAny,
) -> dvm_status {
    boundary(|| {
        // SAFETY: NULL or a live handle, by contract.
        let function = unsafe { function_arg(f, "f") }?;
        let result = non_null(result, "result")?;
        // SAFETY: the caller vouches for `num_args` values.
        let raw_args = unsafe { count_slice(args, num_args, "args", "num_args") }?;
        // SAFETY: the values outlive this call.
        let views = unsafe { AnyView::slice(raw_args.as_ptr(), raw_args.len()) };
        AnyView::validate_all(views, |i| format!("`args[{i}]`"))?;
        let value = function.call(views)?;
        // SAFETY: checked non-NULL above.
        unsafe { write_out(result, value.into_raw()) };
        Ok(())
    })
}

/// Registers `f` under `name` in the process-wide registry, which keeps its own reference.
///
/// Errors: `ValueError` for NULL or empty `name`, NULL `f`, or a name already registered when
/// `allow_override` is 0; `TypeError` if `f` is not a function.
/// Undefined: `name` that is not NUL-terminated; `f` after its last release.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_func_register_global(
    name: *const c_char,
    f: *mut dvm_func,
    allow_override: i32,
) -> dvm_status {
    boundary(|| {
        // SAFETY: NUL-terminated or NULL, by contract.
        let name = unsafe { c_str(name, "name") }?;
        // SAFETY: NULL or a live handle, by contract.
        let function = unsafe { function_arg(f, "f") }?;
        registry::register_global(name, (*function).clone(), allow_override != 0)
    })
}

/// Looks up a global function: in this library's registry, then, when libtvm_ffi is in the
/// process, in tvm-ffi's (functions registered through tvm-ffi are found too).
///
/// Ownership: `*out` is a new reference; free it with `dvm_func_free`.
/// Errors: `KeyError` naming `name` if nothing is registered under it; `ValueError` for NULL
/// arguments.
/// Undefined: `name` that is not NUL-terminated.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_func_get_global(
    name: *const c_char,
    out: *mut *mut dvm_func,
) -> dvm_status {
    boundary(|| {
        let out = non_null(out, "out")?;
        // SAFETY: NUL-terminated or NULL, by contract.
        let function = registry::get_global(unsafe { c_str(name, "name") }?)?;
        // SAFETY: checked non-NULL above.
        unsafe { write_out(out, into_handle(function)) };
        Ok(())
    })
}

/// The names of all global functions, sorted, as an Array of strings.
///
/// Ownership: `*out` is owned by the caller; release it with `dvm_any_release`.
/// Errors: `ValueError` if `out` is NULL.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_func_list_global_names(out: *mut DVMAny) -> dvm_status {
    boundary(|| {
        let out = non_null(out, "out")?;
        let names = registry::global_names()
            .into_iter()
            .map(|n| Any::Str(Str::from(n.as_str())));
        // SAFETY: checked non-NULL above.
        unsafe { write_out(out, Any::from(Array::new(names)).into_raw()) };
        Ok(())
    })
}

/// Removes a global function.
///
/// Errors: `KeyError` if nothing is registered under `name`; `ValueError` if it is NULL.
/// Undefined: `name` that is not NUL-terminated.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_func_remove_global(name: *const c_char) -> dvm_status {
    boundary(|| {
        // SAFETY: NUL-terminated or NULL, by contract.
        registry::remove_global(unsafe { c_str(name, "name") }?)
    })
}
