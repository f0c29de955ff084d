//! The Python virtual environments that the `tests/support/*_venv.sh` scripts make (once), for
//! the tests that need a package from PyPI: apache-tvm-ffi's headers and library, numpy, pytest
//! with the discovm package, Apache TVM, CMake.

#![allow(dead_code)] // each test binary uses its own part of this module

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Runs the support script `script` (relative to the repository) and returns the path it
/// prints last; panics with the script's own message and how to fix it if it fails. `needs`
/// names what the script installs, for that message.
fn run_script(script: &str, needs: &str) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
    let output = Command::new("bash")
        .arg(&script)
        .output()
        .unwrap_or_else(|e| panic!("cannot run bash {}: {e}", script.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last_line = stdout.lines().last().unwrap_or("").trim();
    assert!(
        output.status.success() && !last_line.is_empty(),
        "{} failed ({}):\n{}\n\
         This test needs {needs}, which the script installs into a Python virtual environment. \
         Install python3 with its venv module and let pip reach PyPI once (or a mirror, through \
         PIP_INDEX_URL), or point the variable the script names at an environment that already \
         has it; then run the tests again.",
        script.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    PathBuf::from(last_line)
}

/// The include directory of the tvm-ffi package (it holds `tvm/ffi/c_api.h` and
/// `dlpack/dlpack.h`), made once per test process.
pub fn tvm_ffi_include_dir() -> &'static Path {
    static INCLUDE: OnceLock<PathBuf> = OnceLock::new();
    INCLUDE.get_or_init(|| {
        run_script(
            "tests/support/tvm_ffi_venv.sh",
            "apache-tvm-ffi==0.1.15.post2 (its headers, or its library)",
        )
    })
}

/// The tvm-ffi package's `libtvm_ffi.so`.
pub fn tvm_ffi_shared_library() -> PathBuf {
    tvm_ffi_include_dir().join("../lib/libtvm_ffi.so")
}

/// The python of the environment that also holds numpy.
pub fn numpy_python() -> PathBuf {
    run_script("tests/support/numpy_venv.sh", "numpy")
}

/// The python of the environment that also holds pytest and the discovm package.
pub fn pytest_python() -> PathBuf {
    run_script(
        "tests/support/pytest_venv.sh",
        "pytest, numpy, apache-tvm-ffi and the discovm package",
    )
}

/// The python of a fresh environment that `pip install ./python` installed the discovm package
/// into (its wheel, built with the library), made once per test process.
pub fn wheel_python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        run_script(
            "tests/support/wheel_venv.sh",
            "the discovm package built by pip (with cargo and make), apache-tvm-ffi and numpy",
        )
    })
}

/// The `cmake` of the environment that holds CMake, made once per test process.
pub fn cmake() -> &'static Path {
    static CMAKE: OnceLock<PathBuf> = OnceLock::new();
    CMAKE.get_or_init(|| run_script("tests/support/cmake_venv.sh", "CMake"))
}

/// The python of the environment that holds Apache TVM, pytest and the discovm package.
pub fn tvm_python() -> PathBuf {
    run_script(
        "tests/support/tvm_venv.sh",
        "apache-tvm==0.27.0.post1, apache-tvm-ffi, numpy, pytest and the discovm package",
    )
}
