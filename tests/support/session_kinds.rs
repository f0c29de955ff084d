//! Sessions of either kind, for tests that run one body on worker threads and on worker
//! processes: [`Kind`] and [`start`]; the macro `each_kind!`, which makes a test of each kind
//! from one body; the test functions both kinds have, the `proc.*` functions of the tests'
//! worker program (`support/process_worker.c`), which [`start`] registers in this process for
//! worker threads as the worker program registers them in worker processes; and [`Gate`], which
//! holds a worker inside a call until the test lets it go. The test file that uses this
//! declares it as `session_kinds` (with `#[macro_use]` for `each_kind!`), and the
//! `built_library`, `c_build`, `ports` and `worker_programs` modules too.

#![allow(dead_code)] // each test binary uses its own part of this module

use std::fs::File;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once};

use discovm::object::{Function, registry};
use discovm::session::{Session, SessionOptions};
use discovm::worker::current as current_worker;
use discovm::{Any, AnyView, Error, Result};

use crate::worker_programs::test_worker_program;

/// How a session's workers run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Threads of this process.
    Threads,
    /// Processes running the tests' worker program.
    Processes,
    /// Two nodes over loopback TCP: half the workers are processes of this machine's node,
    /// half of a `discovm-node` the test starts.
    Nodes,
}

