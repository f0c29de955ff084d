"""What worker processes and nodes have before they serve: the session's entrypoint imported
(a module that cannot be imported fails the start with its own error), and OpenMP and BLAS
thread counts that share the machine's cores among its workers unless the user chose."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest

import discovm

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
HERE = os.path.dirname(os.path.abspath(__file__))


def test_an_entrypoint_that_is_not_there_fails_the_start_with_its_own_error():
    with pytest.raises(ModuleNotFoundError, match="No module named 'no_such_worker_module'"):
        discovm.ProcessSession(2, entrypoint="no_such_worker_module")


def test_an_entrypoint_that_raises_as_it_is_imported_fails_the_start_with_that_error():
    with pytest.raises(ValueError, match=r"worker 0: importing the module `broken_worker_module`"
                       r" failed: ValueError: this worker module cannot be imported"):
        discovm.ProcessSession(1, entrypoint="broken_worker_module")


def test_an_entrypoint_that_is_not_a_module_name_is_refused_before_any_worker_starts():
    with pytest.raises(ValueError, match="`os; rm` is not the name of a Python module"):
        discovm.ProcessSession(1, entrypoint="os; rm")


def test_the_entrypoint_s_functions_are_there_and_its_main_does_not_run():
    # disco_functions' main, run, would print Disco's usage and end the worker.
    with discovm.ProcessSession(2, entrypoint="disco_functions") as sess:
        result = sess.get_global_func("tests.disco.add_one")(41)
        assert [result.debug_get_from_remote(w) for w in range(2)] == [42, 42]


def test_an_entrypoint_that_serves_the_session_itself_as_it_is_imported_serves_it_once():
    with discovm.ProcessSession(2, entrypoint="serving_worker_module") as sess:
        result = sess.get_global_func("tests.serving.answer")()
        assert [result.debug_get_from_remote(w) for w in range(2)] == [42, 42]


def _run(script: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Runs ``script`` in a fresh interpreter whose environment has none of the thread
    variables but those in ``env``."""
    clean = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


_WORKER_THREADS = """
    import discovm
    def seen(**options):
        with discovm.ProcessSession(2, entrypoint="process_functions", **options) as sess:
            get = sess.get_global_func("tests.process.getenv")
            return [[get(v).debug_get_from_remote(w) for v in {vars}] for w in range(2)]
    print(seen())
    print(seen())
    print(seen(threads_per_worker=-1))
    print(seen(threads_per_worker=3))
"""


def test_worker_processes_share_the_machine_s_cores_unless_told_otherwise():
    run = _run(_WORKER_THREADS.format(vars=THREAD_VARS))
    assert run.returncode == 0, run.stdout + run.stderr
    share = str(max(1, len(os.sched_getaffinity(0)) // 2))
    lines = run.stdout.splitlines()
    assert lines == [
        str([[share] * 3] * 2),
        str([[share] * 3] * 2),
        str([["<unset>"] * 3] * 2),
        str([["3"] * 3] * 2),
    ]
    # Said once, naming the variables and the count.
    notices = [line for line in run.stderr.splitlines() if "oversubscribe" in line]
    assert len(notices) == 1, run.stderr
    assert f"OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, MKL_NUM_THREADS={share}" in notices[0]


def test_a_thread_variable_the_user_set_leaves_all_three_to_the_user():
    run = _run(_WORKER_THREADS.format(vars=THREAD_VARS), OPENBLAS_NUM_THREADS="5")
    assert run.returncode == 0, run.stdout + run.stderr
    left = str([["<unset>", "5", "<unset>"]] * 2)
    assert run.stdout.splitlines() == [left, left, left, left]
    assert "oversubscribe" not in run.stderr


def test_a_node_s_workers_import_the_controller_s_entrypoint_and_share_the_node_s_cores():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = f"""
        import subprocess, sys
        import discovm
        node = subprocess.Popen([sys.executable, "-m", "discovm.node", "127.0.0.1", "{port}",
                                 "2"])
        with discovm.SocketSession(2, 2, 1, "127.0.0.1", {port}, entrypoint="process_functions",
                                   timeout=60) as sess:
            get = sess.get_global_func("tests.process.getenv")("OMP_NUM_THREADS")
            print([get.debug_get_from_remote(w) for w in range(4)])
            pids = sess.get_global_func("tests.process.pid")()
            print(len({{pids.debug_get_from_remote(w) for w in range(4)}}))
        sys.exit(node.wait(timeout=30))
    """
    run = _run(script)
    assert run.returncode == 0, run.stdout + run.stderr
    share = str(max(1, len(os.sched_getaffinity(0)) // 2))
    assert run.stdout.splitlines() == [str([share] * 4), "4"]
