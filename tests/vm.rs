//! The stream VM from Rust: ordering within and across streams, soft sync, small-memory
//! access, failure poisoning, stream teardown, lifetimes and bad inputs.

#[path = "support/errors.rs"]
mod errors;

use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use discovm::abi::{
    DLDataType, DLDevice, DLManagedTensorVersioned, DLPackVersion, DLTensor, KDL_CUDA,
    KDL_CUDA_HOST, KDL_FLOAT, KDL_INT,
};
use discovm::object::{Any, Error, ErrorKind, Function, Tensor};
use discovm::vm::{self, Operand, Placement, Stream};
use errors::assert_error;

const I64: DLDataType = DLDataType::new(KDL_INT, 64, 1);
const F32: DLDataType = DLDataType::new(KDL_FLOAT, 32, 1);
const CPU: DLDevice = DLDevice::cpu();
const PLACEMENTS: [Placement; 2] = [Placement::SharedPerDevice, Placement::OwnThread];

fn tensor(dims: &[i64], dtype: DLDataType) -> Tensor {
    Tensor::empty(dims, dtype, CPU).unwrap()
}

fn read_i64(t: &Tensor) -> i64 {
    let mut out = [0u8; 8];
    vm::read(t, &mut out).unwrap();
    i64::from_ne_bytes(out)
}

fn write_i64s(t: &Tensor, values: &[i64]) {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
    vm::write(t, &bytes).unwrap();
}

/// A callback that adds 1 to the first int64 of its first argument (a read-modify-write, so
/// two of them racing would lose an increment).
fn increment() -> Function {
    Function::from_closure(|args| {
        let t = args[0].as_tensor()?;
        let p = t.data_ptr().cast::<i64>();
        // SAFETY: the tensor holds at least one int64 and the VM orders its writers.
        unsafe { p.write(p.read() + 1) };
        Ok(Any::None)
    })
}

/// Asserts that the next sync of `stream` reports a callback skipped for a poisoned input.
fn assert_skipped_a_callback(stream: &Stream) {
    let err = stream.sync().unwrap_err();
    assert!(err.message.starts_with("skipped a callback"), "{err:?}");
}

fn failing(kind: &str, message: &'static str) -> Function {
    let kind = ErrorKind::from_name(kind);
    Function::from_closure(move |_| Err(Error::new(kind.clone(), message)))
}

/// A callback that holds its stream until `gate` opens (bounded: it gives up after 10 s).
fn gate_callback(gate: Arc<AtomicBool>) -> Function {
    Function::from_closure(move |_| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !gate.load(Ordering::Acquire) {
            if Instant::now() > deadline {
                return Err(Error::runtime("the gate never opened"));
            }
            std::thread::yield_now();
        }
        Ok(Any::None)
    })
}

#[test]
fn two_streams_ping_ponging_writes_end_exact() {
    for placement in PLACEMENTS {
        let t = tensor(&[1], I64);
        let a = Stream::with_placement(CPU, placement).unwrap();
        let b = Stream::with_placement(CPU, placement).unwrap();
        let inc = increment();
        for _ in 0..10_000 {
            a.call(&inc, vec![Operand::Write(t.clone())]).unwrap();
            b.call(&inc, vec![Operand::Write(t.clone())]).unwrap();
        }
        assert_eq!(read_i64(&t), 20_000, "{placement:?}");
        a.sync().unwrap();
        b.sync().unwrap();
    }
}

#[test]
fn two_host_threads_writing_through_two_streams_lose_nothing() {
    for placement in PLACEMENTS {
        let t = tensor(&[1], I64);
        std::thread::scope(|scope| {
            for _ in 0..2 {
                let t = t.clone();
                scope.spawn(move || {
                    let stream = Stream::with_placement(CPU, placement).unwrap();
                    let inc = increment();
                    for _ in 0..10_000 {
                        stream.call(&inc, vec![Operand::Write(t.clone())]).unwrap();
                    }
                    stream.sync().unwrap();
                });
            }
        });
        assert_eq!(read_i64(&t), 20_000, "{placement:?}");
    }
}

