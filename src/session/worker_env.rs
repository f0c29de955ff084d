//! What a worker process's environment holds besides that of the process that starts it: the
//! Python modules the session asks it to import before it serves, and how many threads the
//! OpenMP and BLAS libraries its functions load may start.
//!
//! The one idea: whoever starts a machine's workers (the controller, or a node) shares that
//! machine's cores among them, as torchrun does, unless the user chose (any of the three
//! variables set, or the session's option): left alone, each worker's libraries would start a
//! thread per core, and the workers would fight over the cores.

#[cfg(not(loom))]
use std::sync::atomic::{AtomicBool, Ordering};

#[cfg(not(loom))]
use crate::device::cpu::available_cpus;
use crate::object::{Error, Result};

/// The variable that lists the Python modules a worker process imports before it serves,
/// separated by commas (a name ending in `?` is imported only where its package is installed).
#[cfg(not(loom))]
pub(crate) const IMPORTS_VAR: &str = "DISCOVM_WORKER_IMPORTS";
/// The variables that bound the threads of OpenMP, OpenBLAS and MKL.
#[cfg(not(loom))]
pub(crate) const THREAD_VARS: [&str; 3] =
    ["OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"];

/// How many threads the OpenMP and BLAS libraries of each worker process start
/// (`OMP_NUM_THREADS`, `OPENBLAS_NUM_THREADS`, `MKL_NUM_THREADS`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WorkerThreads {
    /// The machine's cores divided by its workers (at least one), unless one of the variables
    /// is set.
    #[default]
    ShareCores,
    /// This many, unless one of the variables is set.
    Exactly(u32),
    /// What the environment says (the libraries' own default: a thread per core).
    Inherit,
}

impl WorkerThreads {
    /// From the number a caller gives: 0 shares the cores, -1 inherits, n > 0 is n threads.
    pub fn from_value(value: i64) -> Result<WorkerThreads> {
        match value {
            0 => Ok(WorkerThreads::ShareCores),
            -1 => Ok(WorkerThreads::Inherit),
            n => u32::try_from(n).map(WorkerThreads::Exactly).map_err(|_| {
                Error::value(format!(
                    "threads_per_worker is {n} (0: the cores shared among the workers, \
                         -1: the environment's, or a positive count)"
                ))
            }),
        }
    }

    /// The number [`WorkerThreads::from_value`] reads.
    pub fn to_value(self) -> i64 {
        match self {
            WorkerThreads::ShareCores => 0,
            WorkerThreads::Inherit => -1,
            WorkerThreads::Exactly(n) => n.into(),
        }
    }
}

/// Checks the names of Python modules a session's workers import: dotted identifiers, each
/// maybe ending in `?`.
#[cfg(not(loom))]
pub(crate) fn check_imports(imports: &[String]) -> Result<()> {
    for name in imports {
        let module = name.strip_suffix('?').unwrap_or(name);
        let valid = !module.is_empty()
            && module.split('.').all(|part| {
                part.chars()
                    .next()
                    .is_some_and(|c| c.is_alphabetic() || c == '_')
                    && part.chars().all(|c| c.is_alphanumeric() || c == '_')
            });
        if !valid {
            return Err(Error::value(format!(
                "`{name}` is not the name of a Python module for the workers to import"
            )));
        }
    }
    Ok(())
}

/// The variables the `workers` worker processes of this machine get on top of this process's
/// environment; with `say`, counts the session chose by default are said on stderr, once per
/// process (the controller says so, a node does not).
#[cfg(not(loom))]
pub(crate) fn worker_environment(
    imports: &[String],
    threads: WorkerThreads,
    workers: usize,
    say: bool,
) -> Vec<(String, String)> {
    let mut env = Vec::new();
    if !imports.is_empty() {
        env.push((IMPORTS_VAR.to_string(), imports.join(",")));
    }
    let user_chose = THREAD_VARS
        .iter()
        .any(|var| std::env::var_os(var).is_some());
    let count = match threads {
        _ if user_chose => return env,
        WorkerThreads::Inherit => return env,
        WorkerThreads::Exactly(n) => n.max(1),
        WorkerThreads::ShareCores => {
            let (cores, workers) = (available_cpus(), workers.max(1));
            let count = (cores / workers).max(1);
            static SAID: AtomicBool = AtomicBool::new(false);
            if say && !SAID.swap(true, Ordering::Relaxed) {
                eprintln!(
                    "discovm: worker processes get {}={count} ({cores} cores / {workers} \
                     workers), so that they do not oversubscribe the machine; set any of them, \
                     or the session's threads_per_worker, to choose",
                    THREAD_VARS.join(", ")
                );
            }
            count as u32
        }
    };
    env.extend(
        THREAD_VARS
            .iter()
            .map(|var| (var.to_string(), count.to_string())),
    );
    env
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn thread_counts_read_back_as_given() {
        for value in [0, -1, 1, 7] {
            assert_eq!(WorkerThreads::from_value(value).unwrap().to_value(), value);
        }
        let error = WorkerThreads::from_value(-2).unwrap_err();
        assert!(
            error.message.contains("threads_per_worker is -2"),
            "{}",
            error.message
        );
    }

    #[test]
    fn module_names_are_dotted_identifiers() {
        let ok = ["tvm.exec.disco_worker?", "mlc_llm.cli.worker", "_x"].map(String::from);
        check_imports(&ok).unwrap();
        for bad in ["", "a..b", "1a", "a b", "os;rm", "?"] {
            let error = check_imports(&[bad.to_string()]).unwrap_err();
            assert!(
                error.message.contains(&format!("`{bad}`")),
                "{}",
                error.message
            );
        }
    }

    #[test]
    fn imports_travel_in_one_variable() {
        let env = worker_environment(
            &["a".into(), "b.c?".into()],
            WorkerThreads::Inherit,
            2,
            false,
        );
        assert_eq!(env, [(IMPORTS_VAR.to_string(), "a,b.c?".to_string())]);
        assert!(worker_environment(&[], WorkerThreads::Inherit, 2, false).is_empty());
    }
}
