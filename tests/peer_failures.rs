//! Collectives that fail with their peers, on worker threads and worker processes: a worker
//! waiting in a collective fails at once, with no session timeout, when a peer it waits for
//! finished the same call without joining (its function failed first, or returned early);
//! the error names the collective, the call, the peer and the peer's cause; and the session,
//! its communicator included, works afterwards. On two nodes the workers of different nodes
//! meet through Gloo: the controller rules on a wait for a peer that passed, and makes the
//! aborted communicators again before the next call.

#[path = "support/built_library.rs"]
mod built_library;
#[path = "support/c_build.rs"]
mod c_build;
#[path = "support/errors.rs"]
mod errors;
#[path = "support/gloo.rs"]
mod gloo;
#[path = "support/ports.rs"]
mod ports;
#[path = "support/session_calls.rs"]
mod session_calls;
#[macro_use]
#[path = "support/session_kinds.rs"]
mod session_kinds;
#[path = "support/statuses.rs"]
mod statuses;
#[path = "support/worker_programs.rs"]
mod worker_programs;

use std::sync::Arc;
use std::time::{Duration, Instant};

use discovm::object::Shape;
use discovm::session::{CopyDirection, DRef, Session};
use discovm::{Any, ErrorKind};
use errors::assert_error;
use session_calls::{F32, call, host_tensor};
use statuses::calls_sent;

/// Failing at once: within a second, with room for a loaded machine.
const FAILS_WITHIN: Duration = Duration::from_secs(1);

/// A float32 tensor of `len` elements on every worker: ones on worker 0, zeros elsewhere (so
/// that an allreduce of it gives ones).
fn filled(s: &Arc<Session>, len: i64) -> DRef {
    let empty = s.get_global_func("runtime.disco.empty").unwrap();
    let tensor = call(s, &empty, &[Shape::new(&[len]).into(), Any::DataType(F32)]);
    let mut data = vec![1.0f32; len as usize];
    let mut shape = [len];
    s.copy_worker0(
        host_tensor(&mut data, &mut shape),
        &tensor,
        "dref",
        CopyDirection::ToWorker,
    )
    .unwrap();
    tensor
}

/// Worker 0's copy of `tensor`.
fn read_worker0(s: &Arc<Session>, tensor: &DRef, len: usize) -> Vec<f32> {
    let mut data = vec![0.0f32; len];
    let mut shape = [len as i64];
    s.copy_worker0(
        host_tensor(&mut data, &mut shape),
        tensor,
        "dref",
        CopyDirection::FromWorker,
    )
    .unwrap();
    data
}

/// The arguments of `proc.allreduce_but`: worker `worker` fails (`fail`) or returns before the
/// allreduce of `send` into `recv` that the others run (-1: every worker runs it).
fn but(worker: i64, fail: bool, send: &DRef, recv: &DRef) -> [Any; 4] {
    [
        Any::Int(worker),
        Any::Bool(fail),
        send.clone().into(),
        recv.clone().into(),
    ]
}

/// Calls `proc.allreduce_but` with `args` on every worker and syncs: the sync's error, which
/// came within [`FAILS_WITHIN`], and the call's number.
fn failed_sync(s: &Arc<Session>, args: &[Any; 4]) -> (discovm::Error, u64) {
    let func = s.get_global_func("proc.allreduce_but").unwrap();
    let started = Instant::now();
    let _reduced = call(s, &func, args);
    let number = calls_sent(s);
    let err = s.sync_all().unwrap_err();
    let took = started.elapsed();
    assert!(took < FAILS_WITHIN, "the sync took {took:?}: {err:?}");
    assert_eq!(err.kind, ErrorKind::Worker, "{err:?}");
    (err, number)
}

/// Runs `proc.allreduce_but` on every worker with none failing, and syncs.
fn every_worker_reduces(s: &Arc<Session>, send: &DRef, recv: &DRef) {
    let func = s.get_global_func("proc.allreduce_but").unwrap();
    let _reduced = call(s, &func, &but(-1, false, send, recv));
    s.sync_all().unwrap();
}

fn a_peer_that_passed_the_allreduce_fails_it_at_once(kind: session_kinds::Kind) {
    for fail in [true, false] {
        let s = session_kinds::session(kind, 3);
        s.init_ccl("cpu", &[]).unwrap();
        let (send, recv) = (filled(&s, 4), filled(&s, 4));
        let (err, number) = failed_sync(&s, &but(1, fail, &send, &recv));
        let how = if fail {
            "`proc.allreduce_but` failed: ValueError: failed before the allreduce on purpose"
        } else {
            "`proc.allreduce_but` returned"
        };
        for waiter in [0, 2] {
            assert_error(
                &err,
                ErrorKind::Worker,
                &format!(
                    "allreduce in call {number} (`proc.allreduce_but`) on worker {waiter}: \
                     worker 1 finished call {number} without joining it: {how}"
                ),
            );
        }
        // The session and its communicator work on: the next allreduce sums every worker's.
        every_worker_reduces(&s, &send, &recv);
        assert_eq!(read_worker0(&s, &recv, 4), vec![1.0; 4]);
    }
}
each_kind!(a_peer_that_passed_the_allreduce_fails_it_at_once);

