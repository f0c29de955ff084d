//! Values as they cross: an 8-byte head (a tag and a word whose meaning the tag gives), then
//! the payload the tag calls for, padded to a multiple of 8 bytes.

use std::fmt::Display;
use std::ops::Range;
use std::ptr::NonNull;

use super::Packed;
use super::buffer::{Reader, Sink};
use crate::abi::{DLDataType, DLDevice, KDL_CPU, type_index as ti};
use crate::object::tensor::{HOST_ALIGNMENT, MAX_NDIM, Release, check_new, dtype_name};
use crate::object::{Any, AnyView, Bytes, Error, Result, Shape, Str, Tensor};

/// Value tags: tvm-ffi's type index where the type has one (a string is 65 whether it is
/// small or not: the wire has one form per type), 256 and up for what only the wire has.
pub mod tag {
    pub const NONE: u32 = 0;
    pub const INT: u32 = 1;
    pub const BOOL: u32 = 2;
    pub const FLOAT: u32 = 3;
    pub const DATA_TYPE: u32 = 5;
    pub const DEVICE: u32 = 6;
    pub const STR: u32 = 65;
    pub const BYTES: u32 = 66;
    pub const SHAPE: u32 = 69;
    /// A tensor copied: dtype, shape and its compact bytes.
    pub const TENSOR: u32 = 70;
    /// A DRef: its register.
    pub const REGISTER: u32 = 256;
    /// A tensor in the session's shared-memory arena, by reference.
    pub const ARENA_TENSOR: u32 = 257;

    /// Every tag, with the name `WIRE.md` gives it.
    pub const ALL: [(u32, &str); 12] = [
        (NONE, "None"),
        (INT, "Int"),
        (BOOL, "Bool"),
        (FLOAT, "Float"),
        (DATA_TYPE, "DataType"),
        (DEVICE, "Device"),
        (STR, "Str"),
        (BYTES, "Bytes"),
        (SHAPE, "Shape"),
        (TENSOR, "Tensor"),
        (REGISTER, "Register"),
        (ARENA_TENSOR, "ArenaTensor"),
    ];
}

/// A value as it crosses. `P` is the packed form the encoder reads plain values from: an owned
/// [`Any`] (what decoding gives) or a borrowed [`AnyView`].
#[derive(Clone, Debug)]
pub enum Value<P = Any> {
    /// A value that crosses as itself: None, bool, int, float, str, bytes, Shape, DataType,
    /// Device, or a host tensor, copied (decoded as a new host tensor). Any other type is a
    /// `TypeError` when encoded.
    Plain(P),
    /// A DRef, as the register that holds its value on each worker (never 0).
    Register(u32),
    /// A tensor in the session's shared-memory arena, passed by reference.
    Arena(ArenaTensor),
}

/// Where a tensor lies in the session's shared-memory arena, which the controller and the
/// session's workers all map: a compact row-major tensor of `dtype` and `shape` whose first
/// element is `offset + byte_offset` bytes from the start of arena segment `segment`, on the
/// host (`kDLCPU`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArenaTensor {
    /// Which segment of the arena (an arena that grows maps more segments; 0 is the first).
    pub segment: u32,
    /// Where the tensor's allocation starts in the segment, in bytes.
    pub offset: u64,
    /// DLTensor's `byte_offset`: where the first element is, in bytes from `offset`.
    pub byte_offset: u64,
    pub dtype: DLDataType,
    pub shape: Vec<i64>,
}

impl ArenaTensor {
    /// The bytes of the segment the elements occupy.
    ///
    /// Errors: `ValueError` for an invalid dtype, more than 64 dims, a negative dim, a size
    /// that cannot be addressed, or an end past 2^64 - 1.
    pub fn span(&self) -> Result<Range<u64>> {
        let nbytes = check_new(&self.shape, self.dtype)?;
        self.offset
            .checked_add(self.byte_offset)
            .and_then(|start| Some(start..start.checked_add(nbytes as u64)?))
            .ok_or_else(|| {
                Error::value(format!(
                    "an arena tensor at offset {} + byte_offset {} with {nbytes} bytes ends past \
                     2^64 - 1",
                    self.offset, self.byte_offset
                ))
            })
    }
}

