//! Property tests of the value model. Random values (every POD kind, strings and byte strings
//! of every length class, including exactly 7 and 8 bytes and bytes that are not UTF-8,
//! shapes, nested arrays, tensors, functions) survive each way a value crosses the 16-byte
//! packed form: given away and taken back (owned), lent and copied (borrowed), copied as raw
//! bytes, and passed through a packed call from C and returned (converted). Random sequences of
//! reference-count operations (strong and weak references, clones, upgrades, C-side
//! increments and decrements, trips through a packed value) destroy an object exactly when
//! its last strong reference goes and free it exactly when its last reference of either kind
//! goes, as its deleter reports.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use discovm::abi::{
    DELETER_FLAG_STRONG, DELETER_FLAG_WEAK, DLDataType, DLDevice, DVMAny, DVMByteArray, DVMObject,
    OBJECT_HEADER_SIZE, type_index as ti,
};
use discovm::capi::{DVM_OK, dvm_func, dvm_func_call, dvm_object_dec_ref, dvm_object_inc_ref};
use discovm::object::{
    AnyObject, Array, Bytes, Function, ObjectRef, Shape, Str, Tensor, WeakRef, tensor,
};
use discovm::{Any, AnyView};
use proptest::prelude::*;

/// A value to build, and what it must still be after a round trip.
#[derive(Clone, Debug)]
enum Spec {
    None,
    Int(i64),
    Bool(bool),
    Float(f64),
    OpaquePtr(usize),
    DataType(u8, u8, u16),
    Device(i32, i32),
    Str(Vec<u8>),
    Bytes(Vec<u8>),
    Shape(Vec<i64>),
    Array(Vec<Spec>),
    Tensor {
        shape: Vec<i64>,
        dtype: DLDataType,
        data: Vec<u8>,
    },
    /// A function that returns its tag.
    Function(i64),
}

/// Byte strings of every length class the packed form treats differently.
fn byte_string() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..=7),
        prop::collection::vec(any::<u8>(), 7..=7),
        prop::collection::vec(any::<u8>(), 8..=8),
        prop::collection::vec(any::<u8>(), 9..300),
        "\\PC{0,40}".prop_map(String::into_bytes),
    ]
}

/// Dtypes a host tensor can have, sub-byte and multi-lane ones included.
fn dtype() -> impl Strategy<Value = DLDataType> {
    prop::sample::select(vec![
        DLDataType::new(0, 8, 1),
        DLDataType::new(0, 32, 1),
        DLDataType::new(0, 4, 1),
        DLDataType::new(1, 64, 1),
        DLDataType::new(2, 16, 1),
        DLDataType::new(2, 32, 4),
        DLDataType::new(2, 64, 1),
        DLDataType::new(4, 16, 1),
        DLDataType::new(6, 8, 1),
        DLDataType::new(5, 64, 2),
    ])
}

fn tensor_spec() -> impl Strategy<Value = Spec> {
    (prop::collection::vec(0i64..5, 0..4), dtype()).prop_flat_map(|(shape, dtype)| {
        let nbytes = tensor::compact_nbytes(&shape, dtype).expect("a valid shape and dtype");
        prop::collection::vec(any::<u8>(), nbytes).prop_map(move |data| Spec::Tensor {
            shape: shape.clone(),
            dtype,
            data,
        })
    })
}

fn spec() -> impl Strategy<Value = Spec> {
    let leaf = prop_oneof![
        Just(Spec::None),
        any::<i64>().prop_map(Spec::Int),
        any::<bool>().prop_map(Spec::Bool),
        any::<u64>().prop_map(|bits| Spec::Float(f64::from_bits(bits))),
        any::<usize>().prop_map(Spec::OpaquePtr),
        (any::<u8>(), any::<u8>(), any::<u16>()).prop_map(|(c, b, l)| Spec::DataType(c, b, l)),
        (any::<i32>(), any::<i32>()).prop_map(|(t, i)| Spec::Device(t, i)),
        byte_string().prop_map(Spec::Str),
        byte_string().prop_map(Spec::Bytes),
        prop::collection::vec(any::<i64>(), 0..8).prop_map(Spec::Shape),
        tensor_spec(),
        any::<i64>().prop_map(Spec::Function),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop::collection::vec(inner, 0..6).prop_map(Spec::Array)
    })
}

