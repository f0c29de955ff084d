//! Round trips of every value and frame kind; every refusal of the writer and of the reader,
//! with its kind and message; random frames and random or damaged bytes (proptest); the
//! committed fuzz corpus; and `WIRE.md`, against the code.

use std::fs;
use std::path::Path;
use std::ptr::{NonNull, null_mut};
use std::sync::Arc;

use proptest::collection::vec;
use proptest::prelude::*;

use super::*;
use crate::abi::{
    DLDataType, DLDevice, DLManagedTensorVersioned, DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION,
    DLPackVersion, DLTensor, KDL_BOOL, KDL_FLOAT, KDL_INT,
};
use crate::object::tensor::compact_nbytes;
use crate::object::{Array, Bytes, ErrorKind, Function, HostBlock, Shape, Str, Tensor};

const F32: DLDataType = DLDataType::new(KDL_FLOAT, 32, 1);
const F64: DLDataType = DLDataType::new(KDL_FLOAT, 64, 1);
const I8: DLDataType = DLDataType::new(KDL_INT, 8, 1);
const I4: DLDataType = DLDataType::new(KDL_INT, 4, 1);
const BOOL: DLDataType = DLDataType::new(KDL_BOOL, 8, 1);
const F16X4: DLDataType = DLDataType::new(KDL_FLOAT, 16, 4);

fn encode<P: Packed>(frame: &Frame<P>) -> Vec<u8> {
    let mut out = Vec::new();
    let len = frame.encode(&mut out).unwrap();
    assert_eq!(len, out.len());
    out
}

fn decode(bytes: &[u8]) -> Result<Frame> {
    Frame::decode(bytes, &Limits::default())
}

/// Encodes `frame` every way (a vector, a slot, the counted length), decodes it, and checks
/// that the result encodes to the same bytes.
fn round_trip(frame: &Frame) -> Frame {
    let bytes = encode(frame);
    assert_eq!(frame.encoded_len().unwrap(), bytes.len());
    assert_eq!(bytes.len() % ALIGN, 0);
    let mut slot = vec![0xaa; bytes.len() + 5];
    assert_eq!(frame.encode_into(&mut slot).unwrap(), bytes.len());
    assert_eq!(&slot[..bytes.len()], &bytes[..]);
    assert!(slot[bytes.len()..].iter().all(|&b| b == 0xaa));
    let back = decode(&bytes).unwrap();
    assert_eq!(back.kind(), frame.kind());
    assert_eq!(encode(&back), bytes);
    back
}

/// The value an `Ok` reply carries, after a round trip.
fn value_round_trip(value: Value) -> Value {
    match round_trip(&Frame::Ok { request: 9, value }) {
        Frame::Ok { request: 9, value } => value,
        other => panic!("{other:?}"),
    }
}

fn plain(value: Value) -> Any {
    match value {
        Value::Plain(any) => any,
        other => panic!("expected a plain value, got {other:?}"),
    }
}

fn host_tensor(dims: &[i64], dtype: DLDataType, data: &[u8]) -> Tensor {
    let tensor = Tensor::empty(dims, dtype, DLDevice::cpu()).unwrap();
    crate::vm::write(&tensor, data).unwrap();
    tensor
}

fn tensor_bytes(tensor: &Tensor) -> Vec<u8> {
    let mut data = vec![0; tensor.nbytes()];
    crate::vm::read(tensor, &mut data).unwrap();
    data
}

/// A float32 tensor another library made, as DLPack describes it: on `device`, with `strides`
/// (compact if `None`), over 256 bytes of host memory. Leaked, with everything it points at.
fn described_tensor(device: DLDevice, shape: &[i64], strides: Option<&[i64]>) -> Tensor {
    let shape = Box::leak(shape.to_vec().into_boxed_slice());
    let strides = strides.map(|s| Box::leak(s.to_vec().into_boxed_slice()));
    let data = Box::leak(vec![0u8; 256].into_boxed_slice());
    let managed = Box::leak(Box::new(DLManagedTensorVersioned {
        version: DLPackVersion {
            major: DLPACK_MAJOR_VERSION,
            minor: DLPACK_MINOR_VERSION,
        },
        manager_ctx: null_mut(),
        deleter: None,
        flags: 0,
        dl_tensor: DLTensor {
            data: data.as_mut_ptr().cast(),
            device,
            ndim: shape.len() as i32,
            dtype: F32,
            shape: shape.as_mut_ptr(),
            strides: strides.map_or(null_mut(), |s| s.as_mut_ptr()),
            byte_offset: 0,
        },
    }));
    // SAFETY: the description and all it points at are leaked, so they outlive the tensor;
    // without a deleter, nothing is released.
    unsafe { Tensor::from_dlpack(NonNull::from(managed)) }.unwrap()
}

fn arena(shape: &[i64]) -> ArenaTensor {
    ArenaTensor {
        segment: 0,
        offset: 4096,
        byte_offset: 0,
        dtype: F32,
        shape: shape.to_vec(),
    }
}

/// One value of every tag.
fn every_value() -> Vec<Value> {
    vec![
        Value::Plain(Any::None),
        Value::Plain(Any::Bool(true)),
        Value::Plain(Any::Int(-5)),
        Value::Plain(Any::Float(2.5)),
        Value::Plain(Any::DataType(F32)),
        Value::Plain(Any::Device(DLDevice::cpu())),
        Value::Plain(Any::from("hi")),
        Value::Plain(Any::from("a string longer than eight bytes")),
        Value::Plain(Any::Bytes(Bytes::new(&[0, 0xff, 7]))),
        Value::Plain(Shape::new(&[2, -1]).into()),
        Value::Plain(host_tensor(&[3], I8, &[1, 2, 3]).into()),
        Value::Register(12),
        Value::Arena(arena(&[2, 3])),
    ]
}

/// Frames of every kind, as the committed fuzz corpus holds them.
fn samples() -> Vec<(&'static str, Frame)> {
    let tensor = host_tensor(&[2, 3], F32, &(0..24).collect::<Vec<u8>>());
    vec![
        (
            "call-no-args",
            Frame::Call {
                call: None,
                frees: vec![],
                func: 1,
                out: 2,
                args: vec![],
            },
        ),
        (
            "call-every-value",
            Frame::Call {
                call: None,
                frees: vec![],
                func: 3,
                out: 4,
                args: every_value(),
            },
        ),
        (
            "store-named",
            Frame::Store {
                reg: 5,
                name: Some("runtime.disco.worker_id".into()),
                value: Value::Plain(Any::Int(1)),
            },
        ),
        (
            "store-unnamed",
            Frame::Store {
                reg: 6,
                name: None,
                value: Value::Plain(Any::from("a stored string")),
            },
        ),
        ("free", Frame::Free { reg: 7 }),
        (
            "free-call",
            Frame::Call {
                call: None,
                frees: vec![7, 8, 9],
                func: 1,
                out: 2,
                args: vec![Value::Register(8)],
            },
        ),
        (
            "numbered-call",
            Frame::Call {
                call: Some(1),
                frees: vec![],
                func: 1,
                out: 2,
                args: vec![],
            },
        ),
        (
            "numbered-call-one-free",
            Frame::Call {
                call: Some(7),
                frees: vec![9],
                func: 3,
                out: 4,
                args: vec![Value::Plain(Any::Int(5)), Value::Register(3)],
            },
        ),
        (
            "numbered-call-frees",
            Frame::Call {
                call: Some(u32::MAX),
                frees: vec![7, 8],
                func: 1,
                out: 2,
                args: vec![
                    Value::Plain(Any::from("hi")),
                    Value::Plain(tensor.clone().into()),
                ],
            },
        ),
        ("sync", Frame::Sync { request: 1 }),
        ("get", Frame::Get { request: 2, reg: 4 }),
        ("lend", Frame::Lend { request: 9, reg: 4 }),
        (
            "ok-lent",
            Frame::Ok {
                request: 9,
                value: Value::Arena(arena(&[2, 3])),
            },
        ),
        ("count-live", Frame::CountLive { request: 3 }),
        (
            "get-global-func",
            Frame::GetGlobalFunc {
                request: 4,
                reg: 8,
                name: "runtime.disco.worker_id".into(),
            },
        ),
        (
            "get-module-func",
            Frame::GetModuleFunc {
                request: 10,
                reg: 11,
                module: 5,
                name: "current_worker_id".into(),
            },
        ),
        (
            "copy-to-worker0-host",
            Frame::CopyToWorker0 {
                request: 5,
                reg: 9,
                source: Value::Plain(tensor.clone().into()),
            },
        ),
        (
            "copy-to-worker0-arena",
            Frame::CopyToWorker0 {
                request: 6,
                reg: 9,
                source: Value::Arena(arena(&[2, 3])),
            },
        ),
        (
            "copy-from-worker0-reply",
            Frame::CopyFromWorker0 {
                request: 7,
                reg: 9,
                into: None,
            },
        ),
        (
            "copy-from-worker0-arena",
            Frame::CopyFromWorker0 {
                request: 8,
                reg: 9,
                into: Some(arena(&[2, 3])),
            },
        ),
        ("shutdown", Frame::Shutdown),
        (
            "ok-none",
            Frame::Ok {
                request: 1,
                value: Value::Plain(Any::None),
            },
        ),
        (
            "ok-tensor",
            Frame::Ok {
                request: 7,
                value: Value::Plain(tensor.into()),
            },
        ),
        (
            "err",
            Frame::Err {
                request: 2,
                error: Error::new(
                    ErrorKind::Worker,
                    "worker 1: `f` failed: ValueError: bad value",
                ),
            },
        ),
    ]
}

