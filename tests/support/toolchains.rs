//! The toolchains the binding tests run (Go, Node.js): found on the PATH, or installed from
//! Debian's packages with apt-get where missing and the tests run as root, as CI runs them.

#![allow(dead_code)] // each test binary uses its own part of this module

use std::process::Command;

/// Whether `program --version`-style `probe` runs.
fn runs(program: &str, probe: &str) -> bool {
    Command::new(program)
        .arg(probe)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Makes sure `program` runs (`program probe` succeeds), installing the Debian `package`
/// when it does not; panics with the reason when neither works.
pub fn require(program: &str, probe: &str, package: &str) {
    if runs(program, probe) {
        return;
    }
    // SAFETY: geteuid only reads the process's credentials.
    if unsafe { libc::geteuid() } != 0 {
        panic!(
            "`{program}` is not installed and the tests do not run as root to install it \
             (Debian: apt-get install {package})"
        );
    }
    let install = || {
        Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends", package])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
            .unwrap_or_else(|e| panic!("apt-get cannot run to install {package}: {e}"))
    };
    let mut output = install();
    if !output.status.success() {
        // The package lists may be missing on a fresh machine.
        let _ = Command::new("apt-get").args(["update", "-q"]).output();
        output = install();
    }
    assert!(
        output.status.success() && runs(program, probe),
        "apt-get install {package} did not give a working `{program}`:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
