//! Dispatchers in tvm-ffi's registry: Disco's worker built-ins run discovm's on its workers.
//!
//! Code TVM compiled (a Relax VM fills its function table when initialised) finds the
//! `runtime.disco.*` built-ins by name in tvm-ffi's registry, where TVM's sit, which work only on
//! Disco's threads. [`install`] replaces each by a dispatcher holding both. The one idea: the
//! calling thread chooses, per call; a discovm worker reaches discovm's built-in, any other thread
//! (Disco's workers too) the replaced function, so both kinds of session share a process. Only
//! names TVM registered are replaced (TVM's libraries register theirs without override as they
//! load, and abort on a taken name), so `install` runs whenever a session starts or looks up a
//! function; it costs one loader query unless a library was loaded since it last looked.

use std::collections::HashMap;
use std::ffi::c_void;
use std::panic::catch_unwind;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use super::runtime as worker;
use crate::abi::{DVMAny, DVMFunctionCell, DVMSafeCall, OBJECT_HEADER_SIZE};
use crate::object::libtvm_ffi::{self, LibTvmFfi};
use crate::object::{AnyObject, Error, Function, FunctionCell, ObjectRef, Result, error, registry};

/// The worker's own built-ins that Disco's workers have too, with the same arguments (TVM's
/// `runtime/extra/disco/builtin.cc`): `worker_id`, which TVM's Relax lowering emits
/// (`redistribute_replica_to_shard`), and the others that hand-written Relax, TVM's runtime or a
/// script written for Disco's workers may call by name. The collectives (which the lowering
/// emits for `R.ccl.*`) come from their table as they register ([`dispatch_too`]).
pub const NAMES: [&str; 7] = [
    "runtime.disco.worker_id",
    "runtime.disco.worker_rank",
    "runtime.disco.world_size",
    "runtime.disco.device",
    "runtime.disco.empty",
    "runtime.disco.bind_worker_to_cpu_core",
    "runtime.disco.load_vm_module",
];

/// The names of built-ins of the layers above that Disco's workers have too (the collectives),
/// added as those register.
static MORE_NAMES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

/// Has [`install`] dispatch `names` too: built-ins of the layers above, registered already, that
/// Disco's workers have with the same arguments.
pub(crate) fn dispatch_too(names: impl IntoIterator<Item = &'static str>) {
    let mut more = MORE_NAMES.lock().unwrap_or_else(PoisonError::into_inner);
    for name in names {
        if !NAMES.contains(&name) && !more.contains(&name) {
            more.push(name);
        }
    }
}

/// Every name [`install`] dispatches: [`NAMES`] and those given to [`dispatch_too`].
fn names() -> Vec<&'static str> {
    let more = MORE_NAMES.lock().unwrap_or_else(PoisonError::into_inner);
    NAMES.iter().chain(more.iter()).copied().collect()
}

/// A function to forward calls to: its object's `safe_call`, read once.
struct Target {
    safe_call: DVMSafeCall,
    /// Keeps the object alive.
    function: Function,
}

impl Target {
    fn new(function: Function, name: &str) -> Result<Target> {
        // SAFETY: a live Function object has tvm-ffi's function cell right after its header.
        let cell = unsafe {
            &*function
                .object()
                .as_ptr()
                .cast::<u8>()
                .add(OBJECT_HEADER_SIZE)
                .cast::<DVMFunctionCell>()
        };
        let safe_call = cell
            .safe_call
            .ok_or_else(|| Error::runtime(format!("the function `{name}` has no safe_call")))?;
        Ok(Target {
            safe_call,
            function,
        })
    }

    /// Calls the function with the caller's arguments and result slot, as they came.
    ///
    /// # Safety
    /// As for any packed call: `args` holds `num_args` valid values, `result` is writable.
    unsafe fn call(&self, args: *const DVMAny, num_args: i32, result: *mut DVMAny) -> i32 {
        let object = self.function.object().as_ptr().cast();
        // SAFETY: the function's own safe_call with its own object, as the convention wants;
        // the caller vouches for the rest.
        unsafe { (self.safe_call)(object, args, num_args, result) }
    }
}

/// One name's dispatcher: discovm's built-in (as registered when the dispatcher was made) for
/// discovm's workers, the function it replaced in tvm-ffi's registry for every other thread.
struct Dispatcher {
    name: &'static str,
    discovm: Target,
    replaced: Target,
}

