//! The loader and the communicators' state machine, the waits on non-blocking communicators
//! against the stand-in library `tests/support/nccl_stub.c`.

use std::ffi::{CStr, c_int, c_void};
use std::time::{Duration, Instant};

use super::comm::{CommHandle, Interrupts, RedOp, Region, joining, nccl_type};
use super::loader::{Config, NCCL_IN_PROGRESS, NCCL_SUCCESS, Nccl, NcclResult, RawComm, UniqueId};
use crate::abi::{DLDataType, KDL_BFLOAT, KDL_FLOAT, KDL_INT, KDL_UINT};
use crate::device::cuda;
use crate::device::dynlib::{self, symbol};
use crate::object::{Error, ErrorKind, Result, Tensor};

#[test]
fn unique_ids_are_128_bytes_and_round_trip() {
    assert_eq!(std::mem::size_of::<UniqueId>(), 128);
    let bytes: Vec<u8> = (0..128u8).map(|b| b.wrapping_mul(3)).collect();
    let id = UniqueId::from_bytes(&bytes).unwrap();
    assert_eq!(id.as_bytes().to_vec(), bytes);
    let err = UniqueId::from_bytes(&bytes[..127]).err().unwrap();
    assert_eq!(err.message, "an NCCL unique id has 128 bytes, not 127");
}

#[test]
fn element_types_and_reductions_follow_nccl_numbering() {
    let t = |code, bits| nccl_type(DLDataType::new(code, bits, 1)).unwrap();
    assert_eq!(
        [
            t(KDL_INT, 8),
            t(KDL_UINT, 8),
            t(KDL_INT, 32),
            t(KDL_UINT, 32),
            t(KDL_INT, 64),
            t(KDL_UINT, 64),
            t(KDL_FLOAT, 16),
            t(KDL_FLOAT, 32),
            t(KDL_FLOAT, 64),
            t(KDL_BFLOAT, 16),
        ],
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    );
    let err = nccl_type(DLDataType::new(KDL_FLOAT, 32, 4)).unwrap_err();
    assert_eq!(err.message, "NCCL has no element type for dtype float32x4");
    assert_eq!(
        [RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min, RedOp::Avg].map(|op| op as i32),
        [0, 1, 2, 3, 4]
    );
}

#[test]
fn a_missing_library_says_what_was_tried() {
    let why = Nccl::open("/nonexistent/libnccl.so.2").err().unwrap();
    assert!(why.contains("/nonexistent/libnccl.so.2"), "{why}");
    let why = Nccl::open("libc.so.6").err().unwrap();
    assert_eq!(why, "libc.so.6 lacks ncclGetVersion");
}

#[test]
fn without_a_gpu_or_nccl_the_message_names_what_is_missing() {
    let Err(error) = Nccl::with_gpu() else {
        return; // a machine with both
    };
    assert_eq!(error.kind, ErrorKind::DeviceUnavailable);
    if cuda::device_count() == 0 {
        assert!(error.message.starts_with("CUDA device 0: "), "{error}");
    }
    if Nccl::shared().is_err() {
        assert!(
            error.message.contains("NCCL could not be loaded (")
                && error.message.ends_with(
                    "install NCCL 2 or set DISCOVM_NCCL_LIBRARY to the path of libnccl.so.2"
                ),
            "{error}"
        );
    }
}

/// The stand-in library (`tests/support/nccl_stub.c`), compiled for this process, loaded,
/// and its handle for the stub-only entry points.
fn stub() -> (&'static Nccl, *mut c_void) {
    let library = std::env::temp_dir().join(format!(
        "discovm-nccl-stub-{}-{:?}.so",
        std::process::id(),
        std::thread::current().id()
    ));
    super::stub::build(&library);
    let path = library.to_str().expect("a UTF-8 path");
    let nccl: &'static Nccl = Box::leak(Box::new(Nccl::open(path).expect("the stub loads")));
    // Another reference to the library just loaded; it stays loaded for the process.
    let handle = dynlib::open(path).expect("the stub loads again");
    let _ = std::fs::remove_file(&library);
    (nccl, handle)
}

/// An entry point of the stand-in library `lib`, of C type `F`.
fn stub_fn<F: Copy>(lib: *mut c_void, name: &CStr) -> F {
    // SAFETY: a live handle; each use names a function of the stub with `F` its
    // declaration.
    unsafe { symbol(lib, name) }.unwrap_or_else(|| panic!("the stub has {name:?}"))
}

/// Reads a counter of stub communicator `comm` (`ncclStubPolls`, `ncclStubAborts`, ...).
fn count(lib: *mut c_void, name: &CStr, comm: RawComm) -> c_int {
    let read: unsafe extern "C" fn(RawComm) -> c_int = stub_fn(lib, name);
    // SAFETY: a stub communicator, alive until the test frees it.
    unsafe { read(comm) }
}

