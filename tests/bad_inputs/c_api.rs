//! The `dvm_*` functions: each one's parameters as `include/discovm.h` declares them, a valid
//! call to vary one argument of at a time, the cases generated from the parameters, and the
//! cases written out.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::ffi::{CStr, c_void};
use std::ptr::null_mut;
use std::rc::Rc;

use discovm::abi::{DLDataType, DLDevice, DVMAny};
use discovm::capi::*;

use crate::fixture::{
    CPU, F32, Fixture, Handle, WORKERS, malformed_values, module_path, strong_count,
};
use crate::{Case, Kind, Returned};

mod written;
use written::written_out;

type SafeCall = unsafe extern "C" fn(*mut c_void, *const DVMAny, i32, *mut DVMAny) -> i32;
type Deleter = unsafe extern "C" fn(*mut c_void);
type HostedCall = unsafe extern "C" fn(*mut c_void, *const DVMAny, i32, i32, *mut DVMAny) -> i32;

/// One argument of a C call.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    Ptr(*mut c_void),
    I32(i32),
    Size(usize),
    Device(DLDevice),
    DType(DLDataType),
    Call(Option<SafeCall>),
    HostedCall(Option<HostedCall>),
    Deleter(Option<Deleter>),
}

use Arg::{I32, Size};

fn ptr<T>(p: *const T) -> Arg {
    Arg::Ptr(p.cast_mut().cast())
}

fn text(s: &'static CStr) -> Arg {
    ptr(s.as_ptr())
}

impl Arg {
    fn is_null(self) -> bool {
        match self {
            Arg::Ptr(p) => p.is_null(),
            Arg::Call(c) => c.is_none(),
            Arg::HostedCall(c) => c.is_none(),
            Arg::Deleter(d) => d.is_none(),
            _ => false,
        }
    }

    /// This argument's NULL.
    fn null(self) -> Arg {
        match self {
            Arg::Call(_) => Arg::Call(None),
            Arg::HostedCall(_) => Arg::HostedCall(None),
            Arg::Deleter(_) => Arg::Deleter(None),
            _ => Arg::Ptr(null_mut()),
        }
    }
}

/// Reads the arguments of a call back in the types the function takes.
struct Args<'a>(&'a [Arg]);

/// `Args` methods that read argument `i` as one variant of `Arg`, and panic on any other.
macro_rules! arg_readers {
    ($($method:ident: $variant:ident -> $ty:ty, $what:literal;)*) => {
        impl Args<'_> {
            $(
                fn $method(&self, i: usize) -> $ty {
                    match self.0[i] {
                        Arg::$variant(v) => v,
                        other => panic!(concat!("argument {} is {:?}, not ", $what), i, other),
                    }
                }
            )*
        }
    };
}

arg_readers! {
    i32: I32 -> i32, "an int32_t";
    size: Size -> usize, "a size_t";
    device: Device -> DLDevice, "a DLDevice";
    dtype: DType -> DLDataType, "a DLDataType";
    call: Call -> Option<SafeCall>, "a callback";
    hosted_call: HostedCall -> Option<HostedCall>, "a hosted callback";
    deleter: Deleter -> Option<Deleter>, "a deleter";
}

impl Args<'_> {
    fn p<T>(&self, i: usize) -> *mut T {
        match self.0[i] {
            Arg::Ptr(p) => p.cast(),
            other => panic!("argument {i} is {other:?}, not a pointer"),
        }
    }
    fn cp<T>(&self, i: usize) -> *const T {
        self.p::<T>(i).cast_const()
    }
}

fn status(s: dvm_status) -> Returned {
    Returned::Status(s)
}

