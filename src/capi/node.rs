//! Sessions across machines: the controller's constructor, and the main function of a node.

use std::ffi::{c_char, c_int};

use super::process::program_main;
use super::session::{dvm_session, dvm_session_options, socket_options, start_into};
use super::{boundary, c_str, dvm_status};
use crate::session::{Session, serve_node};

/// Starts a session across `num_nodes` machines of `workers_per_node` workers each, in
/// `num_groups` groups of equal size (worker ids node-major). This machine is node 0, with
/// worker processes of its own (as `dvm_session_new_process` starts them; worker threads with
/// `opts->local_threads`). It listens on
/// `host:port` until every other node joined (each runs `discovm-node HOST PORT WORKERS`, or a
/// program returning `dvm_node_main`), within `opts->timeout_ms` (two minutes without one),
/// then stops listening. A node joins only if it proves, by HMAC-SHA256 challenge-response, that
/// it holds the session's secret (`opts->session_token`, else `$DISCOVM_SESSION_TOKEN`); without
/// one, only nodes on the loopback interface may join. Every session, worker and DRef function
/// works on the session as on a process session; a node that is lost (its connection closes, or
/// nothing comes from it for `opts->heartbeat_ms`) fails the waits on the session with a
/// `WorkerError` naming it, its workers and the cause. Collectives between nodes are not in this
/// version (`init_ccl` fails with `DeviceUnavailable`).
///
/// Ownership: `*out` is a new reference; release it with `dvm_session_free`.
/// Errors: as `dvm_session_new_process`; `ValueError` for `num_nodes` or `workers_per_node` out
/// of range, a port out of 0..=65535, a device other than the CPU for a worker on another node,
/// or an address it cannot listen on; `TimeoutError` naming the nodes that did not join.
/// Undefined: `opts` arrays with fewer entries than their counts.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_session_new_socket(
    num_nodes: i32,
    workers_per_node: i32,
    num_groups: i32,
    host: *const c_char,
    port: i32,
    opts: *const dvm_session_options,
    out: *mut *mut dvm_session,
) -> dvm_status {
    boundary(|| {
        start_into(out, || {
            // SAFETY: NULL or NUL-terminated, by contract.
            let host = unsafe { c_str(host, "host") }?;
            // SAFETY: NULL or a valid options struct, by contract.
            let options = unsafe { socket_options(opts) }?;
            Session::new_socket(
                num_nodes.into(),
                workers_per_node.into(),
                num_groups.into(),
                host,
                port.into(),
                options,
            )
        })
    })
}

/// The main function of a node program (`discovm-node HOST PORT WORKERS [--rank R]`, Disco's
/// arguments): connects to the controller at `HOST:PORT` (retrying for up to a minute while it
/// does not listen yet), proves it holds `$DISCOVM_SESSION_TOKEN`, starts `WORKERS` worker
/// processes and relays their frames until the controller shuts the session down (then returns
/// 0) or is lost (1). The rank, when not given, comes from the launcher's environment
/// (`SLURM_PROCID`, `OMPI_COMM_WORLD_RANK`, `PMI_RANK`, `RANK`); without one the controller
/// chooses. Bad arguments: a usage message on stderr, and 2.
///
/// Ownership: `argv` is borrowed.
/// Errors (the last error, with a nonzero status): `ValueError` for bad arguments or a failed
/// handshake; `PermissionError` when the controller turns the node away.
/// Thread safety: call it once, from the program's main thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_node_main(argc: c_int, argv: *const *mut c_char) -> c_int {
    // SAFETY: as `main` receives them, by contract.
    unsafe { program_main("discovm node", argc, argv, serve_with_defaults) }
}

/// A node whose workers run the default worker program.
fn serve_with_defaults(args: &[String]) -> crate::Result<()> {
    serve_node(args, None, Vec::new())
}
