//! Instructions: what a stream runs, and how a failure poisons what depends on it.

use std::sync::Arc;

use super::dependence::{TensorDeps, Use, Waits};
use super::stream::StreamCore;
use crate::device::{DeviceStream, MemPtr};
use crate::object::{Any, AnyView, Error, Function, Result, Tensor};

/// Host memory the submitter vouched for (see the `unsafe` copy functions of `Stream`).
pub(crate) struct HostPtr(pub *mut u8);

// SAFETY: the submitter promised the memory stays valid and untouched until the copy finished.
unsafe impl Send for HostPtr {}

/// An operand of a callback (or device work) run on a stream: a tensor it reads or writes, which
/// orders it after the tensor's earlier uses, or any other value, passed as it is.
pub enum Operand {
    /// A tensor the callback only reads.
    Read(Tensor),
    /// A tensor the callback writes (and may read).
    Write(Tensor),
    /// A tensor the callback writes whole, without reading it: ordered as a write, but an
    /// earlier failure that poisoned it does not skip the callback, whose success clears it.
    Overwrite(Tensor),
    /// Any other value.
    Value(Any),
}

/// Work a library issues on the device stream underneath a VM stream (a collective library
/// enqueues on the CUDA stream), run in the stream's order like a callback (see
/// `Stream::launch` for how failures differ).
pub type DeviceWork = Box<dyn Fn(&dyn DeviceStream) -> Result<()> + Send>;

/// What a call instruction runs.
pub(crate) enum Body {
    Function(Function),
    Device(DeviceWork),
}

pub(crate) enum Op {
    /// Tensor to tensor, `nbytes` each (checked equal when submitted).
    Copy {
        dst: Tensor,
        src: Tensor,
        nbytes: usize,
    },
    /// Tensor to host memory.
    ToHost {
        src: Tensor,
        dst: HostPtr,
        nbytes: usize,
    },
    /// Host memory to tensor.
    FromHost {
        dst: Tensor,
        src: HostPtr,
        nbytes: usize,
    },
    /// A packed function, or device work, with its arguments.
    Call { body: Body, args: Vec<Operand> },
    /// Nothing but the waits (a cross-stream wait).
    Mark,
}

pub(crate) struct Instruction {
    pub stream: Arc<StreamCore>,
    pub seq: u64,
    pub waits: Waits,
    pub op: Op,
}

/// The error of the first poisoned tensor among `tensors`.
fn first_poison<'a>(tensors: impl IntoIterator<Item = &'a Tensor>) -> Option<Error> {
    tensors.into_iter().find_map(|t| TensorDeps::of(t).poison())
}

/// The first poison among the tensors `args` reads (those it only writes whole are not read):
/// what device work queued with them would carry to its outputs.
pub fn poisoned_input(args: &[Operand]) -> Option<Error> {
    first_poison(args.iter().filter_map(|a| match a {
        Operand::Read(t) | Operand::Write(t) => Some(t),
        Operand::Overwrite(_) | Operand::Value(_) => None,
    }))
}

/// The error of device work that ran on an input an earlier failure left unwritten.
fn read_unwritten(cause: &Error) -> Error {
    Error::new(
        cause.kind.clone(),
        format!(
            "device work read an input that was not written because an earlier instruction \
             failed: {}",
            cause.message
        ),
    )
}

/// The error an instruction reports when it skipped because an input was poisoned.
fn skipped(what: &str, cause: &Error) -> Error {
    let message = if cause.message.starts_with("skipped") {
        cause.message.clone()
    } else {
        format!(
            "skipped {what}: an input was not written because an earlier instruction failed: {}",
            cause
        )
    };
    Error::new(cause.kind.clone(), message)
}

fn mem(tensor: &Tensor) -> MemPtr {
    MemPtr {
        ptr: tensor.data_ptr(),
        device: tensor.dl().device,
    }
}

fn host(ptr: *mut u8) -> MemPtr {
    MemPtr {
        ptr,
        device: crate::abi::DLDevice::cpu(),
    }
}

/// Waits (on the host, then on the device when the device needs it) for every use in `waits`.
pub(crate) fn wait_all(stream: &StreamCore, waits: &[Use]) -> Result<()> {
    for w in waits {
        w.stream.progress.wait_for(w.seq);
        let signaler = w.stream.device_stream();
        if !signaler.completes_on_host() {
            // Instruction `seq` has been issued: a marker placed now follows it (and maybe
            // later work of that stream, which only makes the wait longer, never wrong).
            signaler.record(w.stream.marker())?;
            stream.device_stream().wait(w.stream.marker())?;
        }
    }
    Ok(())
}

