//! Collectives on the CPU backend: every built-in, dtype and reduction, N = 1..4 workers, one
//! and two groups, sizes from one element to a few MiB (including sizes N does not divide),
//! checked element by element against a reference computed here; and misuse, each a clear error.
//!
//! The checks run on the workers: each worker fills its buffers with a pattern every worker can
//! recompute, calls the built-in, and compares what it received with the reference. The tests
//! at the end drive the built-ins from the controller instead, and run on worker threads and on
//! worker processes alike (`name::threads`, `name::processes`).

#[path = "support/built_library.rs"]
mod built_library;
#[path = "support/c_build.rs"]
mod c_build;
#[path = "support/gloo.rs"]
mod gloo;
#[path = "support/ports.rs"]
mod ports;
#[path = "support/session_calls.rs"]
mod session_calls;
#[macro_use]
#[path = "support/session_kinds.rs"]
mod session_kinds;
#[path = "support/worker_programs.rs"]
mod worker_programs;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use discovm::abi::{DLDataType, DLDevice, KDL_BFLOAT, KDL_FLOAT, KDL_INT, KDL_UINT};
use discovm::ccl::{f32_to_bf16, f32_to_f16};
use discovm::object::{Function, Shape, Tensor, registry};
use discovm::session::{CopyDirection, DRef, Session, SessionOptions, Target};
use discovm::worker::current as current_worker;
use discovm::{Any, AnyView, Error, ErrorKind, Result};
use session_calls::{F32, call as remote_call, host_tensor};
use session_kinds::{Kind, start};

const DTYPES: [(u8, u8); 10] = [
    (KDL_INT, 8),
    (KDL_UINT, 8),
    (KDL_INT, 32),
    (KDL_UINT, 32),
    (KDL_INT, 64),
    (KDL_UINT, 64),
    (KDL_FLOAT, 16),
    (KDL_BFLOAT, 16),
    (KDL_FLOAT, 32),
    (KDL_FLOAT, 64),
];

fn dtype((code, bits): (u8, u8)) -> DLDataType {
    DLDataType::new(code, bits, 1)
}

/// The test pattern: a small integer per (worker, element); in -3..=3 for products (so they
/// stay exact in float16) and in -5..=5 otherwise; unsigned types shift it to be non-negative.
fn pattern(worker: usize, i: usize, small: bool, unsigned: bool) -> i64 {
    let (span, shift) = if small { (7, 3) } else { (11, 5) };
    let v = ((worker * 7 + i * 13 + i / 5) % span) as i64;
    if unsigned { v } else { v - shift }
}

/// The bits of `value` (an exact integer, or an average) stored as `dtype`.
fn bits_of(dt: DLDataType, value: f64) -> u64 {
    match (dt.code, dt.bits) {
        (KDL_FLOAT, 16) => u64::from(f32_to_f16(value as f32)),
        (KDL_BFLOAT, 16) => u64::from(f32_to_bf16(value as f32)),
        (KDL_FLOAT, 32) => u64::from((value as f32).to_bits()),
        (KDL_FLOAT, 64) => value.to_bits(),
        _ => unreachable!(),
    }
}

fn int_bits(dt: DLDataType, value: i64) -> u64 {
    let mask = if dt.bits == 64 {
        u64::MAX
    } else {
        (1u64 << dt.bits) - 1
    };
    if dt.code == KDL_FLOAT || dt.code == KDL_BFLOAT {
        bits_of(dt, value as f64)
    } else {
        (value as u64) & mask
    }
}

fn is_float(dt: DLDataType) -> bool {
    dt.code == KDL_FLOAT || dt.code == KDL_BFLOAT
}

fn tensor(dt: DLDataType, len: usize) -> Tensor {
    discovm::device::empty(&[len as i64], dt, DLDevice::cpu()).expect("tensor")
}

fn write(t: &Tensor, i: usize, bits: u64) {
    let size = usize::from(t.dl().dtype.bits / 8);
    let bytes = bits.to_le_bytes();
    // SAFETY: `i` is in bounds of the tensor, which this thread alone uses here.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), t.data_ptr().add(i * size), size) };
}

fn read(t: &Tensor, i: usize) -> u64 {
    let size = usize::from(t.dl().dtype.bits / 8);
    let mut bytes = [0u8; 8];
    // SAFETY: as in `write`.
    unsafe { std::ptr::copy_nonoverlapping(t.data_ptr().add(i * size), bytes.as_mut_ptr(), size) };
    u64::from_le_bytes(bytes)
}

fn fill(t: &Tensor, len: usize, value: impl Fn(usize) -> u64) {
    for i in 0..len {
        write(t, i, value(i));
    }
}

fn expect_eq(what: &str, t: &Tensor, len: usize, expected: impl Fn(usize) -> u64) -> Result<()> {
    for i in 0..len {
        let (got, want) = (read(t, i), expected(i));
        if got != want {
            return Err(Error::runtime(format!(
                "{what}: element {i} of {len} is {got:#x}, expected {want:#x}"
            )));
        }
    }
    Ok(())
}

fn builtin(name: &str) -> Function {
    registry::get_global(name).expect("built-in")
}

fn call(f: &Function, args: &[Any]) -> Result<Any> {
    let views: Vec<AnyView<'_>> = args.iter().map(Any::view).collect();
    f.call(&views)
}

/// This worker's team: the global ids of its participants and its rank among them.
fn team(in_group: bool) -> (Vec<usize>, usize) {
    let info = current_worker().expect("on a worker");
    if in_group {
        let per = info.num_workers / info.num_groups;
        let first = info.id / per * per;
        ((first..first + per).collect(), info.id - first)
    } else {
        ((0..info.num_workers).collect(), info.id)
    }
}

const SIZES: [usize; 4] = [1, 2, 7, 1003];

