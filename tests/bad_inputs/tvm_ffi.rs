//! The `__tvm_ffi_*` entry points: each one's parameters as `TVM_FFI.md` documents them, a
//! valid argument list to vary one argument of at a time, the cases generated from the
//! parameters' types, and the cases written out.

use std::ffi::{CStr, c_void};
use std::ptr::null_mut;

use discovm::Any;
use discovm::abi::{DLDevice, DVMAny, DVMAnyPayload, type_index as ti};
use discovm::capi::*;
use discovm::object::{Array, Shape};

use crate::fixture::{
    CPU, F32, Fixture, Handle, WORKERS, any_int, any_object, any_tensor_ptr, malformed_values,
    module_path,
};
use crate::{Case, Kind, Returned};

type SafeCall = unsafe extern "C" fn(*mut c_void, *const DVMAny, i32, *mut DVMAny) -> i32;

/// Declares the entry points (linked from the crate like any other symbol) and finds them by
/// name.
macro_rules! entry_points {
    ($($name:ident),* $(,)?) => {
        unsafe extern "C" {
            $(fn $name(handle: *mut c_void, args: *const DVMAny, n: i32, out: *mut DVMAny) -> i32;)*
        }

        fn entry_point(name: &str) -> Option<SafeCall> {
            match name {
                $(stringify!($name) => Some($name as SafeCall),)*
                _ => None,
            }
        }
    };
}

entry_points!(
    __tvm_ffi_version,
    __tvm_ffi_device_count,
    __tvm_ffi_object_type_keys,
    __tvm_ffi_func_register_global,
    __tvm_ffi_func_get_global,
    __tvm_ffi_func_remove_global,
    __tvm_ffi_func_list_global_names,
    __tvm_ffi_func_call,
    __tvm_ffi_current_worker_id,
    __tvm_ffi_current_worker,
    __tvm_ffi_session_new_threaded,
    __tvm_ffi_session_new_process,
    __tvm_ffi_worker_main,
    __tvm_ffi_session_new_socket,
    __tvm_ffi_node_main,
    __tvm_ffi_session_num_workers,
    __tvm_ffi_session_get_global_func,
    __tvm_ffi_session_load_module,
    __tvm_ffi_session_module_func,
    __tvm_ffi_session_call,
    __tvm_ffi_session_bind,
    __tvm_ffi_session_sync_worker,
    __tvm_ffi_session_sync_all,
    __tvm_ffi_session_status,
    __tvm_ffi_session_trace_start,
    __tvm_ffi_session_trace_stop,
    __tvm_ffi_session_trace_dump,
    __tvm_ffi_session_init_ccl,
    __tvm_ffi_session_copy_to_worker0,
    __tvm_ffi_session_copy_from_worker0,
    __tvm_ffi_session_live_registers,
    __tvm_ffi_session_shutdown,
    __tvm_ffi_session_worker,
    __tvm_ffi_worker_call,
    __tvm_ffi_worker_sync,
    __tvm_ffi_worker_id,
    __tvm_ffi_worker_device,
    __tvm_ffi_dref_get,
    __tvm_ffi_dref_set,
    __tvm_ffi_stream_new,
    __tvm_ffi_stream_sync,
    __tvm_ffi_stream_wait,
    __tvm_ffi_tensor_empty,
    __tvm_ffi_tensor_read,
    __tvm_ffi_tensor_write,
    __tvm_ffi_tensor_copy,
    __tvm_ffi_tensor_settle,
    __tvm_ffi_tensor_from_dlpack,
);

/// One argument: a value of the library's own making (kept alive here), or raw bits.
#[derive(Clone)]
enum Value {
    Owned(Any),
    Raw(DVMAny),
}

impl Value {
    fn raw(&self) -> DVMAny {
        match self {
            Value::Owned(any) => *any.view().raw(),
            Value::Raw(raw) => *raw,
        }
    }
}

fn int(v: i64) -> Value {
    Value::Raw(any_int(v))
}

