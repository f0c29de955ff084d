//! Bad input, mechanically: every function the shared library exports (its `dvm_*` C API and
//! its `__tvm_ffi_*` entry points, read from its symbol table) gets calls with bad arguments,
//! and each must fail with its documented status, the matching error kind and a message that
//! names the offending argument by its parameter name, write nothing to its outputs, and leave
//! the library working (checked after every case). A function without cases fails the test, so
//! a new export cannot escape the table.
//!
//! Most cases are generated from the declarations: the parameters of each C function as
//! `include/discovm.h` declares them (NULL for each pointer, every other kind of object for
//! each handle, malformed packed values for each `DVMAny` argument, negative counts, workers out
//! of range) and the parameters of each entry point as `TVM_FFI.md` documents them (a value of
//! the wrong type and malformed values for each argument, missing and extra arguments). The
//! rest are written out: integers out of range, mismatched tensors, shut-down sessions, freed
//! and recreated streams. The functions are called through their C signatures, from Rust so
//! that the table can be built from the declarations and checked against the symbol table.

#[path = "../support/built_library.rs"]
mod built_library;
#[path = "../support/exported_symbols.rs"]
mod exported_symbols;

mod c_api;
mod fixture;
mod tvm_ffi;

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::sync::OnceLock;

use discovm::capi::*;
use fixture::Fixture;

/// What a call returned, in the form its function reports failure with.
#[derive(Clone, Copy, Debug)]
pub enum Returned {
    /// A `dvm_status`.
    Status(dvm_status),
    /// A packed call's return value: 0, or -1 after raising an error.
    Packed(i32),
    /// For functions with an error value (-1, NULL): whether they returned it.
    ErrorValue(bool),
    /// `void`: failures show only in the calling thread's last error.
    Nothing,
}

/// The error kinds, as the library names them.
pub use discovm::ErrorKind as Kind;

/// The status `include/discovm.h` documents for `kind`: each `#define DVM_<KIND> <code>` there
/// follows a comment that opens with the kind's name ("`ValueError`: ...").
fn documented_status(kind: &Kind) -> dvm_status {
    static STATUSES: OnceLock<BTreeMap<String, dvm_status>> = OnceLock::new();
    let statuses = STATUSES.get_or_init(|| {
        let header = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("include/discovm.h"),
        )
        .expect("include/discovm.h is readable");
        let mut statuses = BTreeMap::new();
        let mut documented = None;
        for line in header.lines() {
            if let Some(rest) = line.trim_start().strip_prefix("* `") {
                documented = rest.split_once("`:").map(|(name, _)| name.to_string());
            } else if let Some(define) = line.strip_prefix("#define DVM_") {
                let code = define
                    .split_whitespace()
                    .nth(1)
                    .and_then(|c| c.parse().ok());
                if let (Some(name), Some(code)) = (documented.take(), code) {
                    statuses.insert(name, code);
                }
            }
        }
        statuses
    });
    match statuses.get(kind.name()) {
        Some(&status) => status,
        None => panic!(
            "include/discovm.h documents no status for {} (it documents {statuses:?})",
            kind.name()
        ),
    }
}

/// How a case must end.
pub enum Expect {
    /// Fails with `kind`; the message has `names` as a word of its own (the offending
    /// parameter's name) and contains `text`.
    Error {
        kind: Kind,
        names: String,
        text: String,
    },
    /// Succeeds without raising an error: input that looks wrong but is allowed (NULL to a
    /// `_free` function, say), or a function that has no parameters to get wrong.
    Success,
    /// Leaves exactly this error as the last one (`dvm_error_raise` given NULLs: the defaults).
    Raised { kind: String, message: String },
}

/// A checked call: `run` makes it, `after` checks what it left (outputs, reference counts).
pub struct Case<'f> {
    pub function: String,
    pub what: String,
    pub run: Box<dyn FnOnce() -> Returned + 'f>,
    pub expect: Expect,
    pub after: Option<Box<dyn FnOnce() -> Result<(), String> + 'f>>,
}

impl<'f> Case<'f> {
    fn new(
        function: &str,
        what: impl Into<String>,
        run: impl FnOnce() -> Returned + 'f,
        expect: Expect,
    ) -> Case<'f> {
        Case {
            function: function.to_string(),
            what: what.into(),
            run: Box::new(run),
            expect,
            after: None,
        }
    }

    pub fn fails(
        function: &str,
        what: impl Into<String>,
        kind: Kind,
        names: &str,
        text: impl Into<String>,
        run: impl FnOnce() -> Returned + 'f,
    ) -> Case<'f> {
        let names = names.to_string();
        let text = text.into();
        Case::new(function, what, run, Expect::Error { kind, names, text })
    }

    pub fn succeeds(
        function: &str,
        what: impl Into<String>,
        run: impl FnOnce() -> Returned + 'f,
    ) -> Case<'f> {
        Case::new(function, what, run, Expect::Success)
    }

    pub fn raises(
        function: &str,
        what: impl Into<String>,
        (kind, message): (&str, &str),
        run: impl FnOnce() -> Returned + 'f,
    ) -> Case<'f> {
        let (kind, message) = (kind.to_string(), message.to_string());
        Case::new(function, what, run, Expect::Raised { kind, message })
    }

    /// Adds a check of what the call left behind.
    pub fn then(mut self, after: impl FnOnce() -> Result<(), String> + 'f) -> Case<'f> {
        self.after = Some(Box::new(after));
        self
    }
}