/// Every dtype and reduction at the small sizes, and float32 sum and avg at up to 4 MiB + 12
/// bytes (large enough for streaming stores).
fn allreduce_all(args: &[AnyView<'_>]) -> Result<Any> {
    let in_group = args[0].as_bool()?;
    let allreduce = builtin("runtime.disco.allreduce");
    let (members, rank) = team(in_group);
    let n = members.len();
    let mut cases = Vec::new();
    for dt in DTYPES {
        for op in 0..5 {
            for len in SIZES {
                cases.push((dtype(dt), op, len));
            }
        }
    }
    if !in_group {
        // Large sizes once per layout: 4 MiB + 12 bytes of float32 (each worker writes about
        // 4 MiB of outputs: streaming stores), and two smaller ones.
        let f32t = dtype((KDL_FLOAT, 32));
        cases.push((f32t, 0, (1 << 20) + 3));
        cases.push((f32t, 4, (1 << 16) + 3));
        cases.push((dtype((KDL_FLOAT, 16)), 0, (1 << 16) + 1));
    }
    for (case, (dt, op, len)) in cases.into_iter().enumerate() {
        let unsigned = dt.code == KDL_UINT;
        let small = op == 1;
        let send = tensor(dt, len);
        fill(&send, len, |i| {
            int_bits(dt, pattern(members[rank], i, small, unsigned))
        });
        let in_place = case % 3 == 0;
        let recv = if in_place {
            send.clone()
        } else {
            tensor(dt, len)
        };
        call(
            &allreduce,
            &[
                send.clone().into(),
                Shape::new(&[op]).into(),
                Any::Bool(in_group),
                recv.clone().into(),
            ],
        )?;
        let expected = |i: usize| {
            let values = members.iter().map(|&w| pattern(w, i, small, unsigned));
            let reduced: i64 = match op {
                0 | 4 => values.sum(),
                1 => values.fold(1i64, i64::wrapping_mul),
                2 => values.min().unwrap(),
                _ => values.max().unwrap(),
            };
            if op != 4 {
                return int_bits(dt, reduced);
            }
            if dt.code == KDL_FLOAT && dt.bits == 64 {
                bits_of(dt, reduced as f64 / n as f64)
            } else if is_float(dt) {
                bits_of(dt, f64::from(reduced as f32 / n as f32))
            } else {
                // Integers: the wrapped sum divided by n, truncating, in the dtype.
                let wrapped = int_bits(dt, reduced);
                let sum = match (dt.code, dt.bits) {
                    (KDL_INT, 8) => i64::from(wrapped as u8 as i8),
                    (KDL_INT, 32) => i64::from(wrapped as u32 as i32),
                    (KDL_INT, _) => wrapped as i64,
                    _ => return wrapped / n as u64,
                };
                int_bits(dt, sum / n as i64)
            }
        };
        let what = format!(
            "allreduce op {op} dtype {}{} len {len} in_group {in_group} on worker {}",
            dt.code, dt.bits, members[rank]
        );
        expect_eq(&what, &recv, len, expected)?;
    }
    Ok(Any::None)
}

fn gathers_all(args: &[AnyView<'_>]) -> Result<Any> {
    let in_group = args[0].as_bool()?;
    let (members, rank) = team(in_group);
    let n = members.len();
    let me = members[rank];
    let value = |dt: DLDataType, w: usize, i: usize| {
        int_bits(dt, pattern(w, i, false, dt.code == KDL_UINT))
    };
    let garbage = |dt: DLDataType| int_bits(dt, 99);
    let sizes = SIZES.iter().copied().chain([(1 << 18) + 5]);
    for dt in DTYPES.map(dtype) {
        for len in sizes.clone() {
            if len > 1 << 18 && (in_group || !(dt.code == KDL_FLOAT && dt.bits == 32)) {
                continue; // one large case per kind of copy is enough
            }
            let what =
                |op: &str| format!("{op} dtype {}{} len {len} on worker {me}", dt.code, dt.bits);
            // allgather
            let send = tensor(dt, len);
            fill(&send, len, |i| value(dt, me, i));
            let recv = tensor(dt, n * len);
            fill(&recv, n * len, |_| garbage(dt));
            call(
                &builtin("runtime.disco.allgather"),
                &[
                    send.clone().into(),
                    Any::Bool(in_group),
                    recv.clone().into(),
                ],
            )?;
            expect_eq(&what("allgather"), &recv, n * len, |i| {
                value(dt, members[i / len], i % len)
            })?;
            // broadcast: the root's send reaches every recv
            let recv = tensor(dt, len);
            fill(&recv, len, |_| garbage(dt));
            call(
                &builtin("runtime.disco.broadcast_from_worker0"),
                &[
                    send.clone().into(),
                    Any::Bool(in_group),
                    recv.clone().into(),
                ],
            )?;
            expect_eq(&what("broadcast"), &recv, len, |i| value(dt, members[0], i))?;
            // scatter: slice r of the root's send reaches rank r
            let big = tensor(dt, n * len);
            fill(&big, n * len, |i| value(dt, me, i));
            let root_send: Any = if rank == 0 {
                big.clone().into()
            } else {
                Any::None
            };
            fill(&recv, len, |_| garbage(dt));
            call(
                &builtin("runtime.disco.scatter_from_worker0"),
                &[root_send, Any::Bool(in_group), recv.clone().into()],
            )?;
            expect_eq(&what("scatter"), &recv, len, |i| {
                value(dt, members[0], rank * len + i)
            })?;
            // gather: every send lands in its slice of the root's recv
            fill(&big, n * len, |_| garbage(dt));
            let root_recv: Any = if rank == 0 {
                big.clone().into()
            } else {
                Any::None
            };
            call(
                &builtin("runtime.disco.gather_to_worker0"),
                &[send.clone().into(), Any::Bool(in_group), root_recv],
            )?;
            if rank == 0 {
                expect_eq(&what("gather"), &big, n * len, |i| {
                    value(dt, members[i / len], i % len)
                })?;
            }
        }
    }
    call(&builtin("runtime.disco.barrier"), &[Any::Bool(in_group)])?;
    Ok(Any::None)
}

/// Worker 0 sends to every other worker (recv_from_worker0), each sends back
/// (send_to_worker / recv_from_worker), and with groups each worker passes to the next group.
fn point_to_point(args: &[AnyView<'_>]) -> Result<Any> {
    let len = args[0].as_i64()? as usize;
    let info = current_worker().expect("on a worker");
    let me = info.id;
    for dt in DTYPES.map(dtype) {
        let value = |w: usize, i: usize| int_bits(dt, pattern(w, i, false, dt.code == KDL_UINT));
        let what = |op: &str| format!("{op} dtype {}{} len {len} on worker {me}", dt.code, dt.bits);
        let mine = tensor(dt, len);
        fill(&mine, len, |i| value(me, i));
        let buf = tensor(dt, len);
        if me == 0 {
            for peer in 1..info.num_workers {
                call(
                    &builtin("runtime.disco.send_to_worker"),
                    &[mine.clone().into(), Any::Int(peer as i64)],
                )?;
            }
            for peer in 1..info.num_workers {
                call(
                    &builtin("runtime.disco.recv_from_worker"),
                    &[buf.clone().into(), Any::Int(peer as i64)],
                )?;
                expect_eq(&what("recv_from_worker"), &buf, len, |i| value(peer, i))?;
            }
        } else {
            call(
                &builtin("runtime.disco.recv_from_worker0"),
                &[buf.clone().into()],
            )?;
            expect_eq(&what("recv_from_worker0"), &buf, len, |i| value(0, i))?;
            call(
                &builtin("runtime.disco.send_to_worker"),
                &[mine.clone().into(), Any::Int(0)],
            )?;
        }
        let per = info.num_workers / info.num_groups;
        if info.num_groups > 1 {
            if me + per < info.num_workers {
                call(
                    &builtin("runtime.disco.send_to_next_group"),
                    &[mine.clone().into()],
                )?;
            }
            if me >= per {
                call(
                    &builtin("runtime.disco.recv_from_prev_group"),
                    &[buf.clone().into()],
                )?;
                expect_eq(&what("recv_from_prev_group"), &buf, len, |i| {
                    value(me - per, i)
                })?;
            }
        }
    }
    Ok(Any::None)
}

fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        type Body = fn(&[AnyView<'_>]) -> Result<Any>;
        let tests: [(&str, Body); 3] = [
            ("test.ccl.allreduce_all", allreduce_all),
            ("test.ccl.gathers_all", gathers_all),
            ("test.ccl.point_to_point", point_to_point),
        ];
        for (name, f) in tests {
            registry::register_global(name, Function::from_closure(f), true).unwrap();
        }
    });
}

fn session(n: i64, groups: i64, timeout_ms: u64) -> Arc<Session> {
    register();
    let options = SessionOptions {
        timeout: (timeout_ms > 0).then(|| Duration::from_millis(timeout_ms)),
        ..SessionOptions::default()
    };
    Session::new_threaded(n, groups, options).expect("session starts")
}

fn run(s: &Arc<Session>, name: &str, args: &[Any]) -> Result<()> {
    let f = s.get_global_func(name)?;
    let views: Vec<_> = args.iter().map(Any::view).collect();
    let _out: DRef = s.call(Target::All, &f, &views)?;
    s.sync_all()
}

/// The large checks take turns: run side by side on two CPUs, their workers (up to 12
/// threads) would mostly wait for each other.
static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn heavy() -> std::sync::MutexGuard<'static, ()> {
    HEAVY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn layouts() -> Vec<(i64, i64)> {
    vec![(1, 1), (2, 1), (3, 1), (4, 1), (2, 2), (4, 2)]
}

/// Runs the worker function `name` once with each of `args`, on a new communicator of every
/// layout with at least `min_workers` workers; each run must succeed, and worker 0's register
/// file must be empty after them.
fn run_on_layouts(name: &str, args: &[Any], min_workers: i64) {
    let _turn = heavy();
    for (n, groups) in layouts().into_iter().filter(|&(n, _)| n >= min_workers) {
        let s = session(n, groups, 60_000);
        s.init_ccl("cpu", &[]).unwrap();
        for arg in args {
            run(&s, name, std::slice::from_ref(arg))
                .unwrap_or_else(|e| panic!("n={n} groups={groups} {arg:?}: {e:?}"));
        }
        assert_eq!(s.live_registers(0).unwrap(), 0, "n={n} groups={groups}");
    }
}

#[test]
fn allreduce_every_dtype_and_op_matches_the_reference() {
    let in_group = [Any::Bool(false), Any::Bool(true)];
    run_on_layouts("test.ccl.allreduce_all", &in_group, 1);
}

#[test]
fn allgather_broadcast_scatter_gather_match_the_reference() {
    let in_group = [Any::Bool(false), Any::Bool(true)];
    run_on_layouts("test.ccl.gathers_all", &in_group, 1);
}

#[test]
fn point_to_point_transfers_match_the_reference() {
    let lengths = [Any::Int(1), Any::Int(1003), Any::Int(100_001)];
    run_on_layouts("test.ccl.point_to_point", &lengths, 2);
}

/// Runs `body` on every worker and returns what the controller's wait reported.
fn on_workers(
    s: &Arc<Session>,
    name: &str,
    body: impl Fn(usize) -> Result<Any> + Send + Sync + 'static,
) -> Result<()> {
    registry::register_global(
        name,
        Function::from_closure(move |_| body(current_worker().unwrap().id)),
        true,
    )
    .unwrap();
    run(s, name, &[])
}

/// The controller's wait and a worker's join share the session's timeout, so the controller
/// may give up first; the worker's failure then comes with the next wait.
fn after_timeouts(s: &Arc<Session>, result: Result<()>) -> Result<()> {
    match result {
        Err(e) if e.kind == ErrorKind::Timeout => s.sync_all(),
        other => other,
    }
}

fn f32_tensor(len: usize) -> Any {
    tensor(dtype((KDL_FLOAT, 32)), len).into()
}

fn allreduce_sum(send: Any, in_group: Any, recv: Any) -> Result<Any> {
    call(
        &builtin("runtime.disco.allreduce"),
        &[send, Shape::new(&[0]).into(), in_group, recv],
    )
}

/// Makes a new communicator and checks that an allreduce of `len` floats on every worker
/// (`in_group` as its in_group) succeeds on it.
fn allreduce_after_init(s: &Arc<Session>, name: &str, len: usize, in_group: bool) {
    s.init_ccl("cpu", &[]).unwrap();
    on_workers(s, name, move |_| {
        allreduce_sum(f32_tensor(len), Any::Bool(in_group), f32_tensor(len))
    })
    .unwrap_or_else(|e| panic!("{name}: {e:?}"));
}

fn assert_error(result: Result<()>, kind: ErrorKind, parts: &[&str]) {
    let error = result.expect_err("the call fails");
    assert_eq!(error.kind, kind, "{error:?}");
    for part in parts {
        assert!(
            error.message.contains(part),
            "{part:?} not in {:?}",
            error.message
        );
    }
}

#[test]
fn init_ccl_checks_its_backend_and_device_ids() {
    let s = session(2, 1, 10_000);
    if discovm::device::count(discovm::abi::KDL_CUDA).unwrap() == 0 {
        assert_error(
            s.init_ccl("nccl", &[]),
            ErrorKind::DeviceUnavailable,
            &[
                "the nccl backend needs a GPU for each worker and NCCL: CUDA device 0: ",
                "could not be loaded",
            ],
        );
    } else {
        // Workers on the CPU: refused whether NCCL is there or not.
        let error = s.init_ccl("nccl", &[]).unwrap_err();
        assert!(error.message.contains("the nccl backend needs"), "{error}");
    }
    assert_error(s.init_ccl("gloo", &[]), ErrorKind::Value, &["\"gloo\""]);
    assert_error(
        s.init_ccl("cpu", &[0, 1, 2]),
        ErrorKind::Value,
        &["3 device ids", "2 workers"],
    );
    s.init_ccl("cpu", &[0, 1]).unwrap();
    s.init_ccl("cpu", &[]).unwrap(); // again: replaces the communicator
    s.shutdown().unwrap();
    assert_error(s.init_ccl("cpu", &[]), ErrorKind::SessionClosed, &[]);
}

#[test]
fn a_collective_before_init_ccl_is_a_worker_error_naming_the_worker_and_call() {
    let s = session(2, 1, 10_000);
    let result = on_workers(&s, "test.ccl.before_init", |_| {
        allreduce_sum(f32_tensor(4), Any::Bool(false), f32_tensor(4))
    });
    assert_error(
        result,
        ErrorKind::Worker,
        &["worker 0", "runtime.disco.allreduce", "call init_ccl"],
    );
    // The session still works, and collectives work after init_ccl.
    allreduce_after_init(&s, "test.ccl.after_init", 4, false);
}

#[test]
fn mismatched_shapes_or_dtypes_fail_on_every_worker() {
    let s = session(3, 1, 10_000);
    s.init_ccl("cpu", &[]).unwrap();
    let result = on_workers(&s, "test.ccl.mismatch_shape", |id| {
        let len = if id == 2 { 5 } else { 4 };
        allreduce_sum(f32_tensor(len), Any::Bool(false), f32_tensor(len))
    });
    assert_error(
        result,
        ErrorKind::Worker,
        &[
            "allreduce",
            "worker 2 passed a send buffer of [5] float32",
            "[4] float32",
        ],
    );
    // Every worker failed: each one's sync reports it.
    let result = on_workers(&s, "test.ccl.mismatch_dtype", |id| {
        let dt = dtype(if id == 1 {
            (KDL_INT, 32)
        } else {
            (KDL_FLOAT, 32)
        });
        call(
            &builtin("runtime.disco.allgather"),
            &[tensor(dt, 2).into(), Any::Bool(false), tensor(dt, 6).into()],
        )
    });
    assert_error(
        result,
        ErrorKind::Worker,
        &["allgather", "int32", "float32"],
    );
    for w in 0..3 {
        let r = on_workers(&s, &format!("test.ccl.mismatch_op_{w}"), move |id| {
            let op = if id == w { 1 } else { 0 };
            call(
                &builtin("runtime.disco.allreduce"),
                &[
                    f32_tensor(2),
                    Shape::new(&[op]).into(),
                    Any::Bool(false),
                    f32_tensor(2),
                ],
            )
        });
        assert_error(r, ErrorKind::Worker, &["allreduce"]);
    }
    // Afterwards the communicator is still usable.
    on_workers(&s, "test.ccl.after_mismatch", |_| {
        allreduce_sum(f32_tensor(3), Any::Bool(false), f32_tensor(3))
    })
    .unwrap();
}

#[test]
fn self_sends_bad_peers_and_roles_are_value_errors() {
    let s = session(2, 1, 10_000);
    s.init_ccl("cpu", &[]).unwrap();
    let r = on_workers(&s, "test.ccl.self_send", |id| {
        call(
            &builtin("runtime.disco.send_to_worker"),
            &[f32_tensor(1), Any::Int(id as i64)],
        )
    });
    assert_error(
        r,
        ErrorKind::Worker,
        &["worker 0", "cannot send to or receive from itself"],
    );
    let r = on_workers(&s, "test.ccl.bad_peer", |_| {
        call(
            &builtin("runtime.disco.recv_from_worker"),
            &[f32_tensor(1), Any::Int(9)],
        )
    });
    assert_error(
        r,
        ErrorKind::Worker,
        &["IndexError", "peer worker 9 out of range"],
    );
    let r = on_workers(&s, "test.ccl.recv0_on_0", |id| {
        if id == 0 {
            call(
                &builtin("runtime.disco.recv_from_worker0"),
                &[f32_tensor(1)],
            )
        } else {
            Ok(Any::None)
        }
    });
    assert_error(
        r,
        ErrorKind::Worker,
        &["worker 0 cannot receive from itself"],
    );
    let r = on_workers(&s, "test.ccl.no_next_group", |_| {
        call(
            &builtin("runtime.disco.send_to_next_group"),
            &[f32_tensor(1)],
        )
    });
    assert_error(r, ErrorKind::Worker, &["last group"]);
    let r = on_workers(&s, "test.ccl.no_prev_group", |_| {
        call(
            &builtin("runtime.disco.recv_from_prev_group"),
            &[f32_tensor(1)],
        )
    });
    assert_error(r, ErrorKind::Worker, &["first group"]);
}

#[test]
fn bad_arguments_name_the_argument() {
    let s = session(2, 1, 10_000);
    s.init_ccl("cpu", &[]).unwrap();
    let r = on_workers(&s, "test.ccl.bad_kind", |_| {
        call(
            &builtin("runtime.disco.allreduce"),
            &[
                f32_tensor(1),
                Shape::new(&[7]).into(),
                Any::Bool(false),
                f32_tensor(1),
            ],
        )
    });
    assert_error(
        r,
        ErrorKind::Worker,
        &["argument 1 (kind)", "reduction kind 7"],
    );
    let r = on_workers(&s, "test.ccl.bad_dtype", |_| {
        let dt = DLDataType::new(KDL_INT, 16, 1);
        allreduce_sum(tensor(dt, 1).into(), Any::Bool(false), tensor(dt, 1).into())
    });
    assert_error(r, ErrorKind::Worker, &["int16 is not supported"]);
    let r = on_workers(&s, "test.ccl.allgather_size", |_| {
        call(
            &builtin("runtime.disco.allgather"),
            &[f32_tensor(2), Any::Bool(false), f32_tensor(3)],
        )
    });
    assert_error(r, ErrorKind::Worker, &["allgather", "2 times the elements"]);
    let r = on_workers(&s, "test.ccl.scatter_without_send", |_| {
        call(
            &builtin("runtime.disco.scatter_from_worker0"),
            &[Any::None, Any::Bool(false), f32_tensor(2)],
        )
    });
    assert_error(r, ErrorKind::Worker, &["argument 0 (send)", "required"]);
}

#[test]
fn different_collectives_or_a_wrong_in_group_fail_every_worker_at_once() {
    // Two groups: worker 0 and 1 in group 0, 2 and 3 in group 1. A group collective on some
    // workers and a session-wide one on the others never meet: the workers waiting for each
    // other in different teams notice it long before the timeout (a minute) and break the
    // communicator, which fails the others too.
    let s = session(4, 2, 60_000);
    s.init_ccl("cpu", &[]).unwrap();
    let r = on_workers(&s, "test.ccl.wrong_in_group", |id| {
        allreduce_sum(f32_tensor(2), Any::Bool(id == 3), f32_tensor(2))
    });
    assert_error(
        r,
        ErrorKind::Worker,
        &[
            "worker 0",
            "ValueError: allreduce in call ",
            "group 1 (workers [2, 3])",
            "disagree on in_group",
        ],
    );
    // The broken communicator fails at once until init_ccl runs again.
    let r = on_workers(&s, "test.ccl.after_break", |_| {
        allreduce_sum(f32_tensor(2), Any::Bool(false), f32_tensor(2))
    });
    assert_error(
        r,
        ErrorKind::Worker,
        &["disagree on in_group", "now broken"],
    );
    s.init_ccl("cpu", &[]).unwrap();
    // Collectives that meet but differ fail on every worker; the communicator stays usable.
    let r = on_workers(&s, "test.ccl.different_calls", |id| {
        if id == 1 {
            call(&builtin("runtime.disco.barrier"), &[])
        } else {
            allreduce_sum(f32_tensor(2), Any::Bool(false), f32_tensor(2))
        }
    });
    assert_error(
        r,
        ErrorKind::Worker,
        &["worker 1 called `barrier` while worker 0 called `allreduce`"],
    );
    // A transfer on one worker and a collective on the others cross the same way.
    let r = on_workers(&s, "test.ccl.transfer_against_barrier", |id| {
        if id == 0 {
            call(
                &builtin("runtime.disco.send_to_worker"),
                &[f32_tensor(2), Any::Int(1)],
            )
        } else {
            call(&builtin("runtime.disco.barrier"), &[])
        }
    });
    assert_error(
        r,
        ErrorKind::Worker,
        &[
            "send_to_worker",
            "the transfer from worker 0 to worker 1",
            "barrier",
            "in the session",
            "disagree on in_group",
        ],
    );
    allreduce_after_init(&s, "test.ccl.after_reinit", 2, true);
}

#[test]
fn a_worker_that_cannot_tell_whom_to_meet_fails_the_others_at_once() {
    // No timeout: if the others waited for that worker, this test would hang.
    let s = session(3, 1, 0);
    s.init_ccl("cpu", &[]).unwrap();
    let r = on_workers(&s, "test.ccl.in_group_not_bool", |id| {
        let in_group = if id == 1 {
            Any::from(Shape::new(&[1]))
        } else {
            Any::Bool(false)
        };
        allreduce_sum(f32_tensor(1), in_group, f32_tensor(1))
    });
    assert_error(
        r,
        ErrorKind::Worker,
        &[
            "worker 0: `test.ccl.in_group_not_bool` failed: ValueError: allreduce: worker 1 \
             could not tell whom to meet (TypeError: argument 2 (in_group)",
            "worker 1: `test.ccl.in_group_not_bool` failed: TypeError: argument 2 (in_group)",
            "now broken",
        ],
    );
    s.init_ccl("cpu", &[]).unwrap();
    let r = on_workers(&s, "test.ccl.bad_peer_against_recv", |id| match id {
        0 => call(
            &builtin("runtime.disco.recv_from_worker"),
            &[f32_tensor(1), Any::Int(2)],
        ),
        2 => call(
            &builtin("runtime.disco.send_to_worker"),
            &[f32_tensor(1), Any::Int(5)],
        ),
        _ => Ok(Any::None),
    });
    assert_error(
        r,
        ErrorKind::Worker,
        &[
            "worker 0: `test.ccl.bad_peer_against_recv` failed: ValueError: send_to_worker: \
             worker 2 could not tell whom to meet (IndexError: peer worker 5 out of range",
            "worker 2: `test.ccl.bad_peer_against_recv` failed: IndexError",
        ],
    );
    s.init_ccl("cpu", &[]).unwrap();
    let r = on_workers(&s, "test.ccl.missing_in_group", |id| {
        let mut args = vec![f32_tensor(1), Any::Bool(false), f32_tensor(3)];
        if id == 1 {
            args.truncate(1);
        }
        call(&builtin("runtime.disco.allgather"), &args)
    });
    assert_error(
        r,
        ErrorKind::Worker,
        &[
            "worker 0: `test.ccl.missing_in_group` failed: ValueError: allgather: worker 1 \
             could not tell whom to meet (TypeError: `runtime.disco.allgather` takes 3 \
             arguments but got 1)",
        ],
    );
    allreduce_after_init(&s, "test.ccl.after_whom", 3, false);
}

#[test]
fn a_worker_that_never_joins_times_out_or_is_released_by_shutdown() {
    // Worker 1 stays in the call until worker 0's barrier gave up (a worker that finished the
    // call without joining fails its peers at once instead: tests/peer_failures.rs).
    static GAVE_UP: AtomicBool = AtomicBool::new(false);
    let s = session(2, 1, 200);
    s.init_ccl("cpu", &[]).unwrap();
    let r = on_workers(&s, "test.ccl.never_joins", |id| {
        if id == 0 {
            let waited = call(&builtin("runtime.disco.barrier"), &[]);
            GAVE_UP.store(true, Ordering::SeqCst);
            return waited;
        }
        let give_up = Instant::now() + Duration::from_secs(60);
        while !GAVE_UP.load(Ordering::SeqCst) && Instant::now() < give_up {
            std::thread::yield_now();
        }
        Ok(Any::None)
    });
    let r = after_timeouts(&s, r);
    assert_error(
        r,
        ErrorKind::Worker,
        &["worker 0", "barrier", "missing: worker 1"],
    );

    // Without a timeout, shutdown breaks the wait instead of hanging.
    let s = session(2, 1, 0);
    s.init_ccl("cpu", &[]).unwrap();
    let f = {
        registry::register_global(
            "test.ccl.waits_forever",
            Function::from_closure(|_| {
                if current_worker().unwrap().id == 0 {
                    call(&builtin("runtime.disco.barrier"), &[])
                } else {
                    Ok(Any::None)
                }
            }),
            true,
        )
        .unwrap();
        s.get_global_func("test.ccl.waits_forever").unwrap()
    };
    // A call to worker 0 alone: nothing tells it that worker 1 will not join.
    let out = s.call(Target::One(0), &f, &[]).unwrap();
    s.sync_worker(1).unwrap();
    drop((out, f));
    s.shutdown().unwrap();
}

#[test]
fn a_worker_whose_arguments_are_rejected_fails_the_others_at_once() {
    // No timeout: if the others waited for the rejected worker, this test would hang.
    let s = session(3, 1, 0);
    s.init_ccl("cpu", &[]).unwrap();
    let r = on_workers(&s, "test.ccl.one_bad_dtype", |id| {
        let dt = if id == 1 {
            DLDataType::new(KDL_INT, 16, 1)
        } else {
            dtype((KDL_FLOAT, 32))
        };
        allreduce_sum(tensor(dt, 2).into(), Any::Bool(false), tensor(dt, 2).into())
    });
    assert_error(r, ErrorKind::Worker, &["allreduce"]);
    for w in 0..3 {
        let e = s.sync_worker(w);
        assert!(e.is_ok(), "failures were reported by the first wait: {e:?}");
    }
    // Every worker failed: worker 0's error names worker 1.
    let r = on_workers(&s, "test.ccl.one_bad_recv", |id| {
        let recv = if id == 2 { Any::None } else { f32_tensor(2) };
        call(
            &builtin("runtime.disco.allgather"),
            &[f32_tensor(1), Any::Bool(false), recv],
        )
        .map_err(|e| Error::new(e.kind, format!("on {id}: {}", e.message)))
    });
    assert_error(
        r,
        ErrorKind::Worker,
        &[
            "worker 0",
            "on 0",
            "worker 2 could not take part",
            "argument 2 (recv)",
        ],
    );
    // The communicator still works.
    on_workers(&s, "test.ccl.after_rejection", |_| {
        allreduce_sum(f32_tensor(3), Any::Bool(false), f32_tensor(3))
    })
    .unwrap();
}

#[test]
fn init_ccl_from_several_threads_at_once_leaves_the_workers_one_working_communicator() {
    let _turn = heavy();
    for round in 0..100 {
        let s = session(4, 1, 2000);
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..5 {
                        s.init_ccl("cpu", &[]).unwrap();
                    }
                });
            }
        });
        let r = run(&s, "runtime.disco.barrier", &[]);
        assert!(
            r.is_ok(),
            "round {round}: a barrier after the set-ups: {r:?}"
        );
    }
}

