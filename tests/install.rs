//! `make install`, and programs built against what it installs, the ways C and C++ users build
//! them:
//!
//! - the files land under PREFIX as documented (the shared library with its soname and version
//!   links, the static library, the headers, `lib/pkgconfig/discovm.pc`,
//!   `lib/cmake/discovm/`); `DESTDIR` stages the same files, and `make uninstall` removes them;
//! - a C program builds with `pkg-config --cflags --libs discovm` against the shared library,
//!   and with `pkg-config --static` against the static one, and runs;
//! - a C++ program builds with CMake's `find_package(discovm)` against both imported targets
//!   (`discovm::discovm`, `discovm::discovm_static`) and runs, and the CMake version file
//!   accepts the versions it should.
//!
//! The programs are in `tests/consumers/`. CMake comes from a Python virtual environment made
//! by `tests/support/cmake_venv.sh` (the first run needs python3 and access to PyPI);
//! pkg-config, make, gcc, g++ and readelf come from the system.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use commands::run_or;

#[path = "support/commands.rs"]
mod commands;
#[path = "support/venvs.rs"]
mod venvs;

/// The package version, as installed file names and the package files carry it.
const VERSION: &str = env!("CARGO_PKG_VERSION");
const MAJOR: &str = env!("CARGO_PKG_VERSION_MAJOR");
const MINOR: &str = env!("CARGO_PKG_VERSION_MINOR");
const PATCH: &str = env!("CARGO_PKG_VERSION_PATCH");

/// Every path `make install` writes, relative to the prefix.
fn installed_paths() -> Vec<String> {
    let mut paths = vec![
        format!("lib/libdiscovm.so.{VERSION}"),
        format!("lib/libdiscovm.so.{MAJOR}"),
        "lib/libdiscovm.so".to_string(),
        "lib/libdiscovm.a".to_string(),
        "lib/pkgconfig/discovm.pc".to_string(),
        "lib/cmake/discovm/discovmConfig.cmake".to_string(),
        "lib/cmake/discovm/discovmConfigVersion.cmake".to_string(),
        "bin/discovm-node".to_string(),
        "bin/discovm-worker".to_string(),
    ];
    paths.extend(HEADERS.iter().map(|h| format!("include/{h}")));
    // The Gloo plugin, where Gloo is installed.
    if Path::new("/usr/include/gloo/allreduce.h").exists() {
        paths.push("lib/libdiscovm_gloo.so".to_string());
    }
    paths.sort();
    paths
}

const HEADERS: [&str; 3] = ["discovm.h", "discovm_abi.h", "discovm.hpp"];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// This file's scratch directory.
fn out_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("install")
}

/// A fresh, empty directory under [`out_dir`].
fn fresh_dir(name: &str) -> PathBuf {
    let dir = out_dir().join(name);
    if dir.exists() {
        fs::remove_dir_all(&dir).unwrap_or_else(|e| panic!("cannot remove {}: {e}", dir.display()));
    }
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// Runs `command` and returns its stdout; panics with everything it printed unless it exits 0.
fn run(command: &mut Command) -> String {
    run_or(command, "")
}

/// Runs `make <args>` in the repository, with this test's cargo and target directory. One at
/// a time: installs share the build they copy from.
fn make(args: &[&str]) -> String {
    static MAKE: Mutex<()> = Mutex::new(());
    let _turn = MAKE.lock().unwrap_or_else(|e| e.into_inner());
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().unwrap();
    run(Command::new("make")
        .arg("-C")
        .arg(repo())
        .args(args)
        .env("CARGO", cargo)
        .env("CARGO_TARGET_DIR", target_dir))
}

/// A prefix `make install PREFIX=...` installed into, once per test run.
fn prefix() -> &'static Path {
    static PREFIX: OnceLock<PathBuf> = OnceLock::new();
    PREFIX.get_or_init(|| {
        let prefix = fresh_dir("prefix");
        make(&["install", &format!("PREFIX={}", prefix.display())]);
        prefix
    })
}

