"""Disco's VM-module session tests (apache/tvm, tests/python/disco/test_session.py,
``test_vm_module`` and ``test_vm_multi_func``, and a call of a ``tests.disco.*`` function that
TVM's worker module registers), written as Disco's are, with the session import
changed, host arrays as numpy arrays, and the models in TVM 0.27's script (``tirx``, plain
loops for blocks, ``out_ty``, no two functions with one global symbol): a model TVM compiled for
its Relax VM, loaded on every worker with ``load_vm_module``, its functions called through
``mod[name]``."""

from __future__ import annotations

import tempfile

import numpy as np
import pytest
import tvm
from tvm import relax as rx
from tvm.exec import disco_worker as _  # noqa: F401 - tests.disco.* for the threaded workers
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T  # TVM 0.27 names TIR "tirx"

import discovm as di  # Disco's tests: from tvm.runtime import disco as di
import session_kinds

# Every case on threads, worker processes and two nodes, as Disco's file runs every case on
# its threaded, process and socket sessions. This process imported TVM, so the workers of
# the other kinds import TVM's worker module, as Disco's worker processes run it.
_all_session_kinds = [di.ThreadedSession, session_kinds.processes, session_kinds.two_nodes]


@pytest.fixture(autouse=True)
def _nodes_end_with_their_session():
    yield
    session_kinds.end_nodes()


def _numpy_to_worker_0(sess: di.Session, np_array: np.ndarray, device):
    x_array = sess.empty(np_array.shape, "float32", device=device)
    sess.copy_to_worker_0(np_array, x_array)
    return x_array


def _numpy_from_worker_0(sess: di.Session, remote_array, shape, dtype):
    host_array = np.empty(shape, dtype)
    sess.copy_from_worker_0(host_array, remote_array)
    sess.sync_worker_0()
    return host_array


# pylint: disable=invalid-name
@I.ir_module
class TransposeMod:
    @T.prim_func
    def transpose(A: T.Buffer((8, 16), "float32"), B: T.Buffer((16, 8), "float32")):
        for i, j in T.grid(16, 8):
            B[i, j] = A[j, i]

    @R.function
    def main(A: R.Tensor((8, 16), dtype="float32")) -> R.Tensor((16, 8), dtype="float32"):
        cls = TransposeMod
        with R.dataflow():
            B = R.call_tir(cls.transpose, (A,), out_ty=R.Tensor((16, 8), dtype="float32"))
            R.output(B)
        return B


@I.ir_module
class TwoTransposesMod:
    @T.prim_func
    def t1(A: T.Buffer((8, 16), "float32"), B: T.Buffer((16, 8), "float32")):
        for i, j in T.grid(16, 8):
            B[i, j] = A[j, i]

    @T.prim_func
    def t2(A: T.Buffer((16, 8), "float32"), B: T.Buffer((8, 16), "float32")):
        for i, j in T.grid(8, 16):
            B[i, j] = A[j, i]

    @R.function
    def transpose_1(A: R.Tensor((8, 16), dtype="float32")) -> R.Tensor((16, 8), dtype="float32"):
        cls = TwoTransposesMod
        with R.dataflow():
            B = R.call_tir(cls.t1, (A,), out_ty=R.Tensor((16, 8), dtype="float32"))
            R.output(B)
        return B

    @R.function
    def transpose_2(A: R.Tensor((16, 8), dtype="float32")) -> R.Tensor((8, 16), dtype="float32"):
        cls = TwoTransposesMod
        with R.dataflow():
            B = R.call_tir(cls.t2, (A,), out_ty=R.Tensor((8, 16), dtype="float32"))
            R.output(B)
        return B


# pylint: enable=invalid-name


@pytest.mark.parametrize("session_kind", _all_session_kinds)
def test_vm_module(session_kind):
    num_workers = 4
    sess = session_kind(num_workers=num_workers)
    with tempfile.TemporaryDirectory() as tmpdir:
        path = tmpdir + "/test.so"
        device = tvm.cpu()
        x_np = np.arange(8 * 16).astype("float32").reshape([8, 16])
        y_np = x_np.transpose()

        rx.build(TransposeMod, target="llvm").export_library(path)
        mod = sess.load_vm_module(path, device=device)

        x_disc = _numpy_to_worker_0(sess, x_np, device=device)
        y_disc = mod["main"](x_disc)
        y_nd = _numpy_from_worker_0(sess, y_disc, shape=y_np.shape, dtype=y_np.dtype)
        np.testing.assert_equal(y_nd, y_np)


@pytest.mark.parametrize("session_kind", _all_session_kinds)
def test_vm_multi_func(session_kind):
    num_workers = 4
    sess = session_kind(num_workers=num_workers)
    with tempfile.TemporaryDirectory() as tmpdir:
        path = tmpdir + "/test.so"
        device = tvm.cpu()
        x_np = np.arange(8 * 16).astype("float32").reshape([8, 16])
        y_np = x_np.transpose()

        rx.build(TwoTransposesMod, target="llvm").export_library(path)
        mod = sess.load_vm_module(path, device=device)

        x_disc = _numpy_to_worker_0(sess, x_np, device=device)
        y_disc = mod["transpose_1"](x_disc)
        z_disc = mod["transpose_2"](y_disc)
        y_nd = _numpy_from_worker_0(sess, y_disc, shape=y_np.shape, dtype=y_np.dtype)
        z_nd = _numpy_from_worker_0(sess, z_disc, shape=x_np.shape, dtype=x_np.dtype)
        np.testing.assert_equal(y_nd, y_np)
        np.testing.assert_equal(z_nd, x_np)


@pytest.mark.parametrize("session_kind", _all_session_kinds)
def test_the_functions_tvm_s_worker_module_registers(session_kind):
    num_workers = 4
    sess = session_kind(num_workers=num_workers)
    func: di.DPackedFunc = sess.get_global_func("tests.disco.add_one")
    result: di.DRef = func(1)
    for i in range(num_workers):
        assert result.debug_get_from_remote(i) == 2