/// Sets how the stub's next operation goes (`ncclStubPlan`): in progress for `polls` polls
/// (-1: for ever), then `result`.
fn plan(lib: *mut c_void, polls: c_int, result: NcclResult) {
    let plan: unsafe extern "C" fn(c_int, c_int) = stub_fn(lib, c"ncclStubPlan");
    // SAFETY: sets two ints of this test's copy of the stub.
    unsafe { plan(polls, result) };
}

/// A new stub communicator (`ncclStubCommNew`), freed by [`free`].
fn stub_comm(lib: *mut c_void) -> RawComm {
    let new: unsafe extern "C" fn() -> RawComm = stub_fn(lib, c"ncclStubCommNew");
    // SAFETY: no arguments.
    unsafe { new() }
}

fn free(lib: *mut c_void, comm: RawComm) {
    let free: unsafe extern "C" fn(RawComm) = stub_fn(lib, c"ncclStubCommFree");
    // SAFETY: nothing uses the stub communicator any more.
    unsafe { free(comm) };
}

/// A check that counts its calls and gives up with `why` at call `at` (never if `None`).
fn give_up_at(at: Option<usize>, why: Error, calls: &mut usize) -> impl FnMut() -> Result<()> {
    move || {
        *calls += 1;
        match at {
            Some(at) if *calls >= at => Err(why.clone()),
            _ => Ok(()),
        }
    }
}

/// Joins a stub communicator as `Comm::init_rank` does with a non-blocking NCCL, as rank
/// 1 of 2 on CUDA device 0.
fn join(
    nccl: &'static Nccl,
    check: &mut dyn FnMut() -> Result<()>,
) -> (Result<CommHandle>, RawComm) {
    let api = nccl
        .api
        .non_blocking
        .expect("the stub has ncclCommInitRankConfig");
    let mut config = Config::non_blocking();
    let mut made: RawComm = std::ptr::null_mut();
    let id = UniqueId {
        internal: [0; UniqueId::BYTES],
    };
    let start = |raw: &mut RawComm| {
        // SAFETY: the stub writes one handle and copies the configuration.
        let code = unsafe { (api.comm_init_rank_config)(raw, 2, id, 1, &mut config) };
        made = *raw;
        code
    };
    let who = "rank 1 of 2 on CUDA device 0";
    let joined = CommHandle::join(nccl, "ncclCommInitRankConfig", who, start, check);
    (joined, made)
}

#[test]
fn a_non_blocking_join_is_polled_until_nccl_made_the_communicator() {
    let (nccl, lib) = stub();
    plan(lib, 5, NCCL_SUCCESS);
    let mut checks = 0;
    let (joined, raw) = join(nccl, &mut give_up_at(None, Error::runtime(""), &mut checks));
    let handle = joined.expect("joined after the polls");
    assert_eq!(checks, 5, "a check between two polls");
    assert_eq!(count(lib, c"ncclStubPolls", raw), 6);
    assert_eq!(count(lib, c"ncclStubAborts", raw), 0);
    assert!(handle.live().is_ok());

    // The configuration: NCCL 2.14's layout, non-blocking, NCCL's defaults elsewhere.
    let size: unsafe extern "C" fn() -> usize = stub_fn(lib, c"ncclStubConfigSize");
    let int = |name| stub_fn::<unsafe extern "C" fn() -> u32>(lib, name);
    // SAFETY: they read what the stub kept of the last configuration.
    unsafe {
        assert_eq!(size(), 40);
        assert_eq!(int(c"ncclStubConfigMagic")(), 0xcafe_beef);
        assert_eq!(int(c"ncclStubConfigVersion")(), 21400);
        assert_eq!(int(c"ncclStubConfigBlocking")(), 0);
        assert_eq!(int(c"ncclStubConfigRestUndefined")(), 1);
    }
    free(lib, raw);
}

#[test]
fn a_join_that_never_finishes_is_aborted_when_its_owner_gives_up() {
    let (nccl, lib) = stub();
    plan(lib, -1, NCCL_SUCCESS);
    let shutdown = Error::new(ErrorKind::SessionClosed, "the session was shut down");
    let mut checks = 0;
    let (joined, raw) = join(nccl, &mut give_up_at(Some(100), shutdown, &mut checks));
    let error = joined.err().expect("given up");
    assert_eq!(error.kind, ErrorKind::SessionClosed);
    assert_eq!(
        error.message,
        "NCCL: rank 1 of 2 on CUDA device 0 could not join its communicator: the session was \
         shut down; the half-made communicator was aborted"
    );
    assert_eq!(checks, 100);
    assert_eq!(count(lib, c"ncclStubAborts", raw), 1);
    free(lib, raw);

    // The timeout of a join, after its interrupts.
    struct Never;
    impl Interrupts for Never {
        fn mark(&self) -> u64 {
            0
        }
        fn check(&self, _: u64) -> Result<()> {
            Ok(())
        }
    }
    let started = Instant::now();
    let (joined, raw) = join(nccl, &mut joining(&Never, Some(Duration::from_millis(20))));
    assert!(started.elapsed() >= Duration::from_millis(20));
    let error = joined.err().expect("timed out");
    assert_eq!(error.kind, ErrorKind::Runtime);
    assert_eq!(
        error.message,
        "NCCL: rank 1 of 2 on CUDA device 0 could not join its communicator: the other ranks \
         did not join within the timeout (20 ms); the half-made communicator was aborted"
    );
    assert_eq!(count(lib, c"ncclStubAborts", raw), 1);
    free(lib, raw);
}

