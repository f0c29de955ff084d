//! Routed frames on a connection between the controller and a node, once the node joined: each
//! message is a route (which of the node's workers, and what follows), then, for most, one wire
//! frame; `WIRE.md` ("Routed frames") gives the layout.
//!
//! The one idea: a reader checks the route and the frame's header before it reads (and
//! allocates) the payload, so a peer can make it read no more than its frame limit, and any
//! bytes that are not a route and a frame end the connection with a reason.

use std::io::{self, Read, Write};

use crate::object::Error;
use crate::wire::{HEADER_SIZE, Header, Limits};

/// The route of a message for every worker of the node.
pub const ALL: u32 = u32::MAX;
/// Bytes of a route.
pub const ROUTE_SIZE: usize = 8;

/// What follows a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum What {
    /// A frame for the routed worker (from the controller) or from it (from the node).
    Frame = 0,
    /// Nothing: the sender is alive.
    Heartbeat = 1,
    /// From a node: the routed worker is gone; an `Err` frame says why.
    Death = 2,
    /// From the controller, to the whole node: a module for its workers to load, after its
    /// SHA-256.
    Upload = 3,
    /// From a node, about every worker of it: the records of its workers that changed since it
    /// last sent them (`session::node_board`).
    Board = 4,
    /// From the controller, to the routed worker(s): something to note outside the workers'
    /// queues (the session stops, new communicators come, a collective was ruled hopeless).
    Signal = 5,
    /// Either way, about the node's part in a trace: the controller asks for a clock reading,
    /// or starts, stops or dumps the node's trace; the node answers with its clock and its
    /// workers' events (`session::node::trace` lays it out).
    Trace = 6,
}

/// Bytes of the hash before an uploaded module.
pub const HASH_SIZE: usize = 32;

impl What {
    fn from_code(code: u32) -> Option<What> {
        [
            What::Frame,
            What::Heartbeat,
            What::Death,
            What::Upload,
            What::Board,
            What::Signal,
            What::Trace,
        ]
        .into_iter()
        .find(|w| *w as u32 == code)
    }
}

/// One message read from a connection.
#[derive(Debug)]
pub struct Message {
    pub route: u32,
    pub what: What,
    /// The frame's bytes, header included; empty for a heartbeat; an upload's hash and module;
    /// a board's entries; a signal; a trace message.
    pub frame: Vec<u8>,
}

/// Why reading a message failed.
#[derive(Debug)]
pub enum ReadError {
    /// The peer closed the connection (at a message's start, or within one).
    Closed,
    /// Nothing came within the connection's read timeout.
    Silent,
    /// The bytes are not a route and a frame: the error says what was wrong.
    Bad(Error),
}

/// Writes one message; `frame` is empty for a heartbeat. The caller flushes.
pub fn write(out: &mut impl Write, route: u32, what: What, frame: &[u8]) -> io::Result<()> {
    write_head(out, route, what)?;
    out.write_all(frame)
}

/// Writes the route of a message; what follows is the caller's to write.
pub fn write_head(out: &mut impl Write, route: u32, what: What) -> io::Result<()> {
    let mut head = [0u8; ROUTE_SIZE];
    head[..4].copy_from_slice(&route.to_le_bytes());
    head[4..].copy_from_slice(&(what as u32).to_le_bytes());
    out.write_all(&head)
}

/// Writes an upload of `module`, whose SHA-256 is `hash`, for every worker of a node.
pub fn write_upload(out: &mut impl Write, hash: &[u8; HASH_SIZE], module: &[u8]) -> io::Result<()> {
    write_sized(out, What::Upload, HASH_SIZE + module.len())?;
    out.write_all(hash)?;
    out.write_all(module)
}

/// Bytes of a node's board entry before its texts (`session::node_board` lays entries out):
/// a board shorter than one entry is refused here.
pub const BOARD_ENTRY_FIXED: usize = 152;

/// Writes a node's board: `entries`, encoded by `session::node_board::encode`.
pub fn write_board(out: &mut impl Write, entries: &[u8]) -> io::Result<()> {
    write_sized(out, What::Board, entries.len())?;
    out.write_all(entries)
}