/// The head of every value: its tag and a word whose meaning the tag gives (0 if none).
fn head(s: &mut dyn Sink, tag: u32, word: u32) -> Result<()> {
    s.u32(tag)?;
    s.u32(word)
}

/// A dtype as one word: its four bytes as they lie in memory (code, bits, lanes).
fn dtype_word(dtype: DLDataType) -> u32 {
    u32::from(dtype.code) | (u32::from(dtype.bits) << 8) | (u32::from(dtype.lanes) << 16)
}

fn dtype_of_word(word: u32) -> DLDataType {
    let [code, bits, lanes @ ..] = word.to_le_bytes();
    DLDataType::new(code, bits, u16::from_le_bytes(lanes))
}

/// Writes `value`; errors name it `name` (`` `args[2]` ``).
pub(super) fn write_value<P: Packed>(
    s: &mut dyn Sink,
    value: &Value<P>,
    name: &dyn Display,
) -> Result<()> {
    match value {
        Value::Plain(p) => write_plain(s, &p.packed(), name),
        Value::Register(reg) => {
            check_register(*reg, name)?;
            head(s, tag::REGISTER, *reg)
        }
        Value::Arena(tensor) => write_arena(s, tensor, name),
    }
}

/// Register 0 is reserved: no DRef holds it.
pub(super) fn check_register(reg: u32, name: &dyn Display) -> Result<()> {
    if reg == 0 {
        return Err(Error::value(format!(
            "{name}: register 0 is reserved (no DRef holds it)"
        )));
    }
    Ok(())
}

fn cannot_cross(v: &AnyView<'_>, name: &dyn Display) -> Error {
    let hint = match v.type_index() {
        ti::FUNCTION | ti::MODULE => {
            "; a function reaches the workers as a DRef (from get_global_func, or from a \
             module loaded on every worker)"
        }
        ti::OPAQUE_PTR => "; an address means nothing in another process",
        ti::DL_TENSOR_PTR => "; pass a Tensor object (a borrowed DLTensor* is not kept)",
        _ => "",
    };
    Error::type_error(format!(
        "{name}: a {} cannot cross to another process (what crosses: None, bool, int, float, \
         str, bytes, Shape, DataType, Device, DRef and host tensors){hint}",
        v.type_name()
    ))
}

fn write_plain(s: &mut dyn Sink, v: &AnyView<'_>, name: &dyn Display) -> Result<()> {
    let named = |e: Error| e.context(name);
    match v.type_index() {
        ti::NONE => head(s, tag::NONE, 0),
        ti::INT => {
            head(s, tag::INT, 0)?;
            s.i64(v.as_i64().map_err(named)?)
        }
        ti::BOOL => head(s, tag::BOOL, u32::from(v.as_bool().map_err(named)?)),
        ti::FLOAT => {
            head(s, tag::FLOAT, 0)?;
            s.u64(v.as_f64().map_err(named)?.to_bits())
        }
        ti::DATA_TYPE => head(s, tag::DATA_TYPE, dtype_word(v.as_dtype().map_err(named)?)),
        ti::DEVICE => {
            let device = v.as_device().map_err(named)?;
            head(s, tag::DEVICE, 0)?;
            s.i32(device.device_type)?;
            s.i32(device.device_id)
        }
        ti::RAW_STR | ti::SMALL_STR | ti::STR => {
            let bytes = v.as_str_bytes().map_err(named)?;
            let text = std::str::from_utf8(bytes).map_err(|e| {
                Error::value(format!(
                    "{name}: a str that is not valid UTF-8 cannot cross to another process ({e})"
                ))
            })?;
            write_str(s, text)
        }
        ti::BYTE_ARRAY_PTR | ti::SMALL_BYTES | ti::BYTES => {
            write_bytes(s, tag::BYTES, v.as_bytes().map_err(named)?)
        }
        ti::SHAPE => {
            let shape = v.as_shape().map_err(named)?;
            let dims = shape.as_slice();
            let ndim = u32::try_from(dims.len()).map_err(|_| {
                Error::value(format!(
                    "{name}: a Shape of {} dims is too long to cross",
                    dims.len()
                ))
            })?;
            head(s, tag::SHAPE, ndim)?;
            dims.iter().try_for_each(|&dim| s.i64(dim))
        }
        ti::TENSOR => write_tensor(s, &v.as_tensor().map_err(named)?, name),
        _ => Err(cannot_cross(v, name)),
    }
}