/// Builds the value a spec describes.
fn make(spec: &Spec) -> Any {
    match spec {
        Spec::None => Any::None,
        Spec::Int(v) => Any::Int(*v),
        Spec::Bool(v) => Any::Bool(*v),
        Spec::Float(v) => Any::Float(*v),
        Spec::OpaquePtr(p) => Any::OpaquePtr(*p as *mut c_void),
        Spec::DataType(c, b, l) => Any::DataType(DLDataType::new(*c, *b, *l)),
        Spec::Device(t, i) => Any::Device(DLDevice {
            device_type: *t,
            device_id: *i,
        }),
        Spec::Str(bytes) => Any::Str(Str::new(bytes)),
        Spec::Bytes(bytes) => Any::Bytes(Bytes::new(bytes)),
        Spec::Shape(dims) => Shape::new(dims).into(),
        Spec::Array(items) => Array::new(items.iter().map(make)).into(),
        Spec::Tensor { shape, dtype, data } => {
            let t = Tensor::empty(shape, *dtype, DLDevice::cpu()).unwrap();
            // SAFETY: a fresh compact host tensor of exactly `data.len()` bytes.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), t.data_ptr(), data.len()) };
            t.into()
        }
        Spec::Function(tag) => {
            let tag = *tag;
            Function::from_closure(move |_| Ok(Any::Int(tag))).into()
        }
    }
}

/// The bytes a heap String or Bytes object's cell points at, with the byte after them.
fn heap_cell(view: &AnyView<'_>) -> (Vec<u8>, u8) {
    // SAFETY: the caller checked the type index is String or Bytes, whose cell is a byte array
    // that this library NUL-terminates.
    unsafe {
        let object = view.raw().v.v_obj.cast::<u8>();
        let cell = &*object.add(OBJECT_HEADER_SIZE).cast::<DVMByteArray>();
        let bytes = std::slice::from_raw_parts(cell.data.cast::<u8>(), cell.size + 1);
        (bytes[..cell.size].to_vec(), bytes[cell.size])
    }
}

/// Checks that `view` is what `spec` describes, through the typed accessors.
fn check(spec: &Spec, view: &AnyView<'_>) {
    view.validate().unwrap();
    match spec {
        Spec::None => assert_eq!(view.type_index(), ti::NONE),
        Spec::Int(v) => {
            assert_eq!(view.type_index(), ti::INT);
            assert_eq!(view.as_i64().unwrap(), *v);
            assert_eq!(view.as_f64().unwrap(), *v as f64);
        }
        Spec::Bool(v) => {
            assert_eq!(view.type_index(), ti::BOOL);
            assert_eq!(view.as_bool().unwrap(), *v);
            assert_eq!(view.as_i64().unwrap(), i64::from(*v));
        }
        Spec::Float(v) => {
            assert_eq!(view.type_index(), ti::FLOAT);
            assert_eq!(view.as_f64().unwrap().to_bits(), v.to_bits());
            assert!(view.as_i64().is_err());
        }
        Spec::OpaquePtr(p) => assert_eq!(view.as_opaque_ptr().unwrap() as usize, *p),
        Spec::DataType(c, b, l) => {
            assert_eq!(view.as_dtype().unwrap(), DLDataType::new(*c, *b, *l))
        }
        Spec::Device(t, i) => {
            let device = view.as_device().unwrap();
            assert_eq!((device.device_type, device.device_id), (*t, *i));
        }
        Spec::Str(bytes) | Spec::Bytes(bytes) => {
            let is_str = matches!(spec, Spec::Str(_));
            let got = if is_str {
                view.as_str_bytes().unwrap()
            } else {
                view.as_bytes().unwrap()
            };
            assert_eq!(got, &bytes[..]);
            assert_eq!(
                view.as_str().is_ok(),
                is_str && std::str::from_utf8(bytes).is_ok()
            );
            let (small, heap) = if is_str {
                (ti::SMALL_STR, ti::STR)
            } else {
                (ti::SMALL_BYTES, ti::BYTES)
            };
            if bytes.len() <= 7 {
                // Inline: the length in the header word, the bytes then zeros in the payload.
                assert_eq!(view.type_index(), small);
                assert_eq!(view.raw().small_str_len as usize, bytes.len());
                // SAFETY: small forms carry their bytes in the payload.
                let payload = unsafe { view.raw().v.v_bytes };
                assert_eq!(&payload[..bytes.len()], &bytes[..]);
                assert!(payload[bytes.len()..].iter().all(|&b| b == 0));
            } else {
                assert_eq!(view.type_index(), heap);
                assert_eq!(view.raw().small_str_len, 0);
                assert_eq!(heap_cell(view), (bytes.clone(), 0));
            }
        }
        Spec::Shape(dims) => assert_eq!(view.as_shape().unwrap().as_slice(), &dims[..]),
        Spec::Array(items) => {
            let array = view.as_array().unwrap();
            assert_eq!(array.items().len(), items.len());
            for (item, view) in items.iter().zip(array.items()) {
                check(item, view);
            }
        }
        Spec::Tensor { shape, dtype, data } => {
            let t = view.as_tensor().unwrap();
            assert_eq!(t.shape(), &shape[..]);
            assert_eq!(t.dl().dtype, *dtype);
            assert_eq!(t.nbytes(), data.len());
            // SAFETY: the tensor holds `nbytes` bytes.
            let bytes = unsafe { std::slice::from_raw_parts(t.data_ptr(), t.nbytes()) };
            assert_eq!(bytes, &data[..]);
            assert!(std::ptr::eq(view.as_dltensor().unwrap(), t.dl()));
        }
        Spec::Function(tag) => {
            let f = view.as_function().unwrap();
            assert!(matches!(f.call(&[]).unwrap(), Any::Int(v) if v == *tag));
        }
    }
}

