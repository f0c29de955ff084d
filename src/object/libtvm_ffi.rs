//! libtvm_ffi's C functions, when that library is in the process: tvm-ffi's Python package
//! loads `libtvm_ffi.so` into the global scope before it loads this library as a module, and a
//! C++ program built on tvm-ffi links it.
//!
//! The one idea: its functions are found by name at run time, never linked against. Where it
//! is present, errors are raised into its slot too (a caller built on tvm-ffi reads only that
//! one), object types take their indices from its registry, a global function missing here is
//! looked up there, and functions can be made and registered there; where it is absent,
//! lookups find nothing and the library keeps its own slot, indices and registry.

use std::ffi::{CStr, c_void};
use std::ptr::NonNull;
use std::sync::OnceLock;

use super::error::{Error, ErrorKind, Result};
use super::object_ref::dec_ref;
use crate::abi::{
    DVMByteArray, DVMErrorCell, DVMObject, DVMSafeCall, OBJECT_HEADER_SIZE, type_index as ti,
};

type ErrorCreate = unsafe extern "C" fn(
    kind: *const DVMByteArray,
    message: *const DVMByteArray,
    backtrace: *const DVMByteArray,
    out: *mut *mut DVMObject,
) -> i32;
type ErrorSetRaised = unsafe extern "C" fn(error: *mut DVMObject);
type ErrorMoveFromRaised = unsafe extern "C" fn(out: *mut *mut DVMObject);
type FunctionGetGlobal =
    unsafe extern "C" fn(name: *const DVMByteArray, out: *mut *mut DVMObject) -> i32;
type FunctionSetGlobal = unsafe extern "C" fn(
    name: *const DVMByteArray,
    function: *mut DVMObject,
    allow_override: i32,
) -> i32;
type FunctionCreate = unsafe extern "C" fn(
    self_: *mut c_void,
    safe_call: DVMSafeCall,
    deleter: Option<unsafe extern "C" fn(*mut c_void)>,
    out: *mut *mut DVMObject,
) -> i32;
type TypeGetOrAllocIndex = unsafe extern "C" fn(
    type_key: *const DVMByteArray,
    static_type_index: i32,
    type_depth: i32,
    num_child_slots: i32,
    child_slots_can_overflow: i32,
    parent_type_index: i32,
) -> i32;

/// The functions of libtvm_ffi this library uses (their signatures are those of tvm-ffi's
/// `c_api.h`).
pub struct LibTvmFfi {
    error_create: ErrorCreate,
    error_set_raised: ErrorSetRaised,
    error_move_from_raised: ErrorMoveFromRaised,
    function_get_global: FunctionGetGlobal,
    function_set_global: FunctionSetGlobal,
    function_create: FunctionCreate,
    type_get_or_alloc_index: TypeGetOrAllocIndex,
}

static FOUND: OnceLock<LibTvmFfi> = OnceLock::new();

/// libtvm_ffi's functions, if the library is in the process's global scope. Absence is not
/// remembered: a libtvm_ffi loaded later is found by the next call.
pub fn get() -> Option<&'static LibTvmFfi> {
    if let Some(found) = FOUND.get() {
        return Some(found);
    }
    let found = lookup()?;
    Some(FOUND.get_or_init(|| found))
}

fn symbol(name: &CStr) -> Option<NonNull<c_void>> {
    // SAFETY: a lookup by NUL-terminated name in the global scope; nothing is called.
    NonNull::new(unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) })
}

fn lookup() -> Option<LibTvmFfi> {
    let error_create = symbol(c"TVMFFIErrorCreate")?;
    let error_set_raised = symbol(c"TVMFFIErrorSetRaised")?;
    let error_move_from_raised = symbol(c"TVMFFIErrorMoveFromRaised")?;
    let function_get_global = symbol(c"TVMFFIFunctionGetGlobal")?;
    let function_set_global = symbol(c"TVMFFIFunctionSetGlobal")?;
    let function_create = symbol(c"TVMFFIFunctionCreate")?;
    let type_get_or_alloc_index = symbol(c"TVMFFITypeGetOrAllocIndex")?;
    // SAFETY: each symbol is the libtvm_ffi function of that name, whose C signature is the
    // type it is given here.
    unsafe {
        Some(LibTvmFfi {
            error_create: std::mem::transmute::<*mut c_void, ErrorCreate>(error_create.as_ptr()),
            error_set_raised: std::mem::transmute::<*mut c_void, ErrorSetRaised>(
                error_set_raised.as_ptr(),
            ),
            error_move_from_raised: std::mem::transmute::<*mut c_void, ErrorMoveFromRaised>(
                error_move_from_raised.as_ptr(),
            ),
            function_get_global: std::mem::transmute::<*mut c_void, FunctionGetGlobal>(
                function_get_global.as_ptr(),
            ),
            function_set_global: std::mem::transmute::<*mut c_void, FunctionSetGlobal>(
                function_set_global.as_ptr(),
            ),
            function_create: std::mem::transmute::<*mut c_void, FunctionCreate>(
                function_create.as_ptr(),
            ),
            type_get_or_alloc_index: std::mem::transmute::<*mut c_void, TypeGetOrAllocIndex>(
                type_get_or_alloc_index.as_ptr(),
            ),
        })
    }
}

fn byte_array(text: &str) -> DVMByteArray {
    DVMByteArray {
        data: text.as_ptr().cast(),
        size: text.len(),
    }
}

