//! Frames: the messages of the controller/worker protocol as they cross. Requests go from the
//! controller to a worker, in order; a request that waits for an answer carries a request id,
//! and the worker answers it with an `Ok` or `Err` reply carrying the same id.

use std::cell::Cell;
use std::fmt::Display;
use std::ops::Range;
use std::sync::Arc;

use super::buffer::{Counter, Gathered, Mode, Reader, Sink, SliceSink, VecSink};
use super::value::{
    self, ArenaTensor, Value, check_register, peek_tag, read_str, read_value, tag, write_str,
    write_value, wrong_tag,
};
use super::{HEADER_SIZE, Header, Limits, MAGIC, Packed, VERSION_MAJOR, VERSION_MINOR, bad_frame};
use crate::abi::type_index as ti;
use crate::object::{Any, Error, ErrorKind, HostBlock, Result};

/// What a frame is: the code in its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Call,
    Store,
    Free,
    Sync,
    Get,
    CountLive,
    GetGlobalFunc,
    CopyToWorker0,
    CopyFromWorker0,
    Shutdown,
    Lend,
    FreeCall,
    GetModuleFunc,
    NumberedCall,
    Ok,
    Err,
}

impl Kind {
    /// Every kind, in the order of their codes.
    pub const ALL: [Kind; 16] = [
        Kind::Call,
        Kind::Store,
        Kind::Free,
        Kind::Sync,
        Kind::Get,
        Kind::CountLive,
        Kind::GetGlobalFunc,
        Kind::CopyToWorker0,
        Kind::CopyFromWorker0,
        Kind::Shutdown,
        Kind::Lend,
        Kind::FreeCall,
        Kind::GetModuleFunc,
        Kind::NumberedCall,
        Kind::Ok,
        Kind::Err,
    ];

    /// The kind's code in a frame header: requests from 1, replies from 128.
    pub fn code(self) -> u16 {
        match self {
            Kind::Call => 1,
            Kind::Store => 2,
            Kind::Free => 3,
            Kind::Sync => 4,
            Kind::Get => 5,
            Kind::CountLive => 6,
            Kind::GetGlobalFunc => 7,
            Kind::CopyToWorker0 => 8,
            Kind::CopyFromWorker0 => 9,
            Kind::Shutdown => 10,
            Kind::Lend => 11,
            Kind::FreeCall => 12,
            Kind::GetModuleFunc => 13,
            Kind::NumberedCall => 14,
            Kind::Ok => 128,
            Kind::Err => 129,
        }
    }

    pub fn from_code(code: u16) -> Option<Kind> {
        Kind::ALL.into_iter().find(|kind| kind.code() == code)
    }

    /// The kind's name, as `WIRE.md` and error messages give it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Call => "Call",
            Kind::Store => "Store",
            Kind::Free => "Free",
            Kind::Sync => "Sync",
            Kind::Get => "Get",
            Kind::CountLive => "CountLive",
            Kind::GetGlobalFunc => "GetGlobalFunc",
            Kind::CopyToWorker0 => "CopyToWorker0",
            Kind::CopyFromWorker0 => "CopyFromWorker0",
            Kind::Shutdown => "Shutdown",
            Kind::Lend => "Lend",
            Kind::FreeCall => "FreeCall",
            Kind::GetModuleFunc => "GetModuleFunc",
            Kind::NumberedCall => "NumberedCall",
            Kind::Ok => "Ok",
            Kind::Err => "Err",
        }
    }

    /// Whether a worker sends it to the controller (a reply), rather than the reverse.
    pub fn is_reply(self) -> bool {
        matches!(self, Kind::Ok | Kind::Err)
    }
}

