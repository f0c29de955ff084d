"""libdiscovm driven the way tvm-ffi drives any module: tvm_ffi.load_module, then its functions
by name, with numpy arrays and Python functions as arguments. No discovm package involved."""

from __future__ import annotations

import gc
import re
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import tvm_ffi

F32 = tvm_ffi.dtype("float32")
CPU = tvm_ffi.device("cpu", 0)
REPO = Path(__file__).resolve().parents[3]


def documented_entry_points() -> list[str]:
    """The names TVM_FFI.md lists in its table of entry points."""
    text = (REPO / "TVM_FFI.md").read_text()
    return re.findall(r"^\| `([a-z_0-9]+)\(", text, flags=re.MULTILINE)


def test_every_documented_entry_point_is_in_the_module(lib):
    names = documented_entry_points()
    assert len(names) == 48
    for name in names:
        assert callable(getattr(lib, name)), name
    with pytest.raises(AttributeError):
        _ = lib.no_such_entry_point


def test_a_four_worker_session_on_numpy_data(lib):
    s = lib.session_new_threaded(4, 1)
    assert lib.session_num_workers(s) == 4
    empty = lib.session_get_global_func(s, "runtime.disco.empty")
    x = lib.session_call(s, empty, tvm_ffi.Shape((3, 4)), F32)
    data = np.arange(12, dtype="float32").reshape(3, 4)
    lib.session_copy_to_worker0(s, data, x)

    def scale(t, k):
        view = np.from_dlpack(t)
        view *= k
        return float(view.sum())

    lib.func_register_global("test.module.scale", scale)
    sums = lib.session_call(s, lib.session_get_global_func(s, "test.module.scale"), x, 2.0)
    lib.session_sync_all(s)
    assert [lib.dref_get(sums, w) for w in range(4)] == [132.0, 0.0, 0.0, 0.0]
    out = np.zeros((3, 4), dtype="float32")
    lib.session_copy_from_worker0(s, out, x)
    np.testing.assert_array_equal(out, data * 2)
    del x, sums, empty
    gc.collect()
    assert [lib.session_live_registers(s, w) for w in range(4)] == [0] * 4
    lib.func_remove_global("test.module.scale")
    lib.session_shutdown(s)


def test_workers_ids_devices_and_one_worker_calls(lib):
    s = lib.session_new_threaded(4, 2, 0, -1)
    worker_id = lib.session_get_global_func(s, "runtime.disco.worker_id")
    ids = lib.session_call(s, worker_id)
    assert [tuple(lib.dref_get(ids, w)) for w in range(4)] == [(0,), (1,), (2,), (3,)]
    groups = lib.session_call(s, lib.session_get_global_func(s, "runtime.disco.num_groups"))
    assert lib.dref_get(groups, 3) == 2
    w2 = lib.session_worker(s, 2)
    assert lib.worker_id(w2) == 2
    assert lib.worker_device(w2) == CPU
    rank = lib.session_get_global_func(s, "runtime.disco.worker_rank")
    only = lib.worker_call(w2, rank)
    lib.worker_sync(w2)
    assert lib.dref_get(only, 2) == 2
    with pytest.raises(RuntimeError) as failed:
        lib.dref_get(only, 1)  # the call went to worker 2 alone
    assert failed.value.__tvm_ffi_error__.kind == "WorkerError"
    lib.dref_set(ids, 1, "seven")
    assert lib.dref_get(ids, 1) == "seven"
    lib.session_sync_worker(s, 3)
    lib.session_shutdown(s)


def test_options_are_checked(lib):
    with pytest.raises(ValueError, match="num_workers 0 is out of range"):
        lib.session_new_threaded(0)
    with pytest.raises(ValueError, match="timeout_ms is negative"):
        lib.session_new_threaded(1, 1, -5)
    with pytest.raises(ValueError, match=r"cpu_affinity\[0\] is -2"):
        lib.session_new_threaded(1, 1, 0, 0, [-2])
    with pytest.raises(ValueError, match="cpu_affinity holds 2 CPU ids for 1 workers"):
        lib.session_new_threaded(1, 1, 0, 0, [-1, -1])
    with pytest.raises(RuntimeError, match=r"devices\[0\]: CUDA device 0") as no_gpu:
        lib.session_new_threaded(1, 1, 0, 0, None, [tvm_ffi.device("cuda", 0)])
    assert no_gpu.value.__tvm_ffi_error__.kind == "DeviceUnavailable"
    with pytest.raises(TypeError, match=r"argument 4 \(cpu_affinity\): expected a list of ints"):
        lib.session_new_threaded(1, 1, 0, 0, "all")
    s = lib.session_new_threaded(2, 1, 0, 0, [-1, 0], [CPU, CPU])
    lib.session_shutdown(s)


