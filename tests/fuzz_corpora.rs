//! Replays the committed fuzz corpora (`fuzz/corpus/<target>/`) through the fuzz targets'
//! bodies (`fuzz/src/lib.rs`) in an ordinary test build, with debug assertions and overflow
//! checks: every input the fuzzers kept, and every crash they once found, stays a test. The
//! fuzzing itself, a bounded run in CI, is `fuzz/run.sh` (see fuzz/README.md).

#[path = "../fuzz/src/lib.rs"]
mod targets;

use std::fs;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

/// Runs `body` on every file of `target`'s corpus; names the inputs that failed.
fn replay(target: &str, body: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut inputs: Vec<_> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "{} holds no inputs", dir.display());
    let failed: Vec<String> = inputs
        .iter()
        .filter(|path| {
            let data = fs::read(path).unwrap();
            catch_unwind(AssertUnwindSafe(|| body(&data))).is_err()
        })
        .map(|path| path.display().to_string())
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} inputs failed (their panics are printed above): {failed:?}",
        failed.len(),
        inputs.len()
    );
}

#[test]
fn dlpack_import() {
    replay("dlpack_import", targets::dlpack_import);
}

#[test]
fn packed_value() {
    replay("packed_value", targets::packed_value);
}

#[test]
fn dtype() {
    replay("dtype", targets::dtype);
}

#[test]
fn wire_frame() {
    replay("wire_frame", targets::wire_frame);
}

#[test]
fn node_stream() {
    replay("node_stream", targets::node_stream);
}