/// A message of the controller/worker protocol. `P` is the packed form of plain values: an
/// owned [`Any`] in decoded frames, or a borrowed [`AnyView`](crate::AnyView) in frames built
/// from a caller's arguments (see [`Packed`]).
///
/// Registers are ids the controller hands out (never 0); request ids are the controller's
/// too, and come back in the reply to the request.
#[derive(Clone, Debug)]
pub enum Frame<P = Any> {
    /// Empties the registers of `frees`, in order, then calls the function in register `func`
    /// with `args` (a [`Value::Register`] argument is that register's value on the worker) and
    /// stores the result, or the failure, in `out`. No reply: a failure is reported by the next
    /// `Sync`. The frees of a controller's dropped DRefs ride on its next call. A
    /// `NumberedCall` frame when it carries the call's number, with or without frees; else a
    /// `Call` frame without frees, a `FreeCall` frame with them.
    Call {
        /// The call's word: the low 31 bits of its number, which the worker widens from the
        /// numbers it saw before, and bit 31 when it went to every worker (WIRE.md); None in
        /// the `Call` and `FreeCall` frames of writers before 1.4.
        call: Option<u32>,
        frees: Vec<u32>,
        func: u32,
        out: u32,
        args: Vec<Value<P>>,
    },
    /// Stores `value` in register `reg`. `name` is the global function's name when the value
    /// is one (for messages). No reply.
    Store {
        reg: u32,
        name: Option<Arc<str>>,
        value: Value<P>,
    },
    /// Empties register `reg`. No reply.
    Free { reg: u32 },
    /// Replied once everything sent before it ran: `Ok` with None, or `Err` with the first
    /// failure since the last sync.
    Sync { request: u64 },
    /// Replied with the value of register `reg` (`Err` if it holds a failure or nothing).
    Get { request: u64, reg: u32 },
    /// Replied with the number of registers that hold something, an int.
    CountLive { request: u64 },
    /// Looks the global function `name` up in the worker's own registry and stores it in
    /// register `reg`. Replied with None, or `Err` (`KeyError`) if there is no such function.
    GetGlobalFunc {
        request: u64,
        reg: u32,
        name: Arc<str>,
    },
    /// Looks the function `name` up in the module in register `module` (a module the worker
    /// loaded, or one a function returned) and stores it in register `reg`. Replied with None,
    /// or `Err`: a `KeyError` if the module has no such function, the failure `module` holds,
    /// or a `TypeError` if it holds no module.
    GetModuleFunc {
        request: u64,
        reg: u32,
        module: u32,
        name: Arc<str>,
    },
    /// Copies `source` into the tensor in register `reg` on worker 0; replied with None.
    /// `source` is a host tensor ([`Value::Plain`] holding a Tensor) or a [`Value::Arena`].
    CopyToWorker0 {
        request: u64,
        reg: u32,
        source: Value<P>,
    },
    /// Copies the tensor in register `reg` on worker 0 into the arena at `into` and replies
    /// with None; without `into`, replies with the tensor itself (a host copy).
    CopyFromWorker0 {
        request: u64,
        reg: u32,
        into: Option<ArenaTensor>,
    },
    /// The worker leaves its loop. No reply.
    Shutdown,
    /// Worker 0 lends the tensor in register `reg` for a copy: replied with where it lies in
    /// the session's arena (a [`Value::Arena`]), after which the worker runs nothing else
    /// until the controller gives it back through the arena; or with None when the tensor is
    /// not in the arena (nothing is lent). Failures since the last sync come first, as `Err`.
    Lend { request: u64, reg: u32 },
    /// The answer to request `request`.
    Ok { request: u64, value: Value<P> },
    /// The failure of request `request`: the error to raise on the thread that waits.
    Err { request: u64, error: Error },
}

