//! With libtvm_ffi in the process, errors cross into its thread-local slot both ways, object
//! types get their indices from its registry, and functions in its registry are found; a type
//! numbered before it came makes the tvm-ffi entry points refuse to work. Checked against the real libtvm_ffi (from the environment
//! `tests/support/tvm_ffi_venv.sh` makes), loaded with `dlopen` in the middle of the test, as a
//! program that loads tvm-ffi late would. One test, since it changes the whole process.

#[path = "support/venvs.rs"]
mod venvs;

use std::ffi::{CStr, CString, c_char, c_void};
use std::ptr::NonNull;

use discovm::abi::{DLDevice, DVMAny, DVMByteArray, DVMErrorCell, DVMObject, OBJECT_HEADER_SIZE};
use discovm::capi::{dvm_error_raise, dvm_last_error_kind};
use discovm::object::{Function, FunctionCell, ObjectRef, ObjectType, registry};
use discovm::session::SessionCell;
use discovm::vm::{Stream, stream_handle};
use discovm::{AnyView, ErrorKind};

type SafeCall = unsafe extern "C" fn(*mut c_void, *const DVMAny, i32, *mut DVMAny) -> i32;

unsafe extern "C" {
    // One of the library's tvm-ffi entry points (linked from the crate like any other symbol).
    fn __tvm_ffi_version(handle: *mut c_void, args: *const DVMAny, n: i32, out: *mut DVMAny)
    -> i32;
}

type MoveFromRaised = unsafe extern "C" fn(*mut *mut DVMObject);
type SetRaisedFromCStr = unsafe extern "C" fn(*const c_char, *const c_char);
type FunctionCreate = unsafe extern "C" fn(
    *mut c_void,
    SafeCall,
    Option<unsafe extern "C" fn(*mut c_void)>,
    *mut *mut DVMObject,
) -> i32;
type TypeKeyToIndex = unsafe extern "C" fn(*const DVMByteArray, *mut i32) -> i32;
type FunctionSetGlobal = unsafe extern "C" fn(*const DVMByteArray, *mut DVMObject, i32) -> i32;

/// The libtvm_ffi functions the test calls, found after loading it.
struct TvmFfi {
    move_from_raised: MoveFromRaised,
    set_raised_from_c_str: SetRaisedFromCStr,
    function_create: FunctionCreate,
    type_key_to_index: TypeKeyToIndex,
    function_set_global: FunctionSetGlobal,
}

fn load_libtvm_ffi() -> TvmFfi {
    let path = venvs::tvm_ffi_shared_library();
    let c_path = CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: loads a shared library into the global scope, as tvm-ffi's Python package does.
    let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    assert!(!handle.is_null(), "cannot load {}", path.display());
    let symbol = |name: &CStr| {
        // SAFETY: a lookup by name in the library just loaded.
        let ptr = unsafe { libc::dlsym(handle, name.as_ptr()) };
        assert!(!ptr.is_null(), "libtvm_ffi has no {name:?}");
        ptr
    };
    // SAFETY: each symbol is the function of that name in tvm-ffi's c_api.h, of this signature.
    unsafe {
        TvmFfi {
            move_from_raised: std::mem::transmute::<*mut c_void, MoveFromRaised>(symbol(
                c"TVMFFIErrorMoveFromRaised",
            )),
            set_raised_from_c_str: std::mem::transmute::<*mut c_void, SetRaisedFromCStr>(symbol(
                c"TVMFFIErrorSetRaisedFromCStr",
            )),
            function_create: std::mem::transmute::<*mut c_void, FunctionCreate>(symbol(
                c"TVMFFIFunctionCreate",
            )),
            type_key_to_index: std::mem::transmute::<*mut c_void, TypeKeyToIndex>(symbol(
                c"TVMFFITypeKeyToIndex",
            )),
            function_set_global: std::mem::transmute::<*mut c_void, FunctionSetGlobal>(symbol(
                c"TVMFFIFunctionSetGlobal",
            )),
        }
    }
}

impl TvmFfi {
    /// The (kind, message) of the error raised in libtvm_ffi's slot, taken out of it.
    fn take_raised(&self) -> Option<(String, String)> {
        let mut error = std::ptr::null_mut();
        // SAFETY: moves the raised error (+1) out, or writes NULL.
        unsafe { (self.move_from_raised)(&mut error) };
        let error = NonNull::new(error)?;
        // SAFETY: an Error object: its cell follows the header; our reference is released last.
        unsafe {
            let cell = &*error
                .as_ptr()
                .cast::<u8>()
                .add(OBJECT_HEADER_SIZE)
                .cast::<DVMErrorCell>();
            let text = |b: &DVMByteArray| {
                let bytes = std::slice::from_raw_parts(b.data.cast::<u8>(), b.size);
                String::from_utf8_lossy(bytes).into_owned()
            };
            let taken = (text(&cell.kind), text(&cell.message));
            drop(ObjectRef::<discovm::object::AnyObject>::from_raw(error));
            Some(taken)
        }
    }

    fn index_of(&self, key: &str) -> Option<i32> {
        let key = DVMByteArray {
            data: key.as_ptr().cast(),
            size: key.len(),
        };
        let mut index = -1;
        // SAFETY: a byte array that outlives the call; a failed lookup raises, taken below.
        let rc = unsafe { (self.type_key_to_index)(&key, &mut index) };
        if rc != 0 {
            self.take_raised();
            return None;
        }
        Some(index)
    }
}