/// The object a value holds, if any, and its strong count now.
fn strong_count(value: &Any) -> Option<u32> {
    match value {
        Any::Object(o) => Some(o.strong_count()),
        _ => value.view().as_object().ok().map(|o| o.strong_count() - 1),
    }
}

/// A function that returns an owned copy of its first argument.
fn echo() -> Function {
    Function::from_closure(|args| args[0].to_owned())
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config(1024))]

    /// Given away in packed form and taken back, a value is unchanged, and its object has no
    /// reference more or less.
    #[test]
    fn owned_round_trip(spec in spec()) {
        let value = make(&spec);
        let before = strong_count(&value);
        // SAFETY: `into_raw` gives an owned value that `from_raw` takes back.
        let back = unsafe { Any::from_raw(value.into_raw()) }.unwrap();
        check(&spec, &back.view());
        prop_assert_eq!(strong_count(&back), before);
    }

    /// Lent as a view and copied into an owned value, a value is unchanged; the copy shares
    /// the object and gives its reference back when dropped.
    #[test]
    fn borrowed_round_trip(spec in spec()) {
        let value = make(&spec);
        let before = strong_count(&value);
        let view = value.view();
        check(&spec, &view);
        let copy = view.to_owned().unwrap();
        check(&spec, &copy.view());
        // The same packed value: the same object (not a copy of it), or the same plain data.
        prop_assert_eq!(copy.view().raw().type_index, view.raw().type_index);
        // SAFETY: every payload can be read as its 8 bytes.
        prop_assert_eq!(unsafe { copy.view().raw().v.v_uint64 }, unsafe { view.raw().v.v_uint64 });
        drop(copy);
        prop_assert_eq!(strong_count(&value), before);
    }

    /// The 16 bytes of a packed value, copied as bytes, are the same value.
    #[test]
    fn raw_bytes_round_trip(spec in spec()) {
        let value = make(&spec);
        let raw: DVMAny = *value.view().raw();
        // SAFETY: DVMAny is 16 bytes of plain data.
        let bytes: [u8; 16] = unsafe { std::mem::transmute(raw) };
        // SAFETY: as above.
        let copied: DVMAny = unsafe { std::mem::transmute(bytes) };
        // SAFETY: the copy points at what `value` holds, which outlives the view.
        check(&spec, &unsafe { AnyView::from_raw(copied) });
    }

    /// Passed to a packed function from C and returned by it, a value is unchanged, and every
    /// reference the call took is given back.
    #[test]
    fn packed_call_round_trip(spec in spec()) {
        let echo = echo();
        let value = make(&spec);
        let before = strong_count(&value);
        let args = [*value.view().raw()];
        let mut result = DVMAny::none();
        // SAFETY: a live function handle, one valid argument, a writable result.
        let status = unsafe {
            dvm_func_call(echo.object().as_ptr().cast::<dvm_func>(), args.as_ptr(), 1, &mut result)
        };
        prop_assert_eq!(status, DVM_OK);
        // SAFETY: the call succeeded, so `result` is an owned value.
        let back = unsafe { Any::from_raw(result) }.unwrap();
        check(&spec, &back.view());
        drop(back);
        prop_assert_eq!(strong_count(&value), before);
    }

    /// Borrowed string forms (a C string, a byte array) are accepted as strings and become
    /// String or Bytes values when kept, with the same bytes.
    #[test]
    fn borrowed_string_forms_convert(bytes in byte_string()) {
        let array = DVMByteArray { data: bytes.as_ptr().cast(), size: bytes.len() };
        let raw = DVMAny {
            type_index: ti::BYTE_ARRAY_PTR,
            small_str_len: 0,
            v: discovm::abi::DVMAnyPayload { v_ptr: (&raw const array).cast_mut().cast() },
        };
        // SAFETY: the byte array and its bytes outlive the view.
        let view = unsafe { AnyView::from_raw(raw) };
        prop_assert_eq!(view.as_str_bytes().unwrap(), &bytes[..]);
        prop_assert_eq!(view.as_bytes().unwrap(), &bytes[..]);
        check(&Spec::Bytes(bytes.clone()), &view.to_owned().unwrap().view());
        if !bytes.contains(&0) {
            let mut c_string = bytes.clone();
            c_string.push(0);
            let raw = DVMAny {
                type_index: ti::RAW_STR,
                small_str_len: 0,
                v: discovm::abi::DVMAnyPayload { v_c_str: c_string.as_ptr().cast() },
            };
            // SAFETY: the C string outlives the view.
            let view = unsafe { AnyView::from_raw(raw) };
            prop_assert_eq!(view.as_str_bytes().unwrap(), &bytes[..]);
            check(&Spec::Str(bytes.clone()), &view.to_owned().unwrap().view());
        }
    }
}