#[test]
fn a_collective_waits_for_the_copies_queued_into_its_buffers() {
    let s = session(2, 1, 300);
    s.init_ccl("cpu", &[]).unwrap();
    // A stream held shut by a gate, with copies queued into each worker's send buffer.
    let open = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let held = open.clone();
    let gate = Function::from_closure(move |_| {
        while !held.load(std::sync::atomic::Ordering::Acquire) {
            std::thread::yield_now();
        }
        Ok(Any::None)
    });
    let stream = discovm::vm::Stream::new(DLDevice::cpu()).unwrap();
    stream.call(&gate, Vec::new()).unwrap();
    let i32t = DLDataType::new(KDL_INT, 32, 1);
    let threes = tensor(i32t, 64);
    fill(&threes, 64, |_| 3);
    let rank = s.get_global_func("runtime.disco.worker_rank").unwrap();
    let (send, recv) = (
        s.call(Target::All, &rank, &[]).unwrap(),
        s.call(Target::All, &rank, &[]).unwrap(),
    );
    for w in 0..2 {
        let queued = tensor(i32t, 64);
        stream.copy(&queued, &threes).unwrap();
        s.set_register(send.reg(), w, queued.into()).unwrap();
        s.set_register(recv.reg(), w, tensor(i32t, 64).into())
            .unwrap();
    }
    let allreduce = s.get_global_func("runtime.disco.allreduce").unwrap();
    let args = [
        Any::from(send.clone()),
        Shape::new(&[0]).into(),
        Any::Bool(false),
        Any::from(recv.clone()),
    ];
    let views: Vec<_> = args.iter().map(Any::view).collect();
    let _out = s.call(Target::All, &allreduce, &views).unwrap();
    // The workers wait for the copies, so this wait times out; had they not waited, they would
    // have reduced the zeros the buffers held before the copies, and it would succeed.
    let waited = s.sync_worker(0).map_err(|e| e.kind);
    open.store(true, std::sync::atomic::Ordering::Release);
    assert_eq!(waited, Err(ErrorKind::Timeout));
    s.sync_all().unwrap();
    for w in 0..2 {
        let got = s.get_register(recv.reg(), w).unwrap();
        let got = got.view().as_tensor().unwrap();
        expect_eq("recv", &got, 64, |_| 6).unwrap();
    }
}

