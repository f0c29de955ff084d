"""ProcessSession: Disco's signature, workers as processes running ``python -m discovm.worker``,
functions a module registers once the workers import it, values that cross and those refused
at the call, and a worker that dies raising WorkerError without taking this process along."""

from __future__ import annotations

import os

import numpy as np
import pytest

import discovm


@pytest.fixture
def psess():
    session = discovm.ProcessSession(2)
    session.import_python_module("process_functions")
    yield session
    session.shutdown()


def test_workers_are_processes_running_what_their_modules_register(psess):
    pids = psess.get_global_func("tests.process.pid")()
    seen = [pids.debug_get_from_remote(w) for w in range(2)]
    assert os.getpid() not in seen and seen[0] != seen[1]
    ranks = psess.get_global_func("runtime.disco.worker_rank")()
    assert [ranks.debug_get_from_remote(w) for w in range(2)] == [0, 1]


def test_arrays_cross_as_copies_and_functions_do_not_cross(psess):
    x = psess.copy_to_worker_0(np.arange(6, dtype="float32").reshape(2, 3))
    np.testing.assert_array_equal(x.debug_get_from_remote(0).numpy(), np.arange(6).reshape(2, 3))
    with pytest.raises(TypeError, match="cannot cross"):
        psess.get_global_func("runtime.disco.worker_rank")(discovm.get_global_func("runtime.disco.worker_rank"))
    with pytest.raises(KeyError, match="tests.process.nothing"):
        psess.get_global_func("tests.process.nothing")


def test_a_worker_that_exits_raises_worker_error_naming_it(psess):
    pids = psess.get_global_func("tests.process.pid")()
    pid = pids.debug_get_from_remote(1)
    psess.get_global_func("tests.process.exit")(7)
    with pytest.raises(discovm.WorkerError, match=rf"worker \d \(pid \d+\) exited with status 7"):
        psess.sync_all()
    with pytest.raises(discovm.WorkerError, match="exited with status 7"):
        psess.sync_worker_0()
    psess.shutdown()
    assert not os.path.exists(f"/proc/{pid}")


def test_the_constructor_has_disco_s_signature():
    import inspect

    params = list(inspect.signature(discovm.ProcessSession).parameters.values())
    assert [(p.name, p.default) for p in params[:3]] == [
        ("num_workers", inspect.Parameter.empty),
        ("num_groups", 1),
        ("entrypoint", "discovm.worker"),
    ]
