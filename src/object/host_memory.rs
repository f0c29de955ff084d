//! Host memory for tensors: 64-byte aligned, zeroed or for overwriting, or as a [`HostBlock`]
//! that frees itself. Small blocks come from the global allocator; large ones (from
//! [`HUGE_PAGE`] bytes) are anonymous mappings of their own, in whole huge pages.
//!
//! The one idea: a large block's cost is its first touch, not its allocation (the system
//! zeroes every page as it faults in), so large blocks are mapped for transparent huge pages
//! (one fault per huge page) and freed ones are kept for reuse, up to [`KEPT_BYTES`] in all: a
//! tensor of the same size allocated again (the next round's activations, the next copy's
//! destination) finds its pages already there.

use std::alloc::{Layout, alloc, alloc_zeroed, dealloc};
use std::ptr::NonNull;
use std::sync::{Mutex, PoisonError};

use super::error::{Error, Result};
use super::tensor::HOST_ALIGNMENT;

/// Blocks of at least this many bytes are mappings of their own, in whole huge pages.
const HUGE_PAGE: usize = 2 << 20;
/// Freed large blocks are kept for reuse up to this many bytes in all.
const KEPT_BYTES: usize = 256 << 20;

/// Freed large mappings, most recently freed last, and their bytes in all.
struct Kept {
    blocks: Vec<(NonNull<u8>, usize)>,
    bytes: usize,
}

// SAFETY: the mappings are nobody's while kept; the list only holds their addresses.
unsafe impl Send for Kept {}

static KEPT: Mutex<Kept> = Mutex::new(Kept {
    blocks: Vec::new(),
    bytes: 0,
});

fn kept() -> std::sync::MutexGuard<'static, Kept> {
    KEPT.lock().unwrap_or_else(PoisonError::into_inner)
}

fn layout(nbytes: usize) -> Result<Layout> {
    nbytes
        .max(1)
        .checked_next_multiple_of(HOST_ALIGNMENT)
        .and_then(|size| Layout::from_size_align(size, HOST_ALIGNMENT).ok())
        .ok_or_else(|| Error::value(format!("{nbytes} bytes is too large to allocate")))
}

/// The length of the mapping of a large block of `size` bytes: whole huge pages (which also
/// makes the system place it on a huge-page boundary); `None` for a small block.
fn mapping_len(size: usize) -> Option<usize> {
    (size >= HUGE_PAGE).then(|| size.next_multiple_of(HUGE_PAGE))
}

/// Allocates `nbytes` of zeroed host memory, 64-byte aligned (at least one byte is reserved).
pub fn host_alloc(nbytes: usize) -> Result<NonNull<u8>> {
    allocate(nbytes, true)
}

/// Allocates `nbytes` of host memory as [`host_alloc`] does, for a caller that writes all of
/// it before anything reads it: what it holds is unspecified.
pub fn host_alloc_for_overwrite(nbytes: usize) -> Result<NonNull<u8>> {
    allocate(nbytes, false)
}

fn allocate(nbytes: usize, zeroed: bool) -> Result<NonNull<u8>> {
    let layout = layout(nbytes)?;
    let out_of_memory = || Error::runtime(format!("out of memory allocating {nbytes} bytes"));
    let Some(len) = mapping_len(layout.size()) else {
        // SAFETY: the layout has a nonzero size.
        let ptr = unsafe {
            if zeroed {
                alloc_zeroed(layout)
            } else {
                alloc(layout)
            }
        };
        return NonNull::new(ptr).ok_or_else(out_of_memory);
    };
    let reused = {
        let mut kept = kept();
        let at = kept.blocks.iter().rposition(|&(_, l)| l == len);
        at.map(|at| {
            kept.bytes -= len;
            kept.blocks.remove(at).0
        })
    };
    if let Some(ptr) = reused {
        if zeroed {
            // SAFETY: a kept mapping of `len` bytes, now the caller's.
            unsafe { ptr.as_ptr().write_bytes(0, len) };
        }
        return Ok(ptr);
    }
    // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(out_of_memory());
    }
    // SAFETY: the mapping just made. Where the system has huge pages off the advice fails,
    // and the mapping works as it is.
    unsafe { libc::madvise(ptr, len, libc::MADV_HUGEPAGE) };
    NonNull::new(ptr.cast()).ok_or_else(out_of_memory)
}

