//! The weight loader, Disco's `runtime.disco.ShardLoader*` built-ins, on worker threads, worker
//! processes and two nodes: every built-in, parameters sharded by module functions and global
//! ones, broadcast and presharded, from caches of several files in both encodings `tvmjs`
//! writes; and bad input (a missing or truncated file, a record that does not fit its shape, a
//! `shard_info` naming a function or parameter that does not exist, shards that do not match
//! the workers, a shard function that fails), each an error on every worker it concerns that
//! names the parameter and the file, after which the session loads again.
//!
//! The tests write their tensor caches themselves; the shard functions and an Array reader
//! are those of the tests' module (`support/shard_module.c`), which every kind of worker loads.

#[path = "support/built_library.rs"]
mod built_library;
#[path = "support/c_build.rs"]
mod c_build;
#[path = "support/gloo.rs"]
mod gloo;
#[path = "support/ports.rs"]
mod ports;
#[macro_use]
#[path = "support/session_kinds.rs"]
mod session_kinds;
#[path = "support/worker_programs.rs"]
mod worker_programs;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use discovm::object::{Function, Shape, registry};
use discovm::session::{DRef, Session, SessionOptions, Target};
use discovm::{Any, AnyView, Error, Result};
use session_kinds::{Kind, start};

/// A parameter of a cache written here: float32 values, stored raw or as bfloat16.
struct Param {
    name: String,
    shape: Vec<i64>,
    values: Vec<f32>,
    bf16: bool,
}

fn param(name: &str, shape: &[i64], bf16: bool, first: f32) -> Param {
    let count = shape.iter().product::<i64>() as usize;
    Param {
        name: name.to_string(),
        shape: shape.to_vec(),
        // Small integers: exact in bfloat16 too.
        values: (0..count).map(|i| first + i as f32).collect(),
        bf16,
    }
}

/// A tensor cache on disk: its folder, the path of its metadata and the metadata's text.
struct Cache {
    dir: PathBuf,
    json: String,
    text: String,
}

/// Writes `params` as `tvmjs` would: `per_file` parameters to each `params_shard_K.bin`.
fn write_cache(params: &[Param], per_file: usize) -> Cache {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "weights-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = Vec::new();
    for (k, chunk) in params.chunks(per_file).enumerate() {
        let mut data = Vec::new();
        let mut records = Vec::new();
        for p in chunk {
            let bytes: Vec<u8> = if p.bf16 {
                let halves = p.values.iter().map(|v| (v.to_bits() >> 16) as u16);
                halves.flat_map(u16::to_le_bytes).collect()
            } else {
                p.values.iter().flat_map(|v| v.to_le_bytes()).collect()
            };
            records.push(serde_json::json!({
                "name": p.name, "shape": p.shape, "dtype": "float32",
                "format": if p.bf16 { "f32-to-bf16" } else { "raw" },
                "nbytes": bytes.len(), "byteOffset": data.len(),
            }));
            data.extend(bytes);
        }
        let data_path = format!("params_shard_{k}.bin");
        std::fs::write(dir.join(&data_path), &data).unwrap();
        files.push(serde_json::json!({
            "dataPath": data_path, "format": "raw-shard", "nbytes": data.len(),
            "records": records, "md5sum": "",
        }));
    }
    let text = serde_json::json!({"metadata": {}, "records": files}).to_string();
    let json = dir.join("tensor-cache.json");
    std::fs::write(&json, &text).unwrap();
    Cache {
        json: json.to_str().unwrap().to_string(),
        dir,
        text,
    }
}

/// The tests' module (`support/shard_module.c`), built once.
fn shard_module() -> &'static str {
    static BUILT: OnceLock<String> = OnceLock::new();
    BUILT.get_or_init(|| {
        let library = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("shard_module_{}.so", std::process::id()));
        c_build::compile(
            "tests/support/shard_module.c",
            &library,
            c_build::Link::Library,
            &["-shared", "-fPIC"],
        );
        library.to_str().unwrap().to_string()
    })
}