/// A string as a `Str` value (also the form of the wire's own text fields).
pub(super) fn write_str(s: &mut dyn Sink, text: &str) -> Result<()> {
    write_bytes(s, tag::STR, text.as_bytes())
}

fn write_bytes(s: &mut dyn Sink, tag: u32, bytes: &[u8]) -> Result<()> {
    head(s, tag, 0)?;
    s.u64(bytes.len() as u64)?;
    s.put(bytes)?;
    s.pad()
}

fn write_tensor(s: &mut dyn Sink, tensor: &Tensor, name: &dyn Display) -> Result<()> {
    let dl = tensor.dl();
    if dl.device.device_type != KDL_CPU {
        return Err(Error::type_error(format!(
            "{name}: a tensor on device type {} (id {}) cannot cross to another process; copy \
             it to the host first, or keep it on the workers and pass its DRef",
            dl.device.device_type, dl.device.device_id
        )));
    }
    if !tensor.is_contiguous() {
        return Err(Error::value(format!(
            "{name}: a strided tensor cannot cross to another process; make a compact copy \
             first"
        )));
    }
    let shape = tensor.shape();
    let nbytes = check_new(shape, dl.dtype).map_err(|e| e.context(name))?;
    head(s, tag::TENSOR, dtype_word(dl.dtype))?;
    s.u32(shape.len() as u32)?;
    s.u32(0)?;
    shape.iter().try_for_each(|&dim| s.i64(dim))?;
    s.u64(nbytes as u64)?;
    s.tensor(tensor, nbytes, name)?;
    s.pad()
}

pub(super) fn write_arena(
    s: &mut dyn Sink,
    tensor: &ArenaTensor,
    name: &dyn Display,
) -> Result<()> {
    tensor.span().map_err(|e| e.context(name))?;
    head(s, tag::ARENA_TENSOR, dtype_word(tensor.dtype))?;
    s.u32(tensor.shape.len() as u32)?;
    s.u32(tensor.segment)?;
    s.u64(tensor.offset)?;
    s.u64(tensor.byte_offset)?;
    tensor.shape.iter().try_for_each(|&dim| s.i64(dim))
}

/// The tag of the value that starts here, not consumed.
pub(super) fn peek_tag(r: &Reader<'_>, name: &dyn Display) -> Result<u32> {
    r.peek_u32(format_args!("{name} (its tag)"))
}

/// The error for a value of a tag a field does not take.
pub(super) fn wrong_tag(r: &Reader<'_>, name: &dyn Display, found: u32, expected: &str) -> Error {
    let found_name = tag::ALL
        .iter()
        .find(|(t, _)| *t == found)
        .map_or("an unknown tag", |(_, n)| n);
    r.error_at(
        r.offset(),
        format_args!("{name} must be {expected}, not tag {found} ({found_name})"),
    )
}

