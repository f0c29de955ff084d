"""Disco's own session and collective tests (apache/tvm, tests/python/disco/test_session.py and
the collective cases of test_ccl.py), written as a Disco script writes them, with only the
import changed: every case that needs neither a GPU nor TVM's compiler. The functions the
session tests call are registered in tvm-ffi's registry, as ``tvm.testing.disco`` registers
them for Disco.
"""

from __future__ import annotations

import numpy as np
import pytest
import tvm_ffi
from tvm_ffi import Shape as ShapeTuple
from tvm_ffi.core import String

import discovm as di  # Disco's tests: from tvm.runtime import disco as di
import disco_functions  # Disco's tests: from tvm.testing import disco
import session_kinds


def _process_session(num_workers):
    """A process session whose workers registered the functions the tests call: their
    entrypoint is a worker module in the style of Disco's ``tvm.exec.disco_worker`` (Disco's
    default entrypoint), whose import registers them. One BLAS thread per worker, chosen as a
    user who read the session's notice chooses it: the collective cases check that nothing is
    written to stderr."""
    return session_kinds.processes(
        num_workers, entrypoint=disco_functions.__name__, threads_per_worker=1
    )


def _socket_session(num_workers):
    """A session of 2 nodes of ``num_workers // 2`` workers on this machine, whose workers
    (the node's too) import the same entrypoint."""
    return session_kinds.two_nodes(
        num_workers, entrypoint=disco_functions.__name__, threads_per_worker=1
    )


@pytest.fixture(autouse=True)
def _nodes_end_with_their_session():
    """Every node a test started ends once its session is gone (exit status 0)."""
    yield
    session_kinds.end_nodes()


_needs_gloo = pytest.mark.skipif(
    not session_kinds.has_gloo(),
    reason="no Gloo plugin next to the library (Debian: libgloo-dev, make lib)",
)
_all_session_kinds = [di.ThreadedSession, _process_session]
_session_kinds_with_nodes = [*_all_session_kinds, _socket_session]
# The collective cases run on 2 nodes of 1 worker (Gloo between them) where Gloo is.
_ccl_session_kinds = [*_all_session_kinds, pytest.param(_socket_session, marks=_needs_gloo)]


def _numpy_to_worker_0(sess: di.Session, np_array: np.ndarray, device):
    x_array = sess.empty(np_array.shape, "float32", device=device)
    sess.copy_to_worker_0(np_array, x_array)
    return x_array


def _numpy_from_worker_0(sess: di.Session, remote_array, shape, dtype):
    host_array = np.empty(shape, dtype)
    sess.copy_from_worker_0(host_array, remote_array)
    sess.sync_worker_0()
    return host_array


# ---- test_session.py ------------------------------------------------------------------------


@pytest.mark.parametrize("session_kind", _session_kinds_with_nodes)
def test_int(session_kind):
    num_workers = 4
    sess = session_kind(num_workers=num_workers)
    func: di.DPackedFunc = sess.get_global_func("tests.disco.add_one")
    result: di.DRef = func(1)
    for i in range(num_workers):
        assert result.debug_get_from_remote(i) == 2


@pytest.mark.parametrize("session_kind", _session_kinds_with_nodes)
def test_float(session_kind):
    num_workers = 4
    sess = session_kind(num_workers=num_workers)
    func: di.DPackedFunc = sess.get_global_func("tests.disco.add_one_float")
    result: di.DRef = func(1.5)
    for i in range(num_workers):
        assert result.debug_get_from_remote(i) == 2.0


@pytest.mark.parametrize("session_kind", _session_kinds_with_nodes)
def test_ndarray(session_kind):
    num_workers = 4
    sess = session_kind(num_workers=num_workers)
    device = tvm_ffi.device("cpu", 0)
    x_np = np.arange(6).astype("float32").reshape([2, 3])
    y_np = np.arange(6).astype("float32").reshape([2, 3]) + 1
    x_disc = _numpy_to_worker_0(sess, x_np, device=device)
    y_disc = sess.get_global_func("tests.disco.add_one_ndarray")(x_disc)
    y_nd = _numpy_from_worker_0(sess, y_disc, shape=y_np.shape, dtype=y_np.dtype)
    np.testing.assert_equal(y_nd, y_np)