/// A session of `kind` with two workers and the CPU communicator, and the tests' module loaded.
fn session(kind: Kind) -> (Arc<Session>, DRef) {
    let options = SessionOptions {
        // A wait that hangs fails the test instead.
        timeout: Some(Duration::from_secs(30)),
        ..SessionOptions::default()
    };
    let s = start(kind, 2, 1, options).expect("a session starts");
    s.init_ccl("cpu", &[]).unwrap();
    let module = s.load_module(shard_module()).unwrap();
    (s, module)
}

fn call(s: &Arc<Session>, func: &DRef, args: &[Any]) -> DRef {
    let views: Vec<AnyView<'_>> = args.iter().map(Any::view).collect();
    s.call(Target::All, func, &views).expect("the call is sent")
}

fn built_in(s: &Arc<Session>, name: &str, args: &[Any]) -> DRef {
    call(s, &s.get_global_func(name).unwrap(), args)
}

fn make_loader(s: &Arc<Session>, cache: &Cache, shard_info: &str, module: Option<&DRef>) -> DRef {
    let module = module.map_or(Any::None, |m| m.clone().into());
    let args = [
        cache.json.as_str().into(),
        cache.text.as_str().into(),
        shard_info.into(),
        module,
    ];
    built_in(s, "runtime.disco.ShardLoader", &args)
}

fn index(i: i64) -> Any {
    Shape::new(&[i]).into()
}

/// Worker `w`'s tensor in `dref`: its shape and values.
fn tensor_of(dref: &DRef, w: i64) -> (Vec<i64>, Vec<f32>) {
    let value = dref.get(w).unwrap_or_else(|e| panic!("worker {w}: {e:?}"));
    let tensor = value.view().as_tensor().unwrap();
    let mut bytes = vec![0u8; tensor.nbytes()];
    discovm::vm::read(&tensor, &mut bytes).unwrap();
    let values = bytes
        .chunks_exact(4)
        .map(|b| f32::from_ne_bytes(b.try_into().unwrap()))
        .collect();
    (tensor.shape().to_vec(), values)
}

/// Item `i` of the Array each worker holds in `array`.
fn item(s: &Arc<Session>, module: &DRef, array: &DRef, i: i64) -> DRef {
    let array_item = s.module_func(module, "array_item").unwrap();
    call(s, &array_item, &[array.clone().into(), Any::Int(i)])
}

/// Rows `rows` of the row-major matrix `values` with `cols` columns, columns `from..to`.
fn block(values: &[f32], cols: usize, rows: std::ops::Range<usize>, c: (usize, usize)) -> Vec<f32> {
    rows.flat_map(|r| values[r * cols + c.0..r * cols + c.1].to_vec())
        .collect()
}

/// The cache of the tests: `param_0` [4, 3] raw and `param_1` [2, 4] bfloat16 in one file,
/// `param_2` [3] raw in another.
fn cache() -> (Cache, Vec<Param>) {
    let params = vec![
        param("param_0", &[4, 3], false, 1.0),
        param("param_1", &[2, 4], true, 100.0),
        param("param_2", &[3], false, -7.0),
    ];
    (write_cache(&params, 2), params)
}

/// `param_0` in blocks of rows, `param_1` in blocks of columns, `param_2` whole.
const SHARD_INFO: &str = r#"{
    "param_0": [["shard_rows", [[2, 2, 3], "float32"], 2]],
    "param_1": [["shard_cols", [[2, 2, 2], "float32"], 2]]
}"#;

/// Each worker's part of each parameter of [`cache`] as [`SHARD_INFO`] cuts them.
fn expected_parts(params: &[Param], w: usize) -> Vec<(Vec<i64>, Vec<f32>)> {
    vec![
        (
            vec![2, 3],
            block(&params[0].values, 3, 2 * w..2 * w + 2, (0, 3)),
        ),
        (
            vec![2, 2],
            block(&params[1].values, 4, 0..2, (2 * w, 2 * w + 2)),
        ),
        (vec![3], params[2].values.clone()),
    ]
}