/// Bytes of a signal before its text: its kind (`u32`), a zero `u32`, and a call (`u64`).
pub const SIGNAL_FIXED: usize = TWO_WORDS;
/// Bytes of a signal's text at most.
pub const MAX_SIGNAL_TEXT: usize = 512;

/// Writes a signal of kind `kind` about call `call` with `text` for the worker(s) of `route`.
pub fn write_signal(
    out: &mut impl Write,
    route: u32,
    kind: u32,
    call: u64,
    text: &[u8],
) -> io::Result<()> {
    write_two_words(out, (route, What::Signal), [kind, 0], call, text)
}

/// Bytes of the fixed part of a message of two `u32`s and a `u64`.
const TWO_WORDS: usize = 16;

/// Writes a message of `what` on `route` whose fixed part is two `u32`s (`words`) and a `u64`
/// (`wide`), after its length, then `rest`: the layout signals and trace messages share.
fn write_two_words(
    out: &mut impl Write,
    (route, what): (u32, What),
    words: [u32; 2],
    wide: u64,
    rest: &[u8],
) -> io::Result<()> {
    write_head(out, route, what)?;
    out.write_all(&((TWO_WORDS + rest.len()) as u64).to_le_bytes())?;
    out.write_all(&words[0].to_le_bytes())?;
    out.write_all(&words[1].to_le_bytes())?;
    out.write_all(&wide.to_le_bytes())?;
    out.write_all(rest)
}

/// Bytes of a trace message before its body: what it is (`u32`), a worker's index on the node
/// (`u32`), and a stamp (`u64`).
pub const TRACE_FIXED: usize = TWO_WORDS;

/// Writes a trace message `what` about the worker at `local` with `stamp` and `body`.
pub fn write_trace(
    out: &mut impl Write,
    what: u32,
    local: u32,
    stamp: u64,
    body: &[u8],
) -> io::Result<()> {
    write_two_words(out, (ALL, What::Trace), [what, local], stamp, body)
}

/// Writes the route of a message to every worker and the length of what follows.
fn write_sized(out: &mut impl Write, what: What, len: usize) -> io::Result<()> {
    write(out, ALL, what, &(len as u64).to_le_bytes())
}

/// Reads exactly `bytes.len()` bytes of a message.
pub fn read_exact(input: &mut impl Read, bytes: &mut [u8]) -> std::result::Result<(), ReadError> {
    input.read_exact(bytes).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe => ReadError::Closed,
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ReadError::Silent,
        _ => ReadError::Bad(Error::runtime(format!(
            "reading the connection failed: {e}"
        ))),
    })
}

/// The start of a message, checked: its route, what follows, and, for a frame, the frame's
/// header; `rest` bytes of it are still to be read.
#[derive(Debug)]
pub struct Head {
    pub route: u32,
    pub what: What,
    /// The frame's header ([`What::Frame`] and [`What::Death`]).
    pub header: Option<(Header, [u8; HEADER_SIZE])>,
    /// Bytes of the message after what was read: a frame's payload, an upload's hash and
    /// module, a board's entries.
    pub rest: usize,
}