/// A function of the C API: a valid call (the fixture's objects, outputs to its buffer) and how
/// to make a call with any arguments.
struct Api {
    name: &'static str,
    valid: fn(&Fixture) -> Vec<Arg>,
    call: fn(Args<'_>) -> Returned,
}

/// A worker program's `argv` with its name alone: no controller started it.
struct Argv([*const std::ffi::c_char; 2]);
// SAFETY: pointers to static strings, never written.
unsafe impl Sync for Argv {}
static PROGRAM_ARGV: Argv = Argv([c"discovm-worker".as_ptr(), std::ptr::null()]);

static DIMS: [i64; 2] = [2, 3];
static DEVICE_IDS: [i32; 2] = [0, 0];
static BYTES: [u8; 24] = [7; 24];

unsafe extern "C" fn returns_none(
    _self: *mut c_void,
    _args: *const DVMAny,
    _num_args: i32,
    _result: *mut DVMAny,
) -> i32 {
    0
}

unsafe extern "C" fn hosted_returns_none(
    _self: *mut c_void,
    _args: *const DVMAny,
    _num_args: i32,
    _worker_id: i32,
    _result: *mut DVMAny,
) -> i32 {
    0
}

/// Every C function, in the header's order. The SAFETY of each call: the arguments are the
/// fixture's live objects and buffers, or the bad values a case puts in their place, which the
/// function must refuse before using them.
#[rustfmt::skip]
const APIS: &[Api] = &[
    Api { name: "dvm_device_count",
        valid: |f| vec![I32(1), ptr(f.out())],
        call: |a| status(unsafe { dvm_device_count(a.i32(0), a.p(1)) }) },
    Api { name: "dvm_dref_get",
        valid: |f| vec![ptr(f.open.ranks), I32(0), ptr(f.out())],
        call: |a| status(unsafe { dvm_dref_get(a.cp(0), a.i32(1), a.p(2)) }) },
    Api { name: "dvm_dref_set",
        valid: |f| vec![ptr(f.scratch), I32(0), ptr(f.args())],
        call: |a| status(unsafe { dvm_dref_set(a.cp(0), a.i32(1), a.cp(2)) }) },
    Api { name: "dvm_dref_free",
        valid: |f| vec![ptr(f.open.ranks)],
        call: |a| { unsafe { dvm_dref_free(a.p(0)) }; Returned::Nothing } },
    Api { name: "dvm_last_error_kind",
        valid: |_| vec![],
        call: |_| Returned::ErrorValue(dvm_last_error_kind().is_null()) },
    Api { name: "dvm_last_error_message",
        valid: |_| vec![],
        call: |_| Returned::ErrorValue(dvm_last_error_message().is_null()) },
    Api { name: "dvm_error_raise",
        valid: |_| vec![text(c"ValueError"), text(c"raised")],
        call: |a| { unsafe { dvm_error_raise(a.cp(0), a.cp(1)) }; Returned::Nothing } },
    Api { name: "dvm_version",
        valid: |_| vec![],
        call: |_| Returned::ErrorValue(dvm_version().is_null()) },
    Api { name: "dvm_func_new",
        valid: |f| vec![Arg::Ptr(null_mut()), Arg::Call(Some(returns_none)), Arg::Deleter(None),
                        ptr(f.out())],
        call: |a| status(unsafe { dvm_func_new(a.p(0), a.call(1), a.deleter(2), a.p(3)) }) },
    Api { name: "dvm_func_new_hosted",
        valid: |f| vec![Arg::Ptr(null_mut()), Arg::HostedCall(Some(hosted_returns_none)),
                        Arg::Deleter(None), ptr(f.out())],
        call: |a| status(unsafe {
            dvm_func_new_hosted(a.p(0), a.hosted_call(1), a.deleter(2), a.p(3))
        }) },
    Api { name: "dvm_func_free",
        valid: |f| vec![ptr(f.function)],
        call: |a| { unsafe { dvm_func_free(a.p(0)) }; Returned::Nothing } },
    Api { name: "dvm_func_call",
        valid: |f| vec![ptr(f.function), ptr(f.args()), I32(1), ptr(f.out())],
        call: |a| status(unsafe { dvm_func_call(a.p(0), a.cp(1), a.i32(2), a.p(3)) }) },
    Api { name: "dvm_func_register_global",
        valid: |f| vec![text(c"bad_inputs.f"), ptr(f.function), I32(0)],
        call: |a| status(unsafe { dvm_func_register_global(a.cp(0), a.p(1), a.i32(2)) }) },
    Api { name: "dvm_func_get_global",
        valid: |f| vec![text(c"runtime.disco.worker_rank"), ptr(f.out())],
        call: |a| status(unsafe { dvm_func_get_global(a.cp(0), a.p(1)) }) },
    Api { name: "dvm_func_list_global_names",
        valid: |f| vec![ptr(f.out())],
        call: |a| status(unsafe { dvm_func_list_global_names(a.p(0)) }) },
    Api { name: "dvm_func_remove_global",
        valid: |_| vec![text(c"bad_inputs.absent")],
        call: |a| status(unsafe { dvm_func_remove_global(a.cp(0)) }) },
    Api { name: "dvm_session_new_threaded",
        valid: |f| vec![I32(1), I32(1), Arg::Ptr(null_mut()), ptr(f.out())],
        call: |a| status(unsafe { dvm_session_new_threaded(a.i32(0), a.i32(1), a.cp(2), a.p(3)) }) },
    Api { name: "dvm_session_new_process",
        valid: |f| vec![I32(1), I32(1), Arg::Ptr(null_mut()), ptr(f.out())],
        call: |a| status(unsafe { dvm_session_new_process(a.i32(0), a.i32(1), a.cp(2), a.p(3)) }) },
    Api { name: "dvm_worker_main",
        valid: |_| vec![I32(1), ptr(PROGRAM_ARGV.0.as_ptr())],
        call: |a| Returned::ErrorValue(unsafe { dvm_worker_main(a.i32(0), a.cp(1)) } != 0) },
    Api { name: "dvm_session_new_socket",
        valid: |f| vec![I32(1), I32(1), I32(1), text(c"127.0.0.1"), I32(0), Arg::Ptr(null_mut()), ptr(f.out())],
        call: |a| status(unsafe { dvm_session_new_socket(a.i32(0), a.i32(1), a.i32(2), a.cp(3), a.i32(4), a.cp(5), a.p(6)) }) },
    Api { name: "dvm_node_main",
        valid: |_| vec![I32(1), ptr(PROGRAM_ARGV.0.as_ptr())],
        call: |a| Returned::ErrorValue(unsafe { dvm_node_main(a.i32(0), a.cp(1)) } != 0) },
    Api { name: "dvm_session_num_workers",
        valid: |f| vec![ptr(f.open.session)],
        call: |a| Returned::ErrorValue(unsafe { dvm_session_num_workers(a.cp(0)) } == -1) },
    Api { name: "dvm_session_get_global_func",
        valid: |f| vec![ptr(f.open.session), text(c"runtime.disco.worker_rank"), ptr(f.out())],
        call: |a| status(unsafe { dvm_session_get_global_func(a.p(0), a.cp(1), a.p(2)) }) },
    Api { name: "dvm_session_load_module",
        valid: |f| vec![ptr(f.open.session), ptr(module_path().as_ptr()), ptr(f.out())],
        call: |a| status(unsafe { dvm_session_load_module(a.p(0), a.cp(1), a.p(2)) }) },
    Api { name: "dvm_session_module_func",
        valid: |f| vec![ptr(f.open.session), ptr(f.open.module), text(c"version"), ptr(f.out())],
        call: |a| status(unsafe {
            dvm_session_module_func(a.p(0), a.cp(1), a.cp(2), a.p(3))
        }) },
    Api { name: "dvm_session_call",
        valid: |f| vec![ptr(f.open.session), ptr(f.open.func), ptr(f.args()), I32(1),
                        ptr(f.out())],
        call: |a| status(unsafe {
            dvm_session_call(a.p(0), a.cp(1), a.cp(2), a.i32(3), a.p(4))
        }) },
    Api { name: "dvm_session_sync_worker",
        valid: |f| vec![ptr(f.open.session), I32(0)],
        call: |a| status(unsafe { dvm_session_sync_worker(a.p(0), a.i32(1)) }) },
    Api { name: "dvm_session_sync_all",
        valid: |f| vec![ptr(f.open.session)],
        call: |a| status(unsafe { dvm_session_sync_all(a.p(0)) }) },
    Api { name: "dvm_session_status",
        valid: |f| vec![ptr(f.open.session), ptr(f.out())],
        call: |a| status(unsafe { dvm_session_status(a.p(0), a.p(1)) }) },
    Api { name: "dvm_session_trace_start",
        valid: |f| vec![ptr(f.open.session)],
        call: |a| status(unsafe { dvm_session_trace_start(a.p(0)) }) },
    Api { name: "dvm_session_trace_stop",
        valid: |f| vec![ptr(f.open.session), text(c"/tmp/discovm-bad-inputs-trace.json")],
        call: |a| status(unsafe { dvm_session_trace_stop(a.p(0), a.cp(1)) }) },
    Api { name: "dvm_session_trace_dump",
        valid: |f| vec![ptr(f.open.session), text(c"/tmp/discovm-bad-inputs-dump.json")],
        call: |a| status(unsafe { dvm_session_trace_dump(a.p(0), a.cp(1)) }) },
    Api { name: "dvm_session_init_ccl",
        valid: |f| vec![ptr(f.open.session), text(c"cpu"), ptr(DEVICE_IDS.as_ptr()), I32(2)],
        call: |a| status(unsafe { dvm_session_init_ccl(a.p(0), a.cp(1), a.cp(2), a.i32(3)) }) },
    Api { name: "dvm_session_copy_to_worker0",
        valid: |f| vec![ptr(f.open.session), ptr(f.host()), ptr(f.open.remote)],
        call: |a| status(unsafe { dvm_session_copy_to_worker0(a.p(0), a.cp(1), a.cp(2)) }) },
    Api { name: "dvm_session_copy_from_worker0",
        valid: |f| vec![ptr(f.open.session), ptr(f.host()), ptr(f.open.remote)],
        call: |a| status(unsafe { dvm_session_copy_from_worker0(a.p(0), a.p(1), a.cp(2)) }) },
    Api { name: "dvm_session_live_registers",
        valid: |f| vec![ptr(f.open.session), I32(0), ptr(f.out())],
        call: |a| status(unsafe { dvm_session_live_registers(a.p(0), a.i32(1), a.p(2)) }) },
    Api { name: "dvm_session_shutdown",
        valid: |f| vec![ptr(f.open.session)],
        call: |a| status(unsafe { dvm_session_shutdown(a.p(0)) }) },
    Api { name: "dvm_session_free",
        valid: |f| vec![ptr(f.open.session)],
        call: |a| { unsafe { dvm_session_free(a.p(0)) }; Returned::Nothing } },
    Api { name: "dvm_stream_new",
        valid: |f| vec![Arg::Device(CPU), ptr(f.out())],
        call: |a| status(unsafe { dvm_stream_new(a.device(0), a.p(1)) }) },
    Api { name: "dvm_stream_sync",
        valid: |f| vec![ptr(f.stream)],
        call: |a| status(unsafe { dvm_stream_sync(a.p(0)) }) },
    Api { name: "dvm_stream_wait",
        valid: |f| vec![ptr(f.stream), ptr(f.stream2)],
        call: |a| status(unsafe { dvm_stream_wait(a.p(0), a.p(1)) }) },
    Api { name: "dvm_stream_free",
        valid: |f| vec![ptr(f.stream)],
        call: |a| { unsafe { dvm_stream_free(a.p(0)) }; Returned::Nothing } },
    Api { name: "dvm_tensor_empty",
        valid: |f| vec![ptr(DIMS.as_ptr()), I32(2), Arg::DType(F32), Arg::Device(CPU),
                        ptr(f.out())],
        call: |a| status(unsafe {
            dvm_tensor_empty(a.cp(0), a.i32(1), a.dtype(2), a.device(3), a.p(4))
        }) },
    Api { name: "dvm_tensor_free",
        valid: |f| vec![ptr(f.tensor)],
        call: |a| { unsafe { dvm_tensor_free(a.p(0)) }; Returned::Nothing } },
    Api { name: "dvm_tensor_dl",
        valid: |f| vec![ptr(f.tensor)],
        call: |a| Returned::ErrorValue(unsafe { dvm_tensor_dl(a.cp(0)) }.is_null()) },
    Api { name: "dvm_tensor_from_dlpack",
        valid: |f| vec![ptr(f.managed()), ptr(f.out())],
        call: |a| status(unsafe { dvm_tensor_from_dlpack(a.p(0), a.p(1)) }) },
    Api { name: "dvm_tensor_to_dlpack",
        valid: |f| vec![ptr(f.tensor), ptr(f.out())],
        call: |a| status(unsafe { dvm_tensor_to_dlpack(a.p(0), a.p(1)) }) },
    Api { name: "dvm_tensor_read",
        valid: |f| vec![ptr(f.tensor), ptr(f.out()), Size(4)],
        call: |a| status(unsafe { dvm_tensor_read(a.p(0), a.p(1), a.size(2)) }) },
    Api { name: "dvm_tensor_write",
        valid: |f| vec![ptr(f.tensor2), ptr(BYTES.as_ptr()), Size(4)],
        call: |a| status(unsafe { dvm_tensor_write(a.p(0), a.cp(1), a.size(2)) }) },
    Api { name: "dvm_tensor_copy",
        valid: |f| vec![ptr(f.tensor2), ptr(f.tensor), ptr(f.stream)],
        call: |a| status(unsafe { dvm_tensor_copy(a.p(0), a.p(1), a.p(2)) }) },
    Api { name: "dvm_object_inc_ref",
        valid: |f| vec![Arg::Ptr(f.string)],
        call: |a| status(unsafe { dvm_object_inc_ref(a.p(0)) }) },
    Api { name: "dvm_object_dec_ref",
        valid: |f| vec![Arg::Ptr(f.string)],
        call: |a| status(unsafe { dvm_object_dec_ref(a.p(0)) }) },
    Api { name: "dvm_any_release",
        valid: |f| vec![ptr(f.out())],
        call: |a| status(unsafe { dvm_any_release(a.p(0)) }) },
    Api { name: "dvm_string_new",
        valid: |f| vec![text(c"abc"), Size(3), ptr(f.out())],
        call: |a| status(unsafe { dvm_string_new(a.cp(0), a.size(1), a.p(2)) }) },
    Api { name: "dvm_bytes_new",
        valid: |f| vec![ptr(BYTES.as_ptr()), Size(3), ptr(f.out())],
        call: |a| status(unsafe { dvm_bytes_new(a.cp(0), a.size(1), a.p(2)) }) },
    Api { name: "dvm_shape_new",
        valid: |f| vec![ptr(DIMS.as_ptr()), I32(2), ptr(f.out())],
        call: |a| status(unsafe { dvm_shape_new(a.cp(0), a.i32(1), a.p(2)) }) },
    Api { name: "dvm_session_worker",
        valid: |f| vec![ptr(f.open.session), I32(0), ptr(f.out())],
        call: |a| status(unsafe { dvm_session_worker(a.p(0), a.i32(1), a.p(2)) }) },
    Api { name: "dvm_worker_free",
        valid: |f| vec![ptr(f.open.worker)],
        call: |a| { unsafe { dvm_worker_free(a.p(0)) }; Returned::Nothing } },
    Api { name: "dvm_worker_call",
        valid: |f| vec![ptr(f.open.worker), ptr(f.open.func), ptr(f.args()), I32(1),
                        ptr(f.out())],
        call: |a| status(unsafe {
            dvm_worker_call(a.p(0), a.cp(1), a.cp(2), a.i32(3), a.p(4))
        }) },
    Api { name: "dvm_worker_sync",
        valid: |f| vec![ptr(f.open.worker)],
        call: |a| status(unsafe { dvm_worker_sync(a.p(0)) }) },
    Api { name: "dvm_worker_id",
        valid: |f| vec![ptr(f.open.worker)],
        call: |a| Returned::ErrorValue(unsafe { dvm_worker_id(a.cp(0)) } == -1) },
    Api { name: "dvm_worker_device",
        valid: |f| vec![ptr(f.open.worker), ptr(f.out())],
        call: |a| status(unsafe { dvm_worker_device(a.cp(0), a.p(1)) }) },
    Api { name: "dvm_current_worker_id",
        valid: |_| vec![],
        call: |_| Returned::ErrorValue(dvm_current_worker_id() == -1) },
    Api { name: "dvm_current_worker",
        valid: |f| vec![ptr(f.out())],
        call: |a| status(unsafe { dvm_current_worker(a.p(0)) }) },
];

/// How a parameter's declared type reads.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Class {
    /// A pointer to a handle of this kind (`dvm_tensor *t`).
    Handle(Handle),
    /// Any other pointer, function pointers included.
    Pointer,
    Int32,
    Size,
    Device,
    DType,
}

