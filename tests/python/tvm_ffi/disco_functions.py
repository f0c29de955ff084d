"""The functions Disco's session tests call on the workers, registered in tvm-ffi's registry
when this module is imported: by the tests themselves (threaded sessions share their process)
and by the workers of a process session (``import_python_module``), as ``tvm.testing.disco``
registers them for Disco."""

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
