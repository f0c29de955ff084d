//! The shared library exports the public C API and nothing else: every defined dynamic symbol
//! is `dvm_*` (or `__tvm_ffi_*`, the tvm-ffi module exports), every function declared in
//! `include/discovm.h` is exported, and every exported `dvm_*` function is declared there.

#[path = "support/built_library.rs"]
mod built_library;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// Prefixes an exported symbol may have.
const PUBLIC_PREFIXES: [&str; 2] = ["dvm_", "__tvm_ffi_"];

/// The functions of the foundation layer; later layers add to what `discovm.h` declares.
const CORE_FUNCTIONS: [&str; 22] = [
    "dvm_any_release",
    "dvm_bytes_new",
    "dvm_error_raise",
    "dvm_func_call",
    "dvm_func_free",
    "dvm_func_get_global",
    "dvm_func_list_global_names",
    "dvm_func_new",
    "dvm_func_register_global",
    "dvm_func_remove_global",
    "dvm_last_error_kind",
    "dvm_last_error_message",
    "dvm_object_dec_ref",
    "dvm_object_inc_ref",
    "dvm_shape_new",
    "dvm_string_new",
    "dvm_tensor_dl",
    "dvm_tensor_empty",
    "dvm_tensor_free",
    "dvm_tensor_from_dlpack",
    "dvm_tensor_to_dlpack",
    "dvm_version",
];

/// The defined dynamic symbols of the shared library, from `nm -D --defined-only`.
fn exported_symbols() -> BTreeSet<String> {
    let library = built_library::shared_library();
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
        .filter_map(|line| line.split_whitespace().nth(2))
        .map(|name| name.split('@').next().unwrap().to_string())
        .collect()
}

/// The functions `include/discovm.h` declares: every `dvm_<name>(` at the start of a
/// declaration, after its return type.
fn declared_functions() -> BTreeSet<String> {
    let header =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("include/discovm.h"))
            .expect("include/discovm.h is readable");
    let mut declared = BTreeSet::new();
    for line in header.lines().filter(|l| !l.trim_start().starts_with('*')) {
        for (at, _) in line.match_indices("dvm_") {
            let name: String = line[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let boundary_before =
                at == 0 || !line[..at].ends_with(|c: char| c == '_' || c.is_ascii_alphanumeric());
            if boundary_before && line[at + name.len()..].starts_with('(') {
                declared.insert(name);
            }
        }
    }
    declared
}

#[test]
fn only_the_public_api_is_exported() {
    let symbols = exported_symbols();
    let offenders: Vec<&String> = symbols
        .iter()
        .filter(|s| !PUBLIC_PREFIXES.iter().any(|p| s.starts_with(p)))
        .collect();
    assert!(
        offenders.is_empty(),
        "libdiscovm.so exports symbols outside the public API ({} of {}): {offenders:#?}",
        offenders.len(),
        symbols.len()
    );
    println!("exported: {symbols:#?}");
}

#[test]
fn the_core_functions_are_exported() {
    let symbols = exported_symbols();
    let missing: Vec<&str> = CORE_FUNCTIONS
        .into_iter()
        .filter(|f| !symbols.contains(*f))
        .collect();
    assert!(
        missing.is_empty(),
        "libdiscovm.so does not export {missing:?}"
    );
}

#[test]
fn exports_match_the_header() {
    let symbols = exported_symbols();
    let declared = declared_functions();
    assert!(
        CORE_FUNCTIONS.iter().all(|f| declared.contains(*f)),
        "include/discovm.h lacks core functions (declared: {declared:?})"
    );
    let not_exported: Vec<&String> = declared.difference(&symbols).collect();
    assert!(
        not_exported.is_empty(),
        "include/discovm.h declares functions the library does not export: {not_exported:?}"
    );
    let undeclared: Vec<&String> = symbols
        .iter()
        .filter(|s| s.starts_with("dvm_") && !declared.contains(*s))
        .collect();
    assert!(
        undeclared.is_empty(),
        "the library exports dvm_ functions include/discovm.h does not declare (regenerate it \
         with `make header`): {undeclared:?}"
    );
}
