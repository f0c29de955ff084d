//! The bodies of the fuzz targets, shared by the libFuzzer binaries (`fuzz_targets/`) and by
//! the library's test that replays the committed corpora (`tests/fuzz_corpora.rs`). Each one
//! reads its input with [`Input`], builds what a C caller could hand the library, and checks
//! that the library answers with a value or an error, never a crash, and keeps its ownership
//! promises (a deleter runs exactly once, no reference is left behind). The wire target takes
//! its input as it is: the bytes a peer could send.
//!
//! What the caller vouches for by contract is kept true: pointers point at memory of the size
//! the description gives, and an object's type index is its own. Everything else is random:
//! type indices, lengths, dimensions, strides, dtypes, devices, offsets, versions, flags.

use std::cell::Cell;
use std::ffi::c_void;
use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use discovm::abi::{
    DELETER_FLAG_WEAK, DLDataType, DLDevice, DLManagedTensorVersioned, DLPackVersion, DLTensor,
    DVMAny, DVMAnyPayload, DVMByteArray, DVMObject, KDL_CPU, type_index as ti,
};
use discovm::capi::{
    DVM_DEVICE_UNAVAILABLE, DVM_OK, DVM_VALUE_ERROR, dvm_any_release, dvm_func, dvm_func_call,
    dvm_tensor, dvm_tensor_dl, dvm_tensor_empty, dvm_tensor_free, dvm_tensor_from_dlpack,
    dvm_tensor_read, dvm_tensor_to_dlpack, dvm_tensor_write,
};
use discovm::device::cpu::HostTensor;
use discovm::net::{auth, routed};
use discovm::object::{
    AnyObject, Array, Bytes, Function, HostBlock, ObjectRef, Shape, Str, Tensor, tensor,
};
use discovm::session::node_board as board;
use discovm::wire::{Frame, HEADER_SIZE, Header, Limits, VERSION_MINOR};
use discovm::{Any, AnyView, ErrorKind};

/// Reads typed values off the front of the fuzz input; past its end every read is zero.
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    fn bytes(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.data.len());
        let (taken, rest) = self.data.split_at(n);
        self.data = rest;
        taken
    }

    fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let taken = self.bytes(N);
        out[..taken.len()].copy_from_slice(taken);
        out
    }

    fn u8(&mut self) -> u8 {
        self.array::<1>()[0]
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.array())
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array())
    }

    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.array())
    }

    fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    /// A number below `n` (`n` > 0).
    fn below(&mut self, n: usize) -> usize {
        usize::from(self.u16()) % n
    }

    fn pick<T: Copy>(&mut self, choices: &[T]) -> T {
        choices[self.below(choices.len())]
    }

    /// One of `choices`, or now and then whatever `other` reads.
    fn pick_or<T: Copy>(&mut self, choices: &[T], other: impl FnOnce(&mut Self) -> T) -> T {
        match self.below(choices.len() + 1) {
            i if i < choices.len() => choices[i],
            _ => other(self),
        }
    }

    /// Mostly small values, sometimes the extremes, sometimes anything.
    fn i64_skewed(&mut self, small: i64) -> i64 {
        match self.u8() % 8 {
            0 => i64::MAX,
            1 => i64::MIN,
            2 => -1,
            3 => self.u64() as i64,
            _ => i64::from(self.u8()) % small,
        }
    }

    /// A length for a byte string: every class the packed form treats differently.
    fn len(&mut self) -> usize {
        match self.u8() % 4 {
            0 => 7,
            1 => 8,
            2 => self.below(8),
            _ => self.below(64),
        }
    }
}

fn random_dtype(input: &mut Input<'_>) -> DLDataType {
    DLDataType::new(
        input.pick_or(&[0, 1, 2, 4, 5, 6, 17, 18], Input::u8),
        input.pick_or(&[0, 1, 4, 8, 16, 32, 64, 255], Input::u8),
        input.pick_or(&[0, 1, 2, 4, 65535], Input::u16),
    )
}

fn random_device(input: &mut Input<'_>) -> DLDevice {
    DLDevice {
        device_type: input.pick_or(&[KDL_CPU, KDL_CPU, 2, 3, 0, -1, 13], |i| i.u32() as i32),
        device_id: input.pick_or(&[0, 0, 1, -1], |i| i.u32() as i32),
    }
}

