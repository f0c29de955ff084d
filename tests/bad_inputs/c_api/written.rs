//! The C cases that need values of their own: integers and devices out of range, malformed
//! options and DLPack tensors, mismatched tensors, DRefs of another session, callbacks that break
//! the packed convention, freed and recreated streams, and the parameters that may be NULL.

use std::ffi::c_void;
use std::ptr::null_mut;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};

use discovm::abi::{
    DLDataType, DLDevice, DLManagedTensorVersioned, DLTensor, DVMAny, DVMAnyPayload,
    type_index as ti,
};
use discovm::capi::*;

use super::{Arg, Call, I32, Size, Table, ptr, text};
use crate::fixture::{
    CPU, F32, Fixture, I32 as INT32, any_object, any_tensor_ptr, dl_tensor, last_error,
    managed_tensor, ok,
};
use crate::{Case, Kind, Returned};

const fn device(device_type: i32, device_id: i32) -> DLDevice {
    DLDevice {
        device_type,
        device_id,
    }
}

const fn dtype(code: u8, bits: u8, lanes: u16) -> DLDataType {
    DLDataType { code, bits, lanes }
}

/// Session options with the given arrays (their lengths are the counts unless overridden).
fn options(
    timeout_ms: i64,
    cpus: Option<(&'static [i32], i32)>,
    devices: Option<(&'static [DLDevice], i32)>,
) -> Box<dvm_session_options> {
    let (cpu_affinity, num_cpu_affinity) = cpus.map_or((std::ptr::null(), 0), |(c, n)| {
        (
            if c.is_empty() {
                std::ptr::null()
            } else {
                c.as_ptr()
            },
            n,
        )
    });
    let (devices, num_devices) = devices.map_or((std::ptr::null(), 0), |(d, n)| {
        (
            if d.is_empty() {
                std::ptr::null()
            } else {
                d.as_ptr()
            },
            n,
        )
    });
    Box::new(dvm_session_options {
        timeout_ms,
        spin_us: 0,
        num_cpu_affinity,
        cpu_affinity,
        num_devices,
        devices,
        worker_program: std::ptr::null(),
        session_token: std::ptr::null(),
        heartbeat_ms: 0,
        upload_modules: 0,
        local_threads: 0,
        threads_per_worker: 0,
    })
}

/// Checks that what the output buffer holds is a handle, and frees it.
fn free_out_handle(f: &Fixture) -> Result<(), String> {
    let handle = f.out_handle();
    if handle.is_null() {
        return Err("no handle was written".into());
    }
    // SAFETY: a new reference the call returned.
    unsafe { dvm_object_dec_ref(handle) };
    Ok(())
}

/// Releases the value in the output buffer.
fn release_out_value(f: &Fixture) -> Result<(), String> {
    // SAFETY: an owned value the call returned.
    match unsafe { dvm_any_release(f.out_value()) } {
        DVM_OK => Ok(()),
        _ => Err(last_error()),
    }
}

/// A session call that starts a session and must fail: the session options and counts.
fn new_session<'f>(
    table: &Table<'f>,
    workers: i32,
    groups: i32,
    opts: Option<Box<dvm_session_options>>,
) -> Call<'f> {
    start_session(table, "dvm_session_new_threaded", workers, groups, opts)
}

/// A call of `constructor` (a `dvm_session_new_*`) with these counts and options.
fn start_session<'f>(
    table: &Table<'f>,
    constructor: &str,
    workers: i32,
    groups: i32,
    opts: Option<Box<dvm_session_options>>,
) -> Call<'f> {
    let mut call = table
        .call(constructor)
        .set("num_workers", I32(workers), format!("is {workers}"))
        .set("num_groups", I32(groups), format!("is {groups}"));
    if let Some(opts) = opts {
        call = call.set("opts", ptr(&*opts), "is malformed").keep(opts);
    }
    call
}

static ONE_CPU: [i32; 1] = [-1];
static TWO_CPUS: [i32; 2] = [-1, -1];
static NEGATIVE_CPU: [i32; 2] = [-2, 0];
static FAR_CPU: [i32; 2] = [0, 100_000];
static THREE_CPUS: [DLDevice; 3] = [CPU, CPU, CPU];
static FAR_GPU: [DLDevice; 2] = [CPU, device(2, 1000)];
static NO_BACKEND: [DLDevice; 2] = [CPU, device(999, 0)];
static SECOND_CPU: [DLDevice; 2] = [CPU, device(1, 1)];
static NEGATIVE_ID: [DLDevice; 2] = [device(1, -1), CPU];

