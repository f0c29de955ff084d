//! The objects the cases pass around: a handle of every kind (open, shut down, of another
//! session), tensors, a host buffer, an output buffer that must stay untouched when a call
//! fails, and the checks that the library still works after each case.

use std::cell::{RefCell, UnsafeCell};
use std::ffi::{CStr, c_void};
use std::ptr::null_mut;

use discovm::abi::{
    DLDataType, DLDevice, DLManagedTensorVersioned, DLPackVersion, DLTensor, DVMAny, DVMAnyPayload,
    DVMObject, type_index as ti,
};
use discovm::capi::*;

use crate::Kind;

/// The kinds of object a handle parameter may be given: the library's handles, and two plain
/// objects that are no handle at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handle {
    Session,
    DRef,
    Worker,
    Stream,
    Tensor,
    Function,
    String,
    Shape,
}

impl Handle {
    pub const ALL: [Handle; 8] = [
        Handle::Session,
        Handle::DRef,
        Handle::Worker,
        Handle::Stream,
        Handle::Tensor,
        Handle::Function,
        Handle::String,
        Handle::Shape,
    ];

    /// How errors describe a value this parameter wants ("`t` is not a tensor").
    pub fn what(self) -> &'static str {
        match self {
            Handle::Session => "a session",
            Handle::DRef => "a DRef",
            Handle::Worker => "a worker",
            Handle::Stream => "a stream",
            Handle::Tensor => "a tensor",
            Handle::Function => "a function",
            Handle::String => "a string",
            Handle::Shape => "a shape",
        }
    }

    /// The type name errors give for an object of this kind ("(it is discovm.Stream)").
    pub fn type_name(self) -> &'static str {
        match self {
            Handle::Session => "discovm.Session",
            Handle::DRef => "discovm.DRef",
            Handle::Worker => "discovm.Worker",
            Handle::Stream => "discovm.Stream",
            Handle::Tensor => "ffi.Tensor",
            Handle::Function => "ffi.Function",
            Handle::String => "ffi.String",
            Handle::Shape => "ffi.Shape",
        }
    }
}

pub const CPU: DLDevice = DLDevice {
    device_type: 1,
    device_id: 0,
};
pub const F32: DLDataType = DLDataType {
    code: 2,
    bits: 32,
    lanes: 1,
};
pub const I32: DLDataType = DLDataType {
    code: 0,
    bits: 32,
    lanes: 1,
};

/// Workers in the fixture's sessions.
pub const WORKERS: i32 = 2;

/// The byte every output starts as; a failed call must leave it so.
const UNTOUCHED: u8 = 0x5e;

/// Fails with the last error unless `status` is `DVM_OK`.
pub fn ok(status: dvm_status, what: &str) {
    assert_eq!(status, DVM_OK, "{what} failed: {}", last_error());
}