fn object(object: *mut c_void) -> Value {
    Value::Raw(any_object(object))
}

fn c_str(s: &'static CStr) -> Value {
    Value::Raw(DVMAny {
        type_index: ti::RAW_STR,
        small_str_len: 0,
        v: DVMAnyPayload {
            v_c_str: s.as_ptr(),
        },
    })
}

/// A string or byte string of at most 7 bytes, inline.
fn small(type_index: i32, bytes: &[u8]) -> Value {
    let mut v_bytes = [0u8; 8];
    v_bytes[..bytes.len()].copy_from_slice(bytes);
    Value::Raw(DVMAny {
        type_index,
        small_str_len: bytes.len() as u32,
        v: DVMAnyPayload { v_bytes },
    })
}

fn device(device_type: i32, device_id: i32) -> Value {
    Value::Owned(Any::Device(DLDevice {
        device_type,
        device_id,
    }))
}

fn borrowed_tensor(f: &Fixture) -> Value {
    Value::Raw(any_tensor_ptr(f.host()))
}

/// A parameter as `TVM_FFI.md` documents it.
#[derive(Clone)]
struct Param {
    name: String,
    ty: String,
    optional: bool,
}

/// The entry points `TVM_FFI.md` documents, with their parameters (`*args` as a parameter
/// named `*args`).
fn documented() -> Vec<(String, Vec<Param>)> {
    let page = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("TVM_FFI.md"),
    )
    .expect("TVM_FFI.md is readable");
    page.lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|row| {
            let (name, rest) = row.split_once('(')?;
            let params = &rest[..rest.find(')')?];
            let params = params
                .split(", ")
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (head, default) = p.split_once(" = ").unwrap_or((p, ""));
                    let (name, ty) = head.split_once(": ").unwrap_or((head, "Any"));
                    Param {
                        name: name.to_string(),
                        ty: ty.to_string(),
                        optional: !default.is_empty(),
                    }
                })
                .collect();
            Some((format!("__tvm_ffi_{name}"), params))
        })
        .collect()
}

