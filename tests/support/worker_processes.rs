//! The worker processes of process sessions as the tests see them from the controller: each
//! worker's pid, and whether a pid still runs or waits to be reaped (the test file that uses
//! this declares the `session_calls` module too).

#![allow(dead_code)] // each test binary uses its own part of this module

use std::sync::Arc;
use std::time::{Duration, Instant};

use discovm::session::Session;

use crate::session_calls::{call, int};

/// The process id of each worker.
pub fn pids(s: &Arc<Session>) -> Vec<i32> {
    let pid = s.get_global_func("proc.pid").unwrap();
    let pids = call(s, &pid, &[]);
    (0..s.num_workers())
        .map(|w| int(s.get_register(pids.reg(), w).unwrap()) as i32)
        .collect()
}

/// Whether a process with this id runs (a zombie does not: it has ended, and an orphan's is
/// reaped by the system whenever it gets to it).
pub fn exists(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command's name, which is in parentheses.
        Ok(stat) => !matches!(
            stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next()),
            Some(Some('Z'))
        ),
        Err(_) => false,
    }
}

/// Whether this process has a child `pid` left to reap (a zombie of a worker it started).
pub fn unreaped(pid: i32) -> bool {
    let mut status = 0;
    // SAFETY: a non-blocking query of one pid; it reaps a zombie, which is what a test of
    // "nothing was left unreaped" must not find.
    unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) > 0 }
}

/// Waits up to `limit` for `pid` to be gone entirely (dead and reaped).
pub fn gone_within(pid: i32, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if !exists(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    !exists(pid)
}

/// A process that [`stop`] stopped: continued when this is dropped, so that a test that fails
/// while the process is stopped leaves no stopped process behind (it would hold the test's
/// output open, and whatever reads that output would wait for it).
#[must_use = "the process continues when this is dropped"]
pub struct Stopped(i32);

impl Stopped {
    /// Continues the process now.
    pub fn resume(self) {
        let pid = self.0;
        std::mem::forget(self);
        // SAFETY: a signal to a process the test stopped.
        assert_eq!(
            unsafe { libc::kill(pid, libc::SIGCONT) },
            0,
            "continuing {pid}"
        );
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: a signal to a process the test stopped; harmless to one that went on.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// Stops `pid` with SIGSTOP and waits until it is stopped; it continues when the returned
/// guard is dropped, if nothing continued it before.
pub fn stop(pid: i32) -> Stopped {
    // SAFETY: a signal to a child process of the test.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let stopped = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('T'))
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let guard = Stopped(pid);
    while !stopped() {
        assert!(Instant::now() < deadline, "{pid} never stopped");
        std::thread::sleep(Duration::from_millis(1));
    }
    guard
}