/// A DLTensor description and the arrays it points at.
struct Description {
    dl: DLTensor,
    /// The dims and strides `dl` points at: exactly as many as `ndim` says when it is in
    /// range, capped otherwise (the library must reject such an `ndim` before reading them).
    _arrays: (Vec<i64>, Option<Vec<i64>>),
}

/// A random description of a tensor over `buffer` (or NULL, or misaligned into it).
fn description(input: &mut Input<'_>, buffer: &mut [u8]) -> Description {
    let ndim = match input.u8() % 8 {
        0 => input.u32() as i32,
        1 => -1,
        2 => 65,
        _ => i32::from(input.u8() % 6),
    };
    let stored = usize::try_from(ndim).unwrap_or(0).min(70);
    let mut shape: Vec<i64> = (0..stored).map(|_| input.i64_skewed(5)).collect();
    let mut strides: Option<Vec<i64>> = input
        .bool()
        .then(|| (0..stored).map(|_| input.i64_skewed(9)).collect());
    let data = match input.u8() % 4 {
        0 => ptr::null_mut(),
        1 => buffer.as_mut_ptr().wrapping_add(input.below(buffer.len())),
        _ => buffer.as_mut_ptr(),
    };
    let byte_offset = match input.u8() % 4 {
        0 => input.u64(),
        1 => u64::MAX - u64::from(input.u8()),
        _ => u64::from(input.u8()),
    };
    let dl = DLTensor {
        data: data.cast(),
        device: random_device(input),
        ndim,
        dtype: random_dtype(input),
        shape: if stored > 0 {
            shape.as_mut_ptr()
        } else {
            input.pick(&[ptr::null_mut(), NonNull::dangling().as_ptr()])
        },
        strides: match &mut strides {
            Some(strides) if !strides.is_empty() => strides.as_mut_ptr(),
            _ => ptr::null_mut(),
        },
        byte_offset,
    };
    Description {
        dl,
        _arrays: (shape, strides),
    }
}

/// Whether the bytes a compact description spans lie inside `buffer`, so the target may read
/// and write them.
fn inside(dl: &DLTensor, nbytes: usize, buffer: &[u8]) -> bool {
    let start = buffer.as_ptr() as usize;
    let first = (dl.data as usize).checked_add(dl.byte_offset as usize);
    first.is_some_and(|first| {
        first >= start
            && first
                .checked_add(nbytes)
                .is_some_and(|end| end <= start + buffer.len())
    })
}

/// A managed tensor made by the target; its deleter counts its calls and frees it.
#[repr(C)]
struct Managed {
    managed: DLManagedTensorVersioned,
    description: Description,
}

unsafe extern "C" fn delete_managed(managed: *mut DLManagedTensorVersioned) {
    // SAFETY: made by Box in `dlpack_import`; its context is the counter, alive until the
    // target returns, and the deleter runs once.
    let managed = unsafe { Box::from_raw(managed.cast::<Managed>()) };
    // SAFETY: as above.
    let deletes = unsafe { &*managed.managed.manager_ctx.cast::<Cell<u32>>() };
    deletes.set(deletes.get() + 1);
}

