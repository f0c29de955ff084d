"""The session benchmark through the two Python APIs, side by side in one run: Disco's
(``tvm.runtime.disco.ThreadedSession``) and discovm's (``discovm.ThreadedSession``), driving
``runtime.disco.worker_id`` as a Disco script does.

Usage (``benches/run.sh`` runs it after the C table, in the venv it sets up)::

    DISCOVM_LIBRARY=target/release/libdiscovm.so PYTHONPATH=python \\
        target/bench-venv/bin/python benches/python_session_bench.py [--quick] [--workers 1,2,4]

Each round opens a fresh session per runtime (their order rotates), warms it up, and measures
the median of each latency and the rate of pipelined calls; the table shows the median of the
rounds and, in brackets, the best round, then discovm's figure over Disco's with the targets.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import importlib.util
import os
import statistics
import sys
import time
from collections.abc import Callable

#: Targets of discovm against Disco, per metric: (kind, bound) where "time" means discovm's time
#: divided by Disco's must be at most the bound and "rate" that the rate ratio must be at least it.
TARGETS: dict[str, tuple[str, dict[int, float]]] = {
    "sync worker 0": ("time", {1: 0.1, 2: 0.1, 4: 0.1}),
    "call + sync worker 0": ("time", {1: 0.25, 2: 0.25, 4: 0.25}),
    "pipelined calls": ("rate", {1: 2.0, 4: 4.0}),
}
PIPELINE = 10_000


def load_disco():
    """Disco's Python API. Its C++ side lives in libtvm_runtime_extra.so, which TVM's package
    loads only after ``tvm.runtime.disco`` has bound its functions: loading it first, into the
    global scope, makes them bindable."""
    spec = importlib.util.find_spec("tvm")
    if spec is None or spec.origin is None:
        sys.exit("python_session_bench: apache-tvm is not installed in this environment")
    lib = os.path.join(os.path.dirname(spec.origin), "lib")
    import tvm_ffi  # noqa: F401 - libtvm_ffi first, as TVM's libraries need it

    for name in ("libtvm_runtime.so", "libtvm_runtime_extra.so"):
        ctypes.CDLL(os.path.join(lib, name), ctypes.RTLD_GLOBAL)
    from tvm.runtime import disco

    return disco


class Runtime:
    """One API under test: how to open a session and what its methods are called."""

    def __init__(self, name: str, open_session: Callable[[int], object], sync_all: str) -> None:
        self.name = name
        self.open_session = open_session
        self.sync_all = sync_all


def median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def pipelined_rate(func, sync_all) -> float:
    """Calls per second, in millions: the median of three batches of PIPELINE calls of `func`,
    each ended by `sync_all()`."""
    rates = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(PIPELINE):
            func()
        sync_all()
        rates.append(PIPELINE / (time.perf_counter() - start) / 1e6)
    return statistics.median(rates)


def measure(runtime: Runtime, workers: int, samples: int, warmup_s: float) -> dict[str, float]:
    """One round: a fresh session, warmed up, then each metric (latencies in µs, rates in M/s)."""
    sess = runtime.open_session(workers)
    func = sess.get_global_func("runtime.disco.worker_id")
    sync_all = getattr(sess, runtime.sync_all)
    clock = time.perf_counter
    end = clock() + warmup_s
    while clock() < end:
        func()
        sess.sync_worker_0()
    gc.collect()
    gc.disable()
    try:
        sync = []
        for _ in range(samples):
            start = clock()
            sess.sync_worker_0()
            sync.append(clock() - start)
        call_sync = []
        for _ in range(samples):
            start = clock()
            func()
            sess.sync_worker_0()
            call_sync.append(clock() - start)
        rate = pipelined_rate(func, sync_all)
    finally:
        gc.enable()
    sess.shutdown()
    return {
        "sync worker 0": median_us(sync),
        "call + sync worker 0": median_us(call_sync),
        "pipelined calls": rate,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 rounds, few samples")
    parser.add_argument("--workers", default="1,2,4", help="worker counts (default 1,2,4)")
    parser.add_argument("--rounds", type=int, default=7)
    options = parser.parse_args()
    rounds, samples, warmup_s = (2, 100, 0.02) if options.quick else (options.rounds, 2000, 0.1)

    disco = load_disco()
    import discovm

    runtimes = [
        Runtime("Disco", lambda n: disco.ThreadedSession(num_workers=n), "_sync_all"),
        Runtime("discovm", lambda n: discovm.ThreadedSession(n), "sync_all"),
    ]
    units = {"sync worker 0": "us", "call + sync worker 0": "us", "pipelined calls": "M/s"}
    print(f"Python session benchmark ({rounds} rounds; median of rounds [best round])")
    for workers in [int(n) for n in options.workers.split(",")]:
        results: dict[str, dict[str, list[float]]] = {r.name: {m: [] for m in units} for r in runtimes}
        for round_index in range(rounds):
            shift = round_index % len(runtimes)
            for runtime in runtimes[shift:] + runtimes[:shift]:
                for metric, value in measure(runtime, workers, samples, warmup_s).items():
                    results[runtime.name][metric].append(value)
        print(f"\nN = {workers}")
        print(f"  {'metric':<24}" + "".join(f"{r.name:>20}" for r in runtimes) + f"{'ratio':>10}  target")
        for metric, unit in units.items():
            cells = []
            medians = {}
            for runtime in runtimes:
                values = results[runtime.name][metric]
                best = max(values) if unit == "M/s" else min(values)
                medians[runtime.name] = statistics.median(values)
                cells.append(f"{medians[runtime.name]:>10.3f} [{best:.3f}]".rjust(20))
            kind, bounds = TARGETS[metric]
            ratio = medians["discovm"] / medians["Disco"]
            bound = bounds.get(workers)
            if bound is None:
                verdict = "-"
            elif kind == "time":
                verdict = f"<= {bound}x {'met' if ratio <= bound else 'MISSED'}"
            else:
                verdict = f">= {bound}x {'met' if ratio >= bound else 'MISSED'}"
            print(f"  {metric + ' (' + unit + ')':<24}" + "".join(cells) + f"{ratio:>9.3f}x  {verdict}")


if __name__ == "__main__":
    main()
