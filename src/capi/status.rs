//! Seeing a session from C: what every worker is doing, read without asking any worker.

use super::session::{dvm_session, session_arg};
use super::{boundary, dvm_status, non_null, write_out};
use crate::abi::DVMAny;
use crate::object::{Any, Str};

/// What every worker of the session is doing, as a JSON document (a string): `{"workers":
/// [{"worker": 0, "node": 0, "pid": 4711, "state": "idle" | "running" | "collective" |
/// "syncing" | "dead" | "lost" | "unknown", "call": 7, "function": "mlp.step", "since_ms":
/// 12.5, "collective": "allreduce", "waits_for": [1], "last_finished_call": 6,
/// "last_failure": {"call": 5, "error": "ValueError: ..."}, "cause": "..."}, ...],
/// "calls_sent": 7}`. `call` is the number of the call the worker runs or ran last (calls are
/// numbered from 1 in the order the controller sends them); `collective` is set in a
/// collective, `cause` for a dead or lost worker. It never sends a worker a message: a worker
/// stuck in a function, or dead, is reported as it is.
///
/// Ownership: `session` is borrowed; `*out` is an owned string; release it with
/// `dvm_any_release`.
/// Errors: `ValueError` for NULL pointers; `SessionClosed` after shutdown.
/// Undefined: `session` after its last release.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_session_status(
    session: *mut dvm_session,
    out: *mut DVMAny,
) -> dvm_status {
    boundary(|| {
        let out = non_null(out, "out")?;
        // SAFETY: NULL or a live handle, by contract.
        let status = unsafe { session_arg(session) }?.status()?;
        // SAFETY: checked non-NULL above.
        unsafe { write_out(out, Any::Str(Str::from(status.as_str())).into_raw()) };
        Ok(())
    })
}
