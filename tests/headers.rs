//! Checks on the C headers in `include/`.
//!
//! - `discovm_abi.h` and `discovm.h` compile alone and twice in one unit, as C11 and C++17,
//!   with `-Wall -Wextra -Werror -pedantic` (gcc and g++), and so does the hygiene program
//!   `tests/c/header_hygiene.c`, in both languages. `discovm.hpp` does as C++17
//!   (`tests/c_programs.rs` instantiates its templates in C++ programs built with stricter
//!   warnings still).
//! - `tests/c/abi_vs_tvm_ffi.c` compiles and runs against Apache TVM's FFI headers, in both
//!   include orders, as C11 and C++17: every mirrored layout and type index matches, and the
//!   DLPack types `discovm_abi.h` defines are the same as `dlpack.h`'s. The tvm-ffi headers come
//!   from a Python virtual environment made by `tests/support/tvm_ffi_venv.sh`; the first run
//!   needs python3 (with venv) and access to PyPI.

#[path = "support/commands.rs"]
mod commands;
#[path = "support/venvs.rs"]
mod venvs;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use commands::run_or;

const WARNINGS: [&str; 4] = ["-Wall", "-Wextra", "-Werror", "-pedantic"];

/// A language the headers must compile in.
struct Lang {
    name: &'static str,
    compiler: &'static str,
    std: &'static str,
    /// Value for `-x`, so a `.c` file can be compiled as C++.
    x: &'static str,
    ext: &'static str,
}

const C11: Lang = Lang {
    name: "c11",
    compiler: "gcc",
    std: "-std=c11",
    x: "c",
    ext: "c",
};
const CXX17: Lang = Lang {
    name: "cxx17",
    compiler: "g++",
    std: "-std=c++17",
    x: "c++",
    ext: "cpp",
};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Where this file's tests write their sources and programs.
fn out_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("headers");
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// Runs `command` and returns its stdout; panics unless it exits with status 0.
fn run(command: &mut Command) -> String {
    run_or(command, " (are gcc and g++ installed?)")
}

/// A compiler command for `lang` with the project's warning flags and `include/` on the path.
fn compiler(lang: &Lang) -> Command {
    let mut command = Command::new(lang.compiler);
    command
        .arg(lang.std)
        .args(WARNINGS)
        .arg("-I")
        .arg(repo().join("include"));
    command
}

/// Checks that `header` compiles alone and included twice in one unit, as C11 and C++17.
fn check_header_alone_and_twice(header: &str) {
    let path = repo().join("include").join(header);
    assert!(
        path.is_file(),
        "{} not found. discovm.h is generated from the crate by cbindgen (cbindgen.toml) and \
         committed; generate it and run the tests again",
        path.display()
    );
    for lang in [&C11, &CXX17] {
        for copies in [1, 2] {
            let unit = out_dir().join(format!("{header}.{}.{copies}.{}", lang.name, lang.ext));
            fs::write(&unit, format!("#include \"{header}\"\n").repeat(copies)).unwrap();
            run(compiler(lang).arg("-fsyntax-only").arg(&unit));
        }
    }
}

#[test]
fn abi_header_compiles_alone_and_twice_as_c11_and_cxx17() {
    check_header_alone_and_twice("discovm_abi.h");
}

#[test]
fn api_header_compiles_alone_and_twice_as_c11_and_cxx17() {
    check_header_alone_and_twice("discovm.h");
}

#[test]
fn cxx_header_compiles_alone_and_twice_as_cxx17() {
    for copies in [1, 2] {
        let unit = out_dir().join(format!("discovm.hpp.{copies}.cpp"));
        fs::write(&unit, "#include \"discovm.hpp\"\n".repeat(copies)).unwrap();
        run(compiler(&CXX17).arg("-fsyntax-only").arg(&unit));
    }
}

#[test]
fn hygiene_program_compiles_as_c11_and_cxx17() {
    for lang in [&C11, &CXX17] {
        let source = repo().join("tests/c/header_hygiene.c");
        run(compiler(lang)
            .arg("-fsyntax-only")
            .arg("-x")
            .arg(lang.x)
            .arg(source));
    }
}