struct Param {
    name: String,
    /// The declared type, as written (`const DVMAny *`).
    ty: String,
    class: Class,
}

struct Signature {
    params: Vec<Param>,
}

fn classify(ty: &str) -> Class {
    let base = ty.replace("const", "");
    let base = base.trim();
    let handle = match base.trim_end_matches('*').trim() {
        "dvm_session" => Some(Handle::Session),
        "dvm_dref" => Some(Handle::DRef),
        "dvm_worker" => Some(Handle::Worker),
        "dvm_stream" => Some(Handle::Stream),
        "dvm_tensor" => Some(Handle::Tensor),
        "dvm_func" => Some(Handle::Function),
        _ => None,
    };
    match (base.matches('*').count(), handle) {
        (1, Some(kind)) => Class::Handle(kind),
        (0, _) => match base {
            "int32_t" | "int" => Class::Int32,
            "size_t" => Class::Size,
            "DLDevice" => Class::Device,
            "DLDataType" => Class::DType,
            other => panic!("the header has a parameter of type {other}: teach classify()"),
        },
        _ => Class::Pointer,
    }
}

/// Splits `params` at the commas outside parentheses.
fn split_params(params: &str) -> Vec<&str> {
    let (mut depth, mut start, mut parts) = (0, 0, Vec::new());
    for (i, c) in params.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(params[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(params[start..].trim());
    parts.retain(|p| !p.is_empty() && *p != "void");
    parts
}

/// A parameter's name and type: the name inside `(*name)` for a function pointer, else the
/// last word.
fn parse_param(param: &str) -> Param {
    if let Some(at) = param.find("(*") {
        let name = &param[at + 2..param[at..].find(')').unwrap() + at];
        return Param {
            name: name.to_string(),
            ty: param.to_string(),
            class: Class::Pointer,
        };
    }
    let at = param
        .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .expect("a parameter has a type");
    Param {
        name: param[at + 1..].to_string(),
        ty: param[..=at].trim().to_string(),
        class: classify(&param[..=at]),
    }
}

/// The functions `include/discovm.h` declares, with their parameters.
fn declarations() -> BTreeMap<String, Signature> {
    let header = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("include/discovm.h"),
    )
    .expect("include/discovm.h is readable");
    let mut declarations = BTreeMap::new();
    let mut pending = String::new();
    for line in header.lines() {
        let starts = !line.starts_with([' ', '/', '#', '}', '*'])
            && !line.starts_with("typedef")
            && line.contains("dvm_")
            && line.contains('(');
        if pending.is_empty() && !starts {
            continue;
        }
        pending.push_str(line.trim());
        pending.push(' ');
        if !line.trim_end().ends_with(");") {
            continue;
        }
        let open = pending.find('(').unwrap();
        let head = &pending[..open];
        let at = head
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap();
        let name = head[at + 1..].to_string();
        let body = &pending[open + 1..pending.trim_end().len() - 2];
        let params = split_params(body).into_iter().map(parse_param).collect();
        declarations.insert(name, Signature { params });
        pending.clear();
    }
    declarations
}

/// A call to build a case from: a function's valid arguments, some replaced.
struct Call<'f> {
    api: &'static Api,
    params: Vec<String>,
    args: Vec<Arg>,
    what: Vec<String>,
    keep: Vec<Box<dyn std::any::Any>>,
    _fixture: std::marker::PhantomData<&'f Fixture>,
}