#[test]
fn synchronous_writes_interleave_with_stream_writes_in_order() {
    for placement in PLACEMENTS {
        let t = tensor(&[1], I64);
        let a = Stream::with_placement(CPU, placement).unwrap();
        let inc = increment();
        for round in 0..2_000i64 {
            a.call(&inc, vec![Operand::Write(t.clone())]).unwrap();
            assert_eq!(read_i64(&t), 2 * round + 1);
            write_i64s(&t, &[2 * round + 2]);
        }
        assert_eq!(read_i64(&t), 4_000);
    }
}

#[test]
fn a_read_after_an_async_copy_sees_the_copied_bytes() {
    for placement in PLACEMENTS {
        let src = tensor(&[256], I64);
        let values: Vec<i64> = (0..256).map(|i| i * 7 - 3).collect();
        write_i64s(&src, &values);
        let a = Stream::with_placement(CPU, placement).unwrap();
        let b = Stream::with_placement(CPU, placement).unwrap();
        let mid = tensor(&[256], I64);
        let dst = tensor(&[256], I64);
        a.copy(&mid, &src).unwrap();
        b.copy(&dst, &mid).unwrap(); // soft sync: b waits for a's copy into `mid`
        let mut out = vec![0u8; 256 * 8];
        vm::read(&dst, &mut out).unwrap();
        let got: Vec<i64> = out
            .chunks(8)
            .map(|c| i64::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got, values, "{placement:?}");
        // A partial read gives the first bytes.
        let mut first = [0u8; 8];
        vm::read(&dst, &mut first).unwrap();
        assert_eq!(i64::from_ne_bytes(first), -3);
    }
}

#[test]
fn a_write_waits_for_reads_on_other_streams() {
    // WAR across streams: b overwrites `src` only after a's copy out of it has read it.
    let gate = Arc::new(AtomicBool::new(false));
    let a = Stream::with_placement(CPU, Placement::OwnThread).unwrap();
    let b = Stream::with_placement(CPU, Placement::OwnThread).unwrap();
    let src = tensor(&[4], I64);
    let dst = tensor(&[4], I64);
    let zeros = tensor(&[4], I64);
    write_i64s(&src, &[1, 2, 3, 4]);
    a.call(&gate_callback(gate.clone()), vec![]).unwrap();
    a.copy(&dst, &src).unwrap();
    b.copy(&src, &zeros).unwrap();
    gate.store(true, Ordering::Release);
    a.sync().unwrap();
    b.sync().unwrap();
    assert_eq!(read_i64(&dst), 1);
    assert_eq!(read_i64(&src), 0);
}

#[test]
fn copies_to_and_from_host_memory_are_ordered() {
    let stream = Stream::new(CPU).unwrap();
    let t = tensor(&[3], I64);
    let input = [5i64, 6, 7];
    let mut output = [0i64; 3];
    // SAFETY: both arrays outlive the sync below and nobody else touches them.
    unsafe {
        stream
            .copy_from_host(&t, input.as_ptr().cast(), 24)
            .unwrap();
        stream
            .copy_to_host(&t, output.as_mut_ptr().cast(), 16)
            .unwrap();
    }
    stream.sync().unwrap();
    assert_eq!(output, [5, 6, 0]);
    // SAFETY: not reached: the size check fails first.
    let err = unsafe { stream.copy_to_host(&t, output.as_mut_ptr().cast(), 25) }.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Value);
    assert_eq!(
        err.message,
        "`nbytes`: 25 bytes cannot be read from a tensor of 24 bytes"
    );
}

#[test]
fn stream_wait_orders_without_shared_tensors() {
    let a = Stream::with_placement(CPU, Placement::OwnThread).unwrap();
    let b = Stream::with_placement(CPU, Placement::OwnThread).unwrap();
    let gate = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(AtomicUsize::new(0));
    a.call(&gate_callback(gate.clone()), vec![]).unwrap();
    let flag = seen.clone();
    let check_gate = gate.clone();
    let after = Function::from_closure(move |_| {
        if !check_gate.load(Ordering::Acquire) {
            return Err(Error::runtime("ran before the stream it waits for"));
        }
        flag.fetch_add(1, Ordering::AcqRel);
        Ok(Any::None)
    });
    b.wait_for(&a).unwrap();
    b.call(&after, vec![]).unwrap();
    gate.store(true, Ordering::Release);
    b.sync().unwrap();
    a.sync().unwrap();
    assert_eq!(seen.load(Ordering::Acquire), 1);
}

