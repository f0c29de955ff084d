//! The discovm package as a Python user installs it: `pip install ./python` in a fresh virtual
//! environment (`tests/support/wheel_venv.sh`), whose wheel must carry the library built from
//! this repository, with its headers, pkg-config file and CMake package:
//!
//! - with `DISCOVM_LIBRARY` unset, the installed package loads its own library and runs a
//!   session on it, and finds the headers and package files where `discovm.include_dir()`,
//!   `cmake_dir()` and `pkgconfig_dir()` say;
//! - those files work from where the wheel put them: a C program builds with the pkg-config
//!   file, a C++ program with the CMake package (shared and static), and both run.
//!
//! The consumers are those `tests/install.rs` builds (`tests/consumers/`); CMake comes from
//! `tests/support/cmake_venv.sh`. The first run needs python3 and access to PyPI, and builds the
//! library with release settings (in `target/python-wheel/cargo`, kept for later runs).

#[path = "support/commands.rs"]
mod commands;
#[path = "support/venvs.rs"]
mod venvs;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use commands::run_or;

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Checks the installed package from inside the environment and prints its C directories.
const CHECK_PACKAGE: &str = r#"
import os
import sys
from pathlib import Path

assert "DISCOVM_LIBRARY" not in os.environ
import discovm

package = Path(discovm.__file__).resolve().parent
environment = Path(sys.prefix).resolve()
assert environment in package.parents, f"discovm came from {package}, not from {environment}"
library = discovm.library_path().resolve()
assert library == package / "lib" / "libdiscovm.so", f"discovm loads {library}"

with discovm.ThreadedSession(2) as sess:
    ids = sess.get_global_func("runtime.disco.worker_id")()
    sess.sync_all()
    # Disco's worker_id is a shape: (worker,).
    got = [tuple(ids.debug_get_from_remote(worker)) for worker in range(2)]
    assert got == [(0,), (1,)], f"runtime.disco.worker_id returned {got}"

for directory, names in [
    (discovm.include_dir(), ["discovm.h", "discovm_abi.h", "discovm.hpp"]),
    (discovm.lib_dir(), ["libdiscovm.so", "libdiscovm.a"]),
    (discovm.cmake_dir(), ["discovmConfig.cmake", "discovmConfigVersion.cmake"]),
    (discovm.pkgconfig_dir(), ["discovm.pc"]),
]:
    assert package in directory.parents, f"{directory} is outside the package {package}"
    for name in names:
        assert (directory / name).is_file(), f"{directory / name} is missing"

print(f"include {discovm.include_dir()}")
print(f"lib {discovm.lib_dir()}")
print(f"cmake {discovm.cmake_dir()}")
print(f"pkgconfig {discovm.pkgconfig_dir()}")
"#;

/// What the installed package says about itself, from [`CHECK_PACKAGE`].
struct Installed {
    include: PathBuf,
    lib: PathBuf,
    cmake: PathBuf,
    pkgconfig: PathBuf,
}

/// Runs [`CHECK_PACKAGE`] with the environment's python, outside the repository and without
/// `DISCOVM_LIBRARY`, once per test process, and returns the directories it printed.
fn installed() -> &'static Installed {
    static INSTALLED: OnceLock<Installed> = OnceLock::new();
    INSTALLED.get_or_init(check_installed_package)
}

fn check_installed_package() -> Installed {
    let python = venvs::wheel_python();
    let stdout = run_or(
        Command::new(python)
            .args(["-c", CHECK_PACKAGE])
            .current_dir(python.parent().unwrap())
            .env_remove("DISCOVM_LIBRARY")
            .env_remove("PYTHONPATH")
            .env("PYTHONDONTWRITEBYTECODE", "1"),
        "",
    );
    let dir = |key: &str| {
        let line = stdout
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{key} ")))
            .unwrap_or_else(|| panic!("the check printed no `{key}` line:\n{stdout}"));
        PathBuf::from(line)
    };
    Installed {
        include: dir("include"),
        lib: dir("lib"),
        cmake: dir("cmake"),
        pkgconfig: dir("pkgconfig"),
    }
}

/// A fresh, empty scratch directory for this file's builds.
fn fresh_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("python_wheel")
        .join(name);
    if dir.exists() {
        fs::remove_dir_all(&dir).unwrap_or_else(|e| panic!("cannot remove {}: {e}", dir.display()));
    }
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn installed_package_runs_a_session_on_the_library_in_its_wheel() {
    installed();
}

#[test]
fn pkg_config_file_in_the_wheel_builds_a_c_program() {
    let installed = installed();
    let pkg_config = |args: &[&str]| {
        let mut command = Command::new("pkg-config");
        command
            .args(args)
            .arg("discovm")
            .env("PKG_CONFIG_PATH", &installed.pkgconfig);
        let hint = " (install pkg-config; on Debian/Ubuntu: apt-get install pkg-config)";
        run_or(&mut command, hint).trim().to_string()
    };
    assert_eq!(pkg_config(&["--modversion"]), VERSION);
    for (variable, expected) in [
        ("libdir", &installed.lib),
        ("includedir", &installed.include),
    ] {
        let named = pkg_config(&[&format!("--variable={variable}")]);
        assert_eq!(
            fs::canonicalize(&named).ok().as_ref(),
            Some(expected),
            "discovm.pc's {variable} is {named}"
        );
    }

    let binary = fresh_dir("pkgconfig").join("consumer");
    let flags = pkg_config(&["--cflags", "--libs"]);
    run_or(
        Command::new("gcc")
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror"])
            .arg(repo().join("tests/consumers/pkgconfig/main.c"))
            .arg("-o")
            .arg(&binary)
            .args(flags.split_whitespace())
            .arg(format!("-Wl,-rpath,{}", installed.lib.display())),
        "",
    );
    assert_eq!(
        run_or(&mut Command::new(&binary), ""),
        format!("discovm {VERSION} from C: worker ranks 0 1, process ranks 0 1\n")
    );
}

#[test]
fn cmake_package_in_the_wheel_builds_a_cxx_program_against_both_libraries() {
    let installed = installed();
    let build = fresh_dir("cmake-build");
    let configured = run_or(
        Command::new(venvs::cmake())
            .arg("-S")
            .arg(repo().join("tests/consumers/cmake"))
            .arg("-B")
            .arg(&build)
            .arg(format!("-Ddiscovm_DIR={}", installed.cmake.display())),
        "",
    );
    let expected = format!("found discovm {VERSION} in {}", installed.cmake.display());
    assert!(
        configured.contains(&expected),
        "cmake did not report `{expected}`:\n{configured}"
    );
    run_or(Command::new(venvs::cmake()).arg("--build").arg(&build), "");
    let expected_output =
        format!("discovm {VERSION} from C++: worker ranks 0 1\na missing function is a KeyError\n");
    for target in ["consumer_shared", "consumer_static"] {
        // CMake gives the shared build an rpath to the library in the package.
        assert_eq!(
            run_or(&mut Command::new(build.join(target)), ""),
            expected_output,
            "{target}"
        );
    }
}
