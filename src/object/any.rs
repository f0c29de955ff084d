//! Owned values ([`Any`]) and borrowed ones ([`AnyView`]), with tvm-ffi's casting rules.

use std::ffi::{CStr, c_void};
use std::marker::PhantomData;
use std::ptr::NonNull;

use super::array::Array;
use super::error::{Error, Result};
use super::function::Function;
use super::object_ref::{AnyObject, ObjectRef};
use super::shape::Shape;
use super::string::{Bytes, BytesCell, SMALL_STR_MAX, Str, StrCell, byte_array_bytes};
use super::tensor::{Tensor, TensorCell};
use super::type_key::type_name;
use crate::abi::{
    DLDataType, DLDevice, DLTensor, DVMAny, DVMAnyPayload, DVMByteArray, DVMObject,
    OBJECT_HEADER_SIZE, type_index as ti,
};

/// An owned value. Objects other than strings and byte strings are held as untyped references;
/// the typed accessors of [`AnyView`] check their type.
#[derive(Clone, Debug)]
pub enum Any {
    None,
    Int(i64),
    Bool(bool),
    Float(f64),
    OpaquePtr(*mut c_void),
    DataType(DLDataType),
    Device(DLDevice),
    Str(Str),
    Bytes(Bytes),
    Object(ObjectRef<AnyObject>),
}

// SAFETY: every variant is Send + Sync except OpaquePtr, an address the user handed over and
// that this library never dereferences.
unsafe impl Send for Any {}
// SAFETY: as above.
unsafe impl Sync for Any {}

fn payload_of<T: Copy>(value: T) -> DVMAnyPayload {
    let mut payload = DVMAnyPayload { v_uint64: 0 };
    // SAFETY: every payload member is plain data of at most 8 bytes; unused bytes stay zero.
    unsafe { std::ptr::write((&raw mut payload).cast::<T>(), value) };
    payload
}

fn pod(type_index: i32, v: DVMAnyPayload) -> DVMAny {
    DVMAny {
        type_index,
        small_str_len: 0,
        v,
    }
}

impl Any {
    pub fn type_index(&self) -> i32 {
        self.raw_view().type_index
    }

    /// The packed form, borrowing any object from `self`.
    fn raw_view(&self) -> DVMAny {
        match self {
            Any::None => DVMAny::none(),
            Any::Int(v) => pod(ti::INT, payload_of(*v)),
            Any::Bool(v) => pod(ti::BOOL, payload_of(i64::from(*v))),
            Any::Float(v) => pod(ti::FLOAT, payload_of(*v)),
            Any::OpaquePtr(p) => pod(ti::OPAQUE_PTR, payload_of(*p)),
            Any::DataType(d) => pod(ti::DATA_TYPE, payload_of(*d)),
            Any::Device(d) => pod(ti::DEVICE, payload_of(*d)),
            Any::Str(s) => s.raw_view(),
            Any::Bytes(b) => b.raw_view(),
            Any::Object(o) => pod(o.type_index(), payload_of(o.as_ptr())),
        }
    }

