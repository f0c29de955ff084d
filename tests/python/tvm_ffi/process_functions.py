"""Functions the process-session tests call on worker processes, registered in the library's
registry when a worker imports this module (``ProcessSession.import_python_module``)."""

import os

import discovm


@discovm.register_global_func("tests.process.pid", override=True)
def _pid() -> int:
    return os.getpid()


@discovm.register_global_func("tests.process.exit", override=True)
def _exit(status: int) -> None:
    os._exit(status)
