//! The Node.js package (`bindings/node`) as its users run it: koffi installed from the npm
//! registry into the package, `node --test` against the built library, and its example.
//! Node.js comes from Debian's `nodejs` (and npm from `npm`) where they are missing.

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

use built_library::shared_library;

fn package() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("bindings/node")
}

/// Runs `program args` in the package with the library's path, prints its output and returns
/// its stdout; panics unless it succeeds.
fn run(program: &str, args: &[&str]) -> String {
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(package())
        .env("DISCOVM_LIBRARY", shared_library());
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

/// Node.js, npm, koffi in the package, the library and its worker and node programs.
fn setup() {
    static READY: OnceLock<()> = OnceLock::new();
    READY.get_or_init(|| {
        toolchains::require("node", "--version", "nodejs");
        toolchains::require("npm", "--version", "npm");
        if !package().join("node_modules/koffi").is_dir() {
            run("npm", &["install", "--no-audit", "--no-fund"]);
        }
        worker_programs::default_worker_program();
        worker_programs::node_program();
    });
}

#[test]
fn node_tests_pass() {
    setup();
    let tests: Vec<String> = std::fs::read_dir(package().join("test"))
        .expect("bindings/node/test is readable")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".test.js"))
        .map(|name| format!("test/{name}"))
        .collect();
    let mut args = vec!["--test"];
    args.extend(tests.iter().map(String::as_str));
    let out = run("node", &args);
    assert!(out.contains("# fail 0"), "{out}");
    assert!(out.contains("# skipped 0"), "{out}");
}

#[test]
fn node_example_runs() {
    setup();
    let out = run("node", &["example/session.js"]);
    assert!(out.contains("example.scale(10) on worker 3 = 40"), "{out}");
    assert!(
        out.contains("broadcast, then summed over 4 workers: [ 4, 8, 12, 16, 20, 24 ]"),
        "{out}"
    );
}