// ---- Values ----

#[test]
fn scalars_round_trip_bit_for_bit() {
    assert!(matches!(
        plain(value_round_trip(Value::Plain(Any::None))),
        Any::None
    ));
    for b in [false, true] {
        let back = plain(value_round_trip(Value::Plain(Any::Bool(b))));
        assert!(matches!(back, Any::Bool(x) if x == b));
    }
    for i in [0, 1, -1, i64::MIN, i64::MAX] {
        let back = plain(value_round_trip(Value::Plain(Any::Int(i))));
        assert!(matches!(back, Any::Int(x) if x == i));
    }
    let nan = f64::from_bits(0x7ff8_dead_beef_0001);
    for f in [0.0, -0.0, 1.5, f64::INFINITY, f64::MIN_POSITIVE, nan] {
        let Any::Float(back) = plain(value_round_trip(Value::Plain(Any::Float(f)))) else {
            panic!("expected a float")
        };
        assert_eq!(back.to_bits(), f.to_bits());
    }
    // A DataType value is its four bytes, whatever they are.
    for dtype in [F32, F16X4, DLDataType::new(255, 0, u16::MAX)] {
        let back = plain(value_round_trip(Value::Plain(Any::DataType(dtype))));
        assert!(matches!(back, Any::DataType(d) if d == dtype));
    }
    let device = DLDevice {
        device_type: -1,
        device_id: i32::MAX,
    };
    let back = plain(value_round_trip(Value::Plain(Any::Device(device))));
    assert!(matches!(back, Any::Device(d) if d == device));
}

#[test]
fn strings_bytes_and_shapes_round_trip() {
    for text in [
        "",
        "hi",
        "exactly8",
        "with a\0nul",
        "üñíçødé, and longer than a word",
    ] {
        let back = plain(value_round_trip(Value::Plain(Any::from(text))));
        assert!(
            matches!(&back, Any::Str(s) if s.as_bytes() == text.as_bytes()),
            "{back:?}"
        );
    }
    let long: Vec<u8> = (0..=255).collect();
    for bytes in [&[][..], &[0xff, 0], &long] {
        let back = plain(value_round_trip(Value::Plain(Any::Bytes(Bytes::new(
            bytes,
        )))));
        assert!(
            matches!(&back, Any::Bytes(b) if b.as_bytes() == bytes),
            "{back:?}"
        );
    }
    // Shape values are tuples of int64, negative ones included.
    for dims in [&[][..], &[2, 3], &[-1, i64::MIN, i64::MAX]] {
        let back = plain(value_round_trip(Value::Plain(Shape::new(dims).into())));
        assert_eq!(back.view().as_shape().unwrap().as_slice(), dims);
    }
}

#[test]
fn tensors_cross_as_new_host_tensors_with_the_same_bytes() {
    let cases: [(&[i64], DLDataType); 7] = [
        (&[2, 3], F32),
        (&[], I8),
        (&[3], I4),
        (&[0, 5], F32),
        (&[2], F16X4),
        (&[5], BOOL),
        (&[1, 1, 2], F64),
    ];
    for (dims, dtype) in cases {
        let nbytes = compact_nbytes(dims, dtype).unwrap();
        let data: Vec<u8> = (0..nbytes).map(|i| (i * 7 + 1) as u8).collect();
        let tensor = host_tensor(dims, dtype, &data);
        let back = plain(value_round_trip(Value::Plain(tensor.clone().into())));
        let back = back.view().as_tensor().unwrap();
        assert!(!back.same(&tensor), "a copy, not the same tensor");
        assert_eq!(back.shape(), dims);
        assert_eq!(back.dl().dtype, dtype);
        assert_eq!(back.dl().device, DLDevice::cpu());
        assert!(back.is_contiguous());
        assert_eq!(tensor_bytes(&back), data, "{dims:?}");
    }
}

#[test]
fn tensor_data_is_8_byte_aligned_in_the_frame() {
    let tensor = host_tensor(&[3], I8, &[1, 2, 3]);
    for args in [
        vec![Value::Plain(tensor.clone().into())],
        vec![
            Value::Plain(Any::from("abc")),
            Value::Plain(tensor.clone().into()),
        ],
    ] {
        let bytes = encode(&Frame::Call {
            call: None,
            frees: vec![],
            func: 1,
            out: 2,
            args,
        });
        // The data is the last thing in the frame but its padding: [1, 2, 3, 0, 0, 0, 0, 0].
        let at = bytes.len() - 8;
        assert_eq!(at % ALIGN, 0);
        assert_eq!(&bytes[at..], &[1, 2, 3, 0, 0, 0, 0, 0]);
    }
}

#[test]
fn a_gathered_frame_writes_the_bytes_of_the_encoding_with_large_tensors_from_their_memory() {
    // Large tensors (from 64 KiB) stay in their memory; small ones are copied as always.
    let large = |n: usize, seed: usize| {
        let data: Vec<u8> = (0..n).map(|i| (i * 31 + seed) as u8).collect();
        host_tensor(&[n as i64], I8, &data)
    };
    let (first, second) = (large((64 << 10) + 3, 1), large(100_000, 2));
    let frame = Frame::Call {
        call: None,
        frees: vec![],
        func: 1,
        out: 2,
        args: vec![
            Value::Plain(host_tensor(&[3], I8, &[1, 2, 3]).into()),
            Value::Plain(first.clone().into()),
            Value::Plain(Any::from("between")),
            Value::Plain(second.clone().into()),
            Value::Plain(Any::Int(7)),
        ],
    };
    let bytes = encode(&frame);
    let gathered = frame.encode_gathered(Vec::new()).unwrap();
    assert_eq!(gathered.frame_len(), bytes.len());
    let mut written = Vec::new();
    gathered.write_to(&mut written).unwrap();
    assert!(written == bytes, "the same bytes as the encoding");
    // The tensors' own memory was not copied into the frame's bytes.
    assert!(gathered.into_bytes().len() < 1024);
    // What cannot cross fails before anything is written.
    let bad = Frame::Call {
        call: None,
        frees: vec![],
        func: 1,
        out: 2,
        args: vec![
            Value::Plain(Any::from(first)),
            Value::Plain(
                described_tensor(
                    DLDevice {
                        device_type: 2,
                        device_id: 0,
                    },
                    &[4],
                    None,
                )
                .into(),
            ),
        ],
    };
    let err = bad.encode_gathered(Vec::new()).err().unwrap();
    assert_eq!(err.kind, ErrorKind::Type, "{err}");
    assert!(err.message.contains("`args[1]`"), "{err}");
}

