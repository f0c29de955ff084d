"""The discovm package's Session, method by method against what Disco's does, on numpy data;
each test that runs a session runs it once of each kind (``[threads]``, ``[processes]``)."""

from __future__ import annotations

import gc
import json
import inspect
import os
import shutil
import subprocess
import sys
import time
import weakref
from pathlib import Path

import numpy as np
import pytest
import tvm_ffi

import discovm

# Each kind of session, for the tests that take the class as `kind`, or the `sess` fixture's.
KINDS = [
    pytest.param(discovm.ThreadedSession, id="threads"),
    pytest.param(discovm.ProcessSession, id="processes"),
]
each_kind = pytest.mark.parametrize("kind", KINDS)
each_kind_of_sess = pytest.mark.parametrize("sess", KINDS, indirect=True)

DISCO_METHODS = [
    "empty",
    "get_global_func",
    "import_python_module",
    "call_packed",
    "sync_worker_0",
    "copy_from_worker_0",
    "copy_to_worker_0",
    "init_ccl",
    "broadcast",
    "broadcast_from_worker0",
    "scatter",
    "scatter_from_worker0",
    "gather_to_worker0",
    "allreduce",
    "allgather",
    "shutdown",
    "_sync_worker",
    "_sync_all",
]

# Disco's parameters (names, order, defaults), as tvm.runtime.disco.Session declares them.
DISCO_SIGNATURES = {
    "empty": "(self, shape, dtype, device=None, worker0_only=False, in_group=True)",
    "call_packed": "(self, func, *args)",
    "copy_from_worker_0": "(self, host_array, remote_array)",
    "copy_to_worker_0": "(self, host_array, remote_array=None)",
    "init_ccl": "(self, ccl, *device_ids)",
    "broadcast": "(self, src, dst=None, in_group=True)",
    "broadcast_from_worker0": "(self, src, dst, in_group=True)",
    "scatter": "(self, src, dst=None, in_group=True)",
    "scatter_from_worker0": "(self, from_array, to_array, in_group=True)",
    "gather_to_worker0": "(self, from_array, to_array, in_group=True)",
    "allreduce": "(self, src, dst, op='sum', in_group=True)",
    "allgather": "(self, src, dst, in_group=True)",
}


def bare_signature(method) -> str:
    """A method's parameters without annotations."""
    params = [
        p.replace(annotation=inspect.Parameter.empty)
        for p in inspect.signature(method).parameters.values()
    ]
    return str(inspect.Signature(params))


def test_the_session_has_disco_s_methods_with_disco_s_parameters():
    for name in DISCO_METHODS:
        assert callable(getattr(discovm.Session, name)), name
        assert getattr(discovm.Session, name).__doc__, name
    for name, signature in DISCO_SIGNATURES.items():
        assert bare_signature(getattr(discovm.Session, name)) == signature, name
    assert callable(discovm.DRef.debug_get_from_remote) and callable(discovm.DRef.debug_copy_from)
    assert bare_signature(discovm.ThreadedSession.__init__).startswith(
        "(self, num_workers, num_groups=1"
    )


@each_kind
def test_a_four_worker_session_on_numpy_data(kind):
    # What the README shows: the whole flow on numpy arrays.
    with kind(4) as sess:
        sess.init_ccl("cpu")
        x = sess.broadcast(np.arange(8, dtype="float32"))
        y = sess.empty((8,), "float32")
        sess.allreduce(x, y, op="sum")
        out = np.empty(8, dtype="float32")
        sess.copy_from_worker_0(out, y)
        np.testing.assert_array_equal(out, 4 * np.arange(8, dtype="float32"))
        for w in range(4):
            np.testing.assert_array_equal(np.from_dlpack(y.debug_get_from_remote(w)), out)
    with pytest.raises(discovm.SessionClosed):
        sess.sync_worker_0()


@each_kind_of_sess
def test_empty_makes_tensors_on_every_worker_or_on_worker_0_alone(sess):
    every = sess.empty([2, 3], np.int16)
    for w in range(4):
        t = every.debug_get_from_remote(w)
        assert (t.shape, str(t.dtype), str(t.device)) == ((2, 3), "int16", "cpu:0")
    only = sess.empty((5,), "float64", tvm_ffi.device("cpu"), worker0_only=True)
    assert only.debug_get_from_remote(0).shape == (5,)
    assert [only.debug_get_from_remote(w) for w in (1, 2, 3)] == [None] * 3


