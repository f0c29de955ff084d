//! Death watch, both ways: the controller learns that a worker process ended within
//! milliseconds, and a worker process ends when its controller does.
//!
//! The idea that makes it work: a pidfd becomes readable when its process ends, so one thread
//! blocked in `poll()` on the pidfds hears of a death as it happens, with no timeout to tune.
//! The controller's [`DeathWatch`] polls its children's pidfds (plus an eventfd that tells it to
//! look again or stop); a worker's [`exit_with_parent`] thread polls its controller's.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::child::{Child, Process};
use super::exit::ExitCause;
use super::pidfd::{pidfd_open, pidfd_unavailable, wait_readable};
use super::spawn::CONTROLLER_PID_VAR;
use crate::object::{Error, Result};

/// How often the watcher looks at children that have no pidfd (kernels without pidfds), and
/// at children whose pidfd said "ended" before `waitpid` agreed.
const SWEEP_INTERVAL: Duration = Duration::from_millis(20);
/// How often a worker without a pidfd for its controller checks `getppid()`.
const PARENT_POLL_INTERVAL: Duration = Duration::from_millis(50);
/// The status a worker exits with when its controller is gone.
pub(crate) const PARENT_GONE_STATUS: i32 = 1;

/// Called with the worker's index and how its process ended.
type OnExit = dyn Fn(usize, &ExitCause) + Send + Sync;

/// A session's watch over its worker processes: one thread, blocked in `poll()` on every
/// watched child's pidfd, that reaps a child as soon as it ends and reports it.
///
/// One thread per session, not per child: a single `poll()` over all pidfds hears of each
/// death as soon as one thread per child would, costs one stack whatever the number of
/// workers, and gives the session its reports in one order, from one thread.
pub(crate) struct DeathWatch {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    /// An eventfd: written to make the thread look at `added` and `stop`.
    wake: OwnedFd,
    stop: AtomicBool,
    added: Mutex<Vec<(usize, Arc<Process>)>>,
}

impl Shared {
    fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: the eventfd is open (owned by `self`); the write reads 8 bytes from `one`.
        // It fails only when the counter would overflow, when the thread is due to wake anyway.
        unsafe { libc::write(self.wake.as_raw_fd(), (&raw const one).cast(), 8) };
    }

    fn drain(&self) {
        let mut count: u64 = 0;
        // SAFETY: the eventfd is open and non-blocking; the read writes 8 bytes into `count`.
        unsafe { libc::read(self.wake.as_raw_fd(), (&raw mut count).cast(), 8) };
    }
}

impl DeathWatch {
    /// Starts the watching thread. `on_exit(worker, cause)` is called on that thread once for
    /// each watched child, after the child was reaped (by the watcher, or by whoever reaped it
    /// first: `Child::terminate` or dropping the `Child`), and never after the watcher was
    /// dropped. A panic in it is caught and ignored.
    ///
    /// Errors: `RuntimeError` when the eventfd or the thread cannot be made.
    pub(crate) fn new(on_exit: impl Fn(usize, &ExitCause) + Send + Sync + 'static) -> Result<Self> {
        // SAFETY: eventfd takes plain numbers and returns a new descriptor or -1.
        let wake = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if wake < 0 {
            return Err(Error::runtime(format!(
                "could not watch worker processes: eventfd failed: {}",
                io::Error::last_os_error()
            )));
        }
        let shared = Arc::new(Shared {
            // SAFETY: `wake` is a new open descriptor nobody else owns.
            wake: unsafe { OwnedFd::from_raw_fd(wake) },
            stop: AtomicBool::new(false),
            added: Mutex::new(Vec::new()),
        });
        let thread = thread::Builder::new()
            .name("discovm-watch".into())
            .spawn({
                let shared = shared.clone();
                move || watch_children(&shared, &on_exit)
            })
            .map_err(|e| {
                Error::runtime(format!(
                    "could not start the thread that watches worker processes: {e}"
                ))
            })?;
        Ok(DeathWatch {
            shared,
            thread: Some(thread),
        })
    }

