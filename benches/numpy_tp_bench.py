"""A tensor-parallel MLP step whose worker functions are numpy, on worker threads and on worker
processes in one run: each worker computes its shard's partial output (``bench.tp.step``), then
an allreduce sums them, then the controller waits for every worker. Worker threads take turns on
Python's GIL; worker processes each have their own.

Usage (``benches/run.sh`` runs it in the venv it sets up)::

    DISCOVM_LIBRARY=target/release/libdiscovm.so PYTHONPATH=python \\
        python benches/numpy_tp_bench.py [--quick] [--workers 1,2,4]

It runs in the environment it is given, as a user's script does: worker processes get the
session's default share of the cores for their BLAS threads (``OPENBLAS_NUM_THREADS`` and its
kin) unless one of those variables is set; worker threads use this process's BLAS.

Each round opens a fresh session of each kind (their order alternates), warms it up and takes
the median time of a step; the table shows the median of the rounds and, in brackets, the best
round, then threads' time over processes' with the target (processes at least 1.5x faster
with 2 workers).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402

import discovm  # noqa: E402

DIM, HIDDEN, BATCH = 256, 1024, 8
#: Threads' step time over processes', at least, by worker count.
TARGETS = {2: 1.5}


def measure(kind, workers: int, steps: int, warmup_s: float) -> float:
    """One round: median µs of a step on a fresh session of `kind`."""
    sess = kind(workers)
    try:
        sess.import_python_module("numpy_tp_functions")
        sess.init_ccl("cpu")
        sess.get_global_func("bench.tp.setup")(DIM, HIDDEN, workers)
        step = sess.get_global_func("bench.tp.step")
        x = sess.broadcast(np.random.default_rng(1).standard_normal((BATCH, DIM), dtype=np.float32))
        partial, y = sess.empty((BATCH, DIM), "float32"), sess.empty((BATCH, DIM), "float32")

        def one() -> None:
            step(x, partial)
            sess.allreduce(partial, y, op="sum")
            sess.sync_all()

        end = time.perf_counter() + warmup_s
        while time.perf_counter() < end:
            one()
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            one()
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1e6
    finally:
        sess.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 rounds, few steps")
    parser.add_argument("--workers", default="1,2,4", help="worker counts (default 1,2,4)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--threads-per-worker",
        type=int,
        default=0,
        help="the process sessions' threads_per_worker (default 0: the cores shared; -1: "
        "the environment's BLAS threads, as before sessions shared the cores)",
    )
    options = parser.parse_args()
    rounds, steps, warmup_s = (2, 20, 0.05) if options.quick else (options.rounds, 300, 0.3)
    def processes(workers: int) -> discovm.ProcessSession:
        return discovm.ProcessSession(workers, threads_per_worker=options.threads_per_worker)

    kinds = [("threads", discovm.ThreadedSession), ("processes", processes)]
    print(
        f"numpy tensor-parallel MLP step (dim {DIM}, hidden {HIDDEN}, batch {BATCH}; "
        f"{rounds} rounds; µs per step, median of rounds [best round])"
    )
    print(f"  {'N':<4}{'threads':>20}{'processes':>20}{'threads / processes':>22}  target")
    for workers in [int(n) for n in options.workers.split(",")]:
        results: dict[str, list[float]] = {name: [] for name, _ in kinds}
        for round_index in range(rounds):
            order = kinds if round_index % 2 == 0 else kinds[::-1]
            for name, kind in order:
                results[name].append(measure(kind, workers, steps, warmup_s))
        medians = {name: statistics.median(values) for name, values in results.items()}
        cells = "".join(
            f"{medians[name]:>10.1f} [{min(results[name]):.1f}]".rjust(20) for name, _ in kinds
        )
        ratio = medians["threads"] / medians["processes"]
        bound = TARGETS.get(workers)
        verdict = "-" if bound is None else f">= {bound}x {'met' if ratio >= bound else 'MISSED'}"
        print(f"  {workers:<4}{cells}{ratio:>21.2f}x  {verdict}")


if __name__ == "__main__":
    main()