fn every_built_in_gives_each_worker_its_part(kind: Kind) {
    let (s, module) = session(kind);
    let (cache, params) = cache();
    let loader = make_loader(&s, &cache, SHARD_INFO, Some(&module));
    // One parameter at a time, and all at once.
    let one_by_one: Vec<DRef> = (0..3)
        .map(|i| {
            built_in(
                &s,
                "runtime.disco.ShardLoaderLoad",
                &[loader.clone().into(), index(i)],
            )
        })
        .collect();
    let all = built_in(
        &s,
        "runtime.disco.ShardLoaderLoadAll",
        &[loader.clone().into()],
    );
    for w in 0..2 {
        let expected = expected_parts(&params, w);
        for (i, part) in expected.iter().enumerate() {
            assert_eq!(
                &tensor_of(&one_by_one[i], w as i64),
                part,
                "worker {w}, param {i}"
            );
            let from_all = item(&s, &module, &all, i as i64);
            assert_eq!(
                &tensor_of(&from_all, w as i64),
                part,
                "load all: worker {w}, param {i}"
            );
        }
    }
    // An index may be an int too; out of range, it fails every worker alike.
    let by_int = built_in(
        &s,
        "runtime.disco.ShardLoaderLoad",
        &[loader.clone().into(), Any::Int(2)],
    );
    assert_eq!(tensor_of(&by_int, 1), expected_parts(&params, 1)[2]);
    let beyond = built_in(
        &s,
        "runtime.disco.ShardLoaderLoad",
        &[loader.clone().into(), index(3)],
    );
    for w in 0..2 {
        expect_error(
            beyond.get(w),
            &["IndexError", "parameter 3 out of range (3 in all)"],
        );
    }
    // Worker 0 alone reads a parameter; the others get a tensor of its shape.
    let on_0 = built_in(
        &s,
        "runtime.disco.ShardLoaderLoadParamOnWorker0",
        &[loader.clone().into(), Any::Int(1)],
    );
    assert_eq!(tensor_of(&on_0, 0), (vec![2, 4], params[1].values.clone()));
    assert_eq!(tensor_of(&on_0, 1).0, vec![2, 4]);
    // Without shard_info, the module's get_shard_info() says how to cut (param_0 in rows).
    let asked = make_loader(&s, &cache, "", Some(&module));
    let first = built_in(
        &s,
        "runtime.disco.ShardLoaderLoad",
        &[asked.clone().into(), index(0)],
    );
    let second = built_in(
        &s,
        "runtime.disco.ShardLoaderLoad",
        &[asked.into(), index(1)],
    );
    for w in 0..2 {
        assert_eq!(
            tensor_of(&first, w as i64),
            expected_parts(&params, w as usize)[0]
        );
        assert_eq!(
            tensor_of(&second, w as i64),
            (vec![2, 4], params[1].values.clone())
        );
    }
    drop((
        one_by_one, all, by_int, beyond, on_0, first, second, loader, module,
    ));
    s.shutdown().unwrap();
    std::fs::remove_dir_all(&cache.dir).unwrap();
}
each_kind_and_nodes!(every_built_in_gives_each_worker_its_part);

