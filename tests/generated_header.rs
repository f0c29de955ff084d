//! The committed `include/discovm.h` must equal a fresh cbindgen run over the sources.
//! Regenerate it with `make header` (or `DVM_WRITE_HEADER=1 cargo test --test generated_header`).

use std::path::Path;

#[test]
fn committed_header_matches_the_sources() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config =
        cbindgen::Config::from_file(root.join("cbindgen.toml")).expect("cbindgen.toml parses");
    let bindings = cbindgen::Builder::new()
        .with_crate(root)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut fresh = Vec::new();
    bindings.write(&mut fresh);
    let path = root.join("include/discovm.h");
    if std::env::var_os("DVM_WRITE_HEADER").is_some() {
        std::fs::write(&path, &fresh).expect("include/discovm.h is writable");
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "include/discovm.h is stale: regenerate it with `make header` and commit the result"
    );
}
