//! Array objects: an immutable sequence of values.

use super::any::{Any, AnyView};
use super::object_ref::{ObjectRef, alloc_object, object_cell};
use crate::abi::{DVMAny, DVMSeqCell, type_index as ti};

object_cell! {
    /// The cell of an Array object (type 71).
    ArrayCell(DVMSeqCell) = ti::ARRAY
}

/// The items, kept in packed form so the cell can point at them (in a `Vec`, as `string.rs`
/// says why).
struct Items(Vec<DVMAny>);

impl Drop for Items {
    fn drop(&mut self) {
        for raw in self.0.iter() {
            // SAFETY: each item was made by `Any::into_raw` and is released once, here.
            drop(unsafe { Any::from_raw(*raw) });
        }
    }
}

#[repr(C)]
struct ArrayBody {
    cell: DVMSeqCell,
    items: Items,
}

/// An Array value.
#[derive(Clone, Debug)]
pub struct Array(ObjectRef<ArrayCell>);

impl Array {
    pub const TYPE_NAME: &'static str = "ffi.Array";

    pub fn new(values: impl IntoIterator<Item = Any>) -> Array {
        let mut items: Vec<DVMAny> = values.into_iter().map(Any::into_raw).collect();
        let len = items.len() as i64;
        let cell = DVMSeqCell {
            data: items.as_mut_ptr(),
            size: len,
            capacity: len,
            data_deleter: None,
        };
        // SAFETY: ArrayBody starts with the sequence cell.
        Array(unsafe {
            alloc_object(
                ti::ARRAY,
                ArrayBody {
                    cell,
                    items: Items(items),
                },
            )
            .cast()
        })
    }

    pub fn from_object(object: ObjectRef<ArrayCell>) -> Array {
        Array(object)
    }

    /// The items as borrowed values.
    pub fn items(&self) -> &[AnyView<'_>] {
        let cell = &self.0.0;
        // SAFETY: a live Array's cell points at `size` values it owns.
        unsafe { AnyView::slice(cell.data, usize::try_from(cell.size).unwrap_or(0)) }
    }
}

impl From<Array> for Any {
    fn from(a: Array) -> Any {
        Any::from(a.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_owns_its_items() {
        let inner = super::super::shape::Shape::new(&[1]);
        let array = Array::new([
            Any::Int(1),
            Any::from("a string of some length"),
            inner.clone().into(),
        ]);
        let items = array.items();
        assert_eq!(items.len(), 3);
        assert_eq!(items[0].as_i64().unwrap(), 1);
        assert_eq!(items[1].as_str().unwrap(), "a string of some length");
        assert_eq!(items[2].as_shape().unwrap().as_slice(), &[1]);
        assert_eq!(inner.object().strong_count(), 2);
        drop(array);
        assert_eq!(
            inner.object().strong_count(),
            1,
            "the array released its items"
        );
    }
}