fn presharded_records_are_read_by_each_worker_itself(kind: Kind) {
    let (s, module) = session(kind);
    // As MLC writes them: every parameter of shard 1, then every parameter of shard 2.
    let whole = [
        param("a", &[4, 2], false, 0.0),
        param("b", &[2, 2], true, 50.0),
    ];
    let mut records = Vec::new();
    for w in 0..2 {
        for (i, p) in whole.iter().enumerate() {
            let half = p.values.len() / 2;
            let mut shape = p.shape.clone();
            shape[0] /= 2;
            records.push(Param {
                name: format!("param_{i}_shard-{}-of-2", w + 1),
                shape,
                values: p.values[w * half..(w + 1) * half].to_vec(),
                bf16: p.bf16,
            });
        }
    }
    let cache = write_cache(&records, 1);
    // MLC passes no shard_info and its model, whose get_shard_info() names the parameters
    // without their shard suffix.
    let loader = make_loader(&s, &cache, "", Some(&module));
    let one = built_in(
        &s,
        "runtime.disco.ShardLoaderLoadPresharded",
        &[loader.clone().into(), index(1)],
    );
    let all = built_in(
        &s,
        "runtime.disco.ShardLoaderLoadAllPresharded",
        &[loader.clone().into()],
    );
    for w in 0..2 {
        let own = |i: usize| {
            let r = &records[2 * w + i];
            (r.shape.clone(), r.values.clone())
        };
        assert_eq!(tensor_of(&one, w as i64), own(1), "worker {w}");
        for i in 0..2 {
            assert_eq!(
                tensor_of(&item(&s, &module, &all, i), w as i64),
                own(i as usize)
            );
        }
    }
    let beyond = built_in(
        &s,
        "runtime.disco.ShardLoaderLoadPresharded",
        &[loader.into(), index(2)],
    );
    for w in 0..2 {
        let message = format!("worker {w}'s presharded parameter 2 out of range (2 in all)");
        expect_error(beyond.get(w), &["IndexError", &message]);
    }
    // A cache presharded for more workers than the session has is refused, naming a record.
    let four: Vec<Param> = (0..4)
        .map(|w| param(&format!("param_0_shard-{}-of-4", w + 1), &[1], false, 0.0))
        .collect();
    let other = write_cache(&four, 4);
    let loader = make_loader(&s, &other, "{}", None);
    let refused = built_in(
        &s,
        "runtime.disco.ShardLoaderLoadAllPresharded",
        &[loader.into()],
    );
    for w in 0..2 {
        expect_error(
            refused.get(w),
            &[
                "ValueError",
                "presharded otherwise (`param_0_shard-1-of-4`)",
                &other.json,
            ],
        );
    }
    drop((one, all, beyond, refused, module));
    s.shutdown().unwrap();
    for dir in [&cache.dir, &other.dir] {
        std::fs::remove_dir_all(dir).unwrap();
    }
}
each_kind_and_nodes!(presharded_records_are_read_by_each_worker_itself);

/// Fails unless `result` is an error whose message holds every one of `parts`.
fn expect_error<T: std::fmt::Debug>(result: Result<T>, parts: &[&str]) {
    let error = result.expect_err("the call fails");
    for part in parts {
        assert!(
            error.message.contains(part),
            "{part:?} not in {:?}",
            error.message
        );
    }
}

/// Every worker's error for the call that made `dref`.
fn errors_of(dref: &DRef, parts: &[&str]) {
    for w in 0..2 {
        expect_error(dref.get(w), parts);
    }
}

