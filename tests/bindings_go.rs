//! The Go package (`bindings/go`) as its users run it: `go test` against the built library,
//! found through a pkg-config file of the build tree, plainly, under the cgo pointer checks
//! with a collection at every allocation (`GODEBUG=cgocheck=2 GOGC=1`) and under the race
//! detector; and its example. Go comes from Debian's `golang-go` where it is missing.

#[path = "support/built_library.rs"]
mod built_library;
#[path = "support/c_build.rs"]
mod c_build;
#[path = "support/toolchains.rs"]
mod toolchains;
#[path = "support/worker_programs.rs"]
mod worker_programs;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use built_library::{shared_library, shared_library_dir};

/// The package's directory.
fn package() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("bindings/go")
}

/// Go, the library, its worker and node programs, and a `discovm.pc` naming the build tree
/// (from the template `make install` fills in); the directory of that file.
fn setup() -> &'static Path {
    static PKG_CONFIG: OnceLock<PathBuf> = OnceLock::new();
    PKG_CONFIG.get_or_init(|| {
        toolchains::require("go", "version", "golang-go");
        toolchains::require("pkg-config", "--version", "pkg-config");
        worker_programs::default_worker_program();
        worker_programs::node_program();
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let template = std::fs::read_to_string(repo.join("packaging/discovm.pc.in"))
            .expect("packaging/discovm.pc.in is readable");
        let pc = template
            .replace("@PREFIX@", &repo.display().to_string())
            .replace("@LIBDIR@", &shared_library_dir().display().to_string())
            .replace("@INCLUDEDIR@", &repo.join("include").display().to_string())
            .replace("@VERSION@", env!("CARGO_PKG_VERSION"))
            .replace("@NATIVE_STATIC_LIBS@", "");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bindings-go-pkgconfig");
        std::fs::create_dir_all(&dir).expect("the pkg-config directory is made");
        std::fs::write(dir.join("discovm.pc"), pc).expect("discovm.pc is written");
        dir
    })
}

/// Runs `go args` in the package with the library's environment and `env`, prints its
/// output, and returns its stdout; panics unless it succeeds.
fn go(args: &[&str], env: &[(&str, &str)]) -> String {
    let mut command = Command::new("go");
    command
        .args(args)
        .current_dir(package())
        .env("PKG_CONFIG_PATH", setup())
        .env("LD_LIBRARY_PATH", shared_library_dir())
        .env("DISCOVM_LIBRARY", shared_library())
        .envs(env.iter().copied());
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    println!("{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(
        output.status.success(),
        "{}",
        c_build::describe(&command, &output)
    );
    stdout
}

#[test]
fn go_tests_pass() {
    let out = go(&["test", "-count=1", "-v", "./..."], &[]);
    assert!(
        out.contains("--- PASS: TestHeaderMatchesTheBinding"),
        "{out}"
    );
    assert!(out.contains("--- PASS: TestSocketSessions"), "{out}");
}

#[test]
fn go_tests_pass_under_cgo_checks_and_gc_stress() {
    go(
        &["test", "-count=1", "./..."],
        &[("GODEBUG", "cgocheck=2"), ("GOGC", "1")],
    );
}

#[test]
fn go_tests_pass_under_the_race_detector() {
    go(&["test", "-count=1", "-race", "./..."], &[]);
}

#[test]
fn go_example_runs() {
    let out = go(&["run", "./example"], &[]);
    assert!(out.contains("example.scale(10) on worker 3 = 40"), "{out}");
    assert!(
        out.contains("broadcast, then summed over 4 workers: [4 8 12 16 20 24]"),
        "{out}"
    );
}
