//! The crate's layers import only downward, and no cycle of files spans two folders.
//!
//! The order of the layers is the list in `src/lib.rs`'s doc (`//! - [`abi`]: ...`), read here,
//! so it is written once. Every top-level module of `src/` must be in it. Each non-test file's
//! imports are read from its text: `use` trees and every `crate::`, `super::` or `self::` path,
//! each resolved to the longest module it names. Test files (`tests.rs`, files under a `tests`
//! folder, loom models) and `#[cfg(test)]`/`#[cfg(loom)]` module bodies are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

type Module = Vec<String>;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The layers from the bottom up, as `lib.rs`'s doc lists them.
fn layers() -> Vec<String> {
    let lib = fs::read_to_string(src().join("lib.rs")).expect("src/lib.rs");
    lib.lines()
        .filter_map(|line| line.strip_prefix("//! - "))
        .filter_map(|item| {
            let item = item.trim_start_matches('[');
            let name = item.strip_prefix('`')?;
            Some(name[..name.find('`')?].to_string())
        })
        .collect()
}

fn is_test_file(rel: &Path) -> bool {
    let name = rel.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || name.contains("loom_model")
        || rel.components().any(|c| c.as_os_str() == "tests")
}

fn module_of(rel: &Path) -> Module {
    let mut parts: Module = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The text less comments and the bodies of test and model-checking modules.
fn code_of(text: &str) -> String {
    let mut code = String::with_capacity(text.len());
    for line in text.lines() {
        code.push_str(line.find("//").map_or(line, |at| &line[..at]));
        code.push('\n');
    }
    let mut out = String::with_capacity(code.len());
    let mut rest = code.as_str();
    while let Some(at) = ["#[cfg(test)]", "#[cfg(loom)]", "#[cfg(all(test"]
        .iter()
        .filter_map(|attr| rest.find(attr))
        .min()
    {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let attr_end = after.find(']').map_or(after.len(), |e| e + 1);
        let item = after[attr_end..].trim_start();
        let is_module_body = item
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub ")
            .starts_with("mod ")
            && item
                .find('{')
                .is_some_and(|brace| item.find(';').is_none_or(|semi| brace < semi));
        if !is_module_body {
            out.push_str(&after[..attr_end]);
            rest = &after[attr_end..];
            continue;
        }
        let open = after.find('{').expect("checked above");
        let mut depth = 0usize;
        let mut end = after.len();
        for (i, ch) in after[open..].char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// `a::{b, c::{d, e}}` as `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(open) = tree.find('{') else {
        return vec![tree];
    };
    let (head, body) = (&tree[..open], &tree[open + 1..]);
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, ch) in body.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' if depth == 0 => {
                parts.push(&body[start..i]);
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| expand(p).into_iter().map(move |q| format!("{head}{q}")))
        .collect()
}

/// Every `crate::`, `super::` and `self::` path in `code`, `use` trees expanded.
fn paths_in(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let starts_word =
            at == 0 || !rest[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_');
        let tail = &rest[at + 4..];
        match tail.find(';') {
            Some(end) if starts_word => {
                paths.extend(expand(&tail[..end]));
                rest = &tail[end..];
            }
            _ => rest = tail,
        }
    }
    let bytes = code.as_bytes();
    for root in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(root) {
            let at = from + i;
            from = at + root.len();
            if at > 0
                && (bytes[at - 1].is_ascii_alphanumeric()
                    || bytes[at - 1] == b'_'
                    || bytes[at - 1] == b':')
            {
                continue;
            }
            let end = code[at..]
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .map_or(code.len(), |e| at + e);
            let path = code[at..end].trim_end_matches(':');
            if path.contains("::") {
                paths.push(path.to_string());
            }
        }
    }
    paths
}

/// The module `path`, written in `module`, names (the longest one that exists).
fn resolve(module: &Module, path: &str, modules: &BTreeSet<Module>) -> Option<Module> {
    let path = path.split(" as ").next().unwrap_or(path);
    let mut segs: Vec<&str> = path.split("::").collect();
    let mut base = module.clone();
    match segs.first().copied() {
        Some("crate") => {
            base.clear();
            segs.remove(0);
        }
        Some("self") => {
            segs.remove(0);
        }
        Some("super") => {
            while segs.first() == Some(&"super") {
                base.pop();
                segs.remove(0);
            }
        }
        _ => return None,
    }
    base.extend(
        segs.iter()
            .filter(|s| !s.is_empty() && **s != "self" && **s != "*")
            .map(|s| s.to_string()),
    );
    (1..=base.len())
        .rev()
        .map(|n| base[..n].to_vec())
        .find(|m| modules.contains(m))
}

struct Graph {
    /// Each module's file, relative to `src/`.
    files: BTreeMap<Module, PathBuf>,
    edges: BTreeMap<Module, BTreeSet<Module>>,
}