// ---- Driven from the controller through the built-ins, on worker threads and processes ----

/// A tensor of `len` f32 on every worker: in the session's shared memory (`runtime.disco.empty`)
/// or outside it (`proc.heap_empty`, in a worker process's own memory).
fn remote_f32(s: &Arc<Session>, len: usize, shared: bool) -> DRef {
    if shared {
        let empty = s.get_global_func("runtime.disco.empty").unwrap();
        let shape = Shape::new(&[len as i64]);
        remote_call(s, &empty, &[shape.into(), Any::DataType(F32)])
    } else {
        let heap = s.get_global_func("proc.heap_empty").unwrap();
        remote_call(s, &heap, &[Any::Int(len as i64)])
    }
}

fn copy_f32(s: &Arc<Session>, data: &mut [f32], dref: &DRef, direction: CopyDirection) {
    let mut shape = [data.len() as i64];
    s.copy_worker0(host_tensor(data, &mut shape), dref, "dref", direction)
        .unwrap();
}

/// Runs built-in `name` on every worker (`Target::All`) or worker 0 alone.
fn builtin_on(s: &Arc<Session>, target: Target, name: &str, args: &[Any]) -> Result<()> {
    let f = s.get_global_func(name).unwrap();
    let views: Vec<AnyView<'_>> = args.iter().map(Any::view).collect();
    drop(s.call(target, &f, &views)?);
    s.sync_all()
}