@pytest.mark.parametrize(
    ("call", "kind", "message"),
    [
        (
            lambda m, s: m.session_sync_worker(s, 4),
            IndexError,
            re.escape("worker 4 out of range (session has 2 workers)"),
        ),
        (
            lambda m, s: m.session_get_global_func(s, "no.such.function"),
            KeyError,
            "no.such.function",
        ),
        (
            lambda m, s: m.session_sync_worker(None, 0),
            TypeError,
            re.escape("`session` is not a session (it is None)"),
        ),
        (
            lambda m, s: m.session_sync_worker(s, "0"),
            TypeError,
            r"argument 1 \(worker\): expected int but got",
        ),
        (
            lambda m, s: m.session_num_workers(m.stream_new(CPU)),
            TypeError,
            re.escape("is not a session (it is discovm.Stream)"),
        ),
        (
            lambda m, s: m.session_call(s),
            TypeError,
            "`session_call` takes at least 2 arguments but got 1",
        ),
        (lambda m, s: m.version(1), TypeError, "`version` takes 0 arguments but got 1"),
        (lambda m, s: m.session_init_ccl(s, "mpi"), ValueError, 'unknown collective backend "mpi"'),
        (
            lambda m, s: m.tensor_empty((2,), F32, tvm_ffi.device("cpu", 0), 1),
            TypeError,
            "takes 2 to 3",
        ),
        (lambda m, s: m.tensor_empty((-1,), F32), ValueError, "dimension 0 of shape"),
        (
            lambda m, s: m.tensor_empty((2,), "float32"),
            TypeError,
            r"argument 1 \(dtype\): expected DataType",
        ),
        (
            lambda m, s: m.func_remove_global("no.such.function"),
            KeyError,
            "no global function has the name",
        ),
        (lambda m, s: m.func_get_global("no.such.function"), KeyError, "no global function has the name"),
        (lambda m, s: m.func_register_global("", lambda: 0), ValueError, "non-empty name"),
        (lambda m, s: m.device_count(1 << 40), ValueError, "is out of range"),
        (lambda m, s: m.current_worker(), RuntimeError, "off a worker thread"),
    ],
)
def test_errors_surface_as_their_python_class_with_the_message(lib, call, kind, message):
    s = lib.session_new_threaded(2, 1)
    with pytest.raises(kind, match=message) as raised:
        call(lib, s)
    assert raised.value.__tvm_ffi_error__.kind == kind.__name__
    # The library still works after each error.
    assert lib.session_num_workers(s) == 2
    lib.session_shutdown(s)


def test_own_error_kinds_are_runtime_errors_that_keep_the_kind(lib):
    s = lib.session_new_threaded(2, 1)

    def fails(x):
        raise ValueError(f"worker {lib.current_worker_id()} refuses {x}")

    lib.func_register_global("test.module.fails", fails)
    lib.session_call(s, lib.session_get_global_func(s, "test.module.fails"), 3)
    with pytest.raises(RuntimeError) as failed:
        lib.session_sync_worker(s, 1)
    error = failed.value.__tvm_ffi_error__
    assert (error.kind, str(failed.value)) == (
        "WorkerError",
        "worker 1: `test.module.fails` failed: ValueError: worker 1 refuses 3",
    )
    with pytest.raises(RuntimeError, match="worker 0") as failed:
        lib.session_sync_worker(s, 0)
    assert failed.value.__tvm_ffi_error__.kind == "WorkerError"
    with pytest.raises(RuntimeError) as unavailable:
        lib.session_init_ccl(s, "nccl")
    assert unavailable.value.__tvm_ffi_error__.kind == "DeviceUnavailable"
    lib.session_shutdown(s)
    with pytest.raises(RuntimeError, match="the session has been shut down") as closed:
        lib.session_sync_all(s)
    assert closed.value.__tvm_ffi_error__.kind == "SessionClosed"
    lib.func_remove_global("test.module.fails")


