"""The functions Disco's session tests call on the workers, registered in tvm-ffi's registry
when this module is imported: by the tests themselves (threaded sessions share their process)
and by the workers of process sessions and nodes, which import it as their session's
``entrypoint``. It is a worker module in the style of Disco's ``tvm.exec.disco_worker``: its
``main`` runs Disco's worker loop, which must not run on discovm's workers (run there, it would
end the worker at once, failing the session's start)."""

import sys

import numpy as np
import tvm_ffi
from tvm_ffi import Shape as ShapeTuple
from tvm_ffi.core import String


@tvm_ffi.register_global_func("tests.disco.add_one", override=True)
def _add_one(x: int) -> int:
    return x + 1


@tvm_ffi.register_global_func("tests.disco.add_one_float", override=True)
def _add_one_float(x: float) -> float:
    return x + 0.5


@tvm_ffi.register_global_func("tests.disco.add_one_ndarray", override=True)
def _add_one_ndarray(x):
    return tvm_ffi.from_dlpack(np.from_dlpack(x) + 1)


@tvm_ffi.register_global_func("tests.disco.str", override=True)
def _str(x: str) -> str:
    return x + "_suffix"


@tvm_ffi.register_global_func("tests.disco.str_obj", override=True)
def _str_obj(x):
    # tvm-ffi hands strings of up to 7 bytes to Python as `str` (String is a `str` subclass).
    assert isinstance(x, str)
    return String(x + "_suffix")


@tvm_ffi.register_global_func("tests.disco.shape_tuple", override=True)
def _shape_tuple(x):
    assert isinstance(x, ShapeTuple)
    return ShapeTuple(list(x) + [4, 5])


def main() -> None:
    """Disco's worker loop, as ``tvm.exec.disco_worker`` starts it: without Disco's five
    arguments it says how to run it and returns, ending the process."""
    if len(sys.argv) != 6:
        print("Usage: <worker_id> <num_workers> <num_groups> <read_fd> <write_fd>")
        return
    tvm_ffi.get_global_func("runtime.disco.WorkerProcess")(*map(int, sys.argv[1:]))


if __name__ == "__main__":
    main()