/// Worker 0's copy of everyone's `dref`, gathered.
fn gathered(s: &Arc<Session>, dref: &DRef, len: usize) -> Vec<f32> {
    let n = s.num_workers();
    let all = remote_f32(s, n * len, true);
    let args = [dref.clone().into(), Any::Bool(false), all.clone().into()];
    builtin_on(s, Target::All, "runtime.disco.gather_to_worker0", &args).unwrap();
    let mut out = vec![0.0; n * len];
    copy_f32(s, &mut out, &all, CopyDirection::FromWorker);
    out
}

fn collectives_meet_in_shared_memory_and_outside_it(kind: Kind) {
    let s = start(kind, 4, 1, SessionOptions::default()).unwrap();
    s.init_ccl("cpu", &[]).unwrap();
    let n = 4;
    // Small parts are staged (four workers on fewer CPUs); large ones are met in place.
    for len in [8usize, 1 << 18] {
        let mut data: Vec<f32> = (0..n * len).map(|i| i as f32).collect();
        let whole = remote_f32(&s, n * len, true);
        copy_f32(&s, &mut data, &whole, CopyDirection::ToWorker);
        for (send_shared, recv_shared) in [(true, true), (true, false), (false, true)] {
            let what =
                format!("{len} elements, send shared {send_shared}, recv shared {recv_shared}");
            let part = remote_f32(&s, len, send_shared);
            let args = [whole.clone().into(), Any::Bool(false), part.clone().into()];
            builtin_on(&s, Target::All, "runtime.disco.scatter_from_worker0", &args).unwrap();
            let sum = remote_f32(&s, len, recv_shared);
            let sum_kind = Shape::new(&[0]);
            let args = [
                part.clone().into(),
                sum_kind.into(),
                Any::Bool(false),
                sum.clone().into(),
            ];
            builtin_on(&s, Target::All, "runtime.disco.allreduce", &args).unwrap();
            let expected: Vec<f32> = (0..len).map(|i| (6 * len + 4 * i) as f32).collect();
            assert_eq!(
                gathered(&s, &sum, len),
                expected.repeat(n),
                "allreduce: {what}"
            );
            let again = remote_f32(&s, n * len, recv_shared);
            let args = [part.clone().into(), Any::Bool(false), again.clone().into()];
            builtin_on(&s, Target::All, "runtime.disco.allgather", &args).unwrap();
            let mut out = vec![0.0; n * len];
            copy_f32(&s, &mut out, &again, CopyDirection::FromWorker);
            assert_eq!(out, data, "allgather: {what}");
        }
    }
}
each_kind_and_nodes!(collectives_meet_in_shared_memory_and_outside_it);

