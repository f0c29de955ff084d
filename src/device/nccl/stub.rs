//! Builds the stand-in libraries of `tests/support/` (`nccl_stub.c`, NCCL's C ABI without a
//! GPU, and the others) for the tests that load them: the unit tests of this module, and the
//! integration tests, which include this file.

#![allow(dead_code)] // each test binary uses its own part of this module

use std::path::Path;
use std::process::Command;

/// Compiles `tests/support/nccl_stub.c` into the shared library `library`.
pub fn build(library: &Path) {
    build_shared("tests/support/nccl_stub.c", library, &[]);
}

/// Compiles `source` (relative to the repository root) into the shared library `library`, with
/// the extra flags `extra` (a soname, libraries) last.
pub fn build_shared(source: &str, library: &Path, extra: &[&str]) {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(source);
    let output = Command::new("gcc")
        .args([
            "-std=c11", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
        ])
        .arg(&source)
        .arg("-o")
        .arg(library)
        .args(extra)
        .output()
        .expect("gcc runs (it builds the C tests too)");
    assert!(
        output.status.success(),
        "gcc failed on {}:\n{}",
        source.display(),
        String::from_utf8_lossy(&output.stderr)
    );
}
