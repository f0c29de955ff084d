"""The library's registry of global functions, which the workers of every session call by
name, and what a function running on a worker can ask."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import tvm_ffi

from ._library import module

F = TypeVar("F", bound=Callable[..., Any])


def register_global_func(
    name: str, f: F | None = None, override: bool = False
) -> F | Callable[[F], F]:
    """Registers ``f`` (a Python callable or a tvm-ffi function) under ``name`` in the
    library's registry, so that :meth:`Session.get_global_func` finds it and workers call it
    on their own threads. Without ``f``, returns a decorator.

    Raises
    ------
    ValueError
        If ``name`` is taken and ``override`` is false.
    """

    def register(func: F) -> F:
        module().func_register_global(name, func, override)
        return func

    return register if f is None else register(f)


def get_global_func(name: str) -> tvm_ffi.Function:
    """The function registered under ``name`` (in the library's registry, else in tvm-ffi's),
    callable from Python.

    Raises
    ------
    KeyError
        If nothing is registered under ``name``.
    """
    return module().func_get_global(name)


def remove_global_func(name: str) -> None:
    """Removes the function registered under ``name`` (``KeyError`` if there is none)."""
    module().func_remove_global(name)


def list_global_func_names() -> list[str]:
    """The names in the registry, sorted (the workers' built-ins among them)."""
    return [str(name) for name in module().func_list_global_names()]


def current_worker_id() -> int:
    """The id of the worker running the calling thread, or -1 off worker threads."""
    return module().current_worker_id()


def version() -> str:
    """The version of the loaded library."""
    return str(module().version())