/// Counts and options every session constructor refuses, before it starts a worker.
fn refused_by_every_constructor<'f>(table: &Table<'f>, constructor: &str) -> Vec<Case<'f>> {
    let mut cases = Vec::new();
    let start = |workers, groups, opts| start_session(table, constructor, workers, groups, opts);
    for workers in [0, -3, 1025, i32::MIN, i32::MAX] {
        cases.push(start(workers, 1, None).fails(
            Kind::Value,
            "num_workers",
            format!("num_workers {workers} is out of range (1..=1024)"),
        ));
    }
    for groups in [0, -1, 3, i32::MAX] {
        cases.push(start(2, groups, None).fails(
            Kind::Value,
            "num_groups",
            format!("num_groups {groups} is out of range (1..=2)"),
        ));
    }
    cases.push(start(4, 3, None).fails(
        Kind::Value,
        "num_groups",
        "num_workers 4 is not a multiple of num_groups 3",
    ));
    let malformed: [(Box<dvm_session_options>, Kind, &str, &str); 14] = [
        (
            options(-5, None, None),
            Kind::Value,
            "timeout_ms",
            "timeout_ms is negative (-5)",
        ),
        (
            options(0, Some((&ONE_CPU, 1)), None),
            Kind::Value,
            "cpu_affinity",
            "cpu_affinity holds 1 CPU ids for 2 workers",
        ),
        (
            options(0, Some((&[], 2)), None),
            Kind::Value,
            "cpu_affinity",
            "`cpu_affinity` is NULL",
        ),
        (
            options(0, Some((&TWO_CPUS, -1)), None),
            Kind::Value,
            "num_cpu_affinity",
            "`num_cpu_affinity` is negative (-1)",
        ),
        (
            options(0, Some((&NEGATIVE_CPU, 2)), None),
            Kind::Value,
            "cpu_affinity",
            "cpu_affinity[0] is -2 (use -1 for no pinning)",
        ),
        (
            options(0, Some((&FAR_CPU, 2)), None),
            Kind::Value,
            "cpu_affinity",
            "cpu_affinity[1] is 100000, out of range (this process may use",
        ),
        (
            options(0, None, Some((&THREE_CPUS, 3))),
            Kind::Value,
            "devices",
            "devices holds 3 devices for 2 workers",
        ),
        (
            options(0, None, Some((&[], 2))),
            Kind::Value,
            "devices",
            "`devices` is NULL",
        ),
        (
            options(0, None, Some((&THREE_CPUS, -1))),
            Kind::Value,
            "num_devices",
            "`num_devices` is negative (-1)",
        ),
        (
            options(0, None, Some((&FAR_GPU, 2))),
            Kind::DeviceUnavailable,
            "devices",
            "devices[1]: CUDA device 1000: ",
        ),
        (
            options(0, None, Some((&NO_BACKEND, 2))),
            Kind::DeviceUnavailable,
            "devices",
            "devices[1]: device type 999 has no backend here",
        ),
        (
            options(0, None, Some((&SECOND_CPU, 2))),
            Kind::Value,
            "devices",
            "devices[1]: CPU device id 1 is out of range",
        ),
        (
            options(0, None, Some((&NEGATIVE_ID, 2))),
            Kind::Value,
            "devices",
            "devices[0]: CPU device id -1 is out of range",
        ),
        (
            options(i64::MIN, None, None),
            Kind::Value,
            "timeout_ms",
            "timeout_ms is negative (-9223372036854775808)",
        ),
    ];
    for (opts, kind, names, message) in malformed {
        cases.push(start(2, 1, Some(opts)).fails(kind, names, message));
    }
    cases
}

