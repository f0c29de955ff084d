//! Finds the shared library (`libdiscovm.so`) that belongs to the running test build.
//!
//! `cargo test` compiles the library with all its crate types, but leaves the cdylib under
//! `deps/` only; `cargo build` with the same profile (a no-op when nothing changed) puts it in
//! the profile directory, next to where users find it. This runs that build once per test
//! binary, for the profile and target directory the test itself was built into.

#![allow(dead_code)] // each test binary uses its own part of this module

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The file name of the shared library.
pub const LIBRARY_FILE: &str = "libdiscovm.so";

/// `target/<profile>` (or `target/<triple>/<profile>`) of the running test binary.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary knows its path");
    // The binary is <profile dir>/deps/<name>-<hash>.
    exe.parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| panic!("unexpected test binary location {}", exe.display()))
        .to_path_buf()
}

/// Builds the library for this test's profile, once, and returns the path of the `.so`.
pub fn shared_library() -> &'static Path {
    static LIBRARY: OnceLock<PathBuf> = OnceLock::new();
    LIBRARY.get_or_init(|| {
        let profile_dir = profile_dir();
        let dir_name = profile_dir
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let profile = match dir_name.as_str() {
            "debug" => "dev".to_string(),
            other => other.to_string(), // "release", or a custom profile's own name
        };
        // CARGO_TARGET_TMPDIR is <target dir>/tmp; a cross build puts the profile directory
        // under the target triple, below the target dir.
        let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().unwrap();
        let parent = profile_dir.parent().unwrap();
        let triple = (parent != target_dir)
            .then(|| parent.file_name().unwrap().to_string_lossy().into_owned());
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
        let mut command = Command::new(cargo);
        command
            .args(["build", "--lib", "--profile", &profile, "--manifest-path"])
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
            .arg("--target-dir")
            .arg(target_dir);
        if let Some(triple) = triple {
            command.args(["--target", &triple]);
        }
        let output = command
            .output()
            .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
        assert!(
            output.status.success(),
            "{command:?} failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let library = profile_dir.join(LIBRARY_FILE);
        assert!(
            library.is_file(),
            "{} is missing after {command:?}",
            library.display()
        );
        library
    })
}

/// The directory holding the shared library.
pub fn shared_library_dir() -> &'static Path {
    shared_library().parent().unwrap()
}