fn a_peer_that_fails_and_moves_on_to_the_next_call_fails_only_the_first(kind: session_kinds::Kind) {
    // No sync between the calls: the failing worker may join the next call's allreduce before
    // the others notice it passed this one. The calls' numbers in the posts tell them apart.
    let s = session_kinds::session(kind, 3);
    s.init_ccl("cpu", &[]).unwrap();
    let (send, first, second, third) = (filled(&s, 4), filled(&s, 4), filled(&s, 4), filled(&s, 4));
    let func = s.get_global_func("proc.allreduce_but").unwrap();
    let args = |worker: i64, fail: bool, recv: &DRef| but(worker, fail, &send, recv);
    let started = Instant::now();
    let _failed = call(&s, &func, &args(1, true, &first));
    let number = calls_sent(&s);
    let _next = call(&s, &func, &args(-1, false, &second));
    let _after = call(&s, &func, &args(-1, false, &third));
    let err = s.sync_all().unwrap_err();
    let took = started.elapsed();
    assert!(took < FAILS_WITHIN, "the sync took {took:?}: {err:?}");
    assert_error(
        &err,
        ErrorKind::Worker,
        &format!(
            "worker 1 finished call {number} without joining it: `proc.allreduce_but` failed: \
             ValueError"
        ),
    );
    let later = format!("call {}", number + 1);
    assert!(
        !err.message.contains(&later),
        "only the first call failed: {err:?}"
    );
    // The calls after it met as they should: every worker's send summed.
    assert_eq!(read_worker0(&s, &second, 4), vec![1.0; 4]);
    assert_eq!(read_worker0(&s, &third, 4), vec![1.0; 4]);
    s.sync_all().unwrap();
}
each_kind!(a_peer_that_fails_and_moves_on_to_the_next_call_fails_only_the_first);

/// On two nodes (`workers` in all), the last worker (on node 1) fails before the allreduce:
/// every worker waiting for it, on either node, fails within a second, the worker of node 0
/// that waits for node 1 through Gloo with the words of a peer that passed; the session's next
/// call finds the communicators made again, without `init_ccl`.
fn a_peer_on_another_node_that_passed_the_allreduce_fails_it_at_once(workers: i64) {
    if gloo::plugin().is_none() {
        return;
    }
    let s = session_kinds::session(session_kinds::Kind::Nodes, workers);
    s.init_ccl("cpu", &[]).unwrap();
    let (send, recv) = (filled(&s, 4), filled(&s, 4));
    let last = workers - 1;
    for round in 0..2 {
        let (err, number) = failed_sync(&s, &but(last, true, &send, &recv));
        // Worker 0 waits across nodes for node 1's first worker: with one worker per node the
        // failing one, whose wait the controller rules on; with two, node 1's first worker,
        // which its node's meeting failed at once, and which says so to the other leader.
        let waiter = if workers == 2 {
            format!(
                "allreduce in call {number} (`proc.allreduce_but`) on worker 0: worker 1 \
                 finished call {number} without joining it: "
            )
        } else {
            "worker 0: `proc.allreduce_but` failed: ValueError: allreduce: worker 2 could not \
             take part"
                .to_string()
        };
        assert_error(&err, ErrorKind::Worker, &waiter);
        assert_error(
            &err,
            ErrorKind::Worker,
            "`proc.allreduce_but` failed: ValueError: failed before the allreduce on purpose",
        );
        // The next call makes the communicators again: an allreduce of every worker works.
        every_worker_reduces(&s, &send, &recv);
        assert_eq!(read_worker0(&s, &recv, 4), vec![1.0; 4], "round {round}");
    }
}

#[test]
fn a_peer_on_another_node_that_passed_the_allreduce_fails_it_at_once_one_worker_per_node() {
    a_peer_on_another_node_that_passed_the_allreduce_fails_it_at_once(2);
}

#[test]
fn a_peer_on_another_node_that_passed_the_allreduce_fails_it_at_once_two_workers_per_node() {
    a_peer_on_another_node_that_passed_the_allreduce_fails_it_at_once(4);
}