impl<'f> Call<'f> {
    /// Replaces the argument `param` (`what` says how, for reports).
    fn set(mut self, param: &str, arg: Arg, what: impl Into<String>) -> Self {
        let i = self
            .params
            .iter()
            .position(|p| p == param)
            .unwrap_or_else(|| panic!("{} has no parameter `{param}`", self.api.name));
        self.args[i] = arg;
        self.what.push(format!("`{param}` {}", what.into()));
        self
    }

    /// Keeps `value` (memory an argument points into) alive until the case ran.
    fn keep<T: 'static>(mut self, value: Box<T>) -> Self {
        self.keep.push(value);
        self
    }

    fn into_run(self) -> (String, String, impl FnOnce() -> Returned + 'f) {
        let (api, args, keep) = (self.api, self.args, self.keep);
        let what = if self.what.is_empty() {
            "valid arguments".to_string()
        } else {
            self.what.join(", ")
        };
        let run = move || {
            let returned = (api.call)(Args(&args));
            drop(keep);
            returned
        };
        (api.name.to_string(), what, run)
    }

    fn fails(self, kind: Kind, names: &str, text: impl Into<String>) -> Case<'f> {
        let (function, what, run) = self.into_run();
        Case::fails(&function, what, kind, names, text, run)
    }

    /// Gives `param` text that is not UTF-8, which the call must refuse, naming `param`.
    fn not_utf8(self, param: &str, bad: &'static CStr) -> Case<'f> {
        self.set(param, text(bad), "is not UTF-8").fails(
            Kind::Value,
            param,
            format!("`{param}` is not valid UTF-8"),
        )
    }

    fn succeeds(self) -> Case<'f> {
        let (function, what, run) = self.into_run();
        Case::succeeds(&function, what, run)
    }

    fn raises(self, error: (&str, &str)) -> Case<'f> {
        let (function, what, run) = self.into_run();
        Case::raises(&function, what, error, run)
    }
}

