//! The GPU check's bundle (`scripts/gpu-build.sh`) builds, and its script
//! (`scripts/gpu-check.sh`) runs from the unpacked bundle, away from the source tree: every step
//! passes or, without a GPU, NCCL or a DLPack consumer, says it skipped and why; none fails.
//! This keeps the check ready for the GPU machines, which have no Rust toolchain to rebuild it.

#[path = "support/commands.rs"]
mod commands;

use std::path::Path;
use std::process::Command;

/// The steps the script reports, in its order.
const STEPS: [&str; 9] = [
    "device_count",
    "cuda_roundtrip",
    "cuda_soft_sync",
    "cuda_small_access",
    "cuda_default_stream",
    "cuda_session",
    "cuda_nccl",
    "dlpack_cuda",
    "cuda_copy_bench",
];

#[test]
fn the_gpu_bundle_builds_and_its_check_fails_nothing() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let built = commands::run_or(
        Command::new("bash").arg(root.join("scripts/gpu-build.sh")),
        " (bash is needed to build the bundle)",
    );
    assert!(built.contains("built target/gpu-bundle"), "{built}");

    // Unpacked elsewhere, as on the GPU machine.
    let place = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gpu-check");
    let _ = std::fs::remove_dir_all(&place);
    std::fs::create_dir_all(&place).unwrap();
    commands::run_or(
        Command::new("tar")
            .arg("xzf")
            .arg(root.join("target/gpu-bundle.tar.gz"))
            .arg("-C")
            .arg(&place),
        "",
    );
    let results = place.join("results");
    let output = Command::new(place.join("gpu-bundle/gpu-check.sh"))
        .arg(&results)
        .current_dir(&place)
        .output()
        .expect("the check script runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let code = output.status.code();
    assert!(
        code == Some(0) || code == Some(77),
        "the GPU check failed ({:?}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    for step in STEPS {
        let at = lines
            .iter()
            .position(|line| line.split_whitespace().next() == Some(step))
            .unwrap_or_else(|| panic!("no line for step {step}:\n{stdout}"));
        let verdict = lines[at].split_whitespace().nth(1);
        assert!(
            matches!(verdict, Some("PASS" | "SKIP")),
            "{}\n{stdout}",
            lines[at]
        );
        // A skipped step says why, on the line after it.
        if verdict == Some("SKIP") {
            let reason = lines.get(at + 1).copied().unwrap_or_default();
            assert!(
                reason.contains("skipped"),
                "{step} gives no reason:\n{stdout}"
            );
        }
    }
    assert!(results.join("benchmarks.md").exists());
}