#[test]
fn a_failing_callback_poisons_only_what_depends_on_it() {
    let a = Stream::new(CPU).unwrap();
    let b = Stream::new(CPU).unwrap();
    let bad = tensor(&[1], I64);
    let good = tensor(&[1], I64);
    let from_bad = tensor(&[1], I64);
    let from_good = tensor(&[1], I64);
    write_i64s(&good, &[41]);
    a.call(
        &failing("ValueError", "the kernel rejected its input"),
        vec![Operand::Write(bad.clone()), Operand::Value(Any::from(3i64))],
    )
    .unwrap();
    a.call(&increment(), vec![Operand::Write(good.clone())])
        .unwrap();
    b.copy(&from_bad, &bad).unwrap();
    b.copy(&from_good, &good).unwrap();

    // Independent work went on.
    assert_eq!(read_i64(&from_good), 42);
    // The failure is reported by the next sync of its stream, once.
    let err = a.sync().unwrap_err();
    assert_eq!(err.kind, ErrorKind::Value);
    assert_eq!(err.message, "the kernel rejected its input");
    a.sync().unwrap();
    // The dependent copy on the other stream skipped, and its stream says so.
    let err = b.sync().unwrap_err();
    assert_error(&err, ErrorKind::Value, "rejected its input");
    assert!(err.message.starts_with("skipped a copy"), "{err:?}");
    // Reading a poisoned tensor fails with the cause; so does reading what was copied from it.
    for t in [&bad, &from_bad] {
        let mut out = [0u8; 8];
        let err = vm::read(t, &mut out).unwrap_err();
        assert_error(&err, ErrorKind::Value, "rejected its input");
    }
    // A callback that reads the poisoned tensor skips, and poisons what it writes.
    let out = tensor(&[1], I64);
    a.call(
        &increment(),
        vec![Operand::Write(out.clone()), Operand::Read(bad.clone())],
    )
    .unwrap();
    assert_skipped_a_callback(&a);
    // Overwriting the whole tensor heals it.
    write_i64s(&bad, &[9]);
    assert_eq!(read_i64(&bad), 9);
    b.copy(&from_bad, &bad).unwrap();
    assert_eq!(read_i64(&from_bad), 9);
    b.sync().unwrap();
}

/// A tensor a callback overwrites whole (`Operand::Overwrite`, as a collective's output): a
/// failure poisons it as a write's does, but a later callback that overwrites it runs, and heals
/// it; one that writes it (and may read it) skips.
#[test]
fn a_callback_that_overwrites_a_poisoned_tensor_runs_and_heals_it() {
    let a = Stream::new(CPU).unwrap();
    let out = tensor(&[1], I64);
    let seven = Function::from_closure(|args| {
        let t = args[0].as_tensor()?;
        // SAFETY: the tensor holds one int64 and the VM orders its writers.
        unsafe { t.data_ptr().cast::<i64>().write(7) };
        Ok(Any::None)
    });
    a.call(
        &failing("RuntimeError", "the collective was aborted"),
        vec![Operand::Overwrite(out.clone())],
    )
    .unwrap();
    assert_error(
        &a.sync().unwrap_err(),
        ErrorKind::Runtime,
        "the collective was aborted",
    );
    let mut bytes = [0u8; 8];
    assert_error(
        &vm::read(&out, &mut bytes).unwrap_err(),
        ErrorKind::Runtime,
        "the collective was aborted",
    );
    // A write that may read it skips, and it stays poisoned.
    a.call(&increment(), vec![Operand::Write(out.clone())])
        .unwrap();
    assert_skipped_a_callback(&a);
    // Overwritten whole, it is read again.
    a.call(&seven, vec![Operand::Overwrite(out.clone())])
        .unwrap();
    a.sync().unwrap();
    assert_eq!(read_i64(&out), 7);
}

