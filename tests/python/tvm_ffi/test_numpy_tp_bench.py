"""The numpy tensor-parallel benchmark runs as a user's script does, in an environment that sets
no BLAS thread count: the worker processes get the session's share of the cores, and say so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "benches" / "numpy_tp_bench.py"
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def test_the_step_runs_on_threads_and_processes_in_the_default_environment():
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    run = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--workers", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    rows = [line.split() for line in run.stdout.splitlines() if line.strip().startswith("2 ")]
    assert len(rows) == 1, run.stdout
    assert "oversubscribe" in run.stderr