/// DLPack import: `dvm_tensor_from_dlpack` with a random description, version and flags,
/// then the same description borrowed as a host DLTensor. An accepted tensor must describe
/// exactly what was given (its byte offset folded into the data pointer), read and write
/// where its bytes are real, export and import again, and run the producer's deleter once
/// when freed; a refused one must leave the managed tensor to its producer.
pub fn dlpack_import(data: &[u8]) {
    let mut input = Input::new(data);
    let mut buffer = vec![0u8; 256];
    for (i, b) in buffer.iter_mut().enumerate() {
        *b = i as u8;
    }
    let description = description(&mut input, &mut buffer);
    let dl = description.dl;

    // Borrowed, as copies to and from worker 0 receive a host tensor.
    // SAFETY: the arrays are as long as the description says; the data is not touched here.
    if let Ok(host) = unsafe { HostTensor::new(&dl) } {
        assert_eq!(
            host.ptr(),
            dl.data.cast::<u8>().wrapping_add(dl.byte_offset as usize)
        );
    }

    let deletes = Cell::new(0u32);
    let managed = Box::into_raw(Box::new(Managed {
        managed: DLManagedTensorVersioned {
            version: DLPackVersion {
                major: input.pick_or(&[1, 1, 0, 2], Input::u32),
                minor: input.u32(),
            },
            manager_ctx: (&raw const deletes).cast_mut().cast(),
            deleter: Some(delete_managed),
            // Bit 0 is DLPack's read-only flag; the others are defined or reserved.
            flags: input.u64(),
            dl_tensor: dl,
        },
        description,
    }))
    .cast::<DLManagedTensorVersioned>();
    // SAFETY: the box made above.
    let read_only = unsafe { (*managed).flags } & 1 != 0;

    let mut out: *mut dvm_tensor = ptr::null_mut();
    // SAFETY: a valid managed tensor whose arrays are as long as its description says.
    let status = unsafe { dvm_tensor_from_dlpack(managed, &mut out) };
    if status != DVM_OK {
        assert_eq!(status, DVM_VALUE_ERROR, "a refused import is a ValueError");
        assert!(out.is_null());
        assert_eq!(
            deletes.get(),
            0,
            "a refused import must not release the tensor"
        );
        // SAFETY: still ours; its deleter frees it.
        unsafe { delete_managed(managed) };
    } else {
        check_imported(out, &dl, read_only, &buffer);
        assert_eq!(deletes.get(), 0, "released while the tensor lives");
        // SAFETY: the reference the import gave.
        unsafe { dvm_tensor_free(out) };
    }
    assert_eq!(deletes.get(), 1, "the deleter must run exactly once");
}

fn check_imported(out: *mut dvm_tensor, given: &DLTensor, read_only: bool, buffer: &[u8]) {
    // SAFETY: a live tensor handle.
    let dl = unsafe { &*dvm_tensor_dl(out) };
    let ndim = usize::try_from(given.ndim).expect("an accepted ndim is not negative");
    assert_eq!(dl.ndim, given.ndim);
    assert_eq!((dl.dtype, dl.device), (given.dtype, given.device));
    assert_eq!(dl.byte_offset, 0);
    assert_eq!(
        dl.data.cast::<u8>(),
        given
            .data
            .cast::<u8>()
            .wrapping_add(given.byte_offset as usize)
    );
    // SAFETY: both describe `ndim` dims (and strides, when given).
    let (shape, given_shape) = unsafe { (slice(dl.shape, ndim), slice(given.shape, ndim)) };
    assert_eq!(shape, given_shape);
    if !given.strides.is_null() {
        // SAFETY: as above.
        assert_eq!(unsafe { slice(dl.strides, ndim) }, unsafe {
            slice(given.strides, ndim)
        });
    }

    // Touch the bytes only where the description says they are and they are real.
    let nbytes = tensor::compact_nbytes(shape, dl.dtype).expect("an accepted tensor has a size");
    if dl.device.device_type == KDL_CPU && dl.device.device_id == 0 && inside(given, nbytes, buffer)
    {
        let n = nbytes.min(16);
        let mut read = [0u8; 16];
        // SAFETY: a live handle and a 16-byte destination.
        let status = unsafe { dvm_tensor_read(out, read.as_mut_ptr().cast(), n) };
        // SAFETY: as above.
        let compact = unsafe { tensor::is_contiguous(dl) };
        if compact {
            assert_eq!(status, DVM_OK);
            // SAFETY: `n` bytes inside `buffer`, checked above.
            let real = unsafe { slice(dl.data.cast::<u8>().cast_const(), n) };
            assert_eq!(&read[..n], real);
            // SAFETY: as above.
            let status = unsafe { dvm_tensor_write(out, read.as_ptr().cast(), n) };
            assert_eq!(status == DVM_OK, !read_only);
        } else {
            assert_eq!(status, DVM_VALUE_ERROR, "a strided tensor cannot be read");
        }
    }

    // Export and import again: the export keeps the tensor alive until its deleter runs.
    let mut exported: *mut DLManagedTensorVersioned = ptr::null_mut();
    // SAFETY: a live handle.
    assert_eq!(unsafe { dvm_tensor_to_dlpack(out, &mut exported) }, DVM_OK);
    let mut again: *mut dvm_tensor = ptr::null_mut();
    // SAFETY: the export is a valid managed tensor.
    assert_eq!(
        unsafe { dvm_tensor_from_dlpack(exported, &mut again) },
        DVM_OK
    );
    // SAFETY: the reference the import gave; freeing it runs the export's deleter.
    unsafe { dvm_tensor_free(again) };
}