/// Device work (a collective's, whose peers wait for it) runs even when an input was left
/// unwritten by an earlier failure, and what it writes carries that failure.
#[test]
fn device_work_runs_on_an_unwritten_input_and_its_output_carries_the_failure() {
    let a = Stream::new(CPU).unwrap();
    let (bad, out) = (tensor(&[1], I64), tensor(&[1], I64));
    a.call(
        &failing("RuntimeError", "the producer failed"),
        vec![Operand::Write(bad.clone())],
    )
    .unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    a.launch(
        vec![Operand::Read(bad.clone()), Operand::Overwrite(out.clone())],
        Box::new(move |_| {
            flag.store(true, Ordering::Release);
            Ok(())
        }),
    )
    .unwrap();
    let err = a.sync().unwrap_err();
    assert_error(&err, ErrorKind::Runtime, "the producer failed");
    assert!(ran.load(Ordering::Acquire), "the device work ran");
    let mut bytes = [0u8; 8];
    assert_error(
        &vm::read(&out, &mut bytes).unwrap_err(),
        ErrorKind::Runtime,
        "device work read an input that was not written because an earlier instruction \
         failed: the producer failed",
    );
    assert_eq!(
        vm::poisoned_input(&[Operand::Read(bad.clone())]).map(|e| e.kind),
        Some(ErrorKind::Runtime)
    );
    assert!(
        vm::poisoned_input(&[Operand::Overwrite(bad)]).is_none(),
        "a tensor written whole is not read"
    );
}

#[test]
fn several_failures_are_counted_in_one_report() {
    let a = Stream::new(CPU).unwrap();
    for _ in 0..3 {
        a.call(&failing("RuntimeError", "boom"), vec![]).unwrap();
    }
    let err = a.sync().unwrap_err();
    assert_eq!(err.kind, ErrorKind::Runtime);
    assert_eq!(err.message, "boom (and 2 more failures on this stream)");
    a.sync().unwrap();
}

/// A stream is settled (a sync would neither wait nor report) once its work ran and no failure
/// waits for the next sync.
#[test]
fn a_stream_is_settled_when_its_work_ran_and_no_failure_waits() {
    let inline = Stream::with_placement(CPU, Placement::Inline).unwrap();
    assert!(inline.is_settled());
    inline
        .call(&increment(), vec![Operand::Write(tensor(&[1], I64))])
        .unwrap();
    assert!(inline.is_settled());
    inline
        .call(&failing("RuntimeError", "boom"), vec![])
        .unwrap();
    assert!(!inline.is_settled(), "a failure waits for the next sync");
    inline.sync().unwrap_err();
    assert!(inline.is_settled());

    let gate = Arc::new(AtomicBool::new(false));
    let queued = Stream::new(CPU).unwrap();
    queued.call(&gate_callback(gate.clone()), vec![]).unwrap();
    assert!(!queued.is_settled(), "its work has not run");
    gate.store(true, Ordering::SeqCst);
    queued.sync().unwrap();
    assert!(queued.is_settled());
}

#[test]
fn a_checked_sync_of_a_host_stream_waits_as_a_sync_and_never_calls_its_check() {
    // Host work is finished once it ran: nothing to poll, so the check (which a worker with
    // NCCL communicators passes) costs a host stream nothing.
    let a = Stream::new(CPU).unwrap();
    let t = tensor(&[1], I64);
    for _ in 0..5 {
        a.call(&increment(), vec![Operand::Write(t.clone())])
            .unwrap();
    }
    a.call(&failing("RuntimeError", "boom"), vec![]).unwrap();
    let mut checks = 0;
    let err = a
        .sync_checked(Some(&mut || {
            checks += 1;
            Err(Error::runtime("the check gave up"))
        }))
        .unwrap_err();
    assert_eq!(
        (err.kind, err.message.as_str()),
        (ErrorKind::Runtime, "boom")
    );
    assert_eq!(checks, 0);
    assert_eq!(read_i64(&t), 5);
    a.sync_checked(None).unwrap();
}

