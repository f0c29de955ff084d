//! Runs the loom models of the crate's hand-made concurrent protocols (the `loom_model`
//! modules under `src/`, every test whose path holds `loom_model`): the channel's
//! spin-then-park wait, the shared-memory ring's waits on its futex words, the small-memory
//! access handshake, and register freeing order in a session. A model runs its threads
//! through every interleaving loom generates up to a bound on preemptions, with loom's
//! weak-memory semantics for every load, and fails on a deadlock (a lost wake-up: a park has
//! no timeout in a model), a failed assertion or a data race on loom's atomics.
//!
//! The models need a build of their own with `--cfg loom`, which swaps the crate's
//! synchronisation primitives (`src/sync/`) for loom's; it goes to `target/loom`, optimised,
//! as the models run hundreds of thousands of executions. By hand:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test --release --lib --target-dir target/loom -- loom_model --nocapture
//! ```
//!
//! Each model prints how many executions it explored; this test prints those lines.

use std::path::Path;
use std::process::Command;

#[test]
fn loom_models_pass() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    // CARGO_TARGET_TMPDIR is <target dir>/tmp.
    let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the tmp directory is inside the target directory")
        .join("loom");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let mut command = Command::new(cargo);
    command
        .args(["test", "--release", "--lib", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target_dir)
        .args(["--", "loom_model", "--nocapture", "--test-threads=1"])
        .env("RUSTFLAGS", "--cfg loom")
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the loom models failed ({}); rerun them by hand (see tests/loom.rs)\n--- stdout\n\
         {stdout}--- stderr\n{stderr}",
        output.status
    );
    let explored: Vec<&str> = stdout
        .lines()
        .filter_map(|line| line.find("loom model `").map(|at| &line[at..]))
        .collect();
    // "test result: ok. 6 passed; 0 failed; ..."
    let passed: usize = stdout
        .lines()
        .find_map(|line| line.strip_prefix("test result: ok. "))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|count| count.parse().ok())
        .unwrap_or(0);
    assert!(
        passed > 0 && explored.len() == passed,
        "expected one exploration report per passing model ({passed} passed):\n{stdout}"
    );
    for line in explored {
        println!("{line}");
    }
}
