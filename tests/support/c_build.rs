//! Compiling the C and C++ test programs against the built shared library (the test file that
//! uses this declares the `built_library` module too).
//!
//! C programs are compiled with `gcc -std=c11 -Wall -Wextra -Werror -Iinclude`, C++ programs
//! (`.cpp`) with `g++ -std=c++17 -Wall -Wextra -Werror -pedantic` and stricter warnings; both
//! are linked with `-ldiscovm` (rpath set to the library's directory) unless they load the
//! library themselves, and with `-ldl` (the CUDA programs load the driver themselves).

#![allow(dead_code)] // each test binary uses its own part of this module

use std::path::Path;
use std::process::{Command, Output};

use crate::built_library::shared_library_dir;

/// The flags every C program is compiled with.
pub const CFLAGS: [&str; 4] = ["-std=c11", "-Wall", "-Wextra", "-Werror"];

/// The flags every C++ program is compiled with: the C flags' warnings, `-pedantic`, and those
/// C++ users often add, which `discovm.hpp` must not trigger in their builds.
pub const CXXFLAGS: [&str; 10] = [
    "-std=c++17",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-pedantic",
    "-Wshadow",
    "-Wconversion",
    "-Wsign-conversion",
    "-Wold-style-cast",
    "-Wnon-virtual-dtor",
];

/// How a program reaches the library.
#[derive(Clone, Copy, PartialEq)]
pub enum Link {
    /// Linked with `-ldiscovm`.
    Library,
    /// Loads it with `dlopen`: not linked with it.
    Dlopen,
}

pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Everything a finished command printed, for assertion messages.
pub fn describe(command: &Command, output: &Output) -> String {
    format!(
        "{command:?} exited with {}\n--- stdout\n{}--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Compiles `source` (relative to the repository root) into `binary`, with the extra linker
/// flags `libs` after the library; panics with the compiler's output if it fails.
pub fn compile(source: &str, binary: &Path, link: Link, libs: &[&str]) {
    let (compiler, flags): (&str, &[&str]) = if source.ends_with(".cpp") {
        ("g++", &CXXFLAGS)
    } else {
        ("gcc", &CFLAGS)
    };
    let mut command = Command::new(compiler);
    command
        .args(flags)
        .arg("-I")
        .arg(repo().join("include"))
        .arg(repo().join(source))
        .arg("-o")
        .arg(binary);
    if link == Link::Library {
        let dir = shared_library_dir();
        command
            .arg("-L")
            .arg(dir)
            .arg("-ldiscovm")
            .arg(format!("-Wl,-rpath,{}", dir.display()));
    }
    command.args(libs).arg("-ldl");
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {compiler} (is it installed?): {e}"));
    assert!(output.status.success(), "{}", describe(&command, &output));
}
