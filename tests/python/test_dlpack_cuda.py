"""DLPack between libdiscovm.so's CUDA tensors and the GPU libraries of Python, with ctypes.

For each consumer present (PyTorch, CuPy):
- it reads our CUDA tensor without a copy (from_dlpack on an object whose __dlpack__ hands out
  dvm_tensor_to_dlpack's export: a versioned capsule when the consumer asks for DLPack 1.x, else
  a legacy one wrapping it), on the right device, with the right values; its writes are seen by
  dvm_tensor_read and ours by it; the export is released exactly once (our reference count goes
  back down) once it lets go;
- its own CUDA tensor comes in through dvm_tensor_from_dlpack (where it exports DLPack 1.x) and
  our streams copy it to the host;
- (torch) an import freed while our copies of it are queued goes back to torch only after the
  GPU finished them, even when torch reuses the memory at once on a stream of its own.

Usage: python3 tests/python/test_dlpack_cuda.py path/to/libdiscovm.so
Exits 77 (skipped) without a GPU or without any of the consumers, 1 on failure.
"""

import ctypes
import gc
import sys

SKIPPED = 77

from dlpack_ctypes import (CPU, GPU0, KDL_CUDA, USED, VERSIONED, Export, P, api, check, empty,
                           finish, lib, ok, read_f32, strong_count, write_f32)

# ---- The checks ------------------------------------------------------------------------------


def consumer_reads_our_tensor(name, from_dlpack, synchronize, to_list):
    t = empty([2, 3], GPU0)
    write_f32(t, [1, 2, 3, 4, 5, 6])
    export = Export(t)
    check(strong_count(t) == 2, f"{name}: the export holds a reference")
    x = from_dlpack(export)
    print(f"{name}: consumed a {'versioned' if export.asked else 'legacy'} capsule "
          f"(max_version={export.asked})")
    check(str(x.device) in ("cuda:0", "<CUDA Device 0>"), f"{name}: device {x.device}")
    check(to_list(x) == [[1, 2, 3], [4, 5, 6]], f"{name}: values {to_list(x)}")
    x += 10  # a kernel of the consumer's, in place
    synchronize()
    check(read_f32(t, 6) == [11, 12, 13, 14, 15, 16], f"{name}: its write is seen by ours")
    write_f32(t, [100])
    check(to_list(x)[0][0] == 100, f"{name}: our write is seen by it")
    del x
    gc.collect()
    synchronize()
    check(strong_count(t) == 1, f"{name}: the export was released exactly once")
    lib.dvm_tensor_free(t)


def consumer_tensor_through_our_streams(name, tensor, synchronize):
    synchronize()  # its own stream filled the tensor; ours does not wait for that stream
    try:
        capsule = tensor.__dlpack__(max_version=(1, 0))
    except TypeError:
        print(f"{name}: exports no DLPack 1.x capsule; the import direction is not checked")
        return
    check(api.PyCapsule_IsValid(capsule, VERSIONED) == 1, f"{name}: a versioned capsule")
    managed = api.PyCapsule_GetPointer(capsule, VERSIONED)
    t = P()
    ok(lib.dvm_tensor_from_dlpack(managed, ctypes.byref(t)), "dvm_tensor_from_dlpack")
    api.PyCapsule_SetName(capsule, USED)
    del capsule
    s, host = P(), empty([4], CPU)
    ok(lib.dvm_stream_new(GPU0, ctypes.byref(s)), "dvm_stream_new")
    ok(lib.dvm_tensor_copy(host, t, s), "dvm_tensor_copy")
    ok(lib.dvm_stream_sync(s), "dvm_stream_sync")
    check(read_f32(host, 4) == [0.5, 1.5, 2.5, 3.5], f"{name}: its values through our stream")
    for h in (t, host):
        lib.dvm_tensor_free(h)
    lib.dvm_stream_free(s)


COPIES = 64  # 16 GiB copied: some milliseconds even on the fastest GPU