/// The kind the calling thread's last error has before each case, so that a call that fails
/// without raising (or raises when it should not) shows.
const MARKER: &CStr = c"NoErrorRaised";

fn last_kind_and_message() -> (Option<String>, Option<String>) {
    let read = |p: *const std::ffi::c_char| {
        // SAFETY: NULL or a NUL-terminated string valid until the next error on this thread.
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    (read(dvm_last_error_kind()), read(dvm_last_error_message()))
}

/// Whether `word` appears in `text` with no identifier character on either side.
fn has_word(text: &str, word: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word)
        .any(|(at, _)| !text[..at].ends_with(ident) && !text[at + word.len()..].starts_with(ident))
}

fn check_outcome(returned: Returned, expect: &Expect) -> Result<(), String> {
    let (kind, message) = last_kind_and_message();
    let kind = kind.unwrap_or_default();
    let message = message.unwrap_or_default();
    match expect {
        Expect::Success => {
            let succeeded = match returned {
                Returned::Status(s) => s == DVM_OK,
                Returned::Packed(rc) => rc == 0,
                Returned::ErrorValue(failed) => !failed,
                Returned::Nothing => true,
            };
            if !succeeded || kind != MARKER.to_str().unwrap() {
                return Err(format!(
                    "expected success, got {returned:?} with last error {kind}: {message}"
                ));
            }
        }
        Expect::Raised {
            kind: expected_kind,
            message: expected_message,
        } => {
            if (&kind, &message) != (expected_kind, expected_message) {
                return Err(format!(
                    "expected {expected_kind}: \"{expected_message}\" to be raised, got \
                     {kind}: \"{message}\""
                ));
            }
        }
        Expect::Error {
            kind: expected,
            names,
            text,
        } => {
            let failed = match returned {
                Returned::Status(s) => s == documented_status(expected),
                Returned::Packed(rc) => rc == -1,
                Returned::ErrorValue(failed) => failed,
                Returned::Nothing => true,
            };
            if !failed || kind != expected.name() {
                return Err(format!(
                    "expected {} ({}), got {returned:?} with last error {kind}: {message}",
                    expected.name(),
                    documented_status(expected)
                ));
            }
            if !has_word(&message, names) {
                return Err(format!("the message does not name `{names}`: {message}"));
            }
            if !message.contains(text.as_str()) {
                return Err(format!("the message lacks \"{text}\": {message}"));
            }
        }
    }
    Ok(())
}

fn run_case(fixture: &Fixture, case: Case<'_>) -> Result<(), String> {
    // SAFETY: NUL-terminated strings.
    unsafe { dvm_error_raise(MARKER.as_ptr(), c"before the case".as_ptr()) };
    let returned = (case.run)();
    check_outcome(returned, &case.expect)?;
    if matches!(case.expect, Expect::Error { .. }) && !fixture.out_untouched() {
        return Err("the failed call wrote its output".to_string());
    }
    if let Some(after) = case.after {
        after()?;
    }
    fixture
        .check_intact()
        .map_err(|e| format!("the library is not intact after the case: {e}"))
}

/// The family a function belongs to, for the counts: its noun, without the prefix.
fn family(function: &str) -> String {
    let (api, name) = match function.strip_prefix("__tvm_ffi_") {
        Some(name) => ("tvm-ffi", name),
        None => ("C", function.trim_start_matches("dvm_")),
    };
    let noun = match name.split('_').next().unwrap_or(name) {
        "object" | "any" | "string" | "bytes" | "shape" => "values",
        "last" | "error" | "version" => "errors",
        "current" => "worker",
        "func" => "function",
        other => other,
    };
    format!("{api} {noun}")
}

#[test]
fn every_exported_function_refuses_bad_input() {
    let fixture = Fixture::new();
    fixture.check_intact().expect("the fixture works");
    let mut cases = c_api::cases(&fixture);
    cases.extend(tvm_ffi::cases(&fixture));

    let exported = exported_symbols::exported_functions(built_library::shared_library());
    let mut per_function: BTreeMap<String, usize> =
        exported.iter().map(|f| (f.clone(), 0)).collect();
    let mut stale = Vec::new();
    for case in &cases {
        match per_function.get_mut(&case.function) {
            Some(count) => *count += 1,
            None => stale.push(case.function.clone()),
        }
    }
    let uncovered: Vec<&String> = per_function
        .iter()
        .filter(|(_, count)| **count == 0)
        .map(|(f, _)| f)
        .collect();
    let mut families: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut failures = Vec::new();
    let total = cases.len();
    for case in cases {
        let entry = families.entry(family(&case.function)).or_default();
        entry.0 += 1;
        if matches!(case.expect, Expect::Error { .. }) {
            entry.1 += 1;
        }
        let label = format!("{}: {}", case.function, case.what);
        if let Err(why) = run_case(&fixture, case) {
            failures.push(format!("{label}: {why}"));
            // Judge the next cases on their own.
            fixture.rebaseline();
        }
        fixture.reset_out();
    }
    println!(
        "bad-input cases: {total} over {} functions",
        per_function.len()
    );
    for (family, (all, errors)) in &families {
        println!("  {family:<20} {all:>4} cases ({errors} must fail)");
    }
    assert!(
        failures.is_empty(),
        "{} of {total} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        uncovered.is_empty(),
        "exported functions without bad-input cases (add them to tests/bad_inputs/c_api.rs or \
         tests/bad_inputs/tvm_ffi.rs): {uncovered:?}"
    );
    assert!(
        stale.is_empty(),
        "cases for functions the library does not export: {stale:?}"
    );
    fixture.finish();
}