def test_a_wait_past_the_timeout_raises_and_the_session_goes_on(lib):
    s = lib.session_new_threaded(1, 1, 50)
    release = threading.Event()
    lib.func_register_global("test.module.block", lambda: release.wait(30))
    lib.session_call(s, lib.session_get_global_func(s, "test.module.block"))
    with pytest.raises(RuntimeError, match="sync on worker 0") as late:
        lib.session_sync_worker(s, 0)
    assert late.value.__tvm_ffi_error__.kind == "TimeoutError"
    release.set()
    lib.session_sync_worker(s, 0)
    lib.session_shutdown(s)
    lib.func_remove_global("test.module.block")


def test_a_bound_call_is_a_session_call_and_a_tried_one_never_waits(lib):
    keys = set(lib.object_type_keys())
    assert {"discovm.Session", "discovm.Worker", "discovm.DRef", "discovm.Stream"} <= keys
    one, two = lib.session_new_threaded(1), lib.session_new_threaded(2)
    rank = lib.session_get_global_func(one, "runtime.disco.worker_rank")
    call, tried = lib.session_bind(one, rank), lib.session_bind(one, rank, False)
    tried.release_gil = False  # it never waits, so it may keep the GIL
    results = [call(), tried()]
    lib.session_sync_all(one)
    assert [lib.dref_get(r, 0) for r in results] == [0, 0]
    # A call to two workers cannot be tried: half of it could be sent.
    rank_of_two = lib.session_get_global_func(two, "runtime.disco.worker_rank")
    assert lib.session_bind(two, rank_of_two, False) is None
    with pytest.raises(ValueError, match="`func` is a DRef of another session"):
        lib.session_bind(two, rank)
    lib.session_shutdown(one)
    lib.session_shutdown(two)
    with pytest.raises(RuntimeError, match="shut down"):
        call()


def test_functions_cross_both_ways(lib):
    assert lib.version() == "0.1.0"
    assert lib.device_count(1) == 1
    assert lib.device_count(2) == 0
    assert lib.current_worker_id() == -1

    def twice(x):
        return 2 * x

    lib.func_register_global("test.module.twice", twice)
    with pytest.raises(ValueError, match="already registered"):
        lib.func_register_global("test.module.twice", twice)
    lib.func_register_global("test.module.twice", lambda x: 3 * x, True)
    f = lib.func_get_global("test.module.twice")
    assert isinstance(f, tvm_ffi.Function)
    assert f(5) == 15
    assert lib.func_call(f, 7) == 21
    names = list(lib.func_list_global_names())
    assert "test.module.twice" in names and "runtime.disco.allreduce" in names
    assert names == sorted(names)
    # A function of the library's, called from Python.
    worker_rank = lib.func_get_global("runtime.disco.worker_rank")
    with pytest.raises(RuntimeError, match="must run on a session worker thread"):
        worker_rank()
    lib.func_remove_global("test.module.twice")
    assert "test.module.twice" not in list(lib.func_list_global_names())


def test_python_functions_run_on_the_worker_threads(lib):
    s = lib.session_new_threaded(4, 1)
    seen = {}

    def where(tag):
        worker = lib.current_worker()
        seen[lib.worker_id(worker)] = (threading.current_thread().name, tag)
        return lib.current_worker_id() * 10

    lib.func_register_global("test.module.where", where)
    r = lib.session_call(s, lib.session_get_global_func(s, "test.module.where"), "hi")
    lib.session_sync_all(s)
    assert [lib.dref_get(r, w) for w in range(4)] == [0, 10, 20, 30]
    assert sorted(seen) == [0, 1, 2, 3]
    main = threading.current_thread().name
    assert all(name != main and tag == "hi" for name, tag in seen.values())
    lib.session_shutdown(s)
    lib.func_remove_global("test.module.where")


