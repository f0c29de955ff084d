//! Shape objects: an immutable tuple of int64.

use super::any::Any;
use super::object_ref::{ObjectRef, alloc_object, object_cell};
use crate::abi::{DVMShapeCell, type_index as ti};

object_cell! {
    /// The cell of a Shape object (type 69).
    ShapeCell(DVMShapeCell) = ti::SHAPE
}

#[repr(C)]
struct ShapeBody {
    cell: DVMShapeCell,
    dims: Vec<i64>,
}

/// A Shape value.
#[derive(Clone, Debug)]
pub struct Shape(ObjectRef<ShapeCell>);

impl Shape {
    pub const TYPE_NAME: &'static str = "ffi.Shape";

    pub fn new(dims: &[i64]) -> Shape {
        let dims: Vec<i64> = dims.into();
        let cell = DVMShapeCell {
            data: dims.as_ptr(),
            size: dims.len(),
        };
        // SAFETY: ShapeBody starts with the shape cell.
        Shape(unsafe { alloc_object(ti::SHAPE, ShapeBody { cell, dims }).cast() })
    }

    pub fn from_object(object: ObjectRef<ShapeCell>) -> Shape {
        Shape(object)
    }

    pub fn object(&self) -> &ObjectRef<ShapeCell> {
        &self.0
    }

    pub fn as_slice(&self) -> &[i64] {
        let cell = &self.0.0;
        if cell.size == 0 {
            &[]
        } else {
            // SAFETY: a live Shape object's cell points at `size` dims.
            unsafe { std::slice::from_raw_parts(cell.data, cell.size) }
        }
    }
}

impl From<Shape> for Any {
    fn from(s: Shape) -> Any {
        Any::from(s.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_keeps_its_dims_and_travels_as_a_value() {
        let shape = Shape::new(&[2, 3, 4]);
        let value = Any::from(shape.clone());
        assert_eq!(value.type_index(), ti::SHAPE);
        assert_eq!(value.view().as_shape().unwrap().as_slice(), &[2, 3, 4]);
        assert!(Shape::new(&[]).as_slice().is_empty());
    }
}