impl<P> Frame<P> {
    pub fn kind(&self) -> Kind {
        match self {
            Frame::Call { call: Some(_), .. } => Kind::NumberedCall,
            Frame::Call { frees, .. } if frees.is_empty() => Kind::Call,
            Frame::Call { .. } => Kind::FreeCall,
            Frame::Store { .. } => Kind::Store,
            Frame::Free { .. } => Kind::Free,
            Frame::Sync { .. } => Kind::Sync,
            Frame::Get { .. } => Kind::Get,
            Frame::CountLive { .. } => Kind::CountLive,
            Frame::GetGlobalFunc { .. } => Kind::GetGlobalFunc,
            Frame::GetModuleFunc { .. } => Kind::GetModuleFunc,
            Frame::CopyToWorker0 { .. } => Kind::CopyToWorker0,
            Frame::CopyFromWorker0 { .. } => Kind::CopyFromWorker0,
            Frame::Shutdown => Kind::Shutdown,
            Frame::Lend { .. } => Kind::Lend,
            Frame::Ok { .. } => Kind::Ok,
            Frame::Err { .. } => Kind::Err,
        }
    }
}

/// A register field: never 0.
fn write_reg(s: &mut dyn Sink, reg: u32, name: impl Display) -> Result<()> {
    check_register(reg, &format_args!("`{name}`"))?;
    s.u32(reg)
}

/// A call's count of `what` (its arguments, its frees), as the `u32` that holds it.
fn count_word(count: usize, what: &str) -> Result<u32> {
    u32::try_from(count).map_err(|_| Error::value(format!("a call cannot carry {count} {what}")))
}

/// A call's count of `what` and the reserved word after it.
fn write_count(s: &mut dyn Sink, count: usize, what: &str) -> Result<()> {
    s.u32(count_word(count, what)?)?;
    s.u32(0)
}

/// A call's registers to empty, after their count: the registers, and a zero word when the
/// count is odd (nothing when there are none).
fn write_frees(s: &mut dyn Sink, frees: &[u32]) -> Result<()> {
    for (i, reg) in frees.iter().enumerate() {
        write_reg(s, *reg, format_args!("frees[{i}]"))?;
    }
    if frees.len() % 2 == 1 {
        s.u32(0)?;
    }
    Ok(())
}

/// The `None` value (an absent optional field).
fn write_none(s: &mut dyn Sink) -> Result<()> {
    s.u32(tag::NONE)?;
    s.u32(0)
}

impl<P: Packed> Frame<P> {
    /// Bytes the encoded frame takes, header included, after checking that it can be encoded
    /// (nothing is written, no tensor is read).
    ///
    /// Errors: as for [`Frame::encode`].
    pub fn encoded_len(&self) -> Result<usize> {
        let mut counter = Counter(HEADER_SIZE);
        self.write_payload(&mut counter)?;
        Ok(counter.0)
    }

    /// Appends the encoded frame to `out` and returns its length. On error `out` is left as it
    /// was.
    ///
    /// Errors: `TypeError` for a value of a type that cannot cross (a Function, a Module, an
    /// Array, a tensor on a device...), and `ValueError` for one that cannot cross as it is (a
    /// str that is not UTF-8, a strided tensor, register 0, an arena tensor whose extent
    /// overflows), each naming the field (`` `args[2]` ``); a host tensor's pending failure
    /// (the error of the work that should have written it).
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<usize> {
        let len = self.encoded_len()?;
        let start = out.len();
        out.reserve(len);
        let written = self.write(&mut VecSink { out, start }, len);
        if written.is_err() {
            out.truncate(start);
        }
        written.map(|()| len)
    }

    /// Encodes the frame to be written on a stream, in `bytes` (a buffer to reuse): the data
    /// of large host tensors is not copied but written from their memory by
    /// [`Gathered::write_to`]. The frame holds those tensors until it is dropped.
    ///
    /// Errors: as for [`Frame::encode`].
    pub fn encode_gathered(&self, bytes: Vec<u8>) -> Result<Gathered> {
        let len = self.encoded_len()?;
        let mut out = Gathered::new(bytes);
        self.write(&mut out, len)?;
        Ok(out)
    }

