//! Finding the worker program a process session starts: the one the session options name, else
//! the one `DISCOVM_WORKER` names, else `discovm-worker` next to this library.
//!
//! The idea that makes it work: the library knows the file it was loaded from, and both an
//! installed tree and a build tree put the worker program at a fixed place relative to that
//! file, so a program linked against the library finds its workers with nothing configured.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::object::{Error, Result};

/// The worker program's file name, in `bin/` next to the library's `lib/` once installed.
pub(crate) const WORKER_PROGRAM: &str = "discovm-worker";
/// The environment variable that names the worker program.
pub(crate) const WORKER_PROGRAM_VAR: &str = "DISCOVM_WORKER";

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

/// [`worker_program`], given the value of `DISCOVM_WORKER` and the library's file instead of
/// reading them.
pub(super) fn find_worker_program(
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