#[test]
fn dropping_a_stream_finishes_its_pending_work() {
    for placement in PLACEMENTS {
        let gate = Arc::new(AtomicBool::new(false));
        let t = tensor(&[1], I64);
        let stream = Stream::with_placement(CPU, placement).unwrap();
        stream.call(&gate_callback(gate.clone()), vec![]).unwrap();
        let inc = increment();
        for _ in 0..1_000 {
            stream.call(&inc, vec![Operand::Write(t.clone())]).unwrap();
        }
        let opener = {
            let gate = gate.clone();
            std::thread::spawn(move || gate.store(true, Ordering::Release))
        };
        drop(stream);
        opener.join().unwrap();
        // The drop returned after the work: its result is there without any other wait.
        // SAFETY: no instruction uses the tensor any more.
        assert_eq!(unsafe { t.data_ptr().cast::<i64>().read() }, 1_000);
    }
}

static DELETED: AtomicUsize = AtomicUsize::new(0);

#[repr(C)]
struct Managed {
    managed: DLManagedTensorVersioned,
    shape: [i64; 1],
    strides: [i64; 1],
    data: Vec<i64>,
}

unsafe extern "C" fn count_delete(managed: *mut DLManagedTensorVersioned) {
    DELETED.fetch_add(1, Ordering::AcqRel);
    // SAFETY: made by Box in `managed_tensor`.
    drop(unsafe { Box::from_raw(managed.cast::<Managed>()) });
}

/// A DLPack tensor of `n` int64s counting 0, 1, ..., with the given stride.
fn managed_tensor(n: usize, stride: i64) -> NonNull<DLManagedTensorVersioned> {
    let mut boxed = Box::new(Managed {
        managed: DLManagedTensorVersioned {
            version: DLPackVersion { major: 1, minor: 3 },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(count_delete),
            flags: 0,
            dl_tensor: DLTensor {
                data: std::ptr::null_mut(),
                device: CPU,
                ndim: 1,
                dtype: I64,
                shape: std::ptr::null_mut(),
                strides: std::ptr::null_mut(),
                byte_offset: 0,
            },
        },
        shape: [n as i64],
        strides: [stride],
        data: (0..n as i64 * stride).collect(),
    });
    boxed.managed.dl_tensor.data = boxed.data.as_mut_ptr().cast();
    boxed.managed.dl_tensor.shape = boxed.shape.as_mut_ptr();
    boxed.managed.dl_tensor.strides = boxed.strides.as_mut_ptr();
    NonNull::from(Box::leak(boxed)).cast()
}

#[test]
fn a_released_tensor_lives_until_its_instructions_finish() {
    let gate = Arc::new(AtomicBool::new(false));
    let stream = Stream::new(CPU).unwrap();
    let dst = tensor(&[8], I64);
    // SAFETY: a valid managed tensor whose deleter may run on any thread.
    let src = unsafe { Tensor::from_dlpack(managed_tensor(8, 1)) }.unwrap();
    let before = DELETED.load(Ordering::Acquire);
    stream.call(&gate_callback(gate.clone()), vec![]).unwrap();
    stream.copy(&dst, &src).unwrap();
    drop(src);
    assert_eq!(
        DELETED.load(Ordering::Acquire),
        before,
        "deleted while in use"
    );
    gate.store(true, Ordering::Release);
    stream.sync().unwrap();
    assert_eq!(DELETED.load(Ordering::Acquire), before + 1);
    let mut out = [0u8; 64];
    vm::read(&dst, &mut out).unwrap();
    assert_eq!(i64::from_ne_bytes(out[56..].try_into().unwrap()), 7);
}