/// A valid argument list of each entry point (one value for a trailing `*args`).
fn valid(f: &Fixture, name: &str) -> Option<Vec<Value>> {
    let open = &f.open;
    let shape = |dims: &[i64]| Value::Owned(Shape::new(dims).into());
    Some(match name.strip_prefix("__tvm_ffi_")? {
        "version"
        | "func_list_global_names"
        | "current_worker_id"
        | "current_worker"
        | "object_type_keys" => vec![],
        "device_count" => vec![int(1)],
        "func_register_global" => vec![
            c_str(c"bad_inputs.tvm_ffi"),
            object(f.function.cast()),
            Value::Owned(Any::Bool(false)),
        ],
        "func_get_global" => vec![c_str(c"runtime.disco.worker_rank")],
        "func_remove_global" => vec![c_str(c"bad_inputs.missing")],
        "func_call" => vec![object(f.function.cast()), int(1)],
        "session_new_threaded" => vec![
            int(1),
            int(1),
            int(60_000),
            int(0),
            shape(&[-1]),
            Value::Owned(Array::new([Any::Device(CPU)]).into()),
        ],
        // Refused before a worker starts: the cases vary one argument, to a wrong one.
        "session_new_process" => vec![int(1), int(1)],
        "session_new_socket" => vec![int(1), int(1), int(1), c_str(c"127.0.0.1"), int(0)],
        // Refused: no controller started this process.
        "worker_main" => vec![Value::Owned(Array::new([Any::from("x")]).into())],
        // Refused: too few arguments.
        "node_main" => vec![Value::Owned(Array::new([Any::from("x")]).into())],
        "session_num_workers" | "session_sync_all" | "session_status" | "session_shutdown" => {
            vec![object(open.session.cast())]
        }
        // A second start fails: a trace runs from the C API's cases.
        "session_trace_start" => vec![object(open.session.cast())],
        "session_trace_stop" | "session_trace_dump" => vec![
            object(open.session.cast()),
            c_str(c"/nonexistent-folder/trace.json"),
        ],
        "session_get_global_func" => {
            vec![
                object(open.session.cast()),
                c_str(c"runtime.disco.worker_rank"),
            ]
        }
        "session_load_module" => vec![object(open.session.cast()), c_str(module_path())],
        "session_module_func" => vec![
            object(open.session.cast()),
            object(open.module.cast()),
            c_str(c"version"),
        ],
        "session_call" => vec![
            object(open.session.cast()),
            object(open.func.cast()),
            int(1),
        ],
        "session_bind" => vec![
            object(open.session.cast()),
            object(open.func.cast()),
            Value::Owned(Any::Bool(true)),
        ],
        "session_sync_worker" | "session_live_registers" | "session_worker" => {
            vec![object(open.session.cast()), int(0)]
        }
        "session_init_ccl" => vec![
            object(open.session.cast()),
            c_str(c"cpu"),
            shape(&[0; WORKERS as usize]),
        ],
        "session_copy_to_worker0" | "session_copy_from_worker0" => vec![
            object(open.session.cast()),
            borrowed_tensor(f),
            object(open.remote.cast()),
        ],
        "worker_call" => vec![object(open.worker.cast()), object(open.func.cast()), int(1)],
        "worker_sync" | "worker_id" | "worker_device" => vec![object(open.worker.cast())],
        "dref_get" => vec![object(open.ranks.cast()), int(0)],
        "dref_set" => vec![object(f.scratch.cast()), int(0), int(5)],
        "stream_new" => vec![device(1, 0)],
        "stream_sync" => vec![object(f.stream.cast())],
        "stream_wait" => vec![object(f.stream.cast()), object(f.stream2.cast())],
        "tensor_empty" => vec![
            shape(&[2, 3]),
            Value::Owned(Any::DataType(F32)),
            device(1, 0),
        ],
        "tensor_read" => vec![object(f.tensor.cast()), int(4)],
        "tensor_write" => vec![object(f.tensor2.cast()), small(ti::SMALL_BYTES, b"abcd")],
        "tensor_copy" => vec![
            object(f.tensor2.cast()),
            object(f.tensor.cast()),
            object(f.stream.cast()),
        ],
        "tensor_settle" | "tensor_from_dlpack" => vec![object(f.tensor.cast())],
        _ => return None,
    })
}

/// A call of one entry point, to build a case from.
#[derive(Clone)]
struct Call {
    function: String,
    entry: SafeCall,
    params: Vec<Param>,
    args: Vec<Value>,
    what: Vec<String>,
}

impl Call {
    fn new(f: &Fixture, function: &str) -> Call {
        let params = documented()
            .into_iter()
            .find(|(name, _)| name == function)
            .unwrap_or_else(|| panic!("TVM_FFI.md does not document {function}"))
            .1;
        Call {
            function: function.to_string(),
            entry: entry_point(function).unwrap_or_else(|| panic!("{function} is not declared")),
            params,
            args: valid(f, function).unwrap_or_else(|| panic!("no valid call of {function}")),
            what: Vec::new(),
        }
    }

    /// The position of parameter `param`.
    fn index(&self, param: &str) -> usize {
        self.params
            .iter()
            .position(|p| p.name == param)
            .unwrap_or_else(|| panic!("{} has no parameter `{param}`", self.function))
    }

    /// Replaces argument `i`.
    fn set(mut self, i: usize, value: Value, what: impl Into<String>) -> Call {
        self.args[i] = value;
        self.what.push(format!("argument {i} {}", what.into()));
        self
    }

    /// Replaces the argument of parameter `param`.
    fn with(self, param: &str, value: Value, what: impl Into<String>) -> Call {
        let i = self.index(param);
        self.set(i, value, format!("({param}) {}", what.into()))
    }

