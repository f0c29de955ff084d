"""Functions the session tests call on workers of either kind, registered in the library's
registry when a worker's process imports this module (``Session.import_python_module``: this
process for a ThreadedSession, each worker process for a ProcessSession)."""

import os

import numpy as np
import tvm_ffi

import discovm


@discovm.register_global_func("tests.process.pid", override=True)
def _pid() -> int:
    return os.getpid()


@discovm.register_global_func("tests.process.exit", override=True)
def _exit(status: int) -> None:
    os._exit(status)


@discovm.register_global_func("tests.process.scaled_sum", override=True)
def _scaled_sum(t, k: float) -> float:
    return float(np.from_dlpack(t).sum()) * k


@discovm.register_global_func("tests.process.getenv", override=True)
def _getenv(name: str) -> str:
    return os.environ.get(name, "<unset>")


@discovm.register_global_func("tests.process.library_module", override=True)
def _library_module() -> tvm_ffi.Module:
    return tvm_ffi.load_module(str(discovm.library_path()))


@discovm.register_global_func("tests.process.wait_at", override=True)
def _wait_at(gate: str, worker: int) -> None:
    """On worker ``worker``, waits until the test lets one call through the FIFO ``gate`` (or
    closes it); every other worker returns at once."""
    if discovm.current_worker_id() != worker:
        return
    fd = os.open(gate, os.O_RDONLY)
    try:
        os.read(fd, 1)
    finally:
        os.close(fd)