fn sessions<'f>(table: &Table<'f>) -> Vec<Case<'f>> {
    let f = table.f;
    let mut cases = refused_by_every_constructor(table, "dvm_session_new_threaded");
    cases.extend(refused_by_every_constructor(
        table,
        "dvm_session_new_process",
    ));
    let mut missing = options(0, None, None);
    missing.worker_program = c"/nonexistent/discovm-worker".as_ptr();
    cases.push(
        start_session(table, "dvm_session_new_process", 1, 1, None)
            .set("opts", ptr(&*missing), "names a missing worker program")
            .keep(missing)
            .fails(
                Kind::Value,
                "worker_program",
                "worker program /nonexistent/discovm-worker named by the session option \
                 `worker_program` does not exist",
            ),
    );
    // A worker program run by hand, without a controller.
    cases.push(
        table
            .call("dvm_worker_main")
            .set("argc", I32(-1), "is -1")
            .fails(Kind::Value, "argc", "`argc` is negative (-1)"),
    );
    cases.push(table.call("dvm_worker_main").fails(
        Kind::Value,
        "argv",
        "a worker program is started by its controller",
    ));
    // A node program run without its arguments.
    cases.push(
        table
            .call("dvm_node_main")
            .set("argc", I32(-1), "is -1")
            .fails(Kind::Value, "argc", "`argc` is negative (-1)"),
    );
    cases.push(table.call("dvm_node_main").fails(
        Kind::Value,
        "argv",
        "usage: discovm-node HOST PORT WORKERS [--rank R], in argv after the program's name \
         (three arguments are needed",
    ));
    // Traces: a stop without a start, a second start, a file that cannot be written.
    cases.push(table.call("dvm_session_trace_stop").fails(
        Kind::Value,
        "session",
        "no trace of this session runs: start one (trace_start) first",
    ));
    let session = f.open.session;
    cases.push(
        table
            .call("dvm_session_trace_start")
            .succeeds()
            .then(move || {
                // SAFETY: the fixture's open session.
                if unsafe { dvm_session_trace_start(session) } != DVM_VALUE_ERROR {
                    return Err("a second trace_start did not fail with ValueError".into());
                }
                let unwritable = c"/nonexistent-folder/trace.json".as_ptr();
                // SAFETY: as above; a terminated path.
                if unsafe { dvm_session_trace_stop(session, unwritable) } != DVM_VALUE_ERROR {
                    return Err("a trace_stop to a missing folder did not fail".into());
                }
                Ok(())
            }),
    );
    cases.push(
        table
            .call("dvm_session_trace_dump")
            .set(
                "path",
                text(c"/nonexistent-folder/dump.json"),
                "is in a missing folder",
            )
            .fails(
                Kind::Value,
                "path",
                "cannot write a trace to the path `/nonexistent-folder/dump.json`",
            ),
    );

    // Allowed: no options, and the longest timeout.
    cases.push(
        table
            .call("dvm_session_new_threaded")
            .set("opts", Arg::Ptr(null_mut()), "is NULL (the defaults)")
            .succeeds()
            .then(|| free_out_handle(f)),
    );
    static PINNED: [i32; 2] = [-1, 0];
    static CPUS: [DLDevice; 2] = [CPU, CPU];
    let mut every = options(60_000, Some((&PINNED, 2)), Some((&CPUS, 2)));
    every.spin_us = -1;
    cases.push(
        new_session(table, 2, 2, None)
            .set("opts", ptr(&*every), "sets every option")
            .keep(every)
            .succeeds()
            .then(|| free_out_handle(f)),
    );
    let longest = options(i64::MAX, None, None);
    cases.push(
        new_session(table, 1, 1, None)
            .set("opts", ptr(&*longest), "has the longest timeout")
            .keep(longest)
            .succeeds()
            .then(|| free_out_handle(f)),
    );

    // Names that are missing or not text.
    for function in [
        "dvm_session_get_global_func",
        "dvm_func_get_global",
        "dvm_func_remove_global",
    ] {
        cases.push(
            table
                .call(function)
                .set("name", text(c"bad_inputs.missing"), "is not registered")
                .fails(
                    Kind::Key,
                    "name",
                    "no global function has the name `bad_inputs.missing`",
                ),
        );
        cases.push(table.call(function).not_utf8("name", c"bad \xff name"));
    }

    // DRefs of another session, and values that cannot be sent.
    for function in ["dvm_session_call", "dvm_worker_call"] {
        cases.push(
            table
                .call(function)
                .set("func", ptr(f.other.func), "is of another session")
                .fails(Kind::Value, "func", "`func` is a DRef of another session"),
        );
        let foreign = Box::new([any_object(f.other.ranks.cast())]);
        cases.push(
            table
                .call(function)
                .set(
                    "args",
                    ptr(foreign.as_ptr()),
                    "holds a DRef of another session",
                )
                .keep(foreign)
                .fails(
                    Kind::Value,
                    "args",
                    "`args[0]` is a DRef of another session",
                ),
        );
        let borrowed = Box::new([any_tensor_ptr(f.host())]);
        cases.push(
            table
                .call(function)
                .set("args", ptr(borrowed.as_ptr()), "holds a borrowed DLTensor*")
                .keep(borrowed)
                .fails(
                    Kind::Type,
                    "args",
                    "`args[0]`: a borrowed DLTensor* cannot be kept",
                ),
        );
    }
    // A DRef that holds no function, called: the call goes out, and each worker reports it.
    cases.push(
        table
            .call("dvm_session_call")
            .set("func", ptr(f.open.ranks), "holds ints")
            .succeeds()
            .then(|| {
                let out = f.out_handle();
                let reports: Vec<String> = (0..2)
                    .map(|w| {
                        // SAFETY: the fixture's session.
                        unsafe { dvm_session_sync_worker(f.open.session, w) };
                        last_error()
                    })
                    .collect();
                // SAFETY: the DRef the call returned.
                unsafe { dvm_object_dec_ref(out) };
                let expected = |w| format!("WorkerError: worker {w}: ");
                match reports.iter().enumerate().all(|(w, r)| {
                    r.starts_with(&expected(w)) && r.contains("expected ffi.Function but got int")
                }) {
                    true => Ok(()),
                    false => Err(format!("the workers reported {reports:?}")),
                }
            }),
    );
    let borrowed = Box::new(any_tensor_ptr(f.host()));
    cases.push(
        table
            .call("dvm_dref_set")
            .set("value", ptr(&*borrowed), "is a borrowed DLTensor*")
            .keep(borrowed)
            .fails(
                Kind::Type,
                "value",
                "`value`: a borrowed DLTensor* cannot be kept",
            ),
    );

    // Collectives.
    static THREE_IDS: [i32; 3] = [0, 0, 0];
    let init = || table.call("dvm_session_init_ccl");
    cases.push(init().set("backend", text(c"gloo"), "is unknown").fails(
        Kind::Value,
        "backend",
        "unknown collective backend \"gloo\"",
    ));
    cases.push(init().not_utf8("backend", c"c\xffu"));
    cases.push(
        init()
            .set("device_ids", ptr(THREE_IDS.as_ptr()), "holds 3 ids")
            .set("n", I32(3), "is 3")
            .fails(
                Kind::Value,
                "device_ids",
                "device_ids holds 3 device ids for 2 workers",
            ),
    );

    // Copies between the host and worker 0.
    for (function, remote) in [
        ("dvm_session_copy_to_worker0", "dst"),
        ("dvm_session_copy_from_worker0", "src"),
    ] {
        cases.push(
            table
                .call(function)
                .set(remote, ptr(f.other.remote), "is of another session")
                .fails(
                    Kind::Value,
                    remote,
                    format!("`{remote}` is a DRef of another session"),
                ),
        );
        cases.push(
            table
                .call(function)
                .set(remote, ptr(f.open.ranks), "holds no tensor")
                .fails(Kind::Worker, remote, format!("of `{remote}`"))
                .then(|| host_untouched(f)),
        );
        for (host, names, message) in bad_hosts() {
            let host = Rc::new(host);
            let kept = host.clone();
            cases.push(
                table
                    .call(function)
                    .set("host", ptr(&host.dl), host.what)
                    .keep(Box::new(kept))
                    .fails(Kind::Value, names, message)
                    .then(move || {
                        if host.data.iter().all(|&x| x == -1.0) {
                            Ok(())
                        } else {
                            Err(format!("the host buffer was written: {:?}", host.data))
                        }
                    }),
            );
        }
    }
    cases
}