#[test]
fn a_frame_gathered_in_a_block_keeps_its_large_aligned_tensor_there() {
    let n = 100_000;
    let data: Vec<u8> = (0..n).map(|i| (i * 13 + 5) as u8).collect();
    let frame: Frame = Frame::Store {
        reg: 3,
        name: None,
        value: Value::Plain(host_tensor(&[n as i64], I8, &data).into()),
    };
    let bytes = encode(&frame);
    // The first part of the frame ends in the tensor's data: that is where it starts.
    let limits = Limits::default();
    let (len, data_at) = Frame::placement(&bytes[..4096], &limits).unwrap();
    assert_eq!(len, bytes.len());
    assert_eq!(&bytes[data_at..data_at + 16], &data[..16]);
    // A part that holds the whole frame, or not even its header, is placed nowhere.
    assert_eq!(Frame::placement(&bytes, &limits), None);
    assert_eq!(Frame::placement(&bytes[..8], &limits), None);
    for (shift, kept) in [
        ((64 - data_at % 64) % 64, true),
        ((72 - data_at % 64) % 64, false),
    ] {
        let mut block = HostBlock::new(shift + len).unwrap();
        block.as_mut_slice()[shift..shift + len].copy_from_slice(&bytes);
        let block = Arc::new(block);
        let decoded = Frame::decode_in_block(&block, shift..shift + len, &limits).unwrap();
        let Frame::Store { value, .. } = decoded else {
            panic!("{decoded:?}")
        };
        let value = plain(value);
        let tensor = value.view().as_tensor().unwrap();
        let inside = tensor.data_ptr().addr().wrapping_sub(block.as_ptr().addr()) < shift + len;
        assert_eq!(
            inside, kept,
            "shift {shift}: kept in the block only when aligned"
        );
        assert_eq!(tensor.data_ptr().addr() % 64, 0);
        drop(block);
        // The tensor keeps the block (or its copy) alive, with the bytes that came.
        assert_eq!(tensor_bytes(&tensor), data);
    }
}

#[test]
fn registers_and_arena_tensors_round_trip() {
    for reg in [1, 77, u32::MAX] {
        assert!(matches!(
            value_round_trip(Value::Register(reg)),
            Value::Register(r) if r == reg
        ));
    }
    let tensors = [
        arena(&[]),
        arena(&[4, 0, 2]),
        ArenaTensor {
            segment: u32::MAX,
            offset: u64::MAX - 8,
            byte_offset: 8,
            dtype: F32,
            shape: vec![0],
        },
    ];
    for tensor in tensors {
        match value_round_trip(Value::Arena(tensor.clone())) {
            Value::Arena(back) => assert_eq!(back, tensor),
            other => panic!("{other:?}"),
        }
    }
    let t = ArenaTensor {
        segment: 1,
        offset: 128,
        byte_offset: 16,
        dtype: F32,
        shape: vec![2, 3],
    };
    assert_eq!(t.span().unwrap(), 144..168);
}

#[test]
fn borrowed_values_encode_as_owned_ones_do() {
    let values = [
        Any::Int(3),
        Any::from("a longer string"),
        Any::from("small"),
        Any::Bytes(Bytes::new(b"bytes")),
        Shape::new(&[1, 2]).into(),
        host_tensor(&[2], I8, &[9, 8]).into(),
    ];
    let owned: Frame = Frame::Call {
        call: None,
        frees: vec![],
        func: 1,
        out: 2,
        args: values.iter().cloned().map(Value::Plain).collect(),
    };
    let borrowed: Frame<AnyView<'_>> = Frame::Call {
        call: None,
        frees: vec![],
        func: 1,
        out: 2,
        args: values.iter().map(|v| Value::Plain(v.view())).collect(),
    };
    assert_eq!(encode(&owned), encode(&borrowed));
}

// ---- Frames ----

#[test]
fn every_frame_kind_round_trips() {
    let samples = samples();
    for kind in Kind::ALL {
        assert!(
            samples.iter().any(|(_, frame)| frame.kind() == kind),
            "no sample of {kind:?}"
        );
        assert_eq!(Kind::from_code(kind.code()), Some(kind));
    }
    for (_, frame) in &samples {
        round_trip(frame);
    }
}