    /// Borrows the value as a packed argument.
    pub fn view(&self) -> AnyView<'_> {
        AnyView {
            raw: self.raw_view(),
            _borrow: PhantomData,
        }
    }

    /// Gives the value away in packed form; the receiver owns any object reference.
    pub fn into_raw(self) -> DVMAny {
        let raw = self.raw_view();
        std::mem::forget(self);
        raw
    }

    /// Takes ownership of a packed value (a call's result, a stored value).
    ///
    /// # Safety
    /// `raw` is a valid owned value: an object index carries a live object with one reference
    /// that passes to the returned value.
    pub unsafe fn from_raw(raw: DVMAny) -> Result<Any> {
        // SAFETY: the caller vouches for the payload matching the type index.
        let view = unsafe { AnyView::from_raw(raw) };
        match raw.type_index {
            ti::DL_TENSOR_PTR | ti::RAW_STR | ti::BYTE_ARRAY_PTR | ti::OBJECT_RVALUE_REF => {
                Err(Error::type_error(format!(
                    "{} is a borrowed form and cannot be an owned value",
                    type_name(raw.type_index)
                )))
            }
            index if index >= ti::STATIC_OBJECT_BEGIN => {
                // SAFETY: the reference passes to us; NULL was rejected by `view.object`.
                Ok(Any::from_object(unsafe {
                    ObjectRef::from_raw(view.object_ptr()?)
                }))
            }
            _ => view.to_owned(),
        }
    }

    /// Wraps an object, recognising strings and byte strings.
    pub fn from_object(object: ObjectRef<AnyObject>) -> Any {
        let object = match object.downcast::<StrCell>() {
            Ok(s) => return Any::Str(Str::from_object(s)),
            Err(other) => other,
        };
        match object.downcast::<BytesCell>() {
            Ok(b) => Any::Bytes(Bytes::from_object(b)),
            Err(other) => Any::Object(other),
        }
    }
}

impl From<i64> for Any {
    fn from(v: i64) -> Self {
        Any::Int(v)
    }
}
impl From<bool> for Any {
    fn from(v: bool) -> Self {
        Any::Bool(v)
    }
}
impl From<f64> for Any {
    fn from(v: f64) -> Self {
        Any::Float(v)
    }
}
impl From<&str> for Any {
    fn from(v: &str) -> Self {
        Any::Str(Str::from(v))
    }
}
impl From<Str> for Any {
    fn from(v: Str) -> Self {
        Any::Str(v)
    }
}
impl From<DLDataType> for Any {
    fn from(v: DLDataType) -> Self {
        Any::DataType(v)
    }
}
impl From<DLDevice> for Any {
    fn from(v: DLDevice) -> Self {
        Any::Device(v)
    }
}
impl<T> From<ObjectRef<T>> for Any {
    fn from(object: ObjectRef<T>) -> Self {
        Any::from_object(object.erase())
    }
}

/// A borrowed packed value: an argument of a packed call.
#[repr(transparent)]
#[derive(Clone, Copy)]
pub struct AnyView<'a> {
    raw: DVMAny,
    _borrow: PhantomData<&'a ()>,
}

impl<'a> AnyView<'a> {
    /// # Safety
    /// `raw`'s payload matches its type index and whatever it points at outlives `'a`.
    pub unsafe fn from_raw(raw: DVMAny) -> Self {
        AnyView {
            raw,
            _borrow: PhantomData,
        }
    }

