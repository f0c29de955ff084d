//! The worker programs of process sessions, built once per test binary against the built
//! library: the installed `discovm-worker` (`programs/discovm-worker.c`), placed next to the
//! library, where sessions find it by default; the node program of sessions across machines
//! (`programs/discovm-node.c`), next to it; and the tests' own worker program
//! (`support/process_worker.c`), which registers functions of its own (the test file that
//! uses this declares the `built_library` and `c_build` modules too).

#![allow(dead_code)] // each test binary uses its own part of this module

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::built_library::shared_library_dir;
use crate::c_build::{Link, compile};

/// Compiles `source` into `dir/name`, replacing a program of that name at once (several test
/// binaries may build the same one at the same time).
fn build(source: &str, dir: &Path, name: &str) -> PathBuf {
    let staged = dir.join(format!("{name}.{}.tmp", std::process::id()));
    compile(source, &staged, Link::Library, &[]);
    let program = dir.join(name);
    std::fs::rename(&staged, &program)
        .unwrap_or_else(|e| panic!("cannot move {} into place: {e}", staged.display()));
    program
}

/// `discovm-worker`, next to the library (where a session looks when nothing names another).
pub fn default_worker_program() -> &'static Path {
    static PROGRAM: OnceLock<PathBuf> = OnceLock::new();
    PROGRAM.get_or_init(|| {
        build(
            "programs/discovm-worker.c",
            shared_library_dir(),
            "discovm-worker",
        )
    })
}

/// `discovm-node`, next to the library.
pub fn node_program() -> &'static Path {
    static PROGRAM: OnceLock<PathBuf> = OnceLock::new();
    PROGRAM.get_or_init(|| {
        build(
            "programs/discovm-node.c",
            shared_library_dir(),
            "discovm-node",
        )
    })
}

/// The tests' worker program, with the `proc.*` functions `support/process_worker.c` lists.
pub fn test_worker_program() -> &'static Path {
    static PROGRAM: OnceLock<PathBuf> = OnceLock::new();
    PROGRAM.get_or_init(|| {
        build(
            "tests/support/process_worker.c",
            Path::new(env!("CARGO_TARGET_TMPDIR")),
            "process_worker",
        )
    })
}
