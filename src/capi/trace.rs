//! A session's timeline and flight recorder from C: a trace of everything the workers and the
//! controller do, and the workers' last events at any time, as Chrome Trace Event Format files.

use std::ffi::c_char;

use super::session::{dvm_session, session_arg};
use super::{boundary, c_str, dvm_status};

/// Begins a trace of the session: from now on every worker's calls, syncs, collectives and
/// module loads, and the controller's sends, syncs and copies, are kept (up to 1 GiB of
/// events; those past it are counted in the file), until `dvm_session_trace_stop`.
///
/// Ownership: `session` is borrowed.
/// Errors: `ValueError` for NULL, or when a trace of the session runs already;
/// `SessionClosed` after shutdown.
/// Undefined: `session` after its last release.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_session_trace_start(session: *mut dvm_session) -> dvm_status {
    boundary(|| {
        // SAFETY: NULL or a live handle, by contract.
        unsafe { session_arg(session) }?.trace_start()
    })
}

/// Ends the session's trace and writes it to the file `path` in the Chrome Trace Event Format
/// (JSON that ui.perfetto.dev and chrome://tracing open): a process per node, a track per
/// worker, per worker's stream and one for the controller, complete events for each call,
/// sync, collective, copy, stream instruction and module load, and flows from the controller's
/// send of a call to each worker's run of it; other nodes' events are moved onto this
/// machine's clock, and the file gives each node's offset and its error (docs/observability.md).
///
/// Ownership: `session` is borrowed; `path` is read during the call.
/// Errors: `ValueError` for NULL, when no trace runs, or when `path` cannot be written (the
/// trace is lost then); `SessionClosed` after shutdown. A session a worker's death broke still
/// writes its trace.
/// Undefined: `session` after its last release.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_session_trace_stop(
    session: *mut dvm_session,
    path: *const c_char,
) -> dvm_status {
    boundary(|| {
        // SAFETY: NULL or a live handle and a terminated string, by contract.
        let (session, path) = unsafe { (session_arg(session)?, c_str(path, "path")?) };
        session.trace_stop(path)
    })
}

/// Writes the flight recorder to the file `path`, in the format of a trace, with no trace
/// running: the last 1024 events of every worker (a worker process's after its death too; a
/// worker of another node as its node sends them, which a lost node cannot).
///
/// Ownership: `session` is borrowed; `path` is read during the call.
/// Errors: `ValueError` for NULL or when `path` cannot be written; `SessionClosed` after
/// shutdown. A session a worker's death broke still writes it.
/// Undefined: `session` after its last release.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_session_trace_dump(
    session: *mut dvm_session,
    path: *const c_char,
) -> dvm_status {
    boundary(|| {
        // SAFETY: NULL or a live handle and a terminated string, by contract.
        let (session, path) = unsafe { (session_arg(session)?, c_str(path, "path")?) };
        session.trace_dump(path)
    })
}
