"""Worker functions of the tensor-parallel step benchmark (``numpy_tp_bench.py``): each worker
holds its shard of a two-layer MLP and computes its partial output with numpy. Imported on the
workers by ``Session.import_python_module``."""

import numpy as np

import discovm

_shards: dict[str, np.ndarray] = {}


@discovm.register_global_func("bench.tp.setup", override=True)
def _setup(dim: int, hidden: int, workers: int) -> None:
    """This worker's shard: columns of the first layer, rows of the second."""
    rng = np.random.default_rng(0)
    part = hidden // workers
    _shards["w1"] = rng.standard_normal((dim, part), dtype=np.float32) / np.sqrt(dim)
    _shards["w2"] = rng.standard_normal((part, dim), dtype=np.float32) / np.sqrt(part)


@discovm.register_global_func("bench.tp.step", override=True)
def _step(x, out) -> None:
    """out = relu(x @ w1) @ w2, this worker's part of the sum the allreduce completes."""
    np.matmul(np.maximum(np.from_dlpack(x) @ _shards["w1"], 0), _shards["w2"], out=np.from_dlpack(out))
