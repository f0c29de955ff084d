"""Python functions in the library's registry, called by the workers on their own threads."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest
import tvm_ffi

import discovm


@pytest.fixture
def registered():
    """Names registered by a test, removed after it."""
    names: list[str] = []
    yield names
    for name in names:
        discovm.remove_global_func(name)


def test_each_worker_runs_the_function_on_its_own_thread(sess, registered):
    seen: dict[int, str] = {}
    lock = threading.Lock()

    @discovm.register_global_func("test.callbacks.whoami")
    def whoami(prefix: str) -> str:
        with lock:
            seen[discovm.current_worker_id()] = threading.current_thread().name
        return f"{prefix}{discovm.current_worker_id()}"

    registered.append("test.callbacks.whoami")
    names = sess.get_global_func("test.callbacks.whoami")("worker ")
    sess.sync_all()
    assert [names.debug_get_from_remote(w) for w in range(4)] == [f"worker {w}" for w in range(4)]
    assert sorted(seen) == [0, 1, 2, 3]
    assert threading.current_thread().name not in seen.values()
    assert len(set(seen.values())) == 4
    assert discovm.current_worker_id() == -1


def test_registry_functions_are_listed_called_and_removed(registered):
    discovm.register_global_func("test.callbacks.add", lambda a, b: a + b)
    registered.append("test.callbacks.add")
    assert "test.callbacks.add" in discovm.list_global_func_names()
    assert discovm.get_global_func("test.callbacks.add")(2, 3) == 5
    with pytest.raises(ValueError, match="already registered"):
        discovm.register_global_func("test.callbacks.add", lambda a, b: a - b)
    discovm.register_global_func("test.callbacks.add", lambda a, b: a - b, override=True)
    assert discovm.get_global_func("test.callbacks.add")(2, 3) == -1
    with pytest.raises(KeyError, match="no global function has the name `test.callbacks.none`"):
        discovm.get_global_func("test.callbacks.none")
    with pytest.raises(KeyError):
        discovm.remove_global_func("test.callbacks.none")


def test_functions_registered_with_tvm_ffi_are_found_as_in_disco_scripts(sess):
    # A script written for Disco registers its worker functions in tvm-ffi's registry.
    @tvm_ffi.register_global_func("test.callbacks.in_tvm_ffi", override=True)
    def plus_worker(x: int) -> int:
        return x + discovm.current_worker_id()

    results = sess.get_global_func("test.callbacks.in_tvm_ffi")(100)
    sess.sync_all()
    assert [results.debug_get_from_remote(w) for w in range(4)] == [100, 101, 102, 103]
    assert discovm.get_global_func("test.callbacks.in_tvm_ffi")(1) == 0  # off the workers: -1
    # The library's own registry comes first.
    discovm.register_global_func("test.callbacks.in_tvm_ffi", lambda x: -x)
    assert discovm.get_global_func("test.callbacks.in_tvm_ffi")(1) == -1
    discovm.remove_global_func("test.callbacks.in_tvm_ffi")


def test_results_stay_on_their_worker_and_feed_later_calls(sess, registered):
    @discovm.register_global_func("test.callbacks.make")
    def make(n: int) -> np.ndarray:
        return np.full(n, discovm.current_worker_id(), dtype="int64")

    @discovm.register_global_func("test.callbacks.total")
    def total(t) -> int:
        return int(np.from_dlpack(t).sum())

    registered += ["test.callbacks.make", "test.callbacks.total"]
    arrays = sess.get_global_func("test.callbacks.make")(3)
    totals = sess.get_global_func("test.callbacks.total")(arrays)
    sess.sync_all()
    assert [totals.debug_get_from_remote(w) for w in range(4)] == [0, 3, 6, 9]
    out = np.empty(3, dtype="int64")
    sess.copy_from_worker_0(out, arrays)  # a numpy array a worker made, imported for the copy
    np.testing.assert_array_equal(out, [0, 0, 0])


def test_a_failing_function_raises_worker_error_at_the_next_wait_and_the_session_goes_on(
    sess, registered
):
    @discovm.register_global_func("test.callbacks.divide")
    def divide(x: float) -> float:
        if discovm.current_worker_id() == 2:
            raise ValueError(f"cannot divide {x} on this worker")
        return 1 / x

    registered.append("test.callbacks.divide")
    divide_on_workers = sess.get_global_func("test.callbacks.divide")
    result = divide_on_workers(4.0)
    sess.sync_worker(0)
    assert result.debug_get_from_remote(0) == 0.25
    with pytest.raises(discovm.WorkerError) as failed:
        sess.sync_worker(2)
    assert (
        str(failed.value)
        == "worker 2: `test.callbacks.divide` failed: ValueError: cannot divide 4.0 on this worker"
    )
    assert failed.value.__tvm_ffi_error__.kind == "WorkerError"
    with pytest.raises(discovm.WorkerError, match="cannot divide"):
        result.debug_get_from_remote(2)  # the register the failed call should have filled
    # An exception Python does not map keeps its class name in the message.
    divide_on_workers(0.0)
    with pytest.raises(discovm.WorkerError, match="ZeroDivisionError|division by zero"):
        sess.sync_worker(1)
    with pytest.raises(discovm.WorkerError):
        sess.sync_all()  # the other workers' reports
    ok = sess.get_global_func("runtime.disco.worker_rank")()
    sess.sync_all()
    assert ok.debug_get_from_remote(3) == 3


HELD_WORKERS_SCRIPT = """
import threading
import discovm