fn a_broken_communicator_is_replaced_by_init_ccl_again_and_again(kind: Kind) {
    let options = SessionOptions {
        timeout: Some(Duration::from_millis(300)),
        ..SessionOptions::default()
    };
    let s = start(kind, 2, 1, options).unwrap();
    for round in 0..3 {
        s.init_ccl("cpu", &[]).unwrap();
        // Worker 0 alone joins: it times out waiting for worker 1, and the communicator breaks.
        let alone = builtin_on(&s, Target::One(0), "runtime.disco.barrier", &[]);
        assert_error(
            after_timeouts(&s, alone),
            ErrorKind::Worker,
            &["worker 0", "barrier", "missing: worker 1"],
        );
        let err = builtin_on(&s, Target::All, "runtime.disco.barrier", &[]).unwrap_err();
        assert_error(Err(err), ErrorKind::Worker, &["call init_ccl again"]);
        // A new communicator works.
        s.init_ccl("cpu", &[]).unwrap();
        builtin_on(&s, Target::All, "runtime.disco.barrier", &[])
            .unwrap_or_else(|e| panic!("round {round}: {e:?}"));
    }
}
each_kind!(a_broken_communicator_is_replaced_by_init_ccl_again_and_again);

fn shutdown_releases_a_worker_waiting_in_a_collective(kind: Kind) {
    let s = start(kind, 2, 1, SessionOptions::default()).unwrap();
    s.init_ccl("cpu", &[]).unwrap();
    let barrier = s.get_global_func("runtime.disco.barrier").unwrap();
    drop(s.call(Target::One(0), &barrier, &[]).unwrap());
    s.sync_worker(1).unwrap();
    drop(barrier);
    let started = std::time::Instant::now();
    s.shutdown().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "shutdown took {:?}",
        started.elapsed()
    );
}
each_kind_and_nodes!(shutdown_releases_a_worker_waiting_in_a_collective);

