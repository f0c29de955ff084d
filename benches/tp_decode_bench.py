"""Tokens per second of the tensor-parallel decoder of ``examples/python/tp_decode.py`` on 2
workers of each kind (threads, worker processes, two nodes over loopback) against the same
model unsharded in this process on every core, in one run.

Usage (``benches/tp_decode_bench.sh`` runs it against the release library, in the TVM
environment the tests use)::

    benches/tp_decode_bench.sh [--rounds 3] [--tokens 48] [--quick]

The model is compiled and its tensor cache written once. Each round decodes in this process on
all cores, then on one core (TVM's thread pool set to one thread: the work one worker would do
alone, times two), then on a fresh session of each kind, whose first tokens (the warm-up) are
not timed. The table gives each kind's median tokens per second over the rounds and its ratio
to the single process of the same round, the target (2 worker processes at least 0.9x), a
step's time over the share of the work one of 2 workers would do (the single process's step on
one core, halved; below zero where the shards' smaller kernels run faster than half the whole),
and what one allreduce of a step's activations costs on the session, sent by the controller.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "examples" / "python"))

import tvm  # noqa: E402
from tvm.contrib import tvmjs  # noqa: E402

import tp_decode  # noqa: E402

KINDS = ("threaded", "process", "socket")
#: Tokens per second of 2 worker processes over the single process's, at least.
TARGET = 0.9


def allreduce_ms(sess, width: int, times: int = 50) -> float:
    """Milliseconds of an allreduce of ``width`` float32 (a step's activations) sent by the
    controller and waited for: what a collective costs on the session, with a call and a
    sync (the model's collectives skip both)."""
    x = sess.broadcast(np.ones(width, "float32"))
    y = sess.empty((width,), "float32")
    for _ in range(5):
        sess.allreduce(x, y)
    sess.sync_all()
    started = time.perf_counter()
    for _ in range(times):
        sess.allreduce(x, y)
        sess.sync_all()
    return (time.perf_counter() - started) / times * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--warmup", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="a small model, one round")
    args = parser.parse_args()
    workers = 2
    cores = os.cpu_count() or 1
    os.environ.setdefault("TVM_NUM_THREADS", str(cores))
    if args.quick:
        cfg = tp_decode.Config(512, 128, 2, 4, 256, args.tokens)
        args.rounds = 1
    else:
        cfg = tp_decode.Config(4096, 512, 4, 8, 2048, args.tokens)
    whole, params = tp_decode.export(cfg, 1)
    sharded, _ = tp_decode.export(cfg, workers)
    shard_info = tp_decode.add_shard_functions(sharded, params, workers)
    weights = tp_decode.random_weights(params, 0)
    single_exe = tp_decode.compile_for_cpu(whole)
    pool = tvm.get_global_func("runtime.config_threadpool")
    every_core = os.sched_getaffinity(0)
    rates: dict[str, list[float]] = {k: [] for k in ("single", "single 1 core", *KINDS)}
    ratios: dict[str, list[float]] = {k: [] for k in KINDS}
    collective: dict[str, list[float]] = {k: [] for k in KINDS}
    with tempfile.TemporaryDirectory(prefix="tp_decode_bench-") as folder:
        folder = Path(folder)
        library = folder / "decoder_sharded.so"
        tp_decode.compile_for_cpu(sharded).export_library(str(library))
        tvmjs.dump_tensor_cache(
            {f"param_{i}": w for i, w in enumerate(weights)}, str(folder / "cache"),
            encode_format="raw", show_progress=False,
        )
        for round_ in range(args.rounds):
            pool(1, cores)
            expected, single = tp_decode.decode_single(
                single_exe, cfg, weights, args.tokens, args.warmup
            )
            pool(1, 1)
            _, one_core = tp_decode.decode_single(
                single_exe, cfg, weights, args.tokens, args.warmup
            )
            # A pool of one thread pins it: the sessions' processes would inherit the core.
            pool(1, cores)
            os.sched_setaffinity(0, every_core)
            rates["single"].append(single)
            rates["single 1 core"].append(one_core)
            for kind in KINDS if round_ % 2 == 0 else reversed(KINDS):
                sess, node = tp_decode.start_session(kind, workers)
                with sess:
                    got, rate = tp_decode.decode_sharded(
                        sess, library, folder / "cache", shard_info, cfg, args.tokens, args.warmup
                    )
                    collective[kind].append(allreduce_ms(sess, cfg.hidden))
                if node is not None:
                    node.wait(timeout=30)
                if got != expected:
                    print(f"tp_decode_bench: {kind}: the tokens differ from the single process's")
                    return 1
                rates[kind].append(rate)
                ratios[kind].append(rate / single)
    step_ms = 1e3 / statistics.median(rates["single"])
    share_ms = 1e3 / statistics.median(rates["single 1 core"]) / workers
    print(
        f"tp_decode_bench: {cfg.layers} layers, hidden {cfg.hidden}, {cfg.heads} heads, ffn "
        f"{cfg.ffn}, vocabulary {cfg.vocab}; {args.tokens - args.warmup} tokens timed of "
        f"{args.tokens}, {args.rounds} rounds, {cores} cores"
    )
    print(
        f"{'':<16}{'tokens/s':>10}{'x single':>10}{'step ms':>10}{'- share ms':>12}"
        f"{'allreduce ms':>14}"
    )
    for kind, measured in rates.items():
        rate = statistics.median(measured)
        if kind in ratios:
            extra = (
                f"{statistics.median(ratios[kind]):>10.2f}{1e3 / rate:>10.2f}"
                f"{1e3 / rate - share_ms:>12.2f}{statistics.median(collective[kind]):>14.3f}"
            )
        else:
            extra = f"{'':>10}{1e3 / rate:>10.2f}"
        print(f"{kind:<16}{rate:>10.1f}{extra}")
    print(
        f"single step {step_ms:.2f} ms on {cores} cores; share: the single step on one core over "
        f"{workers}, {share_ms:.2f} ms; a step has {2 * cfg.layers + 1} collectives (an "
        f"allreduce after each block's attention and MLP, an allgather of the logits)"
    )
    met = statistics.median(ratios["process"]) >= TARGET
    print(f"target: 2 worker processes at least {TARGET}x the single process: {'met' if met else 'not met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
