//! The defined dynamic symbols of a shared library, read with `nm -D --defined-only`.

#![allow(dead_code)] // each test binary uses its own part of this module

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// Every defined dynamic symbol of `library`, with nm's letter for its kind (`T`: a function).
pub fn exported_symbols_with_kinds(library: &Path) -> BTreeMap<String, String> {
    let mut nm = Command::new("nm");
    nm.args(["-D", "--defined-only"]).arg(library);
    let output = nm
        .output()
        .unwrap_or_else(|e| panic!("cannot run nm (install binutils): {e}"));
    assert!(
        output.status.success(),
        "{nm:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .expect("nm prints text")
        .lines()
        // "<address> <type> <name>[@version]"
        .filter_map(|line| {
            let mut fields = line.split_whitespace().skip(1);
            let (kind, name) = (fields.next()?, fields.next()?);
            Some((name.split('@').next()?.to_string(), kind.to_string()))
        })
        .collect()
}

/// The functions `library` exports (nm kind `T`).
pub fn exported_functions(library: &Path) -> Vec<String> {
    exported_symbols_with_kinds(library)
        .into_iter()
        .filter(|(_, kind)| kind == "T")
        .map(|(name, _)| name)
        .collect()
}
