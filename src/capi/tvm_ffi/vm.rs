//! Entry points for streams and tensors.

use std::mem::ManuallyDrop;

use super::{Args, entry_point};
use crate::abi::DLDevice;
use crate::capi::stream::{dvm_stream, stream_arg};
use crate::capi::tensor::{dvm_tensor, tensor_arg};
use crate::object::{Any, AnyView, Bytes, ObjectRef, Result, Tensor};
use crate::vm::{self, Access, Stream, StreamCell, stream_handle};

/// The stream argument `i` holds, lent for the call.
fn stream(args: &Args<'_>, i: usize) -> Result<ManuallyDrop<ObjectRef<StreamCell>>> {
    let (stream, name) = args.handle::<dvm_stream>(i, "a stream")?;
    // SAFETY: an object argument, live for the call.
    unsafe { stream_arg(stream, &name) }
}

/// The tensor this library made that argument `i` holds, lent for the call.
fn tensor(args: &Args<'_>, i: usize) -> Result<ManuallyDrop<Tensor>> {
    let (tensor, name) = args.handle::<dvm_tensor>(i, "a tensor")?;
    // SAFETY: an object argument, live for the call.
    unsafe { tensor_arg(tensor, &name) }
}

entry_point! {
    /// `stream_new(device: Device) -> Stream`: as `dvm_stream_new`.
    __tvm_ffi_stream_new(args: ["device"]) {
        args.count(1, 1)?;
        let device = args.read(0, AnyView::as_device)?;
        Ok(stream_handle(Stream::new(device)?).into())
    }
}

entry_point! {
    /// `stream_sync(stream: Stream)`: as `dvm_stream_sync`.
    __tvm_ffi_stream_sync(args: ["stream"]) {
        args.count(1, 1)?;
        stream(&args, 0)?.0.sync()?;
        Ok(Any::None)
    }
}

entry_point! {
    /// `stream_wait(waiter: Stream, signaler: Stream)`: as `dvm_stream_wait`.
    __tvm_ffi_stream_wait(args: ["waiter", "signaler"]) {
        args.count(2, 2)?;
        let (waiter, signaler) = (stream(&args, 0)?, stream(&args, 1)?);
        waiter.0.wait_for(&signaler.0)?;
        Ok(Any::None)
    }
}

entry_point! {
    /// `tensor_empty(shape: list[int], dtype: DataType, device: Device = cpu) -> Tensor`: as
    /// `dvm_tensor_empty`.
    __tvm_ffi_tensor_empty(args: ["shape", "dtype", "device"]) {
        args.count(2, 3)?;
        let shape = args.ints(0)?;
        let dtype = args.read(1, AnyView::as_dtype)?;
        let device = args.device_or(2, DLDevice::cpu())?;
        Ok(crate::device::empty(&shape, dtype, device)?.into())
    }
}

entry_point! {
    /// `tensor_read(t: Tensor, nbytes: int) -> bytes`: as `dvm_tensor_read`, returning the
    /// first `nbytes` bytes of `t`.
    __tvm_ffi_tensor_read(args: ["t", "nbytes"]) {
        args.count(2, 2)?;
        let (tensor, nbytes) = (tensor(&args, 0)?, args.size(1)?);
        vm::check_access(&tensor, (nbytes, "nbytes"), Access::Read)?;
        let mut bytes = vec![0u8; nbytes];
        vm::read(&tensor, &mut bytes)?;
        Ok(Any::Bytes(Bytes::new(&bytes)))
    }
}

entry_point! {
    /// `tensor_write(t: Tensor, data: bytes)`: as `dvm_tensor_write`, writing `data` into the
    /// start of `t`.
    __tvm_ffi_tensor_write(args: ["t", "data"]) {
        args.count(2, 2)?;
        let tensor = tensor(&args, 0)?;
        let data = args.read(1, AnyView::as_bytes)?;
        vm::check_access(&tensor, (data.len(), "data"), Access::Write)?;
        vm::write(&tensor, data)?;
        Ok(Any::None)
    }
}

entry_point! {
    /// `tensor_copy(dst: Tensor, src: Tensor, stream: Stream)`: as `dvm_tensor_copy`.
    __tvm_ffi_tensor_copy(args: ["dst", "src", "stream"]) {
        args.count(3, 3)?;
        let (dst, src) = (tensor(&args, 0)?, tensor(&args, 1)?);
        stream(&args, 2)?.0.copy(&dst, &src)?;
        Ok(Any::None)
    }
}

entry_point! {
    /// `tensor_settle(t: Tensor)`: waits until every use of `t` queued so far, on any stream,
    /// has finished (on a GPU too), as `dvm_tensor_to_dlpack` does before it exports, so that
    /// tvm-ffi's own DLPack export of `t` (`__dlpack__`, which takes no part in the streams'
    /// ordering) finds its memory settled. A tensor made elsewhere is refused as by
    /// `tensor_read`: streams use only its import, which is the one to settle.
    __tvm_ffi_tensor_settle(args: ["t"]) {
        args.count(1, 1)?;
        let tensor = tensor(&args, 0)?;
        vm::settle(&tensor)?;
        Ok(Any::None)
    }
}

entry_point! {
    /// `tensor_from_dlpack(t: Tensor) -> Tensor`: a tensor of this library's over the memory of
    /// `t` (for a numpy array, the array's memory), as `dvm_tensor_from_dlpack` makes from a
    /// DLPack tensor; streams order its uses. A tensor this library made comes back as it is.
    __tvm_ffi_tensor_from_dlpack(args: ["t"]) {
        args.count(1, 1)?;
        Ok(args.read(0, AnyView::as_tensor)?.into())
    }
}
