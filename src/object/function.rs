//! Function objects: Rust closures and C callbacks behind one packed calling convention.

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};

use super::any::{Any, AnyView};
use super::error::{self, Error, Result};
use super::object_ref::{ObjectRef, alloc_object, object_cell};
use crate::abi::{DVMAny, DVMFunctionCell, DVMSafeCall, OBJECT_HEADER_SIZE, type_index as ti};

object_cell! {
    /// The cell of a Function object (type 68).
    FunctionCell(DVMFunctionCell) = ti::FUNCTION
}

/// The body of a closure signature.
pub type Closure = dyn Fn(&[AnyView<'_>]) -> Result<Any> + Send + Sync;

#[repr(C)]
struct RustFunction {
    cell: DVMFunctionCell,
    closure: Box<Closure>,
}

#[repr(C)]
struct CFunction {
    cell: DVMFunctionCell,
    self_: *mut c_void,
    call: DVMSafeCall,
    deleter: Option<unsafe extern "C" fn(*mut c_void)>,
}

impl Drop for CFunction {
    fn drop(&mut self) {
        if let Some(deleter) = self.deleter {
            // SAFETY: the C owner asked for `deleter(self)` when the function dies.
            unsafe { deleter(self.self_) };
        }
    }
}

/// Writes a closure's outcome as the packed convention wants it: 0 and the result, or -1 and
/// a raised error.
fn finish(outcome: std::thread::Result<Result<Any>>, result: *mut DVMAny) -> i32 {
    let error = match outcome {
        Ok(Ok(value)) if !result.is_null() => {
            // SAFETY: the caller passed a writable result slot.
            unsafe { result.write(value.into_raw()) };
            return 0;
        }
        Ok(Ok(_)) => Error::value("the packed call's result pointer is NULL"),
        Ok(Err(error)) => error,
        Err(panic) => Error::from_panic(panic),
    };
    error::raise(&error);
    -1
}

unsafe extern "C" fn rust_trampoline(
    handle: *mut c_void,
    args: *const DVMAny,
    num_args: i32,
    result: *mut DVMAny,
) -> i32 {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let count = usize::try_from(num_args)
            .map_err(|_| Error::value(format!("num_args is negative ({num_args})")))?;
        if args.is_null() && count > 0 {
            return Err(Error::value(format!(
                "args is NULL but num_args is {count}"
            )));
        }
        // SAFETY: our own safe_call only sits in RustFunction objects, and `handle` is one.
        let body = unsafe {
            &*handle
                .cast::<u8>()
                .add(OBJECT_HEADER_SIZE)
                .cast::<RustFunction>()
        };
        // SAFETY: the caller's arguments live for the duration of the call.
        let views = unsafe { AnyView::slice(args, count) };
        (body.closure)(views)
    }));
    finish(outcome, result)
}

unsafe extern "C" fn c_trampoline(
    handle: *mut c_void,
    args: *const DVMAny,
    num_args: i32,
    result: *mut DVMAny,
) -> i32 {
    // SAFETY: this safe_call only sits in CFunction objects, and `handle` is one.
    let body = unsafe {
        &*handle
            .cast::<u8>()
            .add(OBJECT_HEADER_SIZE)
            .cast::<CFunction>()
    };
    // As tvm-ffi does: a function made without `self` and deleter receives its own object.
    let target = if body.self_.is_null() && body.deleter.is_none() {
        handle
    } else {
        body.self_
    };
    // SAFETY: the C callback follows the packed convention it was registered with.
    unsafe { (body.call)(target, args, num_args, result) }
}

/// Calls the function object at `handle` through its cell's `safe_call`.
///
/// # Safety
/// `handle` is a live Function object; `args` points at `num_args` valid values.
unsafe fn invoke(
    handle: *mut crate::abi::DVMObject,
    args: *const DVMAny,
    num_args: i32,
) -> Result<Any> {
    if handle.is_null() {
        return Err(Error::value("the function value holds a NULL object"));
    }
    // SAFETY: Function objects have a function cell after the header.
    let cell = unsafe {
        &*handle
            .cast::<u8>()
            .add(OBJECT_HEADER_SIZE)
            .cast::<DVMFunctionCell>()
    };
    let safe_call = cell
        .safe_call
        .ok_or_else(|| Error::runtime("function has no safe_call"))?;
    // SAFETY: the handle is the function object itself, as the packed convention wants.
    unsafe { call_safe(safe_call, handle.cast(), args, num_args) }
}

/// Calls a packed function pointer with `handle`, reading an error from the slot it was raised
/// into, or the result it wrote.
///
/// # Safety
/// `safe_call` follows the packed convention and accepts `handle`; `args` points at `num_args`
/// valid values (any pointer if 0) that outlive the call.
pub(crate) unsafe fn call_safe(
    safe_call: DVMSafeCall,
    handle: *mut c_void,
    args: *const DVMAny,
    num_args: impl TryInto<i32>,
) -> Result<Any> {
    let num_args = num_args
        .try_into()
        .map_err(|_| Error::value("too many arguments for one packed call"))?;
    error::clear_raised();
    let mut result = DVMAny::none();
    // SAFETY: as the caller promises.
    let rc = unsafe { safe_call(handle, args, num_args, &mut result) };
    if rc != 0 {
        return Err(error::take_raised(rc));
    }
    // SAFETY: a successful call leaves an owned value in `result`.
    unsafe { Any::from_raw(result) }.map_err(|e| e.context("the result"))
}