/// Reads a value; errors name it `name`.
pub(super) fn read_value(r: &mut Reader<'_>, name: &dyn Display) -> Result<Value> {
    let at = r.offset();
    let tag = r.u32(format_args!("{name} (its tag)"))?;
    let word = r.u32(format_args!("{name} (its head)"))?;
    let no_word =
        |r: &Reader<'_>| r.check_reserved(at + 4, word, format_args!("the second word of {name}"));
    let plain = |any: Any| Ok(Value::Plain(any));
    match tag {
        tag::NONE => {
            no_word(r)?;
            plain(Any::None)
        }
        tag::INT => {
            no_word(r)?;
            plain(Any::Int(r.i64(name)?))
        }
        tag::BOOL => match word {
            0 | 1 => plain(Any::Bool(word == 1)),
            other => Err(r.error_at(
                at + 4,
                format_args!("{name} is a bool of value {other}, not 0 or 1"),
            )),
        },
        tag::FLOAT => {
            no_word(r)?;
            plain(Any::Float(f64::from_bits(r.u64(name)?)))
        }
        tag::DATA_TYPE => plain(Any::DataType(dtype_of_word(word))),
        tag::DEVICE => {
            no_word(r)?;
            let device_type = r.i32(format_args!("the device type of {name}"))?;
            let device_id = r.i32(format_args!("the device id of {name}"))?;
            plain(Any::Device(DLDevice {
                device_type,
                device_id,
            }))
        }
        tag::STR => {
            no_word(r)?;
            plain(Any::Str(Str::from(read_text(r, name)?)))
        }
        tag::BYTES => {
            no_word(r)?;
            plain(Any::Bytes(Bytes::new(read_bytes(r, name)?)))
        }
        tag::SHAPE => plain(Shape::new(&read_dims(r, word, name)?).into()),
        tag::TENSOR => read_tensor(r, at, word, name),
        tag::REGISTER => {
            check_register(word, name).map_err(|e| r.error_at(at + 4, e.message))?;
            Ok(Value::Register(word))
        }
        tag::ARENA_TENSOR => read_arena(r, at, word, name).map(Value::Arena),
        other => Err(r.error_at(
            at,
            format_args!(
                "{name} has an unknown value tag {other} (in a version {}.{} frame; this \
                 reader knows the tags of version {}.{})",
                super::VERSION_MAJOR,
                r.minor,
                super::VERSION_MAJOR,
                super::VERSION_MINOR
            ),
        )),
    }
}

/// Reads a `Str` value (the wire's own text fields).
pub(super) fn read_str<'a>(r: &mut Reader<'a>, name: &dyn Display) -> Result<&'a str> {
    let found = peek_tag(r, name)?;
    if found != tag::STR {
        return Err(wrong_tag(r, name, found, "a Str (65)"));
    }
    r.u32(name)?;
    r.reserved(format_args!("the second word of {name}"))?;
    read_text(r, name)
}

/// A length, that many bytes, and the padding after them.
fn read_bytes<'a>(r: &mut Reader<'a>, name: &dyn Display) -> Result<&'a [u8]> {
    let len = r.u64(format_args!("the length of {name}"))?;
    let bytes = r.bytes(len, name)?;
    r.padding(name)?;
    Ok(bytes)
}

fn read_text<'a>(r: &mut Reader<'a>, name: &dyn Display) -> Result<&'a str> {
    let at = r.offset() + 8;
    let bytes = read_bytes(r, name)?;
    std::str::from_utf8(bytes).map_err(|e| {
        r.error_at(
            at,
            format_args!(
                "{name} is a str of {} bytes that is not valid UTF-8 ({e})",
                bytes.len()
            ),
        )
    })
}

/// `ndim` dims, after checking that they are all there (so nothing larger than the payload is
/// allocated).
fn read_dims(r: &mut Reader<'_>, ndim: u32, name: &dyn Display) -> Result<Vec<i64>> {
    let bytes = r.bytes(
        u64::from(ndim) * 8,
        format_args!("the {ndim} dims of {name}"),
    )?;
    Ok(bytes
        .chunks_exact(8)
        .map(|dim| i64::from_le_bytes(dim.try_into().expect("8 bytes")))
        .collect())
}

