"""Sessions across machines through the two Python APIs, side by side in one run: Disco's
``SocketSession`` and discovm's, each with 2 nodes of 1 worker on loopback (node 1 another
process: ``python -m tvm.exec.disco_remote_socket_session`` for Disco, ``python -m
discovm.node`` for discovm), driving ``runtime.disco.worker_id`` as a Disco script does.

Usage (``benches/run.sh`` runs it in the venv it sets up)::

    DISCOVM_LIBRARY=target/release/libdiscovm.so PYTHONPATH=python \\
        target/bench-venv/bin/python benches/socket_session_bench.py [--quick] [--rounds R]

Each round opens a fresh session per runtime (their order rotates), warms it up, and measures
the median latency of a call to both workers followed by a sync with the worker on node 1 (a
round trip to node 1: discovm's sync with nothing sent since the last needs no message) and
the rate of pipelined calls to both workers (the median of three batches, as in
``python_session_bench.py``); the table shows the median of the rounds and, in brackets, the
best round, then discovm's figure over Disco's. Target: pipelined calls at least 10x Disco's.
"""

from __future__ import annotations

import argparse
import gc
import os
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_session_bench import load_disco, pipelined_rate  # noqa: E402

TOKEN = "the socket benchmark's secret"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_node(code: str, delay_s: float) -> subprocess.Popen:
    """Node 1: a Python process running `code` after `delay_s` (Disco's node connects once, so
    it starts after its controller listens)."""
    here = os.path.dirname(os.path.abspath(__file__))
    prelude = f"import sys, time; time.sleep({delay_s}); sys.path.insert(0, {here!r}); "
    env = dict(os.environ, DISCOVM_SESSION_TOKEN=TOKEN)
    return subprocess.Popen([sys.executable, "-c", prelude + code], env=env)


def open_disco(disco):
    port = free_port()
    # As tvm.exec.disco_remote_socket_session, with Disco's libraries loaded as load_disco does.
    code = (
        "from python_session_bench import load_disco; load_disco(); import tvm; "
        "from tvm.exec import disco_worker; "
        f"tvm.get_global_func('runtime.disco.RemoteSocketSession')('127.0.0.1', {port}, 1)"
    )
    node = start_node(code, 1.0)
    return disco.SocketSession(2, 1, 1, "127.0.0.1", port), node


def open_discovm(discovm):
    port = free_port()
    code = f"import discovm.node; sys.exit(discovm.node.main(['127.0.0.1', '{port}', '1']))"
    node = start_node(code, 0.0)
    sess = discovm.SocketSession(2, 1, 1, "127.0.0.1", port, session_token=TOKEN, timeout=60)
    return sess, node


def measure(name: str, opened, samples: int, warmup_s: float) -> dict[str, float]:
    sess, node = opened
    func = sess.get_global_func("runtime.disco.worker_id")
    sync_one = sess._sync_worker if name == "Disco" else sess.sync_worker
    sync_all = sess._sync_all if name == "Disco" else sess.sync_all
    clock = time.perf_counter
    end = clock() + warmup_s
    while clock() < end:
        func()
        sync_one(1)
    gc.collect()
    gc.disable()
    try:
        sync = []
        for _ in range(samples):
            start = clock()
            func()
            sync_one(1)
            sync.append(clock() - start)
        rate = pipelined_rate(func, sync_all)
    finally:
        gc.enable()
    sess.shutdown()
    del sess
    gc.collect()
    try:
        node.wait(timeout=20)
    except subprocess.TimeoutExpired:
        node.kill()
    return {
        "call, sync with node 1": statistics.median(sync) * 1e6,
        "pipelined calls": rate,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 rounds")
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    rounds, samples, warmup_s = (2, 100, 0.05) if options.quick else (options.rounds, 1000, 0.2)
    disco = load_disco()
    import discovm

    openers = {"Disco": lambda: open_disco(disco), "discovm": lambda: open_discovm(discovm)}
    units = {"call, sync with node 1": "us", "pipelined calls": "M/s"}
    results = {name: {m: [] for m in units} for name in openers}
    names = list(openers)
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            for metric, value in measure(name, openers[name](), samples, warmup_s).items():
                results[name][metric].append(value)
    print(f"Python socket session benchmark, 2 nodes of 1 worker on loopback ({rounds} rounds; "
          "median of rounds [best round])")
    print(f"  {'metric':<26}" + "".join(f"{n:>20}" for n in names) + f"{'ratio':>10}  target")
    for metric, unit in units.items():
        cells, medians = [], {}
        for name in names:
            values = results[name][metric]
            best = max(values) if unit == "M/s" else min(values)
            medians[name] = statistics.median(values)
            cells.append(f"{medians[name]:>10.3f} [{best:.3f}]".rjust(20))
        ratio = medians["discovm"] / medians["Disco"]
        if unit == "M/s":
            verdict = f">= 10x {'met' if ratio >= 10 else 'MISSED'}"
        else:
            verdict = "-"
        print(f"  {metric + ' (' + unit + ')':<26}" + "".join(cells) + f"{ratio:>9.3f}x  {verdict}")


if __name__ == "__main__":
    main()
