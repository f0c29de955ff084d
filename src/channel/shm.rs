//! Memory shared with child processes: an anonymous memfd, sized, sealed against resizing and
//! mapped read-write `MAP_SHARED`; a child that inherits the descriptor maps the same pages.
//!
//! The one idea: the size is sealed. Neither process can shrink the file under the other's
//! mapping (an access past the new end would raise SIGBUS) or grow it, so a mapping of the size
//! checked once stays valid whatever the peer does. A memfd has no name in any filesystem:
//! nothing appears under /dev/shm, nothing outlives the last process that holds it, and another
//! process reaches it only through a descriptor it was given.
//!
//! Under `cfg(loom)` the memory is a heap allocation that the model's threads share.

#[cfg(not(loom))]
pub use mapped::SharedMemory;
#[cfg(loom)]
pub use model::SharedMemory;

#[cfg(not(loom))]
mod mapped {
    use std::ffi::CString;
    use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
    use std::os::unix::process::CommandExt;
    use std::process::Command;
    use std::ptr::NonNull;

    use crate::object::{Error, Result};

    /// A read-write `MAP_SHARED` mapping of a whole sealed memfd, and the descriptor. Unmapped
    /// on drop (the descriptor is closed then too; the memory lives on while another process
    /// holds it).
    ///
    /// No other user can open the memory: another process reaches it only through a descriptor
    /// it was given, or through `/proc/PID/fd`, which takes the right to ptrace the owner; its
    /// mode is 0600 as well. Descriptors are close-on-exec. A launcher that puts the descriptor
    /// in place with `dup2` (posix_spawn's file actions) passes it as it is, since the copy
    /// `dup2` makes is not close-on-exec; for a `std::process::Command`,
    /// [`SharedMemory::share_with_child`] keeps it open in that one child.
    pub struct SharedMemory {
        base: NonNull<u8>,
        len: usize,
        fd: OwnedFd,
    }

    // SAFETY: the mapping is plain memory that stays mapped until drop, whichever thread drops
    // it; what is read and written inside it is up to each user's protocol (atomics, or bytes
    // that one side hands over to the other).
    unsafe impl Send for SharedMemory {}
    // SAFETY: as for Send: `&SharedMemory` only gives out the base pointer and the length.
    unsafe impl Sync for SharedMemory {}

    /// The seals every mapping relies on: the size can change no more, and neither can the
    /// seals.
    const SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

    /// An error naming the call that failed and the errno it set.
    fn os_error(call: impl std::fmt::Display) -> Error {
        let errno = std::io::Error::last_os_error();
        Error::runtime(format!("{call} failed: {errno}"))
    }

    impl SharedMemory {
        /// Creates `len` bytes of zeroed shared memory. `name` only labels the mapping (in
        /// `/proc/PID/maps`, as `memfd:NAME`); it is not a path and need not be unique.
        ///
        /// Errors: `ValueError` for a zero length or a name with a NUL byte; `RuntimeError`
        /// naming the call and errno when the system refuses (no memory, no descriptors).
        pub fn create(name: &str, len: usize) -> Result<SharedMemory> {
            if len == 0 {
                return Err(Error::value(format!(
                    "shared memory `{name}` of 0 bytes: a mapping needs at least one"
                )));
            }
            let size = libc::off_t::try_from(len).map_err(|_| {
                Error::value(format!(
                    "shared memory `{name}` of {len} bytes is too large"
                ))
            })?;
            let c_name = CString::new(name).map_err(|_| {
                Error::value(format!("shared memory name {name:?} contains a NUL byte"))
            })?;
            let fd = memfd(&c_name).map_err(|e| e.context(format!("shared memory `{name}`")))?;
            // SAFETY: plain calls on a descriptor this function owns; no memory is passed.
            unsafe {
                if libc::fchmod(fd.as_raw_fd(), 0o600) != 0 {
                    return Err(os_error(format_args!("fchmod(memfd `{name}`, 0600)")));
                }
                if libc::ftruncate(fd.as_raw_fd(), size) != 0 {
                    return Err(os_error(format_args!("ftruncate(memfd `{name}`, {len})")));
                }
                if libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, SEALS) != 0 {
                    return Err(os_error(format_args!("fcntl(memfd `{name}`, F_ADD_SEALS)")));
                }
            }
            map(fd, len)
        }