/// Every file and symbolic link under `root`, as sorted paths relative to it.
fn files_under(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, found: &mut Vec<String>) {
        for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {dir:?}: {e}")) {
            let path = entry.unwrap().path();
            if path.is_dir() && !path.is_symlink() {
                walk(root, &path, found);
            } else {
                let relative = path.strip_prefix(root).unwrap();
                found.push(relative.to_string_lossy().into_owned());
            }
        }
    }
    let mut found = Vec::new();
    walk(root, root, &mut found);
    found.sort();
    found
}

/// The NEEDED entries of an ELF file's dynamic section, from `readelf -d`.
fn needed_libraries(binary: &Path) -> Vec<String> {
    run(Command::new("readelf").arg("-d").arg(binary))
        .lines()
        .filter(|line| line.contains("(NEEDED)"))
        .filter_map(|line| Some(line.split('[').nth(1)?.trim_end_matches(']').to_string()))
        .collect()
}

/// `pkg-config <args> discovm`, looking in the installed prefix first.
fn pkg_config(args: &[&str]) -> String {
    let mut command = Command::new("pkg-config");
    command
        .args(args)
        .arg("discovm")
        .env("PKG_CONFIG_PATH", prefix().join("lib/pkgconfig"));
    let hint = " (install pkg-config; on Debian/Ubuntu: apt-get install pkg-config)";
    run_or(&mut command, hint).trim().to_string()
}

#[test]
fn install_puts_the_libraries_headers_and_package_files_under_prefix() {
    let prefix = prefix();
    assert_eq!(files_under(prefix), installed_paths());
    let lib = prefix.join("lib");
    assert_eq!(
        fs::read_link(lib.join("libdiscovm.so")).unwrap(),
        Path::new(&format!("libdiscovm.so.{MAJOR}"))
    );
    assert_eq!(
        fs::read_link(lib.join(format!("libdiscovm.so.{MAJOR}"))).unwrap(),
        Path::new(&format!("libdiscovm.so.{VERSION}"))
    );
    let dynamic = run(Command::new("readelf")
        .arg("-d")
        .arg(lib.join("libdiscovm.so")));
    assert!(
        dynamic.contains(&format!("Library soname: [libdiscovm.so.{MAJOR}]")),
        "the installed library has no soname libdiscovm.so.{MAJOR}:\n{dynamic}"
    );
    for header in HEADERS {
        assert_eq!(
            fs::read(prefix.join("include").join(header)).unwrap(),
            fs::read(repo().join("include").join(header)).unwrap(),
            "installed {header} differs from include/{header}"
        );
    }
    for file in installed_paths()
        .iter()
        .filter(|p| p.contains("discovm.pc") || p.contains("cmake"))
    {
        let text = fs::read_to_string(prefix.join(file)).unwrap();
        assert!(
            !text.contains('@'),
            "{file} has a placeholder left:\n{text}"
        );
    }
}

#[test]
fn pkg_config_describes_the_installed_library() {
    assert_eq!(pkg_config(&["--modversion"]), VERSION);
    assert_eq!(
        pkg_config(&["--variable=prefix"]),
        prefix().display().to_string()
    );
    let lib = prefix().join("lib");
    assert_eq!(
        pkg_config(&["--libs"]),
        format!("-L{} -ldiscovm", lib.display())
    );
    let include = prefix().join("include");
    assert_eq!(
        pkg_config(&["--cflags"]),
        format!("-I{}", include.display())
    );
    let static_libs = pkg_config(&["--static", "--libs"]);
    for system_lib in ["-lpthread", "-ldl", "-lm"] {
        assert!(
            static_libs.contains(system_lib),
            "`pkg-config --static --libs discovm` lacks {system_lib}: {static_libs}"
        );
    }
}