/// The declarations of the C functions and the fixture their valid calls use.
struct Table<'f> {
    f: &'f Fixture,
    sigs: BTreeMap<String, Signature>,
}

impl<'f> Table<'f> {
    /// A valid call of `name`, to replace arguments of.
    fn call(&self, name: &str) -> Call<'f> {
        let api = APIS
            .iter()
            .find(|a| a.name == name)
            .unwrap_or_else(|| panic!("no valid call of {name} in APIS"));
        let sig = &self.sigs[name];
        let args = (api.valid)(self.f);
        assert_eq!(
            args.len(),
            sig.params.len(),
            "the valid call of {name} has {} arguments; the header declares {}",
            args.len(),
            sig.params.len()
        );
        Call {
            api,
            params: sig.params.iter().map(|p| p.name.clone()).collect(),
            args,
            what: Vec::new(),
            keep: Vec::new(),
            _fixture: std::marker::PhantomData,
        }
    }
}

/// Parameters that may be NULL; their cases are written out.
const NULLABLE: [(&str, &str); 2] = [("dvm_error_raise", "kind"), ("dvm_error_raise", "message")];

/// Whether a function only drops a reference (`dvm_X_free`).
fn is_free(name: &str) -> bool {
    name.ends_with("_free")
}

/// The generated cases of one function.
fn generated<'f>(table: &Table<'f>, name: &str) -> Vec<Case<'f>> {
    let f = table.f;
    let sig = &table.sigs[name];
    let valid = table.call(name).args;
    let mut cases = Vec::new();
    for (i, param) in sig.params.iter().enumerate() {
        let p = param.name.as_str();
        // NULL for each pointer the valid call passes (parameters that may be NULL, like
        // `opts`, are NULL there already; their cases are written out).
        if matches!(param.class, Class::Handle(_) | Class::Pointer)
            && !valid[i].is_null()
            && !NULLABLE.contains(&(name, p))
        {
            let call = table.call(name).set(p, valid[i].null(), "is NULL");
            cases.push(if is_free(name) {
                call.succeeds()
            } else {
                call.fails(Kind::Value, p, format!("`{p}` is NULL"))
            });
        }
        match param.class {
            // Every other kind of object where a handle is expected.
            Class::Handle(expected) if !is_free(name) => {
                for kind in Handle::ALL.into_iter().filter(|&k| k != expected) {
                    cases.push(
                        table
                            .call(name)
                            .set(
                                p,
                                Arg::Ptr(f.handle(kind)),
                                format!("is a {}", kind.type_name()),
                            )
                            .fails(
                                Kind::Type,
                                p,
                                format!(
                                    "`{p}` is not {} (it is {})",
                                    expected.what(),
                                    kind.type_name()
                                ),
                            ),
                    );
                }
            }
            // Any object may be freed through any `_free`: one reference goes, whatever its type.
            Class::Handle(_) => {
                let call = table.call(name);
                cases.push(extra_reference_freed(
                    call,
                    p,
                    f.handle(Handle::Shape),
                    "a ffi.Shape",
                ));
            }
            Class::Int32 if p == "worker" => {
                for worker in [-1, WORKERS, i32::MAX, i32::MIN] {
                    cases.push(
                        table
                            .call(name)
                            .set(p, I32(worker), format!("is {worker}"))
                            .fails(
                                Kind::Index,
                                p,
                                format!(
                                    "worker {worker} out of range (session has {WORKERS} workers)"
                                ),
                            ),
                    );
                }
            }
            Class::Int32 if ["num_args", "ndim", "n"].contains(&p) => {
                for count in [-1, i32::MIN] {
                    cases.push(
                        table
                            .call(name)
                            .set(p, I32(count), format!("is {count}"))
                            .fails(Kind::Value, p, format!("`{p}` is negative ({count})")),
                    );
                }
            }
            _ => {}
        }
        // Malformed packed values where values are passed in.
        if param.ty == "const DVMAny *" {
            let names = if p == "args" { "`args[0]`" } else { "`value`" };
            for (value, kind, message, what) in malformed_values(f) {
                let value = Box::new(value);
                cases.push(
                    table
                        .call(name)
                        .set(p, ptr(&*value), format!("holds {what}"))
                        .keep(value)
                        .fails(kind, p, format!("{names}: {message}")),
                );
            }
        }
    }
    cases
}