/// What the deleter of a counted object has seen.
#[derive(Default)]
struct Counters {
    destroyed: AtomicU32,
    freed: AtomicU32,
}

/// An object whose deleter counts its calls.
#[repr(C)]
struct Counted {
    header: DVMObject,
    counters: Arc<Counters>,
}

unsafe extern "C" fn count_deleter(object: *mut c_void, flags: i32) {
    let counted = object.cast::<Counted>();
    // SAFETY: every object with this deleter is a boxed `Counted`; its memory is live until
    // the weak flag frees it, below.
    let counters = unsafe { (*counted).counters.clone() };
    if flags & DELETER_FLAG_STRONG != 0 {
        counters.destroyed.fetch_add(1, Ordering::SeqCst);
    }
    if flags & DELETER_FLAG_WEAK != 0 {
        counters.freed.fetch_add(1, Ordering::SeqCst);
        // SAFETY: the last reference of either kind is gone; the box is freed once.
        drop(unsafe { Box::from_raw(counted) });
    }
}

fn counted_object(counters: &Arc<Counters>) -> ObjectRef<AnyObject> {
    let object = Box::new(Counted {
        header: DVMObject {
            combined_ref_count: AtomicU64::new(0x1_0000_0001),
            type_index: ti::OBJECT,
            __padding: 0,
            deleter: Some(count_deleter),
        },
        counters: counters.clone(),
    });
    // SAFETY: a fresh object with one strong reference, which passes to the ObjectRef.
    unsafe { ObjectRef::from_raw(NonNull::from(Box::leak(object)).cast()) }
}

