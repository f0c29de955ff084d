"""The kinds of session the ports of Disco's tests run every case on, started as those ports
start them: worker processes (:func:`processes`), and two nodes on this machine
(:func:`two_nodes`: node 1 is a ``python -m discovm.node`` process joining over loopback with
the session's secret); threads are ``discovm.ThreadedSession`` itself. A test that started
nodes calls :func:`end_nodes` when it is done: every node ends once its session is gone.
"""

from __future__ import annotations

import gc
import os
import socket
import subprocess
import sys

import discovm

#: The secret of the tests' sessions across machines.
TOKEN = "the tests' session secret"

_nodes: list[subprocess.Popen] = []


def processes(num_workers: int, **options) -> discovm.ProcessSession:
    """A session of ``num_workers`` worker processes."""
    return discovm.ProcessSession(num_workers=num_workers, **options)


def two_nodes(num_workers: int, **options) -> discovm.SocketSession:
    """A session of 2 nodes of ``num_workers // 2`` workers on this machine: node 0 here,
    node 1 a ``python -m discovm.node`` process joining over loopback, with the same secret."""
    with socket.socket() as probe:  # bound, never listening: nobody can connect to it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    per_node = num_workers // 2
    env = dict(os.environ, DISCOVM_SESSION_TOKEN=TOKEN)
    _nodes.append(
        subprocess.Popen(
            [sys.executable, "-m", "discovm.node", "127.0.0.1", str(port), str(per_node)],
            env=env,
        )
    )
    options = {"session_token": TOKEN, "timeout": 60, **options}
    return discovm.SocketSession(2, per_node, 1, "127.0.0.1", port, **options)


def has_gloo() -> bool:
    """Whether the Gloo plugin that runs the collectives between nodes is next to the library."""
    library = os.environ.get("DISCOVM_LIBRARY", "")
    return os.path.exists(os.path.join(os.path.dirname(library), "libdiscovm_gloo.so"))


def end_nodes() -> None:
    """Waits for every node a test started to end, once its session is gone: each must exit
    with status 0."""
    gc.collect()
    while _nodes:
        node = _nodes.pop()
        try:
            assert node.wait(timeout=20) == 0
        finally:
            node.kill()