    /// Watches `child`, reported as worker `worker` when it ends. From now on the watcher reaps
    /// it, and `child.try_exit()` reads what the watcher recorded.
    pub(crate) fn watch(&self, worker: usize, child: &Child) {
        let process = child.process().clone();
        process.set_watched(true);
        self.shared
            .added
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((worker, process));
        self.shared.wake();
    }
}

impl Drop for DeathWatch {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake();
        if let Some(thread) = self.thread.take() {
            // Dropped by `on_exit` itself, the thread ends when the callback returns.
            if thread.thread().id() != thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

fn watch_children(shared: &Shared, on_exit: &OnExit) {
    let mut watched: Vec<(usize, Arc<Process>)> = Vec::new();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let entry = |fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // Not channel::wait: poll() on the pidfds wakes at each death; ones without a pidfd are swept.
    loop {
        if shared.stop.load(Ordering::Acquire) {
            // Whoever asks these children how they are now has to reap them.
            let added = shared.added.lock().unwrap_or_else(PoisonError::into_inner);
            for (_, process) in watched.iter().chain(added.iter()) {
                process.set_watched(false);
            }
            return;
        }
        watched.append(&mut shared.added.lock().unwrap_or_else(PoisonError::into_inner));
        fds.clear();
        fds.push(entry(shared.wake.as_raw_fd()));
        fds.extend(watched.iter().filter_map(|(_, p)| p.pidfd()).map(entry));
        let sweep = watched.iter().any(|(_, p)| p.pidfd().is_none());
        let timeout = if sweep {
            SWEEP_INTERVAL.as_millis() as libc::c_int
        } else {
            -1
        };
        // SAFETY: `fds` holds `fds.len()` valid entries, each naming a descriptor kept open
        // by `shared` or by a `Process` in `watched` for the whole call.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
        if ready < 0 {
            if io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                thread::sleep(SWEEP_INTERVAL);
            }
            continue;
        }
        if fds[0].revents != 0 {
            shared.drain();
        }
        // The pidfd entries follow the eventfd's, in the order of `watched`.
        let mut said_ended = fds[1..].iter().map(|fd| fd.revents != 0);
        let mut stuck = false;
        watched.retain(|(worker, process)| {
            let look = match process.pidfd() {
                Some(_) => said_ended.next().unwrap_or(false),
                None => true,
            };
            if !look {
                return true;
            }
            match process.try_reap() {
                Some(cause) => {
                    let _ = catch_unwind(AssertUnwindSafe(|| on_exit(*worker, &cause)));
                    false
                }
                None => {
                    // Only a tracer holding the child makes its pidfd say "ended" first.
                    stuck |= process.pidfd().is_some();
                    true
                }
            }
        });
        if stuck {
            thread::sleep(SWEEP_INTERVAL);
        }
    }
}

/// For a worker process: ends this process (`_exit(1)`, no clean-up) as soon as the controller
/// that started it ends, or at once if it has ended already. The controller's pid comes from
/// `DISCOVM_CONTROLLER_PID`, which `spawn` sets; a thread polls that process's pidfd, or,
/// where the kernel has no pidfds, checks `getppid()` every 50 ms. Calling it again does
/// nothing.
///
/// It watches the controller process, not the thread that started this one (which is what
/// PR_SET_PDEATHSIG would watch): that thread may be a short-lived host thread.
///
/// Errors: `ValueError` when `DISCOVM_CONTROLLER_PID` is missing or not a pid;
/// `RuntimeError` when the pidfd or the thread cannot be made.
pub(crate) fn exit_with_parent() -> Result<()> {
    let controller = controller_pid(std::env::var_os(CONTROLLER_PID_VAR).as_deref())?;
    watch_parent(controller)
}

fn controller_pid(value: Option<&OsStr>) -> Result<libc::pid_t> {
    let value = value.ok_or_else(|| {
        Error::value(format!(
            "{CONTROLLER_PID_VAR} is not set: a worker program runs under the controller that \
             started it, which sets it"
        ))
    })?;
    value
        .to_str()
        .and_then(|text| text.parse::<libc::pid_t>().ok())
        .filter(|&pid| pid > 0)
        .ok_or_else(|| {
            Error::value(format!(
                "{CONTROLLER_PID_VAR} is not a process id: {value:?}"
            ))
        })
}

fn watch_parent(controller: libc::pid_t) -> Result<()> {
    static WATCHING: AtomicBool = AtomicBool::new(false);
    if WATCHING.swap(true, Ordering::AcqRel) {
        return Ok(());
    }
    let started = start_watching_parent(controller);
    if started.is_err() {
        WATCHING.store(false, Ordering::Release);
    }
    started
}

fn start_watching_parent(controller: libc::pid_t) -> Result<()> {
    let pidfd = match pidfd_open(controller) {
        Ok(pidfd) => Some(pidfd),
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => parent_gone(),
        Err(e) if pidfd_unavailable(&e) => None,
        Err(e) => {
            return Err(Error::runtime(format!(
                "could not watch the controller (pid {controller}): pidfd_open failed: {e}"
            )));
        }
    };
    // With a pidfd, the controller is watched whoever started this process (a wrapper script
    // between them, say): the pid was the controller's when it set the variable moments ago.
    // Without one, it must be the parent, whose change says it is gone.
    // SAFETY: getppid has no preconditions.
    if pidfd.is_none() && unsafe { libc::getppid() } != controller {
        parent_gone();
    }
    thread::Builder::new()
        .name("discovm-parent".into())
        .spawn(move || {
            if let Some(pidfd) = pidfd {
                // Not channel::wait: poll() on the pidfd wakes when the controller ends. Only an
                // error in poll itself ends this loop; then fall back to polling.
                loop {
                    if wait_readable(pidfd.as_raw_fd(), None) {
                        parent_gone();
                    }
                    if io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                        break;
                    }
                }
                // Polled by hand: poll() failed, so only kill(0) tells that the controller ended.
                // SAFETY: kill with signal 0 only checks that the process exists.
                while unsafe { libc::kill(controller, 0) } == 0 {
                    thread::sleep(PARENT_POLL_INTERVAL);
                }
                parent_gone();
            }
            // Polled by hand: without a pidfd, only a change of getppid() tells of the end.
            loop {
                // SAFETY: getppid has no preconditions.
                if unsafe { libc::getppid() } != controller {
                    parent_gone();
                }
                thread::sleep(PARENT_POLL_INTERVAL);
            }
        })
        .map_err(|e| {
            Error::runtime(format!(
                "could not start the thread that watches the controller (pid {controller}): {e}"
            ))
        })?;
    Ok(())
}