/// A tensor's dim count, checked before its dims are read.
fn read_ndim(r: &mut Reader<'_>, name: &dyn Display) -> Result<u32> {
    let at = r.offset();
    let ndim = r.u32(format_args!("the ndim of {name}"))?;
    if ndim > MAX_NDIM as u32 {
        return Err(r.error_at(
            at,
            format_args!("{name} is a tensor of {ndim} dims (at most {MAX_NDIM})"),
        ));
    }
    Ok(ndim)
}

/// A tensor decoded from a frame in a block ([`Frame::decode_in_block`](super::Frame::decode_in_block)) keeps its data
/// there from this many bytes on (when it is 64-byte aligned).
const SHARED_FROM: usize = 64 << 10;

fn read_tensor(r: &mut Reader<'_>, at: usize, word: u32, name: &dyn Display) -> Result<Value> {
    let dtype = dtype_of_word(word);
    let ndim = read_ndim(r, name)?;
    r.reserved(format_args!("the reserved word of {name}"))?;
    let dims = read_dims(r, ndim, name)?;
    let expected = check_new(&dims, dtype)
        .map_err(|e| r.error_at(at, format_args!("{name}: {}", e.message)))?;
    let nbytes_at = r.offset();
    let nbytes = r.u64(format_args!("the byte count of {name}"))?;
    if nbytes != expected as u64 {
        return Err(r.error_at(
            nbytes_at,
            format_args!(
                "{name} carries {nbytes} bytes, but a tensor of shape {dims:?} and dtype {} \
                 holds {expected}",
                dtype_name(dtype)
            ),
        ));
    }
    let data = r.bytes(nbytes, format_args!("the data of {name}"))?;
    r.padding(name)?;
    let tensor = match r.block() {
        Some(block) if data.len() >= SHARED_FROM && data.as_ptr().addr() % HOST_ALIGNMENT == 0 => {
            let at = data.as_ptr().addr() - block.as_ptr().addr();
            // The block's own pointer: the tensor may write where it points.
            let start = NonNull::new(block.as_ptr().wrapping_add(at)).expect("in the block");
            let keep = block.clone();
            let release: Release = Box::new(move || drop(keep));
            // SAFETY: `data.len()` bytes of the block (its checked byte count), which the
            // tensor keeps alive; nothing else uses them once the frame is decoded.
            unsafe { Tensor::from_memory(&dims, dtype, DLDevice::cpu(), start, release) }
        }
        _ => Tensor::copy_of(&dims, dtype, data).map_err(|e| e.context(name))?,
    };
    Ok(Value::Plain(tensor.into()))
}

/// Reads an `ArenaTensor` value (its tag was peeked).
pub(super) fn read_arena_value(r: &mut Reader<'_>, name: &dyn Display) -> Result<ArenaTensor> {
    let at = r.offset();
    r.u32(format_args!("{name} (its tag)"))?;
    let word = r.u32(format_args!("{name} (its head)"))?;
    read_arena(r, at, word, name)
}

fn read_arena(r: &mut Reader<'_>, at: usize, word: u32, name: &dyn Display) -> Result<ArenaTensor> {
    let ndim = read_ndim(r, name)?;
    let segment = r.u32(format_args!("the segment of {name}"))?;
    let offset = r.u64(format_args!("the offset of {name}"))?;
    let byte_offset = r.u64(format_args!("the byte offset of {name}"))?;
    let tensor = ArenaTensor {
        segment,
        offset,
        byte_offset,
        dtype: dtype_of_word(word),
        shape: read_dims(r, ndim, name)?,
    };
    tensor
        .span()
        .map_err(|e| r.error_at(at, format_args!("{name}: {}", e.message)))?;
    Ok(tensor)
}