/// The dispatchers' packed call: forwards the call untouched (arguments, result slot, and the
/// error the callee raises in tvm-ffi's slot) to the target the calling thread picks.
unsafe extern "C" fn dispatch(
    self_: *mut c_void,
    args: *const DVMAny,
    num_args: i32,
    result: *mut DVMAny,
) -> i32 {
    // SAFETY: `self_` is the Dispatcher the function was made with; it is never freed.
    let dispatcher = unsafe { &*self_.cast::<Dispatcher>() };
    match catch_unwind(worker::current) {
        // SAFETY: the caller's arguments and result slot, passed on as they came.
        Ok(Some(_)) => unsafe { dispatcher.discovm.call(args, num_args, result) },
        // SAFETY: as above.
        Ok(None) => unsafe { dispatcher.replaced.call(args, num_args, result) },
        Err(panic) => {
            let error = Error::from_panic(panic);
            error::raise(&error.context(format_args!("`{}`", dispatcher.name)));
            -1
        }
    }
}

/// The dispatchers installed, by name. Each is kept for the life of the process (so that its
/// address stays its own): a name whose registered function is another object was registered
/// again since, and gets a new dispatcher over that one.
static INSTALLED: Mutex<Option<HashMap<&'static str, ObjectRef<AnyObject>>>> = Mutex::new(None);

/// The loader's count of libraries loaded when [`install`] last completed (`u64::MAX`: never).
static LOADS_SEEN: AtomicU64 = AtomicU64::new(u64::MAX);

/// How many shared libraries the process has loaded so far (the loader's `dlpi_adds`, which
/// only grows), or None where the loader does not say.
fn libraries_loaded() -> Option<u64> {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        size: usize,
        out: *mut c_void,
    ) -> i32 {
        if size >= std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) {
            // SAFETY: the loader passes a valid record of `size` bytes, which holds the count;
            // `out` is the caller's Option<u64>.
            unsafe { *out.cast::<Option<u64>>() = Some((*info).dlpi_adds) };
        }
        1 // the first object is enough: the count is the same in every record
    }
    let mut loaded: Option<u64> = None;
    // SAFETY: the callback writes only `loaded`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(first), (&raw mut loaded).cast()) };
    loaded
}

/// Puts a dispatcher in tvm-ffi's registry for each of the names it dispatches ([`names`])
/// registered there (by TVM) and not yet dispatched; does nothing without libtvm_ffi in the process, and nothing (but a
/// query to the loader) when no library was loaded since it last ran.
///
/// Errors: one libtvm_ffi raised while making or registering a dispatcher; the next call tries
/// again. (A library another thread is loading at that very moment counts as loaded before its
/// initialisers have registered anything: its names are found after the next load.)
pub fn install() -> Result<()> {
    let loaded = libraries_loaded();
    if loaded.is_some_and(|n| n == LOADS_SEEN.load(Ordering::Acquire)) {
        return Ok(());
    }
    let mut installed = INSTALLED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(lib) = libtvm_ffi::get() {
        let installed = installed.get_or_insert_with(HashMap::new);
        for name in names() {
            install_one(lib, name, installed)?;
        }
    }
    LOADS_SEEN.store(loaded.unwrap_or(u64::MAX), Ordering::Release);
    Ok(())
}