@each_kind
def test_groups_give_each_group_its_own_worker_0(kind):
    with kind(4, 2) as sess:
        firsts = sess.empty((1,), "float32", worker0_only=True)
        assert [firsts.debug_get_from_remote(w) is None for w in range(4)] == [
            False,
            True,
            False,
            True,
        ]
        global_first = sess.empty((1,), "float32", worker0_only=True, in_group=False)
        assert [global_first.debug_get_from_remote(w) is None for w in range(4)] == [
            False,
            True,
            True,
            True,
        ]


@each_kind_of_sess
def test_copies_to_and_from_worker_0(sess):
    data = np.arange(12, dtype="float32").reshape(3, 4)
    remote = sess.copy_to_worker_0(data)
    assert [remote.debug_get_from_remote(w) is None for w in range(4)] == [False, True, True, True]
    out = np.zeros_like(data)
    sess.copy_from_worker_0(out, remote)  # filled on return: no sync needed
    np.testing.assert_array_equal(out, data)
    again = sess.copy_to_worker_0(tvm_ffi.from_dlpack(data + 1), remote)
    assert again is remote
    sess.copy_from_worker_0(out, remote)
    np.testing.assert_array_equal(out, data + 1)
    with pytest.raises(ValueError, match="does not match the remote tensor"):
        sess.copy_from_worker_0(np.zeros(5, dtype="float32"), remote)
    with pytest.raises(ValueError, match="contiguous"):
        sess.copy_to_worker_0(np.zeros((4, 8), dtype="float32")[:, ::2], remote)


@each_kind_of_sess
def test_get_global_func_checks_the_name_at_once_and_calls_on_every_worker(sess):
    with pytest.raises(KeyError, match="no global function has the name `no.such.function`"):
        sess.get_global_func("no.such.function")
    rank = sess.get_global_func("runtime.disco.worker_rank")
    assert isinstance(rank, discovm.DPackedFunc) and rank.session is sess
    ranks = rank()
    sess._sync_all()
    assert [ranks.debug_get_from_remote(w) for w in range(4)] == [0, 1, 2, 3]
    size = sess.call_packed(sess.get_global_func("runtime.disco.world_size"))
    sess.sync_worker(3)
    sess._sync_worker(2)
    assert size.debug_get_from_remote(3) == 4
    assert sess.num_workers == 4
    with pytest.raises(IndexError, match=r"worker 4 out of range \(session has 4 workers\)"):
        sess.sync_worker(4)


@each_kind_of_sess
def test_a_call_returns_the_library_s_dref_itself(sess, lib):
    rank = sess.get_global_func("runtime.disco.worker_rank")
    ranks = rank()
    # tvm-ffi makes the library's DRef a discovm.DRef, with no wrapper around it.
    assert type(ranks) is discovm.DRef and isinstance(ranks, tvm_ffi.Object)
    assert ranks.session is sess and sess.call_packed(rank).session is sess
    direct = lib.session_call(sess._handle, rank)
    assert type(direct) is discovm.DRef
    assert repr(direct) == "<discovm.DRef of None>"  # made by the library alone: no session
    # A function seen as a module shares its register, and stays a function.
    as_module = discovm.DModule(rank, sess)
    assert type(as_module) is discovm.DModule and as_module.same_as(rank)
    assert as_module.session is sess
    again = rank()
    sess.sync_all()
    assert [again.debug_get_from_remote(w) for w in range(4)] == [0, 1, 2, 3]
    with pytest.raises(TypeError, match="expected a DRef but got int"):
        discovm.DPackedFunc(3, sess)


RAW_FIRST_SCRIPT = """
import os
import tvm_ffi

lib = tvm_ffi.load_module(os.environ["DISCOVM_LIBRARY"])
s = lib.session_new_threaded(1)
rank = lib.session_get_global_func(s, "runtime.disco.worker_rank")
import discovm  # too late: tvm-ffi made a class of its own for the DRef above

try:
    discovm.ThreadedSession(1)
except RuntimeError as error:
    print(error)
lib.session_shutdown(s)
"""