@pytest.mark.parametrize("session_kind", _session_kinds_with_nodes)
def test_string(session_kind):
    num_workers = 4
    sess = session_kind(num_workers=num_workers)
    func: di.DPackedFunc = sess.get_global_func("tests.disco.str")
    result: di.DRef = func("hello")
    for i in range(num_workers):
        assert result.debug_get_from_remote(i) == "hello_suffix"


@pytest.mark.parametrize("session_kind", _session_kinds_with_nodes)
def test_string_obj(session_kind):
    num_workers = 4
    sess = session_kind(num_workers=num_workers)
    func: di.DPackedFunc = sess.get_global_func("tests.disco.str_obj")
    result: di.DRef = func(String("hello"))
    for i in range(num_workers):
        value = result.debug_get_from_remote(i)
        assert isinstance(value, String)
        assert value == "hello_suffix"


@pytest.mark.parametrize("session_kind", _session_kinds_with_nodes)
def test_shape_tuple(session_kind):
    num_workers = 4
    sess = session_kind(num_workers=num_workers)
    func: di.DPackedFunc = sess.get_global_func("tests.disco.shape_tuple")
    result: di.DRef = func(ShapeTuple([1, 2, 3]))
    for i in range(num_workers):
        value = result.debug_get_from_remote(i)
        assert isinstance(value, ShapeTuple)
        assert list(value) == [1, 2, 3, 4, 5]


def test_two_nodes_of_one_worker_each():
    """The session tests' calls on the smallest session across machines: 2 nodes of 1 worker."""
    sess = _socket_session(num_workers=2)
    assert sess.num_workers == 2
    result = sess.get_global_func("tests.disco.add_one")(1)
    assert [result.debug_get_from_remote(i) for i in range(2)] == [2, 2]
    shapes = sess.get_global_func("tests.disco.shape_tuple")(ShapeTuple([1, 2, 3]))
    assert list(shapes.debug_get_from_remote(1)) == [1, 2, 3, 4, 5]
    ids = sess.get_global_func("runtime.disco.worker_id")()
    assert [list(ids.debug_get_from_remote(i)) for i in range(2)] == [[0], [1]]
    sess.shutdown()


def test_other_nodes_workers_run_on_the_cpu_or_each_on_the_gpu_of_its_index():
    """``devices`` of a SocketSession: another node's worker 0 on CUDA device 1 is refused,
    naming the entry, before anything listens."""
    with pytest.raises(ValueError, match=r"devices\[1\] is \(2, 1\): the workers of node 1"):
        di.SocketSession(
            2, 1, 1, "127.0.0.1", 0, session_token=session_kinds.TOKEN, devices=["cpu", "cuda:1"]
        )


# ---- test_ccl.py, the collective cases, on the CPU backend ------------------------------------

_ccl = ["cpu"]


@pytest.mark.parametrize("session_kind", _ccl_session_kinds)
@pytest.mark.parametrize("ccl", _ccl)
def test_init(session_kind, ccl):
    devices = [0, 1]
    sess = session_kind(num_workers=len(devices))
    sess.init_ccl(ccl, *devices)


@pytest.mark.parametrize("session_kind", _ccl_session_kinds)
@pytest.mark.parametrize("ccl", _ccl)
def test_allreduce(session_kind, ccl):
    devices = [0, 1]
    sess = session_kind(num_workers=len(devices))
    sess.init_ccl(ccl, *devices)

    array_1 = np.arange(12, dtype="float32").reshape(3, 4)
    array_2 = np.arange(start=1, stop=-11, step=-1, dtype="float32").reshape(3, 4)
    d_array = sess.empty((3, 4), "float32")
    d_array.debug_copy_from(0, array_1)
    d_array.debug_copy_from(1, array_2)
    for op, np_op in [
        ("sum", np.add),
        ("prod", np.multiply),
        ("min", np.minimum),
        ("max", np.maximum),
        ("avg", lambda a, b: (a + b) * 0.5),
    ]:
        dst_array = sess.empty((3, 4), "float32")
        sess.allreduce(d_array, dst_array, op=op)
        result = dst_array.debug_get_from_remote(0).numpy()
        expected = np_op(array_1, array_2)
        np.testing.assert_equal(result, expected)