    /// Writes the encoded frame at the start of `out` (a ring slot) and returns its length;
    /// the bytes after it are left as they were.
    ///
    /// Errors: `ValueError` if the frame is longer than `out`; as for [`Frame::encode`].
    pub fn encode_into(&self, out: &mut [u8]) -> Result<usize> {
        let len = self.encoded_len()?;
        let room = out.len();
        let Some(slot) = out.get_mut(..len) else {
            return Err(Error::value(format!(
                "a {} frame of {len} bytes does not fit in {room} bytes",
                self.kind().name()
            )));
        };
        self.write(&mut SliceSink { out: slot, pos: 0 }, len)?;
        Ok(len)
    }

    /// Writes the frame, `len` bytes as [`Frame::encoded_len`] counted them.
    fn write(&self, s: &mut dyn Sink, len: usize) -> Result<()> {
        s.put(&MAGIC)?;
        s.put(&[VERSION_MAJOR, VERSION_MINOR])?;
        s.put(&self.kind().code().to_le_bytes())?;
        s.u64((len - HEADER_SIZE) as u64)?;
        self.write_payload(s)?;
        if s.len() != len {
            // Only a value that changed between the two passes (a caller's C string written
            // to meanwhile) gets here.
            return Err(Error::runtime(format!(
                "a {} frame changed while it was encoded ({len} bytes counted, {} written)",
                self.kind().name(),
                s.len()
            )));
        }
        Ok(())
    }

    fn write_payload(&self, s: &mut dyn Sink) -> Result<()> {
        match self {
            Frame::Call {
                call,
                frees,
                func,
                out,
                args,
            } => {
                match call {
                    Some(call) => {
                        s.u32(*call)?;
                        s.u32(count_word(frees.len(), "frees")?)?;
                    }
                    None if !frees.is_empty() => write_count(s, frees.len(), "frees")?,
                    None => {}
                }
                write_frees(s, frees)?;
                write_reg(s, *func, "func")?;
                write_reg(s, *out, "out")?;
                write_count(s, args.len(), "arguments")?;
                for (i, arg) in args.iter().enumerate() {
                    write_value(s, arg, &format_args!("`args[{i}]`"))?;
                }
                Ok(())
            }
            Frame::Store { reg, name, value } => {
                write_reg(s, *reg, "reg")?;
                s.u32(0)?;
                match name {
                    Some(name) => write_str(s, name)?,
                    None => write_none(s)?,
                }
                write_value(s, value, &"`value`")
            }
            Frame::Free { reg } => {
                write_reg(s, *reg, "reg")?;
                s.u32(0)
            }
            Frame::Sync { request } | Frame::CountLive { request } => s.u64(*request),
            Frame::Get { request, reg } | Frame::Lend { request, reg } => {
                s.u64(*request)?;
                write_reg(s, *reg, "reg")?;
                s.u32(0)
            }
            Frame::GetGlobalFunc { request, reg, name } => {
                s.u64(*request)?;
                write_reg(s, *reg, "reg")?;
                s.u32(0)?;
                write_str(s, name)
            }
            Frame::GetModuleFunc {
                request,
                reg,
                module,
                name,
            } => {
                s.u64(*request)?;
                write_reg(s, *reg, "reg")?;
                write_reg(s, *module, "module")?;
                write_str(s, name)
            }
            Frame::CopyToWorker0 {
                request,
                reg,
                source,
            } => {
                s.u64(*request)?;
                write_reg(s, *reg, "reg")?;
                s.u32(0)?;
                match source {
                    Value::Plain(p) if p.packed().type_index() != ti::TENSOR => {
                        Err(Error::type_error(format!(
                            "`source`: a copy to worker 0 takes a Tensor or an arena tensor, \
                             not a value of type {}",
                            p.packed().type_name()
                        )))
                    }
                    Value::Register(_) => Err(Error::type_error(
                        "`source`: a copy to worker 0 takes a Tensor or an arena tensor, not a \
                         register",
                    )),
                    _ => write_value(s, source, &"`source`"),
                }
            }
            Frame::CopyFromWorker0 { request, reg, into } => {
                s.u64(*request)?;
                write_reg(s, *reg, "reg")?;
                s.u32(0)?;
                match into {
                    Some(into) => value::write_arena(s, into, &"`into`"),
                    None => write_none(s),
                }
            }
            Frame::Shutdown => Ok(()),
            Frame::Ok { request, value } => {
                s.u64(*request)?;
                write_value(s, value, &"`value`")
            }
            Frame::Err { request, error } => {
                s.u64(*request)?;
                write_str(s, error.kind.name())?;
                write_str(s, &error.message)
            }
        }
    }
}