/// A block of host memory of its own, 64-byte aligned, given back when dropped: memory a
/// frame is gathered in, which the tensors decoded from it may keep.
pub struct HostBlock {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the block is plain memory owned by this value; `&HostBlock` only reads its address.
unsafe impl Send for HostBlock {}
// SAFETY: as above.
unsafe impl Sync for HostBlock {}

impl HostBlock {
    /// A block of `len` bytes, whose contents are unspecified (a large block: zeros, or what
    /// an earlier one held; a small one is zeroed, never uninitialized).
    pub fn new(len: usize) -> Result<HostBlock> {
        let large = mapping_len(layout(len)?.size()).is_some();
        Ok(HostBlock {
            ptr: allocate(len, !large)?,
            len,
        })
    }

    /// The address of its first byte (64-byte aligned).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Its bytes, to fill.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `len` initialized bytes this value owns (see `new`), borrowed mutably with it.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Its bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: as in `as_mut_slice`, borrowed shared.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for HostBlock {
    fn drop(&mut self) {
        // SAFETY: from `allocate(len, ..)` in `new`, nobody's once this value is gone.
        unsafe { host_free(self.ptr, self.len) }
    }
}

/// Frees memory from [`host_alloc`] (or this module's allocation for overwriting). A large
/// block is kept for reuse while the kept blocks stay within `KEPT_BYTES` (the oldest ones are
/// unmapped to make room).
///
/// # Safety
/// `ptr` came from one of them with `nbytes`, and is no longer used.
pub unsafe fn host_free(ptr: NonNull<u8>, nbytes: usize) {
    let layout = layout(nbytes).expect("the layout was valid when allocated");
    let Some(len) = mapping_len(layout.size()) else {
        // SAFETY: allocated with this layout, as the caller promises.
        return unsafe { dealloc(ptr.as_ptr(), layout) };
    };
    let mut unmap = vec![];
    if len <= KEPT_BYTES {
        let mut kept = kept();
        while kept.bytes + len > KEPT_BYTES {
            let oldest = kept.blocks.remove(0);
            kept.bytes -= oldest.1;
            unmap.push(oldest);
        }
        kept.blocks.push((ptr, len));
        kept.bytes += len;
    } else {
        unmap.push((ptr, len));
    }
    for (ptr, len) in unmap {
        // SAFETY: a mapping of `len` bytes this module made, nobody's any more.
        unsafe { libc::munmap(ptr.as_ptr().cast(), len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_blocks_are_kept_and_come_back_zeroed_or_as_they_were() {
        let nbytes = (3 << 20) + 5;
        let first = host_alloc(nbytes).unwrap();
        assert_eq!(first.as_ptr() as usize % HOST_ALIGNMENT, 0);
        // SAFETY: `nbytes` bytes of our own.
        unsafe { first.as_ptr().write_bytes(9, nbytes) };
        // SAFETY: from `host_alloc(nbytes)`, no longer used.
        unsafe { host_free(first, nbytes) };
        // Tests run on several threads: another may take the kept block first, so the reused
        // block is the one asked for, zeroed, whichever it is.
        let again = host_alloc(nbytes).unwrap();
        // SAFETY: `nbytes` bytes of our own.
        let bytes = unsafe { std::slice::from_raw_parts(again.as_ptr(), nbytes) };
        assert!(bytes.iter().all(|&b| b == 0));
        // SAFETY: from `host_alloc(nbytes)`, no longer used.
        unsafe { host_free(again, nbytes) };
        // Blocks larger than what is kept go back to the system.
        let huge = KEPT_BYTES + 1;
        let block = host_alloc_for_overwrite(huge).unwrap();
        // SAFETY: from `host_alloc_for_overwrite(huge)`, no longer used.
        unsafe { host_free(block, huge) };
        assert!(kept().bytes <= KEPT_BYTES);
    }
}
