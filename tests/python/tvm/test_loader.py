"""Disco's weight loader (``runtime.disco.ShardLoader*``) run by discovm's workers on tensor
caches that TVM's ``tvmjs.dump_tensor_cache`` wrote: every built-in on every kind of session,
parameters sharded by global functions (a two-step chain with extra arguments among them),
broadcast and presharded, stored raw and as ``f32-to-bf16``; and the loader reached from a
Relax function TVM compiled, through ``R.call_pure_packed("runtime.disco.ShardLoaderLoad")``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm.contrib import tvmjs
from tvm.script import ir as I
from tvm.script import relax as R

import discovm
import session_kinds
import weight_shards

HERE = Path(__file__).resolve().parent
NUM_WORKERS = 2
Q_HEADS, KV_HEADS, HEAD_DIM, HIDDEN = 4, 2, 3, 5

#: The kinds of session the compiled function runs on. The other tests run on threads alone:
#: a worker process that imports TVM takes seconds to start, and tests/weights.rs runs every
#: built-in on worker processes and nodes.
KINDS = [discovm.ThreadedSession, session_kinds.processes]


@pytest.fixture
def start(monkeypatch: pytest.MonkeyPatch):
    """Starts a session of the kind given, with the CPU communicator; its worker processes,
    if any, import the shard functions (from this folder, which they find on PYTHONPATH)."""

    def started(kind) -> discovm.Session:
        paths = [str(HERE), os.environ.get("PYTHONPATH", "")]
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, paths)))
        sess = kind(NUM_WORKERS)
        if kind is not discovm.ThreadedSession:
            sess.import_python_module(weight_shards.__name__)
        sess.init_ccl("cpu")
        return sess

    return started


def params() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    qkv_rows = (Q_HEADS + 2 * KV_HEADS) * HEAD_DIM
    return {
        "param_0": rng.uniform(size=(8, 6)).astype("float16"),
        "param_1": rng.uniform(size=(4, 6)).astype("float32"),
        "param_2": rng.uniform(size=(5,)).astype("float32"),
        "param_3": rng.uniform(size=(qkv_rows, HIDDEN)).astype("float16"),
    }


SHARD_INFO = {
    "param_0": [["tests.weights.shard_dim_1", [[NUM_WORKERS, 8, 3], "float16"], NUM_WORKERS]],
    "param_1": [["tests.weights.shard_dim_0", [[NUM_WORKERS, 2, 6], "float32"], NUM_WORKERS]],
    "param_3": [
        [
            "tests.weights.shard_qkv_heads",
            [[NUM_WORKERS, (Q_HEADS + 2 * KV_HEADS) // NUM_WORKERS, HEAD_DIM, HIDDEN], "float16"],
            NUM_WORKERS,
            Q_HEADS,
            KV_HEADS,
        ],
        [
            "tests.weights.merge_heads",
            [[NUM_WORKERS, (Q_HEADS + 2 * KV_HEADS) // NUM_WORKERS * HEAD_DIM, HIDDEN], "float16"],
        ],
    ],
}


def write_cache(folder: Path, arrays: dict[str, np.ndarray]) -> tuple[str, str, dict]:
    """Dumps ``arrays`` with tvmjs (``param_1`` as ``f32-to-bf16``, the rest raw, in files of
    at most 1 MB): the metadata's path and text, and the arrays as tvmjs reads them back."""
    encoding = {"param_1": "f32-to-bf16", "*": "raw"}
    tvmjs.dump_tensor_cache(arrays, str(folder), encode_format=encoding, shard_cap_mb=1)
    path = folder / "tensor-cache.json"
    stored, _ = tvmjs.load_tensor_cache(str(path), tvm.cpu())
    return str(path), path.read_text(), {k: v.numpy() for k, v in stored.items()}


def expected_parts(stored: dict[str, np.ndarray], w: int) -> list[np.ndarray]:
    """Worker ``w``'s part of each parameter, as :data:`SHARD_INFO` cuts them."""
    qkv = weight_shards.qkv_heads(stored["param_3"], NUM_WORKERS, Q_HEADS, KV_HEADS)
    return [
        np.split(stored["param_0"], NUM_WORKERS, axis=1)[w],
        np.split(stored["param_1"], NUM_WORKERS, axis=0)[w],
        stored["param_2"],
        qkv[w].reshape(-1, HIDDEN),
    ]


def loader_of(sess, path: str, text: str, shard_info) -> discovm.DRef:
    create = sess.get_global_func("runtime.disco.ShardLoader")
    return create(path, text, json.dumps(shard_info), None)


def on(dref: discovm.DRef, w: int) -> np.ndarray:
    return np.from_dlpack(dref.debug_get_from_remote(w))


