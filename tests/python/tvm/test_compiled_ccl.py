"""Models that TVM compiled, with collectives, run on discovm's workers; TVM's own Disco keeps
working in the same process.

The compiled code finds ``runtime.disco.*`` by name in tvm-ffi's registry; discovm puts
dispatchers there that run discovm's built-ins on discovm's workers and TVM's everywhere else.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tvm  # noqa: F401 - TVM's libraries (and its runtime.disco.* built-ins) are loaded first
import tvm_ffi

import discovm
import failing_run  # noqa: F401 - registers the worker function for this process's threads
import on_discovm
import session_kinds
import sharded_mlp

HERE = Path(__file__).resolve().parent

#: Every kind of session: threads, worker processes, and two nodes of one worker each, whose
#: collectives meet over Gloo (where the controller also rules on a wait for a peer that
#: passed its collective).
each_kind = pytest.mark.parametrize(
    "session_kind",
    [
        discovm.ThreadedSession,
        session_kinds.processes,
        pytest.param(
            session_kinds.two_nodes,
            marks=pytest.mark.skipif(
                not session_kinds.has_gloo(), reason="no Gloo plugin next to the library"
            ),
        ),
    ],
)

#: A worker function that asks tvm-ffi's registry (as compiled code does) who the worker is.
WHO_AM_I = "tests.tvm.who_am_i"


@discovm.register_global_func(WHO_AM_I, override=True)
def who_am_i() -> list:
    get = tvm_ffi.get_global_func
    rank, size = get("runtime.disco.worker_rank")(), get("runtime.disco.world_size")()
    return [rank, size, list(get("runtime.disco.worker_id")())]


def test_a_sharded_mlp_compiled_by_tvm_equals_the_whole_one_on_tvm_vm(model):
    with discovm.ThreadedSession(sharded_mlp.NUM_WORKERS) as sess:
        sess.init_ccl("cpu")
        main = on_discovm.load_sharded(sess, model.path)
        outputs = on_discovm.run_sharded(sess, main, model.x, model.w1, model.w2)
    assert len(outputs) == sharded_mlp.NUM_WORKERS
    for out in outputs:
        np.testing.assert_allclose(out, model.reference, rtol=1e-5, atol=1e-5)


def test_the_model_runs_again_on_the_same_workers_with_new_inputs(model):
    with discovm.ThreadedSession(sharded_mlp.NUM_WORKERS) as sess:
        sess.init_ccl("cpu")
        main = on_discovm.load_sharded(sess, model.path)
        for seed in (1, 2):
            x, w1, w2 = sharded_mlp.inputs(seed)
            expected = sharded_mlp.reference(x, w1, w2)
            for out in on_discovm.run_sharded(sess, main, x, w1, w2):
                np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


@each_kind
def test_session_load_vm_module_runs_it_on_every_kind_of_session(model, session_kind):
    with session_kind(sharded_mlp.NUM_WORKERS) as sess:
        sess.init_ccl("cpu")
        main = sess.load_vm_module(model.path)["main"]
        for out in on_discovm.run_sharded(sess, main, model.x, model.w1, model.w2):
            np.testing.assert_allclose(out, model.reference, rtol=1e-5, atol=1e-5)
    session_kinds.end_nodes()


def test_disco_loader_reached_through_tvm_ffi_on_a_worker_loads_the_model(model):
    # A script written for Disco's workers calls Disco's loader by name, with no device.
    def load(path: str):
        return tvm_ffi.get_global_func("runtime.disco.load_vm_module")(path, None)["main"]

    discovm.register_global_func("tests.tvm.load_through_tvm_ffi", load, override=True)
    with discovm.ThreadedSession(sharded_mlp.NUM_WORKERS) as sess:
        sess.init_ccl("cpu")
        main = sess.get_global_func("tests.tvm.load_through_tvm_ffi")(str(model.path))
        for out in on_discovm.run_sharded(sess, main, model.x, model.w1, model.w2):
            np.testing.assert_allclose(out, model.reference, rtol=1e-5, atol=1e-5)


@each_kind
def test_a_worker_that_fails_before_the_models_collectives_fails_the_others_at_once(
    model, session_kind, monkeypatch
):
    # Worker processes and nodes import the worker function from this folder.
    paths = [str(HERE), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, paths)))
    imports = {} if session_kind is discovm.ThreadedSession else {"entrypoint": "failing_run"}
    # No session timeout: the others learn from worker 1's record that it finished the call.
    with session_kind(sharded_mlp.NUM_WORKERS, timeout=None, **imports) as sess:
        sess.init_ccl("cpu")
        main = sess.load_vm_module(model.path)["main"]
        n = sess.num_workers
        d_x = sess.empty(model.x.shape, "float32")
        sess.copy_to_worker_0(model.x, d_x)
        d_w1 = sess.scatter(np.stack(np.split(model.w1, n, axis=1)))
        d_w2 = sess.scatter(np.stack(np.split(model.w2, n, axis=0)))
        sess.sync_all()
        started = time.monotonic()
        sess.get_global_func("tests.tvm.run_unless")(1, main, d_x, d_w1, d_w2)
        expected = (
            r"broadcast_from_worker0 in call \d+ \(`tests.tvm.run_unless`\) on worker 0: "
            r"worker 1 finished call \d+ without joining it: `tests.tvm.run_unless` failed: "
            r"ValueError: failed before the model on purpose"
        )
        with pytest.raises(discovm.WorkerError, match=expected):
            sess.sync_all()
        assert time.monotonic() - started < 1.0
        # The model runs again on the same workers, without init_ccl.
        for out in on_discovm.run_sharded(sess, main, model.x, model.w1, model.w2):
            np.testing.assert_allclose(out, model.reference, rtol=1e-5, atol=1e-5)
    session_kinds.end_nodes()


def test_a_worker_asking_tvm_ffi_reaches_discovm_and_other_threads_reach_tvm():
    with discovm.ThreadedSession(3) as sess:
        answers = sess.get_global_func(WHO_AM_I)()
        assert [answers.debug_get_from_remote(w) for w in range(3)] == [
            [w, 3, [w]] for w in range(3)
        ]
    # Off the workers, the functions are TVM's, which say so.
    with pytest.raises(Exception, match="not a DiscoWorker thread"):
        tvm_ffi.get_global_func("runtime.disco.worker_rank")()


def test_an_error_of_a_built_in_reached_through_tvm_ffi_comes_back_from_the_worker():
    def allreduce_without_ccl() -> None:
        t = np.zeros(4, "float32")
        tvm_ffi.get_global_func("runtime.disco.allreduce")(t, tvm_ffi.Shape((0,)), True, t)

    discovm.register_global_func("tests.tvm.allreduce_without_ccl", allreduce_without_ccl, True)
    with discovm.ThreadedSession(2) as sess:
        sess.get_global_func("tests.tvm.allreduce_without_ccl")()
        with pytest.raises(discovm.WorkerError, match="call init_ccl on the session first"):
            sess.sync_all()


def test_tvm_imported_after_the_session_started(model, tmp_path):
    data = tmp_path / "data.npz"
    np.savez(data, x=model.x, w1=model.w1, w2=model.w2, reference=model.reference)
    run = subprocess.run(
        [sys.executable, str(HERE / "on_discovm.py"), str(model.path), str(data)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("matches TVM's VM") == sharded_mlp.NUM_WORKERS


class StandInCcl:
    """Disco's collectives for a session without a CCL (this wheel has no NCCL): Disco's
    ``runtime.disco.allreduce`` calls ``runtime.disco.<ccl>.allreduce``, with ``<ccl>`` empty
    until ``init_ccl``. Its workers are threads of this process, so a barrier is enough."""

    def __init__(self, num_workers: int) -> None:
        self.sends: list[np.ndarray | None] = [None] * num_workers
        self.barrier = threading.Barrier(num_workers, timeout=60)

    def allreduce(self, send, kind: int, in_group: bool, recv) -> None:
        assert kind == 0, "only sum"
        rank = tvm_ffi.get_global_func("runtime.disco.worker_rank")()
        self.sends[rank] = np.from_dlpack(send).copy()
        self.barrier.wait()
        np.from_dlpack(recv)[...] = np.sum(self.sends, axis=0)
        self.barrier.wait()


def test_tvm_threaded_session_still_runs_an_allreduce_after_the_dispatchers():
    # A discovm session looks up a function: the dispatchers are in tvm-ffi's registry now.
    with discovm.ThreadedSession(1) as sess:
        answers = sess.get_global_func(WHO_AM_I)()
        assert answers.debug_get_from_remote(0) == [0, 1, [0]]

    tvm_ffi.init_ffi_api("runtime.disco", "tvm.runtime.disco._ffi_api")  # the wheel needs it
    disco = importlib.import_module("tvm.runtime.disco")
    ccl = StandInCcl(2)
    tvm_ffi.register_global_func("runtime.disco..allreduce", ccl.allreduce, override=True)
    sess = disco.ThreadedSession(2)
    try:
        src, dst = sess.empty((4,), "float32"), sess.empty((4,), "float32")
        for w in range(2):
            src.debug_copy_from(w, np.full(4, w + 1, "float32"))
        sess.allreduce(src, dst, op="sum")
        sess._sync_all()
        for w in range(2):
            np.testing.assert_array_equal(dst.debug_get_from_remote(w).numpy(), [3] * 4)
        ranks = sess.get_global_func("runtime.disco.worker_rank")()
        assert [ranks.debug_get_from_remote(w) for w in range(2)] == [0, 1]
    finally:
        sess.shutdown()
