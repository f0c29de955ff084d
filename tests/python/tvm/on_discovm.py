"""Running a model TVM compiled on discovm's workers, as Disco's ``load_vm_module`` does; this
module does not import TVM until :func:`register_loader` runs.

Run as a script, ``python on_discovm.py MODEL.so DATA.npz``, it starts a session and looks up a
function before it imports TVM, then runs the sharded model and compares it with the reference
in DATA.npz (``x``, ``w1``, ``w2``, ``reference``): exit 0 when they match.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import discovm

#: The worker function that loads a model, registered by :func:`register_loader`.
LOAD_VM_MODULE = "tests.tvm.load_vm_module"

KDL_CPU = 1
POOLED_ALLOCATOR = 2  # TVM's AllocatorType::kPooled


def register_loader() -> None:
    """Registers :data:`LOAD_VM_MODULE`: ``(path) -> Module``, which loads a library that TVM
    exported and initialises its Relax VM on the CPU, as TVM's ``runtime.disco.load_vm_module``
    does on Disco's workers."""
    import tvm

    def load_vm_module(path: str) -> tvm.runtime.Module:
        executable = tvm.runtime.load_module(path)["vm_load_executable"]()
        executable["vm_initialization"](
            KDL_CPU, 0, POOLED_ALLOCATOR, KDL_CPU, 0, POOLED_ALLOCATOR
        )
        return executable

    discovm.register_global_func(LOAD_VM_MODULE, load_vm_module, override=True)


def load_sharded(sess: discovm.Session, path: Path) -> discovm.DRef:
    """Loads the model at ``path`` on every worker with :data:`LOAD_VM_MODULE`; returns its
    ``main`` on every worker."""
    module = sess.get_global_func(LOAD_VM_MODULE)(str(path))
    return sess.get_global_func("ffi.ModuleGetFunction")(module, "main", False)


def run_sharded(
    sess: discovm.Session, main: discovm.DRef, x: np.ndarray, w1: np.ndarray, w2: np.ndarray
) -> list[np.ndarray]:
    """Runs the sharded model's ``main`` on every worker of ``sess`` (its collectives set up):
    ``x`` given to worker 0, the weights split across the workers (``w1`` by columns, ``w2`` by
    rows). Returns each worker's output."""
    n = sess.num_workers
    d_x = sess.empty(x.shape, "float32")
    sess.copy_to_worker_0(x, d_x)
    d_w1 = sess.scatter(np.stack(np.split(w1, n, axis=1)))
    d_w2 = sess.scatter(np.stack(np.split(w2, n, axis=0)))
    result = sess.call_packed(main, d_x, d_w1, d_w2)
    first = np.empty(x.shape, "float32")
    sess.copy_from_worker_0(first, result)
    rest = [np.from_dlpack(result.debug_get_from_remote(w)) for w in range(1, n)]
    return [first, *rest]


def main(model: str, data: str) -> int:
    with discovm.ThreadedSession(2) as sess:
        sess.init_ccl("cpu")
        sess.get_global_func("runtime.disco.worker_rank")
        assert "tvm" not in sys.modules, "TVM was imported before the session started"
        register_loader()
        arrays = np.load(data)
        main = load_sharded(sess, Path(model))
        outputs = run_sharded(sess, main, arrays["x"], arrays["w1"], arrays["w2"])
    for worker, out in enumerate(outputs):
        np.testing.assert_allclose(out, arrays["reference"], rtol=1e-5, atol=1e-5)
        print(f"worker {worker}: matches TVM's VM")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
