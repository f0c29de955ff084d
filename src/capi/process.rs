//! Process sessions: workers as OS processes, and the main function of a worker program.

use std::ffi::{CStr, c_char, c_int};

use super::session::{dvm_session, dvm_session_options, process_options, start_into};
use super::{boundary, dvm_status, non_null};
use crate::object::Error;
use crate::object::error::with_last;
use crate::session::{Session, serve_worker};

/// Starts `num_workers` worker processes in `num_groups` groups of equal size, and returns once
/// every one of them runs. Each runs the worker program (`opts->worker_program`, else
/// `$DISCOVM_WORKER`, else `discovm-worker` next to this library) with only the descriptors it
/// needs, and ends when this process ends. Every session, worker and DRef function works on the
/// session as on a threaded one; what crosses to a worker is a value of the wire encoding
/// (None, bool, int, float, str, bytes, Shape, DLDataType, DLDevice, a DRef, a host tensor,
/// copied): anything else is a `TypeError` naming the argument, at the call. A worker that
/// dies fails the wait in progress and every later call on its session with a `WorkerError`
/// naming it, its pid and the cause.
///
/// Ownership: `*out` is a new reference; release it with `dvm_session_free`.
/// Errors: as `dvm_session_new_threaded`; `ValueError` when no worker program is found (the
/// message says where it looked) or the one named is not executable; `WorkerError` when a
/// worker process ends before it answers (its exit status or signal).
/// Undefined: `opts` arrays with fewer entries than their counts.
/// Thread safety: any thread. The session may then be used from several threads at once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_session_new_process(
    num_workers: i32,
    num_groups: i32,
    opts: *const dvm_session_options,
    out: *mut *mut dvm_session,
) -> dvm_status {
    boundary(|| {
        start_into(out, || {
            // SAFETY: NULL or a valid options struct, by contract.
            let options = unsafe { process_options(opts) }?;
            Session::new_process(num_workers.into(), num_groups.into(), options)
        })
    })
}

/// The main function of a worker program: serves the controller that started this process
/// (`dvm_session_new_process`) until it shuts the session down, and returns the program's exit
/// status (0 then). A program becomes a worker program by registering its functions
/// (`dvm_func_register_global`) and returning `dvm_worker_main(argc, argv)` from `main`; the
/// installed `discovm-worker` is one that registers nothing of its own. Run by hand, without
/// the arguments its controller passes, it says so on stderr and returns 2 (and 1 when serving
/// fails otherwise); the last error says why.
///
/// Ownership: `argv` is borrowed.
/// Errors (the last error, with a nonzero status): `ValueError` for a negative `argc`, a NULL
/// `argv`, or arguments no controller passed.
/// Thread safety: call it once, from the program's main thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_worker_main(argc: c_int, argv: *const *mut c_char) -> c_int {
    // SAFETY: as `main` receives them, by contract.
    unsafe {
        program_main("discovm worker", argc, argv, |args| {
            serve_worker(args, None)
        })
    }
}

/// Runs `serve` on a program's arguments (without its name) and turns the outcome into its
/// exit status: 0, 2 for a `ValueError` (bad arguments), 1 otherwise, saying why on stderr as
/// `name`.
///
/// # Safety
/// `argv` is NULL or holds `argc` NUL-terminated strings, as `main` receives them.
pub(crate) unsafe fn program_main(
    name: &str,
    argc: c_int,
    argv: *const *mut c_char,
    serve: fn(&[String]) -> crate::Result<()>,
) -> c_int {
    let status = boundary(|| {
        let count = usize::try_from(argc)
            .map_err(|_| Error::value(format!("`argc` is negative ({argc})")))?;
        let argv = non_null(argv, "argv")?;
        let args = (1..count)
            .map(|i| {
                // SAFETY: `argv` holds `argc` strings, as `main` receives them.
                let arg = unsafe { *argv.as_ptr().add(i) };
                let arg = non_null(arg, "argv[i]")?;
                // SAFETY: NUL-terminated, as `main` receives them.
                Ok(unsafe { CStr::from_ptr(arg.as_ptr()) }
                    .to_string_lossy()
                    .into_owned())
            })
            .collect::<crate::Result<Vec<String>>>()?;
        serve(&args)
    });
    if status == super::DVM_OK {
        return 0;
    }
    with_last(|error| {
        let (kind, message) = error.map_or(("RuntimeError".into(), "".into()), |(k, m)| {
            (k.to_string_lossy(), m.to_string_lossy())
        });
        eprintln!("{name}: {kind}: {message}");
        if kind == "ValueError" { 2 } else { 1 }
    })
}
