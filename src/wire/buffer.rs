//! Where encoded bytes go ([`Sink`]: a growing vector, a fixed slot, or a counter) and how a
//! payload is read ([`Reader`]: bounds-checked, with errors that say at which byte).

use std::fmt::Display;

use super::{ALIGN, bad_frame};
use crate::object::{Error, Result};

const ZEROS: [u8; ALIGN] = [0; ALIGN];

/// Bytes of zero padding after `len` bytes, up to the next multiple of [`ALIGN`].
pub(super) fn padding(len: usize) -> usize {
    len.next_multiple_of(ALIGN) - len
}

/// Where a frame is written. Offsets (`len`) count from the start of the frame, so padding
/// aligns fields relative to it.
pub(super) trait Sink {
    /// Bytes of the frame written so far.
    fn len(&self) -> usize;
    fn put(&mut self, bytes: &[u8]) -> Result<()>;
    /// Writes `n` bytes that `fill` produces in place (a tensor's data, read straight into the
    /// frame). A counter never calls `fill`.
    fn fill(&mut self, n: usize, fill: &mut dyn FnMut(&mut [u8]) -> Result<()>) -> Result<()>;

    fn u32(&mut self, v: u32) -> Result<()> {
        self.put(&v.to_le_bytes())
    }
    fn i32(&mut self, v: i32) -> Result<()> {
        self.put(&v.to_le_bytes())
    }
    fn u64(&mut self, v: u64) -> Result<()> {
        self.put(&v.to_le_bytes())
    }
    fn i64(&mut self, v: i64) -> Result<()> {
        self.put(&v.to_le_bytes())
    }
    /// Zeros up to the next multiple of [`ALIGN`].
    fn pad(&mut self) -> Result<()> {
        let n = padding(self.len());
        self.put(&ZEROS[..n])
    }
}

/// Counts the bytes a frame needs, checking what it would write, without writing it.
pub(super) struct Counter(pub usize);

impl Sink for Counter {
    fn len(&self) -> usize {
        self.0
    }
    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.0 += bytes.len();
        Ok(())
    }
    fn fill(&mut self, n: usize, _: &mut dyn FnMut(&mut [u8]) -> Result<()>) -> Result<()> {
        self.0 += n;
        Ok(())
    }
}

/// Appends to a vector; the frame starts at `start`.
pub(super) struct VecSink<'a> {
    pub out: &'a mut Vec<u8>,
    pub start: usize,
}

impl Sink for VecSink<'_> {
    fn len(&self) -> usize {
        self.out.len() - self.start
    }
    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.out.extend_from_slice(bytes);
        Ok(())
    }
    fn fill(&mut self, n: usize, fill: &mut dyn FnMut(&mut [u8]) -> Result<()>) -> Result<()> {
        let at = self.out.len();
        self.out.resize(at + n, 0);
        fill(&mut self.out[at..])
    }
}

/// Fills a slice from its start.
pub(super) struct SliceSink<'a> {
    pub out: &'a mut [u8],
    pub pos: usize,
}

impl SliceSink<'_> {
    fn take(&mut self, n: usize) -> Result<&mut [u8]> {
        let room = self.out.len() - self.pos;
        if n > room {
            return Err(Error::value(format!(
                "the frame does not fit in {} bytes (byte {} needs {n} more)",
                self.out.len(),
                self.pos
            )));
        }
        let at = self.pos;
        self.pos += n;
        Ok(&mut self.out[at..at + n])
    }
}

impl Sink for SliceSink<'_> {
    fn len(&self) -> usize {
        self.pos
    }
    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.take(bytes.len())?.copy_from_slice(bytes);
        Ok(())
    }
    fn fill(&mut self, n: usize, fill: &mut dyn FnMut(&mut [u8]) -> Result<()>) -> Result<()> {
        fill(self.take(n)?)
    }
}

/// Reads a payload front to back. Offsets in errors count from the start of the frame.
#[derive(Clone, Copy)]
pub(super) struct Reader<'a> {
    payload: &'a [u8],
    pos: usize,
    /// Where the payload starts in its frame (the header's size).
    base: usize,
    /// The frame's minor version, for errors about tags this reader does not know.
    pub minor: u8,
    /// The frame's kind, for errors.
    kind: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(payload: &'a [u8], base: usize, minor: u8, kind: &'static str) -> Self {
        Reader {
            payload,
            pos: 0,
            base,
            minor,
            kind,
        }
    }

    /// The offset of the next byte, from the start of the frame.
    pub fn offset(&self) -> usize {
        self.base + self.pos
    }

    pub fn remaining(&self) -> usize {
        self.payload.len() - self.pos
    }

    /// The error about what starts at frame offset `at`.
    pub fn error_at(&self, at: usize, what: impl Display) -> Error {
        bad_frame(format_args!("{} frame, at byte {at}: {what}", self.kind))
    }

    /// The next `n` bytes; `what` names them if they are not all there.
    pub fn bytes(&mut self, n: u64, what: impl Display) -> Result<&'a [u8]> {
        let left = self.remaining();
        let n = usize::try_from(n)
            .ok()
            .filter(|&n| n <= left)
            .ok_or_else(|| {
                self.error_at(
                    self.offset(),
                    format_args!(
                        "{what} runs past the end of the payload ({n} bytes needed, {left} left)"
                    ),
                )
            })?;
        let taken = &self.payload[self.pos..self.pos + n];
        self.pos += n;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self, what: impl Display) -> Result<[u8; N]> {
        Ok(self
            .bytes(N as u64, what)?
            .try_into()
            .expect("exactly N bytes"))
    }

    pub fn u32(&mut self, what: impl Display) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }
    pub fn i32(&mut self, what: impl Display) -> Result<i32> {
        self.array(what).map(i32::from_le_bytes)
    }
    pub fn u64(&mut self, what: impl Display) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }
    pub fn i64(&mut self, what: impl Display) -> Result<i64> {
        self.array(what).map(i64::from_le_bytes)
    }

    /// The next 4 bytes as a `u32`, without consuming them.
    pub fn peek_u32(&self, what: impl Display) -> Result<u32> {
        let mut ahead = *self;
        ahead.u32(what)
    }

    /// A reserved field: 4 bytes that must be zero.
    pub fn reserved(&mut self, what: impl Display) -> Result<()> {
        let at = self.offset();
        let value = self.u32(&what)?;
        self.check_reserved(at, value, what)
    }

    /// Checks that a reserved field read at `at` is zero.
    pub fn check_reserved(&self, at: usize, value: u32, what: impl Display) -> Result<()> {
        if value != 0 {
            return Err(self.error_at(at, format_args!("{what} is {value}, not 0 (reserved)")));
        }
        Ok(())
    }

    /// Zero padding up to the next multiple of [`ALIGN`] (from the start of the frame).
    pub fn padding(&mut self, what: impl Display) -> Result<()> {
        let at = self.offset();
        let pad = self.bytes(padding(at) as u64, format_args!("the padding after {what}"))?;
        if let Some(i) = pad.iter().position(|&b| b != 0) {
            return Err(self.error_at(
                at + i,
                format_args!("padding byte after {what} is {:#04x}, not 0", pad[i]),
            ));
        }
        Ok(())
    }

    /// Checks that nothing is left.
    pub fn finish(&self, what: impl Display) -> Result<()> {
        match self.remaining() {
            0 => Ok(()),
            left => Err(self.error_at(
                self.offset(),
                format_args!("{left} bytes left over after {what}"),
            )),
        }
    }
}
