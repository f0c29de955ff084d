//! The Python virtual environment with apache-tvm-ffi that `tests/support/tvm_ffi_venv.sh`
//! makes, for the tests that compare against tvm-ffi's headers or load its library.

#![allow(dead_code)] // each test binary uses its own part of this module

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The include directory of the tvm-ffi package (it holds `tvm/ffi/c_api.h` and
/// `dlpack/dlpack.h`), made once per test process by `tests/support/tvm_ffi_venv.sh`.
pub fn include_dir() -> &'static Path {
    static INCLUDE: OnceLock<PathBuf> = OnceLock::new();
    INCLUDE.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/tvm_ffi_venv.sh");
        let output = Command::new("bash")
            .arg(&script)
            .output()
            .unwrap_or_else(|e| panic!("cannot run bash {}: {e}", script.display()));
        let stdout = String::from_utf8_lossy(&output.stdout);
        let last_line = stdout.lines().last().unwrap_or("").trim();
        assert!(
            output.status.success() && !last_line.is_empty(),
            "{} failed ({}):\n{}\n\
             These tests need apache-tvm-ffi==0.1.15.post2 (its headers, or its library), \
             which the script installs into a Python virtual environment. Install python3 with \
             its venv module and let pip reach PyPI once (or a mirror, through PIP_INDEX_URL), or \
             set DVM_TVM_FFI_VENV to a virtual environment that already has the package; then \
             run the tests again.",
            script.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        PathBuf::from(last_line)
    })
}

/// The package's `libtvm_ffi.so`.
pub fn shared_library() -> PathBuf {
    include_dir().join("../lib/libtvm_ffi.so")
}