/// The calling thread's last error, as "Kind: message".
pub fn last_error() -> String {
    let text = |p: *const std::ffi::c_char| {
        if p.is_null() {
            "(none)".to_string()
        } else {
            // SAFETY: the library returns NUL-terminated strings valid until the next error.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    format!(
        "{}: {}",
        text(dvm_last_error_kind()),
        text(dvm_last_error_message())
    )
}

/// A value holding an object (borrowed: no reference is taken).
pub fn any_object(object: *mut c_void) -> DVMAny {
    let object = object.cast::<DVMObject>();
    DVMAny {
        // SAFETY: a live object of the fixture.
        type_index: unsafe { (*object).type_index },
        small_str_len: 0,
        v: DVMAnyPayload { v_obj: object },
    }
}

pub fn any_int(value: i64) -> DVMAny {
    DVMAny {
        type_index: ti::INT,
        small_str_len: 0,
        v: DVMAnyPayload { v_int64: value },
    }
}

/// A value holding a borrowed `DLTensor*`.
pub fn any_tensor_ptr(tensor: *mut DLTensor) -> DVMAny {
    DVMAny {
        type_index: ti::DL_TENSOR_PTR,
        small_str_len: 0,
        v: DVMAnyPayload {
            v_ptr: tensor.cast(),
        },
    }
}

/// A compact tensor description without data or shape: the caller points them at memory it
/// keeps.
pub fn dl_tensor(device: DLDevice, ndim: i32, dtype: DLDataType) -> DLTensor {
    DLTensor {
        data: null_mut(),
        device,
        ndim,
        dtype,
        shape: null_mut(),
        strides: null_mut(),
        byte_offset: 0,
    }
}

/// A DLPack 1.0 tensor around `dl_tensor`, with no manager context.
pub fn managed_tensor(
    dl_tensor: DLTensor,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    flags: u64,
) -> DLManagedTensorVersioned {
    DLManagedTensorVersioned {
        version: DLPackVersion { major: 1, minor: 0 },
        manager_ctx: null_mut(),
        deleter,
        flags,
        dl_tensor,
    }
}

/// The strong reference count of an object.
pub fn strong_count(object: *mut c_void) -> u32 {
    // SAFETY: a live object; the count is read, as the protocol allows, with an atomic load.
    let count = unsafe { &(*object.cast::<DVMObject>()).combined_ref_count };
    count.load(std::sync::atomic::Ordering::Relaxed) as u32
}

/// Values a packed argument must not hold, each with the error it gets and how its message
/// reads after the argument's name.
pub fn malformed_values(f: &Fixture) -> Vec<(DVMAny, Kind, &'static str, String)> {
    let raw = |type_index: i32, small_str_len: u32, v: DVMAnyPayload| DVMAny {
        type_index,
        small_str_len,
        v,
    };
    let null = DVMAnyPayload { v_uint64: 0 };
    let string = any_object(f.string);
    vec![
        (
            raw(42, 0, null),
            Kind::Type,
            "unknown type index 42",
            "type index 42".into(),
        ),
        (
            raw(-7, 0, null),
            Kind::Type,
            "unknown type index -7",
            "type index -7".into(),
        ),
        (
            raw(ti::STR, 0, null),
            Kind::Value,
            "a ffi.String value holds a NULL object pointer",
            "a NULL object".into(),
        ),
        (
            raw(
                ti::SMALL_STR,
                8,
                DVMAnyPayload {
                    v_bytes: *b"abcdefgh",
                },
            ),
            Kind::Value,
            "a ffi.SmallStr value claims 8 inline bytes (at most 7)",
            "a small string of 8 bytes".into(),
        ),
        (
            raw(ti::SMALL_BYTES, 255, null),
            Kind::Value,
            "a ffi.SmallBytes value claims 255 inline bytes (at most 7)",
            "small bytes of 255 bytes".into(),
        ),
        (
            raw(ti::TENSOR, 0, string.v),
            Kind::Type,
            "type index 70 (ffi.Tensor) does not match its object, a ffi.String",
            "a tensor index on a string".into(),
        ),
        (
            raw(5000, 0, string.v),
            Kind::Type,
            "type index 5000 (object type 5000) does not match its object, a ffi.String",
            "an unregistered index on a string".into(),
        ),
        (
            raw(ti::RAW_STR, 0, null),
            Kind::Value,
            "a const char* value is NULL",
            "NULL const char*".into(),
        ),
        (
            raw(ti::BYTE_ARRAY_PTR, 0, null),
            Kind::Value,
            "a ByteArray* value is NULL",
            "NULL ByteArray*".into(),
        ),
        (
            raw(ti::DL_TENSOR_PTR, 0, null),
            Kind::Value,
            "a DLTensor* value is NULL",
            "NULL DLTensor*".into(),
        ),
        (
            raw(ti::OBJECT_RVALUE_REF, 0, null),
            Kind::Value,
            "an ObjectRValueRef value is NULL",
            "NULL ObjectRValueRef".into(),
        ),
    ]
}

/// A session with its DRefs and a worker handle.
pub struct SessionParts {
    pub session: *mut dvm_session,
    /// `runtime.disco.worker_rank`.
    pub func: *mut dvm_dref,
    /// Each worker's id.
    pub ranks: *mut dvm_dref,
    /// A [2, 3] float32 tensor on each worker.
    pub remote: *mut dvm_dref,
    /// Worker 0.
    pub worker: *mut dvm_worker,
    /// This library, loaded on each worker as a module.
    pub module: *mut dvm_dref,
}

/// The path of this library, which is a module too (its functions are exported under tvm-ffi's
/// convention).
pub fn module_path() -> &'static CStr {
    static PATH: std::sync::OnceLock<std::ffi::CString> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let path = crate::built_library::shared_library()
            .to_str()
            .expect("a UTF-8 path");
        std::ffi::CString::new(path).expect("a path without NUL bytes")
    })
}

