//! Runs the Python tests in `tests/python/tvm/` against the built shared library: a model that
//! Apache TVM compiled for its Relax VM, with collectives, runs on discovm's workers (threads,
//! worker processes and nodes), Disco's weight loader reads the tensor caches TVM writes (also
//! from a compiled Relax function), and TVM's own Disco session still works in the same process.
//! They run in the virtual environment that `tests/support/tvm_venv.sh` makes (apache-tvm 0.27.0.post1, apache-tvm-ffi, numpy, pytest and
//! the discovm package); the first run needs PyPI. A missing python3, or an environment that
//! cannot be made, fails the test. Exporting the compiled models needs a C compiler (TVM takes
//! the first of g++, gcc, clang++, clang, c++ and cc it finds), as the C tests here do.

#[path = "support/built_library.rs"]
mod built_library;
#[path = "support/gloo.rs"]
mod gloo;
#[path = "support/venvs.rs"]
mod venvs;

use std::process::Command;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

#[test]
fn models_compiled_by_tvm_run_on_discovm_workers() {
    // A model runs on two nodes too, its collectives over Gloo; without the plugin that case
    // skips, saying why.
    let _ = gloo::plugin();
    let python = venvs::tvm_python();
    let mut pytest = Command::new(&python);
    pytest
        .args([
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/python/tvm",
        ])
        .current_dir(REPO)
        .env("DISCOVM_LIBRARY", built_library::shared_library())
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let output = pytest
        .output()
        .unwrap_or_else(|e| panic!("cannot run {pytest:?}: {e}"));
    print!("{}", String::from_utf8_lossy(&output.stdout));
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    assert!(
        output.status.success(),
        "{pytest:?} exited with {}",
        output.status
    );
}