/// A host tensor description that does not fit the remote [2, 3] float32 tensor.
struct BadHost {
    what: &'static str,
    data: Box<[f32; 8]>,
    shape: Box<[i64; 2]>,
    strides: Box<[i64; 2]>,
    dl: DLTensor,
}

fn bad_host(
    what: &'static str,
    shape: [i64; 2],
    ndim: i32,
    dtype: DLDataType,
    strided: bool,
    device: DLDevice,
    data: bool,
) -> BadHost {
    let mut host = BadHost {
        what,
        data: Box::new([-1.0; 8]),
        shape: Box::new(shape),
        strides: Box::new([1, 2]),
        dl: dl_tensor(device, ndim, dtype),
    };
    host.dl.shape = host.shape.as_mut_ptr();
    if data {
        host.dl.data = host.data.as_mut_ptr().cast();
    }
    if strided {
        host.dl.strides = host.strides.as_mut_ptr();
    }
    host
}

fn bad_hosts() -> Vec<(BadHost, &'static str, &'static str)> {
    vec![
        (
            bad_host("is [3, 2]", [3, 2], 2, F32, false, CPU, true),
            "host",
            "host tensor [3, 2] float32 does not match the remote tensor [2, 3] float32",
        ),
        (
            bad_host("is [6]", [6, 0], 1, F32, false, CPU, true),
            "host",
            "host tensor [6] float32 does not match the remote tensor [2, 3] float32",
        ),
        (
            bad_host("is int32", [2, 3], 2, INT32, false, CPU, true),
            "host",
            "host tensor [2, 3] int32 does not match the remote tensor [2, 3] float32",
        ),
        (
            bad_host("is column-major", [2, 3], 2, F32, true, CPU, true),
            "host",
            "the host tensor is not contiguous (row-major compact)",
        ),
        (
            bad_host("is on a GPU", [2, 3], 2, F32, false, device(2, 0), true),
            "host",
            "the host tensor must be on kDLCPU (1), not device type 2",
        ),
        (
            bad_host("has no data", [2, 3], 2, F32, false, CPU, false),
            "host",
            "the host tensor: data is NULL for a tensor of shape [2, 3]",
        ),
        (
            bad_host("has ndim -1", [2, 3], -1, F32, false, CPU, true),
            "host",
            "the host tensor: ndim -1 is out of range",
        ),
        (
            bad_host(
                "has a negative dimension",
                [2, -3],
                2,
                F32,
                false,
                CPU,
                true,
            ),
            "host",
            "the host tensor: dimension 1 of shape [2, -3] is negative",
        ),
    ]
}

/// The fixture's host buffer was not written by a failed copy (it holds -1s; the remote
/// tensor holds zeros).
fn host_untouched(f: &Fixture) -> Result<(), String> {
    // SAFETY: the fixture's buffer; no call is using it now.
    let host = unsafe { &*f.host.get() };
    if host.data.iter().all(|&x| x == -1.0) {
        Ok(())
    } else {
        Err(format!("the host buffer was written: {:?}", host.data))
    }
}