/// Reads the start of one message: the route, and a frame's header (checked against `limits`)
/// or an upload's or a board's length, but nothing of a payload.
pub fn read_head(input: &mut impl Read, limits: &Limits) -> std::result::Result<Head, ReadError> {
    let mut head = [0u8; ROUTE_SIZE];
    read_exact(input, &mut head)?;
    let (route, code) = (super::u32_at(&head, 0), super::u32_at(&head, 4));
    let what = What::from_code(code).ok_or_else(|| {
        ReadError::Bad(Error::value(format!(
            "a routed message of unknown kind {code} (route {route:#x})"
        )))
    })?;
    match what {
        What::Heartbeat => {
            if route != 0 {
                return Err(ReadError::Bad(Error::value(format!(
                    "a heartbeat with route {route:#x}, not 0"
                ))));
            }
            Ok(Head {
                route,
                what,
                header: None,
                rest: 0,
            })
        }
        What::Upload | What::Board | What::Trace => {
            let mut len = [0u8; 8];
            read_exact(input, &mut len)?;
            let len = u64::from_le_bytes(len);
            let (name, least, holds) = match what {
                What::Upload => ("an upload", HASH_SIZE, "a hash"),
                What::Board => ("a board", BOARD_ENTRY_FIXED, "an entry"),
                _ => ("a trace message", TRACE_FIXED, "its fixed part"),
            };
            if route != ALL || len < least as u64 || len > limits.max_payload as u64 {
                return Err(ReadError::Bad(Error::value(format!(
                    "{name} of {len} bytes routed to {route:#x} (it is about every worker, \
                     holds {holds} of {least} bytes at least, and at most {} bytes)",
                    limits.max_payload
                ))));
            }
            Ok(Head {
                route,
                what,
                header: None,
                rest: len as usize,
            })
        }
        What::Signal => {
            let mut len = [0u8; 8];
            read_exact(input, &mut len)?;
            let len = u64::from_le_bytes(len);
            let most = SIGNAL_FIXED + MAX_SIGNAL_TEXT;
            if !(SIGNAL_FIXED as u64..=most as u64).contains(&len) {
                return Err(ReadError::Bad(Error::value(format!(
                    "a signal of {len} bytes (from {SIGNAL_FIXED} to {most})"
                ))));
            }
            Ok(Head {
                route,
                what,
                header: None,
                rest: len as usize,
            })
        }
        What::Frame | What::Death => {
            let mut bytes = [0u8; HEADER_SIZE];
            read_exact(input, &mut bytes)?;
            let header = Header::parse(&bytes, limits).map_err(ReadError::Bad)?;
            Ok(Head {
                route,
                what,
                header: Some((header, bytes)),
                rest: header.payload_len,
            })
        }
    }
}

/// Reads the rest of the message that `head` starts into `buffer` (a caller's, reused: the
/// last message's `frame`).
pub fn read_rest(
    input: &mut impl Read,
    head: Head,
    mut buffer: Vec<u8>,
) -> std::result::Result<Message, ReadError> {
    buffer.clear();
    let start = match &head.header {
        Some((_, bytes)) => {
            buffer.extend_from_slice(bytes);
            HEADER_SIZE
        }
        None => 0,
    };
    buffer.resize(start + head.rest, 0);
    read_exact(input, &mut buffer[start..])?;
    Ok(Message {
        route: head.route,
        what: head.what,
        frame: buffer,
    })
}

/// Reads one message into `buffer` (a caller's, reused: the last message's `frame`). A frame's
/// header is checked against `limits` before its payload is read.
pub fn read(
    input: &mut impl Read,
    limits: &Limits,
    buffer: Vec<u8>,
) -> std::result::Result<Message, ReadError> {
    let head = read_head(input, limits)?;
    read_rest(input, head, buffer)
}

