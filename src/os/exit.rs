//! How a child process ended, in the words a session's `WorkerError` uses.
//!
//! The idea that makes it work: the wait status is decoded once, by whoever reaps the child,
//! into a small value that any thread can copy and that reads as a person would say it.

use std::fmt;

use crate::object::{Error, ErrorKind};

/// How a child process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ExitCause {
    /// It exited with this status.
    Exited(i32),
    /// A signal with this number killed it.
    Killed(i32),
    /// It ended, but another part of this process collected its status first (a handler that
    /// reaps every child, or SIGCHLD ignored).
    Unknown,
}

impl ExitCause {
    pub(super) fn from_wait_status(status: libc::c_int) -> ExitCause {
        if libc::WIFEXITED(status) {
            ExitCause::Exited(libc::WEXITSTATUS(status))
        } else if libc::WIFSIGNALED(status) {
            ExitCause::Killed(libc::WTERMSIG(status))
        } else {
            ExitCause::Unknown
        }
    }

    /// The `WorkerError` a session raises for a worker that ended this way: "worker 2 (pid
    /// 4711) killed by signal 9 (SIGKILL)".
    pub(crate) fn worker_error(&self, worker: usize, pid: i32) -> Error {
        Error::new(
            ErrorKind::Worker,
            format!("worker {worker} (pid {pid}) {self}"),
        )
    }
}

impl fmt::Display for ExitCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ExitCause::Exited(status) => write!(f, "exited with status {status}"),
            ExitCause::Killed(signal) => match signal_name(signal) {
                Some(name) => write!(f, "killed by signal {signal} ({name})"),
                None => write!(f, "killed by signal {signal}"),
            },
            ExitCause::Unknown => {
                f.write_str("ended, its exit status collected elsewhere in this process")
            }
        }
    }
}

fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGSTKFLT => "SIGSTKFLT",
        libc::SIGCHLD => "SIGCHLD",
        libc::SIGCONT => "SIGCONT",
        libc::SIGSTOP => "SIGSTOP",
        libc::SIGTSTP => "SIGTSTP",
        libc::SIGTTIN => "SIGTTIN",
        libc::SIGTTOU => "SIGTTOU",
        libc::SIGURG => "SIGURG",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGVTALRM => "SIGVTALRM",
        libc::SIGPROF => "SIGPROF",
        libc::SIGWINCH => "SIGWINCH",
        libc::SIGIO => "SIGIO",
        libc::SIGPWR => "SIGPWR",
        libc::SIGSYS => "SIGSYS",
        _ => return None,
    })
}
