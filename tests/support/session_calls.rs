//! Calls on a session as the session tests make them: owned arguments, results read as ints,
//! host tensors for copies to and from worker 0.

#![allow(dead_code)] // each test binary uses its own part of this module

use std::sync::Arc;

use discovm::Any;
use discovm::abi::{DLDataType, DLDevice, DLTensor, KDL_FLOAT};
use discovm::device::cpu::HostTensor;
use discovm::session::{DRef, Session, Target};

pub const F32: DLDataType = DLDataType::new(KDL_FLOAT, 32, 1);

/// Broadcasts a call of `func` with `args`; the call must be sent.
pub fn call(s: &Arc<Session>, func: &DRef, args: &[Any]) -> DRef {
    let views: Vec<_> = args.iter().map(Any::view).collect();
    s.call(Target::All, func, &views).expect("call is sent")
}

/// The int a value holds (anything else fails the test).
pub fn int(value: Any) -> i64 {
    match value {
        Any::Int(v) => v,
        other => panic!("expected an int, got {other:?}"),
    }
}

/// A compact float32 CPU tensor over `data`.
pub fn host_dl(data: &mut [f32], shape: &mut [i64]) -> DLTensor {
    DLTensor {
        data: data.as_mut_ptr().cast(),
        device: DLDevice::cpu(),
        ndim: shape.len() as i32,
        dtype: F32,
        shape: shape.as_mut_ptr(),
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    }
}

/// [`host_dl`] as the host side of a copy.
pub fn host_tensor(data: &mut [f32], shape: &mut [i64]) -> HostTensor {
    // SAFETY: the buffers outlive every copy in the tests.
    unsafe { HostTensor::new(&host_dl(data, shape)) }.unwrap()
}