unsafe extern "C" fn returns_borrowed(
    _self: *mut c_void,
    _args: *const DVMAny,
    _num_args: i32,
    result: *mut DVMAny,
) -> i32 {
    static mut DL: Option<DLTensor> = None;
    // SAFETY: the packed convention gives a writable result; the tensor is never read.
    unsafe { result.write(any_tensor_ptr((&raw mut DL).cast())) };
    0
}

unsafe extern "C" fn returns_unknown(
    _self: *mut c_void,
    _args: *const DVMAny,
    _num_args: i32,
    result: *mut DVMAny,
) -> i32 {
    // SAFETY: the packed convention gives a writable result.
    unsafe { (*result).type_index = 42 };
    0
}

unsafe extern "C" fn fails_silently(
    _self: *mut c_void,
    _args: *const DVMAny,
    _num_args: i32,
    _result: *mut DVMAny,
) -> i32 {
    -1
}

/// A function made from `call`, freed when the case is done with it.
struct CFunction(*mut dvm_func);

impl CFunction {
    fn new(call: super::SafeCall) -> Box<CFunction> {
        let mut f = null_mut();
        // SAFETY: a valid callback.
        ok(
            unsafe { dvm_func_new(null_mut(), Some(call), None, &mut f) },
            "a function",
        );
        Box::new(CFunction(f))
    }
}

impl Drop for CFunction {
    fn drop(&mut self) {
        // SAFETY: our reference.
        unsafe { dvm_func_free(self.0) };
    }
}

fn values_and_functions<'f>(table: &Table<'f>) -> Vec<Case<'f>> {
    let f = table.f;
    let mut cases = Vec::new();
    // Empty strings, byte strings and shapes need no data.
    for (function, data, len) in [
        ("dvm_string_new", "data", "len"),
        ("dvm_bytes_new", "data", "len"),
        ("dvm_shape_new", "dims", "ndim"),
    ] {
        let count = if len == "len" { Size(0) } else { I32(0) };
        cases.push(
            table
                .call(function)
                .set(data, Arg::Ptr(null_mut()), "is NULL")
                .set(len, count, "is 0")
                .succeeds()
                .then(|| release_out_value(f)),
        );
    }

    // Callbacks that break the packed convention.
    for (call, what, kind, names, message) in [
        (
            returns_borrowed as super::SafeCall,
            "returns a borrowed DLTensor*",
            Kind::Type,
            "result",
            "the result: DLTensor* is a borrowed form and cannot be an owned value",
        ),
        (
            returns_unknown,
            "returns type index 42",
            Kind::Type,
            "result",
            "the result: expected a known type but got unknown type index 42",
        ),
        (
            fails_silently,
            "returns -1 without raising",
            Kind::Runtime,
            "function",
            "a packed function returned -1 without raising an error",
        ),
    ] {
        let function = CFunction::new(call);
        cases.push(
            table
                .call("dvm_func_call")
                .set("f", Arg::Ptr(function.0.cast()), what)
                .keep(function)
                .fails(kind, names, message),
        );
    }

    // The registry.
    let register = || table.call("dvm_func_register_global");
    cases.push(register().set("name", text(c""), "is empty").fails(
        Kind::Value,
        "name",
        "a global function needs a non-empty name",
    ));
    cases.push(register().not_utf8("name", c"bad \xff name"));
    cases.push(
        register()
            .set("name", text(c"runtime.disco.worker_rank"), "is taken")
            .fails(
                Kind::Value,
                "allow_override",
                "global function `runtime.disco.worker_rank` is already registered",
            ),
    );

    // Releasing values that hold no object.
    let int = Box::new(DVMAny {
        type_index: ti::INT,
        small_str_len: 0,
        v: DVMAnyPayload { v_int64: 7 },
    });
    let at = ptr(&*int);
    cases.push(
        table
            .call("dvm_any_release")
            .set("value", at, "holds an int")
            .succeeds()
            .then(move || match int.type_index {
                ti::NONE => Ok(()),
                other => Err(format!("the value has type index {other}, not None")),
            }),
    );
    cases
}