def item(sess, array: discovm.DRef, i: int) -> discovm.DRef:
    return sess.get_global_func("ffi.ArrayGetItem")(array, i)


def test_every_built_in_loads_a_cache_tvmjs_wrote(start, tmp_path):
    path, text, stored = write_cache(tmp_path, params())
    with start(discovm.ThreadedSession) as sess:
        loader = loader_of(sess, path, text, SHARD_INFO)
        load = sess.get_global_func("runtime.disco.ShardLoaderLoad")
        one_by_one = [load(loader, tvm.runtime.ShapeTuple([i])) for i in range(4)]
        every = sess.get_global_func("runtime.disco.ShardLoaderLoadAll")(loader)
        on_0 = sess.get_global_func("runtime.disco.ShardLoaderLoadParamOnWorker0")(loader, 1)
        for w in range(NUM_WORKERS):
            for i, part in enumerate(expected_parts(stored, w)):
                np.testing.assert_array_equal(on(one_by_one[i], w), part)
                np.testing.assert_array_equal(on(item(sess, every, i), w), part)
            assert on(on_0, w).shape == (4, 6)
        np.testing.assert_array_equal(on(on_0, 0), stored["param_1"])


def test_presharded_records_are_read_by_each_worker(start, tmp_path):
    arrays = params()
    whole = {"param_0": (arrays["param_0"], 1), "param_1": (arrays["param_1"], 0)}
    whole["param_2"] = (arrays["param_3"], 0)
    # As MLC orders them: every parameter of the first shard, then of the second.
    presharded = {
        f"{name}_shard-{w + 1}-of-{NUM_WORKERS}": np.split(a, NUM_WORKERS, axis=axis)[w]
        for w in range(NUM_WORKERS)
        for name, (a, axis) in whole.items()
    }
    path, text, stored = write_cache(tmp_path, presharded)
    with start(discovm.ThreadedSession) as sess:
        loader = loader_of(sess, path, text, {})
        load = sess.get_global_func("runtime.disco.ShardLoaderLoadPresharded")
        second = load(loader, tvm.runtime.ShapeTuple([1]))
        every = sess.get_global_func("runtime.disco.ShardLoaderLoadAllPresharded")(loader)
        for w in range(NUM_WORKERS):
            own = [stored[f"param_{i}_shard-{w + 1}-of-{NUM_WORKERS}"] for i in range(3)]
            np.testing.assert_array_equal(on(second, w), own[1])
            for i in range(3):
                np.testing.assert_array_equal(on(item(sess, every, i), w), own[i])


@I.ir_module
class LoadInRelax:
    @R.function
    def main(
        loader: R.Object,
    ) -> R.Tuple(R.Tensor((8, 3), "float16"), R.Tensor((5,), "float32")):
        with R.dataflow():
            shard = R.call_pure_packed(
                "runtime.disco.ShardLoaderLoad",
                loader,
                R.shape([0]),
                ty_args=R.Tensor((8, 3), "float16"),
            )
            whole = R.call_pure_packed(
                "runtime.disco.ShardLoaderLoad",
                loader,
                R.shape([2]),
                ty_args=R.Tensor((5,), "float32"),
            )
            out = (shard, whole)
            R.output(out)
        return out


@pytest.fixture(scope="module")
def load_in_relax(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("relax") / "load_in_relax.so"
    tvm.compile(LoadInRelax, target="llvm").export_library(str(path))
    return path


@pytest.mark.parametrize("kind", KINDS)
def test_a_relax_function_tvm_compiled_reaches_discovm_s_loader(
    start, kind, load_in_relax, tmp_path
):
    path, text, stored = write_cache(tmp_path, params())
    with start(kind) as sess:
        loader = loader_of(sess, path, text, SHARD_INFO)
        main = sess.load_vm_module(load_in_relax)["main"]
        out = main(loader)
        for w in range(NUM_WORKERS):
            parts = expected_parts(stored, w)
            np.testing.assert_array_equal(on(item(sess, out, 0), w), parts[0])
            np.testing.assert_array_equal(on(item(sess, out, 1), w), parts[2])


def test_a_missing_file_fails_every_worker_naming_it(start, tmp_path):
    path, text, _ = write_cache(tmp_path, params())
    record = json.loads(text)["records"][0]
    with start(discovm.ThreadedSession) as sess:
        loader = loader_of(sess, path, text, SHARD_INFO)
        (tmp_path / record["dataPath"]).unlink()
        load = sess.get_global_func("runtime.disco.ShardLoaderLoad")
        part = load(loader, tvm.runtime.ShapeTuple([0]))
        missing = r"cannot read parameter `param_0` from `.*params_shard_0.bin`"
        for w in range(NUM_WORKERS):
            with pytest.raises(discovm.WorkerError, match=missing):
                on(part, w)