    /// A case for this call with the packed arguments as `pack` makes them from the values.
    fn case_with<'f>(
        self,
        expect: Option<(Kind, &str, String)>,
        pack: impl FnOnce(&[DVMAny], *mut DVMAny, SafeCall) -> i32 + 'f,
        f: &'f Fixture,
    ) -> Case<'f> {
        let what = if self.what.is_empty() {
            "valid arguments".to_string()
        } else {
            self.what.join(", ")
        };
        let (function, args) = (self.function, self.args);
        let entry = self.entry;
        let run = move || {
            let raw: Vec<DVMAny> = args.iter().map(Value::raw).collect();
            Returned::Packed(pack(&raw, f.out_value(), entry))
        };
        match expect {
            Some((kind, names, text)) => Case::fails(&function, what, kind, names, text, run),
            None => Case::succeeds(&function, what, run),
        }
    }

    fn fails<'f>(
        self,
        f: &'f Fixture,
        kind: Kind,
        names: &str,
        text: impl Into<String>,
    ) -> Case<'f> {
        self.case_with(Some((kind, names, text.into())), call_packed, f)
    }

    fn succeeds(self, f: &Fixture) -> Case<'_> {
        self.case_with(None, call_packed, f)
    }
}

fn call_packed(raw: &[DVMAny], result: *mut DVMAny, entry: SafeCall) -> i32 {
    // SAFETY: `raw` holds `raw.len()` values that outlive the call; `result` is writable.
    unsafe { entry(null_mut(), raw.as_ptr(), raw.len() as i32, result) }
}

/// The handle kind a documented type names, if it names one.
fn handle_of(ty: &str) -> Option<Handle> {
    Some(match ty {
        "Session" => Handle::Session,
        "DRef" => Handle::DRef,
        "Worker" => Handle::Worker,
        "Stream" => Handle::Stream,
        "Tensor" => Handle::Tensor,
        "Function" => Handle::Function,
        _ => return None,
    })
}

/// Values of the wrong type for a documented type, each with the type name errors give it.
fn wrong_values(f: &Fixture, ty: &str) -> Vec<(Value, String)> {
    let text = || (small(ti::SMALL_STR, b"x"), "ffi.SmallStr".to_string());
    let integer = || (int(3), "int".to_string());
    match ty {
        "int" | "bool" | "DataType" | "list[int]" => {
            let mut wrong = vec![text()];
            if ty == "int" {
                wrong.push((Value::Owned(Any::Float(1.5)), "float".to_string()));
            }
            wrong
        }
        "str" | "bytes" | "Device" | "list[Device]" | "list[str]" => vec![integer()],
        handle => match handle_of(handle) {
            Some(expected) => Handle::ALL
                .into_iter()
                .filter(|&k| k != expected)
                .map(|k| (object(f.handle(k)), k.type_name().to_string()))
                .chain([integer()])
                .collect(),
            None => vec![],
        },
    }
}