#[test]
fn frames_keep_their_fields() {
    match round_trip(&Frame::Call {
        call: None,
        frees: vec![],
        func: 3,
        out: 4,
        args: every_value(),
    }) {
        Frame::Call {
            call: None,
            frees,
            func,
            out,
            args,
        } => {
            assert!(frees.is_empty());
            assert_eq!((func, out, args.len()), (3, 4, every_value().len()));
            assert!(matches!(args[2], Value::Plain(Any::Int(-5))));
            assert!(matches!(args[11], Value::Register(12)));
            assert!(matches!(&args[12], Value::Arena(a) if *a == arena(&[2, 3])));
        }
        other => panic!("{other:?}"),
    }
    // A numbered call keeps its number, with any number of frees, and its arguments.
    for frees in [vec![], vec![7], vec![7, u32::MAX]] {
        let frame = Frame::Call {
            call: Some(u32::MAX - 1),
            frees: frees.clone(),
            func: 3,
            out: 4,
            args: every_value(),
        };
        assert_eq!(frame.kind(), Kind::NumberedCall);
        match round_trip(&frame) {
            Frame::Call {
                call: Some(call),
                frees: back,
                func: 3,
                out: 4,
                args,
            } => {
                assert_eq!((call, back), (u32::MAX - 1, frees));
                assert_eq!(args.len(), every_value().len());
                assert!(matches!(args[2], Value::Plain(Any::Int(-5))));
                assert!(matches!(args[11], Value::Register(12)));
            }
            other => panic!("{other:?}"),
        }
    }
    match round_trip(&Frame::Store {
        reg: 5,
        name: Some("f".into()),
        value: Value::Register(3),
    }) {
        Frame::Store { reg, name, value } => {
            assert_eq!((reg, name.as_deref()), (5, Some("f")));
            assert!(matches!(value, Value::Register(3)));
        }
        other => panic!("{other:?}"),
    }
    match round_trip(&Frame::GetGlobalFunc {
        request: u64::MAX,
        reg: 2,
        name: "runtime.disco.empty".into(),
    }) {
        Frame::GetGlobalFunc { request, reg, name } => {
            assert_eq!((request, reg, &*name), (u64::MAX, 2, "runtime.disco.empty"));
        }
        other => panic!("{other:?}"),
    }
    match round_trip(&Frame::GetModuleFunc {
        request: 7,
        reg: 3,
        module: u32::MAX,
        name: "vm_initialization".into(),
    }) {
        Frame::GetModuleFunc {
            request,
            reg,
            module,
            name,
        } => {
            assert_eq!(
                (request, reg, module, &*name),
                (7, 3, u32::MAX, "vm_initialization")
            );
        }
        other => panic!("{other:?}"),
    }
    match round_trip(&Frame::CopyFromWorker0 {
        request: 1,
        reg: 2,
        into: Some(arena(&[8])),
    }) {
        Frame::CopyFromWorker0 { request, reg, into } => {
            assert_eq!((request, reg, into), (1, 2, Some(arena(&[8]))));
        }
        other => panic!("{other:?}"),
    }
    // Error kinds travel by name: known ones come back as themselves, others as they were.
    for kind in [
        ErrorKind::Value,
        ErrorKind::Worker,
        ErrorKind::Other("AttributeError".into()),
    ] {
        let error = Error::new(kind, "what went wrong");
        match round_trip(&Frame::Err {
            request: 4,
            error: error.clone(),
        }) {
            Frame::Err {
                request: 4,
                error: back,
            } => assert_eq!(back, error),
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(
        round_trip(&Frame::Sync { request: 0 }),
        Frame::Sync { request: 0 }
    ));
    assert!(matches!(
        round_trip(&Frame::Get { request: 3, reg: 9 }),
        Frame::Get { request: 3, reg: 9 }
    ));
    assert!(matches!(
        round_trip(&Frame::Free { reg: 1 }),
        Frame::Free { reg: 1 }
    ));
}

#[test]
fn a_stream_reader_reads_the_header_then_the_payload() {
    let bytes = encode(&Frame::<Any>::Get { request: 3, reg: 9 });
    let header = Header::parse(&bytes[..HEADER_SIZE], &Limits::default()).unwrap();
    assert_eq!(
        header,
        Header {
            minor: VERSION_MINOR,
            kind: Kind::Get,
            payload_len: 16
        }
    );
    assert_eq!(header.frame_len(), bytes.len());
    let frame = Frame::decode_payload(&header, &bytes[HEADER_SIZE..]).unwrap();
    assert!(matches!(frame, Frame::Get { request: 3, reg: 9 }));
    let err = Frame::decode_payload(&header, &bytes[HEADER_SIZE + 8..]).unwrap_err();
    assert_eq!(
        err.message,
        "bad wire frame: the Get frame's header declares 16 bytes of payload, but 8 were given"
    );
}

// ---- What the writer refuses ----

const WHAT_CROSSES: &str = "(what crosses: None, bool, int, float, str, bytes, Shape, \
                            DataType, Device, DRef and host tensors)";

/// Encodes `frame` every way and checks that each refuses it with `kind` and `message`,
/// writing nothing.
fn refused<P: Packed>(frame: &Frame<P>, kind: ErrorKind, message: &str) {
    let mut out = vec![1, 2, 3];
    let mut slot = [0xaa; 4096];
    for err in [
        frame.encode(&mut out).unwrap_err(),
        frame.encode_into(&mut slot).unwrap_err(),
        frame.encoded_len().unwrap_err(),
    ] {
        assert_eq!((&err.kind, err.message.as_str()), (&kind, message));
    }
    assert_eq!(out, [1, 2, 3], "nothing was appended");
    assert!(slot.iter().all(|&b| b == 0xaa), "nothing was written");
}

fn call(args: Vec<Value>) -> Frame {
    Frame::Call {
        call: None,
        frees: vec![],
        func: 1,
        out: 2,
        args,
    }
}

#[test]
fn values_that_cannot_cross_are_type_errors_naming_the_argument() {
    let function = Function::from_closure(|_| Ok(Any::None));
    refused(
        &call(vec![
            Value::Plain(Any::Int(1)),
            Value::Plain(Any::None),
            Value::Plain(function.into()),
        ]),
        ErrorKind::Type,
        &format!(
            "`args[2]`: a ffi.Function cannot cross to another process {WHAT_CROSSES}; a \
             function reaches the workers as a DRef (from get_global_func, or from a module \
             loaded on every worker)"
        ),
    );
    refused(
        &Frame::<Any>::Store {
            reg: 1,
            name: None,
            value: Value::Plain(Array::new([Any::Int(1)]).into()),
        },
        ErrorKind::Type,
        &format!("`value`: a ffi.Array cannot cross to another process {WHAT_CROSSES}"),
    );
    refused(
        &Frame::Ok {
            request: 1,
            value: Value::Plain(Any::OpaquePtr(std::ptr::null_mut())),
        },
        ErrorKind::Type,
        &format!(
            "`value`: a void* cannot cross to another process {WHAT_CROSSES}; an address \
             means nothing in another process"
        ),
    );
}

#[test]
fn device_tensors_and_strided_views_do_not_cross() {
    let gpu = DLDevice {
        device_type: 2,
        device_id: 1,
    };
    refused(
        &call(vec![Value::Plain(described_tensor(gpu, &[4], None).into())]),
        ErrorKind::Type,
        "`args[0]`: a tensor on device type 2 (id 1) cannot cross to another process; copy it \
         to the host first, or keep it on the workers and pass its DRef",
    );
    let strided = described_tensor(DLDevice::cpu(), &[2, 3], Some(&[1, 2]));
    refused(
        &call(vec![Value::Plain(strided.into())]),
        ErrorKind::Value,
        "`args[0]`: a strided tensor cannot cross to another process; make a compact copy \
         first",
    );
    // A compact tensor another library described crosses like any other.
    let compact = described_tensor(DLDevice::cpu(), &[2, 3], Some(&[3, 1]));
    let back = plain(value_round_trip(Value::Plain(compact.into())));
    assert_eq!(back.view().as_tensor().unwrap().shape(), &[2, 3]);
}

#[test]
fn values_that_cannot_cross_as_they_are_are_value_errors() {
    let err = call(vec![Value::Plain(Any::Str(Str::new(&[0x66, 0xff])))])
        .encoded_len()
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Value);
    assert_eq!(
        err.message,
        "`args[0]`: a str that is not valid UTF-8 cannot cross to another process (invalid \
         utf-8 sequence of 1 bytes from index 1)"
    );
    refused(
        &call(vec![Value::Plain(Any::Int(1)), Value::Register(0)]),
        ErrorKind::Value,
        "`args[1]`: register 0 is reserved (no DRef holds it)",
    );
    refused(
        &Frame::<Any>::Call {
            call: None,
            frees: vec![],
            func: 0,
            out: 2,
            args: vec![],
        },
        ErrorKind::Value,
        "`func`: register 0 is reserved (no DRef holds it)",
    );
    for call in [None, Some(4)] {
        refused(
            &Frame::<Any>::Call {
                call,
                frees: vec![3, 0],
                func: 1,
                out: 2,
                args: vec![],
            },
            ErrorKind::Value,
            "`frees[1]`: register 0 is reserved (no DRef holds it)",
        );
    }
    refused(
        &Frame::<Any>::Free { reg: 0 },
        ErrorKind::Value,
        "`reg`: register 0 is reserved (no DRef holds it)",
    );
    refused(
        &Frame::<Any>::GetModuleFunc {
            request: 1,
            reg: 2,
            module: 0,
            name: "f".into(),
        },
        ErrorKind::Value,
        "`module`: register 0 is reserved (no DRef holds it)",
    );
    let past_the_end = ArenaTensor {
        offset: u64::MAX,
        byte_offset: 1,
        ..arena(&[])
    };
    refused(
        &call(vec![Value::Arena(past_the_end)]),
        ErrorKind::Value,
        &format!(
            "`args[0]`: an arena tensor at offset {} + byte_offset 1 with 4 bytes ends past \
             2^64 - 1",
            u64::MAX
        ),
    );
    refused(
        &Frame::<Any>::CopyFromWorker0 {
            request: 1,
            reg: 1,
            into: Some(arena(&[-1])),
        },
        ErrorKind::Value,
        "`into`: dimension 0 of shape [-1] is negative",
    );
}

#[test]
fn a_copy_to_worker0_takes_a_tensor() {
    refused(
        &Frame::CopyToWorker0 {
            request: 1,
            reg: 1,
            source: Value::Plain(Any::Int(1)),
        },
        ErrorKind::Type,
        "`source`: a copy to worker 0 takes a Tensor or an arena tensor, not a value of type \
         int",
    );
    refused(
        &Frame::<Any>::CopyToWorker0 {
            request: 1,
            reg: 1,
            source: Value::Register(3),
        },
        ErrorKind::Type,
        "`source`: a copy to worker 0 takes a Tensor or an arena tensor, not a register",
    );
}

#[test]
fn a_slot_too_small_is_refused_and_left_alone() {
    let frame: Frame = Frame::Sync { request: 1 };
    let mut slot = [0xaa; 23];
    let err = frame.encode_into(&mut slot).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Value);
    assert_eq!(
        err.message,
        "a Sync frame of 24 bytes does not fit in 23 bytes"
    );
    assert!(slot.iter().all(|&b| b == 0xaa));
}

// ---- What the reader refuses ----

/// A payload written by hand.
#[derive(Default)]
struct Payload(Vec<u8>);

impl Payload {
    fn u32(mut self, v: u32) -> Self {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn i64(self, v: i64) -> Self {
        self.u64(v as u64)
    }
    fn bytes(mut self, b: &[u8]) -> Self {
        self.0.extend(b);
        self
    }
}

/// A frame written by hand: a version 1.`minor` header of `kind` for `payload`.
fn raw_with(minor: u8, kind: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = b"DVMW".to_vec();
    out.extend([1, minor]);
    out.extend(kind.to_le_bytes());
    out.extend((payload.len() as u64).to_le_bytes());
    out.extend(payload);
    out
}

fn raw(kind: Kind, payload: Payload) -> Vec<u8> {
    raw_with(0, kind.code(), &payload.0)
}

/// An `Ok` reply to request 1 carrying `value` (which starts at byte 24).
fn ok_with(value: Payload) -> Vec<u8> {
    raw(Kind::Ok, Payload::default().u64(1).bytes(&value.0))
}

/// Decodes `bytes` and returns the message of the `ValueError` it must give.
fn refusal(bytes: &[u8]) -> String {
    let err = decode(bytes).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Value, "{err}");
    err.message
}

