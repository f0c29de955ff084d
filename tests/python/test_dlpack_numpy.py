"""DLPack round trips between libdiscovm.so and numpy, driven with ctypes.

- numpy reads our tensor without a copy (np.from_dlpack on a versioned capsule holding
  dvm_tensor_to_dlpack's export); the export keeps our tensor alive until numpy lets go, and
  its deleter runs exactly once (our tensor's reference count goes back down by exactly one).
- we wrap a numpy array without a copy (dvm_tensor_from_dlpack on numpy's own capsule); its
  deleter runs exactly once, after the last use, even when queued copies still use the tensor
  after we freed it (counted by wrapping numpy's deleter).
- strided numpy views are accepted as tensors but refused by reads and copies, with the error.

Usage: python tests/python/test_dlpack_numpy.py path/to/libdiscovm.so
Needs numpy (tests/support/numpy_venv.sh makes an environment with it). Exits 1 on failure.
"""

import ctypes
import gc

import numpy as np

from dlpack_ctypes import (CPU, DVM_VALUE_ERROR, USED, VERSIONED, VERSIONED_DELETER,
                           DLManagedTensorVersioned, Export, P, api, check, empty, finish, lib,
                           ok, read_f32, strong_count, write_f32)


def numpy_reads_our_tensor():
    t = empty([2, 3])
    write_f32(t, [1, 2, 3, 4, 5, 6])
    check(strong_count(t) == 1, "a new tensor has one reference")
    unused = Export(t)
    check(strong_count(t) == 2, "an export holds a reference")
    del unused
    gc.collect()
    check(strong_count(t) == 1, "an export nobody consumed is released with its capsule")
    export = Export(t)
    array = np.from_dlpack(export)
    check(export.asked is not None and export.asked[0] >= 1,
          f"numpy asks for a versioned capsule (max_version={export.asked})")
    check(strong_count(t) == 2, "the export holds a reference")
    check(array.shape == (2, 3) and array.dtype == np.float32, f"shape/dtype: {array!r}")
    check(array.tolist() == [[1, 2, 3], [4, 5, 6]], f"values: {array.tolist()}")
    # Zero copy, both ways.
    array[1, 2] = 60
    check(read_f32(t, 6)[5] == 60, "a numpy write is seen by dvm_tensor_read")
    write_f32(t, [10])
    check(array[0, 0] == 10, "dvm_tensor_write is seen by numpy")
    # Our handle can go first: the export keeps the memory alive for numpy.
    view = array[:, 1]
    del array
    gc.collect()
    check(strong_count(t) == 2, "a numpy view keeps the export alive")
    ok(lib.dvm_object_inc_ref(t), "dvm_object_inc_ref")  # to watch the count
    lib.dvm_tensor_free(t)
    check(view.tolist() == [2, 5], f"view after dvm_tensor_free: {view.tolist()}")
    del view
    gc.collect()
    check(strong_count(t) == 1, "numpy released the export exactly once")
    lib.dvm_tensor_free(t)


