//! Worker processes: finding the worker program, starting it with exactly the descriptors it
//! needs, and ending it without leaving a zombie or a running process behind.
//!
//! The idea that makes it work: a child is reaped once, by whoever notices its death first,
//! under a per-child lock that also records the cause; everyone else reads the record. Waiting
//! and signalling go through the child's pidfd where the kernel has one, so a recycled pid is
//! never signalled. Without pidfds (kernels before 5.3, or sandboxes that refuse the call),
//! waiting falls back to polling `waitpid(WNOHANG)`.

use std::ffi::{CString, OsStr};
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::object::{Error, ErrorKind, Result};

/// The worker program's file name, in `bin/` next to the library's `lib/` once installed.
pub(crate) const WORKER_PROGRAM: &str = "discovm-worker";
/// The environment variable that names the worker program.
pub(crate) const WORKER_PROGRAM_VAR: &str = "DISCOVM_WORKER";
/// The environment variable [`spawn`] sets in every child: the controller's pid, in decimal.
/// The child compares it with `getppid()` to learn, without a race, whether its controller is
/// still there (see `exit_with_parent`).
pub(crate) const CONTROLLER_PID_VAR: &str = "DISCOVM_CONTROLLER_PID";
/// The number the first inherited descriptor has in the child; the others follow in order.
pub(crate) const FIRST_INHERITED_FD: RawFd = 3;

/// How often waiting without a pidfd looks at the child again, at most.
const LONGEST_NAP: Duration = Duration::from_millis(10);

/// Finds the worker program: `option` if given, else `$DISCOVM_WORKER`, else `discovm-worker`
/// next to this library (`<dir>/../bin/`, the installed layout, then `<dir>/`, a build tree),
/// where `<dir>` holds the file this code was loaded from. Empty names count as not given. A
/// relative name is taken from the current directory; the result is absolute.
///
/// Errors: `ValueError` naming the program and who named it when it does not exist or is not an
/// executable file; `ValueError` listing where it looked when nothing names one and none is
/// next to the library.
pub(crate) fn worker_program(option: Option<&str>) -> Result<PathBuf> {
    let env = std::env::var_os(WORKER_PROGRAM_VAR);
    find_worker_program(
        option,
        env.as_deref(),
        crate::device::dynlib::library_file().as_deref(),
    )
}

fn find_worker_program(
    option: Option<&str>,
    env: Option<&OsStr>,
    library: Option<&Path>,
) -> Result<PathBuf> {
    if let Some(name) = option.filter(|name| !name.is_empty()) {
        return checked_program(Path::new(name), "the session option `worker_program`");
    }
    if let Some(name) = env.filter(|name| !name.is_empty()) {
        return checked_program(Path::new(name), WORKER_PROGRAM_VAR);
    }
    let Some(dir) = library.and_then(Path::parent) else {
        return Err(Error::value(format!(
            "no worker program found: {WORKER_PROGRAM_VAR} is not set and the file this \
             library was loaded from is unknown; set {WORKER_PROGRAM_VAR} to the path of \
             {WORKER_PROGRAM} (or of a program that calls dvm_worker_main), or name it in the \
             session options"
        )));
    };
    let bin = dir.join("../bin");
    let bin = std::fs::canonicalize(&bin).unwrap_or(bin);
    let candidates = [bin.join(WORKER_PROGRAM), dir.join(WORKER_PROGRAM)];
    if let Some(found) = candidates.iter().find(|path| is_executable_file(path)) {
        return Ok(found.clone());
    }
    Err(Error::value(format!(
        "no worker program found: {WORKER_PROGRAM_VAR} is not set and neither {} nor {} \
         (next to {}) is an executable file; set {WORKER_PROGRAM_VAR} to the path of \
         {WORKER_PROGRAM} (or of a program that calls dvm_worker_main), or name it in the \
         session options",
        candidates[0].display(),
        candidates[1].display(),
        library.unwrap_or(dir).display()
    )))
}

/// `name` made absolute, when it is an executable file; `source` says who named it.
fn checked_program(name: &Path, source: &str) -> Result<PathBuf> {
    let path = std::path::absolute(name).map_err(|e| {
        Error::value(format!(
            "worker program {} named by {source} cannot be made absolute: {e}",
            name.display()
        ))
    })?;
    let problem = match std::fs::metadata(&path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => "does not exist".to_string(),
        Err(e) => format!("cannot be examined: {e}"),
        Ok(meta) if !meta.is_file() => "is not a file".to_string(),
        Ok(_) if !is_executable_file(&path) => "is not executable".to_string(),
        Ok(_) => return Ok(path),
    };
    Err(Error::value(format!(
        "worker program {} named by {source} {problem}",
        path.display()
    )))
}