#[test]
fn frames_written_by_hand_decode() {
    let bytes = ok_with(Payload::default().u32(tag::INT).u32(0).i64(-2));
    assert!(matches!(
        decode(&bytes).unwrap(),
        Frame::Ok {
            request: 1,
            value: Value::Plain(Any::Int(-2))
        }
    ));
}

#[test]
fn bad_headers_are_refused() {
    assert_eq!(
        refusal(&[0x44, 0x56]),
        "bad wire frame: truncated header: 2 of 16 bytes"
    );
    let mut bytes = encode(&Frame::<Any>::Sync { request: 1 });
    bytes[3] = b'X';
    assert_eq!(
        refusal(&bytes),
        "bad wire frame: bad magic [44, 56, 4d, 58] (expected [44, 56, 4d, 57], \"DVMW\")"
    );
    let mut bytes = encode(&Frame::<Any>::Sync { request: 1 });
    bytes[4] = 2;
    assert_eq!(
        refusal(&bytes),
        format!(
            "bad wire frame: wire version 2.{VERSION_MINOR} is not supported (this reader reads \
             1.x)"
        )
    );
    assert_eq!(
        refusal(&raw_with(9, 99, &[])),
        format!(
            "bad wire frame: unknown frame kind 99 (in a version 1.9 frame; this reader knows \
             the kinds of version 1.{VERSION_MINOR})"
        )
    );
}

#[test]
fn a_newer_minor_version_is_read() {
    let bytes = raw_with(7, Kind::Sync.code(), &Payload::default().u64(5).0);
    assert!(matches!(
        decode(&bytes).unwrap(),
        Frame::Sync { request: 5 }
    ));
    let header = Header::parse(&bytes, &Limits::default()).unwrap();
    assert_eq!(header.minor, 7);
    // A tag this version does not know is refused, naming the frame's version.
    let bytes = raw_with(
        7,
        Kind::Ok.code(),
        &Payload::default().u64(1).u32(300).u32(0).0,
    );
    assert_eq!(
        refusal(&bytes),
        format!(
            "bad wire frame: Ok frame, at byte 24: `value` has an unknown value tag 300 (in a \
             version 1.7 frame; this reader knows the tags of version 1.{VERSION_MINOR})"
        )
    );
}

#[test]
fn oversized_and_misaligned_payloads_are_refused_from_the_header() {
    let bytes = encode(&Frame::<Any>::Get { request: 1, reg: 1 });
    let err = Frame::decode(&bytes, &Limits { max_payload: 8 }).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Value);
    assert_eq!(
        err.message,
        "bad wire frame: Get frame declares a payload of 16 bytes, over the limit of 8 bytes"
    );
    // The header alone is enough to refuse it: nothing of the payload is needed.
    let mut header = raw(Kind::Sync, Payload::default());
    header[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert_eq!(
        Header::parse(&header, &Limits::default())
            .unwrap_err()
            .message,
        format!(
            "bad wire frame: Sync frame declares a payload of {} bytes, over the limit of \
             {DEFAULT_MAX_PAYLOAD} bytes",
            u64::MAX
        )
    );
    let huge = Limits {
        max_payload: usize::MAX,
    };
    assert!(Header::parse(&header, &huge).is_err());
    header[8..16].copy_from_slice(&12u64.to_le_bytes());
    assert_eq!(
        refusal(&header),
        "bad wire frame: Sync frame declares a payload of 12 bytes, not a multiple of 8"
    );
}

#[test]
fn truncated_frames_and_bytes_past_the_end_are_refused() {
    let bytes = encode(&Frame::<Any>::Sync { request: 1 });
    assert_eq!(
        refusal(&bytes[..20]),
        "bad wire frame: truncated Sync frame: its header declares 8 bytes of payload, 4 are \
         there"
    );
    let mut longer = bytes.clone();
    longer.extend([0; 3]);
    assert_eq!(
        refusal(&longer),
        "bad wire frame: 3 bytes follow the end of a Sync frame of 24 bytes"
    );
    // Bytes the header counts but no field uses.
    let slack = raw(Kind::Sync, Payload::default().u64(1).u64(0));
    assert_eq!(
        refusal(&slack),
        "bad wire frame: Sync frame, at byte 24: 8 bytes left over after the Sync frame"
    );
    // A frame cut anywhere is refused.
    let call = encode(&call(every_value()));
    for len in 0..call.len() {
        let mut cut = call[..len].to_vec();
        if len >= HEADER_SIZE {
            // Even with a header that agrees with the cut.
            let payload = (len - HEADER_SIZE) as u64 / 8 * 8;
            cut.truncate(HEADER_SIZE + payload as usize);
            cut[8..16].copy_from_slice(&payload.to_le_bytes());
        }
        assert_eq!(decode(&cut).unwrap_err().kind, ErrorKind::Value);
    }
}

#[test]
fn lengths_past_the_payload_are_refused_before_allocating() {
    let bytes = ok_with(Payload::default().u32(tag::STR).u32(0).u64(u64::MAX));
    assert_eq!(
        refusal(&bytes),
        format!(
            "bad wire frame: Ok frame, at byte 40: `value` runs past the end of the payload \
             ({} bytes needed, 0 left)",
            u64::MAX
        )
    );
    let bytes = ok_with(Payload::default().u32(tag::SHAPE).u32(u32::MAX));
    assert_eq!(
        refusal(&bytes),
        "bad wire frame: Ok frame, at byte 32: the 4294967295 dims of `value` runs past the end \
         of the payload (34359738360 bytes needed, 0 left)"
    );
    let bytes = raw(
        Kind::Call,
        Payload::default().u32(1).u32(2).u32(u32::MAX).u32(0).u64(0),
    );
    assert_eq!(
        refusal(&bytes),
        "bad wire frame: Call frame, at byte 24: 4294967295 arguments declared, but the 8 bytes \
         left hold at most 1"
    );
}

#[test]
fn kill_calls_kill_at_least_one_register_and_pad_to_eight_bytes() {
    let call = Payload::default().u32(1).u32(2).u32(0).u32(0).0;
    let kill_call = |head: Payload| raw(Kind::FreeCall, head.bytes(&call));
    // One kill, then its padding word, then the call.
    let frame = decode(&kill_call(Payload::default().u32(1).u32(0).u32(7).u32(0))).unwrap();
    assert!(matches!(frame, Frame::Call { frees, func: 1, out: 2, .. } if frees == [7]));
    assert_eq!(
        refusal(&kill_call(Payload::default().u32(0).u32(0))),
        "bad wire frame: FreeCall frame, at byte 16: 0 frees declared, but a FreeCall frees \
         from 1 to as many as the 16 bytes left hold (4)"
    );
    assert_eq!(
        refusal(&kill_call(Payload::default().u32(u32::MAX).u32(0))),
        "bad wire frame: FreeCall frame, at byte 16: 4294967295 frees declared, but a FreeCall \
         frees from 1 to as many as the 16 bytes left hold (4)"
    );
    assert_eq!(
        refusal(&kill_call(Payload::default().u32(1).u32(0).u32(7).u32(5))),
        "bad wire frame: FreeCall frame, at byte 28: the padding after the frees is 5, not 0 \
         (reserved)"
    );
    assert_eq!(
        refusal(&kill_call(Payload::default().u32(2).u32(0).u32(7).u32(0))),
        "bad wire frame: FreeCall frame, at byte 28: `frees[1]`: register 0 is reserved (no \
         DRef holds it)"
    );
}

