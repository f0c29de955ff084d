"""The worker program of :class:`discovm.ProcessSession`: ``python -m discovm.worker``, started
by the session with the arguments it needs, serves its controller until the session shuts
down. Its workers run the functions this Python process registers (with
:func:`discovm.register_global_func`, or tvm-ffi's registry), those of the modules the session
imports on them (:meth:`discovm.ProcessSession.import_python_module`), and the library's
built-ins.

A program of your own serves a session the same way: register functions, then call
:func:`main`, and name the module as the session's ``entrypoint``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from ._library import module
from .functions import register_global_func
from .session import IMPORT_MODULE


def _import_python_module(name: str) -> None:
    importlib.import_module(name)


def main(argv: Sequence[str] | None = None) -> int:
    """Serves the controller that started this process; returns the exit status (0 once the
    session shut down, 2 for arguments no controller passed)."""
    register_global_func(IMPORT_MODULE, _import_python_module, override=True)
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return int(module().worker_main(args))
    except ValueError as error:
        print(f"discovm.worker: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
