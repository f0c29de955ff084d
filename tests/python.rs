//! Runs the Python tests in `tests/python/` against the built shared library. They need only
//! python3 and its standard library (ctypes); a missing python3 fails this test.

#[path = "support/built_library.rs"]
mod built_library;

use std::path::Path;
use std::process::Command;

fn run_python_test(script: &str) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
    let library = built_library::shared_library();
    let mut python = Command::new("python3");
    python.arg(&script).arg(library);
    let output = python.output().unwrap_or_else(|e| {
        panic!("cannot run python3 (it is needed for the Python tests; install it): {e}")
    });
    print!("{}", String::from_utf8_lossy(&output.stdout));
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
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