@pytest.mark.parametrize("session_kind", _ccl_session_kinds)
@pytest.mark.parametrize("ccl", _ccl)
def test_allgather(session_kind, ccl):
    devices = [0, 1]
    sess = session_kind(num_workers=len(devices))
    sess.init_ccl(ccl, *devices)

    array = np.arange(36, dtype="float32")
    d_src = sess.empty((3, 3, 2), "float32")
    d_dst = sess.empty((3, 4, 3), "float32")
    d_src.debug_copy_from(0, array[:18])
    d_src.debug_copy_from(1, array[18:])
    sess.allgather(d_src, d_dst)
    np.testing.assert_equal(d_dst.debug_get_from_remote(0).numpy(), array.reshape(3, 4, 3))
    np.testing.assert_equal(d_dst.debug_get_from_remote(1).numpy(), array.reshape(3, 4, 3))


@pytest.mark.parametrize("session_kind", _ccl_session_kinds)
@pytest.mark.parametrize("ccl", _ccl)
def test_broadcast_from_worker0(session_kind, ccl):
    devices = [0, 1]
    sess = session_kind(num_workers=len(devices))
    sess.init_ccl(ccl, *devices)

    array = np.arange(12, dtype="float32").reshape(3, 4)
    d_array = sess.empty((3, 4), "float32", worker0_only=True)
    d_array.debug_copy_from(0, array)
    dst_array = sess.empty((3, 4), "float32")
    sess.broadcast_from_worker0(d_array, dst_array)
    result = dst_array.debug_get_from_remote(1).numpy()
    np.testing.assert_equal(result, array)


@pytest.mark.parametrize("session_kind", _ccl_session_kinds)
@pytest.mark.parametrize("ccl", _ccl)
def test_scatter(session_kind, ccl, capfd):
    devices = [0, 1]
    sess = session_kind(num_workers=len(devices))
    sess.init_ccl(ccl, *devices)

    array = np.arange(36, dtype="float32").reshape(3, 4, 3)
    d_src = sess.empty((3, 4, 3), "float32", worker0_only=True)
    d_dst = sess.empty((3, 3, 2), "float32")
    d_src.debug_copy_from(0, array)
    sess.scatter_from_worker0(d_src, d_dst)
    np.testing.assert_equal(
        d_dst.debug_get_from_remote(0).numpy(), array.flat[:18].reshape(3, 3, 2)
    )
    np.testing.assert_equal(
        d_dst.debug_get_from_remote(1).numpy(), array.flat[18:].reshape(3, 3, 2)
    )
    captured = capfd.readouterr()
    assert not captured.err, "No warning messages should be generated from scatter_from_worker0"


@pytest.mark.parametrize("session_kind", _ccl_session_kinds)
@pytest.mark.parametrize("ccl", _ccl)
def test_gather(session_kind, ccl, capfd):
    devices = [0, 1]
    sess = session_kind(num_workers=len(devices))
    sess.init_ccl(ccl, *devices)

    array = np.arange(36, dtype="float32")
    d_src = sess.empty((3, 3, 2), "float32")
    d_dst = sess.empty((3, 4, 3), "float32", worker0_only=True)
    d_src.debug_copy_from(0, array[:18])
    d_src.debug_copy_from(1, array[18:])
    sess.gather_to_worker0(d_src, d_dst)
    np.testing.assert_equal(d_dst.debug_get_from_remote(0).numpy(), array.reshape(3, 4, 3))
    captured = capfd.readouterr()
    assert not captured.err, "No warning messages should be generated from gather_to_worker0"


@_needs_gloo
def test_collectives_on_two_nodes_of_two_workers():
    """The collective cases' calls on 2 nodes of 2 workers: shared memory would meet within a
    node; Gloo meets across them."""
    sess = _socket_session(num_workers=4)
    sess.init_ccl("cpu", 0, 1, 2, 3)
    parts = [np.arange(6, dtype="float32") + 10 * w for w in range(4)]
    d_src = sess.empty((6,), "float32")
    for w in range(4):
        d_src.debug_copy_from(w, parts[w])
    d_sum = sess.empty((6,), "float32")
    sess.allreduce(d_src, d_sum, op="sum")
    for w in range(4):
        np.testing.assert_equal(d_sum.debug_get_from_remote(w).numpy(), sum(parts))
    d_all = sess.empty((4, 6), "float32")
    sess.allgather(d_src, d_all)
    np.testing.assert_equal(d_all.debug_get_from_remote(3).numpy(), np.stack(parts))
    d_gathered = sess.empty((4, 6), "float32", worker0_only=True)
    sess.gather_to_worker0(d_src, d_gathered)
    np.testing.assert_equal(d_gathered.debug_get_from_remote(0).numpy(), np.stack(parts))
    sess.shutdown()