fn bad_input_fails_every_worker_naming_the_parameter_and_file(kind: Kind) {
    let (s, module) = session(kind);
    let (cache, params) = cache();
    let load = |loader: &DRef, i: i64| {
        built_in(
            &s,
            "runtime.disco.ShardLoaderLoad",
            &[loader.clone().into(), index(i)],
        )
    };
    // Made from bad input, the loader fails on every worker, and so does each use of it.
    let bad_infos = [
        (
            r#"{"param_9": []}"#,
            "parameter `param_9`: the tensor cache `",
        ),
        (
            r#"{"param_0": [["no_such_function", [[2, 2, 3], "float32"], 2]]}"#,
            "parameter `param_0`: step 0: no function `no_such_function` in the module",
        ),
        (
            r#"{"param_0": [["shard_rows", [[2, 2, 3], "float33"], 2]]}"#,
            "parameter `param_0`: step 0: `float33` names no dtype",
        ),
        (
            r#"{"param_0": [["shard_rows"]]}"#,
            "parameter `param_0`: step 0: expected [function, [shape, dtype], ints...]",
        ),
        ("[1", "shard_info is not valid JSON"),
    ];
    for (info, part) in bad_infos {
        let loader = make_loader(&s, &cache, info, Some(&module));
        errors_of(&loader, &["ValueError", part]);
        errors_of(&load(&loader, 0), &[]);
    }
    let wrong_size = cache.text.replacen("\"nbytes\":48", "\"nbytes\":44", 1);
    assert_ne!(wrong_size, cache.text);
    let args = [
        cache.json.as_str().into(),
        wrong_size.as_str().into(),
        "{}".into(),
        Any::None,
    ];
    errors_of(
        &built_in(&s, "runtime.disco.ShardLoader", &args),
        &[
            "ValueError",
            "parameter `param_0` (file `params_shard_0.bin`)",
            "44 bytes do not hold shape [4, 3]",
        ],
    );
    // Shards that do not match the workers, and a shard function that fails on worker 0: every
    // worker fails before any data moves.
    let three = r#"{"param_0": [["shard_rows", [[3, 4, 1], "float32"], 3]]}"#;
    let failing = r#"{"param_0": [["fail_to_shard", [[2, 2, 3], "float32"], 2]]}"#;
    // The module's error is raised in the library it links, which is another copy than this
    // test's own where workers are threads of this test: there the call fails without it.
    let raised: &[&str] = match kind {
        Kind::Threads => &["without raising"],
        _ => &["ValueError", "fails on purpose"],
    };
    for (info, parts) in [
        (
            three,
            &[
                "ValueError",
                "shape [3, 4, 1] of float32",
                "the number of workers (2)",
            ][..],
        ),
        (failing, raised),
    ] {
        let loader = make_loader(&s, &cache, info, Some(&module));
        let part = load(&loader, 0);
        errors_of(&part, parts);
        errors_of(&part, &["parameter `param_0` (file `params_shard_0.bin`"]);
    }
    let loader = make_loader(&s, &cache, failing, Some(&module));
    errors_of(&load(&loader, 0), &["shard function `fail_to_shard`"]);
    // Files that are gone or cut short since the loader was made.
    let loader = make_loader(&s, &cache, SHARD_INFO, Some(&module));
    let second = cache.dir.join("params_shard_1.bin");
    std::fs::rename(&second, cache.dir.join("elsewhere")).unwrap();
    let missing = load(&loader, 2);
    errors_of(
        &missing,
        &[
            "RuntimeError",
            "parameter `param_2`",
            second.to_str().unwrap(),
        ],
    );
    // Worker 1 learns worker 0's error before the broadcast it would have waited in.
    expect_error(
        missing.get(1),
        &["worker 0 failed: cannot read parameter `param_2`"],
    );
    std::fs::rename(cache.dir.join("elsewhere"), &second).unwrap();
    let first = cache.dir.join("params_shard_0.bin");
    let bytes = std::fs::read(&first).unwrap();
    std::fs::write(&first, &bytes[..20]).unwrap();
    let truncated = load(&loader, 1);
    errors_of(
        &truncated,
        &[
            "parameter `param_1`",
            first.to_str().unwrap(),
            "holds 20 bytes",
        ],
    );
    // Presharded loads of a cache that is not presharded fail on every worker.
    let presharded = built_in(
        &s,
        "runtime.disco.ShardLoaderLoadPresharded",
        &[loader.clone().into(), index(0)],
    );
    errors_of(&presharded, &["holds no presharded records"]);
    // Not a module, not a loader.
    let args = [
        cache.json.as_str().into(),
        cache.text.as_str().into(),
        "{}".into(),
        Any::Int(3),
    ];
    let not_module = built_in(&s, "runtime.disco.ShardLoader", &args);
    errors_of(
        &not_module,
        &[
            "TypeError",
            "argument 3 (module): expected a module, got int",
        ],
    );
    let not_loader = built_in(
        &s,
        "runtime.disco.ShardLoaderLoad",
        &[Any::Int(1), index(0)],
    );
    errors_of(&not_loader, &["TypeError", "argument 0 (loader)"]);
    // The session and its communicator still work: the file restored, every worker loads.
    std::fs::write(&first, &bytes).unwrap();
    let again = load(&loader, 1);
    for w in 0..2 {
        assert_eq!(tensor_of(&again, w), expected_parts(&params, w as usize)[1]);
    }
    drop((
        missing, truncated, presharded, not_loader, again, loader, module,
    ));
    s.shutdown().unwrap();
    std::fs::remove_dir_all(&cache.dir).unwrap();
}
each_kind_and_nodes!(bad_input_fails_every_worker_naming_the_parameter_and_file);

