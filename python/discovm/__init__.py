"""discovm for Python: a session of worker threads driven from one controller, with the
methods of TVM's ``tvm.runtime.disco.Session``, on the shared library ``libdiscovm.so``
loaded through tvm-ffi.

.. code-block:: python

    import numpy as np
    import discovm

    with discovm.ThreadedSession(4) as sess:
        sess.init_ccl("cpu")                                  # collectives between the workers
        x = sess.broadcast(np.arange(8, dtype="float32"))    # a copy on every worker
        y = sess.empty((8,), "float32")
        sess.allreduce(x, y, op="sum")                        # y = 4 * x on every worker
        out = np.empty(8, dtype="float32")
        sess.copy_from_worker_0(out, y)

The library is ``$DISCOVM_LIBRARY`` if set, else the one installed with this package
(``pip install ./python`` builds it into the package's ``lib/``); it is loaded with the package,
or on first use when it is not there then. Its functions, the C API's without the ``dvm_``
prefix, are reachable as ``discovm.library()``.
"""

from ._library import LIBRARY_ENV, library_path
from ._library import module as library
from .errors import DeviceUnavailable, SessionClosed, WorkerError
from .functions import (
    current_worker_id,
    get_global_func,
    list_global_func_names,
    register_global_func,
    remove_global_func,
    version,
)
from .libinfo import cmake_dir, include_dir, lib_dir, pkgconfig_dir
from .session import (
    REDUCE_OPS,
    DModule,
    DPackedFunc,
    DRef,
    ProcessSession,
    Session,
    SocketSession,
    ThreadedSession,
)
from .vm import Stream, Tensor

__all__ = [
    "LIBRARY_ENV",
    "REDUCE_OPS",
    "DModule",
    "DPackedFunc",
    "DRef",
    "DeviceUnavailable",
    "ProcessSession",
    "Session",
    "SessionClosed",
    "SocketSession",
    "Stream",
    "Tensor",
    "ThreadedSession",
    "WorkerError",
    "cmake_dir",
    "current_worker_id",
    "get_global_func",
    "include_dir",
    "lib_dir",
    "library",
    "library_path",
    "list_global_func_names",
    "pkgconfig_dir",
    "register_global_func",
    "remove_global_func",
    "version",
]

try:
    # Loaded now, tvm-ffi gives the library's DRefs the class DRef from the first one, even
    # those of its functions called through tvm-ffi directly.
    library()
except Exception:  # noqa: BLE001 - not there, or not loadable: the first use raises why
    pass