impl SessionParts {
    fn new(workers: i32) -> SessionParts {
        let options = dvm_session_options {
            timeout_ms: 60_000,
            spin_us: 0,
            num_cpu_affinity: 0,
            cpu_affinity: std::ptr::null(),
            num_devices: 0,
            devices: std::ptr::null(),
            worker_program: std::ptr::null(),
            session_token: std::ptr::null(),
            heartbeat_ms: 0,
            upload_modules: 0,
            local_threads: 0,
            threads_per_worker: 0,
        };
        let mut session = null_mut();
        // SAFETY (each call here): valid arguments, outputs to locals.
        ok(
            unsafe { dvm_session_new_threaded(workers, 1, &options, &mut session) },
            "a session",
        );
        let func = get_func(session, c"runtime.disco.worker_rank");
        let ranks = call(session, func, &[]);
        let empty = get_func(session, c"runtime.disco.empty");
        let mut shape = DVMAny::none();
        ok(
            unsafe { dvm_shape_new([2i64, 3].as_ptr(), 2, &mut shape) },
            "a shape",
        );
        let dtype = DVMAny {
            type_index: ti::DATA_TYPE,
            small_str_len: 0,
            v: DVMAnyPayload { v_dtype: F32 },
        };
        let remote = call(session, empty, &[shape, dtype]);
        ok(unsafe { dvm_any_release(&mut shape) }, "releasing a shape");
        unsafe { dvm_dref_free(empty) };
        let mut worker = null_mut();
        ok(
            unsafe { dvm_session_worker(session, 0, &mut worker) },
            "a worker",
        );
        let mut module = null_mut();
        ok(
            unsafe { dvm_session_load_module(session, module_path().as_ptr(), &mut module) },
            "a module",
        );
        ok(unsafe { dvm_session_sync_all(session) }, "a sync");
        SessionParts {
            session,
            func,
            ranks,
            remote,
            worker,
            module,
        }
    }

    fn objects(&self) -> [*mut c_void; 6] {
        [
            self.session.cast(),
            self.func.cast(),
            self.ranks.cast(),
            self.remote.cast(),
            self.worker.cast(),
            self.module.cast(),
        ]
    }

    fn free(&self) {
        // SAFETY: the fixture's own references.
        unsafe {
            dvm_worker_free(self.worker);
            dvm_dref_free(self.module);
            dvm_dref_free(self.remote);
            dvm_dref_free(self.ranks);
            dvm_dref_free(self.func);
            dvm_session_free(self.session);
        }
    }
}

fn get_func(session: *mut dvm_session, name: &CStr) -> *mut dvm_dref {
    let mut dref = null_mut();
    // SAFETY: valid arguments.
    ok(
        unsafe { dvm_session_get_global_func(session, name.as_ptr(), &mut dref) },
        "get_global_func",
    );
    dref
}

fn call(session: *mut dvm_session, func: *mut dvm_dref, args: &[DVMAny]) -> *mut dvm_dref {
    let mut out = null_mut();
    // SAFETY: valid arguments.
    ok(
        unsafe { dvm_session_call(session, func, args.as_ptr(), args.len() as i32, &mut out) },
        "a session call",
    );
    out
}

fn new_tensor(shape: &[i64], dtype: DLDataType) -> *mut dvm_tensor {
    let mut t = null_mut();
    // SAFETY: valid arguments.
    ok(
        unsafe { dvm_tensor_empty(shape.as_ptr(), shape.len() as i32, dtype, CPU, &mut t) },
        "a tensor",
    );
    t
}