/// A register field: never 0.
fn read_reg(r: &mut Reader<'_>, name: impl Display) -> Result<u32> {
    let at = r.offset();
    let reg = r.u32(format_args!("`{name}`"))?;
    check_register(reg, &format_args!("`{name}`")).map_err(|e| r.error_at(at, e.message))?;
    Ok(reg)
}

/// The registers a `FreeCall` or `NumberedCall` frame empties: their count (in a `FreeCall`, at
/// least 1 and followed by a reserved word), the registers, and a zero word when the count is
/// odd.
fn read_frees(r: &mut Reader<'_>, kind: Kind) -> Result<Vec<u32>> {
    let at = r.offset();
    let count = r.u32("the free count")?;
    let least = match kind {
        Kind::FreeCall => {
            r.reserved("the word after the free count")?;
            1
        }
        _ => 0,
    };
    // Every register takes 4 bytes: a count the payload cannot hold is refused before
    // anything is allocated for it.
    let most = r.remaining() / 4;
    if count < least || count as usize > most {
        return Err(r.error_at(
            at,
            format_args!(
                "{count} frees declared, but a {} frees from {least} to as many as the {} \
                 bytes left hold ({most})",
                kind.name(),
                r.remaining()
            ),
        ));
    }
    let frees = (0..count)
        .map(|i| read_reg(r, format_args!("frees[{i}]")))
        .collect::<Result<Vec<_>>>()?;
    if count % 2 == 1 {
        r.reserved("the padding after the frees")?;
    }
    Ok(frees)
}

fn read_request(r: &mut Reader<'_>) -> Result<u64> {
    r.u64("the request id")
}

/// Skips the `None` value an absent optional field holds (its tag was peeked).
fn read_none(r: &mut Reader<'_>, name: &dyn Display) -> Result<()> {
    r.u32(name)?;
    r.reserved(format_args!("the second word of {name}"))
}

impl Frame {
    /// Decodes `bytes`, which must hold exactly one frame.
    ///
    /// Errors: `ValueError` naming what was wrong, where, and the offending value: a header
    /// [`Header::parse`] refuses, fewer or more bytes than the header declares, and any
    /// payload [`Frame::decode_payload`] refuses.
    pub fn decode(bytes: &[u8], limits: &Limits) -> Result<Frame> {
        let header = Header::parse(bytes, limits)?;
        Self::check_whole(&header, bytes)?;
        Self::decode_payload(&header, &bytes[HEADER_SIZE..])
    }

    /// Checks that `bytes` hold exactly the frame `header` starts.
    fn check_whole(header: &Header, bytes: &[u8]) -> Result<()> {
        let (len, kind) = (header.frame_len(), header.kind.name());
        if bytes.len() < len {
            return Err(bad_frame(format!(
                "truncated {kind} frame: its header declares {} bytes of payload, {} are there",
                header.payload_len,
                bytes.len() - HEADER_SIZE
            )));
        }
        if bytes.len() > len {
            return Err(bad_frame(format!(
                "{} bytes follow the end of a {kind} frame of {len} bytes",
                bytes.len() - len
            )));
        }
        Ok(())
    }

