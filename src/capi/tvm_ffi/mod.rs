//! The library as a tvm-ffi module: `__tvm_ffi_<name>` entry points, found by
//! `tvm_ffi.load_module("libdiscovm.so")` in Python (or tvm-ffi's C++ module loader), so that
//! `m.session_new_threaded(4, 1)` drives the library as `dvm_session_new_threaded` does from C.
//! `TVM_FFI.md` lists every entry point and the conventions they share.
//!
//! The one idea: each entry point is a packed function whose body translates its arguments and
//! calls the same code as its `dvm_*` function. Errors are raised in libtvm_ffi's slot as well
//! as this library's, so Python sees each as the exception of its kind, and the objects it
//! returns are ordinary objects to tvm-ffi, which holds, passes back and releases them.

mod func;
mod session;
mod vm;

use std::borrow::Cow;

use super::{boundary_or, not_a, write_out};
use crate::abi::{DLDevice, DVMAny, type_index as ti};
use crate::object::args::{argument, arity, is_none, optional};
use crate::object::{Any, AnyView, Error, Result, type_key};

/// The arguments of one entry point, named in its errors by the parameter names it declares.
struct Args<'a> {
    /// The entry point's name without its prefix (`session_call`).
    name: &'static str,
    /// Its parameters' names, as `TVM_FFI.md` gives them; a last `*args` takes the rest.
    params: &'static [&'static str],
    views: &'a [AnyView<'a>],
}

/// An int that fits in 32 bits (a device type).
fn int32(view: &AnyView<'_>) -> Result<i32> {
    let value = view.as_i64()?;
    i32::try_from(value).map_err(|_| Error::value(format!("{value} is out of range")))
}

/// The name of argument `i` of an entry point with these parameters (`args[0]` for the first
/// one a trailing `*args` takes), if it has one.
fn param_name(params: &[&'static str], i: usize) -> Option<Cow<'static, str>> {
    match params.iter().position(|p| *p == "*args") {
        Some(rest) if i >= rest => Some(Cow::Owned(format!("args[{}]", i - rest))),
        _ => params.get(i).map(|p| Cow::Borrowed(*p)),
    }
}

impl<'a> Args<'a> {
    /// Fails unless there are `min` to `max` arguments (`usize::MAX`: any number from `min`).
    fn count(&self, min: usize, max: usize) -> Result<()> {
        arity(self.name, self.views, min, max)
    }

    /// The name of argument `i` (which the count admitted).
    fn param(&self, i: usize) -> Cow<'static, str> {
        param_name(self.params, i).unwrap_or_else(|| Cow::Owned(format!("argument {i}")))
    }

    /// Reads argument `i` (the count was checked); an error names it.
    fn read<T>(&self, i: usize, read: impl FnOnce(&'a AnyView<'a>) -> Result<T>) -> Result<T> {
        argument(i, &self.param(i), || read(&self.views[i]))
    }

    fn int(&self, i: usize) -> Result<i64> {
        self.read(i, AnyView::as_i64)
    }

    /// A count of bytes.
    fn size(&self, i: usize) -> Result<usize> {
        self.read(i, |view| {
            let value = view.as_i64()?;
            usize::try_from(value).map_err(|_| Error::value(format!("{value} is negative")))
        })
    }

    fn int_or(&self, i: usize, default: i64) -> Result<i64> {
        optional(self.views, i, &self.param(i), default, AnyView::as_i64)
    }

    fn bool_or(&self, i: usize, default: bool) -> Result<bool> {
        optional(self.views, i, &self.param(i), default, AnyView::as_bool)
    }

    fn str(&self, i: usize) -> Result<&'a str> {
        self.read(i, AnyView::as_str)
    }

    fn device_or(&self, i: usize, default: DLDevice) -> Result<DLDevice> {
        optional(self.views, i, &self.param(i), default, AnyView::as_device)
    }

    /// A string, or None.
    fn str_or_none(&self, i: usize) -> Result<Option<&'a str>> {
        if is_none(self.views, i) {
            return Ok(None);
        }
        self.str(i).map(Some)
    }

    /// A list of strings: an Array of them, or None (no strings).
    fn strs(&self, i: usize) -> Result<Vec<String>> {
        self.array(i, |item| item.as_str().map(str::to_owned))
    }

    /// The items of an Array, each read by `item`, or nothing for None.
    fn array<T>(&self, i: usize, item: impl Fn(&AnyView<'_>) -> Result<T>) -> Result<Vec<T>> {
        if is_none(self.views, i) {
            return Ok(Vec::new());
        }
        self.read(i, |view| {
            view.as_array()?.items().iter().map(item).collect()
        })
    }

    /// A list of ints: a Shape, an Array of ints, or None (no ints).
    fn ints(&self, i: usize) -> Result<Vec<i64>> {
        if is_none(self.views, i) {
            return Ok(Vec::new());
        }
        self.read(i, |view| match view.type_index() {
            ti::SHAPE => Ok(view.as_shape()?.as_slice().to_vec()),
            ti::ARRAY => view
                .as_array()?
                .items()
                .iter()
                .map(AnyView::as_i64)
                .collect(),
            _ => Err(Error::type_error(format!(
                "expected a list of ints but got {}",
                view.type_name()
            ))),
        })
    }

    /// A list of devices: an Array of them, or None (no devices).
    fn devices(&self, i: usize) -> Result<Vec<DLDevice>> {
        self.array(i, |item| item.as_device())
    }

    /// The object argument `i` holds, as a handle pointer for the `dvm_*` argument readers
    /// (which check its type and name it as the parameter); a value that is no object is
    /// refused here, naming `what` it should have been.
    fn handle<H>(&self, i: usize, what: &str) -> Result<(*const H, Cow<'static, str>)> {
        let (view, name) = (&self.views[i], self.param(i));
        if view.type_index() < ti::STATIC_OBJECT_BEGIN {
            return Err(not_a(&name, what, view.type_index()));
        }
        // SAFETY: object values carry `v_obj`; the entry point checked it is not NULL.
        Ok((unsafe { view.raw().v.v_obj }.cast_const().cast::<H>(), name))
    }

    /// The arguments from `i` on (the arguments of a call, passed on).
    fn rest(&self, i: usize) -> &'a [AnyView<'a>] {
        &self.views[i..]
    }
}