/// Memory a DLPack tensor describes, for imports the fixture keeps until its end.
struct Import {
    data: [f32; 6],
    shape: [i64; 1],
    strides: [i64; 1],
    managed: DLManagedTensorVersioned,
}

/// Imports three floats through DLPack: every other one of six when `strided`, with the
/// read-only flag when `read_only`.
fn import(strided: bool, read_only: bool) -> (Box<Import>, *mut dvm_tensor) {
    let mut import = Box::new(Import {
        data: [0.0; 6],
        shape: [3],
        strides: [2],
        managed: managed_tensor(dl_tensor(CPU, 1, F32), None, u64::from(read_only)),
    });
    import.managed.dl_tensor.data = import.data.as_mut_ptr().cast();
    import.managed.dl_tensor.shape = import.shape.as_mut_ptr();
    if strided {
        import.managed.dl_tensor.strides = import.strides.as_mut_ptr();
    }
    let mut t = null_mut();
    // SAFETY: a valid description of memory the box keeps (it moves with the box, not in it).
    ok(
        unsafe { dvm_tensor_from_dlpack(&mut import.managed, &mut t) },
        "an import",
    );
    (import, t)
}

/// A host buffer of six floats (-1 each) and its DLTensor ([2, 3] float32), as the session
/// copies take.
pub struct Host {
    pub data: [f32; 6],
    pub shape: [i64; 2],
    pub dl: DLTensor,
}

pub struct Fixture {
    /// An open session of two workers.
    pub open: SessionParts,
    /// A session of two workers, shut down after its DRefs and worker handle were made.
    pub closed: SessionParts,
    /// A session of one worker, whose DRefs the open session must refuse.
    pub other: SessionParts,
    /// A DRef of the open session whose value cases may set.
    pub scratch: *mut dvm_dref,
    pub stream: *mut dvm_stream,
    pub stream2: *mut dvm_stream,
    /// [2, 3] float32 tensors: a source and a copy destination.
    pub tensor: *mut dvm_tensor,
    pub tensor2: *mut dvm_tensor,
    /// [2, 3] int32, [3, 2] float32 and [6] float32 tensors, for mismatches.
    pub tensor_i32: *mut dvm_tensor,
    pub tensor_32: *mut dvm_tensor,
    pub tensor_6: *mut dvm_tensor,
    /// A [3] float32 tensor, a strided view of three floats (DLPack, every other float) and a
    /// read-only [3] float32 tensor (DLPack, read-only flag).
    pub tensor_3: *mut dvm_tensor,
    pub strided: *mut dvm_tensor,
    pub read_only: *mut dvm_tensor,
    /// [2, 3] float32 tensors for cases of their own (the checks after each case leave them
    /// alone).
    pub spare: *mut dvm_tensor,
    pub spare2: *mut dvm_tensor,
    /// A tensor over `tensor`'s memory: its DLPack export, imported.
    pub alias: *mut dvm_tensor,
    /// A function made from a C callback that returns its argument count.
    pub function: *mut dvm_func,
    /// An ffi.String object (longer than 7 bytes) and an ffi.Shape object.
    pub string: *mut c_void,
    pub shape: *mut c_void,
    pub host: Box<UnsafeCell<Host>>,
    /// A DLPack tensor over the host buffer, for `dvm_tensor_from_dlpack`.
    managed: Box<UnsafeCell<DLManagedTensorVersioned>>,
    /// One packed argument, the Int 1.
    args: Box<UnsafeCell<[DVMAny; 1]>>,
    /// The memory of the strided and read-only imports.
    _imports: [Box<Import>; 2],
    out: Box<UnsafeCell<[u8; 64]>>,
    /// Every handle above with its strong count once the fixture was built.
    counts: RefCell<Vec<(*mut c_void, u32)>>,
    /// How many registers the open session holds on each worker.
    live: RefCell<Vec<i64>>,
}