    /// Decodes the payload that followed `header` (as a stream reader receives a frame: the
    /// header first, then as many bytes as it declares).
    ///
    /// Errors: `ValueError` naming the field, its byte offset in the frame and the offending
    /// value: a payload of another length than the header declares; a field or value that
    /// runs past the payload; an unknown value tag; a nonzero reserved field or padding byte;
    /// register 0; a bool other than 0 or 1; a str that is not UTF-8; a tensor with more than
    /// 64 dims, a negative dim, an invalid dtype, or a byte count other than its dtype and
    /// shape give; a value of a type the field does not take; bytes left over at the end.
    pub fn decode_payload(header: &Header, payload: &[u8]) -> Result<Frame> {
        Self::decode_payload_as(header, payload, Mode::Copy)
    }

    /// [`Frame::decode`] of the frame at `range` in `block` (a frame gathered from a ring's
    /// parts, [`Frame::placement`]): a large host tensor (from 64 KiB) whose data starts on a
    /// 64-byte boundary keeps its data where it is, and the block with it, instead of a copy.
    ///
    /// Errors: as for [`Frame::decode`].
    pub fn decode_in_block(
        block: &Arc<HostBlock>,
        range: Range<usize>,
        limits: &Limits,
    ) -> Result<Frame> {
        let bytes = block.as_slice().get(range).ok_or_else(|| {
            bad_frame(format!(
                "a frame past the end of its block of {} bytes",
                block.as_slice().len()
            ))
        })?;
        let header = Header::parse(bytes, limits)?;
        Self::check_whole(&header, bytes)?;
        Self::decode_payload_as(&header, &bytes[HEADER_SIZE..], Mode::Share(block))
    }

    /// For a frame that arrives in parts, from its first part: the frame's length, and the
    /// offset of the first bytes its decoding reads past that part (the data of the large value
    /// the part ends in), which a receiver places on a 64-byte boundary so that
    /// [`Frame::decode_in_block`] can leave the data where it lands. `None` when the part is
    /// not the start of a longer frame, or ends elsewhere than in the data of a value.
    pub fn placement(first: &[u8], limits: &Limits) -> Option<(usize, usize)> {
        let header = Header::parse(first, limits).ok()?;
        let payload = &first[HEADER_SIZE..];
        if payload.len() >= header.payload_len {
            return None;
        }
        let past = Cell::new(None);
        let _ = Self::read_payload(&header, payload, Mode::Probe(&past));
        Some((header.frame_len(), past.get()?))
    }

    fn decode_payload_as(header: &Header, payload: &[u8], mode: Mode<'_>) -> Result<Frame> {
        if payload.len() != header.payload_len {
            return Err(bad_frame(format!(
                "the {} frame's header declares {} bytes of payload, but {} were given",
                header.kind.name(),
                header.payload_len,
                payload.len()
            )));
        }
        Self::read_payload(header, payload, mode)
    }