/// One step of a reference-count sequence; indices pick among the references held.
#[derive(Clone, Debug)]
enum Op {
    CloneStrong(usize),
    DropStrong(usize),
    Downgrade(usize),
    CloneWeak(usize),
    DropWeak(usize),
    Upgrade(usize),
    /// `dvm_object_inc_ref` from C, then the new reference is held.
    IncRefFromC(usize),
    /// A held reference given up with `dvm_object_dec_ref` from C.
    DecRefFromC(usize),
    /// A held reference moved into a value, through its packed form and back.
    ThroughPackedValue(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let i = 0usize..8;
    prop_oneof![
        i.clone().prop_map(Op::CloneStrong),
        i.clone().prop_map(Op::DropStrong),
        i.clone().prop_map(Op::Downgrade),
        i.clone().prop_map(Op::CloneWeak),
        i.clone().prop_map(Op::DropWeak),
        i.clone().prop_map(Op::Upgrade),
        i.clone().prop_map(Op::IncRefFromC),
        i.clone().prop_map(Op::DecRefFromC),
        i.prop_map(Op::ThroughPackedValue),
    ]
}

fn take<T>(held: &mut Vec<T>, i: usize) -> Option<T> {
    (!held.is_empty()).then(|| held.swap_remove(i % held.len()))
}

fn pick<T>(held: &[T], i: usize) -> Option<&T> {
    (!held.is_empty()).then(|| &held[i % held.len()])
}

/// Checks the deleter's counts and the header's counts against the references held.
fn check_counts(counters: &Counters, strong: &[ObjectRef<AnyObject>], weak: &[WeakRef<AnyObject>]) {
    let destroyed = counters.destroyed.load(Ordering::SeqCst);
    let freed = counters.freed.load(Ordering::SeqCst);
    assert_eq!(
        destroyed,
        u32::from(strong.is_empty()),
        "destroyed too early or twice"
    );
    assert_eq!(
        freed,
        u32::from(strong.is_empty() && weak.is_empty()),
        "freed too early or twice"
    );
    if let Some(any) = strong.first() {
        assert_eq!(any.strong_count() as usize, strong.len());
        assert_eq!(any.weak_count() as usize, weak.len() + 1);
    }
}

proptest! {
    #![proptest_config(config(4096))]

    /// Any sequence of reference operations destroys the object exactly when its last strong
    /// reference goes and frees it exactly when the last reference goes; a weak reference
    /// upgrades exactly while a strong one exists.
    #[test]
    fn reference_counts_free_exactly_once(ops in prop::collection::vec(op(), 0..64)) {
        let counters = Arc::new(Counters::default());
        let mut strong = vec![counted_object(&counters)];
        let mut weak: Vec<WeakRef<AnyObject>> = Vec::new();
        for op in ops {
            match op {
                Op::CloneStrong(i) => {
                    if let Some(r) = pick(&strong, i).cloned() {
                        strong.push(r);
                    }
                }
                Op::DropStrong(i) => drop(take(&mut strong, i)),
                Op::Downgrade(i) => {
                    if let Some(r) = pick(&strong, i) {
                        weak.push(r.downgrade());
                    }
                }
                Op::CloneWeak(i) => {
                    if let Some(w) = pick(&weak, i).cloned() {
                        weak.push(w);
                    }
                }
                Op::DropWeak(i) => drop(take(&mut weak, i)),
                Op::Upgrade(i) => {
                    if let Some(w) = pick(&weak, i) {
                        let upgraded = w.upgrade();
                        prop_assert_eq!(upgraded.is_some(), !strong.is_empty());
                        strong.extend(upgraded);
                    }
                }
                Op::IncRefFromC(i) => {
                    if let Some(r) = pick(&strong, i) {
                        let ptr = r.as_ptr();
                        // SAFETY: a live object; the new reference is held below.
                        prop_assert_eq!(unsafe { dvm_object_inc_ref(ptr.cast()) }, DVM_OK);
                        // SAFETY: the reference just added.
                        strong.push(unsafe { ObjectRef::from_raw(NonNull::new(ptr).unwrap()) });
                    }
                }
                Op::DecRefFromC(i) => {
                    if let Some(r) = take(&mut strong, i) {
                        // SAFETY: gives up the reference `r` held.
                        prop_assert_eq!(
                            unsafe { dvm_object_dec_ref(r.into_raw().as_ptr().cast()) },
                            DVM_OK
                        );
                    }
                }
                Op::ThroughPackedValue(i) => {
                    if let Some(r) = take(&mut strong, i) {
                        let raw = Any::from(r).into_raw();
                        // SAFETY: an owned value made just above.
                        let back = unsafe { Any::from_raw(raw) }.unwrap();
                        let Any::Object(r) = back else { panic!("expected an object") };
                        strong.push(r);
                    }
                }
            }
            check_counts(&counters, &strong, &weak);
        }
        drop(strong);
        drop(weak);
        prop_assert_eq!(counters.destroyed.load(Ordering::SeqCst), 1);
        prop_assert_eq!(counters.freed.load(Ordering::SeqCst), 1);
    }
}