#[test]
fn numbered_calls_free_any_number_of_registers_and_pad_to_eight_bytes() {
    let call = Payload::default().u32(1).u32(2).u32(0).u32(0).0;
    let numbered = |head: Payload| raw(Kind::NumberedCall, head.bytes(&call));
    // Call 5, no frees, then the call.
    let frame = decode(&numbered(Payload::default().u32(5).u32(0))).unwrap();
    assert!(matches!(
        frame,
        Frame::Call { call: Some(5), frees, func: 1, out: 2, .. } if frees.is_empty()
    ));
    // Call 6, one free, then its padding word, then the call.
    let frame = decode(&numbered(Payload::default().u32(6).u32(1).u32(7).u32(0))).unwrap();
    assert!(matches!(
        frame,
        Frame::Call { call: Some(6), frees, func: 1, out: 2, .. } if frees == [7]
    ));
    assert_eq!(
        refusal(&numbered(Payload::default().u32(6).u32(5))),
        "bad wire frame: NumberedCall frame, at byte 20: 5 frees declared, but a NumberedCall \
         frees from 0 to as many as the 16 bytes left hold (4)"
    );
    assert_eq!(
        refusal(&numbered(Payload::default().u32(6).u32(u32::MAX))),
        "bad wire frame: NumberedCall frame, at byte 20: 4294967295 frees declared, but a \
         NumberedCall frees from 0 to as many as the 16 bytes left hold (4)"
    );
    assert_eq!(
        refusal(&numbered(Payload::default().u32(6).u32(1).u32(7).u32(5))),
        "bad wire frame: NumberedCall frame, at byte 28: the padding after the frees is 5, not \
         0 (reserved)"
    );
    assert_eq!(
        refusal(&numbered(Payload::default().u32(6).u32(2).u32(7).u32(0))),
        "bad wire frame: NumberedCall frame, at byte 28: `frees[1]`: register 0 is reserved \
         (no DRef holds it)"
    );
    // Without the call that follows, the frame is cut short.
    assert_eq!(
        refusal(&raw(Kind::NumberedCall, Payload::default().u32(6).u32(0))),
        "bad wire frame: NumberedCall frame, at byte 24: `func` runs past the end of the \
         payload (4 bytes needed, 0 left)"
    );
}

#[test]
fn a_numbered_call_is_its_number_its_frees_and_a_call() {
    let frame = Frame::Call {
        call: Some(0x0102_0304),
        frees: vec![9],
        func: 1,
        out: 2,
        args: vec![Value::Plain(Any::Int(7))],
    };
    // The call's number, one free, its padding; func, out, one argument, reserved; Int 7.
    let payload = Payload::default()
        .u32(0x0102_0304)
        .u32(1)
        .u32(9)
        .u32(0)
        .u32(1)
        .u32(2)
        .u32(1)
        .u32(0)
        .u32(tag::INT)
        .u32(0)
        .i64(7);
    assert_eq!(Kind::NumberedCall.code(), 14);
    assert_eq!(
        encode(&frame),
        raw_with(VERSION_MINOR, Kind::NumberedCall.code(), &payload.0)
    );
}

#[test]
fn unknown_tags_and_values_of_the_wrong_tag_are_refused() {
    assert_eq!(
        refusal(&ok_with(Payload::default().u32(99).u32(0))),
        format!(
            "bad wire frame: Ok frame, at byte 24: `value` has an unknown value tag 99 (in a \
             version 1.0 frame; this reader knows the tags of version 1.{VERSION_MINOR})"
        )
    );
    let int = Payload::default().u32(tag::INT).u32(0).i64(1);
    let store = raw(Kind::Store, Payload::default().u32(1).u32(0).bytes(&int.0));
    assert_eq!(
        refusal(&store),
        "bad wire frame: Store frame, at byte 24: `name` must be a Str (65) or None (0), not \
         tag 1 (Int)"
    );
    let copy_to = raw(
        Kind::CopyToWorker0,
        Payload::default().u64(1).u32(1).u32(0).bytes(&int.0),
    );
    assert_eq!(
        refusal(&copy_to),
        "bad wire frame: CopyToWorker0 frame, at byte 32: `source` must be a Tensor (70) or an \
         ArenaTensor (257), not tag 1 (Int)"
    );
    let text = Payload::default().u32(tag::STR).u32(0).u64(0);
    let copy_from = raw(
        Kind::CopyFromWorker0,
        Payload::default().u64(1).u32(1).u32(0).bytes(&text.0),
    );
    assert_eq!(
        refusal(&copy_from),
        "bad wire frame: CopyFromWorker0 frame, at byte 32: `into` must be an ArenaTensor (257) \
         or None (0), not tag 65 (Str)"
    );
    let bytes = Payload::default().u32(tag::BYTES).u32(0).u64(0);
    let get_func = raw(
        Kind::GetGlobalFunc,
        Payload::default().u64(1).u32(1).u32(0).bytes(&bytes.0),
    );
    assert_eq!(
        refusal(&get_func),
        "bad wire frame: GetGlobalFunc frame, at byte 32: `name` must be a Str (65), not tag 66 \
         (Bytes)"
    );
    let get_module_func = raw(
        Kind::GetModuleFunc,
        Payload::default().u64(1).u32(1).u32(2).bytes(&bytes.0),
    );
    assert_eq!(
        refusal(&get_module_func),
        "bad wire frame: GetModuleFunc frame, at byte 32: `name` must be a Str (65), not tag 66 \
         (Bytes)"
    );
}

#[test]
fn non_canonical_fields_are_refused() {
    // Padding after a string.
    let padded = |pad: [u8; 6]| {
        ok_with(
            Payload::default()
                .u32(tag::STR)
                .u32(0)
                .u64(2)
                .bytes(b"hi")
                .bytes(&pad),
        )
    };
    assert!(decode(&padded([0; 6])).is_ok());
    assert_eq!(
        refusal(&padded([0, 0, 1, 0, 0, 0])),
        "bad wire frame: Ok frame, at byte 44: padding byte after `value` is 0x01, not 0"
    );
    // Reserved words.
    assert_eq!(
        refusal(&ok_with(Payload::default().u32(tag::INT).u32(5).i64(1))),
        "bad wire frame: Ok frame, at byte 28: the second word of `value` is 5, not 0 \
         (reserved)"
    );
    assert_eq!(
        refusal(&raw(Kind::Free, Payload::default().u32(3).u32(1))),
        "bad wire frame: Free frame, at byte 20: the word after `reg` is 1, not 0 (reserved)"
    );
    // Booleans are 0 or 1.
    assert_eq!(
        refusal(&ok_with(Payload::default().u32(tag::BOOL).u32(2))),
        "bad wire frame: Ok frame, at byte 28: `value` is a bool of value 2, not 0 or 1"
    );
    // Register 0.
    assert_eq!(
        refusal(&raw(Kind::Free, Payload::default().u32(0).u32(0))),
        "bad wire frame: Free frame, at byte 16: `reg`: register 0 is reserved (no DRef holds \
         it)"
    );
    let name = Payload::default().u32(tag::STR).u32(0).u64(0);
    assert_eq!(
        refusal(&raw(
            Kind::GetModuleFunc,
            Payload::default().u64(1).u32(2).u32(0).bytes(&name.0)
        )),
        "bad wire frame: GetModuleFunc frame, at byte 28: `module`: register 0 is reserved (no \
         DRef holds it)"
    );
    assert_eq!(
        refusal(&ok_with(Payload::default().u32(tag::REGISTER).u32(0))),
        "bad wire frame: Ok frame, at byte 28: `value`: register 0 is reserved (no DRef holds \
         it)"
    );
}

#[test]
fn text_that_is_not_utf8_is_refused() {
    let bytes = ok_with(
        Payload::default()
            .u32(tag::STR)
            .u32(0)
            .u64(2)
            .bytes(&[0x66, 0xff, 0, 0, 0, 0, 0, 0]),
    );
    assert_eq!(
        refusal(&bytes),
        "bad wire frame: Ok frame, at byte 40: `value` is a str of 2 bytes that is not valid \
         UTF-8 (invalid utf-8 sequence of 1 bytes from index 1)"
    );
    // The same bytes as a Bytes value are fine.
    let mut bytes = bytes;
    bytes[24] = tag::BYTES as u8;
    assert!(decode(&bytes).is_ok());
}

/// A tensor value of `dtype` with `dims`, declaring `nbytes` and carrying `data`.
fn tensor_value(dtype: DLDataType, dims: &[i64], nbytes: u64, data: &[u8]) -> Payload {
    let word = u32::from_le_bytes([dtype.code, dtype.bits, dtype.lanes as u8, 0]);
    let mut p = Payload::default()
        .u32(tag::TENSOR)
        .u32(word)
        .u32(dims.len() as u32)
        .u32(0);
    for &dim in dims {
        p = p.i64(dim);
    }
    let padding = data.len().next_multiple_of(8) - data.len();
    p.u64(nbytes).bytes(data).bytes(&vec![0; padding])
}