/// A global shard function with two extra arguments (as TVM's QKV projections take the heads'
/// counts): `(src, n, scale, dst)` cuts `src` in blocks of rows and multiplies by `scale`.
fn register_scaled_rows() {
    let body = |args: &[AnyView<'_>]| -> Result<Any> {
        let (src, n, scale, dst) = (
            args[0].as_tensor()?,
            args[1].as_i64()?,
            args[2].as_i64()?,
            args[3].as_tensor()?,
        );
        if n != 2 || src.nbytes() != dst.nbytes() {
            return Err(Error::value("scaled_rows: unexpected arguments"));
        }
        let mut bytes = vec![0u8; src.nbytes()];
        discovm::vm::read(&src, &mut bytes)?;
        let scaled: Vec<u8> = bytes
            .chunks_exact(4)
            .flat_map(|b| (f32::from_ne_bytes(b.try_into().unwrap()) * scale as f32).to_ne_bytes())
            .collect();
        discovm::vm::write(&dst, &scaled)?;
        Ok(Any::None)
    };
    registry::register_global(
        "tests.weights.scaled_rows",
        Function::from_closure(body),
        true,
    )
    .unwrap();
}

#[test]
fn global_shard_functions_get_their_extra_arguments_in_order() {
    register_scaled_rows();
    let s = start(Kind::Threads, 2, 1, SessionOptions::default()).unwrap();
    s.init_ccl("cpu", &[]).unwrap();
    let (cache, params) = cache();
    let info = r#"{"param_0": [["tests.weights.scaled_rows", [[2, 2, 3], "float32"], 2, 10]]}"#;
    let loader = make_loader(&s, &cache, info, None);
    let part = built_in(
        &s,
        "runtime.disco.ShardLoaderLoad",
        &[loader.into(), index(0)],
    );
    for w in 0..2 {
        let (shape, rows) = &expected_parts(&params, w)[0];
        let scaled: Vec<f32> = rows.iter().map(|v| v * 10.0).collect();
        assert_eq!(tensor_of(&part, w as i64), (shape.clone(), scaled));
    }
    // Without a module, a name no global function has fails naming where it looked.
    let info = r#"{"param_1": [["tests.weights.none", [[2, 1, 4], "float32"]]]}"#;
    let loader = make_loader(&s, &cache, info, None);
    errors_of(
        &loader,
        &["no function `tests.weights.none` among the global functions"],
    );
    drop((part, loader));
    s.shutdown().unwrap();
    std::fs::remove_dir_all(&cache.dir).unwrap();
}

#[test]
fn a_loader_is_an_object_the_library_hands_out() {
    assert!(discovm::object_type_keys().contains(&"discovm.ShardLoader"));
    let s = start(Kind::Threads, 1, 1, SessionOptions::default()).unwrap();
    let (cache, params) = cache();
    let loader = make_loader(&s, &cache, "{}", None);
    match loader.get(0).unwrap() {
        Any::Object(object) => assert_eq!(object.strong_count(), 2),
        other => panic!("expected an object, got {other:?}"),
    }
    // One worker needs no communicator to load presharded or on worker 0.
    let on_0 = built_in(
        &s,
        "runtime.disco.ShardLoaderLoadParamOnWorker0",
        &[loader.into(), Any::Int(2)],
    );
    assert_eq!(tensor_of(&on_0, 0), (vec![3], params[2].values.clone()));
    drop(on_0);
    s.shutdown().unwrap();
    std::fs::remove_dir_all(&cache.dir).unwrap();
}