#[test]
fn bad_inputs_give_clear_errors() {
    let stream = Stream::new(CPU).unwrap();
    let a = tensor(&[2, 3], F32);
    // Sizes out of range.
    let mut big = [0u8; 25];
    let err = vm::read(&a, &mut big).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Value);
    assert_eq!(
        err.message,
        "`dst`: 25 bytes cannot be read from a tensor of 24 bytes"
    );
    let err = vm::write(&a, &big).unwrap_err();
    assert_eq!(
        err.message,
        "`src`: 25 bytes cannot be written to a tensor of 24 bytes"
    );
    // Dtype, shape and size mismatches.
    let cases = [
        (
            tensor(&[2, 3], I64),
            "a [2, 3] float32 tensor (24 bytes), into `dst`, a [2, 3] int64",
        ),
        (
            tensor(&[3, 2], F32),
            "a [2, 3] float32 tensor (24 bytes), into `dst`, a [3, 2] float32",
        ),
        (
            tensor(&[6], F32),
            "into `dst`, a [6] float32 tensor (24 bytes)",
        ),
    ];
    for (dst, text) in &cases {
        let err = stream.copy(dst, &a).unwrap_err();
        assert_error(&err, ErrorKind::Value, text);
        assert!(err.message.ends_with("shapes, dtypes and sizes must match"));
    }
    // Strided views.
    // SAFETY: a valid managed tensor.
    let strided = unsafe { Tensor::from_dlpack(managed_tensor(4, 2)) }.unwrap();
    let mut out = [0u8; 8];
    let err = vm::read(&strided, &mut out).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Value);
    assert_eq!(
        err.message,
        "`t` is a strided view (shape [4], strides [2]); only compact row-major tensors can \
         be copied or accessed"
    );
    let compact = tensor(&[4], I64);
    let err = stream.copy(&compact, &strided).unwrap_err();
    assert!(
        err.message.starts_with("`src` is a strided view"),
        "{}",
        err.message
    );
    // Read-only DLPack tensors can be read and copied from, never written.
    let managed = managed_tensor(4, 1);
    // SAFETY: a valid managed tensor we still own; DLPack's read-only flag is bit 0.
    let read_only = unsafe {
        (*managed.as_ptr()).flags = 1;
        Tensor::from_dlpack(managed)
    }
    .unwrap();
    let mut out = [0u8; 8];
    vm::read(&read_only, &mut out).unwrap();
    stream.copy(&compact, &read_only).unwrap();
    let message = "`t` is read-only (its DLPack producer set the read-only flag)";
    assert_eq!(vm::write(&read_only, &out).unwrap_err().message, message);
    let err = stream.copy(&read_only, &compact).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Value);
    assert!(
        err.message.starts_with("`dst` is read-only"),
        "{}",
        err.message
    );
    let err = stream
        .call(&increment(), vec![Operand::Write(read_only.clone())])
        .unwrap_err();
    assert!(
        err.message.starts_with("`args[0]` is read-only"),
        "{}",
        err.message
    );
    // Overflowing shapes never become tensors.
    let err = Tensor::empty(&[i64::MAX, 2], F32, CPU).unwrap_err();
    assert_error(&err, ErrorKind::Value, "too large");
    // Devices without a backend (no machine has GPU 1000).
    let gpu = DLDevice {
        device_type: 2,
        device_id: 1000,
    };
    assert_eq!(
        Stream::new(gpu).err().unwrap().kind,
        ErrorKind::DeviceUnavailable
    );
    stream.sync().unwrap();
}

/// A DLPack tensor of `n` int64s (0, 1, ...) in host memory that says it lives on `device`.
fn labelled(n: usize, device: DLDevice) -> Tensor {
    let managed = managed_tensor(n, 1);
    // SAFETY: a valid managed tensor we still own; only its device label changes.
    unsafe {
        (*managed.as_ptr()).dl_tensor.device = device;
        Tensor::from_dlpack(managed)
    }
    .unwrap()
}

#[test]
fn host_streams_reach_page_locked_host_memory_but_not_gpus() {
    let stream = Stream::new(CPU).unwrap();
    let pinned = labelled(
        4,
        DLDevice {
            device_type: KDL_CUDA_HOST,
            device_id: 0,
        },
    );
    let dst = tensor(&[4], I64);
    stream.copy(&dst, &pinned).unwrap();
    stream.sync().unwrap();
    let mut out = [0u8; 32];
    vm::read(&dst, &mut out).unwrap();
    assert_eq!(i64::from_ne_bytes(out[24..].try_into().unwrap()), 3);
    // Page-locked memory is host memory: small accesses run on the calling thread.
    write_i64s(&pinned, &[42]);
    assert_eq!(read_i64(&pinned), 42);
    stream.copy(&pinned, &dst).unwrap();
    stream.sync().unwrap();
    assert_eq!(read_i64(&pinned), 0);

    let gpu = labelled(
        4,
        DLDevice {
            device_type: KDL_CUDA,
            device_id: 0,
        },
    );
    let err = stream.copy(&dst, &gpu).unwrap_err();
    assert_eq!(err.kind, ErrorKind::DeviceUnavailable);
    assert_eq!(
        err.message,
        "`src` is on device (2, 0), which a stream on (1, 0) cannot reach"
    );
}