/// Builds and runs `tests/c/abi_vs_tvm_ffi.c` as `lang`; returns what it printed.
fn run_abi_check(lang: &Lang, tvm_ffi_first: bool) -> String {
    let order = if tvm_ffi_first {
        "tvm_ffi_first"
    } else {
        "discovm_first"
    };
    let program = out_dir().join(format!("abi_vs_tvm_ffi.{}.{order}", lang.name));
    let mut command = compiler(lang);
    command.arg("-isystem").arg(venvs::tvm_ffi_include_dir());
    if tvm_ffi_first {
        command.arg("-DDVM_TVM_FFI_FIRST");
    }
    command
        .arg("-x")
        .arg(lang.x)
        .arg(repo().join("tests/c/abi_vs_tvm_ffi.c"));
    run(command.arg("-o").arg(&program));
    let stdout = run(&mut Command::new(&program));
    let summary = stdout.lines().last().unwrap_or("");
    assert!(
        summary.contains("match tvm-ffi"),
        "unexpected output from {}:\n{stdout}",
        program.display()
    );
    println!("{summary}");
    stdout
}

/// The lines of `output` that describe the DLPack types.
fn dlpack_lines(output: &str) -> Vec<&str> {
    output
        .lines()
        .filter(|line| line.starts_with("dlpack "))
        .collect()
}

#[test]
fn abi_header_matches_tvm_ffi_in_both_include_orders() {
    // With tvm-ffi's headers first, the DLPack types come from dlpack.h: that is the reference.
    let reference = run_abi_check(&C11, true);
    let expected = dlpack_lines(&reference);
    assert!(expected.len() > 50, "too few DLPack lines in:\n{reference}");
    for (lang, tvm_ffi_first) in [(&C11, false), (&CXX17, true), (&CXX17, false)] {
        let output = run_abi_check(lang, tvm_ffi_first);
        let actual = dlpack_lines(&output);
        let differences: Vec<String> = expected
            .iter()
            .zip(&actual)
            .filter(|(e, a)| e != a)
            .map(|(e, a)| format!("  dlpack.h: {e}\n  here:     {a}"))
            .collect();
        assert!(
            differences.is_empty() && expected.len() == actual.len(),
            "DLPack as seen by {} (tvm-ffi first: {tvm_ffi_first}) differs from dlpack.h:\n{}",
            lang.name,
            differences.join("\n")
        );
    }
}

/// Every constant of tvm-ffi's type-index, deleter-flag and backtrace-mode enums must be
/// compared by `abi_vs_tvm_ffi.c` (and hence exist in discovm_abi.h with the same value).
#[test]
fn abi_check_covers_every_tvm_ffi_type_index() {
    let c_api_path = venvs::tvm_ffi_include_dir().join("tvm/ffi/c_api.h");
    let c_api = fs::read_to_string(&c_api_path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", c_api_path.display()));
    let check = fs::read_to_string(repo().join("tests/c/abi_vs_tvm_ffi.c")).unwrap();

    let begin = c_api
        .find("[TVMFFITypeIndex.begin]")
        .expect("type-index start marker in c_api.h");
    let end = c_api
        .find("[TVMFFITypeIndex.end]")
        .expect("type-index end marker in c_api.h");
    let type_index_block = &c_api[begin..end];

    let identifiers = |text: &str| -> Vec<String> {
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter_map(|word| word.strip_prefix("kTVMFFI"))
            .map(str::to_owned)
            .collect()
    };
    let mut names = identifiers(type_index_block);
    names.extend(identifiers(&c_api).into_iter().filter(|name| {
        name.starts_with("ObjectDeleterFlagBitMask") || name.starts_with("BacktraceUpdateMode")
    }));
    names.sort();
    names.dedup();
    assert!(
        names.len() >= 38,
        "found too few constants in {}: {names:?}",
        c_api_path.display()
    );

    let missing: Vec<&String> = names
        .iter()
        .filter(|name| !check.contains(&format!("SAME({name})")))
        .collect();
    assert!(
        missing.is_empty(),
        "tests/c/abi_vs_tvm_ffi.c does not compare these tvm-ffi constants (add kDVM<name> to \
         discovm_abi.h and SAME(<name>) to the test): {missing:?}"
    );
}
