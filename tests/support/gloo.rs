//! The Gloo plugin, for the tests of collectives between nodes: installs Gloo where it is
//! missing (Debian's libgloo-dev, as root) and builds `plugins/gloo` next to the built library,
//! where sessions look for it (the test file that uses this declares the `built_library` module
//! too).

#![allow(dead_code)] // each test binary uses its own part of this module

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::built_library::shared_library_dir;

const HEADER: &str = "/usr/include/gloo/allreduce.h";

/// Installs libgloo-dev with apt-get when its headers are missing; the reason when it cannot.
fn install() -> Result<(), String> {
    if Path::new(HEADER).exists() {
        return Ok(());
    }
    // SAFETY: geteuid only reads the process's credentials.
    if unsafe { libc::geteuid() } != 0 {
        return Err(
            "Gloo is not installed and the tests do not run as root to install it \
                    (Debian: apt-get install libgloo-dev)"
                .into(),
        );
    }
    let apt_install = || {
        Command::new("apt-get")
            .args(["install", "-y", "-q", "libgloo-dev"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
            .map_err(|e| format!("apt-get cannot run: {e}"))
    };
    if apt_install()?.status.success() && Path::new(HEADER).exists() {
        return Ok(());
    }
    // The package lists may be missing on a fresh machine.
    let _ = Command::new("apt-get").args(["update", "-q"]).output();
    let again = apt_install()?;
    if again.status.success() && Path::new(HEADER).exists() {
        return Ok(());
    }
    Err(format!(
        "apt-get install libgloo-dev failed:\n{}",
        String::from_utf8_lossy(&again.stderr)
    ))
}

/// The plugin next to the built library, built once per test binary; `None`, with the reason
/// printed, where Gloo cannot be installed.
pub fn plugin() -> Option<&'static Path> {
    static PLUGIN: OnceLock<Option<PathBuf>> = OnceLock::new();
    PLUGIN
        .get_or_init(|| {
            if let Err(why) = install() {
                eprintln!("skipped: no Gloo for collectives between nodes: {why}");
                return None;
            }
            let dir = shared_library_dir();
            let staged = dir.join(format!("libdiscovm_gloo.so.{}.tmp", std::process::id()));
            let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("plugins/gloo/discovm_gloo.cc");
            let output = Command::new("g++")
                .args([
                    "-std=c++17",
                    "-O2",
                    "-Wall",
                    "-Wextra",
                    "-Werror",
                    "-shared",
                    "-fPIC",
                ])
                .arg(&source)
                .arg("-o")
                .arg(&staged)
                .arg("-lgloo")
                .output()
                .expect("g++ runs (it builds the C++ tests too)");
            assert!(
                output.status.success(),
                "g++ failed on the Gloo plugin:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
            let plugin = dir.join("libdiscovm_gloo.so");
            std::fs::rename(&staged, &plugin).expect("the plugin moves into place");
            Some(plugin)
        })
        .as_deref()
}
