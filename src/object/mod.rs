//! Owned values and the objects behind them.

mod any;
pub mod args;
mod array;
pub mod error;
mod function;
mod host_memory;
pub mod libtvm_ffi;
pub mod module;
mod object_ref;
pub mod registry;
mod shape;
mod string;
pub mod tensor;
pub mod type_key;

pub use any::{Any, AnyView};
pub use array::{Array, ArrayCell};
pub use error::{Error, ErrorKind, Result};
pub use function::{Function, FunctionCell};
pub use host_memory::HostBlock;
pub use module::{Module, ModuleCell};
pub(crate) use object_ref::alloc_object;
pub use object_ref::{AnyObject, ObjectRef, ObjectType, WeakRef, dec_ref, inc_ref};
pub use shape::{Shape, ShapeCell};
pub use string::{Bytes, BytesCell, Str, StrCell};
pub use tensor::{Tensor, TensorCell};