/// Builds `tests/consumers/pkgconfig/main.c` with `flags`, runs it with `env`, and checks what
/// it printed; returns the binary.
fn build_and_run_c_consumer(name: &str, flags: &str, env: &[(&str, &Path)]) -> PathBuf {
    let binary = out_dir().join(name);
    fs::create_dir_all(out_dir()).unwrap();
    run(Command::new("gcc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror"])
        .arg(repo().join("tests/consumers/pkgconfig/main.c"))
        .arg("-o")
        .arg(&binary)
        .args(flags.split_whitespace()));
    let mut command = Command::new(&binary);
    for (key, value) in env {
        command.env(key, value);
    }
    let stdout = run(&mut command);
    assert_eq!(
        stdout,
        format!("discovm {VERSION} from C: worker ranks 0 1, process ranks 0 1\n"),
        "{name} printed something else"
    );
    binary
}

#[test]
fn pkg_config_builds_a_c_program_against_the_shared_library() {
    let flags = pkg_config(&["--cflags", "--libs"]);
    // No rpath: the loader finds libdiscovm.so.MAJOR, as it would in a system directory.
    let binary = build_and_run_c_consumer(
        "consumer_pkgconfig_shared",
        &flags,
        &[("LD_LIBRARY_PATH", &prefix().join("lib"))],
    );
    let needed = needed_libraries(&binary);
    assert!(
        needed.contains(&format!("libdiscovm.so.{MAJOR}")),
        "the program does not load the library by its soname: NEEDED {needed:?}"
    );
}

#[test]
fn pkg_config_static_builds_a_c_program_with_the_static_library() {
    // `-l:libdiscovm.a` picks the archive where `-ldiscovm` would pick the shared library; the
    // rest of `--static`'s output is the system libraries the archive needs.
    let flags = pkg_config(&["--static", "--cflags", "--libs"]);
    assert!(flags.contains("-ldiscovm"), "unexpected flags: {flags}");
    let flags = flags.replace("-ldiscovm", "-l:libdiscovm.a");
    // The library is in the program: it names the installed worker program.
    let worker = prefix().join("bin/discovm-worker");
    let binary = build_and_run_c_consumer(
        "consumer_pkgconfig_static",
        &flags,
        &[("DISCOVM_WORKER", &worker)],
    );
    let needed = needed_libraries(&binary);
    assert!(
        !needed.iter().any(|lib| lib.starts_with("libdiscovm")),
        "the statically linked program still loads libdiscovm: NEEDED {needed:?}"
    );
}

#[test]
fn cmake_find_package_builds_a_cxx_program_against_both_libraries() {
    let build = fresh_dir("cmake-build");
    let configured = run(Command::new(venvs::cmake())
        .arg("-S")
        .arg(repo().join("tests/consumers/cmake"))
        .arg("-B")
        .arg(&build)
        .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix().display())));
    let expected = format!(
        "found discovm {VERSION} in {}",
        prefix().join("lib/cmake/discovm").display()
    );
    assert!(
        configured.contains(&expected),
        "cmake did not report `{expected}`:\n{configured}"
    );
    run(Command::new(venvs::cmake()).arg("--build").arg(&build));
    let expected_output =
        format!("discovm {VERSION} from C++: worker ranks 0 1\na missing function is a KeyError\n");
    for (target, dynamic) in [("consumer_shared", true), ("consumer_static", false)] {
        let binary = build.join(target);
        // CMake gives the shared build an rpath to the installed library.
        assert_eq!(run(&mut Command::new(&binary)), expected_output, "{target}");
        let needed = needed_libraries(&binary);
        assert_eq!(
            needed.contains(&format!("libdiscovm.so.{MAJOR}")),
            dynamic,
            "{target}: NEEDED {needed:?}"
        );
    }
}