#[test]
fn device_work_runs_in_stream_order_and_fails_like_a_callback() {
    for placement in PLACEMENTS {
        let stream = Stream::with_placement(CPU, placement).unwrap();
        let t = tensor(&[1], I64);
        write_i64s(&t, &[5]);
        stream
            .call(&increment(), vec![Operand::Write(t.clone())])
            .unwrap();
        let seen = Arc::new(AtomicUsize::new(0));
        let (seen2, t2) = (seen.clone(), t.clone());
        stream
            .launch(
                vec![Operand::Read(t.clone())],
                Box::new(move |dev| {
                    assert!(dev.can_reach(CPU) && dev.completes_on_host());
                    // SAFETY: the tensor holds one int64 and the VM orders this after its writer.
                    let value = unsafe { t2.data_ptr().cast::<i64>().read() };
                    seen2.store(value as usize, Ordering::Release);
                    Ok(())
                }),
            )
            .unwrap();
        let out = tensor(&[1], I64);
        stream
            .launch(
                vec![Operand::Read(t.clone()), Operand::Write(out.clone())],
                Box::new(|_| Err(Error::runtime("the device refused"))),
            )
            .unwrap();
        let err = stream.sync().unwrap_err();
        assert_eq!(err.message, "the device refused");
        assert_eq!(seen.load(Ordering::Acquire), 6, "ran after the increment");
        let mut buf = [0u8; 8];
        let err = vm::read(&out, &mut buf).unwrap_err();
        assert!(err.message.contains("the device refused"), "{err}");
    }
}

#[test]
fn zero_sized_tensors_work() {
    let stream = Stream::new(CPU).unwrap();
    let a = tensor(&[0, 3], F32);
    let b = tensor(&[0, 3], F32);
    stream.copy(&b, &a).unwrap();
    vm::read(&b, &mut []).unwrap();
    vm::write(&b, &[]).unwrap();
    let mut one = [0u8; 1];
    let err = vm::read(&b, &mut one).unwrap_err();
    assert_eq!(
        err.message,
        "`dst`: 1 bytes cannot be read from a tensor of 0 bytes"
    );
    stream.sync().unwrap();
}

#[test]
fn waiting_from_a_callback_on_the_same_executor_fails_instead_of_hanging() {
    let stream = Stream::new(CPU).unwrap();
    let t = tensor(&[1], I64);
    let t2 = t.clone();
    let reads_inside = Function::from_closure(move |_| {
        let mut out = [0u8; 8];
        vm::read(&t2, &mut out).map(|()| Any::None)
    });
    stream
        .call(&reads_inside, vec![Operand::Write(t.clone())])
        .unwrap();
    let err = stream.sync().unwrap_err();
    assert_error(
        &err,
        ErrorKind::Runtime,
        "would wait for the thread it runs on",
    );
}

#[test]
fn a_callback_may_queue_work_on_its_own_stream() {
    let stream = Arc::new(Stream::new(CPU).unwrap());
    let t = tensor(&[1], I64);
    let inner = Arc::downgrade(&stream);
    let t2 = t.clone();
    let enqueue = Function::from_closure(move |_| {
        let stream = inner
            .upgrade()
            .ok_or_else(|| Error::runtime("stream gone"))?;
        for _ in 0..10 {
            stream.call(&increment(), vec![Operand::Write(t2.clone())])?;
        }
        Ok(Any::None)
    });
    stream.call(&enqueue, vec![]).unwrap();
    stream.sync().unwrap();
    stream.sync().unwrap();
    assert_eq!(read_i64(&t), 10);
}