#[test]
fn the_built_in_that_installs_a_communicator_in_shared_memory_refuses_bad_input() {
    let init = "runtime.disco.cpu.init_ccl_in_arena";
    let s = start(Kind::Processes, 2, 1, SessionOptions::default()).unwrap();
    // The worker's error comes back as a WorkerError whose message names its kind.
    let table: [(&[Any], &[&str]); 5] = [
        (
            &[Any::Int(2), Any::Int(0), Any::Int(0)],
            &["IndexError", "area 2 out of range"],
        ),
        (
            &[Any::Int(-1), Any::Int(0), Any::Int(0)],
            &["IndexError", "argument 0 (area)"],
        ),
        (
            &[Any::Float(0.5), Any::Int(0), Any::Int(0)],
            &["TypeError", "argument 0 (area)"],
        ),
        // A timeout crosses as milliseconds with 0 for none: a negative one means nothing.
        (
            &[Any::Int(0), Any::Int(-1), Any::Int(0)],
            &["ValueError", "argument 1 (timeout_ms) is negative (-1)"],
        ),
        (&[Any::Int(0)], &["TypeError", init]),
    ];
    for (args, parts) in table {
        let err = builtin_on(&s, Target::All, init, args).unwrap_err();
        assert_error(Err(err), ErrorKind::Worker, parts);
    }
    // Worker threads have no arena to find a communicator in.
    let s = start(Kind::Threads, 2, 1, SessionOptions::default()).unwrap();
    let args = [Any::Int(0), Any::Int(0), Any::Int(0)];
    let err = builtin_on(&s, Target::All, init, &args).unwrap_err();
    assert_error(
        Err(err),
        ErrorKind::Worker,
        &["reached a worker without one"],
    );
}

fn a_tensor_of_more_than_eight_dimensions_is_refused_naming_its_argument(kind: Kind) {
    let s = start(kind, 2, 1, SessionOptions::default()).unwrap();
    s.init_ccl("cpu", &[]).unwrap();
    let empty = s.get_global_func("runtime.disco.empty").unwrap();
    let tall = remote_call(
        &s,
        &empty,
        &[Shape::new(&[1; 9]).into(), Any::DataType(F32)],
    );
    let args = [
        tall.into(),
        Any::Bool(false),
        remote_f32(&s, 2, true).into(),
    ];
    let err = builtin_on(&s, Target::All, "runtime.disco.allgather", &args).unwrap_err();
    assert_error(
        Err(err),
        ErrorKind::Worker,
        &["argument 0 (send)", "at most 8 dimensions, not 9"],
    );
}
each_kind_and_nodes!(a_tensor_of_more_than_eight_dimensions_is_refused_naming_its_argument);

/// Runs each built-in of `plan` with its arguments on each of its workers alone, in order; the
/// functions are looked up first (a lookup waits for every worker, some of which the calls
/// hold until their peers join).
/// Worker `from` sends `sent` to worker `to`, which receives it into `into` (sync not included).
fn send_and_receive(s: &Arc<Session>, from: usize, to: usize, sent: &DRef, into: &DRef) {
    builtin_each(
        s,
        &[
            (
                &[from],
                "runtime.disco.send_to_worker",
                &[sent.clone().into(), Any::Int(to as i64)],
            ),
            (
                &[to],
                "runtime.disco.recv_from_worker",
                &[into.clone().into(), Any::Int(from as i64)],
            ),
        ],
    );
}

fn builtin_each(s: &Arc<Session>, plan: &[(&[usize], &str, &[Any])]) {
    let funcs: Vec<DRef> = plan
        .iter()
        .map(|(_, name, _)| s.get_global_func(name).unwrap())
        .collect();
    for ((workers, _, args), f) in plan.iter().zip(&funcs) {
        let views: Vec<AnyView<'_>> = args.iter().map(Any::view).collect();
        for &w in *workers {
            drop(s.call(Target::One(w), f, &views).unwrap());
        }
    }
}

fn groups_and_transfers_meet_on_every_kind(kind: Kind) {
    let options = SessionOptions {
        timeout: Some(Duration::from_secs(60)),
        ..SessionOptions::default()
    };
    // Two groups of two: on nodes, group 0 is node 0 and group 1 node 1.
    let s = start(kind, 4, 2, options).unwrap();
    s.init_ccl("cpu", &[]).unwrap();
    let (n, len) = (4, 8);
    // Worker w's part: 100 w + i.
    let data: Vec<f32> = (0..n * len)
        .map(|k| (k / len * 100 + k % len) as f32)
        .collect();
    let part_of = |w: usize| data[w * len..(w + 1) * len].to_vec();
    let whole = remote_f32(&s, n * len, true);
    copy_f32(&s, &mut data.clone(), &whole, CopyDirection::ToWorker);
    let part = remote_f32(&s, len, true);
    let args = [whole.clone().into(), Any::Bool(false), part.clone().into()];
    builtin_on(&s, Target::All, "runtime.disco.scatter_from_worker0", &args).unwrap();

    let reduce = |kind: i64, in_group: bool| {
        let out = remote_f32(&s, len, true);
        let args = [
            part.clone().into(),
            Shape::new(&[kind]).into(),
            Any::Bool(in_group),
            out.clone().into(),
        ];
        builtin_on(&s, Target::All, "runtime.disco.allreduce", &args).unwrap();
        gathered(&s, &out, len)
    };
    let sum_of = |a: usize, b: usize| -> Vec<f32> {
        part_of(a)
            .iter()
            .zip(part_of(b))
            .map(|(x, y)| x + y)
            .collect()
    };
    let (group0, group1) = (sum_of(0, 1), sum_of(2, 3));
    assert_eq!(
        reduce(0, true),
        [group0.clone(), group0, group1.clone(), group1].concat(),
        "sum in each group"
    );
    assert_eq!(reduce(3, false), part_of(3).repeat(n), "max of the session");
    let mean: Vec<f32> = (0..len).map(|i| (150 + i) as f32).collect();
    assert_eq!(reduce(4, false), mean.repeat(n), "average of the session");

    // Each group's leader broadcasts to its group.
    let led = remote_f32(&s, len, true);
    let args = [part.clone().into(), Any::Bool(true), led.clone().into()];
    builtin_on(
        &s,
        Target::All,
        "runtime.disco.broadcast_from_worker0",
        &args,
    )
    .unwrap();
    let expected = [part_of(0), part_of(0), part_of(2), part_of(2)].concat();
    assert_eq!(gathered(&s, &led, len), expected, "broadcast in each group");

    // Group 0 sends to group 1; worker 3 sends to worker 0.
    let got = remote_f32(&s, len, true);
    builtin_each(
        &s,
        &[
            (
                &[0, 1],
                "runtime.disco.send_to_next_group",
                &[part.clone().into()],
            ),
            (
                &[2, 3],
                "runtime.disco.recv_from_prev_group",
                &[got.clone().into()],
            ),
        ],
    );
    s.sync_all().unwrap();
    let moved = gathered(&s, &got, len);
    assert_eq!(
        moved[2 * len..],
        [part_of(0), part_of(1)].concat(),
        "to the next group"
    );
    send_and_receive(&s, 3, 0, &part, &got);
    s.sync_all().unwrap();
    assert_eq!(
        gathered(&s, &got, len)[..len],
        part_of(3),
        "from worker 3 to worker 0"
    );
    // Within a node (on nodes, these stay in its shared memory): 1 to 0, and 2 to 3.
    builtin_each(
        &s,
        &[
            (
                &[1],
                "runtime.disco.send_to_worker",
                &[part.clone().into(), Any::Int(0)],
            ),
            (
                &[0],
                "runtime.disco.recv_from_worker",
                &[got.clone().into(), Any::Int(1)],
            ),
            (
                &[2],
                "runtime.disco.send_to_worker",
                &[part.clone().into(), Any::Int(3)],
            ),
            (
                &[3],
                "runtime.disco.recv_from_worker",
                &[got.clone().into(), Any::Int(2)],
            ),
        ],
    );
    s.sync_all().unwrap();
    let moved = gathered(&s, &got, len);
    assert_eq!(moved[..len], part_of(1), "from worker 1 to worker 0");
    assert_eq!(moved[3 * len..], part_of(2), "from worker 2 to worker 3");
    builtin_on(&s, Target::All, "runtime.disco.barrier", &[Any::Bool(true)]).unwrap();
}
each_kind_and_nodes!(groups_and_transfers_meet_on_every_kind);