fn is_executable_file(path: &Path) -> bool {
    let Ok(c_path) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c_path` is a NUL-terminated string that outlives the call; access only reads it.
    let executable = unsafe { libc::access(c_path.as_ptr(), libc::X_OK) } == 0;
    executable && std::fs::metadata(path).is_ok_and(|meta| meta.is_file())
}

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
    fn from_wait_status(status: libc::c_int) -> ExitCause {
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

/// A child process of this one. Dropping it kills the process (if it is still running) and
/// reaps it. Any thread may use it.
pub(crate) struct Child {
    process: Arc<Process>,
}

/// What the owner and the watcher share about one child.
pub(super) struct Process {
    pid: libc::pid_t,
    /// The child's pidfd; `None` where the kernel has none to give.
    pidfd: Option<OwnedFd>,
    /// How it ended, once it was reaped; set once, under `reaping`.
    cause: OnceLock<ExitCause>,
    /// Held around each `waitpid` and each signal, so the pid is reaped once and never
    /// signalled after it was reaped (when it may name another process).
    reaping: Mutex<()>,
    /// A watcher reaps it, so [`Child::try_exit`] need only read the record.
    watched: AtomicBool,
}

impl Process {
    pub(super) fn pidfd(&self) -> Option<RawFd> {
        self.pidfd.as_ref().map(AsRawFd::as_raw_fd)
    }

    pub(super) fn recorded(&self) -> Option<ExitCause> {
        self.cause.get().copied()
    }

    pub(super) fn set_watched(&self, watched: bool) {
        self.watched.store(watched, Ordering::Release);
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        self.reaping.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reaps the child if it has ended, without blocking; the cause, once it has.
    pub(super) fn try_reap(&self) -> Option<ExitCause> {
        if let Some(cause) = self.recorded() {
            return Some(cause);
        }
        let _reaping = self.lock();
        if let Some(cause) = self.recorded() {
            return Some(cause);
        }
        let mut status = 0;
        let cause = loop {
            // SAFETY: `status` is writable; the child is not reaped yet (no cause recorded, and
            // every reap records one under this lock), so `pid` still names it.
            let reaped = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            if reaped == self.pid {
                break ExitCause::from_wait_status(status);
            }
            if reaped == 0 {
                return None;
            }
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                // Collected by someone else in this process: it has ended all the same.
                _ => break ExitCause::Unknown,
            }
        };
        Some(*self.cause.get_or_init(|| cause))
    }

    /// Waits until the child has ended and is reaped, or until `deadline`.
    fn wait_until(&self, deadline: Option<Instant>) -> Option<ExitCause> {
        let mut nap = Duration::from_millis(1);
        // The pidfd said "ended" last time round, yet waitpid did not agree (a tracer holds
        // the child): it would say so again at once, so nap instead.
        let mut said_ended = false;
        loop {
            if let Some(cause) = self.try_reap() {
                return Some(cause);
            }
            let left = match deadline {
                Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return None,
                },
                None => None,
            };
            match &self.pidfd {
                Some(pidfd) if !said_ended => said_ended = wait_readable(pidfd.as_raw_fd(), left),
                _ => {
                    std::thread::sleep(left.map_or(nap, |left| left.min(nap)));
                    nap = (nap * 2).min(LONGEST_NAP);
                    said_ended = false;
                }
            }
        }
    }

    /// Sends SIGKILL, unless the child was reaped already.
    fn kill(&self) {
        let _reaping = self.lock();
        if self.recorded().is_some() {
            return;
        }
        // Failures mean the child has ended already (ESRCH): waiting will reap it.
        match &self.pidfd {
            Some(pidfd) => {
                // SAFETY: the pidfd is open (owned by `self`); a null siginfo and no flags make
                // this plain `kill` aimed at exactly that process.
                unsafe {
                    libc::syscall(
                        libc::SYS_pidfd_send_signal,
                        pidfd.as_raw_fd(),
                        libc::SIGKILL,
                        std::ptr::null::<libc::siginfo_t>(),
                        0,
                    )
                };
            }
            None => {
                // SAFETY: kill takes plain numbers; the child is not reaped (checked under the
                // lock every reaper takes), so `pid` still names it.
                unsafe { libc::kill(self.pid, libc::SIGKILL) };
            }
        }
    }
}

/// Waits until `fd` is readable (true) or `timeout` passes (false); `None` waits as long as it
/// takes. Errors and interruptions count as not readable.
pub(super) fn wait_readable(fd: RawFd, timeout: Option<Duration>) -> bool {
    let mut entry = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let millis = timeout.map_or(-1, |timeout| {
        // Rounded up, so a wait for less than a millisecond does not spin.
        let millis = timeout.as_nanos().div_ceil(1_000_000);
        libc::c_int::try_from(millis).unwrap_or(libc::c_int::MAX)
    });
    // SAFETY: `entry` is one valid pollfd for the whole call; poll writes only `revents`.
    let ready = unsafe { libc::poll(&mut entry, 1, millis) };
    ready > 0
}

impl Child {
    pub(crate) fn pid(&self) -> i32 {
        self.process.pid
    }

    pub(super) fn process(&self) -> &Arc<Process> {
        &self.process
    }

    /// How the child ended, or `None` while it runs. Cheap: with a watcher (which reaps it) a
    /// read of what the watcher recorded; without one, a non-blocking `waitpid`.
    pub(crate) fn try_exit(&self) -> Option<ExitCause> {
        match self.process.recorded() {
            Some(cause) => Some(cause),
            None if self.process.watched.load(Ordering::Acquire) => None,
            None => self.process.try_reap(),
        }
    }

    /// Waits up to `timeout` for the child to end; how it ended, or `None` if it still runs.
    pub(crate) fn wait_timeout(&self, timeout: Duration) -> Option<ExitCause> {
        self.process.wait_until(Instant::now().checked_add(timeout))
    }

    /// Ends the child: waits up to `grace` for it to exit by itself (after it was told to shut
    /// down), then kills it with SIGKILL and reaps it. How it ended. Several children share
    /// one grace period when each gets what is left of it (`deadline - now`).
    pub(crate) fn terminate(&self, grace: Duration) -> ExitCause {
        if let Some(cause) = self.wait_timeout(grace) {
            return cause;
        }
        self.process.kill();
        self.wait()
    }

    /// Waits until the child has ended, however long that takes, and reaps it.
    fn wait(&self) -> ExitCause {
        loop {
            if let Some(cause) = self.process.wait_until(None) {
                return cause;
            }
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.process.try_reap().is_none() {
            self.process.kill();
            self.wait();
        }
    }
}

/// Starts `program` with `args` (`argv[0]` is the program's path). The child inherits stdin,
/// stdout and stderr, the descriptors in `inherit` at numbers 3, 4, 5, ... in that order (so
/// the arguments can name them), and no other descriptor; its environment is this process's
/// with the variables of `env` set and `DISCOVM_CONTROLLER_PID` (this process's pid); its
/// signal mask is empty and SIGPIPE and SIGXFSZ have their default actions.
///
/// The child starts with `posix_spawn`, not `fork` plus a pre-exec hook: glibc starts it with
/// vfork semantics (no copy of a large controller's page tables), reports a failed exec as the
/// call's error, and runs the descriptor work (the dup2s, then closing everything from the
/// first free number up with close_range, or a scan of /proc/self/fd where the kernel lacks
/// it) itself, so no code of ours runs between fork and exec and nothing here must be
/// async-signal-safe. (A pre-exec hook under `std::process::Command` would also risk
/// overwriting the pipe through which `Command` reports a failed exec, whose number it does
/// not tell.) The pidfd is opened just after: only this module reaps the child, so its pid
/// still names it then.
///
/// Errors: `ValueError` for an argument with a NUL byte; `RuntimeError` naming the program,
/// the call and the OS error when the process cannot be started.
pub(crate) fn spawn<I>(
    program: &Path,
    args: I,
    inherit: &[BorrowedFd<'_>],
    env: &[(String, String)],
) -> Result<Child>
where
    I: IntoIterator,
    I::Item: AsRef<OsStr>,
{
    spawn_with(program, args, inherit, env, true)
}

/// [`spawn`], with `use_pidfd` false to exercise the path for kernels without pidfds.
fn spawn_with<I>(
    program: &Path,
    args: I,
    inherit: &[BorrowedFd<'_>],
    env: &[(String, String)],
    use_pidfd: bool,
) -> Result<Child>
where
    I: IntoIterator,
    I::Item: AsRef<OsStr>,
{
    let failed = |call: &str, error: io::Error| {
        Error::runtime(format!(
            "could not start worker program {}: {call} failed: {error}",
            program.display()
        ))
    };
    let c_string = |text: &OsStr, what: &str| {
        CString::new(text.as_bytes()).map_err(|_| {
            Error::value(format!(
                "{what} for worker program {} holds a NUL byte: {text:?}",
                program.display()
            ))
        })
    };
    let path = c_string(program.as_os_str(), "the path")?;
    let mut argv = vec![path.clone()];
    for (i, arg) in args.into_iter().enumerate() {
        argv.push(c_string(arg.as_ref(), &format!("argument {}", i + 1))?);
    }
    let envp = environment(env);

    let first_closed = libc::c_int::try_from(inherit.len())
        .ok()
        .and_then(|count| FIRST_INHERITED_FD.checked_add(count))
        .ok_or_else(|| {
            Error::value(format!(
                "too many descriptors ({}) to pass to worker program {}",
                inherit.len(),
                program.display()
            ))
        })?;
    // Copies of the inherited descriptors numbered above every target number, so that placing
    // one at its number never overwrites another before it was placed. They are close-on-exec
    // here (no other child gets them) and closed in the child by the close-from action.
    let mut above = Vec::with_capacity(inherit.len());
    for fd in inherit {
        // SAFETY: `fd` is open for the borrow; F_DUPFD_CLOEXEC makes a new descriptor, numbered
        // `first_closed` or more, that this function then owns.
        let copy = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, first_closed) };
        if copy < 0 {
            return Err(failed(
                &format!("fcntl(F_DUPFD_CLOEXEC) of descriptor {}", fd.as_raw_fd()),
                io::Error::last_os_error(),
            ));
        }
        // SAFETY: `copy` is a new open descriptor nobody else owns.
        above.push(unsafe { OwnedFd::from_raw_fd(copy) });
    }

    let mut actions =
        SpawnFileActions::new().map_err(|e| failed("posix_spawn_file_actions_init", e))?;
    for (target, fd) in (FIRST_INHERITED_FD..).zip(&above) {
        actions
            .dup2(fd.as_raw_fd(), target)
            .map_err(|e| failed("posix_spawn_file_actions_adddup2", e))?;
    }
    actions
        .close_from(first_closed)
        .map_err(|e| failed("posix_spawn_file_actions_addclosefrom_np", e))?;
    let attributes = SpawnAttributes::new().map_err(|e| failed("posix_spawnattr", e))?;

    let argv_ptrs = null_terminated(&argv);
    let envp_ptrs = null_terminated(&envp);
    let mut pid: libc::pid_t = 0;
    // SAFETY: `path` and both arrays are NUL-terminated strings in null-terminated arrays that
    // outlive the call (posix_spawn only reads them); `actions` and `attributes` were
    // initialised and stay at their addresses until dropped.
    let rc = unsafe {
        libc::posix_spawn(
            &mut pid,
            path.as_ptr(),
            actions.as_ptr(),
            attributes.as_ptr(),
            argv_ptrs.as_ptr(),
            envp_ptrs.as_ptr(),
        )
    };
    if rc != 0 {
        return Err(failed("posix_spawn", io::Error::from_raw_os_error(rc)));
    }
    drop(above);

    let (pidfd, error) = if use_pidfd {
        match pidfd_open(pid) {
            Ok(pidfd) => (Some(pidfd), None),
            Err(e) if pidfd_unavailable(&e) => (None, None),
            Err(e) => (None, Some(e)),
        }
    } else {
        (None, None)
    };
    let child = Child {
        process: Arc::new(Process {
            pid,
            pidfd,
            cause: OnceLock::new(),
            reaping: Mutex::new(()),
            watched: AtomicBool::new(false),
        }),
    };
    match error {
        // Dropping `child` kills and reaps it.
        Some(e) => Err(Error::runtime(format!(
            "worker program {} started as pid {pid}, but pidfd_open failed: {e}",
            program.display()
        ))),
        None => Ok(child),
    }
}

/// This process's environment, with the variables of `set` set and `DISCOVM_CONTROLLER_PID`
/// set to this process's pid.
fn environment(set: &[(String, String)]) -> Vec<CString> {
    let entry = |key: Vec<u8>, value: &[u8]| {
        let mut entry = key;
        entry.push(b'=');
        entry.extend_from_slice(value);
        CString::new(entry).ok()
    };
    let replaced =
        |key: &OsStr| key == CONTROLLER_PID_VAR || set.iter().any(|(k, _)| key == k.as_str());
    let mut env: Vec<CString> = std::env::vars_os()
        .filter(|(key, _)| !replaced(key))
        .filter_map(|(key, value)| entry(key.into_vec(), value.as_bytes()))
        .collect();
    env.extend(
        set.iter()
            .filter_map(|(k, v)| entry(k.clone().into_bytes(), v.as_bytes())),
    );
    env.extend(entry(
        CONTROLLER_PID_VAR.into(),
        std::process::id().to_string().as_bytes(),
    ));
    env
}

fn null_terminated(strings: &[CString]) -> Vec<*mut libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr().cast_mut())
        .chain(std::iter::once(std::ptr::null_mut()))
        .collect()
}

/// A pidfd for `pid`: a descriptor that names that one process (never a later one with the same
/// pid) and becomes readable when it ends.
pub(super) fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor (close-on-exec) or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new open descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Whether a pidfd_open error means "no pidfds here" (an old kernel, or a sandbox refusing
/// the call), to be worked around by polling.
pub(super) fn pidfd_unavailable(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::ENOSYS | libc::EPERM | libc::EACCES)
    )
}

fn os_result(rc: libc::c_int) -> io::Result<()> {
    match rc {
        0 => Ok(()),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

/// posix_spawn's file actions, boxed so that they stay where they were initialised.
struct SpawnFileActions(Box<libc::posix_spawn_file_actions_t>);

impl SpawnFileActions {
    fn new() -> io::Result<Self> {
        // SAFETY: plain C data, for which all-zero bytes are a valid value; init overwrites it.
        let mut actions =
            Box::new(unsafe { std::mem::zeroed::<libc::posix_spawn_file_actions_t>() });
        // SAFETY: `actions` is writable and stays at this address until destroyed in `drop`.
        os_result(unsafe { libc::posix_spawn_file_actions_init(&mut *actions) })?;
        Ok(SpawnFileActions(actions))
    }

    fn dup2(&mut self, fd: RawFd, target: RawFd) -> io::Result<()> {
        // SAFETY: the actions were initialised in `new`; this only records the action.
        os_result(unsafe { libc::posix_spawn_file_actions_adddup2(&mut *self.0, fd, target) })
    }

    /// Closes every descriptor from `first` up in the child (close_range, or a scan of
    /// /proc/self/fd where the kernel lacks it). A glibc 2.34 function.
    fn close_from(&mut self, first: RawFd) -> io::Result<()> {
        // SAFETY: the actions were initialised in `new`; this only records the action.
        os_result(unsafe { libc::posix_spawn_file_actions_addclosefrom_np(&mut *self.0, first) })
    }

    fn as_ptr(&self) -> *const libc::posix_spawn_file_actions_t {
        &*self.0
    }
}

impl Drop for SpawnFileActions {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once, here.
        unsafe { libc::posix_spawn_file_actions_destroy(&mut *self.0) };
    }
}

/// posix_spawn's attributes: an empty signal mask, SIGPIPE and SIGXFSZ at their default
/// actions (a controller may ignore them, and ignored signals stay ignored across exec), and a
/// process group of the worker's own, so that a terminal's Ctrl-C reaches the controller alone
/// (which decides what becomes of its workers; they end with it in any case).
struct SpawnAttributes(Box<libc::posix_spawnattr_t>);

impl SpawnAttributes {
    fn new() -> io::Result<Self> {
        // SAFETY: plain C data, for which all-zero bytes are a valid value; init overwrites it.
        let mut attributes = Box::new(unsafe { std::mem::zeroed::<libc::posix_spawnattr_t>() });
        // SAFETY: `attributes` is writable and stays at this address until destroyed in `drop`.
        os_result(unsafe { libc::posix_spawnattr_init(&mut *attributes) })?;
        let mut attributes = SpawnAttributes(attributes);
        let attr: &mut libc::posix_spawnattr_t = &mut attributes.0;
        // SAFETY: plain C data, for which all-zero bytes are a valid value; sigemptyset
        // initialises them before use.
        let (mut empty, mut defaults) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        let flags = libc::POSIX_SPAWN_SETSIGMASK
            | libc::POSIX_SPAWN_SETSIGDEF
            | libc::POSIX_SPAWN_SETPGROUP;
        // SAFETY: `attr` was initialised above; the set functions only write the sets they are
        // given, and the attribute setters copy them.
        unsafe {
            libc::sigemptyset(&mut empty);
            libc::sigemptyset(&mut defaults);
            libc::sigaddset(&mut defaults, libc::SIGPIPE);
            libc::sigaddset(&mut defaults, libc::SIGXFSZ);
            os_result(libc::posix_spawnattr_setsigmask(attr, &empty))?;
            os_result(libc::posix_spawnattr_setsigdefault(attr, &defaults))?;
            os_result(libc::posix_spawnattr_setpgroup(attr, 0))?;
            os_result(libc::posix_spawnattr_setflags(attr, flags as libc::c_short))?;
        }
        Ok(attributes)
    }

    fn as_ptr(&self) -> *const libc::posix_spawnattr_t {
        &*self.0
    }
}

impl Drop for SpawnAttributes {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once, here.
        unsafe { libc::posix_spawnattr_destroy(&mut *self.0) };
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::collections::BTreeSet;
    use std::io::{PipeReader, Read};
    use std::os::fd::AsFd;

    use super::*;

    /// Long enough for any child to start on a loaded machine; only failures wait this long.
    pub(crate) const PATIENCE: Duration = Duration::from_secs(60);

    pub(crate) fn sh(script: &str, inherit: &[BorrowedFd<'_>], use_pidfd: bool) -> Child {
        spawn_with(
            Path::new("/bin/sh"),
            ["-c", script],
            inherit,
            &[],
            use_pidfd,
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Reads one byte, waiting for it until `deadline`; `None` at end of file.
    fn read_byte(
        reader: &mut PipeReader,
        deadline: Instant,
    ) -> std::result::Result<Option<u8>, String> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err("nothing to read before the deadline".into());
            }
            if !wait_readable(reader.as_raw_fd(), Some(left)) {
                continue;
            }
            let mut byte = [0u8];
            match reader.read(&mut byte) {
                Ok(0) => return Ok(None),
                Ok(_) => return Ok(Some(byte[0])),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    /// Everything `reader` yields until end of file, which must come within `within`.
    pub(crate) fn read_to_eof(reader: &mut PipeReader, within: Duration) -> String {
        let deadline = Instant::now() + within;
        let mut text = Vec::new();
        loop {
            match read_byte(reader, deadline) {
                Ok(Some(byte)) => text.push(byte),
                Ok(None) => return String::from_utf8_lossy(&text).into_owned(),
                Err(e) => panic!("{e}, after {:?}", String::from_utf8_lossy(&text)),
            }
        }
    }

    /// One line from `reader` (without its newline), which must come within `within`; `None`
    /// at end of file.
    pub(crate) fn read_line(reader: &mut PipeReader, within: Duration) -> Option<String> {
        let deadline = Instant::now() + within;
        let mut line = Vec::new();
        loop {
            match read_byte(reader, deadline) {
                Ok(Some(b'\n')) => return Some(String::from_utf8_lossy(&line).into_owned()),
                Ok(Some(byte)) => line.push(byte),
                Ok(None) if line.is_empty() => return None,
                Ok(None) => return Some(String::from_utf8_lossy(&line).into_owned()),
                Err(e) => panic!("{e}, after {:?}", String::from_utf8_lossy(&line)),
            }
        }
    }

    /// Asserts that `pid` is no child of this process any more: reaped, not a zombie.
    pub(crate) fn assert_reaped(pid: i32) {
        let mut status = 0;
        // SAFETY: `status` is writable; WNOHANG never blocks.
        let reaped = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        let errno = io::Error::last_os_error().raw_os_error();
        assert!(
            reaped == -1 && errno == Some(libc::ECHILD),
            "pid {pid} is still a child of this process (waitpid gave {reaped})"
        );
    }

    /// Sends `signal` to `child`, which the caller knows is running.
    pub(crate) fn send(child: &Child, signal: i32) {
        // SAFETY: kill takes plain numbers; the child is unreaped, so its pid names it.
        assert_eq!(unsafe { libc::kill(child.pid(), signal) }, 0);
    }

    /// The state letter in /proc/PID/stat ('S' sleeping, 'T' stopped, ...).
    fn state(pid: i32) -> Option<char> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(')')?.1.trim_start().chars().next()
    }

    #[test]
    fn inherited_descriptors_arrive_at_3_4_in_order() {
        for use_pidfd in [true, false] {
            let (mut first, first_w) = io::pipe().unwrap();
            let (mut second, second_w) = io::pipe().unwrap();
            // The second pipe first, so the numbers come from the order, not the pipes.
            let child = sh(
                "echo to-3 >&3; echo to-4 >&4",
                &[second_w.as_fd(), first_w.as_fd()],
                use_pidfd,
            );
            drop((first_w, second_w));
            assert_eq!(read_to_eof(&mut second, PATIENCE), "to-3\n");
            assert_eq!(read_to_eof(&mut first, PATIENCE), "to-4\n");
            assert_eq!(child.wait_timeout(PATIENCE), Some(ExitCause::Exited(0)));
            assert_reaped(child.pid());
        }
    }

    #[test]
    fn child_holds_only_stdio_and_inherited_descriptors() {
        let (reader, writer) = io::pipe().unwrap();
        // A descriptor without close-on-exec, as C code in the host may leave one.
        let (leaky, _leaky_w) = io::pipe().unwrap();
        // SAFETY: `leaky` is open; F_SETFD only changes its close-on-exec flag.
        assert_eq!(
            unsafe { libc::fcntl(leaky.as_raw_fd(), libc::F_SETFD, 0) },
            0
        );
        // SAFETY: F_GETFD only reads the flags of the numbers given.
        let stdio = (0..3).filter(|&fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0);
        let expected: BTreeSet<i32> = stdio.chain([3, 4]).collect();
        for use_pidfd in [true, false] {
            let child = sh(
                "kill -STOP $$",
                &[reader.as_fd(), writer.as_fd()],
                use_pidfd,
            );
            let deadline = Instant::now() + PATIENCE;
            while state(child.pid()) != Some('T') {
                assert!(Instant::now() < deadline, "the child never stopped");
                std::thread::sleep(Duration::from_millis(1));
            }
            let held: BTreeSet<i32> = std::fs::read_dir(format!("/proc/{}/fd", child.pid()))
                .unwrap()
                .map(|entry| {
                    entry
                        .unwrap()
                        .file_name()
                        .to_str()
                        .unwrap()
                        .parse()
                        .unwrap()
                })
                .collect();
            assert_eq!(held, expected);
            let pid = child.pid();
            drop(child);
            assert_reaped(pid);
        }
    }

    #[test]
    fn child_learns_the_controller_pid() {
        let (mut reader, writer) = io::pipe().unwrap();
        let script = format!("printf %s \"${CONTROLLER_PID_VAR}\" >&3");
        let child = sh(&script, &[writer.as_fd()], true);
        drop(writer);
        assert_eq!(
            read_to_eof(&mut reader, PATIENCE),
            std::process::id().to_string()
        );
        assert_eq!(child.wait_timeout(PATIENCE), Some(ExitCause::Exited(0)));
    }

    #[test]
    fn child_gets_the_variables_it_is_given_over_this_process_s() {
        let (mut reader, writer) = io::pipe().unwrap();
        // PATH is set in this process: the child sees the given value instead.
        let env = [
            ("PATH".to_string(), "/given".to_string()),
            ("DVM_TEST_VAR".into(), "x y".into()),
        ];
        let script = "printf '%s|%s' \"$PATH\" \"$DVM_TEST_VAR\" >&3";
        let child = spawn(
            Path::new("/bin/sh"),
            ["-c", script],
            &[writer.as_fd()],
            &env,
        )
        .unwrap();
        drop(writer);
        assert_eq!(read_to_eof(&mut reader, PATIENCE), "/given|x y");
        assert_eq!(child.wait_timeout(PATIENCE), Some(ExitCause::Exited(0)));
    }

    #[test]
    fn try_exit_reports_the_exit_status() {
        for use_pidfd in [true, false] {
            let (reader, writer) = io::pipe().unwrap();
            let child = sh("read line <&3; exit 3", &[reader.as_fd()], use_pidfd);
            assert_eq!(child.try_exit(), None);
            drop(writer);
            let deadline = Instant::now() + PATIENCE;
            let cause = loop {
                if let Some(cause) = child.try_exit() {
                    break cause;
                }
                assert!(Instant::now() < deadline, "the child never exited");
                std::thread::sleep(Duration::from_millis(1));
            };
            assert_eq!(cause, ExitCause::Exited(3));
            assert_eq!(cause.to_string(), "exited with status 3");
            assert_eq!(child.try_exit(), Some(cause));
            assert_eq!(child.terminate(Duration::ZERO), cause);
            assert_reaped(child.pid());
        }
    }

    #[test]
    fn terminate_kills_a_child_that_ignores_sigterm_after_the_grace_period() {
        for use_pidfd in [true, false] {
            let (reader, _writer) = io::pipe().unwrap();
            let (mut ready, ready_w) = io::pipe().unwrap();
            let child = sh(
                "trap '' TERM; echo ready >&4; read line <&3",
                &[reader.as_fd(), ready_w.as_fd()],
                use_pidfd,
            );
            drop(ready_w);
            assert_eq!(read_line(&mut ready, PATIENCE).as_deref(), Some("ready"));
            send(&child, libc::SIGTERM);
            let grace = Duration::from_millis(300);
            let start = Instant::now();
            let cause = child.terminate(grace);
            assert!(
                start.elapsed() >= grace,
                "ended after {:?}",
                start.elapsed()
            );
            assert_eq!(cause, ExitCause::Killed(libc::SIGKILL));
            assert_eq!(cause.to_string(), "killed by signal 9 (SIGKILL)");
            assert_eq!(child.try_exit(), Some(cause));
            assert_reaped(child.pid());
        }
    }

    #[test]
    fn terminate_returns_how_a_child_exited_by_itself() {
        for use_pidfd in [true, false] {
            let (reader, writer) = io::pipe().unwrap();
            let child = sh("read line <&3; exit 5", &[reader.as_fd()], use_pidfd);
            drop(writer);
            assert_eq!(child.terminate(PATIENCE), ExitCause::Exited(5));
            assert_reaped(child.pid());
        }
    }

    #[test]
    fn dropping_a_child_kills_and_reaps_it() {
        for use_pidfd in [true, false] {
            let (reader, _writer) = io::pipe().unwrap();
            let child = sh("read line <&3", &[reader.as_fd()], use_pidfd);
            let pid = child.pid();
            assert_eq!(child.try_exit(), None);
            drop(child);
            assert_reaped(pid);
        }
    }

    #[test]
    fn spawn_errors_name_the_program_the_call_and_the_cause() {
        let error = spawn(Path::new("/nonexistent/discovm-worker"), ["x"], &[], &[])
            .err()
            .unwrap();
        assert_eq!(error.kind, ErrorKind::Runtime);
        assert_eq!(
            error.message,
            "could not start worker program /nonexistent/discovm-worker: posix_spawn failed: \
             No such file or directory (os error 2)"
        );
        let error = spawn(Path::new("/bin/sh"), ["-c", "a\0b"], &[], &[])
            .err()
            .unwrap();
        assert_eq!(error.kind, ErrorKind::Value);
        assert_eq!(
            error.message,
            "argument 2 for worker program /bin/sh holds a NUL byte: \"a\\0b\""
        );
    }

    #[test]
    fn exit_causes_read_as_a_person_would_say_them() {
        let cases = [
            (ExitCause::Exited(0), "exited with status 0"),
            (ExitCause::Exited(3), "exited with status 3"),
            (ExitCause::Killed(9), "killed by signal 9 (SIGKILL)"),
            (ExitCause::Killed(11), "killed by signal 11 (SIGSEGV)"),
            (ExitCause::Killed(6), "killed by signal 6 (SIGABRT)"),
            (ExitCause::Killed(40), "killed by signal 40"),
        ];
        for (cause, text) in cases {
            assert_eq!(cause.to_string(), text);
        }
        let error = ExitCause::Killed(9).worker_error(2, 4711);
        assert_eq!(error.kind, ErrorKind::Worker);
        assert_eq!(
            error.message,
            "worker 2 (pid 4711) killed by signal 9 (SIGKILL)"
        );
    }

    /// A directory of its own under the system's temporary directory, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(tag: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!("discovm-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(std::fs::canonicalize(dir).unwrap())
        }

        /// A file at `name` (directories made as needed) with permissions `mode`.
        fn file(&self, name: &str, mode: u32) -> PathBuf {
            use std::os::unix::fs::PermissionsExt;
            let path = self.0.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            path
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn found(option: Option<&Path>, env: Option<&Path>, library: Option<&Path>) -> Result<PathBuf> {
        let option = option.map(|path| path.to_str().unwrap());
        find_worker_program(option, env.map(Path::as_os_str), library)
    }

    #[test]
    fn a_named_worker_program_must_be_an_executable_file() {
        let scratch = Scratch::new("named-worker");
        let good = scratch.file("good-worker", 0o755);
        let plain = scratch.file("plain-file", 0o644);
        let missing = scratch.0.join("missing");
        let option = "named by the session option `worker_program`";

        assert_eq!(worker_program(good.to_str()), Ok(good.clone()));
        assert_eq!(found(Some(&good), None, None), Ok(good.clone()));
        assert_eq!(found(None, Some(&good), None), Ok(good.clone()));
        assert_eq!(found(Some(&good), Some(&missing), None), Ok(good.clone()));
        let error = found(Some(&missing), None, None).unwrap_err();
        assert_eq!(error.kind, ErrorKind::Value);
        assert_eq!(
            error.message,
            format!(
                "worker program {} {option} does not exist",
                missing.display()
            )
        );
        let error = found(None, Some(&plain), None).unwrap_err();
        assert_eq!(
            error.message,
            format!(
                "worker program {} named by DISCOVM_WORKER is not executable",
                plain.display()
            )
        );
        let error = found(Some(&scratch.0), None, None).unwrap_err();
        assert_eq!(
            error.message,
            format!(
                "worker program {} {option} is not a file",
                scratch.0.display()
            )
        );
        let error = find_worker_program(Some("no-such-worker"), None, None).unwrap_err();
        let absolute = std::env::current_dir().unwrap().join("no-such-worker");
        assert_eq!(
            error.message,
            format!(
                "worker program {} {option} does not exist",
                absolute.display()
            )
        );
        // Empty names count as not given.
        let error = find_worker_program(Some(""), Some(OsStr::new("")), None).unwrap_err();
        assert!(
            error.message.starts_with("no worker program found"),
            "{error}"
        );
    }

    #[test]
    fn the_worker_program_is_found_next_to_the_library() {
        let scratch = Scratch::new("next-to-library");
        let library = scratch.0.join("lib/libdiscovm.so");
        let installed = scratch.0.join("bin").join(WORKER_PROGRAM);
        let build_tree = scratch.0.join("lib").join(WORKER_PROGRAM);

        let error = found(None, None, Some(&library)).unwrap_err();
        assert_eq!(error.kind, ErrorKind::Value);
        assert_eq!(
            error.message,
            format!(
                "no worker program found: DISCOVM_WORKER is not set and neither {} nor {} (next \
                 to {}) is an executable file; set DISCOVM_WORKER to the path of discovm-worker \
                 (or of a program that calls dvm_worker_main), or name it in the session options",
                scratch.0.join("lib/../bin/discovm-worker").display(),
                build_tree.display(),
                library.display()
            )
        );
        scratch.file(&format!("lib/{WORKER_PROGRAM}"), 0o755);
        assert_eq!(found(None, None, Some(&library)), Ok(build_tree));
        scratch.file(&format!("bin/{WORKER_PROGRAM}"), 0o755);
        assert_eq!(found(None, None, Some(&library)), Ok(installed));
    }
}