#[test]
fn an_inline_stream_runs_each_instruction_before_the_submission_returns() {
    let inline = Stream::with_placement(CPU, Placement::Inline).unwrap();
    let t = tensor(&[1], I64);
    for _ in 0..1000 {
        inline
            .call(&increment(), vec![Operand::Write(t.clone())])
            .unwrap();
    }
    // No sync: the work is already done, on this thread.
    // SAFETY: the tensor holds one int64 and nothing else uses it now.
    assert_eq!(unsafe { t.data_ptr().cast::<i64>().read() }, 1000);
    inline.sync().unwrap();
}

#[test]
fn an_inline_stream_is_ordered_after_other_streams() {
    let inline = Stream::with_placement(CPU, Placement::Inline).unwrap();
    let threaded = Stream::new(CPU).unwrap();
    let gate = Arc::new(AtomicBool::new(false));
    let t = tensor(&[1], I64);
    threaded
        .call(
            &gate_callback(gate.clone()),
            vec![Operand::Write(t.clone())],
        )
        .unwrap();
    threaded
        .call(&increment(), vec![Operand::Write(t.clone())])
        .unwrap();
    let opener = {
        let gate = gate.clone();
        std::thread::spawn(move || gate.store(true, Ordering::Release))
    };
    // Waits on this thread for the threaded stream's two writes, then adds its own.
    inline
        .call(&increment(), vec![Operand::Write(t.clone())])
        .unwrap();
    opener.join().unwrap();
    assert_eq!(read_i64(&t), 2);
    // And a threaded stream waits for what the inline stream wrote.
    threaded
        .call(&increment(), vec![Operand::Write(t.clone())])
        .unwrap();
    threaded.sync().unwrap();
    assert_eq!(read_i64(&t), 3);
}

#[test]
fn an_inline_stream_takes_work_only_from_its_thread_and_is_read_from_any() {
    let inline = Arc::new(Stream::with_placement(CPU, Placement::Inline).unwrap());
    let t = tensor(&[1], I64);
    write_i64s(&t, &[41]);
    inline
        .call(&increment(), vec![Operand::Write(t.clone())])
        .unwrap();
    let (other, t2) = (inline.clone(), t.clone());
    let from_another_thread = std::thread::spawn(move || {
        let err = other
            .call(&increment(), vec![Operand::Write(t2.clone())])
            .unwrap_err();
        // A small read of what the inline stream wrote still works from here.
        (err, read_i64(&t2))
    });
    let (err, seen) = from_another_thread.join().unwrap();
    assert_eq!(err.kind, ErrorKind::Runtime);
    assert_eq!(
        err.message,
        "an inline stream takes work only from the thread that made it"
    );
    assert_eq!(seen, 42);
}

#[test]
fn a_callback_on_an_inline_stream_may_read_tensors_but_not_queue_on_its_stream() {
    let inline = Arc::new(Stream::with_placement(CPU, Placement::Inline).unwrap());
    let (t, other) = (tensor(&[1], I64), tensor(&[1], I64));
    write_i64s(&other, &[7]);
    let (weak, other2) = (Arc::downgrade(&inline), other.clone());
    let reads_then_queues = Function::from_closure(move |args| {
        let mut out = [0u8; 8];
        vm::read(&other2, &mut out)?;
        let t = args[0].as_tensor()?;
        // SAFETY: the tensor holds one int64 and this callback is its writer.
        unsafe { t.data_ptr().cast::<i64>().write(i64::from_ne_bytes(out)) };
        let stream = weak
            .upgrade()
            .ok_or_else(|| Error::runtime("stream gone"))?;
        stream.call(&increment(), vec![]).map(|()| Any::None)
    });
    inline
        .call(&reads_then_queues, vec![Operand::Write(t.clone())])
        .unwrap();
    let err = inline.sync().unwrap_err();
    assert_error(&err, ErrorKind::Runtime, "cannot queue work on it");
    assert!(
        vm::read(&t, &mut [0u8; 8]).is_err(),
        "the failed callback poisoned its output"
    );
    assert_eq!(read_i64(&other), 7);
}