/// A tvm-ffi function that raises a KeyError through libtvm_ffi, as tvm-ffi's own do.
unsafe extern "C" fn raises_in_tvm_ffi(
    handle: *mut c_void,
    _args: *const DVMAny,
    _n: i32,
    _out: *mut DVMAny,
) -> i32 {
    // SAFETY: `handle` is the TvmFfi the test passed as `self`.
    let tvm_ffi = unsafe { &*handle.cast::<TvmFfi>() };
    // SAFETY: NUL-terminated strings.
    unsafe { (tvm_ffi.set_raised_from_c_str)(c"KeyError".as_ptr(), c"raised in tvm-ffi".as_ptr()) };
    -1
}

/// A function that fails without raising anything.
unsafe extern "C" fn fails_silently(
    _handle: *mut c_void,
    _args: *const DVMAny,
    _n: i32,
    _out: *mut DVMAny,
) -> i32 {
    -1
}

#[test]
fn errors_type_indices_and_functions_are_shared_with_libtvm_ffi() {
    // Before libtvm_ffi: the library numbers the stream type itself.
    let stream = stream_handle(Stream::new(DLDevice::cpu()).unwrap());
    let tvm_ffi = load_libtvm_ffi();

    // Types numbered from now on come from libtvm_ffi's registry; the earlier one is unknown
    // to it.
    assert_eq!(tvm_ffi.index_of("discovm.Session"), None, "not used yet");
    let session_index = SessionCell::type_index();
    assert_eq!(tvm_ffi.index_of("discovm.Session"), Some(session_index));
    assert_eq!(tvm_ffi.index_of("discovm.Stream"), None);
    assert!(stream.type_index() >= 128);

    // The library's errors are raised in libtvm_ffi's slot too, where its callers look.
    // SAFETY: NUL-terminated strings.
    unsafe { dvm_error_raise(c"IndexError".as_ptr(), c"raised here".as_ptr()) };
    assert_eq!(
        tvm_ffi.take_raised(),
        Some(("IndexError".into(), "raised here".into()))
    );
    // SAFETY: the kind stays valid until the next failure on this thread.
    assert_eq!(
        unsafe { CStr::from_ptr(dvm_last_error_kind()) },
        c"IndexError"
    );

    // An entry point refuses to hand out objects while a type was numbered before libtvm_ffi
    // came, and says so in libtvm_ffi's slot (a Python caller would crash without it).
    let mut result = DVMAny {
        type_index: 0,
        small_str_len: 0,
        v: discovm::abi::DVMAnyPayload { v_int64: 0 },
    };
    // SAFETY: no arguments, a writable result.
    let rc = unsafe { __tvm_ffi_version(std::ptr::null_mut(), std::ptr::null(), 0, &mut result) };
    assert_eq!(rc, -1);
    let (kind, message) = tvm_ffi.take_raised().expect("an error raised for tvm-ffi");
    assert_eq!(kind, "RuntimeError");
    assert!(message.contains("load tvm-ffi first"), "{message}");

    // A function in tvm-ffi's registry is found by the library's lookups, and an error it
    // raises reaches the library's caller with its kind.
    let mut raw = std::ptr::null_mut();
    let self_ = (&raw const tvm_ffi).cast_mut().cast::<c_void>();
    // SAFETY: a callback of the packed convention; `self_` outlives the function.
    assert_eq!(
        unsafe { (tvm_ffi.function_create)(self_, raises_in_tvm_ffi, None, &mut raw) },
        0
    );
    let name = "test.bridge.raises";
    let key = DVMByteArray {
        data: name.as_ptr().cast(),
        size: name.len(),
    };
    // SAFETY: the registry takes its own reference; ours is released by the ObjectRef.
    assert_eq!(unsafe { (tvm_ffi.function_set_global)(&key, raw, 0) }, 0);
    // SAFETY: the new Function object (+1) is ours.
    drop(unsafe { ObjectRef::<FunctionCell>::from_raw(NonNull::new(raw).unwrap()) });
    let raises = registry::get_global(name).expect("found in tvm-ffi's registry");
    let error = raises.call(&[] as &[AnyView<'_>]).unwrap_err();
    assert_eq!(
        (error.kind, error.message.as_str()),
        (ErrorKind::Key, "raised in tvm-ffi")
    );
    assert_eq!(tvm_ffi.take_raised(), None, "collected, not left behind");
    let missing = registry::get_global("test.bridge.nowhere").unwrap_err();
    assert_eq!(
        missing.message,
        "no global function has the name `test.bridge.nowhere`"
    );
    assert_eq!(tvm_ffi.take_raised(), None);

    // One that raises nothing is reported as such, not with a stale error.
    // SAFETY: as above, without self.
    assert_eq!(
        unsafe { (tvm_ffi.function_create)(std::ptr::null_mut(), fails_silently, None, &mut raw) },
        0
    );
    // SAFETY: as above.
    let silent = Function::from_object(unsafe {
        ObjectRef::<FunctionCell>::from_raw(NonNull::new(raw).unwrap())
    });
    let error = silent.call(&[]).unwrap_err();
    assert_eq!(
        error.message,
        "a packed function returned -1 without raising an error"
    );
}