impl Op {
    /// What the op is, and the bytes it copies, as a recorder hears of it.
    fn about(&self) -> (&'static str, u64) {
        match self {
            Op::Copy { nbytes, .. } => ("copy", *nbytes as u64),
            Op::ToHost { nbytes, .. } => ("copy to host", *nbytes as u64),
            Op::FromHost { nbytes, .. } => ("copy from host", *nbytes as u64),
            Op::Call {
                body: Body::Function(_),
                ..
            } => ("call", 0),
            Op::Call {
                body: Body::Device(_),
                ..
            } => ("device work", 0),
            Op::Mark => ("wait", 0),
        }
    }

    fn run(&self, stream: &StreamCore) -> Result<()> {
        let dev = stream.device_stream();
        match self {
            Op::Copy { dst, src, nbytes } => {
                if let Some(cause) = first_poison([src]) {
                    TensorDeps::of(dst).set_poison(&cause);
                    return Err(skipped("a copy", &cause));
                }
                // SAFETY: both tensors are alive (held here), compact, `nbytes` long, and the
                // dependence tracking keeps other instructions off them until this one finishes.
                if !src.same(dst) {
                    unsafe { dev.copy(mem(dst), mem(src), *nbytes) }?;
                }
                TensorDeps::of(dst).clear_poison();
            }
            Op::ToHost { src, dst, nbytes } => {
                if let Some(cause) = first_poison([src]) {
                    return Err(skipped("a copy to host memory", &cause));
                }
                // SAFETY: as above; the host side is vouched for by the submitter.
                unsafe { dev.copy(host(dst.0), mem(src), *nbytes) }?;
            }
            Op::FromHost { dst, src, nbytes } => {
                // SAFETY: as above.
                unsafe { dev.copy(mem(dst), host(src.0), *nbytes) }?;
                if *nbytes == dst.nbytes() {
                    TensorDeps::of(dst).clear_poison();
                }
            }
            Op::Call { body, args } => {
                let poisoned = poisoned_input(args);
                let result = match (poisoned, body) {
                    (Some(cause), Body::Function(_)) => Err(skipped("a callback", &cause)),
                    (None, Body::Function(func)) => call(func, args),
                    // Device work runs whatever its inputs hold: a collective's peers wait for
                    // it. What it wrote then carries the poison.
                    (poisoned, Body::Device(work)) => {
                        work(dev).and(poisoned.map_or(Ok(()), |cause| Err(read_unwritten(&cause))))
                    }
                };
                for arg in args {
                    match (arg, &result) {
                        (Operand::Write(t) | Operand::Overwrite(t), Err(error)) => {
                            TensorDeps::of(t).set_poison(error);
                        }
                        (Operand::Overwrite(t), Ok(())) => TensorDeps::of(t).clear_poison(),
                        _ => {}
                    }
                }
                return result;
            }
            Op::Mark => {}
        }
        Ok(())
    }
}

fn call(func: &Function, args: &[Operand]) -> Result<()> {
    let owned: Vec<Any> = args
        .iter()
        .map(|a| match a {
            Operand::Read(t) | Operand::Write(t) | Operand::Overwrite(t) => Any::from(t.clone()),
            Operand::Value(v) => v.clone(),
        })
        .collect();
    let views: Vec<AnyView<'_>> = owned.iter().map(Any::view).collect();
    func.call(&views).map(drop)
}

impl Instruction {
    /// Runs the instruction on its stream's executor; a failure goes to the stream's error.
    pub fn execute(self) {
        let Instruction {
            stream,
            seq,
            waits,
            op,
        } = self;
        let (what, bytes) = op.about();
        let recorder = stream.recorder.as_ref();
        let result = super::recorded::recording(recorder, what, bytes, || {
            wait_all(&stream, &waits).and_then(|()| op.run(&stream))
        });
        drop(waits);
        if let Err(error) = result {
            stream.report(error);
        }
        // Release the tensors before the stream says it got here: a sync that returns has
        // seen every reference its instructions held go. On a device whose work outlives the
        // host call, the op was only issued: what it holds is kept until the device finished
        // it (a sync lets go of it after waiting for the device).
        let dev = stream.device_stream();
        if dev.completes_on_host() || matches!(op, Op::Mark) {
            drop(op);
        } else if let Err(error) = stream.retiring.hold(dev, seq, op) {
            stream.report(error);
        }
        // A stream closed from a callback on its executor could not wait for its work then:
        // its last instruction does, on the device, once issued. (`>=`: a submitter publishes
        // the number after queueing, so the executor may run it first.)
        if stream.is_closed() && seq >= stream.issued() {
            stream.settle_device(seq, None);
        }
        stream.finish(seq);
    }
}