/// The generated cases of one entry point.
fn generated<'f>(f: &'f Fixture, function: &str) -> Vec<Case<'f>> {
    let call = Call::new(f, function);
    let short = function.trim_start_matches("__tvm_ffi_").to_string();
    let variadic = call.params.iter().any(|p| p.name == "*args");
    let required = call
        .params
        .iter()
        .filter(|p| !p.optional && p.name != "*args")
        .count();
    let n = call.args.len() as i32;
    let mut cases = Vec::new();

    // The packed convention itself.
    let mut c = call.clone();
    c.what.push("`result` is NULL".into());
    cases.push(c.case_with(
        Some((Kind::Value, "result", "`result` is NULL".into())),
        |raw, _, entry| unsafe { entry(null_mut(), raw.as_ptr(), raw.len() as i32, null_mut()) },
        f,
    ));
    let mut c = call.clone();
    c.what
        .push(format!("`args` is NULL, `num_args` {}", n.max(1)));
    cases.push(c.case_with(
        Some((Kind::Value, "args", "`args` is NULL".into())),
        move |_, result, entry| unsafe { entry(null_mut(), std::ptr::null(), n.max(1), result) },
        f,
    ));
    let mut c = call.clone();
    c.what.push("`num_args` is -1".into());
    cases.push(c.case_with(
        Some((
            Kind::Value,
            "num_args",
            "`num_args` is negative (-1)".into(),
        )),
        |raw, result, entry| unsafe { entry(null_mut(), raw.as_ptr(), -1, result) },
        f,
    ));
    if required > 0 {
        let mut c = call.clone();
        c.args.truncate(required - 1);
        c.what.push(format!("{} arguments", required - 1));
        cases.push(c.fails(f, Kind::Type, &short, format!("`{short}` takes ")));
    }
    if !variadic {
        let mut c = call.clone();
        c.args.resize(call.params.len() + 1, int(0));
        c.what.push(format!("{} arguments", call.params.len() + 1));
        cases.push(c.fails(f, Kind::Type, &short, format!("`{short}` takes ")));
    }

    for i in 0..call.args.len() {
        let param = call
            .params
            .iter()
            .position(|p| p.name == "*args")
            .map_or_else(
                || call.params[i].clone(),
                |rest| {
                    if i >= rest {
                        Param {
                            name: format!("args[{}]", i - rest),
                            ty: "Any".into(),
                            optional: false,
                        }
                    } else {
                        call.params[i].clone()
                    }
                },
            );
        let label = format!("argument {i} ({})", param.name);
        let word = param.name.split('[').next().unwrap().to_string();
        for (value, kind, message, what) in malformed_values(f) {
            cases.push(
                call.clone()
                    .set(i, Value::Raw(value), format!("holds {what}"))
                    .fails(f, kind, &word, format!("{label}: {message}")),
            );
        }
        for (value, type_name) in wrong_values(f, &param.ty) {
            cases.push(
                call.clone()
                    .set(i, value, format!("is a {type_name}"))
                    .fails(f, Kind::Type, &word, type_name),
            );
        }
        if param.ty == "str" {
            cases.push(
                call.clone()
                    .set(i, small(ti::SMALL_STR, b"a\xffb"), "is not UTF-8")
                    .fails(
                        f,
                        Kind::Value,
                        &word,
                        format!("{label}: string argument is not valid UTF-8"),
                    ),
            );
        }
    }
    cases
}

/// Every entry point with a session, worker or DRef argument, given the shut-down session's:
/// `SessionClosed`, except for what a session knows without its workers.
fn shut_down<'f>(f: &'f Fixture, function: &str) -> Option<Case<'f>> {
    let mut call = Call::new(f, function);
    let closed = &f.closed;
    let mut any = false;
    for (i, param) in call.params.clone().iter().enumerate() {
        let handle: *mut c_void = match (param.ty.as_str(), param.name.as_str()) {
            ("Session", _) => closed.session.cast(),
            ("Worker", _) => closed.worker.cast(),
            ("DRef", "func") => closed.func.cast(),
            ("DRef", "dref") if function.contains("copy") => closed.remote.cast(),
            ("DRef", _) => closed.ranks.cast(),
            _ => continue,
        };
        any = true;
        call = call.set(i, object(handle), "is of a shut-down session");
    }
    let answers = [
        "session_num_workers",
        "session_shutdown",
        "worker_id",
        "worker_device",
    ];
    any.then(|| {
        if answers.iter().any(|a| function.ends_with(a)) {
            call.succeeds(f)
        } else {
            call.fails(
                f,
                Kind::SessionClosed,
                "session",
                "the session has been shut down",
            )
        }
    })
}

