//! `#[repr(C)]` mirrors of the TVM-FFI value layout and of DLPack.
//!
//! Every size and offset here equals tvm-ffi 0.1.16's; the `const` asserts below fail the build
//! otherwise, and the hand-written `include/discovm_abi.h` asserts the same numbers in C.

mod dlpack;
mod value;

pub use dlpack::*;
pub use value::*;
