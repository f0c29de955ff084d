//! discovm: a runtime that drives worker threads and devices from one controller, behind a C ABI.
//!
//! Packed values use the binary layout of Apache TVM's FFI (16-byte tagged values, ref-counted
//! objects with a 24-byte header, DLPack tensors), so functions and tensors cross into that
//! ecosystem unchanged. The layers, from the bottom up:
//!
//! - [`abi`]: `#[repr(C)]` mirrors of the value, object and DLPack layouts, with layout asserts.
//! - `sync`: the primitives of the lock-free protocols: the standard library's, or loom's.
//! - [`object`]: owned values ([`object::Any`], [`object::ObjectRef`]), strings, shapes,
//!   tensors, functions, the global function registry and the error type.
//! - [`device`]: host memory, CUDA, and NCCL and Gloo loaded at run time.
//! - [`channel`]: the lock-free queue between threads, the shared-memory rings, and how a
//!   waiting thread waits (a short spin, then yields, then parks) and when it gives up
//!   (`Deadline`), shared by every layer above.
//! - [`vm`]: streams, ordered copies and callbacks, dependence tracking, small-memory access.
//! - [`wire`]: the encoding of values and messages that cross to worker processes and nodes.
//! - [`net`]: between machines: the handshake that keeps strangers out, and routed frames.
//! - `os`: starting worker programs, ending them, and hearing of each death as it happens.
//! - [`worker`]: what runs on a worker, whatever hosts it: messages in order, the register
//!   file, the built-ins, modules, and the dispatchers code TVM compiled calls.
//! - [`ccl`]: the collectives between workers: the CPU protocol, the hierarchy across
//!   machines, and the NCCL and Gloo backends.
//! - [`weights`]: loading a model's weights onto the workers: Disco's loader built-ins over the
//!   tensor cache TVM and MLC write, each parameter scattered, broadcast or read presharded.
//! - [`session`]: the controller: options, sessions of worker threads, worker processes or
//!   nodes, DRefs, and the link to each worker (a node's relay included).
//! - `capi`: the `extern "C"` boundary; thin, catches panics, stores errors per thread. Its
//!   `dvm_*` functions are the C API; its `__tvm_ffi_*` functions make the library a tvm-ffi
//!   module (`TVM_FFI.md`).
//!
//! A module imports only from the layers listed before its own (`tests/layers.rs` checks).

// Model-checking builds (`--cfg loom`) compile the crate for its models, without worker
// processes: what only those use goes unused there.
#![cfg_attr(loom, allow(dead_code, unused_variables))]

/// cbindgen:ignore
pub mod abi;
pub mod capi;
/// cbindgen:ignore
pub mod ccl;
/// cbindgen:ignore
pub mod channel;
/// cbindgen:ignore
pub mod device;
/// cbindgen:ignore
pub mod net;
/// cbindgen:ignore
pub mod object;
/// cbindgen:ignore
#[cfg(not(loom))]
mod os;
/// cbindgen:ignore
pub mod session;
/// cbindgen:ignore
mod sync;
/// cbindgen:ignore
pub mod vm;
/// cbindgen:ignore
pub mod weights;
/// cbindgen:ignore
pub mod wire;
/// cbindgen:ignore
pub mod worker;

pub use object::{Any, AnyView, Error, ErrorKind, Result};

/// The type keys of every kind of object the library hands out, each given its type index now
/// (libtvm_ffi's, when it is in the process).
pub fn object_type_keys() -> Vec<&'static str> {
    use object::ObjectType;
    let _ = (
        session::DRefCell::type_index(),
        session::SessionCell::type_index(),
        session::WorkerCell::type_index(),
        object::module::ModuleCell::type_index(),
        vm::StreamCell::type_index(),
        weights::ShardLoaderCell::type_index(),
    );
    object::type_key::dynamic_keys()
}
