//! Entry points for streams and tensors.

use std::mem::ManuallyDrop;

use super::{Args, entry_point};
use crate::abi::DLDevice;
use crate::capi::stream::{dvm_stream, stream_arg};
use crate::capi::tensor::{dvm_tensor, tensor_arg};
use crate::object::{Any, Bytes, ObjectRef, Result, Tensor};
use crate::vm::{self, Access, Stream, StreamCell, stream_handle};

/// The stream argument `i` holds, lent for the call.
fn stream(args: &Args<'_>, i: usize, name: &str) -> Result<ManuallyDrop<ObjectRef<StreamCell>>> {
    // SAFETY: an object argument, live for the call.
    unsafe { stream_arg(args.handle::<dvm_stream>(i, name, "a stream")?, name) }
}

/// The tensor this library made that argument `i` holds, lent for the call.
fn tensor(args: &Args<'_>, i: usize, name: &str) -> Result<ManuallyDrop<Tensor>> {
    // SAFETY: an object argument, live for the call.
    unsafe { tensor_arg(args.handle::<dvm_tensor>(i, name, "a tensor")?, name) }
}

/// A byte count that fits the address space.
fn nbytes(args: &Args<'_>, i: usize) -> Result<usize> {
    let n = args.int(i, "nbytes")?;
    usize::try_from(n).map_err(|_| crate::Error::value(format!("`nbytes` is negative ({n})")))
}

entry_point! {
    /// `stream_new(device: Device) -> Stream`: as `dvm_stream_new`.
    __tvm_ffi_stream_new(args) {
        args.count(1, 1)?;
        let device = super::argument(0, "device", || args.view(0).as_device())?;
        Ok(stream_handle(Stream::new(device)?).into())
    }
}

entry_point! {
    /// `stream_sync(stream: Stream)`: as `dvm_stream_sync`.
    __tvm_ffi_stream_sync(args) {
        args.count(1, 1)?;
        stream(&args, 0, "stream")?.0.sync()?;
        Ok(Any::None)
    }
}

entry_point! {
    /// `stream_wait(waiter: Stream, signaler: Stream)`: as `dvm_stream_wait`.
    __tvm_ffi_stream_wait(args) {
        args.count(2, 2)?;
        let (waiter, signaler) = (stream(&args, 0, "waiter")?, stream(&args, 1, "signaler")?);
        waiter.0.wait_for(&signaler.0)?;
        Ok(Any::None)
    }
}

entry_point! {
    /// `tensor_empty(shape: list[int], dtype: DataType, device: Device = cpu) -> Tensor`: as
    /// `dvm_tensor_empty`.
    __tvm_ffi_tensor_empty(args) {
        args.count(2, 3)?;
        let shape = args.ints(0, "shape")?;
        let dtype = super::argument(1, "dtype", || args.view(1).as_dtype())?;
        let device = args.device_or(2, "device", DLDevice::cpu())?;
        Ok(crate::device::empty(&shape, dtype, device)?.into())
    }
}

entry_point! {
    /// `tensor_read(t: Tensor, nbytes: int) -> bytes`: as `dvm_tensor_read`, returning the
    /// first `nbytes` bytes of `t`.
    __tvm_ffi_tensor_read(args) {
        args.count(2, 2)?;
        let (tensor, nbytes) = (tensor(&args, 0, "t")?, nbytes(&args, 1)?);
        vm::check_access(&tensor, (nbytes, "nbytes"), Access::Read)?;
        let mut bytes = vec![0u8; nbytes];
        vm::read(&tensor, &mut bytes)?;
        Ok(Any::Bytes(Bytes::new(&bytes)))
    }
}

entry_point! {
    /// `tensor_write(t: Tensor, data: bytes)`: as `dvm_tensor_write`, writing `data` into the
    /// start of `t`.
    __tvm_ffi_tensor_write(args) {
        args.count(2, 2)?;
        let tensor = tensor(&args, 0, "t")?;
        let data = super::argument(1, "data", || args.view(1).as_bytes())?;
        vm::check_access(&tensor, (data.len(), "data"), Access::Write)?;
        vm::write(&tensor, data)?;
        Ok(Any::None)
    }
}

entry_point! {
    /// `tensor_copy(dst: Tensor, src: Tensor, stream: Stream)`: as `dvm_tensor_copy`.
    __tvm_ffi_tensor_copy(args) {
        args.count(3, 3)?;
        let (dst, src) = (tensor(&args, 0, "dst")?, tensor(&args, 1, "src")?);
        stream(&args, 2, "stream")?.0.copy(&dst, &src)?;
        Ok(Any::None)
    }
}

entry_point! {
    /// `tensor_from_dlpack(t: Tensor) -> Tensor`: a tensor of this library's over the memory of
    /// `t` (for a numpy array, the array's memory), as `dvm_tensor_from_dlpack` makes from a
    /// DLPack tensor; streams order its uses. A tensor this library made comes back as it is.
    __tvm_ffi_tensor_from_dlpack(args) {
        args.count(1, 1)?;
        Ok(super::argument(0, "t", || args.view(0).as_tensor())?.into())
    }
}