/// # Safety
/// `ptr` points at `n` values (any pointer when `n` is 0).
unsafe fn slice<'a, T>(ptr: *const T, n: usize) -> &'a [T] {
    if n == 0 {
        &[]
    } else {
        // SAFETY: as the caller promises.
        unsafe { std::slice::from_raw_parts(ptr, n) }
    }
}

/// An object of a type index the library has no cell for; its deleter frees it.
#[repr(C)]
struct Opaque {
    header: DVMObject,
}

unsafe extern "C" fn delete_opaque(object: *mut c_void, flags: i32) {
    if flags & DELETER_FLAG_WEAK != 0 {
        // SAFETY: made by Box in `opaque_object`; freed once, when no reference is left.
        drop(unsafe { Box::from_raw(object.cast::<Opaque>()) });
    }
}

fn opaque_object(type_index: i32) -> ObjectRef<AnyObject> {
    let object = Box::new(Opaque {
        header: DVMObject {
            combined_ref_count: AtomicU64::new(0x1_0000_0001),
            type_index,
            __padding: 0,
            deleter: Some(delete_opaque),
        },
    });
    // SAFETY: a fresh object with one strong reference, which passes to the ObjectRef.
    unsafe { ObjectRef::from_raw(NonNull::from(Box::leak(object)).cast()) }
}

/// What a packed value points at, kept alive (and owned) by the target until it checks the
/// library gave every reference back.
#[derive(Default)]
struct Kept {
    objects: Vec<ObjectRef<AnyObject>>,
    bytes: Vec<Vec<u8>>,
    array: Option<Box<DVMByteArray>>,
    /// A DLTensor with its arrays (its data points into `bytes`).
    description: Option<Box<Description>>,
    /// An ObjectRValueRef's slot, holding a reference of its own until the library takes it.
    slot: Option<Box<*mut DVMObject>>,
}

impl Kept {
    fn object(&mut self, object: ObjectRef<AnyObject>) -> DVMAnyPayload {
        let v_obj = object.as_ptr();
        self.objects.push(object);
        DVMAnyPayload { v_obj }
    }

    fn bytes(&mut self, bytes: Vec<u8>) -> *const u8 {
        let ptr = bytes.as_ptr();
        self.bytes.push(bytes);
        ptr
    }
}

fn echo() -> Function {
    Function::from_closure(|args| args[0].to_owned())
}

/// A random packed value: any type index, any length word; a payload that is what the type
/// index says (a live object of that type, a valid pointer or NULL) or, for the plain and
/// unknown kinds, random bytes.
fn packed(input: &mut Input<'_>, kept: &mut Kept) -> DVMAny {
    let type_index = match input.u8() % 4 {
        0 => input.u32() as i32,
        1 => 64 + i32::from(input.u8() % 16),
        _ => i32::from(input.u8() % 14),
    };
    let small_str_len = match input.u8() % 4 {
        0 => input.u32(),
        _ => u32::from(input.u8() % 10),
    };
    let random = DVMAnyPayload {
        v_uint64: input.u64(),
    };
    let null = DVMAnyPayload { v_uint64: 0 };
    let v = match type_index {
        ti::DL_TENSOR_PTR if input.bool() => null,
        ti::DL_TENSOR_PTR => {
            let mut buffer = vec![0u8; 64];
            let described = Box::new(description(input, &mut buffer));
            kept.bytes.push(buffer);
            let described = kept.description.insert(described);
            DVMAnyPayload {
                v_ptr: (&raw const described.dl).cast_mut().cast(),
            }
        }
        ti::RAW_STR if input.bool() => null,
        ti::RAW_STR => {
            let len = input.len();
            let mut text: Vec<u8> = input.bytes(len).iter().map(|&b| b.max(1)).collect();
            text.push(0);
            DVMAnyPayload {
                v_c_str: kept.bytes(text).cast(),
            }
        }
        ti::BYTE_ARRAY_PTR if input.bool() => null,
        ti::BYTE_ARRAY_PTR => {
            let len = input.len();
            let bytes = input.bytes(len).to_vec();
            let size = bytes.len();
            let data = if size == 0 && input.bool() {
                ptr::null()
            } else {
                kept.bytes(bytes)
            };
            let array = kept.array.insert(Box::new(DVMByteArray {
                data: data.cast(),
                size,
            }));
            DVMAnyPayload {
                v_ptr: (&raw const **array).cast_mut().cast(),
            }
        }
        ti::OBJECT_RVALUE_REF if input.bool() => null,
        ti::OBJECT_RVALUE_REF => {
            let object = if input.bool() {
                ptr::null_mut()
            } else {
                opaque_object(ti::OBJECT).into_raw().as_ptr()
            };
            let slot = kept.slot.insert(Box::new(object));
            DVMAnyPayload {
                v_ptr: (&raw mut **slot).cast(),
            }
        }
        index if index >= ti::STATIC_OBJECT_BEGIN => {
            if input.u8().is_multiple_of(8) {
                null
            } else {
                kept.object(object_of(index, input))
            }
        }
        _ => random,
    };
    DVMAny {
        type_index,
        small_str_len,
        v,
    }
}

