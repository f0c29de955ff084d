"""Finding and loading libdiscovm as a tvm-ffi module."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import tvm_ffi

#: The environment variable that names the shared library (a path to ``libdiscovm.so``).
LIBRARY_ENV = "DISCOVM_LIBRARY"
#: The library's file name, looked for next to this package when the variable is not set.
LIBRARY_FILE = "libdiscovm.so"


def library_path() -> Path:
    """The path of the shared library: ``$DISCOVM_LIBRARY`` if set, else ``libdiscovm.so`` next
    to this package.

    Raises
    ------
    FileNotFoundError
        If the file is not there; the message says where it was looked for.
    """
    named = os.environ.get(LIBRARY_ENV)
    if named:
        path = Path(named)
        if not path.is_file():
            raise FileNotFoundError(f"{LIBRARY_ENV} is {named!r}, which is not a file")
        return path
    path = Path(__file__).resolve().parent / LIBRARY_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{LIBRARY_FILE} is not next to the discovm package ({path.parent}); build it "
            f"(cargo build) and set {LIBRARY_ENV} to its path, or copy it there"
        )
    return path


@functools.cache
def module() -> tvm_ffi.Module:
    """The library, loaded once as a tvm-ffi module: its functions are the C API's without the
    ``dvm_`` prefix (``module().session_new_threaded(4, 1)``)."""
    return tvm_ffi.load_module(str(library_path()))
