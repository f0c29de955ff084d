"""Finding and loading libdiscovm as a tvm-ffi module: the library ``$DISCOVM_LIBRARY`` names,
else the one installed inside the package."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import tvm_ffi

#: The environment variable that names the shared library (a path to ``libdiscovm.so``); when set,
#: it wins over the package's own copy.
LIBRARY_ENV = "DISCOVM_LIBRARY"
#: The library's file name.
LIBRARY_FILE = "libdiscovm.so"


def library_path() -> Path:
    """The path of the shared library: ``$DISCOVM_LIBRARY`` if set, else the package's own,
    ``lib/libdiscovm.so`` inside it (where ``pip install`` puts it), else ``libdiscovm.so``
    beside its modules (a copy put there by hand).

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
    package = Path(__file__).resolve().parent
    candidates = [package / "lib" / LIBRARY_FILE, package / LIBRARY_FILE]
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"discovm's library is not in this installation: neither {candidates[0]} nor "
        f"{candidates[1]} exists, and {LIBRARY_ENV} is not set. `pip install ./python` from the "
        "repository builds it into the package; an editable install (pip install -e) does not: "
        f"build it with `cargo build` and set {LIBRARY_ENV} to target/debug/{LIBRARY_FILE}."
    )


@functools.cache
def module() -> tvm_ffi.Module:
    """The library, loaded once as a tvm-ffi module: its functions are the C API's without the
    ``dvm_`` prefix (``module().session_new_threaded(4, 1)``)."""
    library = tvm_ffi.load_module(str(library_path()))
    _register_classes(library)
    return library


def _register_classes(library: tvm_ffi.Module) -> None:
    """Makes :class:`~discovm.DRef` tvm-ffi's class for the library's DRefs, before any comes
    back: a function that returns one then returns a ``DRef``, with no wrapper to build."""
    from .session import DREF_TYPE_KEY, DRef  # noqa: PLC0415 - the session module imports this one

    library.object_type_keys()  # gives the library's object types their indices now
    try:
        tvm_ffi.register_object(DREF_TYPE_KEY)(DRef)
    except ValueError as error:  # tvm-ffi made a class of its own for a DRef already
        raise RuntimeError(
            "a function of the library returned a DRef through tvm-ffi before the discovm "
            "package loaded the library, so tvm-ffi gave DRefs a class of its own: import "
            "discovm before calling the library's functions directly"
        ) from error