unsafe extern "C" fn count_args(
    _self: *mut c_void,
    _args: *const DVMAny,
    num_args: i32,
    result: *mut DVMAny,
) -> i32 {
    // SAFETY: the packed convention gives a writable result.
    unsafe { result.write(any_int(num_args.into())) };
    0
}

impl Fixture {
    pub fn new() -> Fixture {
        let open = SessionParts::new(WORKERS);
        let closed = SessionParts::new(WORKERS);
        // SAFETY: a session of the fixture.
        ok(
            unsafe { dvm_session_shutdown(closed.session) },
            "a shutdown",
        );
        let other = SessionParts::new(1);
        let scratch = call(open.session, open.func, &[]);
        let (mut stream, mut stream2, mut function) = (null_mut(), null_mut(), null_mut());
        let (mut string, mut shape) = (DVMAny::none(), DVMAny::none());
        // SAFETY (each call): valid arguments, outputs to locals.
        unsafe {
            ok(dvm_stream_new(CPU, &mut stream), "a stream");
            ok(dvm_stream_new(CPU, &mut stream2), "a stream");
            ok(
                dvm_func_new(null_mut(), Some(count_args), None, &mut function),
                "a function",
            );
            let text = "a string of more than seven bytes";
            ok(
                dvm_string_new(text.as_ptr().cast(), text.len(), &mut string),
                "a string",
            );
            ok(dvm_shape_new([4i64, 5].as_ptr(), 2, &mut shape), "a shape");
        }
        let host = Box::new(UnsafeCell::new(Host {
            data: [-1.0; 6],
            shape: [2, 3],
            dl: dl_tensor(CPU, 2, F32),
        }));
        {
            let host = host.get();
            // SAFETY: the box is ours; the DLTensor points into the same allocation.
            unsafe {
                (*host).dl.data = (*host).data.as_mut_ptr().cast();
                (*host).dl.shape = (*host).shape.as_mut_ptr();
            }
        }
        // SAFETY: the host box outlives the fixture's uses of this tensor.
        let managed = Box::new(UnsafeCell::new(managed_tensor(
            unsafe { (*host.get()).dl },
            None,
            0,
        )));
        let (strided_import, strided) = import(true, false);
        let (read_only_import, read_only) = import(false, true);
        let tensor = new_tensor(&[2, 3], F32);
        let (mut export, mut alias) = (null_mut(), null_mut());
        // SAFETY: a live tensor; the import takes over the export.
        unsafe {
            ok(dvm_tensor_to_dlpack(tensor, &mut export), "an export");
            ok(dvm_tensor_from_dlpack(export, &mut alias), "an import");
        }
        let fixture = Fixture {
            open,
            closed,
            other,
            scratch,
            stream,
            stream2,
            tensor,
            tensor2: new_tensor(&[2, 3], F32),
            tensor_i32: new_tensor(&[2, 3], I32),
            tensor_32: new_tensor(&[3, 2], F32),
            tensor_6: new_tensor(&[6], F32),
            tensor_3: new_tensor(&[3], F32),
            strided,
            read_only,
            spare: new_tensor(&[2, 3], F32),
            spare2: new_tensor(&[2, 3], F32),
            alias,
            function,
            // SAFETY: both values hold objects (a string of more than 7 bytes, a shape).
            string: unsafe { string.v.v_obj }.cast(),
            shape: unsafe { shape.v.v_obj }.cast(),
            host,
            managed,
            args: Box::new(UnsafeCell::new([any_int(1)])),
            _imports: [strided_import, read_only_import],
            out: Box::new(UnsafeCell::new([UNTOUCHED; 64])),
            counts: RefCell::new(Vec::new()),
            live: RefCell::new(Vec::new()),
        };
        fixture.rebaseline();
        fixture
    }

    /// Waits for the work queued on the fixture's streams, which holds references to tensors.
    fn finish_stream_work(&self) {
        // SAFETY: the fixture's streams. A failure a case left is dropped here: the checks
        // that follow find whether the library still works.
        unsafe {
            dvm_stream_sync(self.stream);
            dvm_stream_sync(self.stream2);
        }
    }

