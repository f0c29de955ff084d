//! The shared library exports the public C API and nothing else: every defined dynamic symbol
//! is `dvm_*` or `__tvm_ffi_*`; every function declared in `include/discovm.h` is exported, and
//! every exported `dvm_*` function is declared there; the `__tvm_ffi_*` functions (the library
//! as a tvm-ffi module) are exactly the entry points `TVM_FFI.md` documents, and that page
//! names every `dvm_*` function (the one it mirrors, or why none does).

#[path = "support/built_library.rs"]
mod built_library;
#[path = "support/exported_symbols.rs"]
mod exported_symbols;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

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

/// The defined dynamic symbols of the shared library.
fn exported_symbols() -> BTreeSet<String> {
    exported_symbols_with_kinds().into_keys().collect()
}

/// The defined dynamic symbols with nm's letter for their kind (`T`: a function).
fn exported_symbols_with_kinds() -> BTreeMap<String, String> {
    exported_symbols::exported_symbols_with_kinds(built_library::shared_library())
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

fn tvm_ffi_md() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("TVM_FFI.md"))
        .expect("TVM_FFI.md is readable")
}

/// The entry points `TVM_FFI.md` documents: the name of each row `| \`name(...` of its table.
fn documented_entry_points() -> BTreeSet<String> {
    tvm_ffi_md()
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|row| row.split_once('(').map(|(name, _)| name.to_string()))
        .collect()
}

#[test]
fn tvm_ffi_entry_points_are_functions_documented_in_tvm_ffi_md() {
    let symbols = exported_symbols_with_kinds();
    let entry_points: BTreeMap<String, &String> = symbols
        .iter()
        .filter_map(|(name, kind)| Some((name.strip_prefix("__tvm_ffi_")?.to_string(), kind)))
        .collect();
    let not_functions: Vec<_> = entry_points
        .iter()
        .filter(|(_, kind)| **kind != "T")
        .collect();
    assert!(
        not_functions.is_empty(),
        "__tvm_ffi_ symbols that are not functions: {not_functions:?}"
    );
    let exported: BTreeSet<String> = entry_points.into_keys().collect();
    let documented = documented_entry_points();
    assert!(
        exported.len() >= 35,
        "only {} entry points found",
        exported.len()
    );
    let undocumented: Vec<&String> = exported.difference(&documented).collect();
    let missing: Vec<&String> = documented.difference(&exported).collect();
    assert!(
        undocumented.is_empty() && missing.is_empty(),
        "TVM_FFI.md and the library disagree: exported as __tvm_ffi_<name> but not documented: \
         {undocumented:?}; documented but not exported: {missing:?}"
    );
}

#[test]
fn tvm_ffi_md_names_every_c_function() {
    let doc = tvm_ffi_md();
    let unnamed: Vec<String> = exported_symbols()
        .into_iter()
        .filter(|s| s.starts_with("dvm_") && !doc.contains(&format!("`{s}`")))
        .collect();
    assert!(
        unnamed.is_empty(),
        "TVM_FFI.md does not say what becomes of these C functions as tvm-ffi entry points (a \
         row mirroring each, or why none does): {unnamed:?}"
    );
}