        /// Maps shared memory from a descriptor another process created with
        /// [`SharedMemory::create`] and passed on (see [`SharedMemory::share_with_child`]):
        /// all of it, read-write. The descriptor becomes close-on-exec, so this process's own
        /// children do not inherit it.
        ///
        /// Errors: `ValueError` when the descriptor is not a memfd sealed against shrinking
        /// (only such a file is safe to map: a shrunk one would crash this process) or is
        /// empty; `RuntimeError` naming the call and errno when the system refuses.
        pub fn from_fd(fd: OwnedFd) -> Result<SharedMemory> {
            let raw = fd.as_raw_fd();
            // SAFETY: `stat` is plain old data that fstat fills in; the descriptor is ours.
            let mut stat: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: fstat writes only into `stat`, which outlives the call.
            if unsafe { libc::fstat(raw, &mut stat) } != 0 {
                return Err(os_error(format_args!("fstat(descriptor {raw})")));
            }
            if stat.st_mode & libc::S_IFMT != libc::S_IFREG {
                return Err(Error::value(format!(
                    "descriptor {raw} is not shared memory (not a regular file)"
                )));
            }
            // SAFETY: F_GET_SEALS reads the descriptor's seals and touches no memory.
            let seals = unsafe { libc::fcntl(raw, libc::F_GET_SEALS) };
            if seals < 0 {
                return Err(os_error(format_args!(
                    "fcntl(descriptor {raw}, F_GET_SEALS) (is it a memfd?)"
                )));
            }
            if seals & libc::F_SEAL_SHRINK == 0 {
                return Err(Error::value(format!(
                    "descriptor {raw} is not sealed against shrinking; mapping it would let \
                     its owner crash this process"
                )));
            }
            let len = usize::try_from(stat.st_size).unwrap_or(0);
            if len == 0 {
                return Err(Error::value(format!("descriptor {raw} holds 0 bytes")));
            }
            set_close_on_exec(raw, true)
                .map_err(|_| os_error(format_args!("fcntl(descriptor {raw}, F_SETFD)")))?;
            map(fd, len)
        }

        /// Keeps the descriptor open across `command`'s exec, in that child only (it stays
        /// close-on-exec here, so no other child inherits it), and returns its number, which
        /// is the same in the child: pass that on (an argument, an environment variable) for
        /// the child's [`SharedMemory::from_fd`]. Keep `self` alive until the command has
        /// been spawned.
        ///
        /// Spawning such a command forks (it cannot use `posix_spawn`).
        pub fn share_with_child(&self, command: &mut Command) -> RawFd {
            let fd = self.fd.as_raw_fd();
            // SAFETY: the hook runs in the child between fork and exec, where only
            // async-signal-safe calls are allowed: it makes two fcntl calls and allocates
            // nothing (an `io::Error` made from an errno holds no heap data).
            unsafe {
                command.pre_exec(move || set_close_on_exec(fd, false));
            }
            fd
        }

        /// The mapping's size in bytes: the file's, as created or as found.
        pub fn len(&self) -> usize {
            self.len
        }

        /// Always false: a mapping has at least one byte.
        pub fn is_empty(&self) -> bool {
            self.len == 0
        }

        /// The first byte of the mapping (page-aligned). It stays valid while `self` lives;
        /// the other process may read and write any of it at any time.
        pub fn as_ptr(&self) -> *mut u8 {
            self.base.as_ptr()
        }