#[test]
fn a_join_that_fails_reports_nccls_error() {
    let (nccl, lib) = stub();
    // NCCL reports the failure after some polls: the half-made communicator is aborted.
    plan(lib, 3, 2);
    let (joined, raw) = join(nccl, &mut || Ok(()));
    let error = joined.err().expect("failed");
    assert_eq!(error.kind, ErrorKind::Runtime);
    assert_eq!(
        error.message,
        "NCCL: rank 1 of 2 on CUDA device 0 could not join its communicator: NCCL reported an \
         asynchronous error: stub: unhandled system error (code 2) (a peer of the stub \
         communicator is gone); the half-made communicator was aborted"
    );
    assert_eq!(count(lib, c"ncclStubAborts", raw), 1);
    free(lib, raw);

    // It fails at once, leaving no communicator.
    plan(lib, 0, 4);
    let (joined, raw) = join(nccl, &mut || panic!("nothing to wait for"));
    assert!(raw.is_null());
    assert_eq!(
        joined.err().expect("failed").message,
        "NCCL: rank 1 of 2 on CUDA device 0 could not join its communicator: \
         ncclCommInitRankConfig failed: stub: other error (code 4) (the stub's group ended \
         badly)"
    );
}

/// Makes an `ncclAllReduce` on stub communicator `handle` as `Comm::enqueue` does.
fn all_reduce(handle: &CommHandle, check: &mut dyn FnMut() -> Result<()>) -> Result<()> {
    let f = handle.nccl.api.all_reduce;
    let none = std::ptr::null_mut();
    // SAFETY: the stub reads none of the pointers.
    handle.call("ncclAllReduce", check, |comm| unsafe {
        f(none, none, 0, 7, 0, comm, none)
    })
}

#[test]
fn a_call_still_in_progress_is_waited_for_before_the_next() {
    let (nccl, lib) = stub();
    let raw = stub_comm(lib);
    let handle = CommHandle::new(nccl, raw);
    plan(lib, 4, NCCL_SUCCESS);
    all_reduce(&handle, &mut || Ok(())).unwrap();
    assert_eq!(count(lib, c"ncclStubPolls", raw), 5);
    plan(lib, 0, NCCL_SUCCESS);
    all_reduce(&handle, &mut || panic!("nothing to wait for")).unwrap();
    assert_eq!(
        count(lib, c"ncclStubEarlyCalls", raw),
        0,
        "no call while NCCL was at the one before"
    );

    // One that fails while in progress is aborted; the next call never reaches NCCL.
    plan(lib, 2, 2);
    let error = all_reduce(&handle, &mut || Ok(())).unwrap_err();
    assert_eq!(
        error.message,
        "NCCL: ncclAllReduce did not finish: NCCL reported an asynchronous error: stub: \
         unhandled system error (code 2) (a peer of the stub communicator is gone); the \
         communicator was aborted"
    );
    assert_eq!(count(lib, c"ncclStubAborts", raw), 1);
    let error = all_reduce(&handle, &mut || Ok(())).unwrap_err();
    assert_eq!(
        error.message,
        "NCCL: the communicator was aborted and can run nothing more"
    );
    free(lib, raw);

    // One NCCL never finishes ends with its wait's check.
    let raw = stub_comm(lib);
    let handle = CommHandle::new(nccl, raw);
    plan(lib, -1, NCCL_SUCCESS);
    let mut checks = 0;
    let replaced = Error::runtime("init_ccl was called again");
    let error = all_reduce(&handle, &mut give_up_at(Some(3), replaced, &mut checks));
    assert_eq!(
        error.unwrap_err().message,
        "NCCL: ncclAllReduce did not finish: init_ccl was called again; the communicator was \
         aborted"
    );
    assert_eq!(count(lib, c"ncclStubAborts", raw), 1);
    free(lib, raw);

    // One whose communicator another thread aborts meanwhile (a watch that gave up).
    let raw = stub_comm(lib);
    let handle = CommHandle::new(nccl, raw);
    plan(lib, -1, NCCL_SUCCESS);
    let abort = &mut || {
        handle.abort();
        Ok(())
    };
    let error = all_reduce(&handle, abort).unwrap_err();
    assert_eq!(
        error.message,
        "NCCL: ncclAllReduce did not finish: it was aborted while NCCL was at it; the \
         communicator was aborted"
    );
    assert_eq!(count(lib, c"ncclStubAborts", raw), 1);
    free(lib, raw);
}

