//! Objects and values: reference counts, strings, byte strings, shapes.

use std::ffi::{c_char, c_void};

use super::{boundary, dvm_status, non_null, write_out};
use crate::abi::{DVMAny, DVMObject};
use crate::object::{Any, Bytes, Shape, Str, dec_ref, inc_ref};

/// Adds a reference to any object (every handle of this library is one).
///
/// Errors: `ValueError` if `obj` is NULL.
/// Undefined: `obj` that is not a live object (its last reference dropped, or memory
/// that holds no object header).
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_object_inc_ref(obj: *mut c_void) -> dvm_status {
    boundary(|| {
        let obj = non_null(obj.cast::<DVMObject>(), "obj")?;
        // SAFETY: the caller holds a reference to a live object.
        unsafe { inc_ref(obj) };
        Ok(())
    })
}

/// Drops a reference; the object is destroyed when the last one goes.
///
/// Errors: `ValueError` if `obj` is NULL.
/// Undefined: dropping a reference the caller does not own; `obj` that is not a live
/// object.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_object_dec_ref(obj: *mut c_void) -> dvm_status {
    boundary(|| {
        let obj = non_null(obj.cast::<DVMObject>(), "obj")?;
        // SAFETY: the caller gives up a reference it owns.
        unsafe { dec_ref(obj) };
        Ok(())
    })
}

/// Releases an owned value: drops its object reference, if any, and sets it to None.
///
/// Errors: `ValueError` if `value` is NULL.
/// Undefined: `value` that does not own what it holds (a borrowed value, or one
/// already released through a copy of it).
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_any_release(value: *mut DVMAny) -> dvm_status {
    boundary(|| {
        let value = non_null(value, "value")?;
        // SAFETY: the caller owns the value; reading it and writing None gives it up.
        unsafe {
            let owned = value.as_ptr().replace(DVMAny::none());
            if owned.type_index >= crate::abi::type_index::STATIC_OBJECT_BEGIN
                && let Some(obj) = std::ptr::NonNull::new(owned.v.v_obj)
            {
                dec_ref(obj);
            }
        }
        Ok(())
    })
}

/// Copies `len` bytes into a string value: SmallStr up to 7 bytes, a String object beyond.
///
/// Ownership: `*out` is owned by the caller; release it with `dvm_any_release`.
/// Errors: `ValueError` if `out` is NULL, or `data` is NULL while `len > 0`.
/// Undefined: `data` with fewer than `len` readable bytes.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_string_new(
    data: *const c_char,
    len: usize,
    out: *mut DVMAny,
) -> dvm_status {
    boundary(|| {
        let out = non_null(out, "out")?;
        // SAFETY: the caller vouches for `len` readable bytes.
        let bytes = unsafe { byte_slice(data, len) }?;
        // SAFETY: checked non-NULL above.
        unsafe { write_out(out, Any::Str(Str::new(bytes)).into_raw()) };
        Ok(())
    })
}

/// Copies `len` bytes into a byte-string value: SmallBytes up to 7 bytes, a Bytes object beyond.
///
/// Ownership: `*out` is owned by the caller; release it with `dvm_any_release`.
/// Errors: `ValueError` if `out` is NULL, or `data` is NULL while `len > 0`.
/// Undefined: `data` with fewer than `len` readable bytes.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_bytes_new(
    data: *const c_void,
    len: usize,
    out: *mut DVMAny,
) -> dvm_status {
    boundary(|| {
        let out = non_null(out, "out")?;
        // SAFETY: the caller vouches for `len` readable bytes.
        let bytes = unsafe { byte_slice(data.cast(), len) }?;
        // SAFETY: checked non-NULL above.
        unsafe { write_out(out, Any::Bytes(Bytes::new(bytes)).into_raw()) };
        Ok(())
    })
}

/// Copies `ndim` dimensions into a Shape object value.
///
/// Ownership: `*out` is owned by the caller; release it with `dvm_any_release`.
/// Errors: `ValueError` if `out` is NULL, `ndim` is negative, or `dims` is NULL while `ndim > 0`.
/// Undefined: `dims` with fewer than `ndim` values.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_shape_new(
    dims: *const i64,
    ndim: i32,
    out: *mut DVMAny,
) -> dvm_status {
    boundary(|| {
        let out = non_null(out, "out")?;
        // SAFETY: the caller vouches for `ndim` readable dims.
        let dims = unsafe { count_slice(dims, ndim, "dims", "ndim") }?;
        // SAFETY: checked non-NULL above.
        unsafe { write_out(out, Any::from(Shape::new(dims)).into_raw()) };
        Ok(())
    })
}

/// `len` bytes at `data`; NULL is fine when `len` is 0.
///
/// # Safety
/// `data` points at `len` readable bytes when not NULL.
unsafe fn byte_slice<'a>(data: *const c_char, len: usize) -> crate::Result<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    let data = non_null(data, "data")?;
    // SAFETY: as the caller promises.
    Ok(unsafe { std::slice::from_raw_parts(data.as_ptr().cast(), len) })
}

/// `count` items at `ptr`, checking the count's sign and the pointer.
///
/// # Safety
/// `ptr` points at `count` readable items when `count > 0`.
pub(crate) unsafe fn count_slice<'a, T>(
    ptr: *const T,
    count: i32,
    name: &str,
    count_name: &str,
) -> crate::Result<&'a [T]> {
    let count = usize::try_from(count)
        .map_err(|_| crate::Error::value(format!("`{count_name}` is negative ({count})")))?;
    if count == 0 {
        return Ok(&[]);
    }
    let ptr = non_null(ptr, name)?;
    // SAFETY: as the caller promises.
    Ok(unsafe { std::slice::from_raw_parts(ptr.as_ptr(), count) })
}
