//! Strings and byte strings: inline up to 7 bytes (SmallStr / SmallBytes), heap objects beyond.

use std::ffi::c_char;

use super::object_ref::{ObjectRef, ObjectType, alloc_object, object_cell};
use crate::abi::{DVMAny, DVMAnyPayload, DVMByteArray, type_index as ti};

/// The most bytes a small string holds inline (one byte of the payload stays for the NUL).
pub const SMALL_STR_MAX: usize = 7;

object_cell! {
    /// The cell of a String object (type 65).
    StrCell(DVMByteArray) = ti::STR
}
object_cell! {
    /// The cell of a Bytes object (type 66).
    BytesCell(DVMByteArray) = ti::BYTES
}

/// Reads the bytes a byte-array cell points at.
///
/// # Safety
/// `cell.data` points at `cell.size` readable bytes (or `size` is 0).
pub(crate) unsafe fn byte_array_bytes(cell: &DVMByteArray) -> &[u8] {
    if cell.size == 0 {
        &[]
    } else {
        // SAFETY: the caller vouches for the pointer and the length.
        unsafe { std::slice::from_raw_parts(cell.data.cast(), cell.size) }
    }
}

/// A heap String or Bytes object made here: the cell, then the bytes it points at. (A `Vec`,
/// not a `Box`: moving a box into the object asserts that it is the only way to its bytes,
/// which invalidates the pointer the cell took before; the same holds for every object here
/// whose cell points into its own storage.)
#[repr(C)]
struct HeapBytes {
    cell: DVMByteArray,
    storage: Vec<u8>,
}

fn heap_object(type_index: i32, bytes: &[u8]) -> ObjectRef<HeapBytes> {
    let mut storage = Vec::with_capacity(bytes.len() + 1);
    storage.extend_from_slice(bytes);
    storage.push(0);
    let cell = DVMByteArray {
        data: storage.as_ptr().cast::<c_char>(),
        size: bytes.len(),
    };
    alloc_object(type_index, HeapBytes { cell, storage })
}

enum Repr<C> {
    Small { len: u8, bytes: [u8; 8] },
    Heap(ObjectRef<C>),
}

impl<C> Clone for Repr<C> {
    fn clone(&self) -> Self {
        match self {
            Repr::Small { len, bytes } => Repr::Small {
                len: *len,
                bytes: *bytes,
            },
            Repr::Heap(object) => Repr::Heap(object.clone()),
        }
    }
}

macro_rules! byte_string {
    ($name:ident, $cell:ident, $small_index:expr, $what:literal) => {
        #[doc = concat!("An owned ", $what, ": inline up to 7 bytes, a heap object beyond.")]
        #[derive(Clone)]
        pub struct $name(Repr<$cell>);

        impl $name {
            pub fn new(bytes: &[u8]) -> Self {
                if bytes.len() <= SMALL_STR_MAX {
                    let mut inline = [0u8; 8];
                    inline[..bytes.len()].copy_from_slice(bytes);
                    $name(Repr::Small {
                        len: bytes.len() as u8,
                        bytes: inline,
                    })
                } else {
                    let heap = heap_object(<$cell as ObjectType>::type_index(), bytes);
                    // SAFETY: HeapBytes starts with the byte-array cell.
                    $name(Repr::Heap(unsafe { heap.cast() }))
                }
            }

            pub fn from_object(object: ObjectRef<$cell>) -> Self {
                $name(Repr::Heap(object))
            }

            pub fn as_bytes(&self) -> &[u8] {
                match &self.0 {
                    Repr::Small { len, bytes } => &bytes[..*len as usize],
                    // SAFETY: a live String/Bytes object's cell points at its bytes.
                    Repr::Heap(object) => unsafe { byte_array_bytes(&object.0) },
                }
            }

            /// Whether the value is stored inline (the small form).
            pub fn is_small(&self) -> bool {
                matches!(self.0, Repr::Small { .. })
            }

            /// The value as a packed value that borrows from `self`.
            pub(crate) fn raw_view(&self) -> DVMAny {
                match &self.0 {
                    Repr::Small { len, bytes } => DVMAny {
                        type_index: $small_index,
                        small_str_len: u32::from(*len),
                        v: DVMAnyPayload { v_bytes: *bytes },
                    },
                    Repr::Heap(object) => DVMAny {
                        type_index: <$cell as ObjectType>::type_index(),
                        small_str_len: 0,
                        v: DVMAnyPayload {
                            v_obj: object.as_ptr(),
                        },
                    },
                }
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
            }
        }

        impl PartialEq for $name {
            fn eq(&self, other: &Self) -> bool {
                self.as_bytes() == other.as_bytes()
            }
        }
    };
}

byte_string!(Str, StrCell, ti::SMALL_STR, "string");
byte_string!(Bytes, BytesCell, ti::SMALL_BYTES, "byte string");

impl Str {
    /// The text, if it is UTF-8 (strings from C need not be).
    pub fn to_str(&self) -> crate::Result<&str> {
        std::str::from_utf8(self.as_bytes())
            .map_err(|e| crate::Error::value(format!("string is not valid UTF-8: {e}")))
    }
}

impl From<&str> for Str {
    fn from(text: &str) -> Self {
        Str::new(text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_form_up_to_seven_bytes_heap_beyond() {
        let small = Str::from("abcdefg");
        assert!(small.is_small());
        let raw = small.raw_view();
        assert_eq!(raw.type_index, ti::SMALL_STR);
        assert_eq!(raw.small_str_len, 7);
        // SAFETY: small strings keep their bytes inline.
        assert_eq!(unsafe { raw.v.v_bytes }, *b"abcdefg\0");

        let heap = Str::from("abcdefgh");
        assert!(!heap.is_small());
        assert_eq!(heap.raw_view().type_index, ti::STR);
        assert_eq!(heap.to_str().unwrap(), "abcdefgh");
        assert_eq!(Bytes::new(b"0123456789").raw_view().type_index, ti::BYTES);
        assert_eq!(Bytes::new(b"xy").raw_view().type_index, ti::SMALL_BYTES);
    }

    #[test]
    fn heap_strings_are_nul_terminated_for_c() {
        let heap = Str::from("a longer string");
        let Repr::Heap(object) = &heap.0 else {
            panic!("expected the heap form")
        };
        // SAFETY: the storage holds size + 1 bytes.
        let terminator = unsafe { *object.0.data.add(object.0.size) };
        assert_eq!(terminator, 0);
    }

    #[test]
    fn invalid_utf8_is_a_value_error() {
        let err = Str::new(&[0xff, 0xfe]).to_str().unwrap_err();
        assert_eq!(err.kind, crate::ErrorKind::Value);
    }
}