/// Makes a test of each kind of the function `name(kind: Kind)`: `name::threads` and
/// `name::processes`, so a failure names its kind. Attributes after `processes:` go to the
/// processes test only (an `ignore` with its reason).
#[allow(unused_macros)] // not every test binary that uses this module uses it
macro_rules! each_kind {
    ($name:ident $(, processes: #[$attribute:meta])?) => {
        mod $name {
            #[test]
            fn threads() {
                super::$name($crate::session_kinds::Kind::Threads)
            }

            #[test]
            $(#[$attribute])?
            fn processes() {
                super::$name($crate::session_kinds::Kind::Processes)
            }
        }
    };
}

/// Makes the tests of [`each_kind!`] and `name::nodes` as well (the test file declares the
/// `gloo` module too; the nodes test skips, saying why, where Gloo cannot be had).
#[allow(unused_macros)] // not every test binary that uses this module uses it
macro_rules! each_kind_and_nodes {
    ($name:ident) => {
        mod $name {
            #[test]
            fn threads() {
                super::$name($crate::session_kinds::Kind::Threads)
            }

            #[test]
            fn processes() {
                super::$name($crate::session_kinds::Kind::Processes)
            }

            #[test]
            fn nodes() {
                if $crate::gloo::plugin().is_some() {
                    super::$name($crate::session_kinds::Kind::Nodes)
                }
            }
        }
    };
}

/// The secret of the sessions of kind [`Kind::Nodes`].
const NODES_TOKEN: &str = "the tests' secret for nodes";

/// The options of a process session of the tests' worker program.
pub fn process_options() -> SessionOptions {
    SessionOptions {
        worker_program: Some(test_worker_program().to_str().unwrap().to_string()),
        ..SessionOptions::default()
    }
}

/// Starts a session of `kind`: `workers` workers in `groups` groups, with `options` (process
/// sessions run the tests' worker program unless the options name another).
pub fn start(
    kind: Kind,
    workers: i64,
    groups: i64,
    options: SessionOptions,
) -> Result<Arc<Session>> {
    if kind == Kind::Threads {
        register_thread_functions();
        return Session::new_threaded(workers, groups, options);
    }
    let options = SessionOptions {
        worker_program: options
            .worker_program
            .clone()
            .or(process_options().worker_program),
        ..options
    };
    if kind == Kind::Processes {
        return Session::new_process(workers, groups, options);
    }
    assert!(workers % 2 == 0, "two nodes share {workers} workers");
    let port = crate::ports::free_port("127.0.0.1");
    // The node ends when the session does; nobody waits for it.
    drop(
        std::process::Command::new(crate::worker_programs::node_program())
            .args(["127.0.0.1", &port.to_string(), &(workers / 2).to_string()])
            .env("DISCOVM_SESSION_TOKEN", NODES_TOKEN)
            .env("DISCOVM_WORKER", test_worker_program())
            .spawn()
            .expect("the node program starts"),
    );
    let options = SessionOptions {
        session_token: Some(NODES_TOKEN.to_string()),
        ..options
    };
    Session::new_socket(2, workers / 2, groups, "127.0.0.1", port.into(), options)
}

/// A session of `kind` with `workers` workers in one group and the default options.
pub fn session(kind: Kind, workers: i64) -> Arc<Session> {
    start(kind, workers, 1, SessionOptions::default()).expect("a session starts")
}

fn define(name: &str, f: impl Fn(&[AnyView<'_>]) -> Result<Any> + Send + Sync + 'static) {
    registry::register_global(name, Function::from_closure(f), true).unwrap();
}

/// Registers, once per process, the `proc.*` functions the session tests call on both kinds,
/// as `support/process_worker.c` defines them. Per-worker state is the worker thread's own,
/// as it is the worker process's own there.
fn register_thread_functions() {
    thread_local! {
        static NEXT: std::cell::Cell<i64> = const { std::cell::Cell::new(0) };
        static CALLS: std::cell::Cell<i64> = const { std::cell::Cell::new(0) };
    }
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        define("proc.add", |args| {
            Ok(Any::Int(args[0].as_i64()? + args[1].as_i64()?))
        });
        define("proc.echo", |args| args[0].to_owned());
        define("proc.heap_empty", |args| {
            let f32 = discovm::abi::DLDataType {
                code: discovm::abi::KDL_FLOAT,
                bits: 32,
                lanes: 1,
            };
            let cpu = discovm::abi::DLDevice::cpu();
            Ok(Any::from(discovm::object::Tensor::empty(
                &[args[0].as_i64()?],
                f32,
                cpu,
            )?))
        });
        define("proc.fail_on", |args| {
            let worker = current_worker().expect("runs on a worker").id;
            if args[0].as_i64()? == worker as i64 {
                return Err(Error::value("boom on purpose"));
            }
            args[1].to_owned()
        });
        define("proc.expect_next", |args| {
            let seen = args[0].as_i64()?;
            let expected = NEXT.with(|n| n.replace(seen + 1));
            if seen != expected {
                return Err(Error::value(format!(
                    "call {seen} ran where {expected} was due"
                )));
            }
            Ok(Any::None)
        });
        define("proc.count", |_| {
            Ok(Any::Int(CALLS.with(|c| {
                c.set(c.get() + 1);
                c.get()
            })))
        });
        define("proc.allreduce_but", |args| {
            let worker = current_worker().expect("runs on a worker").id;
            if args[0].as_i64()? == worker as i64 {
                if args[1].as_bool()? {
                    return Err(Error::value("failed before the allreduce on purpose"));
                }
                return Ok(Any::None);
            }
            let allreduce: Any = registry::get_global("runtime.disco.allreduce")?.into();
            let sum: Any = discovm::object::Shape::new(&[0]).into();
            let in_group = Any::Bool(false);
            let views = [args[2], sum.view(), in_group.view(), args[3]];
            Function::call_view(&allreduce.view(), &views)?;
            Ok(Any::None)
        });
        define("proc.stream_copy", |args| {
            // A CPU stream of its own, which a thread of the library runs: one copy through it.
            let n = args[0].as_i64()?;
            let cpu = discovm::abi::DLDevice::cpu();
            let u8 = discovm::abi::DLDataType::new(discovm::abi::KDL_UINT, 8, 1);
            let stream = discovm::vm::Stream::new(cpu)?;
            let src = discovm::object::Tensor::empty(&[n], u8, cpu)?;
            let dst = discovm::object::Tensor::empty(&[n], u8, cpu)?;
            stream.copy(&dst, &src)?;
            stream.sync()?;
            Ok(Any::None)
        });
        define("proc.wait_for", |args| {
            let path = args[0].as_str()?;
            let mut byte = [0u8];
            File::open(path)
                .and_then(|mut fifo| fifo.read(&mut byte))
                .map_err(|e| Error::runtime(format!("proc.wait_for: {path}: {e}")))?;
            Ok(Any::None)
        });
    });
}

/// A FIFO that `proc.wait_for(gate.path())` waits at, on any kind of worker, until
/// [`Gate::release_one`] lets one waiting call through. Dropping the gate lets every call
/// through (and later ones fail), so a failed test leaves no worker waiting.
pub struct Gate {
    path: PathBuf,
    /// Open for reading and writing: the workers' opens never wait for a writer.
    fifo: File,
}

impl Gate {
    pub fn new() -> Gate {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "gate-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_file(&path);
        let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        let made = unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) };
        assert_eq!(made, 0, "mkfifo {}", path.display());
        let fifo = File::options().read(true).write(true).open(&path).unwrap();
        Gate { path, fifo }
    }

    pub fn path(&self) -> &str {
        self.path.to_str().unwrap()
    }

    /// Holds worker `worker` of `s` at the gate: a call of `proc.wait_for` to it alone, whose
    /// DRef this returns.
    pub fn hold(&self, s: &Arc<Session>, worker: usize) -> discovm::session::DRef {
        let wait_for = s.get_global_func("proc.wait_for").unwrap();
        let path: Any = self.path().into();
        let target = discovm::session::Target::One(worker);
        s.call(target, &wait_for, &[path.view()]).unwrap()
    }

    /// Lets one call waiting at the gate (or the next to come) through.
    pub fn release_one(&self) {
        (&self.fifo).write_all(&[1]).unwrap();
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        // No call opens the FIFO once it is removed; those that did read the end of it when
        // the last writer, this file, closes.
        let _ = std::fs::remove_file(&self.path);
    }
}