def test_a_collective_through_the_built_ins(lib):
    s = lib.session_new_threaded(4, 1)
    lib.session_init_ccl(s, "cpu", [0, 0, 0, 0])
    empty = lib.session_get_global_func(s, "runtime.disco.empty")
    src = lib.session_call(s, empty, tvm_ffi.Shape((5,)), F32)
    dst = lib.session_call(s, empty, tvm_ffi.Shape((5,)), F32)
    fill = lambda t: np.from_dlpack(t).__setitem__(slice(None), lib.current_worker_id() + 1)  # noqa: E731
    lib.func_register_global("test.module.fill", fill)
    lib.session_call(s, lib.session_get_global_func(s, "test.module.fill"), src)
    allreduce = lib.session_get_global_func(s, "runtime.disco.allreduce")
    lib.session_call(s, allreduce, src, tvm_ffi.Shape((0,)), True, dst)
    out = np.zeros(5, dtype="float32")
    lib.session_copy_from_worker0(s, out, dst)
    np.testing.assert_array_equal(out, np.full(5, 1 + 2 + 3 + 4, dtype="float32"))
    np.testing.assert_array_equal(np.from_dlpack(lib.dref_get(dst, 3)), out)
    lib.session_shutdown(s)
    lib.func_remove_global("test.module.fill")


def test_streams_and_tensors(lib):
    a = lib.tensor_empty((2, 3), tvm_ffi.dtype("int32"), CPU)
    assert isinstance(a, tvm_ffi.Tensor)
    assert (a.shape, str(a.dtype)) == ((2, 3), "int32")
    np.testing.assert_array_equal(np.from_dlpack(a), np.zeros((2, 3), dtype="int32"))
    values = np.arange(6, dtype="int32")
    lib.tensor_write(a, values.tobytes())
    assert np.frombuffer(lib.tensor_read(a, 24), dtype="int32").tolist() == list(range(6))
    assert lib.tensor_read(a, 4) == values[:1].tobytes()
    assert lib.tensor_read(a, 0) == b""
    b = lib.tensor_empty([2, 3], tvm_ffi.dtype("int32"))
    s1, s2 = lib.stream_new(CPU), lib.stream_new(CPU)
    lib.tensor_copy(b, a, s1)
    lib.stream_wait(s2, s1)
    c = lib.tensor_empty((2, 3), tvm_ffi.dtype("int32"))
    lib.tensor_copy(c, b, s2)
    lib.stream_sync(s2)
    np.testing.assert_array_equal(np.from_dlpack(c), values.reshape(2, 3))
    with pytest.raises(ValueError, match="25 bytes cannot be read from a tensor of 24 bytes"):
        lib.tensor_read(a, 25)
    with pytest.raises(ValueError, match="is negative"):
        lib.tensor_read(a, -1)
    with pytest.raises(TypeError, match="`t` is not a tensor"):
        lib.tensor_write(s1, b"x")
    with pytest.raises(TypeError, match=r"argument 1 \(data\): expected bytes but got"):
        lib.tensor_write(a, "text")
    with pytest.raises(ValueError, match="shapes, dtypes and sizes must match"):
        lib.tensor_copy(lib.tensor_empty((4,), F32), a, s1)
    with pytest.raises(RuntimeError) as no_gpu:
        lib.stream_new(tvm_ffi.device("cuda", 0))
    assert no_gpu.value.__tvm_ffi_error__.kind == "DeviceUnavailable"


def test_tensors_made_elsewhere_are_imported_once_then_ordered(lib):
    array = np.arange(4, dtype="float32")
    with pytest.raises(TypeError, match="made by another library: import it first"):
        lib.tensor_read(array, 4)
    imported = lib.tensor_from_dlpack(array)
    assert lib.tensor_from_dlpack(imported).same_as(imported)
    lib.tensor_write(imported, np.float32(9).tobytes())
    assert array[0] == 9, "the import shares the array's memory"
    target = lib.tensor_empty((4,), F32)
    lib.tensor_copy(target, imported, lib.stream_new(CPU))
    assert np.frombuffer(lib.tensor_read(target, 16), dtype="float32").tolist() == [9, 1, 2, 3]
    with pytest.raises(TypeError, match="expected ffi.Tensor but got int"):
        lib.tensor_from_dlpack(3)


def test_tensor_settle_orders_dlpack_exports_after_queued_copies(lib):
    # A copy of 64 MiB queued on a stream's thread is still running when the call returns;
    # tvm-ffi's export of `dst` reads whatever is there. The copy writes its last element
    # last, so a view read before the copy finished shows the previous round's value there.
    n = 1 << 24
    arrays = [np.full(n, value, dtype="float32") for value in (1, 2)]
    sources = [lib.tensor_from_dlpack(a) for a in arrays]
    dst, stream = lib.tensor_empty((n,), F32, CPU), lib.stream_new(CPU)
    for round_ in range(8):
        value = round_ % 2 + 1
        lib.tensor_copy(dst, sources[round_ % 2], stream)
        assert lib.tensor_settle(dst) is None
        view = np.from_dlpack(dst)
        assert view[-1] == value, f"round {round_}: the export ran before the copy finished"
        assert (view == value).all(), f"round {round_}"
        del view
    lib.tensor_settle(sources[0])  # a tensor that was only read settles too
    lib.stream_sync(stream)