#[test]
fn a_group_end_that_fails_reports_nccls_error_after_the_first_failure() {
    let (nccl, lib) = stub();
    let raw = stub_comm(lib);
    let handle = CommHandle::new(nccl, raw);
    let error = handle.group(|| Ok(()), &mut || Ok(())).unwrap_err();
    assert_eq!(error.kind, ErrorKind::Runtime);
    assert_eq!(
        error.message,
        "NCCL: ncclGroupEnd failed: stub: invalid usage (code 5) (the stub's group ended badly)"
    );
    let error = handle
        .group(|| Err(Error::value("issuing failed")), &mut || Ok(()))
        .unwrap_err();
    assert_eq!(error.message, "issuing failed", "the first failure wins");
    free(lib, raw);
}

#[test]
fn closing_finalizes_a_healthy_communicator_and_aborts_one_that_is_not() {
    let (nccl, lib) = stub();
    let counts = |raw| {
        [
            c"ncclStubFinalizes",
            c"ncclStubDestroys",
            c"ncclStubAborts",
            c"ncclStubEarlyCalls",
        ]
        .map(|name| count(lib, name, raw))
    };
    // Finalized (NCCL at it for a while), then destroyed.
    let raw = stub_comm(lib);
    plan(lib, 3, NCCL_SUCCESS);
    CommHandle::new(nccl, raw).close(&mut || Ok(()));
    assert_eq!(counts(raw), [1, 1, 0, 0]);
    free(lib, raw);

    // A finalization its peers never join ends with its wait's check: aborted.
    let raw = stub_comm(lib);
    plan(lib, -1, NCCL_SUCCESS);
    let mut checks = 0;
    let shutdown = Error::new(ErrorKind::SessionClosed, "the session was shut down");
    CommHandle::new(nccl, raw).close(&mut give_up_at(Some(5), shutdown, &mut checks));
    assert_eq!((counts(raw), checks), ([1, 0, 1, 0], 5));
    free(lib, raw);

    // A communicator that failed is aborted without more.
    let raw = stub_comm(lib);
    let set: unsafe extern "C" fn(RawComm, c_int) = stub_fn(lib, c"ncclStubSetAsyncError");
    // SAFETY: a live stub communicator.
    unsafe { set(raw, 2) };
    CommHandle::new(nccl, raw).close(&mut || panic!("nothing to wait for"));
    assert_eq!(counts(raw), [0, 0, 1, 0]);
    free(lib, raw);
}

#[test]
fn a_communicators_async_error_is_reported_and_an_aborted_one_never_reaches_nccl() {
    let (nccl, lib) = stub();
    let set: unsafe extern "C" fn(RawComm, c_int) = stub_fn(lib, c"ncclStubSetAsyncError");
    let raw = stub_comm(lib);
    let handle = CommHandle::new(nccl, raw);
    handle.async_error().unwrap();
    // SAFETY: the stub communicator is alive until the free below.
    unsafe { set(raw, NCCL_IN_PROGRESS) };
    handle
        .async_error()
        .expect("still setting up is no failure");
    // SAFETY: as above.
    unsafe { set(raw, 2) };
    let error = handle.async_error().unwrap_err();
    assert_eq!(error.kind, ErrorKind::Runtime);
    assert_eq!(
        error.message,
        "NCCL reported an asynchronous error: stub: unhandled system error (code 2) (a peer \
         of the stub communicator is gone)"
    );

    // What `Comm::abort` does once its GPU is entered: the handle goes, then NCCL aborts.
    handle.abort();
    let error = handle.live().err().expect("aborted");
    assert_eq!(
        error.message,
        "NCCL: the communicator was aborted and can run nothing more"
    );
    handle.async_error().expect("nothing more to report");
    handle.abort();
    assert!(handle.take().is_none(), "aborted once");
    assert_eq!(count(lib, c"ncclStubAborts", raw), 1);
    free(lib, raw);
}

#[test]
fn regions_are_compact_cuda_tensors() {
    let host = Tensor::empty(
        &[4],
        DLDataType::new(KDL_FLOAT, 32, 1),
        crate::abi::DLDevice::cpu(),
    )
    .unwrap();
    let err = Region::of(&host).err().unwrap();
    assert_eq!(
        err.message,
        "NCCL works on CUDA tensors (kDLCUDA = 2), not device type 1"
    );
}
