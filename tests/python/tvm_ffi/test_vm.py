"""The package's Stream and Tensor: ordered copies, small reads and writes, DLPack both ways."""

from __future__ import annotations

import gc
import sys

import numpy as np
import pytest
import tvm_ffi

import discovm


def test_tensors_are_made_read_and_written():
    t = discovm.Tensor((2, 3), "int16")
    assert (t.shape, t.dtype, str(t.device), t.nbytes) == ((2, 3), "int16", "cpu:0", 12)
    assert "discovm.Tensor (2, 3) int16" in repr(t)
    np.testing.assert_array_equal(t.numpy(), np.zeros((2, 3), dtype="int16"))
    t.write(np.arange(6, dtype="int16").reshape(2, 3))
    np.testing.assert_array_equal(t.numpy(), np.arange(6).reshape(2, 3))
    t.write(b"\x09\x00")
    assert t.read(4) == b"\x09\x00\x01\x00"
    assert len(t.read()) == 12
    with pytest.raises(ValueError, match="13 bytes cannot be written to a tensor of 12 bytes"):
        t.write(bytes(13))
    with pytest.raises(discovm.DeviceUnavailable):
        discovm.Tensor((1,), "float32", "cuda")


def test_numpy_shares_the_memory_without_a_copy():
    t = discovm.Tensor((4,), np.float32)
    view = np.from_dlpack(t)
    view[:] = [1, 2, 3, 4]
    np.testing.assert_array_equal(t.numpy(), [1, 2, 3, 4])
    t.write(np.float32(8).tobytes())
    assert view[0] == 8
    back = discovm.Tensor.from_dlpack(view)
    back.write(np.float32(5).tobytes())
    assert view[0] == 5 and t.numpy()[0] == 5


def test_a_stream_copies_in_order_and_reads_wait_for_its_copies():
    src, mid, dst = (discovm.Tensor((1024,), "float64") for _ in range(3))
    src.write(np.arange(1024, dtype="float64"))
    first, second = discovm.Stream(), discovm.Stream("cpu")
    first.copy(mid, src)
    second.wait(first)
    second.copy(dst, mid)
    np.testing.assert_array_equal(dst.numpy(), np.arange(1024))  # ordered after both copies
    with discovm.Stream(tvm_ffi.device("cpu", 0)) as third:
        third.copy(src, discovm.Tensor((1024,), "float64"))
    np.testing.assert_array_equal(src.numpy(), np.zeros(1024))


@pytest.mark.parametrize(
    "consumer",
    [np.from_dlpack, lambda t: np.from_dlpack(tvm_ffi.from_dlpack(t))],
    ids=["numpy", "tvm_ffi"],
)
def test_dlpack_consumers_see_the_copies_queued_before_them(consumer):
    # Each round queues a copy of 64 MiB on a stream's thread and exports the destination at
    # once. The copy writes the last element last: an export that did not wait for it shows
    # the previous round's value there.
    n = 1 << 24
    sources = [discovm.Tensor.from_dlpack(np.full(n, value, dtype="float32")) for value in (1, 2)]
    dst = discovm.Tensor((n,), "float32")
    with discovm.Stream() as stream:
        for round_ in range(8):
            value = round_ % 2 + 1
            stream.copy(dst, sources[round_ % 2])
            view = consumer(dst)
            assert view[-1] == value, f"round {round_}: the export ran before the copy finished"
            assert (view == value).all(), f"round {round_}"
            del view


def test_tensors_made_elsewhere_are_imported_for_streams():
    array = np.arange(3, dtype="int32")
    t = discovm.Tensor((3,), "int32")
    with pytest.raises(TypeError, match="made by another library: import it first"):
        discovm.Stream().copy(t, array)
    with discovm.Stream() as s:
        s.copy(t, discovm.Tensor.from_dlpack(array))
    np.testing.assert_array_equal(t.numpy(), array)
    with pytest.raises(ValueError, match="shapes, dtypes and sizes must match"):
        discovm.Stream().copy(t, discovm.Tensor((4,), "int32"))


def test_tensors_and_the_arrays_they_import_are_released_once():
    array = np.arange(8, dtype="uint8")
    before = sys.getrefcount(array)
    t = discovm.Tensor.from_dlpack(array)
    s = discovm.Stream()
    s.copy(discovm.Tensor((8,), "uint8"), t)
    del t
    s.sync()
    gc.collect()
    assert sys.getrefcount(array) == before