/// At least 8 bytes: too long for the inline form.
fn heap_bytes(input: &mut Input<'_>) -> Vec<u8> {
    let len = input.len();
    let mut bytes = input.bytes(len).to_vec();
    bytes.resize(bytes.len().max(8), b'.');
    bytes
}

/// A live object whose type index is `index`: one the library makes for its own types, an
/// opaque one for the rest.
fn object_of(index: i32, input: &mut Input<'_>) -> ObjectRef<AnyObject> {
    let erase = |value: Any| match value {
        Any::Object(object) => object,
        other => other
            .view()
            .as_object()
            .expect("heap strings and byte strings are objects"),
    };
    match index {
        ti::STR => erase(Any::Str(Str::new(&heap_bytes(input)))),
        ti::BYTES => erase(Any::Bytes(Bytes::new(&heap_bytes(input)))),
        ti::SHAPE => {
            let dims: Vec<i64> = (0..input.below(5)).map(|_| input.i64_skewed(9)).collect();
            erase(Shape::new(&dims).into())
        }
        ti::ARRAY => {
            erase(Array::new((0..input.below(4)).map(|_| Any::Int(input.u64() as i64))).into())
        }
        ti::TENSOR => {
            let dims = [i64::from(input.u8() % 4)];
            erase(
                Tensor::empty(&dims, DLDataType::new(2, 32, 1), DLDevice::cpu())
                    .unwrap()
                    .into(),
            )
        }
        ti::FUNCTION => erase(echo().into()),
        // A dynamic index stays clear of the ones this library registers for its handles.
        index if index >= 128 => opaque_object(index.max(1 << 20)),
        index => opaque_object(index),
    }
}

/// Every accessor of a borrowed value: each gives a value or an error.
fn exercise(view: &AnyView<'_>) {
    let _ = view.validate();
    let _ = view.type_name();
    let _ = (
        view.as_i64(),
        view.as_bool(),
        view.as_f64(),
        view.as_opaque_ptr(),
    );
    let _ = (view.as_dtype(), view.as_device());
    let _ = (view.as_str_bytes(), view.as_str(), view.as_bytes());
    if let Ok(dl) = view.as_dltensor() {
        // SAFETY: the description's arrays are as long as it says; the data is not touched.
        let _ = unsafe { HostTensor::new(dl) };
    }
    let _ = (view.as_shape(), view.as_array(), view.as_tensor());
    if let Ok(f) = view.as_function() {
        let arg = Any::Int(7);
        assert!(matches!(f.call(&[arg.view()]), Ok(Any::Int(7))));
    }
    if let Ok(owned) = view.to_owned() {
        owned
            .view()
            .validate()
            .expect("an owned copy is a valid value");
        let type_index = owned.type_index();
        // SAFETY: `into_raw` gives an owned value that `from_raw` takes back.
        let back = unsafe { Any::from_raw(owned.into_raw()) }.expect("an owned value comes back");
        assert_eq!(back.type_index(), type_index);
    }
}