#[test]
fn cmake_version_file_accepts_the_same_minor_version_up_to_this_one() {
    // find_package sets these variables before it includes the version file; a script that
    // does the same shows what the file answers for each requested version.
    let script = out_dir().join("ask_version_file.cmake");
    fs::create_dir_all(out_dir()).unwrap();
    fs::write(
        &script,
        r#"foreach(request IN LISTS REQUESTS)
  string(REPLACE "." ";" parts "${request}")
  list(LENGTH parts PACKAGE_FIND_VERSION_COUNT)
  list(GET parts 0 PACKAGE_FIND_VERSION_MAJOR)
  set(PACKAGE_FIND_VERSION_MINOR "")
  if(PACKAGE_FIND_VERSION_COUNT GREATER 1)
    list(GET parts 1 PACKAGE_FIND_VERSION_MINOR)
  endif()
  set(PACKAGE_FIND_VERSION "${request}")
  set(CMAKE_SIZEOF_VOID_P 8)
  unset(PACKAGE_VERSION_COMPATIBLE)
  unset(PACKAGE_VERSION_EXACT)
  include("${VERSION_FILE}")
  message("${request}: compatible=${PACKAGE_VERSION_COMPATIBLE} exact=${PACKAGE_VERSION_EXACT}")
endforeach()
"#,
    )
    .unwrap();
    let major: u32 = MAJOR.parse().unwrap();
    let minor: u32 = MINOR.parse().unwrap();
    let same_minor = format!("{major}.{minor}");
    let next_minor = format!("{major}.{}", minor + 1);
    let next_major = format!("{}.0", major + 1);
    let requests = [VERSION, &same_minor, &next_minor, &next_major].join(";");
    let output = Command::new(venvs::cmake())
        .arg(format!("-DREQUESTS={requests}"))
        .arg(format!(
            "-DVERSION_FILE={}",
            prefix()
                .join("lib/cmake/discovm/discovmConfigVersion.cmake")
                .display()
        ))
        .arg("-P")
        .arg(&script)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    // message() without a mode prints to stderr.
    let answers = String::from_utf8_lossy(&output.stderr);
    let expected = [
        format!("{VERSION}: compatible=TRUE exact=TRUE"),
        // CMake compares versions padded with zeros: 0.1 equals 0.1.0.
        format!(
            "{same_minor}: compatible=TRUE exact={}",
            if PATCH == "0" { "TRUE" } else { "" }
        ),
        format!("{next_minor}: compatible=FALSE exact="),
        format!("{next_major}: compatible=FALSE exact="),
    ];
    assert_eq!(answers.lines().collect::<Vec<_>>(), expected, "{answers}");
}

#[test]
fn destdir_stages_the_same_files_and_uninstall_removes_them() {
    let stage = fresh_dir("stage");
    let destdir = format!("DESTDIR={}", stage.display());
    let final_prefix = "/opt/discovm";
    let prefix_arg = format!("PREFIX={final_prefix}");
    make(&["install", &destdir, &prefix_arg]);
    let staged: Vec<String> = installed_paths()
        .iter()
        .map(|p| format!("opt/discovm/{p}"))
        .collect();
    assert_eq!(files_under(&stage), staged);
    // The package files name the final location, not the staging one.
    let pc = fs::read_to_string(stage.join("opt/discovm/lib/pkgconfig/discovm.pc")).unwrap();
    assert!(pc.contains(&format!("prefix={final_prefix}\n")), "{pc}");
    let config =
        fs::read_to_string(stage.join("opt/discovm/lib/cmake/discovm/discovmConfig.cmake"))
            .unwrap();
    assert!(
        config.contains(&format!("\"{final_prefix}/lib/libdiscovm.so.{VERSION}\"")),
        "{config}"
    );
    let staging = stage.display().to_string();
    assert!(!pc.contains(&staging) && !config.contains(&staging));

    make(&["uninstall", &destdir, &prefix_arg]);
    assert_eq!(files_under(&stage), Vec::<String>::new());
    assert!(!stage.join("opt/discovm/lib/cmake/discovm").exists());
}