/// Reads the next `n` bytes of a message and drops them.
pub fn skip(input: &mut impl Read, n: usize) -> std::result::Result<(), ReadError> {
    let mut chunk = [0u8; 4096];
    let mut left = n;
    while left > 0 {
        let take = left.min(chunk.len());
        read_exact(input, &mut chunk[..take])?;
        left -= take;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::Any;
    use crate::wire::Frame;

    fn sync_frame(request: u64) -> Vec<u8> {
        let mut out = Vec::new();
        Frame::<Any>::Sync { request }.encode(&mut out).unwrap();
        out
    }

    #[test]
    fn messages_round_trip() {
        let mut bytes = Vec::new();
        write(&mut bytes, 3, What::Frame, &sync_frame(9)).unwrap();
        write(&mut bytes, 0, What::Heartbeat, &[]).unwrap();
        write(&mut bytes, ALL, What::Frame, &sync_frame(10)).unwrap();
        write_upload(&mut bytes, &[9; HASH_SIZE], b"module").unwrap();
        let entries = [0u8; BOARD_ENTRY_FIXED];
        write_board(&mut bytes, &entries).unwrap();
        let input = &mut bytes.as_slice();
        let limits = Limits::default();
        let first = read(input, &limits, Vec::new()).unwrap();
        assert_eq!((first.route, first.what), (3, What::Frame));
        assert!(matches!(
            Frame::decode(&first.frame, &limits).unwrap(),
            Frame::Sync { request: 9 }
        ));
        let beat = read(input, &limits, Vec::new()).unwrap();
        assert_eq!((beat.what, beat.frame.len()), (What::Heartbeat, 0));
        assert_eq!(read(input, &limits, Vec::new()).unwrap().route, ALL);
        let upload = read(input, &limits, Vec::new()).unwrap();
        assert_eq!((upload.route, upload.what), (ALL, What::Upload));
        assert_eq!(&upload.frame[..HASH_SIZE], &[9; HASH_SIZE]);
        assert_eq!(&upload.frame[HASH_SIZE..], b"module");
        let board = read(input, &limits, Vec::new()).unwrap();
        assert_eq!((board.route, board.what), (ALL, What::Board));
        assert_eq!(board.frame, entries);
        assert!(matches!(
            read(input, &limits, Vec::new()),
            Err(ReadError::Closed)
        ));
    }

    #[test]
    fn bad_routes_and_oversized_frames_are_refused_before_the_payload_is_read() {
        let limits = Limits { max_payload: 64 };
        let bad = |bytes: &[u8]| match read(&mut &bytes[..], &limits, Vec::new()) {
            Err(ReadError::Bad(error)) => error.message,
            other => panic!("not refused: {other:?}"),
        };
        assert!(bad(&[0, 0, 0, 0, 7, 0, 0, 0]).contains("unknown kind 7"));
        // Uploads and boards: about every worker, a hash or an entry at least, within the
        // limit.
        let sized = |what: What, route: u32, len: u64| {
            let mut bytes = route.to_le_bytes().to_vec();
            bytes.extend_from_slice(&(what as u32).to_le_bytes());
            bytes.extend_from_slice(&len.to_le_bytes());
            bytes
        };
        assert!(bad(&sized(What::Upload, 0, 40)).contains("routed to 0x0"));
        assert!(bad(&sized(What::Upload, ALL, 31)).contains("an upload of 31 bytes"));
        assert!(bad(&sized(What::Upload, ALL, 65)).contains("at most 64 bytes"));
        assert_eq!(
            bad(&sized(What::Board, 1, 152)),
            "a board of 152 bytes routed to 0x1 (it is about every worker, holds an entry of \
             152 bytes at least, and at most 64 bytes)"
        );
        assert!(bad(&sized(What::Board, ALL, 151)).contains("a board of 151 bytes"));
        // Signals: a fixed part at least, and a text no longer than a ruling's.
        assert!(bad(&sized(What::Signal, 0, 15)).contains("a signal of 15 bytes (from 16 to 528)"));
        assert!(bad(&sized(What::Signal, ALL, 529)).contains("a signal of 529 bytes"));
        assert!(bad(&[1, 0, 0, 0, 1, 0, 0, 0]).contains("a heartbeat with route 0x1"));
        // A header declaring a payload past the limit: refused from the header alone.
        let mut big = vec![0u8; ROUTE_SIZE];
        let mut frame = sync_frame(1);
        frame[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
        big.extend_from_slice(&frame[..HEADER_SIZE]);
        assert!(bad(&big).contains("limit"), "{}", bad(&big));
        // Garbage where a frame's header belongs.
        let mut garbage = vec![0u8; ROUTE_SIZE];
        garbage.extend_from_slice(b"GET / HTTP/1.1\r\n");
        assert!(bad(&garbage).contains("magic"), "{}", bad(&garbage));
        // A frame cut short.
        let mut short = vec![0u8; ROUTE_SIZE];
        short.extend_from_slice(&sync_frame(1)[..20]);
        assert!(matches!(
            read(&mut short.as_slice(), &limits, Vec::new()),
            Err(ReadError::Closed)
        ));
    }
}
