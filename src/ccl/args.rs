//! Reading a collective's tensor arguments, and the checks of their sizes that every backend
//! makes alike.
//!
//! The one idea: an argument is found by its role in the table ([`Collective::at`]), and each
//! backend's kind of buffer (the CPU's [`Buf`], NCCL's region) shows the size checks its
//! dtype, size and description through [`Extent`], so one check serves every backend.

use super::board::Buf;
use super::collective::{Arg, Collective};
use super::reduce::Elem;
use crate::abi::{DLDataType, KDL_CPU};
use crate::object::args::{argument, is_none};
use crate::object::{AnyView, Error, Result, Tensor};

/// Tensor argument `arg` of a call of `collective`, made into what the backend works on by
/// `read`; None when it is absent or None and not `required`.
pub(super) fn tensor<T>(
    args: &[AnyView<'_>],
    collective: Collective,
    arg: Arg,
    required: bool,
    read: impl FnOnce(Tensor) -> Result<T>,
) -> Result<Option<T>> {
    let i = collective.at(arg);
    if is_none(args, i) {
        if required {
            return Err(Error::type_error(format!(
                "argument {i} ({}): a tensor is required, got None",
                arg.name()
            )));
        }
        return Ok(None);
    }
    argument(i, arg.name(), || read(args[i].as_tensor()?)).map(Some)
}

/// A tensor argument in host memory as a buffer, once the work queued on it on any stream has
/// finished; None when it is absent or None and not `required`.
pub(super) fn buffer(
    args: &[AnyView<'_>],
    collective: Collective,
    arg: Arg,
    required: bool,
) -> Result<Option<Buf>> {
    tensor(args, collective, arg, required, |tensor| {
        let dl = tensor.dl();
        if dl.device.device_type != KDL_CPU {
            return Err(Error::value(
                "the CPU collectives need tensors in host memory (kDLCPU)",
            ));
        }
        if !tensor.is_contiguous() {
            return Err(Error::value("the tensor is not contiguous"));
        }
        if tensor.is_read_only() && arg != Arg::Send {
            return Err(Error::value("the tensor is read-only"));
        }
        let elem = Elem::of(dl.dtype)?;
        // The collective reads and writes the memory directly: first let the work that
        // streams have queued on the tensor finish (a copy still filling it, say).
        crate::vm::settle(&tensor)?;
        let addr = tensor.data_ptr() as usize;
        if !addr.is_multiple_of(elem.size()) {
            return Err(Error::value(format!(
                "the data address {addr:#x} is not aligned to its {}-byte elements",
                elem.size()
            )));
        }
        Buf::of(&tensor)
    })
}

/// A buffer as the size checks see it.
pub(super) trait Extent {
    fn dtype(&self) -> DLDataType;
    /// How much it holds, in a unit its dtype fixes (bytes, or elements).
    fn amount(&self) -> usize;
    /// How errors describe it.
    fn describe(&self) -> String;
}

impl Extent for Buf {
    fn dtype(&self) -> DLDataType {
        self.dtype
    }

    fn amount(&self) -> usize {
        self.nbytes
    }

    fn describe(&self) -> String {
        Buf::describe(self)
    }
}

/// The `big_role` buffer `big` of a call of `what` holds `times` the elements of `small`, of
/// the same dtype.
pub(super) fn sized<E: Extent>(
    what: Collective,
    big: &E,
    big_role: Arg,
    small: &E,
    times: usize,
) -> Result<()> {
    if big.dtype() == small.dtype() && big.amount() == small.amount() * times {
        return Ok(());
    }
    Err(Error::value(format!(
        "{what}: the {} buffer ({}) must hold {} the other ({}), with the same dtype",
        big_role.name(),
        big.describe(),
        if times == 1 {
            "as many elements as".to_string()
        } else {
            format!("{times} times the elements of")
        },
        small.describe()
    )))
}

/// The buffers of a call of `collective` from a root: `send`, the root's alone, and `recv`.
/// The root's `send` holds `parts` recv-sized parts (a scatter), or for `None` as many
/// elements as `recv` (a broadcast).
pub(super) fn root_send(
    args: &[AnyView<'_>],
    collective: Collective,
    root: bool,
    parts: Option<usize>,
) -> Result<(Option<Buf>, Buf)> {
    let send = buffer(args, collective, Arg::Send, root)?.filter(|_| root);
    let recv = buffer(args, collective, Arg::Recv, true)?.expect("required");
    if let Some(send) = &send {
        root_sized(collective, send, &recv, parts)?;
    }
    Ok((send, recv))
}

/// The root's `send` buffer of a call of `what` holds `parts` parts the size of `recv` (a
/// scatter), or for `None` as many elements as `recv` (a broadcast).
pub(super) fn root_sized(
    what: Collective,
    send: &Buf,
    recv: &Buf,
    parts: Option<usize>,
) -> Result<()> {
    match parts {
        Some(n) => sized(what, send, Arg::Send, recv, n),
        None => sized(what, recv, Arg::Recv, send, 1),
    }
}
