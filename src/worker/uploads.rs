//! Modules the controller ships to a node (`dvm_session_load_module` on a session that uploads
//! them): the node keeps each in a private directory of its own, named by its SHA-256, and its
//! workers load it from there by that hash.
//!
//! The one idea: no peer chooses a path. The node makes the directory (mode 0700, removed when
//! the node ends) and passes it to its workers as an argument, writes each module under the
//! hex of the hash it checked against the bytes, and a worker turns a hash into a path only
//! after checking that it is 64 hex digits.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

use crate::net::routed::HASH_SIZE;
use crate::object::{Error, Result};

/// Where the node of this worker process keeps its uploads, once the worker knows.
static HERE: OnceLock<PathBuf> = OnceLock::new();

/// Makes this worker process load uploaded modules from `dir` (its node's).
pub(crate) fn keep_uploads_at(dir: PathBuf) {
    let _ = HERE.set(dir);
}

/// The SHA-256 of `bytes`.
pub(crate) fn hash(bytes: &[u8]) -> [u8; HASH_SIZE] {
    Sha256::digest(bytes).into()
}

/// `hash` as 64 lowercase hex digits.
pub(crate) fn hex(hash: &[u8; HASH_SIZE]) -> String {
    hash.iter().map(|b| format!("{b:02x}")).collect()
}

/// A node's directory of uploaded modules; removed with what it holds when dropped.
pub(crate) struct Uploads {
    dir: PathBuf,
}

impl Uploads {
    /// A new private directory under the system's temporary directory.
    pub fn create() -> Result<Uploads> {
        let base = std::env::temp_dir();
        for attempt in 0..100u32 {
            let dir = base.join(format!("discovm-uploads-{}-{attempt}", std::process::id()));
            match fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => return Ok(Uploads { dir }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(Error::runtime(format!(
                        "cannot make a directory for uploaded modules in {}: {e}",
                        base.display()
                    )));
                }
            }
        }
        Err(Error::runtime(format!(
            "cannot make a directory for uploaded modules in {}: every name is taken",
            base.display()
        )))
    }

    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// Keeps the module of an upload (its SHA-256, then its bytes), if the bytes have that
    /// hash; returns the hash's hex.
    pub fn store(&self, upload: &[u8]) -> Result<String> {
        let (declared, module) = upload.split_at(HASH_SIZE);
        let actual = hash(module);
        if declared != actual {
            return Err(Error::value(format!(
                "an uploaded module of {} bytes does not have the SHA-256 it came with ({} \
                 declared, {} computed)",
                module.len(),
                hex(declared.try_into().expect("HASH_SIZE bytes")),
                hex(&actual)
            )));
        }
        let name = hex(&actual);
        let path = self.dir.join(format!("{name}.so"));
        if path.exists() {
            return Ok(name);
        }
        // Written under a temporary name, then renamed: a worker never sees half a module.
        let staged = self.dir.join(format!("{name}.partial"));
        let written = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&staged)
            .and_then(|mut file| file.write_all(module))
            .and_then(|()| fs::rename(&staged, &path));
        written.map_err(|e| {
            let _ = fs::remove_file(&staged);
            Error::runtime(format!(
                "cannot keep an uploaded module in {}: {e}",
                path.display()
            ))
        })?;
        Ok(name)
    }
}

impl Drop for Uploads {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Where this worker process finds the module uploaded with hash `name` (64 hex digits).
///
/// Errors: `ValueError` for a name that is not 64 hex digits; `RuntimeError` when this process
/// is not a worker of a node (it knows no upload directory), or nothing was uploaded with that
/// hash.
pub(crate) fn uploaded_path(name: &str) -> Result<String> {
    if name.len() != 2 * HASH_SIZE || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::value(format!(
            "an uploaded module is named by its SHA-256 in hex (64 digits), not {name:?}"
        )));
    }
    let dir = HERE.get().ok_or_else(|| {
        Error::runtime(
            "no module was uploaded to this worker: it is not on a node of a session across \
             machines",
        )
    })?;
    let path = dir.join(format!("{}.so", name.to_ascii_lowercase()));
    if !path.is_file() {
        return Err(Error::runtime(format!(
            "no module with SHA-256 {name} was uploaded to this node"
        )));
    }
    path.into_os_string()
        .into_string()
        .map_err(|p| Error::runtime(format!("the upload path {p:?} is not UTF-8")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_is_kept_under_its_hash_only_if_the_bytes_have_it() {
        let uploads = Uploads::create().unwrap();
        let module = b"not really a shared library";
        let mut upload = hash(module).to_vec();
        upload.extend_from_slice(module);
        let name = uploads.store(&upload).unwrap();
        assert_eq!(name, hex(&hash(module)));
        let kept = uploads.dir().join(format!("{name}.so"));
        assert_eq!(fs::read(&kept).unwrap(), module);
        // Again: already there.
        assert_eq!(uploads.store(&upload).unwrap(), name);

        upload[HASH_SIZE] ^= 1;
        let error = uploads.store(&upload).unwrap_err();
        assert!(
            error.message.contains("does not have the SHA-256"),
            "{error}"
        );

        let dir = uploads.dir().to_path_buf();
        drop(uploads);
        assert!(!dir.exists(), "the directory goes with the node");
    }

    #[test]
    fn a_worker_turns_only_a_hash_into_a_path() {
        for bad in ["../../etc/passwd", "", &"g".repeat(64), &"a".repeat(63)] {
            let error = uploaded_path(bad).unwrap_err();
            assert!(error.message.contains("64 digits"), "{bad:?}: {error}");
        }
    }
}