fn errors_and_devices<'f>(table: &Table<'f>) -> Vec<Case<'f>> {
    let mut cases = Vec::new();
    // A callback raises with whatever kind and message it has; NULL stands for the default.
    let raise = || table.call("dvm_error_raise");
    cases.push(
        raise()
            .set("kind", Arg::Ptr(null_mut()), "is NULL")
            .set("message", text(c"no kind"), "is given")
            .raises(("RuntimeError", "no kind")),
    );
    cases.push(
        raise()
            .set("kind", text(c"IndexError"), "is given")
            .set("message", Arg::Ptr(null_mut()), "is NULL")
            .raises(("IndexError", "")),
    );
    cases.push(raise().not_utf8("kind", c"Index\xffError"));
    cases.push(raise().not_utf8("message", c"bad \xff message"));

    // Functions without parameters, where nothing can go wrong.
    cases.push(Case::succeeds(
        "dvm_last_error_kind",
        "on a thread that never failed",
        || {
            Returned::ErrorValue(
                std::thread::spawn(|| !dvm_last_error_kind().is_null())
                    .join()
                    .unwrap(),
            )
        },
    ));
    cases.push(Case::succeeds(
        "dvm_last_error_message",
        "on a thread that never failed",
        || {
            Returned::ErrorValue(
                std::thread::spawn(|| !dvm_last_error_message().is_null())
                    .join()
                    .unwrap(),
            )
        },
    ));
    cases.push(Case::succeeds("dvm_version", "no parameters", || {
        // SAFETY: a static NUL-terminated string.
        let version = unsafe { std::ffi::CStr::from_ptr(dvm_version()) };
        Returned::ErrorValue(version.to_str() != Ok(env!("CARGO_PKG_VERSION")))
    }));
    cases.push(Case::succeeds(
        "dvm_current_worker_id",
        "off a worker thread",
        || Returned::ErrorValue(dvm_current_worker_id() != -1),
    ));
    cases.push(table.call("dvm_current_worker").fails(
        Kind::Runtime,
        "dvm_current_worker",
        "dvm_current_worker called off a worker thread",
    ));

    for device_type in [-1, 0, 19, 1000, i32::MIN] {
        cases.push(
            table
                .call("dvm_device_count")
                .set("device_type", I32(device_type), format!("is {device_type}"))
                .fails(
                    Kind::Value,
                    "device_type",
                    format!("unknown DLPack device type {device_type}"),
                ),
        );
    }
    cases
}

static DEVICES_WITHOUT_BACKEND: [(DLDevice, Kind, &str); 6] = [
    (
        device(2, 1000),
        Kind::DeviceUnavailable,
        "CUDA device 1000: ",
    ),
    (device(2, -1), Kind::DeviceUnavailable, "CUDA device -1"),
    (device(1, 1), Kind::Value, "CPU device id 1 is out of range"),
    (
        device(1, -1),
        Kind::Value,
        "CPU device id -1 is out of range",
    ),
    (
        device(3, 1),
        Kind::Value,
        "kDLCUDAHost device id 1 is out of range",
    ),
    (
        device(999, 0),
        Kind::DeviceUnavailable,
        "device type 999 has no backend here",
    ),
];

static NEGATIVE_DIM: [i64; 2] = [2, -3];
static HUGE_DIMS: [i64; 2] = [1 << 40, 1 << 40];
static LARGEST_DIM: [i64; 1] = [i64::MAX];
static ONES: [i64; 65] = [1; 65];