    /// Views `num_args` packed arguments.
    ///
    /// # Safety
    /// `args` points at `num_args` valid values that outlive `'a` (any pointer if 0).
    pub unsafe fn slice(args: *const DVMAny, num_args: usize) -> &'a [AnyView<'a>] {
        if num_args == 0 {
            &[]
        } else {
            // SAFETY: AnyView is a transparent DVMAny; the caller vouches for the array.
            unsafe { std::slice::from_raw_parts(args.cast::<AnyView<'a>>(), num_args) }
        }
    }

    /// Views a slice of packed values, as a callee sees its arguments.
    pub fn as_raw_slice(views: &[AnyView<'a>]) -> *const DVMAny {
        views.as_ptr().cast()
    }

    pub fn raw(&self) -> &DVMAny {
        &self.raw
    }

    pub fn type_index(&self) -> i32 {
        self.raw.type_index
    }

    /// The readable name of this value's type.
    pub fn type_name(&self) -> String {
        type_name(self.raw.type_index)
    }

    fn mismatch(&self, expected: &str) -> Error {
        Error::type_error(format!("expected {expected} but got {}", self.type_name()))
    }

    fn object_ptr(&self) -> Result<NonNull<DVMObject>> {
        // SAFETY: object indices carry `v_obj`.
        NonNull::new(unsafe { self.raw.v.v_obj }).ok_or_else(|| {
            Error::value(format!(
                "a {} value holds a NULL object pointer",
                self.type_name()
            ))
        })
    }

    /// Checks what a packed caller handed in: a known type index; inline bytes that fit the
    /// payload; a non-NULL pointer where the type needs one (the borrowed forms of strings,
    /// byte strings, tensors and objects); and an object whose own type is the one the value
    /// claims, so that nothing reads one kind of object as another.
    pub fn validate(&self) -> Result<()> {
        let index = self.raw.type_index;
        if !super::type_key::is_known(index) {
            return Err(Error::type_error(format!("unknown type index {index}")));
        }
        match index {
            ti::SMALL_STR | ti::SMALL_BYTES => {
                self.small_bytes()?;
            }
            // SAFETY: these forms carry `v_ptr`.
            ti::RAW_STR | ti::BYTE_ARRAY_PTR | ti::DL_TENSOR_PTR | ti::OBJECT_RVALUE_REF
                if unsafe { self.raw.v.v_ptr }.is_null() =>
            {
                return Err(self.null_pointer());
            }
            index if index >= ti::STATIC_OBJECT_BEGIN => {
                // SAFETY: the caller vouches for a live object behind a non-NULL pointer.
                let actual = unsafe { self.object_ptr()?.as_ref() }.type_index;
                if actual != index {
                    return Err(Error::type_error(format!(
                        "type index {index} ({}) does not match its object, a {}",
                        self.type_name(),
                        type_name(actual)
                    )));
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The error for a borrowed form (a pointer) that is NULL.
    fn null_pointer(&self) -> Error {
        Error::value(match self.raw.type_index {
            ti::OBJECT_RVALUE_REF => "an ObjectRValueRef value is NULL".to_string(),
            _ => format!("a {} value is NULL", self.type_name()),
        })
    }

    /// Validates each argument; an error names the first bad one as `name(position)` says.
    pub fn validate_all(args: &[AnyView<'_>], name: impl Fn(usize) -> String) -> Result<()> {
        for (position, arg) in args.iter().enumerate() {
            arg.validate().map_err(|e| e.context(name(position)))?;
        }
        Ok(())
    }

    /// An integer: accepts Int and Bool.
    pub fn as_i64(&self) -> Result<i64> {
        match self.raw.type_index {
            // SAFETY: Int and Bool carry `v_int64`.
            ti::INT | ti::BOOL => Ok(unsafe { self.raw.v.v_int64 }),
            _ => Err(self.mismatch("int")),
        }
    }

    /// A boolean: accepts Bool and Int (nonzero is true).
    pub fn as_bool(&self) -> Result<bool> {
        match self.raw.type_index {
            // SAFETY: Int and Bool carry `v_int64`.
            ti::INT | ti::BOOL => Ok(unsafe { self.raw.v.v_int64 } != 0),
            _ => Err(self.mismatch("bool")),
        }
    }

    /// A float: accepts Float, Int and Bool.
    pub fn as_f64(&self) -> Result<f64> {
        match self.raw.type_index {
            // SAFETY: Float carries `v_float64`.
            ti::FLOAT => Ok(unsafe { self.raw.v.v_float64 }),
            // SAFETY: Int and Bool carry `v_int64`.
            ti::INT | ti::BOOL => Ok(unsafe { self.raw.v.v_int64 } as f64),
            _ => Err(self.mismatch("float")),
        }
    }

    /// An opaque pointer: accepts OpaquePtr and None (NULL).
    pub fn as_opaque_ptr(&self) -> Result<*mut c_void> {
        match self.raw.type_index {
            // SAFETY: OpaquePtr carries `v_ptr`.
            ti::OPAQUE_PTR => Ok(unsafe { self.raw.v.v_ptr }),
            ti::NONE => Ok(std::ptr::null_mut()),
            _ => Err(self.mismatch("void*")),
        }
    }

    pub fn as_dtype(&self) -> Result<DLDataType> {
        match self.raw.type_index {
            // SAFETY: DataType carries `v_dtype`.
            ti::DATA_TYPE => Ok(unsafe { self.raw.v.v_dtype }),
            _ => Err(self.mismatch("DataType")),
        }
    }

    pub fn as_device(&self) -> Result<DLDevice> {
        match self.raw.type_index {
            // SAFETY: Device carries `v_device`.
            ti::DEVICE => Ok(unsafe { self.raw.v.v_device }),
            _ => Err(self.mismatch("Device")),
        }
    }

    fn small_bytes(&self) -> Result<&[u8]> {
        let len = self.raw.small_str_len as usize;
        if len > SMALL_STR_MAX {
            return Err(Error::value(format!(
                "a {} value claims {len} inline bytes (at most {SMALL_STR_MAX})",
                self.type_name()
            )));
        }
        // SAFETY: small forms keep their bytes inline in the payload.
        Ok(unsafe { &self.raw.v.v_bytes[..len] })
    }

    fn heap_bytes(&self) -> Result<&[u8]> {
        let object = self.object_ptr()?;
        // SAFETY: String and Bytes objects have a byte-array cell after the header.
        unsafe {
            let cell = &*object
                .as_ptr()
                .cast::<u8>()
                .add(OBJECT_HEADER_SIZE)
                .cast::<DVMByteArray>();
            Ok(byte_array_bytes(cell))
        }
    }

    fn byte_array_ptr(&self) -> Result<&[u8]> {
        // SAFETY: ByteArrayPtr carries `v_ptr` to a byte array.
        let array = unsafe { self.raw.v.v_ptr }.cast::<DVMByteArray>();
        if array.is_null() {
            return Err(self.null_pointer());
        }
        // SAFETY: the caller of the packed function vouches for the array.
        Ok(unsafe { byte_array_bytes(&*array) })
    }

    /// A string's bytes: accepts RawStr, ByteArrayPtr, SmallStr and Str.
    pub fn as_str_bytes(&self) -> Result<&[u8]> {
        match self.raw.type_index {
            ti::RAW_STR => {
                // SAFETY: RawStr carries `v_c_str`.
                let ptr = unsafe { self.raw.v.v_c_str };
                if ptr.is_null() {
                    return Err(self.null_pointer());
                }
                // SAFETY: RawStr is NUL-terminated by contract.
                Ok(unsafe { CStr::from_ptr(ptr) }.to_bytes())
            }
            ti::BYTE_ARRAY_PTR => self.byte_array_ptr(),
            ti::SMALL_STR => self.small_bytes(),
            ti::STR => self.heap_bytes(),
            _ => Err(self.mismatch("str")),
        }
    }

    /// A string as UTF-8 text.
    pub fn as_str(&self) -> Result<&str> {
        std::str::from_utf8(self.as_str_bytes()?)
            .map_err(|e| Error::value(format!("string argument is not valid UTF-8: {e}")))
    }

    /// A byte string: accepts ByteArrayPtr, SmallBytes and Bytes.
    pub fn as_bytes(&self) -> Result<&[u8]> {
        match self.raw.type_index {
            ti::BYTE_ARRAY_PTR => self.byte_array_ptr(),
            ti::SMALL_BYTES => self.small_bytes(),
            ti::BYTES => self.heap_bytes(),
            _ => Err(self.mismatch("bytes")),
        }
    }

    /// A tensor's DLTensor: accepts DLTensorPtr and Tensor.
    pub fn as_dltensor(&self) -> Result<&DLTensor> {
        let ptr = match self.raw.type_index {
            // SAFETY: DLTensorPtr carries `v_ptr`.
            ti::DL_TENSOR_PTR => unsafe { self.raw.v.v_ptr }.cast::<DLTensor>().cast_const(),
            ti::TENSOR => {
                // SAFETY: Tensor objects embed a DLTensor after the header.
                unsafe {
                    self.object_ptr()?
                        .as_ptr()
                        .cast::<u8>()
                        .add(OBJECT_HEADER_SIZE)
                }
                .cast()
            }
            _ => return Err(self.mismatch("Tensor")),
        };
        if ptr.is_null() {
            return Err(self.null_pointer());
        }
        // SAFETY: the packed caller vouches for the tensor for the call's duration.
        Ok(unsafe { &*ptr })
    }

    /// A new reference to the object this value holds.
    pub fn as_object(&self) -> Result<ObjectRef<AnyObject>> {
        if self.raw.type_index < ti::STATIC_OBJECT_BEGIN {
            return Err(self.mismatch("an object"));
        }
        // SAFETY: the value holds a live object for the call's duration; we add a reference.
        Ok(unsafe { ObjectRef::from_borrowed(self.object_ptr()?) })
    }

    fn typed_object<T: super::object_ref::ObjectType>(&self, what: &str) -> Result<ObjectRef<T>> {
        if self.raw.type_index != T::type_index() {
            return Err(self.mismatch(what));
        }
        self.as_object()?
            .downcast::<T>()
            .map_err(|_| self.mismatch(what))
    }

    pub fn as_function(&self) -> Result<Function> {
        Ok(Function::from_object(
            self.typed_object(Function::TYPE_NAME)?,
        ))
    }

    pub fn as_shape(&self) -> Result<Shape> {
        Ok(Shape::from_object(self.typed_object(Shape::TYPE_NAME)?))
    }

    pub fn as_array(&self) -> Result<Array> {
        Ok(Array::from_object(self.typed_object(Array::TYPE_NAME)?))
    }

    /// A Tensor object; one another library made is imported (see [`Tensor::from_object`]). A
    /// borrowed DLTensor* cannot be kept; use [`AnyView::as_dltensor`].
    pub fn as_tensor(&self) -> Result<Tensor> {
        Tensor::from_object(self.typed_object::<TensorCell>(Tensor::TYPE_NAME)?)
    }

    /// An owned copy: objects gain a reference, borrowed strings become String or Bytes values,
    /// and an ObjectRValueRef's object is moved out of its slot.
    pub fn to_owned(&self) -> Result<Any> {
        let raw = &self.raw;
        // SAFETY (each arm): the payload member read is the one the type index selects.
        Ok(match raw.type_index {
            ti::NONE => Any::None,
            ti::INT => Any::Int(unsafe { raw.v.v_int64 }),
            ti::BOOL => Any::Bool(unsafe { raw.v.v_int64 } != 0),
            ti::FLOAT => Any::Float(unsafe { raw.v.v_float64 }),
            ti::OPAQUE_PTR => Any::OpaquePtr(unsafe { raw.v.v_ptr }),
            ti::DATA_TYPE => Any::DataType(unsafe { raw.v.v_dtype }),
            ti::DEVICE => Any::Device(unsafe { raw.v.v_device }),
            ti::RAW_STR | ti::SMALL_STR => Any::Str(Str::new(self.as_str_bytes()?)),
            ti::BYTE_ARRAY_PTR | ti::SMALL_BYTES => Any::Bytes(Bytes::new(self.as_bytes()?)),
            ti::OBJECT_RVALUE_REF => {
                let slot = unsafe { raw.v.v_ptr }.cast::<*mut DVMObject>();
                if slot.is_null() {
                    return Err(self.null_pointer());
                }
                // SAFETY: the caller handed over the slot; taking its object empties it.
                let object = unsafe { std::mem::replace(&mut *slot, std::ptr::null_mut()) };
                let object = NonNull::new(object)
                    .ok_or_else(|| Error::value("an ObjectRValueRef slot is empty"))?;
                // SAFETY: the slot's reference is now ours.
                Any::from_object(unsafe { ObjectRef::from_raw(object) })
            }
            ti::DL_TENSOR_PTR => {
                return Err(Error::type_error(
                    "a borrowed DLTensor* cannot be kept; pass a Tensor object instead",
                ));
            }
            index if index >= ti::STATIC_OBJECT_BEGIN => Any::from_object(self.as_object()?),
            _ => return Err(self.mismatch("a known type")),
        })
    }
}

impl std::fmt::Debug for AnyView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AnyView({})", self.type_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn integer_accepts_int_and_bool_only() {
        assert_eq!(Any::Int(7).view().as_i64().unwrap(), 7);
        assert_eq!(Any::Bool(true).view().as_i64().unwrap(), 1);
        let err = Any::Float(1.5).view().as_i64().unwrap_err();
        assert_eq!(err.kind, ErrorKind::Type);
        assert_eq!(err.message, "expected int but got float");
    }

    #[test]
    fn float_accepts_float_int_and_bool() {
        assert_eq!(Any::Float(2.5).view().as_f64().unwrap(), 2.5);
        assert_eq!(Any::Int(-3).view().as_f64().unwrap(), -3.0);
        assert_eq!(Any::Bool(true).view().as_f64().unwrap(), 1.0);
        let err = Any::from("x").view().as_f64().unwrap_err();
        assert_eq!(err.message, "expected float but got ffi.SmallStr");
    }

    #[test]
    fn string_accepts_raw_byte_array_small_and_heap_forms() {
        let raw = c"raw text";
        // SAFETY: the C string outlives the view.
        let raw_view = unsafe { AnyView::from_raw(pod(ti::RAW_STR, payload_of(raw.as_ptr()))) };
        assert_eq!(raw_view.as_str().unwrap(), "raw text");
        let array = DVMByteArray {
            data: raw.as_ptr(),
            size: 3,
        };
        let array_ptr = &raw const array;
        // SAFETY: the byte array outlives the view.
        let array_view =
            unsafe { AnyView::from_raw(pod(ti::BYTE_ARRAY_PTR, payload_of(array_ptr))) };
        assert_eq!(array_view.as_str().unwrap(), "raw");
        assert_eq!(Any::from("small").view().as_str().unwrap(), "small");
        assert_eq!(
            Any::from("a heap string").view().as_str().unwrap(),
            "a heap string"
        );
        let err = Any::Int(1).view().as_str().unwrap_err();
        assert_eq!(err.message, "expected str but got int");
        // Owning a borrowed string copies it into a String value.
        assert!(
            matches!(raw_view.to_owned().unwrap(), Any::Str(s) if s.to_str().unwrap() == "raw text")
        );
    }

    #[test]
    fn owned_values_round_trip_through_the_packed_form() {
        for value in [
            Any::Int(-5),
            Any::Float(0.25),
            Any::from("abcdefghij"),
            Any::None,
        ] {
            let expected = format!("{value:?}");
            // SAFETY: into_raw gives an owned value that from_raw takes back.
            let back = unsafe { Any::from_raw(value.into_raw()) }.unwrap();
            assert_eq!(format!("{back:?}"), expected);
        }
    }

    #[test]
    fn borrowed_forms_cannot_be_owned_values() {
        let raw = pod(ti::RAW_STR, payload_of(c"x".as_ptr()));
        // SAFETY: a RawStr is rejected before anything is dereferenced as owned.
        let err = unsafe { Any::from_raw(raw) }.unwrap_err();
        assert_eq!(err.kind, ErrorKind::Type);
    }

    #[test]
    fn unknown_type_index_is_a_type_error() {
        // SAFETY: the payload is never dereferenced for an unknown index.
        let view = unsafe { AnyView::from_raw(pod(42, payload_of(0i64))) };
        let err = view.to_owned().unwrap_err();
        assert_eq!(
            err.message,
            "expected a known type but got unknown type index 42"
        );
    }
}
