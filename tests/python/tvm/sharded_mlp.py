"""The model of the tests: a two-layer MLP, and its tensor-parallel form for two workers, as
TVM's Relax writes them, compiled by TVM for its Relax VM (llvm target).

The sharded form takes the whole input on worker 0 and each worker's block of the weights
(columns of the first, rows of the second); ``R.ccl.broadcast_from_worker0`` and
``R.ccl.allreduce`` become calls of ``runtime.disco.broadcast_from_worker0`` and
``runtime.disco.allreduce`` by name, which the VM looks up in tvm-ffi's registry.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

#: Workers the sharded form is written for.
NUM_WORKERS = 2
BATCH, FEATURES, HIDDEN = 16, 32, 24
SHARD = HIDDEN // NUM_WORKERS


@I.ir_module
class MLP:
    @R.function
    def main(
        x: R.Tensor((BATCH, FEATURES), "float32"),
        w1: R.Tensor((FEATURES, HIDDEN), "float32"),
        w2: R.Tensor((HIDDEN, FEATURES), "float32"),
    ) -> R.Tensor((BATCH, FEATURES), "float32"):
        with R.dataflow():
            h = R.nn.gelu(R.matmul(x, w1))
            y = R.matmul(h, w2)
            R.output(y)
        return y


@I.ir_module
class ShardedMLP:
    @R.function
    def main(
        x: R.Tensor((BATCH, FEATURES), "float32"),
        w1: R.Tensor((FEATURES, SHARD), "float32"),
        w2: R.Tensor((SHARD, FEATURES), "float32"),
    ) -> R.Tensor((BATCH, FEATURES), "float32"):
        with R.dataflow():
            xs = R.ccl.broadcast_from_worker0(x)
            h = R.nn.gelu(R.matmul(xs, w1))
            partial = R.matmul(h, w2)
            y = R.ccl.allreduce(partial, "sum")
            R.output(y)
        return y


def inputs(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An input and the two weights."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((BATCH, FEATURES), dtype="float32")
    w1 = rng.standard_normal((FEATURES, HIDDEN), dtype="float32") / np.float32(FEATURES**0.5)
    w2 = rng.standard_normal((HIDDEN, FEATURES), dtype="float32") / np.float32(HIDDEN**0.5)
    return x, w1, w2


def reference(x: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> np.ndarray:
    """The unsharded MLP, run by TVM's own VM."""
    vm = relax.VirtualMachine(tvm.compile(MLP, target="llvm"), tvm.cpu())
    return vm["main"](*(tvm.runtime.tensor(a) for a in (x, w1, w2))).numpy()


def export_sharded(path: Path) -> Path:
    """Compiles the sharded MLP and exports it as a shared library at ``path``."""
    tvm.compile(ShardedMLP, target="llvm").export_library(str(path))
    return path
