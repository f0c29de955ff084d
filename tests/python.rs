//! Runs the Python tests in `tests/python/` against the built shared library. The ctypes test
//! needs only python3 and its standard library; the DLPack test needs numpy, and runs in the
//! virtual environment `tests/support/numpy_venv.sh` makes (the first run needs PyPI). A
//! missing python3, or an environment that cannot be made, fails these tests. The CUDA DLPack
//! test needs a GPU and torch or cupy in python3's own environment; without them it skips
//! (exit 77), as it does here, and the GPU check runs it where they are.

#[path = "support/built_library.rs"]
mod built_library;

use std::path::Path;
use std::process::Command;

/// The exit status of a Python test that needs a GPU it did not find.
const EXIT_SKIP: i32 = 77;

fn run_python_test(script: &str) {
    run_python_test_with("python3", script);
}

fn run_python_test_with(interpreter: &str, script: &str) {
    run_python(interpreter, script, false);
}

/// Runs `script`; with `may_skip`, exit status 77 (skipped: no GPU) passes too.
fn run_python(interpreter: &str, script: &str, may_skip: bool) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
    let library = built_library::shared_library();
    let mut python = Command::new(interpreter);
    python.arg(&path).arg(library);
    let output = python.output().unwrap_or_else(|e| {
        panic!("cannot run python3 (it is needed for the Python tests; install it): {e}")
    });
    print!("{}", String::from_utf8_lossy(&output.stdout));
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    if may_skip && output.status.code() == Some(EXIT_SKIP) {
        println!("skipped: {script} needs a GPU and torch or cupy (exit 77)");
        return;
    }
    assert!(
        output.status.success(),
        "{python:?} exited with {}",
        output.status
    );
}

#[test]
fn ctypes_calls_and_errors() {
    run_python_test("tests/python/test_ctypes.py");
}

/// The python of the virtual environment with numpy, made (once) by the support script.
fn numpy_python() -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/numpy_venv.sh");
    let output = Command::new("bash")
        .arg(&script)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        output.status.success(),
        "{} failed, so the DLPack tests cannot run (they need numpy; the script's message \
         says how to fix it):\n{}",
        script.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .expect("the script prints a path")
        .lines()
        .last()
        .expect("the script prints the python path last")
        .to_string()
}

#[test]
fn dlpack_round_trips_with_numpy() {
    run_python_test_with(&numpy_python(), "tests/python/test_dlpack_numpy.py");
}

/// CUDA tensors read by torch and cupy, on a GPU machine (the GPU check runs it there too);
/// here it says why it skipped.
#[test]
fn dlpack_with_cuda_consumers() {
    run_python("python3", "tests/python/test_dlpack_cuda.py", true);
}
