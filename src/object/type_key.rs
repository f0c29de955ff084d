//! Type keys and the indices of object types allocated at run time (128 and up).
//!
//! With libtvm_ffi in the process, indices come from its registry, so it knows every object
//! this library hands out (tvm-ffi looks up each object's type when it wraps one, and aborts on
//! an index it never gave). Without it, the library numbers its types itself, from 128.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use super::error::{Error, Result};
use super::libtvm_ffi;
use crate::abi::type_index as ti;

/// Every type key with its index, in the order they were first used.
static DYNAMIC_KEYS: Mutex<Vec<(&'static str, i32)>> = Mutex::new(Vec::new());
/// Whether some index was numbered here because libtvm_ffi was absent at the time.
static NUMBERED_HERE: AtomicBool = AtomicBool::new(false);

/// The index for `key`, allocated on first use; the same key always gets the same index.
pub fn dynamic_index(key: &'static str) -> i32 {
    let mut keys = DYNAMIC_KEYS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(&(_, index)) = keys.iter().find(|(k, _)| *k == key) {
        return index;
    }
    let index = match libtvm_ffi::get() {
        Some(host) => host.type_index(key),
        None => {
            // Once found, libtvm_ffi stays found: every key before this one was numbered here.
            NUMBERED_HERE.store(true, Ordering::Relaxed);
            ti::DYN_OBJECT_BEGIN + keys.len() as i32
        }
    };
    keys.push((key, index));
    index
}

/// Every type key given an index so far, in the order they were first used.
pub fn dynamic_keys() -> Vec<&'static str> {
    let keys = DYNAMIC_KEYS.lock().unwrap_or_else(PoisonError::into_inner);
    keys.iter().map(|(key, _)| *key).collect()
}

/// Fails if libtvm_ffi is in the process now but some object type was numbered before it came:
/// tvm-ffi would take those objects for others of its own types.
pub fn check_shared_with_libtvm_ffi() -> Result<()> {
    if NUMBERED_HERE.load(Ordering::Relaxed) && libtvm_ffi::get().is_some() {
        return Err(Error::runtime(
            "libtvm_ffi was loaded after this library had numbered its object types, so \
             tvm-ffi cannot tell them apart from its own: load tvm-ffi first",
        ));
    }
    Ok(())
}

/// A readable name for a type index, for error messages ("expected int but got ffi.String").
pub fn type_name(index: i32) -> String {
    let name = match index {
        ti::NONE => "None",
        ti::INT => "int",
        ti::BOOL => "bool",
        ti::FLOAT => "float",
        ti::OPAQUE_PTR => "void*",
        ti::DATA_TYPE => "DataType",
        ti::DEVICE => "Device",
        ti::DL_TENSOR_PTR => "DLTensor*",
        ti::RAW_STR => "const char*",
        ti::BYTE_ARRAY_PTR => "ByteArray*",
        ti::OBJECT_RVALUE_REF => "ObjectRValueRef",
        ti::SMALL_STR => "ffi.SmallStr",
        ti::SMALL_BYTES => "ffi.SmallBytes",
        ti::UNCHANGED => "Unchanged",
        ti::OBJECT => "ffi.Object",
        ti::STR => "ffi.String",
        ti::BYTES => "ffi.Bytes",
        ti::ERROR => "ffi.Error",
        ti::FUNCTION => "ffi.Function",
        ti::SHAPE => "ffi.Shape",
        ti::TENSOR => "ffi.Tensor",
        ti::ARRAY => "ffi.Array",
        ti::MAP => "ffi.Map",
        ti::MODULE => "ffi.Module",
        ti::OPAQUE_PY_OBJECT => "ffi.OpaquePyObject",
        ti::LIST => "ffi.List",
        ti::DICT => "ffi.Dict",
        ti::VISIT_INTERRUPT => "ffi.VisitInterrupt",
        ti::BIG_INT => "ffi.BigInt",
        dynamic if dynamic >= ti::DYN_OBJECT_BEGIN => {
            let keys = DYNAMIC_KEYS.lock().unwrap_or_else(PoisonError::into_inner);
            return match keys.iter().find(|(_, index)| *index == dynamic) {
                Some((key, _)) => (*key).to_string(),
                None => format!("object type {dynamic}"),
            };
        }
        other => return format!("unknown type index {other}"),
    };
    name.to_string()
}

/// Whether a value with this type index may appear in packed arguments.
pub fn is_known(index: i32) -> bool {
    (ti::NONE..=ti::UNCHANGED).contains(&index) || index >= ti::STATIC_OBJECT_BEGIN
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dynamic_indices_are_stable_per_key() {
        let a = dynamic_index("test.TypeKeyA");
        let b = dynamic_index("test.TypeKeyB");
        assert!(a >= ti::DYN_OBJECT_BEGIN && b >= ti::DYN_OBJECT_BEGIN);
        assert_ne!(a, b);
        assert_eq!(dynamic_index("test.TypeKeyA"), a);
        assert_eq!(type_name(a), "test.TypeKeyA");
        assert_eq!(type_name(ti::STR), "ffi.String");
        assert_eq!(type_name(42), "unknown type index 42");
    }
}