CAPACITY = 4096  # messages a worker's queue holds (the library's session::QUEUE_CAPACITY)

release = threading.Event()
discovm.register_global_func("held", lambda: release.wait())
calls = []
discovm.register_global_func("count", calls.append)
with discovm.ThreadedSession(2) as sess:
    held, count = sess.get_global_func("held"), sess.get_global_func("count")
    first = held()
    # Fill both queues behind the held call, then drop every result: with no room left, the
    # frees must not wait, for this thread holds the interpreter lock the workers need.
    results = [count(i) for i in range(CAPACITY - 1)]
    del results
    release.set()
    sess.sync_all()
    del first
    assert len(calls) == 2 * (CAPACITY - 1), len(calls)
    assert [sess.live_registers(w) for w in range(2)] == [2, 2]  # held and count
print("ok")
"""


def test_dropping_results_while_the_workers_queues_are_full_does_not_wait():
    # Run apart, so that a wait that never ends fails this test instead of hanging the run.
    done = subprocess.run(
        [sys.executable, "-c", HELD_WORKERS_SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr


ONE_WORKER_PIPELINE_SCRIPT = """
import threading
import discovm

CAPACITY = 4096  # messages a worker's queue holds (the library's session::QUEUE_CAPACITY)

release = threading.Event()
discovm.register_global_func("held", lambda: release.wait())
calls = []
discovm.register_global_func("count", calls.append)
with discovm.ThreadedSession(1, timeout=60) as sess:
    held, count = sess.get_global_func("held"), sess.get_global_func("count")
    first = held()
    # Only another thread lets the worker go: it needs the interpreter lock, which calls to one
    # worker hold while they find room in its queue, and must let go of when they wait for it.
    threading.Timer(0.2, release.set).start()
    for i in range(2 * CAPACITY):
        count(i)
    sess.sync_all()
    assert calls == list(range(2 * CAPACITY)), len(calls)
print("ok")
"""


def test_calls_to_one_worker_wait_for_room_without_the_interpreter_lock():
    # Run apart, so that a wait that never ends fails this test instead of hanging the run.
    done = subprocess.run(
        [sys.executable, "-c", ONE_WORKER_PIPELINE_SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr


def test_functions_on_workers_may_call_back_into_the_library(sess, registered):
    @discovm.register_global_func("test.callbacks.make_tensor")
    def make_tensor():
        t = discovm.Tensor((2,), "int32")
        t.write(np.array([discovm.current_worker_id(), 7], dtype="int32"))
        return t

    registered.append("test.callbacks.make_tensor")
    tensors = sess.get_global_func("test.callbacks.make_tensor")()
    sess.sync_all()
    for w in range(4):
        np.testing.assert_array_equal(np.from_dlpack(tensors.debug_get_from_remote(w)), [w, 7])