fn graph() -> Graph {
    let root = src();
    let mut paths = Vec::new();
    rust_files(&root, &mut paths);
    let files: BTreeMap<Module, PathBuf> = paths
        .into_iter()
        .map(|p| p.strip_prefix(&root).expect("under src").to_path_buf())
        .filter(|rel| !is_test_file(rel))
        .map(|rel| (module_of(&rel), rel))
        .collect();
    let modules: BTreeSet<Module> = files.keys().cloned().collect();
    let edges = files
        .iter()
        .map(|(module, rel)| {
            let text = fs::read_to_string(root.join(rel)).expect("a source file");
            let targets = paths_in(&code_of(&text))
                .iter()
                .filter_map(|p| resolve(module, p, &modules))
                .filter(|t| t != module)
                .collect();
            (module.clone(), targets)
        })
        .collect();
    Graph { files, edges }
}

fn name(module: &Module) -> String {
    if module.is_empty() {
        "lib".into()
    } else {
        module.join("::")
    }
}

/// The strongly connected components of more than one module (Tarjan's algorithm).
fn cycles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct State<'a> {
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on_stack: BTreeSet<&'a Module>,
        out: Vec<Vec<Module>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a Module) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in &s.edges[v] {
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            loop {
                let w = s.stack.pop().expect("v is on the stack");
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                s.out.push(component);
            }
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !state.index.contains_key(v) {
            visit(&mut state, v);
        }
    }
    state.out
}

#[test]
fn lib_lists_every_top_level_module_once() {
    let layers = layers();
    let graph = graph();
    let tops: BTreeSet<&str> = graph
        .files
        .keys()
        .filter_map(|m| m.first().map(String::as_str))
        .collect();
    let listed: BTreeSet<&str> = layers.iter().map(String::as_str).collect();
    assert_eq!(
        listed.len(),
        layers.len(),
        "lib.rs lists a layer twice: {layers:?}"
    );
    assert_eq!(
        tops, listed,
        "the layers lib.rs lists are not the top-level modules of src/"
    );
}

#[test]
fn every_import_points_down_the_layers() {
    let layers = layers();
    let rank = |m: &Module| {
        m.first()
            .and_then(|top| layers.iter().position(|l| l == top))
    };
    let graph = graph();
    let upward: Vec<String> = graph
        .edges
        .iter()
        .flat_map(|(from, tos)| tos.iter().map(move |to| (from, to)))
        .filter(|(from, to)| matches!((rank(from), rank(to)), (Some(a), Some(b)) if b > a))
        .map(|(from, to)| {
            format!(
                "{} ({}) imports {}",
                name(from),
                graph.files[from].display(),
                name(to)
            )
        })
        .collect();
    assert!(
        upward.is_empty(),
        "imports that point up the layers ({}):\n{}",
        layers.join(", "),
        upward.join("\n")
    );
}

#[test]
fn no_cycle_of_files_spans_two_folders() {
    let graph = graph();
    let spanning: Vec<String> = cycles(&graph.edges)
        .into_iter()
        .filter_map(|cycle| {
            let folders: BTreeSet<&Path> = cycle
                .iter()
                .map(|m| graph.files[m].parent().unwrap_or(Path::new("")))
                .collect();
            (folders.len() > 1).then(|| {
                let mut names: Vec<String> = cycle.iter().map(name).collect();
                names.sort();
                format!("{} (folders: {folders:?})", names.join(", "))
            })
        })
        .collect();
    assert!(
        spanning.is_empty(),
        "cycles of files across folders:\n{}",
        spanning.join("\n")
    );
}

#[test]
fn the_reader_sees_imports_cycles_and_test_modules() {
    // The checks above are only as good as the reading: a known edge, a known file left out,
    // and the folder-spanning cycle it would find in a made-up graph.
    let graph = graph();
    let session = vec!["session".to_string(), "controller".to_string()];
    assert!(graph.edges[&session].contains(&vec!["worker".to_string(), "message".to_string()]));
    assert!(
        !graph
            .files
            .keys()
            .any(|m| m.last().is_some_and(|l| l == "tests"))
    );
    let code = code_of(
        "use a::b;\n#[cfg(test)]\nmod tests {\n    use crate::x::y;\n}\nuse crate::{p, q::{r, s}};\n",
    );
    let found: BTreeSet<String> = paths_in(&code).into_iter().collect();
    let expected = ["a::b", "crate::p", "crate::q::r", "crate::q::s"];
    assert_eq!(
        found,
        expected.map(String::from).into(),
        "paths read from {code:?}"
    );
    let m = |s: &str| s.split("::").map(String::from).collect::<Module>();
    let edges: BTreeMap<Module, BTreeSet<Module>> = [
        (m("a::x"), [m("b::y")].into()),
        (m("b::y"), [m("a::x")].into()),
        (m("c"), BTreeSet::new()),
    ]
    .into();
    let found = cycles(&edges);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].len(), 2);
}
