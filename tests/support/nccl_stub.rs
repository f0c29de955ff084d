//! Builds the stand-in NCCL library (`nccl_stub.c`, NCCL's C ABI without a GPU) for the tests
//! that load it.

use std::path::Path;
use std::process::Command;

/// Compiles `tests/support/nccl_stub.c` into the shared library `library`.
pub fn build(library: &Path) {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/nccl_stub.c");
    let output = Command::new("gcc")
        .args([
            "-std=c11", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
        ])
        .arg(&source)
        .arg("-o")
        .arg(library)
        .output()
        .expect("gcc runs (it builds the C tests too)");
    assert!(
        output.status.success(),
        "gcc failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
