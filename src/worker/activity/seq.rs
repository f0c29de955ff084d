//! The two pieces a record shared without locks is made of: a sequence number that brackets
//! its one writer's changes, and texts in atomic words.
//!
//! The one idea: the writer makes the number odd, changes, and makes it even again; a reader
//! keeps what it read only when the number was the same even one before and after, retries a
//! bounded number of times, and never waits for the writer (who may be stuck, or dead).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

/// A sequence number, odd while its writer changes what it guards.
#[repr(transparent)]
#[derive(Default)]
pub(crate) struct Seq(pub(super) AtomicU64);

impl Seq {
    /// Makes one change with `write`, bracketed by the number (its one writer only).
    pub(crate) fn write(&self, write: impl FnOnce()) {
        let seq = self.0.load(Ordering::Relaxed);
        self.0.store(seq.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        write();
        self.0.store(seq.wrapping_add(2), Ordering::Release);
    }

    /// What `get` reads between two equal, even numbers; None when the writer kept changing
    /// it through every try (or died in the middle of a change).
    pub(crate) fn read<T>(&self, get: impl Fn() -> T) -> Option<T> {
        for _ in 0..READ_TRIES {
            let before = self.0.load(Ordering::Acquire);
            if before % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let read = get();
            fence(Ordering::Acquire);
            if self.0.load(Ordering::Relaxed) == before {
                return Some(read);
            }
        }
        None
    }
}

/// Tries a reader makes before it gives up on a record its writer keeps changing (or died
/// while changing).
const READ_TRIES: usize = 1000;

/// A text in atomic words, cut at a character boundary when too long.
#[repr(C)]
pub(crate) struct Text<const W: usize> {
    len: AtomicU32,
    words: [AtomicU64; W],
}

impl<const W: usize> Default for Text<W> {
    fn default() -> Self {
        Text {
            len: AtomicU32::new(0),
            words: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// `text` cut to at most `max` bytes, at a character boundary.
pub(crate) fn cut(text: &str, max: usize) -> &str {
    let mut len = text.len().min(max);
    while !text.is_char_boundary(len) {
        len -= 1;
    }
    &text[..len]
}

impl<const W: usize> Text<W> {
    pub(crate) fn store(&self, text: &str) {
        let text = cut(text, W * 8);
        for (word, chunk) in self.words.iter().zip(text.as_bytes().chunks(8)) {
            let mut bytes = [0; 8];
            bytes[..chunk.len()].copy_from_slice(chunk);
            word.store(u64::from_le_bytes(bytes), Ordering::Relaxed);
        }
        self.len.store(text.len() as u32, Ordering::Relaxed);
    }

    pub(crate) fn load(&self) -> String {
        let (len, words) = self.load_words();
        text_of(len, &words)
    }

    /// The text's length and words, as stored (for a reader that compares before it copies).
    pub(crate) fn load_words(&self) -> (usize, [u64; W]) {
        let len = (self.len.load(Ordering::Relaxed) as usize).min(W * 8);
        (
            len,
            std::array::from_fn(|i| self.words[i].load(Ordering::Relaxed)),
        )
    }
}

/// The text of the first `len` bytes of `words` (as [`Text::load_words`] gives them).
pub(crate) fn text_of(len: usize, words: &[u64]) -> String {
    let bytes: Vec<u8> = words
        .iter()
        .flat_map(|word| word.to_le_bytes())
        .take(len)
        .collect();
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}