def import_outlives_our_copy(torch):
    """An import freed right after a copy was queued on our stream: the producer gets the memory
    back only once the GPU finished the copy. The consumer's tensor lives on a side stream of
    its own (not ordered with ours), whose allocator hands the freed block out again at once
    and overwrites it; our copy must still see the original values."""
    n = 64 << 20  # 256 MiB of float32, copied COPIES times: long enough for a reuse to overlap
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        src = torch.full((n,), 1.0, device="cuda:0")
    side.synchronize()
    try:
        capsule = src.__dlpack__(max_version=(1, 0))
    except TypeError:
        print("torch: exports no DLPack 1.x capsule; an import freed during our copies is not "
              "checked")
        return
    managed = api.PyCapsule_GetPointer(capsule, VERSIONED)
    t = P()
    ok(lib.dvm_tensor_from_dlpack(managed, ctypes.byref(t)), "dvm_tensor_from_dlpack")
    api.PyCapsule_SetName(capsule, USED)
    s, dst = P(), empty([n], GPU0)
    ok(lib.dvm_stream_new(GPU0, ctypes.byref(s)), "dvm_stream_new")
    for _ in range(COPIES):
        ok(lib.dvm_tensor_copy(dst, t, s), "dvm_tensor_copy")
    lib.dvm_tensor_free(t)
    del capsule, src
    gc.collect()
    with torch.cuda.stream(side):
        junk = torch.full((n,), 2.0, device="cuda:0")
    ok(lib.dvm_stream_sync(s), "dvm_stream_sync")
    side.synchronize()
    export = Export(dst)
    seen = torch.from_dlpack(export)
    wrong = int((seen != 1.0).sum().item())
    check(wrong == 0, f"torch: {wrong} elements of our copy were overwritten after the free")
    print(f"torch: an import freed during our copies was given back after them "
          f"({junk.numel() * 4 >> 20} MiB reused on a side stream)")
    del seen, export, junk
    gc.collect()
    lib.dvm_tensor_free(dst)
    lib.dvm_stream_free(s)


count = ctypes.c_int32()
ok(lib.dvm_device_count(KDL_CUDA, ctypes.byref(count)), "dvm_device_count")
if count.value == 0:
    print("dlpack with CUDA consumers: skipped: no CUDA device here")
    sys.exit(SKIPPED)

tried = []
try:
    import torch

    if torch.cuda.is_available():
        tried.append("torch " + torch.__version__)
        consumer_reads_our_tensor("torch", torch.from_dlpack, torch.cuda.synchronize,
                                  lambda x: x.cpu().tolist())
        consumer_tensor_through_our_streams(
            "torch", torch.tensor([0.5, 1.5, 2.5, 3.5], device="cuda:0"), torch.cuda.synchronize)
        import_outlives_our_copy(torch)
except ImportError:
    pass
try:
    import cupy
except ImportError:
    cupy = None
if cupy is not None:
    try:
        (cupy.arange(2) + 1).get()  # a kernel: cupy's own CUDA libraries load and compile
    except Exception as error:  # noqa: BLE001 - any failure of cupy's set-up: skip cupy
        print(f"cupy: skipped: cupy cannot run a kernel here ({type(error).__name__}: {error})")
        cupy = None
if cupy is not None:
    tried.append("cupy " + cupy.__version__)
    consumer_reads_our_tensor("cupy", cupy.from_dlpack, cupy.cuda.Device(0).synchronize,
                              lambda x: cupy.asnumpy(x).tolist())
    consumer_tensor_through_our_streams(
        "cupy", cupy.asarray([0.5, 1.5, 2.5, 3.5], dtype=cupy.float32),
        cupy.cuda.Device(0).synchronize)

if not tried:
    print("dlpack with CUDA consumers: skipped: neither torch (with CUDA) nor cupy is installed")
    sys.exit(SKIPPED)
finish(f"dlpack with CUDA consumers ({', '.join(tried)})")