/// Packed values: a random 16-byte value decoded by every accessor, copied into an owned
/// value, and passed to a packed function from C. Inline strings with a length word past 7,
/// unknown type indices and NULL payloads must be errors; every reference the library takes
/// must come back.
pub fn packed_value(data: &[u8]) {
    let mut input = Input::new(data);
    let mut kept = Kept::default();
    let raw = packed(&mut input, &mut kept);
    // SAFETY: the payload is what the type index says, alive while `kept` is.
    let view = unsafe { AnyView::from_raw(raw) };
    exercise(&view);

    let echo = echo();
    let mut result = DVMAny::none();
    // SAFETY: a live function, one value, a writable result.
    let status = unsafe {
        dvm_func_call(
            echo.object().as_ptr().cast::<dvm_func>(),
            &raw,
            1,
            &mut result,
        )
    };
    if status == DVM_OK {
        // SAFETY: an owned result.
        assert_eq!(unsafe { dvm_any_release(&mut result) }, DVM_OK);
    }

    if let Some(slot) = kept.slot.take()
        && let Some(object) = NonNull::new(*slot)
    {
        // SAFETY: the slot's own reference, not taken by the library.
        drop(unsafe { ObjectRef::<AnyObject>::from_raw(object) });
    }
    for object in &kept.objects {
        assert_eq!(object.strong_count(), 1, "a reference was left behind");
    }
}

/// Dtypes and shapes: the readable name of any dtype, the size of any shape, and
/// `dvm_tensor_empty` on any device, which must allocate exactly the sizes the checks accept.
pub fn dtype(data: &[u8]) {
    let mut input = Input::new(data);
    let dtype = random_dtype(&mut input);
    let dims: Vec<i64> = (0..input.below(7)).map(|_| input.i64_skewed(64)).collect();
    let device = random_device(&mut input);
    assert!(!tensor::dtype_name(dtype).is_empty());
    let value = Any::DataType(dtype);
    assert_eq!(value.view().as_dtype().unwrap(), dtype);

    let size = tensor::compact_nbytes(&dims, dtype);
    let host = device == DLDevice::cpu();
    let mut out: *mut dvm_tensor = ptr::null_mut();
    match size {
        // Only sizes a fuzzer can afford to allocate over and over.
        Ok(nbytes) if nbytes > 1 << 16 => {}
        _ => {
            // SAFETY: `dims.len()` dims, a writable output.
            let status = unsafe {
                dvm_tensor_empty(dims.as_ptr(), dims.len() as i32, dtype, device, &mut out)
            };
            match (&size, host) {
                (Ok(_), true) => assert_eq!(status, DVM_OK),
                (Err(_), true) => assert_eq!(status, DVM_VALUE_ERROR),
                _ => assert!(
                    status == DVM_VALUE_ERROR
                        || status == DVM_DEVICE_UNAVAILABLE
                        || status == DVM_OK,
                    "status {status}"
                ),
            }
            if status == DVM_OK {
                // SAFETY: a live handle.
                let dl = unsafe { &*dvm_tensor_dl(out) };
                assert_eq!(
                    (dl.dtype, dl.device, dl.ndim as usize),
                    (dtype, device, dims.len())
                );
                // SAFETY: the tensor's own shape.
                assert_eq!(unsafe { slice(dl.shape, dims.len()) }, &dims[..]);
                // SAFETY: the reference the call gave.
                unsafe { dvm_tensor_free(out) };
            }
        }
    }
}