        /// The memfd's descriptor.
        pub fn fd(&self) -> BorrowedFd<'_> {
            self.fd.as_fd()
        }
    }

    impl Drop for SharedMemory {
        fn drop(&mut self) {
            // SAFETY: `base..base + len` is the mapping `map` made; nothing borrows it any more
            // (borrows of its bytes are tied to `&self`, and users keep it alive meanwhile).
            unsafe {
                libc::munmap(self.base.as_ptr().cast(), self.len);
            }
        }
    }

    impl std::fmt::Debug for SharedMemory {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("SharedMemory")
                .field("fd", &self.fd.as_raw_fd())
                .field("len", &self.len)
                .finish()
        }
    }

    /// A new close-on-exec memfd that can be sealed and never made executable. Kernels older
    /// than 6.3 know no `MFD_NOEXEC_SEAL` and refuse it with EINVAL; they get one without.
    fn memfd(name: &CString) -> Result<OwnedFd> {
        let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
        // SAFETY: `name` is a NUL-terminated string that outlives the call.
        let mut fd = unsafe { libc::memfd_create(name.as_ptr(), flags | libc::MFD_NOEXEC_SEAL) };
        if fd < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
            // SAFETY: as above.
            fd = unsafe { libc::memfd_create(name.as_ptr(), flags) };
        }
        if fd < 0 {
            return Err(os_error("memfd_create"));
        }
        // SAFETY: memfd_create just returned this descriptor; nothing else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Maps all `len` bytes of `fd`, shared and read-write.
    fn map(fd: OwnedFd, len: usize) -> Result<SharedMemory> {
        // SAFETY: a new mapping at an address the kernel picks, so no existing memory changes;
        // the descriptor is open for the call.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(os_error(format_args!(
                "mmap({len} bytes of descriptor {}, MAP_SHARED)",
                fd.as_raw_fd()
            )));
        }
        let base = NonNull::new(base.cast::<u8>())
            .ok_or_else(|| Error::runtime("mmap returned a null mapping"))?;
        Ok(SharedMemory { base, len, fd })
    }

    /// Sets or clears `FD_CLOEXEC` on `fd`. Async-signal-safe, so it may run between fork and
    /// exec.
    fn set_close_on_exec(fd: RawFd, close: bool) -> std::io::Result<()> {
        // SAFETY: F_GETFD and F_SETFD read and write the descriptor's flags and touch no
        // memory; a closed descriptor makes them fail with EBADF.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let flags = if close {
                flags | libc::FD_CLOEXEC
            } else {
                flags & !libc::FD_CLOEXEC
            };
            if libc::fcntl(fd, libc::F_SETFD, flags) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

#[cfg(loom)]
mod model {
    use std::alloc::Layout;
    use std::ptr::NonNull;

    use crate::object::{Error, Result};

    /// Zeroed, page-aligned heap memory standing in for a shared mapping in a model.
    pub struct SharedMemory {
        base: NonNull<u8>,
        layout: Layout,
    }

    // SAFETY: as for the real mapping: plain memory, used by each user's protocol.
    unsafe impl Send for SharedMemory {}
    // SAFETY: as above.
    unsafe impl Sync for SharedMemory {}

    impl SharedMemory {
        pub fn create(name: &str, len: usize) -> Result<SharedMemory> {
            let layout = Layout::from_size_align(len.max(1), 4096)
                .map_err(|_| Error::value(format!("shared memory `{name}` of {len} bytes")))?;
            // SAFETY: the layout has a non-zero size.
            let base = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })
                .ok_or_else(|| Error::runtime(format!("no memory for `{name}`")))?;
            Ok(SharedMemory { base, layout })
        }

        pub fn len(&self) -> usize {
            self.layout.size()
        }

        pub fn is_empty(&self) -> bool {
            false
        }

        pub fn as_ptr(&self) -> *mut u8 {
            self.base.as_ptr()
        }
    }

    impl Drop for SharedMemory {
        fn drop(&mut self) {
            // SAFETY: allocated in `create` with this layout.
            unsafe { std::alloc::dealloc(self.base.as_ptr(), self.layout) }
        }
    }
}