/// A packed function (a Function object).
#[derive(Clone, Debug)]
pub struct Function(ObjectRef<FunctionCell>);

impl Function {
    pub const TYPE_NAME: &'static str = "ffi.Function";

    /// Wraps a Rust closure. Panics inside it become `Panic` errors, never unwinding into C.
    pub fn from_closure(
        closure: impl Fn(&[AnyView<'_>]) -> Result<Any> + Send + Sync + 'static,
    ) -> Function {
        let cell = DVMFunctionCell {
            safe_call: Some(rust_trampoline),
            cpp_call: std::ptr::null_mut(),
        };
        let object = alloc_object(
            ti::FUNCTION,
            RustFunction {
                cell,
                closure: Box::new(closure),
            },
        );
        // SAFETY: RustFunction starts with the function cell.
        Function(unsafe { object.cast() })
    }

    /// Wraps a C callback: `call(self_, args, num_args, result)`; `deleter(self_)` runs when the
    /// function dies.
    ///
    /// # Safety
    /// `call` follows the packed convention and, with `self_`, may be used from any thread.
    pub unsafe fn from_c(
        self_: *mut c_void,
        call: DVMSafeCall,
        deleter: Option<unsafe extern "C" fn(*mut c_void)>,
    ) -> Function {
        let cell = DVMFunctionCell {
            safe_call: Some(c_trampoline),
            cpp_call: std::ptr::null_mut(),
        };
        let object = alloc_object(
            ti::FUNCTION,
            CFunction {
                cell,
                self_,
                call,
                deleter,
            },
        );
        // SAFETY: CFunction starts with the function cell.
        Function(unsafe { object.cast() })
    }

    pub fn from_object(object: ObjectRef<FunctionCell>) -> Function {
        Function(object)
    }

    pub fn object(&self) -> &ObjectRef<FunctionCell> {
        &self.0
    }

    pub fn into_object(self) -> ObjectRef<FunctionCell> {
        self.0
    }

    /// Calls the function with borrowed arguments.
    pub fn call(&self, args: &[AnyView<'_>]) -> Result<Any> {
        let count = i32::try_from(args.len())
            .map_err(|_| Error::value(format!("too many arguments ({})", args.len())))?;
        // SAFETY: the slice is `count` valid values that outlive the call.
        unsafe { self.call_raw(AnyView::as_raw_slice(args), count) }
    }

    /// Calls the function with a packed argument array.
    ///
    /// # Safety
    /// `args` points at `num_args` valid values (any pointer if 0) that outlive the call.
    pub unsafe fn call_raw(&self, args: *const DVMAny, num_args: i32) -> Result<Any> {
        // SAFETY: a live function object; the caller vouches for the arguments.
        unsafe { invoke(self.0.as_ptr(), args, num_args) }
    }

    /// Calls the function a borrowed value holds, without taking a reference to it (a worker
    /// calls the function in its register this way, so workers never touch a shared count).
    pub fn call_view(callee: &AnyView<'_>, args: &[AnyView<'_>]) -> Result<Any> {
        if callee.type_index() != ti::FUNCTION {
            return Err(Error::type_error(format!(
                "expected {} but got {}",
                Self::TYPE_NAME,
                callee.type_name()
            )));
        }
        let count = i32::try_from(args.len())
            .map_err(|_| Error::value(format!("too many arguments ({})", args.len())))?;
        // SAFETY: a Function value holds a live function object while the view is borrowed.
        unsafe { invoke(callee.raw().v.v_obj, AnyView::as_raw_slice(args), count) }
    }
}

impl From<Function> for Any {
    fn from(f: Function) -> Any {
        Any::from(f.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn closure_receives_arguments_and_returns_a_value() {
        let add =
            Function::from_closure(|args| Ok(Any::Int(args[0].as_i64()? + args[1].as_i64()?)));
        let (a, b) = (Any::Int(40), Any::Bool(true));
        let out = add.call(&[a.view(), b.view()]).unwrap();
        assert!(matches!(out, Any::Int(41)));
    }

    #[test]
    fn errors_and_panics_come_back_as_errors() {
        let fails = Function::from_closure(|_| Err(Error::key("no such thing: `x`")));
        let err = fails.call(&[]).unwrap_err();
        assert_eq!(
            (err.kind, err.message.as_str()),
            (ErrorKind::Key, "no such thing: `x`")
        );

        let panics = Function::from_closure(|_| panic!("boom"));
        let err = panics.call(&[]).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Panic);
        assert!(err.message.contains("boom"), "{}", err.message);
    }

    #[test]
    fn a_function_travels_as_a_value_and_can_be_called_back() {
        let double = Function::from_closure(|args| Ok(Any::Int(args[0].as_i64()? * 2)));
        let apply = Function::from_closure(|args| {
            let f = args[0].as_function()?;
            f.call(&args[1..])
        });
        let (f, x) = (Any::from(double.clone()), Any::Int(21));
        assert!(matches!(
            apply.call(&[f.view(), x.view()]).unwrap(),
            Any::Int(42)
        ));
        drop(f);
        assert_eq!(double.object().strong_count(), 1);
    }
}
