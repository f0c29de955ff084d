//! Pidfds: descriptors that each name one process, opened, signalled through and waited on.
//!
//! The idea that makes it work: a pidfd names its process and never a later one that reuses
//! the pid, and becomes readable when that process ends, so `poll()` hears of a death as it
//! happens and a signal sent through one cannot reach a stranger.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

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

/// Sends `signal` to the process `pidfd` names. An error (ESRCH) means it has ended already.
pub(super) fn send_signal(pidfd: BorrowedFd<'_>, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: the pidfd is open for the borrow; a null siginfo and no flags make this plain
    // `kill` aimed at exactly that process.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
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