fn parent_gone() -> ! {
    // SAFETY: _exit ends the process at once; nothing here depends on clean-up running.
    unsafe { libc::_exit(PARENT_GONE_STATUS) }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::os::fd::{AsFd, BorrowedFd};
    use std::path::Path;
    use std::sync::mpsc;
    use std::time::Instant;

    use super::super::spawn::spawn;
    use super::super::tests::{
        PATIENCE, assert_reaped, eventually, read_line, read_to_eof, send, sh,
    };
    use super::*;
    use crate::object::ErrorKind;

    type Report = (usize, ExitCause, Instant);

    /// A watcher whose reports arrive on the returned receiver, stamped with when they came.
    fn watcher() -> (DeathWatch, mpsc::Receiver<Report>) {
        let (sender, reports) = mpsc::channel();
        let watcher = DeathWatch::new(move |worker, cause: &ExitCause| {
            let _ = sender.send((worker, *cause, Instant::now()));
        })
        .unwrap();
        (watcher, reports)
    }

    #[test]
    fn a_killed_child_is_reported_within_100_ms() {
        for use_pidfd in [true, false] {
            let (watcher, reports) = watcher();
            let (reader, _writer) = io::pipe().unwrap();
            let child = sh("read line <&3", &[reader.as_fd()], use_pidfd);
            watcher.watch(7, &child);
            assert_eq!(child.try_exit(), None);
            let killed = Instant::now();
            send(&child, libc::SIGKILL);
            let (worker, cause, noticed) = reports.recv_timeout(PATIENCE).unwrap();
            let delay = noticed - killed;
            assert!(
                delay < Duration::from_millis(100),
                "noticed after {delay:?}"
            );
            assert_eq!(worker, 7);
            assert_eq!(cause.to_string(), "killed by signal 9 (SIGKILL)");
            assert_eq!(child.try_exit(), Some(cause));
            assert_reaped(child.pid());
        }
    }

    #[test]
    fn a_child_that_exits_is_reported_with_its_status() {
        for use_pidfd in [true, false] {
            let (watcher, reports) = watcher();
            let (reader, writer) = io::pipe().unwrap();
            let child = sh("read line <&3; exit 3", &[reader.as_fd()], use_pidfd);
            watcher.watch(1, &child);
            drop(writer);
            let (worker, cause, _) = reports.recv_timeout(PATIENCE).unwrap();
            assert_eq!((worker, cause), (1, ExitCause::Exited(3)));
            assert_eq!(cause.to_string(), "exited with status 3");
            assert_eq!(child.try_exit(), Some(cause));
            assert_reaped(child.pid());
        }
    }

    #[test]
    fn each_death_is_reported_once_whoever_reaps_it() {
        let (watcher, reports) = watcher();
        let (reader, writer) = io::pipe().unwrap();
        let children: Vec<_> = (0..3)
            .map(|_| sh("read line <&3", &[reader.as_fd()], true))
            .collect();
        for (worker, child) in children.iter().enumerate() {
            watcher.watch(worker, child);
        }
        // The owner reaps worker 1 itself; the watcher still reports it, once.
        assert_eq!(
            children[1].terminate(Duration::ZERO),
            ExitCause::Killed(libc::SIGKILL)
        );
        let (worker, cause, _) = reports.recv_timeout(PATIENCE).unwrap();
        assert_eq!((worker, cause), (1, ExitCause::Killed(libc::SIGKILL)));
        // The others run on until told to stop.
        assert_eq!(children[0].try_exit(), None);
        assert_eq!(children[2].try_exit(), None);
        drop(writer);
        let mut rest: Vec<_> = (0..2)
            .map(|_| reports.recv_timeout(PATIENCE).unwrap())
            .map(|(worker, cause, _)| (worker, cause))
            .collect();
        rest.sort_by_key(|&(worker, _)| worker);
        // `read` at end of file fails, and so does the script.
        assert_eq!(rest, [(0, ExitCause::Exited(1)), (2, ExitCause::Exited(1))]);
        for child in &children {
            assert_reaped(child.pid());
        }
        drop(watcher);
        assert!(
            reports.recv().is_err(),
            "a report after the watcher was dropped"
        );
    }

    #[test]
    fn a_child_that_outlives_its_watcher_still_reports_how_it_ended() {
        let (watcher, reports) = watcher();
        let (reader, _writer) = io::pipe().unwrap();
        let child = sh("read line <&3", &[reader.as_fd()], true);
        watcher.watch(0, &child);
        drop(watcher);
        send(&child, libc::SIGKILL);
        let cause = eventually("try_exit never saw the child end", || child.try_exit());
        assert_eq!(cause, ExitCause::Killed(libc::SIGKILL));
        assert!(
            reports.recv().is_err(),
            "a report after the watcher was dropped"
        );
        assert_reaped(child.pid());
    }

    #[test]
    fn the_controller_pid_comes_from_the_environment() {
        assert_eq!(controller_pid(Some(OsStr::new("4711"))), Ok(4711));
        let error = controller_pid(None).unwrap_err();
        assert_eq!(error.kind, ErrorKind::Value);
        assert!(
            error
                .message
                .starts_with("DISCOVM_CONTROLLER_PID is not set"),
            "{error}"
        );
        let error = controller_pid(Some(OsStr::new("x1"))).unwrap_err();
        assert_eq!(
            error.message,
            "DISCOVM_CONTROLLER_PID is not a process id: \"x1\""
        );
        assert!(controller_pid(Some(OsStr::new("0"))).is_err());
    }

    const ROLE_VAR: &str = "DISCOVM_TEST_WORKER_ROLE";

    /// A worker for the tests below, in a process a shell started: it watches its controller
    /// (the shell), says "ready" on descriptor 3 and waits to be ended. Outside such a process
    /// it does nothing.
    #[test]
    fn worker_role() {
        if std::env::var_os(ROLE_VAR).is_none() {
            return;
        }
        // SAFETY: descriptor 3 is the pipe the test passed down, open for this process's life.
        let report = unsafe { BorrowedFd::borrow_raw(3) };
        let line = match exit_with_parent() {
            Ok(()) => "ready\n".to_string(),
            Err(e) => format!("{e}\n"),
        };
        // SAFETY: descriptor 3 is open; the write reads `line`'s bytes.
        unsafe { libc::write(report.as_raw_fd(), line.as_ptr().cast(), line.len()) };
        if line != "ready\n" {
            // SAFETY: _exit ends this process at once.
            unsafe { libc::_exit(2) };
        }
        // Parked until the test ends this process: nothing wakes it, and nothing needs to.
        loop {
            thread::park();
        }
    }

    /// Starts a shell (the controller) that starts `worker_role` (the worker) with the
    /// controller's pid in its environment, then runs `then`; the worker holds the returned
    /// pipe's other end, so end of file there means the worker is gone.
    fn controller_with_worker(then: &str) -> (Child, io::PipeReader) {
        let name = module_path!().split_once("::").unwrap().1.to_string() + "::worker_role";
        let script = format!(
            "{ROLE_VAR}=1 {CONTROLLER_PID_VAR}=$$ \"$0\" \"$1\" --exact -q --test-threads=1 \
             >/dev/null & {then}"
        );
        let program = std::env::current_exe().unwrap();
        let (reader, writer) = io::pipe().unwrap();
        let args = [
            Path::new("-c"),
            Path::new(&script),
            &program,
            Path::new(&name),
        ];
        let controller = spawn(Path::new("/bin/sh"), args, &[writer.as_fd()], &[]).unwrap();
        (controller, reader)
    }

    #[test]
    fn a_worker_ends_within_1_s_of_its_controller() {
        let (controller, mut worker) = controller_with_worker("wait");
        assert_eq!(read_line(&mut worker, PATIENCE).as_deref(), Some("ready"));
        let killed = Instant::now();
        assert_eq!(
            controller.terminate(Duration::ZERO),
            ExitCause::Killed(libc::SIGKILL)
        );
        assert_eq!(read_to_eof(&mut worker, Duration::from_secs(1)), "");
        let delay = killed.elapsed();
        assert!(
            delay < Duration::from_secs(1),
            "the worker ended after {delay:?}"
        );
    }

    #[test]
    fn a_worker_whose_controller_is_gone_ends_at_once() {
        // The controller exits before the worker starts watching it (almost always): the
        // worker sees another parent and ends without saying "ready".
        let (controller, mut worker) = controller_with_worker("exit 0");
        assert_eq!(controller.terminate(PATIENCE), ExitCause::Exited(0));
        let said = read_to_eof(&mut worker, PATIENCE);
        assert!(
            said.is_empty() || said == "ready\n",
            "the worker said {said:?}"
        );
    }
}
