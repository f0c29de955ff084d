"""The argument types the package accepts, and their conversion to tvm-ffi's."""

from __future__ import annotations

from typing import Any, Protocol, Union

import numpy as np
import tvm_ffi


class SupportsDLPack(Protocol):
    """An array that exports its memory through DLPack: a numpy array, a tvm-ffi tensor, a
    :class:`discovm.Tensor`, ..."""

    def __dlpack__(self, *, stream: Any = None) -> Any: ...


#: A device: a tvm-ffi device, a name such as ``"cpu"``, or None (a default).
DeviceLike = Union[tvm_ffi.Device, str, None]
#: An element type: a name such as ``"float32"``, a tvm-ffi or numpy dtype, or a numpy type.
DTypeLike = Union[str, tvm_ffi.dtype, "np.dtype[Any]", type]


def dtype(value: DTypeLike) -> tvm_ffi.dtype:
    """A tvm-ffi dtype from a name, a tvm-ffi or numpy dtype, or a numpy scalar type."""
    if isinstance(value, (str, tvm_ffi.dtype)):
        return tvm_ffi.dtype(value)
    return tvm_ffi.dtype(str(np.dtype(value)))


def device(value: DeviceLike) -> tvm_ffi.Device | None:
    """A tvm-ffi device from a device or a name; None stays None."""
    if value is None or isinstance(value, tvm_ffi.Device):
        return value
    return tvm_ffi.device(value)


def host_array(value: SupportsDLPack) -> np.ndarray[Any, Any]:
    """A numpy array over ``value``'s memory."""
    if isinstance(value, np.ndarray):
        return value
    return np.from_dlpack(value)
