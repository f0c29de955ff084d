//! Compiles the C and C++ tests in `tests/c/` and the examples in `examples-c/` against the
//! built shared library, runs them, and expects exit status 0. Each program runs twice: directly,
//! and under valgrind's memcheck (`valgrind --error-exitcode=1 --leak-check=full
//! --errors-for-leak-kinds=definite`), where any memory error or definite leak fails it. The
//! valgrind tests need valgrind installed (Debian: `apt-get install valgrind`).
//!
//! C programs are compiled with `gcc -std=c11 -Wall -Wextra -Werror -Iinclude`, C++ programs
//! (`.cpp`) with `g++ -std=c++17 -Wall -Wextra -Werror -pedantic` and stricter warnings
//! (`support/c_build.rs`); both are linked with `-ldiscovm` (rpath set to the library's
//! directory), except the `dlopen` example, which links only `-ldl` and receives the library's
//! path. A program may add linker flags of its own (`-lpthread` for the tests that start
//! threads). Exit status 77 means "skipped: needs a GPU"; it is accepted, with a message, only
//! from programs marked as needing one. Here they run with the machine's CUDA driver, if any;
//! `cuda_stub_driver.rs` runs them against a stand-in driver too, where they must pass.
//!
//! Every program in `examples-c/` must have a test here, and every C or C++ file in `tests/c/`
//! must be run by some test file, so a new program cannot be forgotten.

#[path = "support/built_library.rs"]
mod built_library;
#[path = "support/c_build.rs"]
mod c_build;
#[path = "support/worker_programs.rs"]
mod worker_programs;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use built_library::shared_library;
use c_build::{Link, describe, repo};

/// The exit status that means "skipped: this program needs a GPU".
const EXIT_SKIP: i32 = 77;

/// How a program is run.
#[derive(Clone, Copy, PartialEq)]
enum Runner {
    Native,
    /// Under valgrind's memcheck.
    Valgrind,
}

/// The memcheck options: an error, or a block no pointer reaches any more, fails the run.
/// Blocks still reachable at exit (the global function registry, thread-locals of threads
/// that are still alive) are not leaks.
const VALGRIND: [&str; 4] = [
    "--error-exitcode=1",
    "--leak-check=full",
    "--errors-for-leak-kinds=definite",
    "--quiet",
];

/// A C program to build and run.
struct Program {
    /// The source, relative to the repository root.
    source: &'static str,
    /// A program that loads the library with `dlopen` is given its path as its first argument
    /// (and, in a second run, through `DVM_LIBRARY`).
    link: Link,
    /// Whether it needs a GPU (and may exit 77 without one).
    needs_gpu: bool,
    /// Extra linker flags, after the library.
    libs: &'static [&'static str],
    /// A worker program it starts (its source, built the same way), given as its argument.
    worker: Option<&'static str>,
    /// Whether it starts worker processes that run the default worker program
    /// (`discovm-worker` next to the library), which is built first then.
    default_worker: bool,
    /// Whether it writes files where it runs: it runs in its build directory, not the
    /// repository's root.
    writes_files: bool,
}

impl Program {
    const fn new(source: &'static str) -> Self {
        Program {
            source,
            link: Link::Library,
            needs_gpu: false,
            libs: &[],
            worker: None,
            default_worker: false,
            writes_files: false,
        }
    }

    const fn writes_files(self) -> Self {
        Program {
            writes_files: true,
            ..self
        }
    }

    const fn default_worker(self) -> Self {
        Program {
            default_worker: true,
            ..self
        }
    }

    const fn worker(self, source: &'static str) -> Self {
        Program {
            worker: Some(source),
            ..self
        }
    }

    const fn libs(self, libs: &'static [&'static str]) -> Self {
        Program { libs, ..self }
    }

    const fn dlopen(self) -> Self {
        Program {
            link: Link::Dlopen,
            ..self
        }
    }

    const fn needs_gpu(self) -> Self {
        Program {
            needs_gpu: true,
            ..self
        }
    }
}

/// Declares one `#[test]` per program, the same under valgrind (in `valgrind::`), and the
/// list of them all.
macro_rules! programs {
    ($($name:ident: $program:expr;)*) => {
        $(
            #[test]
            fn $name() {
                build_and_run(&$program, Runner::Native);
            }
        )*
        mod valgrind {
            use super::*;
            $(
                #[test]
                fn $name() {
                    build_and_run(&$program, Runner::Valgrind);
                }
            )*
        }
        const PROGRAMS: &[Program] = &[$($program),*];
    };
}