def numpy_tensor_through_our_streams():
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    capsule = array.__dlpack__(max_version=(1, 0))
    check(api.PyCapsule_IsValid(capsule, VERSIONED) == 1, "numpy made a versioned capsule")
    managed = ctypes.cast(api.PyCapsule_GetPointer(capsule, VERSIONED),
                          ctypes.POINTER(DLManagedTensorVersioned))
    # Count numpy's deleter: wrap it.
    original = VERSIONED_DELETER(managed.contents.deleter)
    calls = []

    @VERSIONED_DELETER
    def counting(m):
        calls.append(1)
        original(m)

    managed.contents.deleter = ctypes.cast(counting, P).value
    t = P()
    ok(lib.dvm_tensor_from_dlpack(managed, ctypes.byref(t)), "dvm_tensor_from_dlpack")
    api.PyCapsule_SetName(capsule, USED)  # we own it now: the capsule must not delete it
    del capsule
    t = t.value
    check(read_f32(t, 12) == list(range(12)), "dvm_tensor_read sees numpy's values")
    write_f32(t, [100, 101])
    check(array[0, :3].tolist() == [100, 101, 2], "numpy sees dvm_tensor_write (zero copy)")

    # Queue copies that use it on two streams, free it at once: it lives until they ran.
    a, b = P(), P()
    ok(lib.dvm_stream_new(CPU, ctypes.byref(a)), "dvm_stream_new")
    ok(lib.dvm_stream_new(CPU, ctypes.byref(b)), "dvm_stream_new")
    mid, dst = empty([3, 4]), empty([3, 4])
    for _ in range(50):
        ok(lib.dvm_tensor_copy(mid, t, a), "dvm_tensor_copy")
        ok(lib.dvm_tensor_copy(dst, mid, b), "dvm_tensor_copy")
    lib.dvm_tensor_free(t)
    ok(lib.dvm_stream_sync(a), "dvm_stream_sync")
    ok(lib.dvm_stream_sync(b), "dvm_stream_sync")
    check(len(calls) == 1, f"numpy's deleter ran {len(calls)} times, expected 1")
    check(read_f32(dst, 3) == [100, 101, 2], "the copies moved numpy's values")

    # Back to numpy: the copy's export, read with np.from_dlpack.
    back = np.from_dlpack(Export(dst))
    check(back.reshape(-1).tolist()[:4] == [100, 101, 2, 3], f"round trip: {back.tolist()}")
    del back
    gc.collect()
    check(strong_count(dst) == 1, "the second export was released exactly once")
    for h in (mid, dst):
        lib.dvm_tensor_free(h)
    for s in (a, b):
        lib.dvm_stream_free(s)
    check(len(calls) == 1, "numpy's deleter never ran twice")


def strided_views_are_refused():
    array = np.zeros((4, 4), dtype=np.float32)
    view = array[:, ::2]
    capsule = view.__dlpack__(max_version=(1, 0))
    managed = api.PyCapsule_GetPointer(capsule, VERSIONED)
    t = P()
    ok(lib.dvm_tensor_from_dlpack(managed, ctypes.byref(t)), "dvm_tensor_from_dlpack (strided)")
    api.PyCapsule_SetName(capsule, USED)
    out = (ctypes.c_float * 2)()
    status = lib.dvm_tensor_read(t, out, 8)
    check(status == DVM_VALUE_ERROR, f"reading a strided view returned {status}")
    check(lib.dvm_last_error_kind() == b"ValueError", "the kind is ValueError")
    message = lib.dvm_last_error_message().decode()
    check("strided view (shape [4, 2], strides [4, 2])" in message, message)
    lib.dvm_tensor_free(t)


def read_only_arrays_stay_unwritten():
    array = np.arange(4, dtype=np.float32)
    array.flags.writeable = False
    capsule = array.__dlpack__(max_version=(1, 0))
    managed = ctypes.cast(api.PyCapsule_GetPointer(capsule, VERSIONED),
                          ctypes.POINTER(DLManagedTensorVersioned))
    check(managed.contents.flags & 1 == 1, "numpy marks a read-only export")
    t = P()
    ok(lib.dvm_tensor_from_dlpack(managed, ctypes.byref(t)), "dvm_tensor_from_dlpack (read-only)")
    api.PyCapsule_SetName(capsule, USED)
    check(read_f32(t.value, 4) == [0, 1, 2, 3], "a read-only tensor can be read")
    data = (ctypes.c_float * 1)(9)
    status = lib.dvm_tensor_write(t, data, 4)
    check(status == DVM_VALUE_ERROR, f"writing a read-only tensor returned {status}")
    message = lib.dvm_last_error_message().decode()
    check("read-only" in message, message)
    check(array[0] == 0, "the read-only array is unchanged")
    lib.dvm_tensor_free(t)


numpy_reads_our_tensor()
numpy_tensor_through_our_streams()
read_only_arrays_stay_unwritten()
strided_views_are_refused()
finish("dlpack with numpy")