    /// Records the reference counts of the fixture's objects and the registers the open
    /// session holds, which every case must leave as they are (after a case that failed, the
    /// session's failures are collected first, so that the next case is judged on its own).
    pub fn rebaseline(&self) {
        self.finish_stream_work();
        // SAFETY: the fixture's session.
        unsafe { dvm_session_sync_all(self.open.session) };
        *self.counts.borrow_mut() = self
            .objects()
            .into_iter()
            .map(|o| (o, strong_count(o)))
            .collect();
        *self.live.borrow_mut() = (0..WORKERS)
            .map(|worker| {
                let mut live = 0;
                // SAFETY: the fixture's session; an output to a local.
                ok(
                    unsafe { dvm_session_live_registers(self.open.session, worker, &mut live) },
                    "counting live registers",
                );
                live
            })
            .collect();
    }

    fn objects(&self) -> Vec<*mut c_void> {
        let mut objects = Vec::new();
        objects.extend(self.open.objects());
        objects.extend(self.closed.objects());
        objects.extend(self.other.objects());
        objects.extend([
            self.scratch.cast(),
            self.stream.cast(),
            self.stream2.cast(),
            self.tensor.cast(),
            self.tensor2.cast(),
            self.tensor_i32.cast(),
            self.tensor_32.cast(),
            self.tensor_6.cast(),
            self.tensor_3.cast(),
            self.strided.cast(),
            self.read_only.cast(),
            self.spare.cast(),
            self.spare2.cast(),
            self.alias.cast(),
            self.function.cast(),
            self.string,
            self.shape,
        ]);
        objects
    }

    /// An object of `kind` (the open session's, for session objects).
    pub fn handle(&self, kind: Handle) -> *mut c_void {
        match kind {
            Handle::Session => self.open.session.cast(),
            Handle::DRef => self.open.ranks.cast(),
            Handle::Worker => self.open.worker.cast(),
            Handle::Stream => self.stream.cast(),
            Handle::Tensor => self.tensor.cast(),
            Handle::Function => self.function.cast(),
            Handle::String => self.string,
            Handle::Shape => self.shape,
        }
    }

    /// The host tensor the session copies take.
    pub fn host(&self) -> *mut DLTensor {
        // SAFETY: the box outlives the pointer's uses (the fixture lives through every case).
        unsafe { &raw mut (*self.host.get()).dl }
    }

    /// A DLPack tensor (with no deleter) over the host buffer.
    pub fn managed(&self) -> *mut DLManagedTensorVersioned {
        self.managed.get()
    }

    /// One packed argument, the Int 1.
    pub fn args(&self) -> *mut DVMAny {
        self.args.get().cast()
    }

    /// An output buffer of 64 bytes, which a failing call must leave untouched.
    pub fn out(&self) -> *mut c_void {
        self.out.get().cast()
    }

    /// The output buffer as a value a call wrote.
    pub fn out_value(&self) -> *mut DVMAny {
        self.out().cast()
    }

    /// The handle a call wrote to the output buffer.
    pub fn out_handle(&self) -> *mut c_void {
        // SAFETY: the buffer is ours and holds a pointer after a call that writes a handle.
        unsafe { *self.out().cast::<*mut c_void>() }
    }

    pub fn out_untouched(&self) -> bool {
        // SAFETY: the buffer is ours.
        unsafe { &*self.out.get() }.iter().all(|&b| b == UNTOUCHED)
    }

    /// Marks the output buffer untouched again, after a call that was meant to write it.
    pub fn reset_out(&self) {
        // SAFETY: the buffer is ours; no call is using it now.
        unsafe { *self.out.get() = [UNTOUCHED; 64] };
    }