def test_the_package_loads_the_library_before_drefs_come_back_through_tvm_ffi():
    done = subprocess.run(
        [sys.executable, "-c", RAW_FIRST_SCRIPT], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "import discovm before calling the library's functions directly" in done.stdout


@each_kind_of_sess
def test_drefs_pass_as_arguments_and_are_set_and_read_per_worker(sess):
    sess.import_python_module("process_functions")
    x = sess.empty((3,), "float32")
    for w in range(4):
        x.debug_copy_from(w, np.full(3, w, dtype="float32"))
    sums = sess.get_global_func("tests.process.scaled_sum")(x, 10)
    sess.sync_all()
    assert [sums.debug_get_from_remote(w) for w in range(4)] == [0.0, 30.0, 60.0, 90.0]
    source = np.ones(3, dtype="float32")
    x.debug_copy_from(1, source)
    source[:] = 7  # the register holds a copy
    np.testing.assert_array_equal(np.from_dlpack(x.debug_get_from_remote(1)), np.ones(3))


@each_kind_of_sess
def test_import_python_module_makes_the_module_s_functions_available(sess):
    # Only this test imports the module: its function is nowhere before the session imports it.
    name = "tests.imported.worker_id"
    with pytest.raises(KeyError, match=name):
        sess.get_global_func(name)
    sess.import_python_module("imported_functions")
    ids = sess.get_global_func(name)()
    assert [ids.debug_get_from_remote(w) for w in range(4)] == [0, 1, 2, 3]


# The fields of each worker in a status.
WORKER_STATUS_KEYS = {
    "worker",
    "node",
    "pid",
    "state",
    "call",
    "function",
    "since_ms",
    "collective",
    "waits_for",
    "last_finished_call",
    "last_failure",
    "cause",
    "last_events",
}


class Gate:
    """A FIFO that ``tests.process.wait_at(gate.path, worker)`` waits at, on a worker of either
    kind, until :meth:`release_one`. It is open here for reading and writing, so a worker's
    open never waits for a writer; once closed, a call still waiting reads its end, and none
    opens it any more."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        os.mkfifo(self.path)
        self._fd = os.open(self.path, os.O_RDWR)

    def release_one(self) -> None:
        os.write(self._fd, b"\x01")

    def close(self) -> None:
        os.unlink(self.path)
        os.close(self._fd)


def status_when(sess, ready):
    """The session's status once ``ready`` holds of it, polled for at most 20 s."""
    until = time.monotonic() + 20
    while True:
        now = sess.status()
        if ready(now):
            return now
        assert time.monotonic() < until, f"the status never became ready: {now}"
        time.sleep(0.005)


@each_kind_of_sess
def test_the_status_says_what_every_worker_does(sess, tmp_path: Path):
    sess.import_python_module("process_functions")
    before = sess.status()["calls_sent"]
    pids = sess.get_global_func("tests.process.pid")()
    sess.sync_all()
    status = sess.status()
    assert set(status) == {"workers", "calls_sent"}
    assert status["calls_sent"] == before + 1, "a lookup is no call"
    for w, seen in enumerate(status["workers"]):
        assert set(seen) == WORKER_STATUS_KEYS
        assert (seen["worker"], seen["node"], seen["state"]) == (w, 0, "idle"), status
        assert seen["pid"] == pids.debug_get_from_remote(w)
        assert (seen["call"], seen["last_finished_call"]) == (before + 1, before + 1), status
        assert seen["function"] == "tests.process.pid"
        assert seen["since_ms"] >= 0 and seen["waits_for"] == []
        assert seen["collective"] is None and seen["last_failure"] is None
        assert seen["cause"] is None

    # Worker 1 held in a function: running that call, while the others are done with it.
    gate = Gate(tmp_path / "gate")
    try:
        held = sess.get_global_func("tests.process.wait_at")(gate.path, 1)
        number = sess.status()["calls_sent"]
        others = (0, 2, 3)
        now = status_when(
            sess,
            lambda now: now["workers"][1]["state"] == "running"
            and all(now["workers"][w]["last_finished_call"] == number for w in others),
        )
        running = now["workers"][1]
        assert (running["call"], running["function"]) == (number, "tests.process.wait_at")
        assert running["last_finished_call"] == number - 1 and running["since_ms"] >= 0
        assert [now["workers"][w]["state"] for w in others] == ["idle"] * 3, now
        gate.release_one()
        sess.sync_all()
    finally:
        gate.close()
    after = sess.status()
    assert [seen["state"] for seen in after["workers"]] == ["idle"] * 4, after
    assert after["workers"][1]["last_finished_call"] == number
    del held


@each_kind
def test_dropped_drefs_free_their_registers_and_the_session_goes_with_the_last_one(kind):
    sess = kind(2)
    refs = [sess.empty((4,), "int32") for _ in range(5)]
    assert [sess.live_registers(w) for w in range(2)] == [5 + 1] * 2  # and `empty`
    del refs
    gc.collect()
    assert [sess.live_registers(w) for w in range(2)] == [1, 1]
    dref = sess.empty((1,), "int8")
    watch = weakref.ref(sess)
    del sess
    gc.collect()
    assert watch() is not None, "a DRef keeps its session"
    assert dref.session.num_workers == 2
    del dref
    gc.collect()
    assert watch() is None


@each_kind
def test_shutdown_is_final_and_can_be_repeated(kind):
    sess = kind(2)
    func = sess.get_global_func("runtime.disco.worker_rank")
    sess.shutdown()
    sess.shutdown()
    for call in (sess.sync_worker_0, sess.sync_all, func, lambda: sess.empty((1,), "int8")):
        with pytest.raises(discovm.SessionClosed) as closed:
            call()
        assert isinstance(closed.value, RuntimeError)
        assert closed.value.__tvm_ffi_error__.kind == "SessionClosed"


@each_kind
def test_constructor_options(kind):
    with kind(
        2, timeout=5.0, spin_us=-1, cpu_affinity=[-1, 0], devices=["cpu", tvm_ffi.device("cpu", 0)]
    ) as sess:
        assert sess.num_workers == 2
    with pytest.raises(ValueError, match="timeout must be positive"):
        kind(2, timeout=0)
    with pytest.raises(ValueError, match="num_workers 3 is not a multiple of num_groups 2"):
        kind(3, 2)
    with pytest.raises(discovm.DeviceUnavailable):
        kind(1, devices=["cuda"])


@each_kind
def test_the_library_is_found_next_to_the_package_or_through_the_variable(kind, tmp_path: Path):
    library = Path(os.environ[discovm.LIBRARY_ENV])
    assert discovm.library_path() == library
    copy = tmp_path / "discovm"
    shutil.copytree(
        Path(discovm.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(library, copy / "libdiscovm.so")
    script = (
        "import discovm, numpy as np\n"
        "print(discovm.library_path())\n"
        f"with discovm.{kind.__name__}(2) as s:\n"
        "    print(s.num_workers, discovm.version())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != discovm.LIBRARY_ENV}
    env["PYTHONPATH"] = str(tmp_path)
    found = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False
    )
    assert found.returncode == 0, found.stderr
    assert found.stdout.split("\n")[:2] == [str(copy / "libdiscovm.so"), "2 0.1.0"]
    env[discovm.LIBRARY_ENV] = str(tmp_path / "missing.so")
    missing = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False
    )
    assert missing.returncode != 0
    assert "DISCOVM_LIBRARY is" in missing.stderr and "which is not a file" in missing.stderr


@each_kind_of_sess
def test_a_trace_and_a_dump_are_timelines_perfetto_opens(sess, tmp_path: Path):
    sess.import_python_module("process_functions")
    pid = sess.get_global_func("tests.process.pid")
    with sess.trace(tmp_path / "trace.json"):
        pid()
        sess.sync_all()
    trace = json.loads((tmp_path / "trace.json").read_text())
    runs = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["name"] == "tests.process.pid"]
    assert sorted(e["args"]["worker"] for e in runs) == list(range(sess.num_workers))
    assert any(e["ph"] == "s" for e in trace["traceEvents"]), "a flow from the send"
    sess.trace_dump(tmp_path / "dump.json")
    dump = json.loads((tmp_path / "dump.json").read_text())
    assert any(e.get("name") == "tests.process.pid" for e in dump["traceEvents"])
    with sess.trace(tmp_path / "outer.json"):
        with pytest.raises(ValueError, match="a trace of this session runs already"):
            with sess.trace(tmp_path / "inner.json"):
                pass
    with pytest.raises(ValueError, match="cannot write a trace to the path"):
        sess.trace_dump(tmp_path / "missing" / "dump.json")