def test_tensor_settle_refuses_what_is_no_tensor_of_the_library(lib):
    with pytest.raises(TypeError, match=r"`t` is not a tensor \(it is int\)"):
        lib.tensor_settle(3)
    with pytest.raises(TypeError, match=r"`t` is not a tensor \(it is discovm.Stream\)"):
        lib.tensor_settle(lib.stream_new(CPU))
    with pytest.raises(TypeError, match=r"`t` is not a tensor \(it is None\)"):
        lib.tensor_settle(None)
    with pytest.raises(TypeError, match="`tensor_settle` takes "):
        lib.tensor_settle()
    with pytest.raises(TypeError, match="`tensor_settle` takes "):
        lib.tensor_settle(lib.tensor_empty((1,), F32), 1)
    # No stream uses an array made elsewhere, only its import: that is the one to settle.
    array = np.arange(4, dtype="float32")
    with pytest.raises(TypeError, match="`t` is a tensor made by another library: import it"):
        lib.tensor_settle(array)
    imported = lib.tensor_from_dlpack(array)
    lib.tensor_copy(imported, lib.tensor_empty((4,), F32), lib.stream_new(CPU))
    lib.tensor_settle(imported)
    np.testing.assert_array_equal(array, np.zeros(4))


def test_every_tensor_is_released_exactly_once(lib):
    # The chain numpy view -> our tensor -> tvm-ffi's tensor -> the base array: each link holds
    # a reference to the next, and releasing the view releases all of them, each once, so the
    # base array's count comes back to exactly where it was.
    base = np.arange(6, dtype="float64")
    before = sys.getrefcount(base)
    ours = lib.tensor_from_dlpack(base)
    view = np.from_dlpack(ours)
    del ours
    gc.collect()
    assert sys.getrefcount(base) > before
    view[1] = 42.0
    assert base[1] == 42.0
    del view
    gc.collect()
    assert sys.getrefcount(base) == before
    # The same for values kept in registers on the workers, released by dropping the DRef.
    s = lib.session_new_threaded(2, 1)
    lib.func_register_global("test.module.identity", lambda x: x, True)
    kept = lib.session_call(s, lib.session_get_global_func(s, "test.module.identity"), base)
    lib.session_sync_all(s)
    assert np.from_dlpack(lib.dref_get(kept, 1))[1] == 42.0
    assert sys.getrefcount(base) > before
    del kept
    lib.session_sync_all(s)
    gc.collect()
    assert [lib.session_live_registers(s, w) for w in range(2)] == [0, 0]
    assert sys.getrefcount(base) == before
    lib.session_shutdown(s)
    lib.func_remove_global("test.module.identity")


def test_objects_are_held_passed_back_and_released_by_tvm_ffi(lib):
    s = lib.session_new_threaded(2, 1)
    f = lib.session_get_global_func(s, "runtime.disco.worker_rank")
    w, stream = lib.session_worker(s, 1), lib.stream_new(CPU)
    t, func = lib.tensor_empty((2,), F32), lib.func_get_global("runtime.disco.worker_rank")
    names = [type(x).__name__ for x in (s, f, w, stream, t, func)]
    assert names == ["Session", "DRef", "Worker", "Stream", "Tensor", "Function"]
    # tvm-ffi's own containers hold our objects and give them back.
    held = tvm_ffi.convert([s, f, w, stream, t, func])
    assert all(a.same_as(b) for a, b in zip(held, (s, f, w, stream, t, func)))
    r = lib.session_call(held[0], held[1])
    lib.worker_sync(held[2])
    lib.tensor_copy(held[4], t, held[3])
    assert lib.dref_get(r, 1) == 1
    del held, f, r, w, stream, t, func
    gc.collect()
    assert [lib.session_live_registers(s, w) for w in range(2)] == [0, 0]
    lib.session_shutdown(s)
