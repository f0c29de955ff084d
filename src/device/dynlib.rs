//! Libraries loaded at run time (NCCL, the Gloo plugin): opening one and finding its entry
//! points, so the library builds and runs without them; and the file this library itself was
//! loaded from, next to which its programs and plugins are found.

use std::ffi::{CStr, CString, OsStr, c_void};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Loads the library `name` (a file name the loader searches for, or a path); it stays loaded
/// for the life of the process. The error is the loader's message.
pub(crate) fn open(name: &str) -> Result<*mut c_void, String> {
    let c_name = CString::new(name).map_err(|_| format!("{name:?} contains a NUL byte"))?;
    // SAFETY: a terminated name; loading runs the library's initialisers.
    let handle = unsafe { libc::dlopen(c_name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(dlerror());
    }
    Ok(handle)
}

/// The address of `name` in the library `handle`, as a function pointer of type `F`.
///
/// # Safety
/// `handle` is a live `dlopen` handle and `F` is the function pointer type of `name`'s C
/// declaration.
pub(crate) unsafe fn symbol<F: Copy>(handle: *mut c_void, name: &CStr) -> Option<F> {
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>()) };
    // SAFETY: a live handle and a terminated name.
    let address = unsafe { libc::dlsym(handle, name.as_ptr()) };
    // SAFETY: a non-NULL address of that function, reinterpreted as its own pointer type (the
    // sizes match, asserted above).
    (!address.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&address) })
}

/// The loader's last error message.
fn dlerror() -> String {
    // SAFETY: dlerror returns NULL or a terminated message owned by the loader.
    let message = unsafe { libc::dlerror() };
    if message.is_null() {
        return "unknown error".into();
    }
    // SAFETY: as above; copied at once.
    unsafe { CStr::from_ptr(message) }
        .to_string_lossy()
        .into_owned()
}

/// The file this code was loaded from: the shared library, or the program it is linked into.
pub(crate) fn library_file() -> Option<PathBuf> {
    let anchor = library_file as fn() -> Option<PathBuf> as usize;
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only looks up the address (this function's code) and writes `info`.
    let found = unsafe { libc::dladdr(anchor as *const libc::c_void, &mut info) } != 0;
    if found && !info.dli_fname.is_null() {
        // SAFETY: dladdr set `dli_fname` to the loader's NUL-terminated name of the object,
        // which stays valid while the object (this code) is loaded.
        let name = unsafe { CStr::from_ptr(info.dli_fname) };
        let path = Path::new(OsStr::from_bytes(name.to_bytes()));
        if path.is_absolute() {
            return Some(path.to_path_buf());
        }
    }
    // The loader names the main program and objects opened by a relative path as they were
    // named (argv[0], "./lib.so"), which need not hold from here; the mapping's file does.
    mapped_file(anchor)
}

/// The file mapped at `address`, from /proc/self/maps.
fn mapped_file(address: usize) -> Option<PathBuf> {
    let maps = std::fs::read("/proc/self/maps").ok()?;
    maps.split(|&b| b == b'\n').find_map(|line| {
        // "start-end perms offset dev inode   path"
        let mut fields = line.splitn(6, |&b| b == b' ');
        let range = fields.next()?;
        let dash = range.iter().position(|&b| b == b'-')?;
        let hex = |digits: &[u8]| usize::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok();
        let (start, end) = (hex(&range[..dash])?, hex(&range[dash + 1..])?);
        if !(start..end).contains(&address) {
            return None;
        }
        let path = fields.nth(4)?.trim_ascii_start();
        let path = path.strip_suffix(b" (deleted)").unwrap_or(path);
        path.starts_with(b"/")
            .then(|| PathBuf::from(OsStr::from_bytes(path)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_code_knows_the_file_it_was_loaded_from() {
        let file = library_file().expect("dladdr or /proc/self/maps names this code's file");
        let executable = std::env::current_exe().unwrap();
        // Tests link the crate into the test program.
        assert_eq!(
            std::fs::canonicalize(&file).unwrap(),
            std::fs::canonicalize(&executable).unwrap()
        );
        let mapped = mapped_file(library_file as fn() -> Option<PathBuf> as usize).unwrap();
        assert_eq!(
            std::fs::canonicalize(mapped).unwrap(),
            std::fs::canonicalize(executable).unwrap()
        );
    }
}
