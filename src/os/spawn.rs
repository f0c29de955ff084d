//! Starting a worker process with exactly the descriptors it needs: stdin, stdout and stderr,
//! then the ones the caller passes at known numbers, and no other.
//!
//! The idea that makes it work: `posix_spawn` itself, between fork and exec, places each passed
//! descriptor at its number (from a copy numbered above every target, so placing one never
//! overwrites another) and closes every descriptor above them; no code of ours runs in the
//! child before exec, so nothing here must be async-signal-safe.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use super::child::Child;
use super::pidfd::{pidfd_open, pidfd_unavailable};
use crate::object::{Error, Result};

/// The environment variable [`spawn`] sets in every child: the controller's pid, in decimal.
/// The child compares it with `getppid()` to learn, without a race, whether its controller is
/// still there (see `exit_with_parent`).
pub(crate) const CONTROLLER_PID_VAR: &str = "DISCOVM_CONTROLLER_PID";
/// The number the first inherited descriptor has in the child; the others follow in order.
pub(crate) const FIRST_INHERITED_FD: RawFd = 3;

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
/// not tell.) The pidfd is opened just after: only the [`Child`] returned reaps the child, so
/// its pid still names it then.
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
pub(super) fn spawn_with<I>(
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
    let child = Child::new(pid, pidfd);
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