/// A `_free` given `object` as `param` after a reference was added: the reference goes and the
/// object stays.
fn extra_reference_freed<'f>(
    call: Call<'f>,
    param: &str,
    object: *mut c_void,
    what: &str,
) -> Case<'f> {
    let (function, what, free) = call
        .set(param, Arg::Ptr(object), format!("is {what}"))
        .into_run();
    let before = Rc::new(Cell::new(0));
    let counted = before.clone();
    Case::succeeds(&function, what, move || {
        counted.set(strong_count(object));
        // SAFETY: a live object of the fixture; the call drops the reference again.
        unsafe { dvm_object_inc_ref(object) };
        free()
    })
    .then(move || match strong_count(object) {
        after if after == before.get() => Ok(()),
        after => Err(format!("{after} references left, not {}", before.get())),
    })
}

/// Every function of the shut-down session's, called with its handles: `SessionClosed`, except
/// for what a session knows without its workers.
fn shut_down<'f>(table: &Table<'f>, name: &str) -> Option<Case<'f>> {
    let sig = &table.sigs[name];
    let closed = &table.f.closed;
    if !sig.params.iter().any(|p| {
        matches!(
            p.class,
            Class::Handle(Handle::Session | Handle::DRef | Handle::Worker)
        )
    }) {
        return None;
    }
    if is_free(name) {
        let param = &sig.params[0].name;
        let object = match sig.params[0].class {
            Class::Handle(Handle::Session) => closed.session.cast(),
            Class::Handle(Handle::Worker) => closed.worker.cast(),
            _ => closed.ranks.cast(),
        };
        return Some(extra_reference_freed(
            table.call(name),
            param,
            object,
            "of a shut-down session",
        ));
    }
    let mut call = table.call(name);
    for param in &sig.params {
        let handle: *mut c_void = match (param.class, param.name.as_str()) {
            (Class::Handle(Handle::Session), _) => closed.session.cast(),
            (Class::Handle(Handle::Worker), _) => closed.worker.cast(),
            (Class::Handle(Handle::DRef), "func") => closed.func.cast(),
            (Class::Handle(Handle::DRef), "dst" | "src") => closed.remote.cast(),
            (Class::Handle(Handle::DRef), _) => closed.ranks.cast(),
            _ => continue,
        };
        call = call.set(&param.name, Arg::Ptr(handle), "is of a shut-down session");
    }
    let answers = [
        "dvm_session_num_workers",
        "dvm_session_shutdown",
        "dvm_worker_id",
        "dvm_worker_device",
    ];
    Some(if answers.contains(&name) {
        call.succeeds()
    } else {
        call.fails(
            Kind::SessionClosed,
            "session",
            "the session has been shut down",
        )
    })
}

pub fn cases(f: &Fixture) -> Vec<Case<'_>> {
    let table = Table {
        f,
        sigs: declarations(),
    };
    let missing: Vec<&String> = table
        .sigs
        .keys()
        .filter(|name| !APIS.iter().any(|a| a.name == name.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "include/discovm.h declares functions tests/bad_inputs/c_api.rs has no valid call of \
         (add them to APIS): {missing:?}"
    );
    let mut cases = Vec::new();
    for api in APIS {
        cases.extend(generated(&table, api.name));
        cases.extend(shut_down(&table, api.name));
    }
    cases.extend(written_out(&table));
    cases
}
