//! Tests of finding, starting and ending worker processes, and the helpers the death watch's
//! tests share: a shell as the child, reads from a pipe with a deadline, and a check that a
//! child was reaped.
//!
//! The idea that makes them work: a test asserts what the operating system says about the
//! child (what it wrote, which descriptors it holds, whether `waitpid` still finds it), and
//! runs with the child's pidfd and again without one where both paths apply, so the fallback
//! for kernels without pidfds is exercised wherever the tests run.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io::{self, PipeReader, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::child::Child;
use super::exit::ExitCause;
use super::pidfd::wait_readable;
use super::program::{WORKER_PROGRAM, find_worker_program, worker_program};
use super::spawn::{CONTROLLER_PID_VAR, spawn, spawn_with};
use crate::channel::Deadline;
use crate::channel::{Sleeper, SpinPolicy};
use crate::object::{ErrorKind, Result};

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

/// What `poll` gives once it gives something, which must happen within [`PATIENCE`]; else a
/// panic that says `never`. It waits as a waiter that nobody wakes: parked, in growing slices.
pub(crate) fn eventually<T>(never: &str, poll: impl FnMut() -> Option<T>) -> T {
    let park_at_once = SpinPolicy {
        budget: Duration::ZERO,
    };
    Sleeper::default()
        .wait_unwoken(
            park_at_once,
            Deadline::after(Some(PATIENCE)),
            || never.to_string(),
            || Ok(()),
            poll,
        )
        .unwrap_or_else(|_| panic!("{never}"))
}

/// Reads one byte, waiting for it until `deadline`; `None` at end of file.
fn read_byte(
    reader: &mut PipeReader,
    deadline: Instant,
) -> std::result::Result<Option<u8>, String> {
    // Not channel::wait: poll() on the pipe wakes when a byte or the end of file comes.
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
        eventually("the child never stopped", || {
            (state(child.pid()) == Some('T')).then_some(())
        });
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
        let cause = eventually("the child never exited", || child.try_exit());
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