fn streams_and_tensors<'f>(table: &Table<'f>) -> Vec<Case<'f>> {
    let f = table.f;
    let mut cases = Vec::new();
    for (function, param) in [("dvm_stream_new", "device"), ("dvm_tensor_empty", "device")] {
        for (dev, kind, message) in &DEVICES_WITHOUT_BACKEND {
            cases.push(
                table
                    .call(function)
                    .set(param, Arg::Device(*dev), format!("is {dev:?}"))
                    .fails(kind.clone(), "device", *message),
            );
        }
    }
    let empty = || table.call("dvm_tensor_empty");
    // Shapes that cannot be allocated, each with its length as `ndim`.
    for (shape, what, names, message) in [
        (
            &NEGATIVE_DIM[..],
            "has a negative dimension",
            "shape",
            "dimension 1 of shape [2, -3] is negative",
        ),
        (&HUGE_DIMS, "overflows", "shape", "is too large to address"),
        (
            &LARGEST_DIM,
            "is [INT64_MAX]",
            "shape",
            "is too large to address",
        ),
        (
            &ONES,
            "has 65 dimensions",
            "ndim",
            "ndim 65 exceeds 64: the shape has too many dimensions",
        ),
    ] {
        let ndim = shape.len() as i32;
        cases.push(
            empty()
                .set("shape", ptr(shape.as_ptr()), what)
                .set("ndim", I32(ndim), format!("is {ndim}"))
                .fails(Kind::Value, names, message),
        );
    }
    for (d, message) in [
        (
            dtype(99, 32, 1),
            "invalid dtype (code 99, bits 32, lanes 1)",
        ),
        (dtype(2, 0, 1), "invalid dtype (code 2, bits 0, lanes 1)"),
        (dtype(0, 8, 0), "invalid dtype (code 0, bits 8, lanes 0)"),
    ] {
        cases.push(
            empty()
                .set("dtype", Arg::DType(d), format!("is {d:?}"))
                .fails(Kind::Value, "dtype", message),
        );
    }
    cases.push(
        empty()
            .set("shape", Arg::Ptr(null_mut()), "is NULL")
            .set("ndim", I32(0), "is 0 (a scalar)")
            .succeeds()
            .then(|| free_out_handle(f)),
    );

    // Reads and writes: sizes, views, read-only tensors.
    for (function, buffer, verb) in [
        ("dvm_tensor_read", "dst", "read from"),
        ("dvm_tensor_write", "src", "written to"),
    ] {
        for (nbytes, shown) in [(25, "25"), (usize::MAX, "18446744073709551615")] {
            cases.push(
                table
                    .call(function)
                    .set("nbytes", Size(nbytes), format!("is {shown}"))
                    .fails(
                        Kind::Value,
                        "nbytes",
                        format!("{shown} bytes cannot be {verb} a tensor of 24 bytes"),
                    ),
            );
        }
        cases.push(
            table
                .call(function)
                .set("t", ptr(f.strided), "is a strided view")
                .fails(
                    Kind::Value,
                    "t",
                    "`t` is a strided view (shape [3], strides [2])",
                ),
        );
        cases.push(
            table
                .call(function)
                .set("nbytes", Size(0), "is 0")
                .set(buffer, Arg::Ptr(null_mut()), "is NULL")
                .succeeds(),
        );
    }
    // A write of fewer bytes than the tensor holds leaves the rest as it was.
    static HALVES: [f32; 2] = [1.5, 2.5];
    let (write, what, _) = table
        .call("dvm_tensor_write")
        .set("t", ptr(f.spare), "holds six floats")
        .set("src", ptr(HALVES.as_ptr()), "holds two")
        .set("nbytes", Size(8), "is 8")
        .into_run();
    cases.push(
        Case::succeeds(&write, what, move || {
            let six = [1f32, 2.0, 3.0, 4.0, 5.0, 6.0];
            // SAFETY: a fixture tensor of 24 bytes, and a static source of 8.
            unsafe {
                ok(
                    dvm_tensor_write(f.spare, six.as_ptr().cast(), 24),
                    "a write",
                );
                Returned::Status(dvm_tensor_write(f.spare, HALVES.as_ptr().cast(), 8))
            }
        })
        .then(|| {
            let mut back = [0f32; 6];
            // SAFETY: a fixture tensor of 24 bytes.
            ok(
                unsafe { dvm_tensor_read(f.spare, back.as_mut_ptr().cast(), 24) },
                "a read",
            );
            match back {
                [1.5, 2.5, 3.0, 4.0, 5.0, 6.0] => Ok(()),
                other => Err(format!("read back {other:?}")),
            }
        }),
    );
    cases.push(
        table
            .call("dvm_tensor_write")
            .set("t", ptr(f.read_only), "is read-only")
            .fails(Kind::Value, "t", "`t` is read-only"),
    );

    // Copies between tensors that do not match.
    let copy = || table.call("dvm_tensor_copy");
    for (dst, what, message) in [
        (
            f.tensor_i32,
            "is int32",
            "into `dst`, a [2, 3] int32 tensor (24 bytes)",
        ),
        (
            f.tensor_32,
            "is [3, 2]",
            "into `dst`, a [3, 2] float32 tensor (24 bytes)",
        ),
        (
            f.tensor_6,
            "is [6]",
            "into `dst`, a [6] float32 tensor (24 bytes)",
        ),
    ] {
        cases.push(copy().set("dst", ptr(dst), what).fails(
            Kind::Value,
            "dst",
            format!("cannot copy `src`, a [2, 3] float32 tensor (24 bytes), {message}"),
        ));
    }
    cases.push(
        copy()
            .set("src", ptr(f.strided), "is a strided view")
            .set("dst", ptr(f.tensor_3), "is [3]")
            .fails(Kind::Value, "src", "`src` is a strided view"),
    );
    cases.push(
        copy()
            .set("dst", ptr(f.read_only), "is read-only")
            .set("src", ptr(f.tensor_3), "is [3]")
            .fails(Kind::Value, "dst", "`dst` is read-only"),
    );
    // A tensor copied onto itself stays as it is; another tensor over its memory is refused.
    cases.push(copy().set("dst", ptr(f.tensor), "is `src`").succeeds());
    cases.push(
        copy()
            .set("dst", ptr(f.alias), "shares `src`'s memory")
            .fails(
                Kind::Value,
                "dst",
                "`dst` and `src` share memory (24 bytes at",
            ),
    );
    cases.push(
        table
            .call("dvm_stream_wait")
            .set("signaler", ptr(f.stream), "is `waiter`")
            .succeeds(),
    );
    cases.extend(freed_streams(table));
    cases.extend(dlpack(table));
    cases
}

