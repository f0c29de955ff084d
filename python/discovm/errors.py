"""Exceptions for the error kinds of discovm's own.

Errors with Python's kinds (``ValueError``, ``TypeError``, ``KeyError``, ``IndexError``,
``ImportError``, ...) are raised as those. The kinds below are raised as these classes, all
``RuntimeError`` subclasses; other kinds of the library's (``TimeoutError``, ``Panic``) are raised as
``RuntimeError``. Every one keeps its kind in ``error.__tvm_ffi_error__.kind``.
"""

from __future__ import annotations

from tvm_ffi.error import register_error


@register_error("WorkerError")
class WorkerError(RuntimeError):
    """A call on a worker failed; the message names the worker, the function and the cause."""


@register_error("SessionClosed")
class SessionClosed(RuntimeError):
    """The session was shut down."""


@register_error("DeviceUnavailable")
class DeviceUnavailable(RuntimeError):
    """The device, or its driver, is not there."""


# A worker process that cannot import a module the session asks for fails the session's start
# with the import's own error.
register_error("ImportError", ImportError)
register_error("ModuleNotFoundError", ModuleNotFoundError)
