//! The wire encoding: how values and session messages cross to workers in other processes (over
//! shared-memory rings) and on other nodes (over TCP), in one versioned format that `WIRE.md`
//! specifies byte by byte. A [`Frame`](crate::wire::Frame) is a [`Header`](crate::wire::Header),
//! then fixed-width fields and tagged [`Value`](crate::wire::Value)s; its methods encode and decode
//! it in each transport's forms.
//!
//! The one idea: every frame has exactly one encoding. The reader checks every field, padding byte
//! and length before it allocates anything, so a frame it accepts encodes again to the same bytes
//! (the tests and the `wire_frame` fuzz target check that), and anything else is a `ValueError`
//! naming the field, its byte offset and the value, never a panic.

mod buffer;
mod frame;
#[cfg(test)]
mod tests;
mod value;

use crate::object::{Any, AnyView, Error, Result};

pub use buffer::Gathered;
pub use frame::{Frame, Kind};
pub use value::{ArenaTensor, Value, tag};

/// The first four bytes of every frame.
pub const MAGIC: [u8; 4] = *b"DVMW";
/// The major version this library writes and reads. A frame of another major version is
/// refused.
pub const VERSION_MAJOR: u8 = 1;
/// The minor version this library writes. Frames of any minor version of [`VERSION_MAJOR`] are
/// read; a newer minor version may use kinds and tags this reader refuses.
pub const VERSION_MINOR: u8 = 8;
/// Bytes in a frame header.
pub const HEADER_SIZE: usize = 16;
/// Every value, and every variable-length field, starts at a multiple of this many bytes from
/// the start of its frame, and every payload is a multiple of it long.
pub const ALIGN: usize = 8;
/// The default bound on a frame's payload: 1 GiB.
pub const DEFAULT_MAX_PAYLOAD: usize = 1 << 30;

/// What a reader accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The largest payload, in bytes, a header may declare. A reader refuses a larger frame
    /// from its header alone, before it reads or allocates the payload.
    pub max_payload: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_payload: DEFAULT_MAX_PAYLOAD,
        }
    }
}

/// A frame's header, checked: the magic, a version this library reads, a known kind, and a
/// payload length within the limits and a multiple of [`ALIGN`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The writer's minor version (the major version is [`VERSION_MAJOR`]).
    pub minor: u8,
    pub kind: Kind,
    /// Bytes of payload that follow the header.
    pub payload_len: usize,
}

impl Header {
    /// Parses and checks the first [`HEADER_SIZE`] bytes of `bytes` (the rest is ignored).
    ///
    /// Errors: `ValueError` if there are fewer than 16 bytes, the magic is wrong, the major
    /// version is not [`VERSION_MAJOR`], the kind is unknown, or the payload length is larger
    /// than `limits.max_payload` or not a multiple of 8.
    pub fn parse(bytes: &[u8], limits: &Limits) -> Result<Header> {
        let Some(header) = bytes.first_chunk::<HEADER_SIZE>() else {
            return Err(bad_frame(format!(
                "truncated header: {} of {HEADER_SIZE} bytes",
                bytes.len()
            )));
        };
        let magic = &header[0..4];
        if magic != MAGIC {
            return Err(bad_frame(format!(
                "bad magic {magic:02x?} (expected {MAGIC:02x?}, \"DVMW\")"
            )));
        }
        let (major, minor) = (header[4], header[5]);
        if major != VERSION_MAJOR {
            return Err(bad_frame(format!(
                "wire version {major}.{minor} is not supported (this reader reads \
                 {VERSION_MAJOR}.x)"
            )));
        }
        let code = u16::from_le_bytes([header[6], header[7]]);
        let kind = Kind::from_code(code).ok_or_else(|| {
            bad_frame(format!(
                "unknown frame kind {code} (in a version {major}.{minor} frame; this reader \
                 knows the kinds of version {VERSION_MAJOR}.{VERSION_MINOR})"
            ))
        })?;
        let declared = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
        // A frame's length must fit in memory, whatever the limit says.
        let limit = limits.max_payload.min(isize::MAX as usize - HEADER_SIZE);
        let payload_len = usize::try_from(declared)
            .ok()
            .filter(|&len| len <= limit)
            .ok_or_else(|| {
                bad_frame(format!(
                    "{} frame declares a payload of {declared} bytes, over the limit of {} \
                     bytes",
                    kind.name(),
                    limit
                ))
            })?;
        if !payload_len.is_multiple_of(ALIGN) {
            return Err(bad_frame(format!(
                "{} frame declares a payload of {payload_len} bytes, not a multiple of {ALIGN}",
                kind.name()
            )));
        }
        Ok(Header {
            minor,
            kind,
            payload_len,
        })
    }

    /// The whole frame's length: header and payload.
    pub fn frame_len(&self) -> usize {
        HEADER_SIZE + self.payload_len
    }
}

/// A packed value the encoder can read: an owned [`Any`] (frames decoded, or built from owned
/// values) or a borrowed [`AnyView`] (frames built from a caller's arguments, encoded without
/// copying them first).
pub trait Packed {
    /// The value, borrowed.
    fn packed(&self) -> AnyView<'_>;
}

impl Packed for Any {
    fn packed(&self) -> AnyView<'_> {
        self.view()
    }
}

impl Packed for AnyView<'_> {
    fn packed(&self) -> AnyView<'_> {
        *self
    }
}

/// The `ValueError` of a frame the reader refuses.
fn bad_frame(what: impl std::fmt::Display) -> Error {
    Error::value(format!("bad wire frame: {what}"))
}
