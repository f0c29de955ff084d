"""The worker program of :class:`discovm.ProcessSession` and of every node's workers: ``python -m
discovm.worker``, started by the session with the arguments it needs, serves its controller
until the session shuts down. Before it serves, it imports the Python modules the session asks
for: the session's ``entrypoint`` (a worker module in the style of Disco's, such as
``tvm.exec.disco_worker`` or ``mlc_llm.cli.worker``, whose ``main`` does not run), and TVM's
worker functions when the controller imported TVM and TVM is installed here. A module that
cannot be imported fails the session's start with its own error.

Its workers run the functions this Python process registers (with
:func:`discovm.register_global_func`, or tvm-ffi's registry), those of the modules it imported
or the session imports on it later (:meth:`discovm.ProcessSession.import_python_module`), and
the library's built-ins.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

from ._library import module
from .functions import register_global_func
from .session import IMPORT_MODULE, WORKER_IMPORTS_ENV

#: The exit status of the serving that already ran in this process (a module imported for the
#: session that called :func:`main` itself), if any.
_served: int | None = None


def _import_python_module(name: str) -> None:
    importlib.import_module(name)


def _import_requested_modules() -> tuple[str, str] | tuple[()]:
    """Imports the modules the session names in ``$DISCOVM_WORKER_IMPORTS`` (a name ending in
    ``?`` only if its package is installed here), then takes the variable out of the
    environment. Returns the kind and message of the first failure, or nothing."""
    for entry in filter(None, os.environ.pop(WORKER_IMPORTS_ENV, "").split(",")):
        name = entry.removesuffix("?")
        try:
            importlib.import_module(name)
        except Exception as error:  # noqa: BLE001 - the session's start reports it
            missing = isinstance(error, ModuleNotFoundError) and error.name == name.split(".")[0]
            if entry.endswith("?") and missing:
                continue
            kind = type(error).__name__
            return kind, f"importing the module `{name}` failed: {kind}: {error}"
    return ()


def main(argv: Sequence[str] | None = None) -> int:
    """Serves the controller that started this process; returns the exit status (0 once the
    session shut down, 2 for arguments no controller passed)."""
    global _served  # noqa: PLW0603 - one serving per process
    register_global_func(IMPORT_MODULE, _import_python_module, override=True)
    unready = _import_requested_modules()
    if _served is not None:
        return _served
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        _served = int(module().worker_main(args, *unready))
    except ValueError as error:
        print(f"discovm.worker: {error}", file=sys.stderr)
        _served = 2
    return _served


if __name__ == "__main__":
    # Run as `discovm.worker`, not as `__main__`, so that a module imported for the session
    # that calls `discovm.worker.main` itself finds the serving done.
    from discovm.worker import main as _main

    sys.exit(_main())