#[test]
fn bad_tensors_are_refused() {
    let f32x2 = [0u8; 8];
    assert!(decode(&ok_with(tensor_value(F32, &[2], 8, &f32x2))).is_ok());
    assert_eq!(
        refusal(&ok_with(tensor_value(F32, &[2], 4, &f32x2[..4]))),
        "bad wire frame: Ok frame, at byte 48: `value` carries 4 bytes, but a tensor of shape \
         [2] and dtype float32 holds 8"
    );
    assert_eq!(
        refusal(&ok_with(tensor_value(F32, &[-1], 0, &[]))),
        "bad wire frame: Ok frame, at byte 24: `value`: dimension 0 of shape [-1] is negative"
    );
    assert_eq!(
        refusal(&ok_with(tensor_value(
            DLDataType::new(KDL_FLOAT, 0, 1),
            &[2],
            0,
            &[]
        ))),
        "bad wire frame: Ok frame, at byte 24: `value`: invalid dtype (code 2, bits 0, lanes 1)"
    );
    let message = refusal(&ok_with(tensor_value(F32, &[i64::MAX, 2], 0, &[])));
    assert!(message.contains("is too large to address"), "{message}");
    let mut many = tensor_value(F32, &[1; 65], 4, &[0; 4]);
    many.0[8..12].copy_from_slice(&65u32.to_le_bytes());
    assert_eq!(
        refusal(&ok_with(many)),
        "bad wire frame: Ok frame, at byte 32: `value` is a tensor of 65 dims (at most 64)"
    );
    // An arena tensor that ends past 2^64 - 1.
    let arena = Payload::default()
        .u32(tag::ARENA_TENSOR)
        .u32(u32::from_le_bytes([KDL_FLOAT, 32, 1, 0]))
        .u32(0)
        .u32(0)
        .u64(u64::MAX)
        .u64(1);
    assert_eq!(
        refusal(&ok_with(arena)),
        format!(
            "bad wire frame: Ok frame, at byte 24: `value`: an arena tensor at offset {} + \
             byte_offset 1 with 4 bytes ends past 2^64 - 1",
            u64::MAX
        )
    );
}

// ---- The specification and the fuzz corpus ----

const SPEC: &str = include_str!("../../WIRE.md");

#[test]
fn wire_md_numbers_every_tag_and_kind_as_the_code_does() {
    for (tag, name) in tag::ALL {
        let row = format!("| {tag} | `{name}` |");
        assert!(SPEC.contains(&row), "WIRE.md lacks the row `{row}`");
    }
    for kind in Kind::ALL {
        let row = format!("| {} | `{}` |", kind.code(), kind.name());
        assert!(SPEC.contains(&row), "WIRE.md lacks the row `{row}`");
    }
    for line in [
        format!("# discovm wire format, version {VERSION_MAJOR}.{VERSION_MINOR}"),
        format!("| 4 | 1 | major | {VERSION_MAJOR} |"),
        format!("| 5 | 1 | minor | {VERSION_MINOR} |"),
        "| 0 | 4 | magic | `44 56 4D 57` (\"DVMW\") |".to_string(),
    ] {
        assert!(SPEC.contains(&line), "WIRE.md lacks `{line}`");
    }
    assert_eq!(MAGIC, [0x44, 0x56, 0x4d, 0x57]);
    assert_eq!(HEADER_SIZE, 16);
}