/// The cases that need values of their own.
fn written_out(f: &Fixture) -> Vec<Case<'_>> {
    let call = |function: &str| Call::new(f, &format!("__tvm_ffi_{function}"));
    let open = &f.open;
    let mut cases = vec![
        call("version").succeeds(f).then(move || {
            // SAFETY: the call wrote an owned string value.
            let value = unsafe { *f.out_value() };
            let mut release = value;
            // SAFETY: the value is owned here.
            unsafe { dvm_any_release(&mut release) };
            match value.type_index {
                ti::SMALL_STR => Ok(()),
                other => Err(format!("version() returned type index {other}")),
            }
        }),
        call("current_worker_id").succeeds(f).then(move || {
            // SAFETY: the call wrote an int.
            match unsafe { (*f.out_value()).v.v_int64 } {
                -1 => Ok(()),
                other => Err(format!("current_worker_id() is {other} off the workers")),
            }
        }),
        call("current_worker").fails(
            f,
            Kind::Runtime,
            "current_worker",
            "current_worker called off a worker thread",
        ),
    ];
    for device_type in [-1, 0, 99] {
        cases.push(
            call("device_count")
                .with("device_type", int(device_type), "is unknown")
                .fails(
                    f,
                    Kind::Value,
                    "device_type",
                    format!("argument 0 (device_type): unknown DLPack device type {device_type}"),
                ),
        );
    }
    cases.push(
        call("device_count")
            .with("device_type", int(1 << 40), "is 2^40")
            .fails(
                f,
                Kind::Value,
                "device_type",
                "argument 0 (device_type): 1099511627776 is out of range",
            ),
    );
    for (param, value, text) in [
        ("num_workers", 0, "num_workers 0 is out of range (1..=1024)"),
        (
            "num_workers",
            1 << 40,
            "num_workers 1099511627776 is out of range (1..=1024)",
        ),
        ("num_groups", 2, "num_groups 2 is out of range (1..=1)"),
        ("timeout_ms", -5, "timeout_ms is negative (-5)"),
    ] {
        cases.push(
            call("session_new_threaded")
                .with(param, int(value), format!("is {value}"))
                .fails(f, Kind::Value, param, text),
        );
    }
    let shape = |dims: &[i64]| Value::Owned(Shape::new(dims).into());
    cases.push(
        call("session_new_threaded")
            .with("cpu_affinity", shape(&[-2]), "holds -2")
            .fails(f, Kind::Value, "cpu_affinity", "cpu_affinity[0] is -2"),
    );
    cases.push(
        call("session_new_threaded")
            .with("cpu_affinity", shape(&[-1, -1]), "holds two")
            .fails(
                f,
                Kind::Value,
                "cpu_affinity",
                "cpu_affinity holds 2 CPU ids for 1 workers",
            ),
    );
    cases.push(
        call("session_new_threaded")
            .with(
                "cpu_affinity",
                Value::Owned(Array::new([Any::from("x")]).into()),
                "holds a str",
            )
            .fails(
                f,
                Kind::Type,
                "cpu_affinity",
                "argument 4 (cpu_affinity): expected int",
            ),
    );
    cases.push(
        call("session_new_threaded")
            .with(
                "devices",
                Value::Owned(
                    Array::new([Any::Device(DLDevice {
                        device_type: 2,
                        device_id: 1000,
                    })])
                    .into(),
                ),
                "holds GPU 1000",
            )
            .fails(
                f,
                Kind::DeviceUnavailable,
                "devices",
                "devices[0]: CUDA device 1000: ",
            ),
    );

    for (function, worker) in [
        ("session_sync_worker", -1),
        ("session_live_registers", 2),
        ("session_worker", 1 << 40),
        ("dref_get", 7),
        ("dref_set", -3),
    ] {
        cases.push(
            call(function)
                .with("worker", int(worker), format!("is {worker}"))
                .fails(
                    f,
                    Kind::Index,
                    "worker",
                    format!("worker {worker} out of range (session has {WORKERS} workers)"),
                ),
        );
    }
    for function in [
        "session_get_global_func",
        "func_get_global",
        "func_remove_global",
    ] {
        cases.push(
            call(function)
                .with("name", c_str(c"bad_inputs.missing"), "is missing")
                .fails(
                    f,
                    Kind::Key,
                    "name",
                    "no global function has the name `bad_inputs.missing`",
                ),
        );
    }
    cases.push(
        call("session_load_module")
            .with("path", c_str(c"/nonexistent/libmodule.so"), "is missing")
            .fails(
                f,
                Kind::Value,
                "path",
                "module path `/nonexistent/libmodule.so` is not a file",
            ),
    );
    cases.push(
        call("session_load_module")
            .with("path", c_str(c"/"), "is a directory")
            .fails(f, Kind::Value, "path", "module path `/` is not a file"),
    );
    cases.push(
        call("session_module_func")
            .with("name", small(ti::SMALL_STR, b""), "is empty")
            .fails(
                f,
                Kind::Value,
                "name",
                "a module function needs a non-empty name",
            ),
    );
    cases.push(
        call("session_module_func")
            .with(
                "module",
                object(f.other.module.cast()),
                "is of another session",
            )
            .fails(
                f,
                Kind::Value,
                "module",
                "`module` is a DRef of another session",
            ),
    );
    cases.push(
        call("func_register_global")
            .with("name", small(ti::SMALL_STR, b""), "is empty")
            .fails(
                f,
                Kind::Value,
                "name",
                "a global function needs a non-empty name",
            ),
    );
    cases.push(
        call("func_register_global")
            .with("name", c_str(c"runtime.disco.worker_rank"), "is taken")
            .fails(f, Kind::Value, "allow_override", "is already registered"),
    );

    // Collectives.
    cases.push(
        call("session_init_ccl")
            .with("backend", small(ti::SMALL_STR, b"gloo"), "is unknown")
            .fails(
                f,
                Kind::Value,
                "backend",
                "unknown collective backend \"gloo\"",
            ),
    );
    cases.push(
        call("session_init_ccl")
            .with("device_ids", shape(&[0, 0, 0]), "holds three")
            .fails(
                f,
                Kind::Value,
                "device_ids",
                "device_ids holds 3 device ids for 2 workers",
            ),
    );
    cases.push(
        call("session_init_ccl")
            .with("device_ids", shape(&[1 << 40, 0]), "holds 2^40")
            .fails(
                f,
                Kind::Value,
                "device_ids",
                "argument 2 (device_ids): 1099511627776 is out of range",
            ),
    );

    // DRefs of another session, values that cannot be kept, host tensors that do not fit.
    cases.push(
        call("session_bind")
            .with("func", object(f.other.func.cast()), "is of another session")
            .fails(
                f,
                Kind::Value,
                "func",
                "`func` is a DRef of another session",
            ),
    );
    for function in ["session_call", "worker_call"] {
        cases.push(
            call(function)
                .with("func", object(f.other.func.cast()), "is of another session")
                .fails(
                    f,
                    Kind::Value,
                    "func",
                    "`func` is a DRef of another session",
                ),
        );
        cases.push(
            call(function)
                .set(2, object(f.other.ranks.cast()), "is of another session")
                .fails(
                    f,
                    Kind::Value,
                    "args",
                    "`args[0]` is a DRef of another session",
                ),
        );
        cases.push(
            call(function)
                .set(2, borrowed_tensor(f), "is a borrowed DLTensor*")
                .fails(
                    f,
                    Kind::Type,
                    "args",
                    "`args[0]`: a borrowed DLTensor* cannot be kept",
                ),
        );
    }
    cases.push(
        call("dref_set")
            .with("value", borrowed_tensor(f), "is a borrowed DLTensor*")
            .fails(
                f,
                Kind::Type,
                "value",
                "argument 2 (value): a borrowed DLTensor* cannot be kept",
            ),
    );
    for function in ["session_copy_to_worker0", "session_copy_from_worker0"] {
        cases.push(
            call(function)
                .with(
                    "dref",
                    object(f.other.remote.cast()),
                    "is of another session",
                )
                .fails(
                    f,
                    Kind::Value,
                    "dref",
                    "`dref` is a DRef of another session",
                ),
        );
        cases.push(
            call(function)
                .with("dref", object(open.ranks.cast()), "holds no tensor")
                .fails(f, Kind::Worker, "dref", "of `dref`"),
        );
        cases.push(
            call(function)
                .with("host", object(f.tensor_32.cast()), "is [3, 2]")
                .fails(
                    f,
                    Kind::Value,
                    "host",
                    "host tensor [3, 2] float32 does not match the remote tensor [2, 3] float32",
                ),
        );
    }

    // Streams and tensors.
    for (dev, kind, text) in [
        ((2, 1000), Kind::DeviceUnavailable, "CUDA device 1000: "),
        ((1, 1), Kind::Value, "CPU device id 1 is out of range"),
        (
            (999, 0),
            Kind::DeviceUnavailable,
            "device type 999 has no backend here",
        ),
    ] {
        for function in ["stream_new", "tensor_empty"] {
            cases.push(
                call(function)
                    .with("device", device(dev.0, dev.1), format!("is {dev:?}"))
                    .fails(f, kind.clone(), "device", text),
            );
        }
    }
    // Values the tensor entry points refuse: each a ValueError that names the parameter.
    let code_99 = discovm::abi::DLDataType {
        code: 99,
        bits: 32,
        lanes: 1,
    };
    let long = Value::Owned(Any::Bytes(discovm::object::Bytes::new(&[0; 25])));
    for (function, param, value, what, text) in [
        (
            "tensor_empty",
            "shape",
            shape(&[2, -3]),
            "has -3",
            "dimension 1 of shape [2, -3] is negative",
        ),
        (
            "tensor_empty",
            "shape",
            shape(&[1; 65]),
            "has 65 dimensions",
            "ndim 65 exceeds 64: the shape has too many dimensions",
        ),
        (
            "tensor_empty",
            "dtype",
            Value::Owned(Any::DataType(code_99)),
            "is code 99",
            "invalid dtype (code 99, bits 32, lanes 1)",
        ),
        (
            "tensor_read",
            "nbytes",
            int(25),
            "is 25",
            "`nbytes`: 25 bytes cannot be read from a tensor of 24 bytes",
        ),
        (
            "tensor_read",
            "nbytes",
            int(-1),
            "is -1",
            "argument 1 (nbytes): -1 is negative",
        ),
        (
            "tensor_read",
            "t",
            object(f.strided.cast()),
            "is a strided view",
            "`t` is a strided view",
        ),
        (
            "tensor_write",
            "data",
            long,
            "holds 25 bytes",
            "`data`: 25 bytes cannot be written to a tensor of 24 bytes",
        ),
        (
            "tensor_write",
            "t",
            object(f.read_only.cast()),
            "is read-only",
            "`t` is read-only",
        ),
        (
            "tensor_copy",
            "dst",
            object(f.tensor_i32.cast()),
            "is int32",
            "into `dst`, a [2, 3] int32 tensor (24 bytes)",
        ),
        (
            "tensor_copy",
            "dst",
            object(f.alias.cast()),
            "shares `src`'s memory",
            "`dst` and `src` share memory",
        ),
    ] {
        cases.push(
            call(function)
                .with(param, value, what)
                .fails(f, Kind::Value, param, text),
        );
    }
    cases
}

pub fn cases(f: &Fixture) -> Vec<Case<'_>> {
    let documented = documented();
    let missing: Vec<&String> = documented
        .iter()
        .map(|(name, _)| name)
        .filter(|name| entry_point(name).is_none() || valid(f, name).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "TVM_FFI.md documents entry points tests/bad_inputs/tvm_ffi.rs cannot call (add them to \
         `entry_points!` and `valid`): {missing:?}"
    );
    let mut cases = Vec::new();
    for (name, _) in &documented {
        cases.extend(generated(f, name));
        cases.extend(shut_down(f, name));
    }
    cases.extend(written_out(f));
    cases
}