fn workers_that_call_different_collectives_fail_together_and_go_on(kind: Kind) {
    let options = SessionOptions {
        timeout: Some(Duration::from_secs(60)),
        ..SessionOptions::default()
    };
    let s = start(kind, 2, 1, options).unwrap();
    s.init_ccl("cpu", &[]).unwrap();
    let part = remote_f32(&s, 4, true);
    let all = remote_f32(&s, 8, true);
    let sum = Shape::new(&[0]);
    let args = [
        part.clone().into(),
        sum.into(),
        Any::Bool(false),
        part.clone().into(),
    ];
    let gather = [part.clone().into(), Any::Bool(false), all.clone().into()];
    builtin_each(
        &s,
        &[
            (&[0], "runtime.disco.allreduce", &args),
            (&[1], "runtime.disco.allgather", &gather),
        ],
    );
    let err = s.sync_all().unwrap_err();
    assert_error(
        Err(err),
        ErrorKind::Worker,
        &["worker 1 called `allgather` while worker 0 called `allreduce`"],
    );
    // Both failed alike: the communicator still works.
    builtin_on(&s, Target::All, "runtime.disco.allgather", &gather).unwrap();
}
each_kind_and_nodes!(workers_that_call_different_collectives_fail_together_and_go_on);

fn a_gather_and_an_allgather_called_together_fail_on_every_worker(kind: Kind) {
    let options = SessionOptions {
        timeout: Some(Duration::from_secs(60)),
        ..SessionOptions::default()
    };
    // On nodes, workers 0 and 1 are node 0, and meet there before their node meets the other.
    let s = start(kind, 4, 1, options).unwrap();
    s.init_ccl("cpu", &[]).unwrap();
    let part = remote_f32(&s, 4, true);
    let all = remote_f32(&s, 16, true);
    let args = [part.clone().into(), Any::Bool(false), all.clone().into()];
    builtin_each(
        &s,
        &[
            (&[0, 2, 3], "runtime.disco.gather_to_worker0", &args),
            (&[1], "runtime.disco.allgather", &args),
        ],
    );
    let mismatch = "worker 1 called `allgather` while worker 0 called `gather_to_worker0`";
    for w in 0..4 {
        let err = s.sync_worker(w).expect_err("every worker fails");
        assert_eq!(err.kind, ErrorKind::Worker, "{err}");
        // On nodes, node 1 learns that node 0's first worker could not take part.
        let why = err.message.contains(mismatch)
            || (w >= 2 && err.message.contains("worker 0 could not take part"));
        assert!(why, "worker {w}: {err}");
    }
    // Every worker failed alike: the communicator still works.
    builtin_on(&s, Target::All, "runtime.disco.allgather", &args).unwrap();
}
each_kind_and_nodes!(a_gather_and_an_allgather_called_together_fail_on_every_worker);

/// A transfer whose two ends hold different tensors fails on the receiving worker naming both
/// (on nodes, with one worker each, between nodes), and a matching one goes through afterwards.
fn a_transfer_whose_ends_differ_fails_naming_both_and_the_next_goes_through(kind: Kind) {
    let options = SessionOptions {
        timeout: Some(Duration::from_secs(60)),
        ..SessionOptions::default()
    };
    let s = start(kind, 2, 1, options).unwrap();
    s.init_ccl("cpu", &[]).unwrap();
    let empty = s.get_global_func("runtime.disco.empty").unwrap();
    let tensor =
        |shape: &[i64]| remote_call(&s, &empty, &[Shape::new(shape).into(), Any::DataType(F32)]);
    let (four, eight, square) = (tensor(&[4]), tensor(&[8]), tensor(&[2, 2]));
    for (into, described) in [(&eight, "[8] float32"), (&square, "[2, 2] float32")] {
        send_and_receive(&s, 1, 0, &four, into);
        let err = s.sync_worker(0).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Worker, "{err}");
        for part in [
            "worker 1 sent [4] float32",
            &format!("worker 0 receives {described}"),
        ] {
            assert!(err.message.contains(part), "{part}: {err}");
        }
        let _ = s.sync_all();
    }
    let mut data = [1.0f32, 2.0, 3.0, 4.0];
    copy_f32(&s, &mut data, &four, CopyDirection::ToWorker);
    send_and_receive(&s, 0, 1, &four, &four);
    s.sync_all().unwrap();
    assert_eq!(
        gathered(&s, &four, 4)[4..],
        data,
        "from worker 0 to worker 1"
    );
}
each_kind_and_nodes!(a_transfer_whose_ends_differ_fails_naming_both_and_the_next_goes_through);

#[test]
fn the_built_ins_of_gloos_rendezvous_refuse_bad_input_naming_it() {
    let s = start(Kind::Threads, 2, 1, SessionOptions::default()).unwrap();
    let open = "runtime.disco.gloo.open_per_worker";
    let connect = "runtime.disco.gloo.connect_per_worker";
    let int = Any::Int;
    let table: [(&str, Vec<Any>, &[&str]); 7] = [
        (
            open,
            vec![int(1), int(0), int(-1), int(0), int(-1)],
            &["TypeError", "argument 0 (hosts)"],
        ),
        (
            open,
            vec!["a,b,c".into(), int(0), int(-1), int(0), int(-1)],
            &["ValueError", "3 nodes cannot share 2 workers"],
        ),
        (open, vec!["a".into()], &["TypeError", "takes 5 arguments"]),
        (
            open,
            vec!["a".into(), int(0), int(0), int(0), int(99)],
            &["ValueError", "no communicator is staged under 99"],
        ),
        // A timeout crosses as milliseconds with 0 for none: a negative one means nothing.
        (
            open,
            vec!["a".into(), int(-5), int(-1), int(0), int(-1)],
            &["ValueError", "argument 1 (timeout_ms) is negative (-5)"],
        ),
        (
            connect,
            vec![Any::Bytes(discovm::object::Bytes::new(&[1, 0]))],
            &[
                "RuntimeError",
                "runs after runtime.disco.gloo.open_per_worker",
            ],
        ),
        (connect, vec![int(3)], &["TypeError", "argument 0 (table)"]),
    ];
    for (name, args, parts) in table {
        let err = builtin_on(&s, Target::All, name, &args).unwrap_err();
        assert_error(Err(err), ErrorKind::Worker, parts);
    }
}