#[test]
fn the_example_in_wire_md_is_what_the_encoder_writes() {
    let block = SPEC
        .split("## Example")
        .nth(1)
        .and_then(|example| example.split("```").nth(1))
        .expect("WIRE.md has an example in a code block");
    let listed: Vec<u8> = block
        .lines()
        .skip(2)
        .flat_map(|line| {
            line.split_whitespace()
                .skip(1)
                .take_while(|t| t.len() == 2 && t.bytes().all(|b| b.is_ascii_hexdigit()))
                .map(|t| u8::from_str_radix(t, 16).unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    let frame = call(vec![
        Value::Plain(Any::Int(7)),
        Value::Plain(Any::from("hi")),
    ]);
    assert_eq!(listed, encode(&frame));
}

/// Writes the samples into the corpus instead of checking it, when set.
const WRITE_CORPUS: &str = "DVM_WRITE_WIRE_CORPUS";

#[test]
fn the_fuzz_corpus_holds_every_sample_frame() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/wire_frame");
    let write = std::env::var_os(WRITE_CORPUS).is_some();
    if write {
        fs::create_dir_all(&dir).unwrap();
    }
    for (name, frame) in samples() {
        let bytes = encode(&frame);
        let path = dir.join(format!("valid-{name}"));
        if write {
            fs::write(&path, &bytes).unwrap();
            continue;
        }
        let regenerate = format!(
            "regenerate the samples with `{WRITE_CORPUS}=1 cargo test --lib \
             wire::tests::the_fuzz_corpus` (fuzz/README.md)"
        );
        let committed =
            fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}; {regenerate}", path.display()));
        assert!(
            committed == bytes,
            "{} is not what the encoder writes; {regenerate}",
            path.display()
        );
    }
}

// ---- Random frames and random bytes ----

/// A value to build, and what it must be after a round trip.
#[derive(Clone, Debug)]
enum Spec {
    None,
    Bool(bool),
    Int(i64),
    Float(u64),
    Str(String),
    Bytes(Vec<u8>),
    Shape(Vec<i64>),
    DataType(DLDataType),
    Device(i32, i32),
    Register(u32),
    Tensor {
        dtype: DLDataType,
        shape: Vec<i64>,
        data: Vec<u8>,
    },
    Arena(ArenaTensor),
}

const DTYPES: [DLDataType; 6] = [F32, F64, I8, I4, BOOL, F16X4];

fn dtype() -> impl Strategy<Value = DLDataType> + Clone {
    (0..DTYPES.len()).prop_map(|i| DTYPES[i])
}

fn spec() -> impl Strategy<Value = Spec> {
    prop_oneof![
        Just(Spec::None),
        any::<bool>().prop_map(Spec::Bool),
        any::<i64>().prop_map(Spec::Int),
        any::<u64>().prop_map(Spec::Float),
        "\\PC{0,20}".prop_map(Spec::Str),
        vec(any::<u8>(), 0..20).prop_map(Spec::Bytes),
        vec(any::<i64>(), 0..5).prop_map(Spec::Shape),
        any::<(u8, u8, u16)>().prop_map(|(c, b, l)| Spec::DataType(DLDataType::new(c, b, l))),
        any::<(i32, i32)>().prop_map(|(t, i)| Spec::Device(t, i)),
        (1..=u32::MAX).prop_map(Spec::Register),
        (dtype(), vec(0i64..4, 0..4)).prop_flat_map(|(dtype, shape)| {
            let nbytes = compact_nbytes(&shape, dtype).unwrap();
            vec(any::<u8>(), nbytes).prop_map(move |data| Spec::Tensor {
                dtype,
                shape: shape.clone(),
                data,
            })
        }),
        arena_tensor().prop_map(Spec::Arena),
    ]
}

fn arena_tensor() -> impl Strategy<Value = ArenaTensor> + Clone {
    (
        any::<u32>(),
        0..1u64 << 48,
        0..1u64 << 20,
        dtype(),
        vec(0i64..100, 0..4),
    )
        .prop_map(|(segment, offset, byte_offset, dtype, shape)| ArenaTensor {
            segment,
            offset,
            byte_offset,
            dtype,
            shape,
        })
}

fn make(spec: &Spec) -> Value {
    Value::Plain(match spec {
        Spec::None => Any::None,
        Spec::Bool(b) => Any::Bool(*b),
        Spec::Int(i) => Any::Int(*i),
        Spec::Float(bits) => Any::Float(f64::from_bits(*bits)),
        Spec::Str(text) => Any::from(text.as_str()),
        Spec::Bytes(bytes) => Any::Bytes(Bytes::new(bytes)),
        Spec::Shape(dims) => Shape::new(dims).into(),
        Spec::DataType(dtype) => Any::DataType(*dtype),
        Spec::Device(t, i) => Any::Device(DLDevice {
            device_type: *t,
            device_id: *i,
        }),
        Spec::Register(reg) => return Value::Register(*reg),
        Spec::Tensor { dtype, shape, data } => host_tensor(shape, *dtype, data).into(),
        Spec::Arena(tensor) => return Value::Arena(tensor.clone()),
    })
}

/// Checks that `value` is what `spec` describes.
fn check(spec: &Spec, value: &Value) -> std::result::Result<(), TestCaseError> {
    let view = match value {
        Value::Plain(any) => any.view(),
        Value::Register(reg) => {
            prop_assert!(matches!(spec, Spec::Register(r) if r == reg));
            return Ok(());
        }
        Value::Arena(tensor) => {
            prop_assert!(matches!(spec, Spec::Arena(t) if t == tensor));
            return Ok(());
        }
    };
    match spec {
        Spec::None => prop_assert_eq!(view.type_index(), crate::abi::type_index::NONE),
        Spec::Bool(b) => prop_assert_eq!(view.as_bool().unwrap(), *b),
        Spec::Int(i) => prop_assert_eq!(view.as_i64().unwrap(), *i),
        Spec::Float(bits) => prop_assert_eq!(view.as_f64().unwrap().to_bits(), *bits),
        Spec::Str(text) => prop_assert_eq!(view.as_str().unwrap(), text.as_str()),
        Spec::Bytes(bytes) => prop_assert_eq!(view.as_bytes().unwrap(), &bytes[..]),
        Spec::Shape(dims) => {
            let shape = view.as_shape().unwrap();
            prop_assert_eq!(shape.as_slice(), &dims[..]);
        }
        Spec::DataType(dtype) => prop_assert_eq!(view.as_dtype().unwrap(), *dtype),
        Spec::Device(t, i) => {
            let device = view.as_device().unwrap();
            prop_assert_eq!((device.device_type, device.device_id), (*t, *i));
        }
        Spec::Tensor { dtype, shape, data } => {
            let tensor = view.as_tensor().unwrap();
            prop_assert_eq!(tensor.dl().dtype, *dtype);
            prop_assert_eq!(tensor.shape(), &shape[..]);
            prop_assert_eq!(tensor_bytes(&tensor), data.clone());
        }
        Spec::Register(_) | Spec::Arena(_) => prop_assert!(false, "expected {spec:?}"),
    }
    Ok(())
}

/// A frame of any kind, its values, names and numbers random.
fn frame() -> impl Strategy<Value = Frame> {
    let reg = 1..=u32::MAX;
    let name = "\\PC{0,12}";
    let arena = arena_tensor();
    prop_oneof![
        (
            proptest::option::of(any::<u32>()),
            vec(reg.clone(), 0..4),
            reg.clone(),
            reg.clone(),
            vec(spec(), 0..6)
        )
            .prop_map(|(call, frees, func, out, specs)| Frame::Call {
                call,
                frees,
                func,
                out,
                args: specs.iter().map(make).collect(),
            }),
        (reg.clone(), proptest::option::of(name), spec()).prop_map(|(reg, name, spec)| {
            Frame::Store {
                reg,
                name: name.map(Into::into),
                value: make(&spec),
            }
        }),
        reg.clone().prop_map(|reg| Frame::Free { reg }),
        any::<u64>().prop_map(|request| Frame::Sync { request }),
        (any::<u64>(), reg.clone()).prop_map(|(request, reg)| Frame::Get { request, reg }),
        any::<u64>().prop_map(|request| Frame::CountLive { request }),
        (any::<u64>(), reg.clone(), name).prop_map(|(request, reg, name)| {
            Frame::GetGlobalFunc {
                request,
                reg,
                name: name.into(),
            }
        }),
        (any::<u64>(), reg.clone(), reg.clone(), name).prop_map(|(request, reg, module, name)| {
            Frame::GetModuleFunc {
                request,
                reg,
                module,
                name: name.into(),
            }
        }),
        (any::<u64>(), reg.clone(), arena.clone()).prop_map(|(request, reg, source)| {
            Frame::CopyToWorker0 {
                request,
                reg,
                source: Value::Arena(source),
            }
        }),
        (any::<u64>(), reg.clone(), proptest::option::of(arena))
            .prop_map(|(request, reg, into)| Frame::CopyFromWorker0 { request, reg, into }),
        Just(Frame::Shutdown),
        (any::<u64>(), spec()).prop_map(|(request, spec)| Frame::Ok {
            request,
            value: make(&spec),
        }),
        (any::<u64>(), name, name).prop_map(|(request, kind, message)| Frame::Err {
            request,
            error: Error::new(ErrorKind::from_name(&kind), message),
        }),
    ]
}

/// What the fuzz target checks: refused bytes give a `ValueError`; accepted ones encode to
/// the same bytes, but for the minor version, which becomes the writer's.
fn check_decoded(bytes: &[u8]) -> std::result::Result<(), TestCaseError> {
    match decode(bytes) {
        Err(err) => prop_assert!(err.kind == ErrorKind::Value, "{}", err),
        Ok(frame) => {
            let again = encode(&frame);
            prop_assert_eq!(again[5], VERSION_MINOR);
            prop_assert_eq!((&again[..5], &again[6..]), (&bytes[..5], &bytes[6..]));
        }
    }
    Ok(())
}

/// Words a damaged payload is made of: tags, small numbers and extremes more often than not.
fn word() -> impl Strategy<Value = u32> {
    prop_oneof![
        (0..tag::ALL.len()).prop_map(|i| tag::ALL[i].0),
        0..4u32,
        Just(u32::MAX),
        any::<u32>(),
    ]
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config(512))]

    /// Any value that crosses comes back equal, and encodes again to the same bytes.
    #[test]
    fn random_values_round_trip(spec in spec(), request in any::<u64>()) {
        let back = round_trip(&Frame::Ok { request, value: make(&spec) });
        let Frame::Ok { request: back_request, value } = back else {
            return Err(TestCaseError::fail("not an Ok frame"));
        };
        prop_assert_eq!(back_request, request);
        check(&spec, &value)?;
    }

    /// A call's arguments come back equal, in order.
    #[test]
    fn random_calls_round_trip(
        specs in vec(spec(), 0..8),
        func in 1..=u32::MAX,
        frees in vec(1..=u32::MAX, 0..5),
        call in proptest::option::of(any::<u32>()),
    ) {
        let frame = Frame::Call { call, frees: frees.clone(), func, out: 1, args: specs.iter().map(make).collect() };
        let Frame::Call { call: back_call, frees: back_kills, func: back_func, args, .. } =
            round_trip(&frame)
        else {
            return Err(TestCaseError::fail("not a Call frame"));
        };
        prop_assert_eq!(back_call, call);
        prop_assert_eq!(back_kills, frees);
        prop_assert_eq!(back_func, func);
        prop_assert_eq!(args.len(), specs.len());
        for (spec, arg) in specs.iter().zip(&args) {
            check(spec, arg)?;
        }
    }

    /// Every kind of frame, with random contents, encodes and decodes to the same bytes.
    #[test]
    fn random_frames_round_trip(frame in frame()) {
        round_trip(&frame);
    }

    /// Arbitrary bytes never make the reader panic.
    #[test]
    fn arbitrary_bytes_are_refused_or_round_trip(bytes in vec(any::<u8>(), 0..300)) {
        check_decoded(&bytes)?;
        let with_header = [&MAGIC[..], &[1, 0], &bytes[..]].concat();
        check_decoded(&with_header)?;
    }

    /// A valid header over a payload of plausible words (tags, counts, lengths) never makes
    /// the reader panic.
    #[test]
    fn plausible_payloads_are_refused_or_round_trip(
        kind in (0..Kind::ALL.len()).prop_map(|i| Kind::ALL[i]),
        words in vec(word(), 0..48),
    ) {
        let payload: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let payload = &payload[..payload.len() / 8 * 8];
        check_decoded(&raw_with(0, kind.code(), payload))?;
    }

    /// A valid frame with bytes changed, cut or added never makes the reader panic.
    #[test]
    fn damaged_frames_are_refused_or_round_trip(
        frame in frame(),
        edits in vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in proptest::option::of(any::<prop::sample::Index>()),
        extra in vec(any::<u8>(), 0..3),
    ) {
        let mut bytes = encode(&frame);
        for (at, byte) in edits {
            let at = at.index(bytes.len());
            bytes[at] = byte;
        }
        if let Some(cut) = cut {
            bytes.truncate(cut.index(bytes.len()));
        }
        bytes.extend(extra);
        check_decoded(&bytes)?;
    }
}
