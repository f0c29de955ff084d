"""Streams and tensors: copies that run in order on a device, and tensors whose uses are
ordered across streams, with small synchronous reads and writes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Union

import numpy as np
import tvm_ffi

from . import _convert
from ._convert import DeviceLike, DTypeLike, SupportsDLPack
from ._library import module

BytesLike = Union[bytes, bytearray, memoryview, "np.ndarray[Any, Any]"]


class Stream:
    """A stream on a device: the copies submitted to it run in order, after every earlier
    use of their tensors on other streams. Used as a context manager, it syncs on exit.

    Parameters
    ----------
    device
        A tvm-ffi device or a name such as ``"cpu"`` (the default).
    """

    __slots__ = ("_handle",)

    def __init__(self, device: DeviceLike = "cpu") -> None:
        self._handle = module().stream_new(_convert.device(device))

    def __tvm_ffi_object__(self) -> tvm_ffi.Object:
        """The library's object, so that a stream passes as an argument to any tvm-ffi call."""
        return self._handle

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.sync()

    def copy(self, dst: Tensor, src: Tensor) -> None:
        """Queues a copy of ``src`` into ``dst`` and returns at once; both tensors live until
        it has run. Later reads and writes of either wait for it."""
        module().tensor_copy(dst, src, self._handle)

    def wait(self, other: Stream) -> None:
        """Makes work submitted to this stream from now on wait for everything submitted to
        ``other`` so far (without waiting here)."""
        module().stream_wait(self._handle, other)

    def sync(self) -> None:
        """Waits until everything submitted so far has run, and raises the first failure."""
        module().stream_sync(self._handle)


class Tensor:
    """A tensor of the library's: its uses are ordered across streams, and it reads and writes
    a few bytes synchronously after them. numpy reads it without a copy (``np.from_dlpack``,
    after the copies queued on it), and it passes as an argument to any tvm-ffi call.

    Parameters
    ----------
    shape
        The shape.
    dtype
        The element type (``"float32"``, a numpy dtype, ...).
    device
        A tvm-ffi device or a name such as ``"cpu"`` (the default). Host tensors start zeroed.
    """

    __slots__ = ("_handle",)

    def __init__(
        self, shape: Sequence[int], dtype: DTypeLike = "float32", device: DeviceLike = "cpu"
    ) -> None:
        self._handle = module().tensor_empty(
            list(shape), _convert.dtype(dtype), _convert.device(device)
        )

    @classmethod
    def from_dlpack(cls, array: SupportsDLPack) -> Tensor:
        """A tensor over the memory of ``array`` (a numpy array, or anything with
        ``__dlpack__``), without a copy; ``array`` stays alive while the tensor lives."""
        tensor = cls.__new__(cls)
        tensor._handle = module().tensor_from_dlpack(array)
        return tensor

    def __tvm_ffi_object__(self) -> tvm_ffi.Object:
        """The library's object, so that a tensor passes as an argument to any tvm-ffi call."""
        return self._handle

    def __dlpack__(self, **kwargs: Any) -> Any:
        """The DLPack export of the memory itself, without a copy (``np.from_dlpack(t)``).
        It first waits until every use of the tensor queued so far on any stream has finished
        (on a GPU too), so the consumer sees what queued copies wrote; what is queued on the
        tensor later is not ordered with the consumer's own reads and writes."""
        module().tensor_settle(self._handle)
        return self._handle.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._handle.__dlpack_device__()

    def __repr__(self) -> str:
        return f"<discovm.Tensor {self.shape} {self.dtype} on {self.device}>"

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape."""
        return tuple(self._handle.shape)

    @property
    def dtype(self) -> str:
        """The element type, such as ``"float32"``."""
        return str(self._handle.dtype)

    @property
    def device(self) -> tvm_ffi.Device:
        """The device."""
        return self._handle.device

    @property
    def nbytes(self) -> int:
        """The size of the elements in bytes."""
        element_bits = self._handle.dtype.bits * self._handle.dtype.lanes
        return (int(np.prod(self.shape, dtype=np.int64)) * element_bits + 7) // 8

    def read(self, nbytes: int | None = None) -> bytes:
        """The first ``nbytes`` bytes (all of them by default), read after every earlier use
        of the tensor on any stream."""
        return bytes(module().tensor_read(self._handle, self.nbytes if nbytes is None else nbytes))

    def write(self, data: BytesLike) -> None:
        """Writes ``data`` (bytes, or a numpy array's bytes) into the start of the tensor, after
        every earlier use of it on any stream."""
        if isinstance(data, np.ndarray):
            data = np.ascontiguousarray(data).tobytes()
        module().tensor_write(self._handle, bytes(data))

    def numpy(self) -> np.ndarray[Any, Any]:
        """A copy of the tensor as a numpy array, read after every earlier use of it."""
        return np.frombuffer(self.read(), dtype=self.dtype).reshape(self.shape).copy()
