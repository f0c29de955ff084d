//! How a parameter that worker 0 read reaches every worker of the session: each worker learns
//! first whether worker 0 has it, then the data moves in one collective (a scatter of its
//! shards, or a broadcast of the whole), over whatever communicator the session set up.
//!
//! The one idea: agree before moving. Worker 0 reads before any collective and then broadcasts
//! its outcome (nothing when it has the parameter; its error's kind and message when not), so
//! a worker 0 that cannot read never leaves the others waiting in the data's collective: they
//! fail with its error, each on its own call, and the communicator stays in step.

use crate::abi::{DLDataType, KDL_UINT};
use crate::ccl::Collective;
use crate::object::{Any, Error, ErrorKind, Result, Tensor, registry};
use crate::vm;
use crate::worker::WorkerInfo;
use crate::worker::builtins::worker_empty;

const U8: DLDataType = DLDataType::new(KDL_UINT, 8, 1);

/// Runs this worker's part of `collective` over the whole session (`in_group` false), with
/// Disco's arguments `(send, in_group, recv)`; `send` matters on worker 0 alone.
fn run(collective: Collective, send: Option<&Tensor>, recv: &Tensor) -> Result<()> {
    let send = send.map_or(Any::None, |t| t.clone().into());
    let recv = Any::from(recv.clone());
    registry::get_global(collective.name())?.call(&[
        send.view(),
        Any::Bool(false).view(),
        recv.view(),
    ])?;
    Ok(())
}

/// `bytes` from worker 0 to every worker, through a tensor on the workers' device (where the
/// communicator wants its buffers); `bytes` is worker 0's, and its length every worker's.
fn broadcast_bytes(info: &WorkerInfo, bytes: &[u8], len: usize) -> Result<Vec<u8>> {
    let tensor = worker_empty(&[len as i64], U8, info.device)?;
    if info.id == 0 {
        vm::write(&tensor, bytes)?;
    }
    run(Collective::Broadcast, Some(&tensor), &tensor)?;
    let mut out = vec![0u8; len];
    vm::read(&tensor, &mut out)?;
    Ok(out)
}

/// Worker 0's `outcome` made every worker's: Ok everywhere when worker 0's is Ok; else worker
/// 0's error on worker 0 and, with its kind and message, on every other worker. The others'
/// `outcome` is not looked at: pass Ok.
pub(super) fn agree(info: &WorkerInfo, outcome: Result<()>) -> Result<()> {
    let text = match &outcome {
        Err(error) if info.id == 0 => format!("{}\n{}", error.kind.name(), error.message),
        _ => String::new(),
    };
    // First its length (0: worker 0 has the parameter), then the text.
    let len = broadcast_bytes(info, &(text.len() as u64).to_ne_bytes(), 8)?;
    let len = u64::from_ne_bytes(len.try_into().expect("eight bytes"));
    if len == 0 {
        return Ok(());
    }
    let text = broadcast_bytes(info, text.as_bytes(), len as usize)?;
    if info.id == 0 {
        return outcome;
    }
    let text = String::from_utf8_lossy(&text);
    let (kind, message) = text.split_once('\n').unwrap_or(("RuntimeError", &text));
    Err(Error::new(
        ErrorKind::from_name(kind),
        format!("worker 0 failed: {message}"),
    ))
}

/// Worker 0's `whole` (None elsewhere) cut along its first dimension, one part per worker in
/// order, into every worker's `part`.
pub(super) fn scatter(whole: Option<&Tensor>, part: &Tensor) -> Result<()> {
    run(Collective::Scatter, whole, part)
}

/// Worker 0's `tensor` copied into every other worker's `tensor`.
pub(super) fn broadcast(tensor: &Tensor) -> Result<()> {
    run(Collective::Broadcast, Some(tensor), tensor)
}
