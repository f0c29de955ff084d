//! Where encoded bytes go ([`Sink`]: a growing vector, a fixed slot, a counter, or a
//! [`Gathered`] frame that leaves large tensors' data where it is) and how a payload is read
//! ([`Reader`]: bounds-checked, with errors that say at which byte).

use std::cell::Cell;
use std::fmt::Display;
use std::io::{self, Write};
use std::sync::Arc;

use super::{ALIGN, bad_frame};
use crate::object::{Error, HostBlock, Result, Tensor};

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
    /// Writes the `nbytes` bytes of data of `tensor` (a compact host tensor), read after every
    /// earlier use of it; errors name it `name`. A counter only counts them.
    fn tensor(&mut self, tensor: &Tensor, nbytes: usize, name: &dyn Display) -> Result<()>;

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
    fn tensor(&mut self, _: &Tensor, nbytes: usize, _: &dyn Display) -> Result<()> {
        self.0 += nbytes;
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
    fn tensor(&mut self, tensor: &Tensor, nbytes: usize, name: &dyn Display) -> Result<()> {
        append_data(self.out, tensor, nbytes, name)
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
    fn tensor(&mut self, tensor: &Tensor, nbytes: usize, name: &dyn Display) -> Result<()> {
        read_data(tensor, self.take(nbytes)?, name)
    }
}

/// Copies a tensor's data into `dst`, after every earlier use of the tensor.
fn read_data(tensor: &Tensor, dst: &mut [u8], name: &dyn Display) -> Result<()> {
    crate::vm::read(tensor, dst).map_err(|e| e.context(name))
}

/// Appends the `nbytes` bytes of a tensor's data to `out`, after every earlier use of it.
fn append_data(
    out: &mut Vec<u8>,
    tensor: &Tensor,
    nbytes: usize,
    name: &dyn Display,
) -> Result<()> {
    let at = out.len();
    out.resize(at + nbytes, 0);
    read_data(tensor, &mut out[at..], name)
}

/// Tensors with at least this many bytes of data stay out of a [`Gathered`] frame's bytes.
const GATHERED_FROM: usize = 64 << 10;

/// A frame encoded to be written on a stream: its bytes, except the data of large host tensors,
/// which is written from the tensors' own memory.
#[derive(Default)]
pub struct Gathered {
    bytes: Vec<u8>,
    /// Each large tensor's data: where it goes in `bytes` (before the byte at that offset),
    /// the tensor (kept alive) and its length.
    tensors: Vec<(usize, Tensor, usize)>,
}

impl Gathered {
    /// A frame to encode in `bytes` (a buffer to reuse, emptied first).
    pub(super) fn new(mut bytes: Vec<u8>) -> Gathered {
        bytes.clear();
        Gathered {
            bytes,
            tensors: Vec::new(),
        }
    }

    /// The frame's length, tensors' data included.
    pub fn frame_len(&self) -> usize {
        self.bytes.len() + self.tensors.iter().map(|(_, _, n)| n).sum::<usize>()
    }

    /// Writes the frame to `out`, each large tensor's data straight from its memory.
    pub fn write_to(&self, out: &mut impl Write) -> io::Result<()> {
        let mut at = 0;
        for (before, tensor, nbytes) in &self.tensors {
            out.write_all(&self.bytes[at..*before])?;
            // SAFETY: a compact host tensor of `nbytes` bytes (checked as it was encoded),
            // alive while this frame holds it; its earlier writers finished when it was
            // encoded.
            out.write_all(unsafe {
                std::slice::from_raw_parts(tensor.data_ptr().cast::<u8>(), *nbytes)
            })?;
            at = *before;
        }
        out.write_all(&self.bytes[at..])
    }

    /// The buffer the frame's bytes were in, to reuse.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

impl Sink for Gathered {
    fn len(&self) -> usize {
        self.frame_len()
    }
    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.bytes.extend_from_slice(bytes);
        Ok(())
    }
    fn tensor(&mut self, tensor: &Tensor, nbytes: usize, name: &dyn Display) -> Result<()> {
        if nbytes < GATHERED_FROM {
            return append_data(&mut self.bytes, tensor, nbytes, name);
        }
        // A read of nothing waits for the tensor's earlier writers and reports their failure.
        read_data(tensor, &mut [], name)?;
        self.tensors
            .push((self.bytes.len(), tensor.clone(), nbytes));
        Ok(())
    }
}

/// What a reader does besides decoding.
#[derive(Clone, Copy)]
pub(super) enum Mode<'a> {
    /// Copies the data of every tensor.
    Copy,
    /// The payload lies in `block`, which large tensors may keep their data in.
    Share(&'a Arc<HostBlock>),
    /// The payload is the start of a longer one: notes where the first read past it starts.
    Probe(&'a Cell<Option<usize>>),
}

/// Reads a payload front to back. Offsets in errors count from the start of the frame.
#[derive(Clone, Copy)]
pub(super) struct Reader<'a> {
    payload: &'a [u8],
    mode: Mode<'a>,
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
            mode: Mode::Copy,
            pos: 0,
            base,
            minor,
            kind,
        }
    }

    pub fn with_mode(self, mode: Mode<'a>) -> Self {
        Reader { mode, ..self }
    }

    /// The block the payload lies in, when large tensors may keep their data there.
    pub fn block(&self) -> Option<&'a Arc<HostBlock>> {
        match self.mode {
            Mode::Share(block) => Some(block),
            _ => None,
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
        if let Mode::Probe(past) = self.mode
            && n > left as u64
            && past.get().is_none()
        {
            past.set(Some(self.offset()));
        }
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
