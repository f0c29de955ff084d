//! Loading NCCL at run time, against a stand-in library with NCCL's C ABI
//! (`tests/support/nccl_stub.c`, compiled here): the version, a unique id,
//! `DISCOVM_NCCL_LIBRARY`, and what `init_ccl("nccl")` says when NCCL loads but there is no GPU.
//! NCCL's error texts and the waits on non-blocking communicators are checked against the same
//! stub by the unit tests of `src/device/nccl/`; the real library's collectives run in the
//! GPU check (`tests/c/cuda_nccl.c`).

#[path = "../src/device/nccl/stub.rs"]
mod nccl_stub;

use std::path::PathBuf;

use discovm::ErrorKind;
use discovm::abi::KDL_CUDA;
use discovm::device::nccl::{LIBRARY_VAR, Nccl, UniqueId};
use discovm::session::{Session, SessionOptions};

/// Compiles the stand-in library and returns its path.
fn stub() -> PathBuf {
    let library = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("libnccl_stub.so.2");
    nccl_stub::build(&library);
    library
}

// One test: the variable is read once per process, before anything else loads NCCL.
#[test]
fn nccl_loads_from_the_named_library_and_reports_its_errors() {
    let path = stub();
    let path = path.to_str().expect("a UTF-8 path");
    // SAFETY: set before any other thread of this test binary reads the environment.
    unsafe { std::env::set_var(LIBRARY_VAR, path) };

    let nccl = Nccl::shared().expect("the stub loads");
    assert_eq!(nccl.name(), path);
    assert_eq!(nccl.version(), "2.21.5");
    let id = nccl.unique_id().unwrap().as_bytes();
    let expected: Vec<u8> = (0..UniqueId::BYTES).map(|i| (i * 7) as u8).collect();
    assert_eq!(
        id.to_vec(),
        expected,
        "ncclGetUniqueId filled the 128 bytes"
    );

    // NCCL is there; what is missing now is the GPU (or, with one, GPU workers).
    let s = Session::new_threaded(2, 1, SessionOptions::default()).unwrap();
    let error = s.init_ccl("nccl", &[]).unwrap_err();
    if discovm::device::count(KDL_CUDA).unwrap() == 0 {
        assert_eq!(error.kind, ErrorKind::DeviceUnavailable);
        assert!(
            error.message.starts_with(
                "the nccl backend needs a GPU for each worker and NCCL: CUDA device 0: "
            ),
            "{error}"
        );
        assert!(!error.message.contains("NCCL could not"), "{error}");
    } else {
        assert_eq!(error.kind, ErrorKind::Value);
        assert!(
            error
                .message
                .contains("needs every worker on a CUDA device; worker 0 is on device type 1"),
            "{error}"
        );
    }
    s.shutdown().unwrap();
}