    /// Reads the payload that follows `header`, whatever its length.
    fn read_payload(header: &Header, payload: &[u8], mode: Mode<'_>) -> Result<Frame> {
        let kind = header.kind.name();
        let r = &mut Reader::new(payload, HEADER_SIZE, header.minor, kind).with_mode(mode);
        let frame = match header.kind {
            Kind::Call | Kind::FreeCall | Kind::NumberedCall => {
                let (call, frees) = match header.kind {
                    Kind::NumberedCall => {
                        let call = r.u32("the call number")?;
                        (Some(call), read_frees(r, Kind::NumberedCall)?)
                    }
                    Kind::FreeCall => (None, read_frees(r, Kind::FreeCall)?),
                    _ => (None, Vec::new()),
                };
                let func = read_reg(r, "func")?;
                let out = read_reg(r, "out")?;
                let at = r.offset();
                let argc = r.u32("the argument count")?;
                r.reserved("the word after the argument count")?;
                // Every value takes at least 8 bytes: a count the payload cannot hold is
                // refused before anything is allocated for it.
                let most = r.remaining() / 8;
                if argc as usize > most {
                    return Err(r.error_at(
                        at,
                        format_args!(
                            "{argc} arguments declared, but the {} bytes left hold at most \
                             {most}",
                            r.remaining()
                        ),
                    ));
                }
                let args = (0..argc)
                    .map(|i| read_value(r, &format_args!("`args[{i}]`")))
                    .collect::<Result<_>>()?;
                Frame::Call {
                    call,
                    frees,
                    func,
                    out,
                    args,
                }
            }
            Kind::Store => {
                let reg = read_reg(r, "reg")?;
                r.reserved("the word after `reg`")?;
                let name = match peek_tag(r, &"`name`")? {
                    tag::NONE => {
                        read_none(r, &"`name`")?;
                        None
                    }
                    tag::STR => Some(read_str(r, &"`name`")?.into()),
                    other => {
                        return Err(wrong_tag(r, &"`name`", other, "a Str (65) or None (0)"));
                    }
                };
                let value = read_value(r, &"`value`")?;
                Frame::Store { reg, name, value }
            }
            Kind::Free => {
                let reg = read_reg(r, "reg")?;
                r.reserved("the word after `reg`")?;
                Frame::Free { reg }
            }
            Kind::Sync => Frame::Sync {
                request: read_request(r)?,
            },
            Kind::Get => {
                let request = read_request(r)?;
                let reg = read_reg(r, "reg")?;
                r.reserved("the word after `reg`")?;
                Frame::Get { request, reg }
            }
            Kind::Lend => {
                let request = read_request(r)?;
                let reg = read_reg(r, "reg")?;
                r.reserved("the word after `reg`")?;
                Frame::Lend { request, reg }
            }
            Kind::CountLive => Frame::CountLive {
                request: read_request(r)?,
            },
            Kind::GetGlobalFunc => {
                let request = read_request(r)?;
                let reg = read_reg(r, "reg")?;
                r.reserved("the word after `reg`")?;
                let name = read_str(r, &"`name`")?.into();
                Frame::GetGlobalFunc { request, reg, name }
            }
            Kind::GetModuleFunc => {
                let request = read_request(r)?;
                let reg = read_reg(r, "reg")?;
                let module = read_reg(r, "module")?;
                let name = read_str(r, &"`name`")?.into();
                Frame::GetModuleFunc {
                    request,
                    reg,
                    module,
                    name,
                }
            }
            Kind::CopyToWorker0 => {
                let request = read_request(r)?;
                let reg = read_reg(r, "reg")?;
                r.reserved("the word after `reg`")?;
                let source = match peek_tag(r, &"`source`")? {
                    tag::TENSOR | tag::ARENA_TENSOR => read_value(r, &"`source`")?,
                    other => {
                        return Err(wrong_tag(
                            r,
                            &"`source`",
                            other,
                            "a Tensor (70) or an ArenaTensor (257)",
                        ));
                    }
                };
                Frame::CopyToWorker0 {
                    request,
                    reg,
                    source,
                }
            }
            Kind::CopyFromWorker0 => {
                let request = read_request(r)?;
                let reg = read_reg(r, "reg")?;
                r.reserved("the word after `reg`")?;
                let into = match peek_tag(r, &"`into`")? {
                    tag::NONE => {
                        read_none(r, &"`into`")?;
                        None
                    }
                    tag::ARENA_TENSOR => Some(value::read_arena_value(r, &"`into`")?),
                    other => {
                        return Err(wrong_tag(
                            r,
                            &"`into`",
                            other,
                            "an ArenaTensor (257) or None (0)",
                        ));
                    }
                };
                Frame::CopyFromWorker0 { request, reg, into }
            }
            Kind::Shutdown => Frame::Shutdown,
            Kind::Ok => {
                let request = read_request(r)?;
                let value = read_value(r, &"`value`")?;
                Frame::Ok { request, value }
            }
            Kind::Err => {
                let request = read_request(r)?;
                let kind = ErrorKind::from_name(read_str(r, &"`kind`")?);
                let message = read_str(r, &"`message`")?.to_string();
                Frame::Err {
                    request,
                    error: Error::new(kind, message),
                }
            }
        };
        r.finish(format_args!("the {kind} frame"))?;
        Ok(frame)
    }
}