/// Replaces the function registered as `name` in tvm-ffi's registry by a dispatcher, unless
/// there is none, it is a dispatcher already, or discovm has no built-in of that name.
fn install_one(
    lib: &LibTvmFfi,
    name: &'static str,
    installed: &mut HashMap<&'static str, ObjectRef<AnyObject>>,
) -> Result<()> {
    let Some(current) = lib.global_function(name) else {
        return Ok(()); // TVM has not registered it (yet): registering it first would break TVM
    };
    // SAFETY: a new reference to a live object, now ours.
    let current = unsafe { ObjectRef::<AnyObject>::from_raw(current) };
    if installed
        .get(name)
        .is_some_and(|ours| ours.as_ptr() == current.as_ptr())
    {
        return Ok(());
    }
    let (Ok(replaced), Some(discovm)) =
        (current.downcast::<FunctionCell>(), registry::get_own(name))
    else {
        return Ok(());
    };
    let dispatcher = Box::new(Dispatcher {
        name,
        discovm: Target::new(discovm, name)?,
        replaced: Target::new(Function::from_object(replaced), name)?,
    });
    let self_ = Box::into_raw(dispatcher).cast::<c_void>();
    // SAFETY: `dispatch` follows the packed convention and may run on any thread with `self_`,
    // a Dispatcher (Send + Sync) that is never freed: the function gets no deleter, so no code
    // of this library runs when tvm-ffi releases it (at the process's exit, say).
    let function = match unsafe { lib.create_function(self_, dispatch, None) } {
        // SAFETY: a new reference, now ours.
        Ok(function) => unsafe { ObjectRef::<AnyObject>::from_raw(function) },
        Err(error) => {
            // SAFETY: the box was never shared; it is ours to free.
            drop(unsafe { Box::from_raw(self_.cast::<Dispatcher>()) });
            return Err(error);
        }
    };
    let object = NonNull::new(function.as_ptr()).expect("an object reference is not NULL");
    // SAFETY: a live Function object, which the registry takes a reference to.
    unsafe { lib.set_global(name, object, true) }?;
    installed.insert(name, function);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::Any;
    use crate::session::{Session, SessionOptions, Target as To};

    fn constant(v: i64) -> Function {
        Function::from_closure(move |_| Ok(Any::Int(v)))
    }

    /// Calls `dispatcher` as tvm-ffi calls the function made with it.
    fn call_through(dispatcher: &'static Dispatcher) -> Result<Any> {
        let self_ = std::ptr::from_ref(dispatcher).cast_mut().cast();
        let mut result = DVMAny::none();
        error::clear_raised();
        // SAFETY: no arguments, a writable result slot.
        let rc = unsafe { dispatch(self_, std::ptr::null(), 0, &mut result) };
        if rc != 0 {
            return Err(error::take_raised(rc));
        }
        // SAFETY: a successful call left an owned value.
        unsafe { Any::from_raw(result) }
    }

    #[test]
    fn the_calling_thread_picks_discovm_on_workers_and_the_replaced_function_elsewhere() {
        let fails = Function::from_closure(|_| Err(Error::key("only on workers")));
        let dispatcher: &'static Dispatcher = Box::leak(Box::new(Dispatcher {
            name: "test.tvm_dispatch.pick",
            discovm: Target::new(constant(7), "discovm").unwrap(),
            replaced: Target::new(fails, "replaced").unwrap(),
        }));
        let err = call_through(dispatcher).unwrap_err();
        assert_eq!(err.message, "only on workers");
        registry::register_global(
            "test.tvm_dispatch.call_through",
            Function::from_closure(move |_| call_through(dispatcher)),
            true,
        )
        .unwrap();
        let session = Session::new_threaded(2, 1, SessionOptions::default()).unwrap();
        let func = session
            .get_global_func("test.tvm_dispatch.call_through")
            .unwrap();
        let out = session.call(To::All, &func, &[]).unwrap();
        for worker in 0..2 {
            assert!(matches!(out.get(worker).unwrap(), Any::Int(7)));
        }
        session.shutdown().unwrap();
    }

    #[test]
    fn the_loader_count_grows_with_a_load() {
        let before = libraries_loaded().expect("glibc reports dlpi_adds");
        assert_eq!(libraries_loaded(), Some(before));
        // A system library this process has not loaded yet.
        let name = [c"libresolv.so.2", c"libutil.so.1", c"libanl.so.1"]
            .into_iter()
            // SAFETY: RTLD_NOLOAD only asks whether the library is loaded.
            .find(|name| {
                unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) }.is_null()
            })
            .expect("one of the libraries is not loaded yet");
        // SAFETY: loads a system library by name; it stays loaded.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW) };
        assert!(!handle.is_null(), "{name:?} cannot be loaded");
        assert!(libraries_loaded().expect("still reported") > before);
    }

    #[test]
    fn every_name_is_a_discovm_built_in() {
        crate::session::register_builtins();
        let names = names();
        for name in &names {
            assert!(registry::get_own(name).is_some(), "{name}");
        }
        // Disco's collectives and loader are dispatched too, and discovm's own barrier is not.
        assert_eq!(names.len(), 23);
        for name in [
            "runtime.disco.allreduce",
            "runtime.disco.recv_from_prev_group",
            "runtime.disco.ShardLoaderLoad",
        ] {
            assert!(names.contains(&name), "{name}");
        }
        assert!(!names.contains(&"runtime.disco.barrier"));
    }

    #[test]
    fn install_without_libtvm_ffi_changes_nothing() {
        crate::session::register_builtins();
        if libtvm_ffi::get().is_none() {
            install().unwrap();
            install().unwrap();
            assert!(
                INSTALLED
                    .lock()
                    .unwrap()
                    .as_ref()
                    .is_none_or(HashMap::is_empty)
            );
        }
    }
}