/// Wire frames: any bytes, decoded as one frame (with a 1 MiB bound on the payload). A refused
/// frame must be a `ValueError`. An accepted one must say what its header says, and encode to
/// the bytes it came from (but for the minor version, which becomes the writer's own), the
/// same in a vector and in a slot of its exact size; a slot one byte shorter must be refused.
pub fn wire_frame(data: &[u8]) {
    let limits = Limits {
        max_payload: 1 << 20,
    };
    // Where a receiver would place the frame, from the first half of its bytes.
    let placed = Frame::placement(&data[..data.len() / 2], &limits);
    let frame = match Frame::decode(data, &limits) {
        Ok(frame) => frame,
        Err(error) => {
            assert_eq!(error.kind, ErrorKind::Value, "{error}");
            return;
        }
    };
    let header = Header::parse(data, &limits).expect("the header of an accepted frame");
    assert_eq!(header.kind, frame.kind());
    assert_eq!(header.frame_len(), data.len());

    let mut again = Vec::new();
    let len = frame.encode(&mut again).expect("a decoded frame encodes");
    assert_eq!(len, data.len());
    assert_eq!(frame.encoded_len().expect("a decoded frame encodes"), len);
    assert_eq!(again[5], VERSION_MINOR);
    assert!(
        again[..5] == data[..5] && again[6..] == data[6..],
        "a decoded frame encodes to other bytes than it came from"
    );
    let mut slot = vec![0u8; len];
    assert_eq!(
        frame.encode_into(&mut slot).expect("a slot of its size"),
        len
    );
    assert_eq!(slot, again);
    assert_eq!(
        frame.encode_into(&mut slot[..len - 1]).unwrap_err().kind,
        ErrorKind::Value
    );

    // Gathered in a block where the receiver placed it, it is the same frame.
    let aligned = placed.map_or(0, |(placed_len, at)| {
        assert_eq!(placed_len, len, "the placement's length is the frame's");
        at
    });
    let shift = (64 - aligned % 64) % 64;
    let mut block = HostBlock::new(shift + len).expect("a block");
    block.as_mut_slice()[shift..].copy_from_slice(data);
    let in_block = Frame::decode_in_block(&Arc::new(block), shift..shift + len, &limits)
        .expect("a frame accepted from bytes is accepted from a block");
    let mut from_block = Vec::new();
    in_block
        .encode(&mut from_block)
        .expect("a decoded frame encodes");
    assert_eq!(from_block, again);
}

/// A stream whose reads come from the fuzz input and whose writes are kept.
struct Peer<'a> {
    input: &'a [u8],
    written: Vec<u8>,
}

impl std::io::Read for Peer<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.input.read(buf)
    }
}

impl std::io::Write for Peer<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.written.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The bytes a peer sends on a node's connection: first as a stranger's side of the
/// handshake, which the controller must refuse with a `ValueError` (nobody passes it without
/// the secret), having written at most its `Challenge`; then as routed messages after a
/// handshake, each of which must be read whole or refused, a frame's payload (or an upload)
/// never past the limit.
pub fn node_stream(data: &[u8]) {
    let mut stranger = Peer {
        input: data,
        written: Vec::new(),
    };
    let refused = auth::authenticate(&mut stranger, &auth::Secret::new(b"fuzz"))
        .err()
        .expect("a stranger never proves it holds the secret");
    assert_eq!(refused.kind, ErrorKind::Value, "{refused}");
    assert!(
        stranger.written.len() <= 80,
        "more than a Challenge was written"
    );

    let limits = Limits {
        max_payload: 1 << 20,
    };
    let mut input = data;
    loop {
        match routed::read(&mut input, &limits, Vec::new()) {
            Ok(message) => {
                assert!(message.frame.len() <= HEADER_SIZE + limits.max_payload);
                match message.what {
                    routed::What::Heartbeat => assert!(message.frame.is_empty()),
                    // An upload: a hash and a module, within the bound.
                    routed::What::Upload => {
                        assert!(message.frame.len() >= routed::HASH_SIZE);
                        assert!(message.frame.len() <= limits.max_payload);
                    }
                    // A board: its entries, or a refusal; entries read encode again to its bytes.
                    routed::What::Board => match board::decode(&message.frame) {
                        Ok(entries) => {
                            let mut again = Vec::new();
                            board::encode(&entries, &mut again);
                            assert_eq!(again, message.frame);
                        }
                        Err(error) => assert_eq!(error.kind, ErrorKind::Value, "{error}"),
                    },
                    // A signal: its fixed part and a text, within the bound.
                    routed::What::Signal => {
                        let most = routed::SIGNAL_FIXED + routed::MAX_SIGNAL_TEXT;
                        assert!((routed::SIGNAL_FIXED..=most).contains(&message.frame.len()));
                    }
                    // A trace message: its fixed part, then a body within the bound.
                    routed::What::Trace => {
                        assert!(message.frame.len() >= routed::TRACE_FIXED);
                        assert!(message.frame.len() <= limits.max_payload);
                    }
                    routed::What::Frame | routed::What::Death => {
                        let header = Header::parse(&message.frame, &limits).expect("checked");
                        assert_eq!(header.frame_len(), message.frame.len());
                        let _ = Frame::decode(&message.frame, &limits);
                    }
                }
            }
            Err(routed::ReadError::Bad(error)) => {
                assert_eq!(error.kind, ErrorKind::Value, "{error}");
                break;
            }
            Err(_) => break,
        }
    }
}