programs! {
    func_call_values: Program::new("tests/c/func_call_values.c");
    func_errors: Program::new("tests/c/func_errors.c");
    func_hosted: Program::new("tests/c/func_hosted.c");
    device_count: Program::new("tests/c/device_count.c");
    object_ref_counting: Program::new("tests/c/object_ref_counting.c");
    session_calls: Program::new("tests/c/session_calls.c");
    session_failures: Program::new("tests/c/session_failures.c");
    session_modules: Program::new("tests/c/session_modules.c");
    session_load: Program::new("tests/c/session_load.c").libs(&["-lpthread"]);
    session_timeout_keeps_failures: Program::new("tests/c/session_timeout_keeps_failures.c");
    session_sync_all_timeout: Program::new("tests/c/session_sync_all_timeout.c");
    session_waits_report_failures: Program::new("tests/c/session_waits_report_failures.c");
    stream_ordering: Program::new("tests/c/stream_ordering.c");
    cxx_wrapper: Program::new("tests/c/cxx_wrapper.cpp");
    cuda_roundtrip: Program::new("tests/c/cuda_roundtrip.c").needs_gpu();
    cuda_soft_sync: Program::new("tests/c/cuda_soft_sync.c").needs_gpu();
    cuda_small_access: Program::new("tests/c/cuda_small_access.c").needs_gpu();
    cuda_default_stream: Program::new("tests/c/cuda_default_stream.c").needs_gpu();
    cuda_session: Program::new("tests/c/cuda_session.c").needs_gpu();
    cuda_nccl: Program::new("tests/c/cuda_nccl.c").needs_gpu();
    // Compiled here so it keeps building; on a GPU machine it runs the whole benchmark.
    bench_cuda_copy: Program::new("benches/cuda_copy/main.c").needs_gpu();
    example_hello_function: Program::new("examples-c/hello_function.c");
    example_session_broadcast: Program::new("examples-c/session_broadcast.c");
    example_dlopen_call: Program::new("examples-c/dlopen_call.c").dlopen();
    example_stream_copy: Program::new("examples-c/stream_copy.c");
    example_allreduce: Program::new("examples-c/allreduce.c");
    example_session_cpp: Program::new("examples-c/session_cpp.cpp");
    example_process_session: Program::new("examples-c/process_session.c")
        .worker("examples-c/process_worker.c");
    example_node_session: Program::new("examples-c/node_session.c")
        .worker("programs/discovm-node.c")
        .default_worker();
    example_status: Program::new("examples-c/status.c");
    example_trace: Program::new("examples-c/trace.c").writes_files();
}

/// Where compiled programs go (one directory per runner, as both build the same programs at
/// once).
fn out_dir(runner: Runner) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(match runner {
        Runner::Native => "c_programs",
        Runner::Valgrind => "c_programs_valgrind",
    });
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

fn compile(program: &Program, runner: Runner) -> PathBuf {
    let stem = Path::new(program.source).file_stem().unwrap();
    let binary = out_dir(runner).join(stem);
    c_build::compile(program.source, &binary, program.link, program.libs);
    binary
}

/// The command that runs `binary`.
fn command(runner: Runner, binary: &Path) -> Command {
    match runner {
        Runner::Native => Command::new(binary),
        Runner::Valgrind => {
            let mut valgrind = Command::new("valgrind");
            valgrind.args(VALGRIND).arg(binary);
            valgrind
        }
    }
}

/// Runs a compiled program and checks how it ended; prints what it printed.
fn run(program: &Program, runner: Runner, command: &mut Command) {
    if program.writes_files {
        command.current_dir(out_dir(runner));
    }
    let output = command.output().unwrap_or_else(|e| match runner {
        Runner::Native => panic!("cannot run {command:?}: {e}"),
        Runner::Valgrind => panic!(
            "cannot run {command:?}: {e} (the memory checks need valgrind: on Debian, \
             `apt-get install valgrind`)"
        ),
    });
    print!("{}", String::from_utf8_lossy(&output.stdout));
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    match output.status.code() {
        Some(0) => {}
        Some(EXIT_SKIP) if program.needs_gpu => {
            eprintln!("skipped: {} needs a GPU (exit {EXIT_SKIP})", program.source);
        }
        Some(EXIT_SKIP) => panic!(
            "{} exited {EXIT_SKIP} (skipped: needs a GPU), but it is not marked as needing \
             one\n{}",
            program.source,
            describe(command, &output)
        ),
        _ => panic!("{}", describe(command, &output)),
    }
}

fn build_and_run(program: &Program, runner: Runner) {
    let binary = compile(program, runner);
    if program.default_worker {
        worker_programs::default_worker_program();
    }
    if let Some(worker) = program.worker {
        let worker = compile(&Program::new(worker), runner);
        return run(program, runner, command(runner, &binary).arg(worker));
    }
    match program.link {
        Link::Library => run(program, runner, &mut command(runner, &binary)),
        Link::Dlopen => {
            // The path both ways the program accepts it: as its argument, and from the
            // environment.
            run(
                program,
                runner,
                command(runner, &binary).arg(shared_library()),
            );
            run(
                program,
                runner,
                command(runner, &binary).env("DVM_LIBRARY", shared_library()),
            );
        }
    }
}

/// The `.c` and `.cpp` files directly in `dir` (relative to the repository root), sorted.
fn c_files(dir: &str) -> Vec<String> {
    let mut files: Vec<String> = fs::read_dir(repo().join(dir))
        .unwrap_or_else(|e| panic!("cannot list {dir}: {e}"))
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".c") || name.ends_with(".cpp"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_example_has_a_test() {
    let missing: Vec<String> = c_files("examples-c")
        .into_iter()
        .map(|name| format!("examples-c/{name}"))
        .filter(|path| {
            !PROGRAMS
                .iter()
                .any(|p| p.source == path || p.worker == Some(path))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "these examples have no test: add them to `programs!` in tests/c_programs.rs: \
         {missing:?}"
    );
}

#[test]
fn every_c_test_is_run() {
    // A C file in tests/c/ counts as run when a Rust test file names it (this one through
    // `programs!`, the header tests by their own lists).
    let rust_sources: Vec<String> = fs::read_dir(repo().join("tests"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "rs"))
        .map(|path| fs::read_to_string(path).unwrap())
        .collect();
    let missing: Vec<String> = c_files("tests/c")
        .into_iter()
        .filter(|name| {
            let stem = format!("{}.", name.rsplit_once('.').unwrap().0);
            !rust_sources.iter().any(|source| source.contains(&stem))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "no test runs these C or C++ files in tests/c/: add them to `programs!` in \
         tests/c_programs.rs: {missing:?}"
    );
}
