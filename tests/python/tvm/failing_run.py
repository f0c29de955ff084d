"""A worker function for the tests of a compiled model whose peer fails before its collectives:
the module worker processes and nodes import (their session's ``entrypoint``), and the test
process too, for its worker threads."""

from __future__ import annotations

import tvm_ffi

import discovm


@discovm.register_global_func("tests.tvm.run_unless", override=True)
def run_unless(failing: int, main, x, w1, w2):
    """``main(x, w1, w2)``, but on worker ``failing`` a ValueError before the model runs."""
    if tvm_ffi.get_global_func("runtime.disco.worker_rank")() == failing:
        raise ValueError("failed before the model on purpose")
    return main(x, w1, w2)