impl LibTvmFfi {
    /// Raises an error in libtvm_ffi's slot of the calling thread. The backtrace is left empty
    /// (capturing one costs more than an error path here should).
    pub fn raise(&self, kind: &str, message: &str) {
        let (kind, message, backtrace) = (byte_array(kind), byte_array(message), byte_array(""));
        let mut error = std::ptr::null_mut();
        // SAFETY: the byte arrays outlive the call, which copies them into a new Error (+1).
        let rc = unsafe { (self.error_create)(&kind, &message, &backtrace, &mut error) };
        if let (0, Some(error)) = (rc, NonNull::new(error)) {
            // SAFETY: a live Error object; setting it raised takes a reference of its own, so
            // ours is dropped after.
            unsafe {
                (self.error_set_raised)(error.as_ptr());
                dec_ref(error);
            }
        }
    }

    /// Takes the error raised in libtvm_ffi's slot of the calling thread, as (kind, message),
    /// or None when nothing is raised there. The slot is empty afterwards.
    pub fn take_raised(&self) -> Option<(String, String)> {
        let mut error = std::ptr::null_mut();
        // SAFETY: moves the raised Error (+1) out of the slot, or writes NULL.
        unsafe { (self.error_move_from_raised)(&mut error) };
        let error = NonNull::new(error)?;
        // SAFETY: an Error object has an error cell after its header, whose byte arrays are
        // valid while it lives; the reference moved to us is dropped after reading.
        unsafe {
            let cell = &*error
                .as_ptr()
                .cast::<u8>()
                .add(OBJECT_HEADER_SIZE)
                .cast::<DVMErrorCell>();
            let text = |bytes: &DVMByteArray| {
                String::from_utf8_lossy(super::string::byte_array_bytes(bytes)).into_owned()
            };
            let taken = (text(&cell.kind), text(&cell.message));
            dec_ref(error);
            Some(taken)
        }
    }

    /// The function registered as `name` in libtvm_ffi's registry (a new reference to a
    /// Function object), or None.
    pub fn global_function(&self, name: &str) -> Option<NonNull<DVMObject>> {
        let name = byte_array(name);
        let mut function = std::ptr::null_mut();
        // SAFETY: the name outlives the call, which writes a new reference or NULL.
        let rc = unsafe { (self.function_get_global)(&name, &mut function) };
        if rc != 0 {
            // A failed lookup raised an error there; it is not this library's to report.
            self.take_raised();
            return None;
        }
        NonNull::new(function)
    }

    /// Registers `function` (a Function object, borrowed: the registry takes a reference of its
    /// own) as `name` in libtvm_ffi's registry, replacing what is there when `allow_override`.
    /// Errors: the one libtvm_ffi raised (a name already taken without `allow_override`).
    ///
    /// # Safety
    /// `function` is a live Function object.
    pub unsafe fn set_global(
        &self,
        name: &str,
        function: NonNull<DVMObject>,
        allow_override: bool,
    ) -> Result<()> {
        let name_bytes = byte_array(name);
        // SAFETY: the name outlives the call, which copies it; the caller vouches for the
        // function, of which the registry takes its own reference.
        let rc = unsafe {
            (self.function_set_global)(&name_bytes, function.as_ptr(), i32::from(allow_override))
        };
        self.check(rc, || format!("registering `{name}` in tvm-ffi's registry"))
    }

    /// A new Function object made by libtvm_ffi (+1) whose calls run
    /// `safe_call(self_, args, num_args, result)`; `deleter(self_)` runs when it dies (never,
    /// with None). Being libtvm_ffi's own object, it needs none of this library's code to be
    /// released, even at the process's exit.
    ///
    /// # Safety
    /// `safe_call` follows the packed convention and, with `self_`, may be called from any
    /// thread for as long as the function lives.
    pub unsafe fn create_function(
        &self,
        self_: *mut c_void,
        safe_call: DVMSafeCall,
        deleter: Option<unsafe extern "C" fn(*mut c_void)>,
    ) -> Result<NonNull<DVMObject>> {
        let mut function = std::ptr::null_mut();
        // SAFETY: as the caller promises; the call writes a new reference or fails.
        let rc = unsafe { (self.function_create)(self_, safe_call, deleter, &mut function) };
        self.check(rc, || "making a function in tvm-ffi".to_string())?;
        NonNull::new(function)
            .ok_or_else(|| Error::runtime("TVMFFIFunctionCreate succeeded but gave no function"))
    }

    /// Ok for status 0; else the error libtvm_ffi raised, led by what was being done.
    fn check(&self, rc: i32, doing: impl FnOnce() -> String) -> Result<()> {
        if rc == 0 {
            return Ok(());
        }
        let (kind, message) = self.take_raised().unwrap_or_else(|| {
            (
                "RuntimeError".into(),
                format!("status {rc}, nothing raised"),
            )
        });
        Err(Error::new(
            ErrorKind::from_name(&kind),
            format!("{}: {message}", doing()),
        ))
    }

    /// The index libtvm_ffi's registry gives the object type `key` (a direct child of
    /// `ffi.Object`): a new one the first time, the same one after.
    pub fn type_index(&self, key: &str) -> i32 {
        let key = byte_array(key);
        // SAFETY: the key outlives the call, which copies it; -1 asks for a dynamic index.
        unsafe { (self.type_get_or_alloc_index)(&key, -1, 1, 0, 0, ti::OBJECT) }
    }
}
