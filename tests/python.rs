//! Runs the Python tests in `tests/python/` against the built shared library. The ctypes test
//! needs only python3 and its standard library; the DLPack test needs numpy, and runs in the
//! virtual environment `tests/support/numpy_venv.sh` makes; the tests of the library as a
//! tvm-ffi module and of the `discovm` package (`tests/python/tvm_ffi/`, pytest) run in that
//! environment with pytest and the package added by `tests/support/pytest_venv.sh`. The first
//! run needs PyPI. The Gloo plugin is built first for the collectives between nodes. A missing python3, or an environment that cannot be made, fails these tests.
//! The CUDA DLPack test needs a GPU and torch or cupy in python3's own environment; without
//! them it skips (exit 77), as it does here, and the GPU check runs it where they are.

#[path = "support/built_library.rs"]
mod built_library;
#[path = "support/gloo.rs"]
mod gloo;
#[path = "support/venvs.rs"]
mod venvs;

use std::path::Path;
use std::process::Command;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// The exit status of a Python test that needs a GPU it did not find.
const EXIT_SKIP: i32 = 77;

/// Runs a Python command and fails the test if it fails, showing its output; with `may_skip`,
/// exit status 77 (skipped: no GPU) passes too.
fn run(mut python: Command, may_skip: bool) {
    let output = python.output().unwrap_or_else(|e| {
        panic!("cannot run {python:?} (python3 is needed for the Python tests; install it): {e}")
    });
    print!("{}", String::from_utf8_lossy(&output.stdout));
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    if may_skip && output.status.code() == Some(EXIT_SKIP) {
        println!("skipped: {python:?} needs a GPU and torch or cupy (exit 77)");
        return;
    }
    assert!(
        output.status.success(),
        "{python:?} exited with {}",
        output.status
    );
}

/// Runs a test script with the library's path as its argument.
fn run_python(interpreter: impl AsRef<std::ffi::OsStr>, script: &str, may_skip: bool) {
    let mut python = Command::new(interpreter);
    python
        .arg(Path::new(REPO).join(script))
        .arg(built_library::shared_library());
    run(python, may_skip);
}

#[test]
fn ctypes_calls_and_errors() {
    run_python("python3", "tests/python/test_ctypes.py", false);
}

#[test]
fn dlpack_round_trips_with_numpy() {
    let python = venvs::numpy_python();
    run_python(&python, "tests/python/test_dlpack_numpy.py", false);
}

/// CUDA tensors read by torch and cupy, on a GPU machine (the GPU check runs it there too);
/// here it says why it skipped.
#[test]
fn dlpack_with_cuda_consumers() {
    run_python("python3", "tests/python/test_dlpack_cuda.py", true);
}

#[test]
fn tvm_ffi_module_and_python_package() {
    // The collectives between nodes need the Gloo plugin next to the library; without it the
    // tests that use them skip, saying why.
    let _ = gloo::plugin();
    let python = venvs::pytest_python();
    let mut pytest = Command::new(python);
    pytest
        .args([
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/python/tvm_ffi",
        ])
        .current_dir(REPO)
        .env("DISCOVM_LIBRARY", built_library::shared_library())
        .env("PYTHONDONTWRITEBYTECODE", "1");
    run(pytest, false);
}