/// Runs an entry point's body: counts and validates the arguments, writes the result, and
/// turns an error or a panic into a raised error and -1.
///
/// # Safety
/// `args` points at `num_args` valid values (any pointer if 0) and `result` at a writable
/// value, as the packed convention promises.
unsafe fn entry(
    (name, params): (&'static str, &'static [&'static str]),
    args: *const DVMAny,
    num_args: i32,
    result: *mut DVMAny,
    body: impl FnOnce(Args<'_>) -> Result<Any>,
) -> i32 {
    boundary_or(
        |_| -1,
        || {
            type_key::check_shared_with_libtvm_ffi()?;
            let result = super::non_null(result, "result")?;
            // SAFETY: the caller vouches for `num_args` values.
            let raw = unsafe { super::value::count_slice(args, num_args, "args", "num_args") }?;
            // SAFETY: the values outlive this call.
            let views = unsafe { AnyView::slice(raw.as_ptr(), raw.len()) };
            AnyView::validate_all(views, |i| match param_name(params, i) {
                Some(param) => format!("argument {i} ({param})"),
                None => format!("argument {i}"),
            })?;
            let value = body(Args {
                name,
                params,
                views,
            })?;
            // SAFETY: checked non-NULL above; the caller owns the value from now on.
            unsafe { write_out(result, value.into_raw()) };
            Ok(0)
        },
    )
}

/// The name of an entry point: its symbol without the module convention's prefix.
const fn entry_name(symbol: &'static str) -> &'static str {
    symbol
        .split_at(crate::object::module::SYMBOL_PREFIX.len())
        .1
}

/// Defines the entry point `__tvm_ffi_<name>` with the parameters named in `[...]` (as
/// `TVM_FFI.md` names them), whose body reads its arguments from `$args` and returns the result
/// as an [`Any`].
macro_rules! entry_point {
    ($(#[$doc:meta])* $name:ident($args:ident: [$($param:literal),*]) $body:block) => {
        $(#[$doc])*
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            _self: *mut ::std::ffi::c_void,
            args: *const $crate::abi::DVMAny,
            num_args: i32,
            result: *mut $crate::abi::DVMAny,
        ) -> i32 {
            const NAME: &str = super::entry_name(stringify!($name));
            let body = |$args: super::Args<'_>| -> $crate::Result<$crate::Any> { $body };
            // SAFETY: tvm-ffi's packed convention: `num_args` values at `args`, a writable
            // result.
            unsafe { super::entry((NAME, &[$($param),*]), args, num_args, result, body) }
        }
    };
}
use entry_point;