/// A stream freed with a copy queued, then a new one (which may reuse its memory) given the
/// same tensors: the copy runs, and the tensors' uses are ordered on the new stream.
fn freed_streams<'f>(table: &Table<'f>) -> Vec<Case<'f>> {
    let f = table.f;
    let fresh = || {
        let mut s = null_mut();
        // SAFETY: a valid device, an output to a local.
        ok(unsafe { dvm_stream_new(CPU, &mut s) }, "a stream");
        s
    };
    (0..4)
        .map(|round| {
            let values = [round as f32; 6];
            Case::succeeds(
                "dvm_stream_free",
                format!("`s` has a copy queued, and a new stream follows (round {round})"),
                move || {
                    let old = fresh();
                    // SAFETY: the fixture's tensors, a live stream given up after the copy.
                    unsafe {
                        ok(
                            dvm_tensor_write(f.spare, values.as_ptr().cast(), 24),
                            "a write",
                        );
                        ok(dvm_tensor_copy(f.spare2, f.spare, old), "a copy");
                        dvm_stream_free(old);
                    }
                    Returned::Nothing
                },
            )
            .then(move || {
                let new = fresh();
                let mut back = [-1f32; 6];
                // SAFETY: the fixture's tensors and a live stream, freed at the end.
                let status = unsafe {
                    let mut s = dvm_tensor_copy(f.spare, f.spare2, new);
                    if s == DVM_OK {
                        s = dvm_stream_sync(new);
                    }
                    if s == DVM_OK {
                        s = dvm_tensor_read(f.spare, back.as_mut_ptr().cast(), 24);
                    }
                    dvm_stream_free(new);
                    s
                };
                match (status, back == values) {
                    (DVM_OK, true) => Ok(()),
                    (DVM_OK, false) => Err(format!("read back {back:?}")),
                    _ => Err(last_error()),
                }
            })
        })
        .collect()
}

static DELETED: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn count_delete(_self: *mut DLManagedTensorVersioned) {
    DELETED.fetch_add(1, Ordering::SeqCst);
}

/// A DLPack tensor that must be refused, kept (with its arrays) until the case ran.
struct BadDlpack {
    what: &'static str,
    data: [f32; 4],
    shape: [i64; 2],
    strides: [i64; 2],
    managed: DLManagedTensorVersioned,
}

fn bad_dlpack(what: &'static str, change: impl FnOnce(&mut BadDlpack)) -> Box<BadDlpack> {
    let mut t = Box::new(BadDlpack {
        what,
        data: [0.0; 4],
        shape: [2, 2],
        strides: [2, 1],
        managed: managed_tensor(dl_tensor(CPU, 2, F32), Some(count_delete), 0),
    });
    t.managed.dl_tensor.data = t.data.as_mut_ptr().cast();
    t.managed.dl_tensor.shape = t.shape.as_mut_ptr();
    change(&mut t);
    t
}

fn dlpack<'f>(table: &Table<'f>) -> Vec<Case<'f>> {
    let refused = [
        (
            bad_dlpack("has major version 2", |t| t.managed.version.major = 2),
            "DLPack major version 2 is not supported",
        ),
        (
            bad_dlpack("has a negative dimension", |t| t.shape[1] = -2),
            "dimension 1 of shape [2, -2] is negative",
        ),
        (
            bad_dlpack("has no data", |t| t.managed.dl_tensor.data = null_mut()),
            "data is NULL for a tensor of shape [2, 2]",
        ),
        (
            bad_dlpack("has ndim -1", |t| t.managed.dl_tensor.ndim = -1),
            "ndim -1 is out of range",
        ),
        (
            bad_dlpack("has ndim 1000", |t| t.managed.dl_tensor.ndim = 1000),
            "ndim 1000 is out of range",
        ),
        (
            bad_dlpack("has no shape", |t| t.managed.dl_tensor.shape = null_mut()),
            "shape is NULL but ndim is 2",
        ),
        (
            bad_dlpack("has a negative stride", |t| {
                t.strides = [-2, 1];
                t.managed.dl_tensor.strides = t.strides.as_mut_ptr();
            }),
            "stride -2 of axis 0 is negative",
        ),
        (
            bad_dlpack("has an invalid dtype", |t| {
                t.managed.dl_tensor.dtype = dtype(2, 0, 1)
            }),
            "invalid dtype (code 2, bits 0, lanes 1)",
        ),
    ];
    let mut cases = Vec::new();
    for (t, message) in refused {
        let before = DELETED.load(Ordering::SeqCst);
        cases.push(
            table
                .call("dvm_tensor_from_dlpack")
                .set("managed", ptr(&t.managed), t.what)
                .keep(t)
                .fails(Kind::Value, "managed", format!("`managed`: {message}"))
                .then(move || match DELETED.load(Ordering::SeqCst) - before {
                    0 => Ok(()),
                    n => Err(format!("the refused tensor's deleter ran {n} times")),
                }),
        );
    }
    cases
}

pub fn written_out<'f>(table: &Table<'f>) -> Vec<Case<'f>> {
    let mut cases = sessions(table);
    cases.extend(values_and_functions(table));
    cases.extend(errors_and_devices(table));
    cases.extend(streams_and_tensors(table));
    cases
}
