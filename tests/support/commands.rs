//! Running the programs the tests build or need (compilers, make, readelf, CMake).

use std::process::Command;

/// Runs `command` and returns its stdout; panics with the command line and its output unless it
/// exits with status 0, and with `hint_if_missing` appended when it cannot be started.
pub fn run_or(command: &mut Command, hint_if_missing: &str) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}{hint_if_missing}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{command:?} failed ({})\n--- stdout\n{stdout}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}