    /// Checks that the library still works and that no case changed the fixture: every
    /// handle keeps its reference count, the open session runs a call on every worker and
    /// holds the registers it held, the stream copies, and tensors read.
    pub fn check_intact(&self) -> Result<(), String> {
        self.finish_stream_work();
        for &(object, count) in self.counts.borrow().iter() {
            let now = strong_count(object);
            if now != count {
                return Err(format!(
                    "an object of the fixture has {now} references, not {count}"
                ));
            }
        }
        let session = self.open.session;
        let status = |s: dvm_status, what: &str| {
            if s == DVM_OK {
                Ok(())
            } else {
                Err(format!("{what} failed: {}", last_error()))
            }
        };
        // SAFETY (each call): the fixture's live handles and local outputs.
        unsafe {
            let mut out = null_mut();
            status(
                dvm_session_call(session, self.open.func, std::ptr::null(), 0, &mut out),
                "a call on the open session",
            )?;
            for worker in 0..WORKERS {
                let mut value = DVMAny::none();
                status(
                    dvm_dref_get(out, worker, &mut value),
                    "reading a call's result",
                )?;
                if value.type_index != ti::INT || value.v.v_int64 != i64::from(worker) {
                    return Err(format!("worker {worker} returned a wrong rank"));
                }
            }
            dvm_dref_free(out);
            for worker in 0..WORKERS {
                let mut value = DVMAny::none();
                status(
                    dvm_dref_get(self.open.ranks, worker, &mut value),
                    "reading ranks",
                )?;
                if value.type_index != ti::INT || value.v.v_int64 != i64::from(worker) {
                    return Err(format!("the ranks changed on worker {worker}"));
                }
            }
            let (mut sent, mut back, mut dims) = ([7f32; 6], [0f32; 6], [2i64, 3]);
            let mut host = |data: &mut [f32; 6]| DLTensor {
                data: data.as_mut_ptr().cast(),
                shape: dims.as_mut_ptr(),
                ..dl_tensor(CPU, 2, F32)
            };
            let (to, mut from) = (host(&mut sent), host(&mut back));
            status(
                dvm_session_copy_to_worker0(session, &to, self.open.remote),
                "a copy to worker 0",
            )?;
            status(
                dvm_session_copy_from_worker0(session, &mut from, self.open.remote),
                "a copy from worker 0",
            )?;
            if back != sent {
                return Err(format!("a round trip through worker 0 gave {back:?}"));
            }
            for worker in 0..WORKERS {
                let mut live = 0;
                status(
                    dvm_session_live_registers(session, worker, &mut live),
                    "counting live registers",
                )?;
                let expected = self.live.borrow()[worker as usize];
                if live != expected {
                    return Err(format!(
                        "worker {worker} holds {live} registers, not {expected}"
                    ));
                }
            }
            status(
                dvm_tensor_copy(self.tensor2, self.tensor, self.stream),
                "a tensor copy",
            )?;
            status(dvm_stream_sync(self.stream), "a stream sync")?;
            let mut bytes = [0u8; 24];
            status(
                dvm_tensor_read(self.tensor2, bytes.as_mut_ptr().cast(), bytes.len()),
                "a tensor read",
            )?;
        }
        Ok(())
    }

    /// Releases everything and checks the open session's registers all went.
    pub fn finish(self) {
        // SAFETY: the fixture's own references, each released once.
        unsafe {
            dvm_dref_free(self.scratch);
            let session = self.open.session;
            dvm_object_inc_ref(session.cast());
            self.open.free();
            for worker in 0..WORKERS {
                let mut live = -1;
                ok(
                    dvm_session_live_registers(session, worker, &mut live),
                    "counting live registers",
                );
                assert_eq!(live, 0, "worker {worker} still holds registers");
            }
            dvm_session_free(session);
            self.closed.free();
            self.other.free();
            for t in [
                self.tensor,
                self.tensor2,
                self.tensor_i32,
                self.tensor_32,
                self.tensor_6,
                self.tensor_3,
                self.strided,
                self.read_only,
                self.spare,
                self.spare2,
                self.alias,
            ] {
                dvm_tensor_free(t);
            }
            dvm_stream_free(self.stream);
            dvm_stream_free(self.stream2);
            dvm_func_free(self.function);
            dvm_object_dec_ref(self.string);
            dvm_object_dec_ref(self.shape);
        }
    }
}
