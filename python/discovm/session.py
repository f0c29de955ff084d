"""Sessions: worker threads driven from one controller, with the methods of
``tvm.runtime.disco.Session``.

A script written for Disco's threaded session runs here by changing its import and its
constructor (``discovm.ThreadedSession(num_workers)``). Differences, each on purpose:

- ``copy_from_worker_0`` returns with the host array filled (Disco's copy is asynchronous).
- A function that fails on a worker raises :class:`~discovm.WorkerError` at the next wait
  (a sync, a copy, a read) instead of ending the process; a missing function fails at
  :meth:`Session.get_global_func` (``KeyError``).
- ``init_ccl`` takes ``"cpu"``, collectives between worker threads in shared memory.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib
import json
import os
import sys
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

import numpy as np
import tvm_ffi

from . import _convert
from ._convert import DeviceLike, DTypeLike, SupportsDLPack
from ._library import module
from .vm import Tensor

#: The function a process session calls on its workers (``python -m discovm.worker``) to import
#: a Python module there.
IMPORT_MODULE = "discovm.worker.import_python_module"

#: The environment variable in which a worker process finds the Python modules to import before
#: it serves (names separated by commas; one ending in ``?`` only where its package is there).
WORKER_IMPORTS_ENV = "DISCOVM_WORKER_IMPORTS"

#: The module whose import gives a worker process what Disco's worker processes have: TVM's
#: runtime (the Relax VM's loader among its functions) and the ``tests.disco.*`` functions.
TVM_WORKER_MODULE = "tvm.exec.disco_worker"

#: The worker program of worker processes and nodes.
WORKER_MODULE = "discovm.worker"

#: The reduction kinds of :meth:`Session.allreduce`, as the workers' built-in numbers them.
REDUCE_OPS = {"sum": 0, "prod": 1, "min": 2, "max": 3, "avg": 4}


#: The type key of the library's DRef objects; :class:`DRef` is tvm-ffi's class for it.
DREF_TYPE_KEY = "discovm.DRef"

#: Returns its argument: as a constructor, it gives a new reference to an object.
_same_object = tvm_ffi.convert(lambda value: value)

_D = TypeVar("_D", bound="DRef")


class DRef(tvm_ffi.Object):
    """A value on every worker of a session: one register, named on each worker by the same
    number. Passed to a call, it becomes each worker's own value. The register is freed on
    every worker when the last reference goes, after the calls sent before.

    A DRef is the library's object itself (tvm-ffi's class for the type ``discovm.DRef``), so
    it passes to any tvm-ffi function as it is.
    """

    __slots__ = ("session",)

    def __init__(self, dref: DRef, session: Session) -> None:
        """Another reference to the register ``dref`` names, in ``session`` (to see a DRef as
        a :class:`DPackedFunc` or a :class:`DModule`)."""
        if not isinstance(dref, DRef):
            raise TypeError(f"expected a DRef but got {type(dref).__name__}")
        self.__init_handle_by_constructor__(_same_object, dref)
        #: The session the register belongs to (kept alive while this DRef lives).
        self.session = session

    @classmethod
    def _adopt(cls: type[_D], dref: DRef, session: Session) -> _D:
        """``dref``, just returned by a library function and held nowhere else, as a ``cls``
        of ``session`` (it takes over the reference; ``dref`` is left empty)."""
        adopted = cls.__new__(cls)
        adopted.__move_handle_from__(dref)
        adopted.session = session
        return adopted

    def debug_get_from_remote(self, worker_id: int) -> Any:
        """The value the register holds on worker ``worker_id``, after the calls sent before.

        Raises
        ------
        IndexError
            For a worker out of range.
        WorkerError
            If the call that should have filled the register failed there.
        """
        return _remote_value(module().dref_get(self, worker_id))

    def debug_copy_from(self, worker_id: int, value: SupportsDLPack) -> None:
        """Sets the register on worker ``worker_id`` to a copy of the array ``value``."""
        module().dref_set(self, worker_id, np.array(_convert.host_array(value), copy=True))

    def __repr__(self) -> str:
        # A DRef from the library's functions called directly has no session.
        return f"<discovm.{type(self).__name__} of {getattr(self, 'session', None)!r}>"


def _remote_value(value: Any) -> Any:
    """A value read from a worker, as Disco hands it back: a tensor as a
    :class:`~discovm.Tensor` (``.numpy()``, DLPack), anything else as tvm-ffi converts it."""
    if isinstance(value, tvm_ffi.Tensor):
        return Tensor.from_dlpack(value)
    return value


class DPackedFunc(DRef):
    """A function on every worker: calling it calls it on all of them (see
    :meth:`Session.call_packed`)."""

    __slots__ = ("_call", "_call_waiting")

    def __init__(self, dref: DRef, session: Session) -> None:
        super().__init__(dref, session)
        self._bind()

    @classmethod
    def _adopt(cls, dref: DRef, session: Session) -> DPackedFunc:
        func = super()._adopt(dref, session)
        func._bind()
        return func

    def _bind(self) -> None:
        # The library's call with the session and the function read once: a call costs one
        # Python frame, and tvm-ffi makes its result a DRef. tvm-ffi releases the GIL around
        # it, so that a call waiting for room in a full queue does not block workers running
        # Python functions. A call to one worker thread is tried first with the GIL held (the
        # release costs a tenth of a call): a try never waits, it returns None instead.
        handle = self.session._handle
        self._call = self._call_waiting = module().session_bind(handle, self)
        tried = module().session_bind(handle, self, False)
        if tried is not None:
            tried.release_gil = False
            self._call = tried

    def __call__(self, *args: Any) -> DRef:
        result = self._call(*args)
        if result is None:
            result = self._call_waiting(*args)
        result.session = self.session
        return result


class DModule(DRef):
    """A module on every worker (see :meth:`Session.load_module` and
    :meth:`Session.load_vm_module`): ``mod["name"]`` is its function ``name`` on every worker."""

    __slots__ = ()

    def __getitem__(self, name: str) -> DPackedFunc:
        """The module's function ``name`` on every worker, looked up on all of them at once.

        Raises
        ------
        KeyError
            If a worker's module has no function ``name`` (the message names it and the
            module's path).
        WorkerError
            If the module failed to load on a worker (with the loader's reason).
        TypeError
            If a worker holds something else than a module.
        """
        session = self.session
        return DPackedFunc._adopt(
            module().session_module_func(session._handle, self, name), session
        )


_LIVE_SESSIONS: weakref.WeakSet[Session] = weakref.WeakSet()


@atexit.register
def _shut_down_live_sessions() -> None:
    # Workers may be running Python functions: stop them while the interpreter still runs.
    for session in list(_LIVE_SESSIONS):
        session.shutdown()


class Session:
    """A session of workers, with the methods of ``tvm.runtime.disco.Session``.

    Use it as a context manager, or call :meth:`shutdown`; a session that is garbage collected,
    or still alive when the interpreter exits, is shut down then.
    """

    __slots__ = ("_handle", "_cache", "_sync_one", "__weakref__")

    def __init__(self, handle: tvm_ffi.Object) -> None:
        self._handle = handle
        self._cache: dict[str, DPackedFunc] = {}
        self._sync_one = functools.partial(module().session_sync_worker, handle)
        _LIVE_SESSIONS.add(self)

    def __tvm_ffi_object__(self) -> tvm_ffi.Object:
        """The library's object, so that a session passes as an argument to any tvm-ffi call."""
        return self._handle

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def __del__(self) -> None:
        try:
            self.shutdown()
        except Exception:  # noqa: BLE001 - nothing can be reported from a finalizer
            pass

    def __repr__(self) -> str:
        return f"<discovm.Session of {self.num_workers} workers>"

    @property
    def num_workers(self) -> int:
        """The number of workers."""
        return module().session_num_workers(self._handle)

    def _get_cached_method(self, name: str) -> DPackedFunc:
        func = self._cache.get(name)
        if func is None:
            func = self._cache[name] = self.get_global_func(name)
        return func

    def get_global_func(self, name: str) -> DPackedFunc:
        """The global function ``name`` on every worker: one registered with
        :func:`discovm.register_global_func`, else one in tvm-ffi's registry.

        Raises
        ------
        KeyError
            If no function is registered under ``name`` (checked now, not on the workers).
        """
        return DPackedFunc._adopt(module().session_get_global_func(self._handle, name), self)

    def load_module(self, path: str | os.PathLike[str]) -> DModule:
        """Loads the shared library at ``path`` on every worker, after the calls sent before.
        It exports packed functions under tvm-ffi's convention (``__tvm_ffi_<name>``), as a
        library built with tvm-ffi does; ``mod["name"]`` reaches them.

        Raises
        ------
        ValueError
            If ``path`` is not a file (a library a worker cannot load fails its next wait).
        """
        return DModule._adopt(module().session_load_module(self._handle, os.fspath(path)), self)

    def load_vm_module(
        self, path: str | os.PathLike[str], device: DeviceLike = None
    ) -> DModule:
        """Loads on every worker a model that TVM compiled for its Relax VM (exported with
        ``export_library``), on ``device`` or by default on each worker's own device, as
        Disco's method does; ``mod["main"]`` is its entry function.

        Raises
        ------
        ImportError
            If apache-tvm is not installed (the VM is TVM's).
        ValueError
            If ``path`` is not a file.
        """
        try:
            import tvm  # noqa: F401 - loads TVM's runtime, which runs the VM, into the process
        except ImportError as error:
            raise ImportError(
                "Session.load_vm_module needs apache-tvm, whose runtime runs the compiled "
                "model: pip install apache-tvm"
            ) from error
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise ValueError(f"module path `{path}` is not a file")
        func = self._get_cached_method("runtime.disco.load_vm_module")
        return DModule._adopt(func(path, _convert.device(device)), self)

    def import_python_module(self, module_name: str) -> None:
        """Imports a Python module for the workers (they are threads of this interpreter, so
        importing it here is enough)."""
        importlib.import_module(module_name)

    def call_packed(self, func: DRef, *args: Any) -> DRef:
        """Calls the function ``func`` holds on every worker, and returns at once.

        The arguments may be ints, floats, strings, dtypes, devices, shapes, tensors (numpy
        arrays among them) and DRefs; a DRef becomes each worker's own value. A failure on a
        worker is raised by the next wait.

        Returns
        -------
        DRef
            The results, one per worker.
        """
        result = module().session_call(self._handle, func, *args)
        result.session = self
        return result

    def sync_worker(self, worker_id: int) -> None:
        """Waits until worker ``worker_id`` has run every call sent to it so far.

        Raises
        ------
        WorkerError
            If a call on that worker failed since the last wait.
        """
        self._sync_one(worker_id)

    def sync_all(self) -> None:
        """Waits until every worker has run every call sent to it so far (all workers are asked
        at once)."""
        module().session_sync_all(self._handle)

    _sync_worker = sync_worker
    _sync_all = sync_all

    def sync_worker_0(self) -> None:
        """Waits until worker 0 has run every call sent to it so far."""
        self._sync_one(0)

    def status(self) -> dict[str, Any]:
        """What every worker is doing now, read without asking any worker (a worker stuck in a
        function, or dead, is reported as it is).

        Returns
        -------
        dict
            ``{"workers": [{"worker", "node", "pid", "state", "call", "function",
            "since_ms", "collective", "waits_for", "last_finished_call", "last_failure",
            "cause", "last_events"}, ...], "calls_sent": int}``; ``state`` is ``"idle"``, ``"running"``,
            ``"collective"``, ``"syncing"``, ``"dead"``, ``"lost"`` or ``"unknown"``
            (docs/observability.md says what each field means).
        """
        return json.loads(str(module().session_status(self._handle)))

    @contextlib.contextmanager
    def trace(self, path: str | os.PathLike[str]) -> Iterator[None]:
        """Traces the session while the ``with`` block runs, then writes the timeline to
        ``path`` in the Chrome Trace Event Format (ui.perfetto.dev and chrome://tracing open
        it): every worker's calls, syncs, collectives and module loads, the controller's sends,
        syncs and copies, and flows from each call's send to its runs.

        Raises
        ------
        ValueError
            If a trace of the session runs already, or ``path`` cannot be written.
        """
        module().session_trace_start(self._handle)
        try:
            yield
        finally:
            module().session_trace_stop(self._handle, os.fspath(path))

    def trace_dump(self, path: str | os.PathLike[str]) -> None:
        """Writes the flight recorder to ``path``, in the format of :meth:`trace`: the last
        1024 events of every worker, kept at all times (a dead worker process's too).

        Raises
        ------
        ValueError
            If ``path`` cannot be written.
        """
        module().session_trace_dump(self._handle, os.fspath(path))

    def live_registers(self, worker_id: int) -> int:
        """How many registers hold a value on worker ``worker_id`` (functions this session
        looked up for its own methods count too): a way to check for leaks."""
        return module().session_live_registers(self._handle, worker_id)

    def empty(
        self,
        shape: Sequence[int],
        dtype: DTypeLike,
        device: DeviceLike = None,
        worker0_only: bool = False,
        in_group: bool = True,
    ) -> DRef:
        """An uninitialised tensor on every worker (on each worker's device by default).

        With ``worker0_only``, only worker 0 gets one (the first worker of each group, with
        ``in_group``); the others hold None.
        """
        func = self._get_cached_method("runtime.disco.empty")
        return func(
            tvm_ffi.Shape(tuple(shape)),
            _convert.dtype(dtype),
            _convert.device(device),
            worker0_only,
            in_group,
        )

    def copy_to_worker_0(
        self, host_array: SupportsDLPack, remote_array: DRef | None = None
    ) -> DRef:
        """Copies a host array into a tensor on worker 0, and returns when it is there.

        Parameters
        ----------
        host_array
            A contiguous host array (numpy, or anything with ``__dlpack__``).
        remote_array
            The destination; None allocates one on worker 0 alone.

        Returns
        -------
        DRef
            ``remote_array``, or the tensor allocated for it.
        """
        host = _convert.host_array(host_array)
        if remote_array is None:
            remote_array = self.empty(host.shape, host.dtype, worker0_only=True)
        module().session_copy_to_worker0(self._handle, host, remote_array)
        return remote_array

    def copy_from_worker_0(self, host_array: SupportsDLPack, remote_array: DRef) -> None:
        """Copies the tensor ``remote_array`` holds on worker 0 into the writable host array
        ``host_array``; it is filled when this returns."""
        module().session_copy_from_worker0(self._handle, host_array, remote_array)

    def init_ccl(self, ccl: str, *device_ids: int) -> None:
        """Sets up collectives between the workers: ``"cpu"`` communicates through shared
        memory between the worker threads (every worker on the CPU); ``"nccl"`` needs GPUs.

        Raises
        ------
        ValueError
            For an unknown backend.
        DeviceUnavailable
            For a backend this build or machine cannot offer.
        """
        module().session_init_ccl(self._handle, ccl, list(device_ids))

    def broadcast(
        self, src: SupportsDLPack, dst: DRef | None = None, in_group: bool = True
    ) -> DRef:
        """Copies a host array to worker 0, then broadcasts it to every worker.

        Returns
        -------
        DRef
            ``dst``, or the tensors allocated for it (the shape and dtype of ``src``).
        """
        host = _convert.host_array(src)
        if dst is None:
            dst = self.empty(host.shape, host.dtype)
        self.broadcast_from_worker0(self.copy_to_worker_0(host), dst, in_group)
        return dst

    def broadcast_from_worker0(self, src: DRef, dst: DRef, in_group: bool = True) -> None:
        """Broadcasts worker 0's ``src`` into every worker's ``dst``."""
        self._get_cached_method("runtime.disco.broadcast_from_worker0")(src, in_group, dst)

    def scatter(self, src: SupportsDLPack, dst: DRef | None = None, in_group: bool = True) -> DRef:
        """Copies a host array to worker 0, then scatters its first dimension: worker ``i``
        gets ``src[i]``.

        Returns
        -------
        DRef
            ``dst``, or the tensors allocated for it (the shape of ``src[0]``).
        """
        host = _convert.host_array(src)
        if dst is None:
            dst = self.empty(host.shape[1:], host.dtype)
        self.scatter_from_worker0(self.copy_to_worker_0(host), dst, in_group)
        return dst

    def scatter_from_worker0(self, from_array: DRef, to_array: DRef, in_group: bool = True) -> None:
        """Scatters worker 0's ``from_array`` along its first dimension into ``to_array``."""
        self._get_cached_method("runtime.disco.scatter_from_worker0")(
            from_array, in_group, to_array
        )

    def gather_to_worker0(self, from_array: DRef, to_array: DRef, in_group: bool = True) -> None:
        """Gathers every worker's ``from_array`` into worker 0's ``to_array`` (stacked along a
        new first dimension)."""
        self._get_cached_method("runtime.disco.gather_to_worker0")(from_array, in_group, to_array)

    def allreduce(self, src: DRef, dst: DRef, op: str = "sum", in_group: bool = True) -> DRef:
        """Reduces ``src`` across the workers into every worker's ``dst``.

        Parameters
        ----------
        op
            ``"sum"``, ``"prod"``, ``"min"``, ``"max"`` or ``"avg"``.

        Returns
        -------
        DRef
            ``dst``.
        """
        if op not in REDUCE_OPS:
            raise ValueError(f"Unsupported reduce op: {op}. Available ops are: {REDUCE_OPS.keys()}")
        func = self._get_cached_method("runtime.disco.allreduce")
        func(src, tvm_ffi.Shape((REDUCE_OPS[op],)), in_group, dst)
        return dst

    def allgather(self, src: DRef, dst: DRef, in_group: bool = True) -> DRef:
        """Gathers every worker's ``src`` into every worker's ``dst``.

        Returns
        -------
        DRef
            ``dst``.
        """
        self._get_cached_method("runtime.disco.allgather")(src, in_group, dst)
        return dst

    def shutdown(self) -> None:
        """Stops the workers once the work already sent has run. Every later call on the
        session raises :class:`~discovm.SessionClosed`; shutting down again does nothing."""
        self._cache.clear()
        module().session_shutdown(self._handle)


def _worker_imports(entrypoint: str) -> list[str]:
    """The modules each worker process imports before it serves: TVM's worker module when this
    process imported TVM (where TVM is installed), then the session's ``entrypoint``."""
    imports = []
    if "tvm" in sys.modules and entrypoint != TVM_WORKER_MODULE:
        imports.append(TVM_WORKER_MODULE + "?")
    if entrypoint != WORKER_MODULE:
        imports.append(entrypoint)
    return imports


def _options(
    timeout: float | None,
    spin_us: int,
    cpu_affinity: Sequence[int] | None,
    devices: Sequence[DeviceLike] | None,
) -> tuple[int, int, list[int] | None, list[tvm_ffi.Device | None] | None]:
    """The library's session options from the constructors' keywords (a timeout in seconds,
    None: no bound)."""
    if timeout is not None and timeout <= 0:
        raise ValueError(f"timeout must be positive or None, not {timeout}")
    return (
        0 if timeout is None else max(1, round(timeout * 1000)),
        spin_us,
        None if cpu_affinity is None else list(cpu_affinity),
        None if devices is None else [_convert.device(d) for d in devices],
    )


class ThreadedSession(Session):
    """A session of ``num_workers`` worker threads in this process, in ``num_groups`` groups
    of equal size.

    Parameters
    ----------
    num_workers
        How many workers (threads).
    num_groups
        How many groups they form (collectives with ``in_group`` stay within one).
    timeout
        The longest any wait may take, in seconds; a longer one raises ``RuntimeError`` of
        kind ``TimeoutError``. None: no bound.
    spin_us
        How long waiting threads spin before they sleep, in microseconds (0: the default;
        negative: sleep at once).
    cpu_affinity
        The CPU each worker is pinned to (-1: not pinned), or None.
    devices
        The device of each worker, or None (all on the CPU).
    """

    __slots__ = ()

    def __init__(
        self,
        num_workers: int,
        num_groups: int = 1,
        *,
        timeout: float | None = None,
        spin_us: int = 0,
        cpu_affinity: Sequence[int] | None = None,
        devices: Sequence[DeviceLike] | None = None,
    ) -> None:
        handle = module().session_new_threaded(
            num_workers, num_groups, *_options(timeout, spin_us, cpu_affinity, devices)
        )
        super().__init__(handle)


class ProcessSession(Session):
    """A session of ``num_workers`` worker processes in ``num_groups`` groups of equal size,
    with the signature of Disco's ``ProcessSession``. Each worker runs ``python -m
    discovm.worker`` with this interpreter, which first imports the module ``entrypoint``
    names, if another: a worker module in the style of Disco's (``tvm.exec.disco_worker``,
    ``mlc_llm.cli.worker``), for the functions it registers; its ``main`` does not run. When
    this process has imported TVM, the workers import ``tvm.exec.disco_worker`` too, so they
    have what Disco's workers have (``load_vm_module``, ``tests.disco.*``). A module that
    cannot be imported fails the constructor with its own error. A worker that crashes raises
    :class:`~discovm.WorkerError` naming its pid and cause at the next wait, and does not take
    this process with it.

    What crosses to a worker is a value: None, bool, int, float, str, bytes, shapes, dtypes,
    devices, DRefs and host arrays (copied); anything else raises ``TypeError`` at the call.
    Functions run on a worker only if that process registers them: import the module that
    registers them with :meth:`import_python_module`, or name it as the ``entrypoint``.

    ``threads_per_worker`` bounds the threads each worker's OpenMP and BLAS libraries start
    (numpy's among them): 0, the default, gives each the machine's cores divided by its workers
    (at least 1) unless ``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` or ``MKL_NUM_THREADS`` is
    set, and says so once on stderr; -1 leaves the environment as it is; n gives each n. The
    other keyword options are those of :class:`ThreadedSession`.
    """

    __slots__ = ()

    def __init__(
        self,
        num_workers: int,
        num_groups: int = 1,
        entrypoint: str = "discovm.worker",
        *,
        timeout: float | None = None,
        spin_us: int = 0,
        cpu_affinity: Sequence[int] | None = None,
        devices: Sequence[DeviceLike] | None = None,
        threads_per_worker: int = 0,
    ) -> None:
        handle = module().session_new_process(
            num_workers,
            num_groups,
            *_options(timeout, spin_us, cpu_affinity, devices),
            sys.executable,
            ["-m", WORKER_MODULE],
            _worker_imports(entrypoint),
            threads_per_worker,
        )
        super().__init__(handle)

    def import_python_module(self, module_name: str) -> None:
        """Imports a Python module in every worker process (the functions it registers become
        callable there), in order with the calls sent before."""
        self._get_cached_method(IMPORT_MODULE)(module_name)


class SocketSession(ProcessSession):
    """A session across ``num_nodes`` machines of ``num_workers_per_node`` workers each, in
    ``num_groups`` groups of equal size, with the signature of Disco's ``SocketSession``
    (worker ids node-major). This machine is node 0, with worker processes of its own (as
    :class:`ProcessSession` starts them); it listens on ``host:port`` until every other node
    joined (``python -m discovm.node HOST PORT WORKERS`` there, or ``discovm-node``), within
    ``timeout`` (two minutes without one), then stops listening.

    A node joins only if it proves it holds the session's secret (``session_token``, else the
    environment variable ``DISCOVM_SESSION_TOKEN``, on both sides); without one, only nodes on
    the loopback interface may join. A node that is lost (its connection closes, or nothing comes
    from it for ``heartbeat`` seconds, 2 by default) fails the waits on the session with
    :class:`~discovm.WorkerError` naming it. With ``upload_modules``, :meth:`load_module` sends
    the module's bytes to the other nodes (Disco's ``upload_vm_module``), which load their own
    copy. With ``local_threads``, this machine's workers are threads of this process (those of
    the other nodes are always processes). ``devices`` gives each worker's device, node-major:
    this machine's as :class:`ProcessSession` takes them; every other node's workers all on the
    CPU, or each on the CUDA device of its index on the node (``cuda:0``, ``cuda:1``, ...).
    :meth:`init_ccl` with ``"cpu"`` runs the collectives with Gloo between the workers (the
    plugin ``libdiscovm_gloo.so`` next to the library, built where Debian's ``libgloo-dev`` is
    installed), and with ``"nccl"`` with NCCL between GPU workers, on every node. Every node's
    workers import what this machine's do (``entrypoint``, and TVM's worker module where TVM is
    installed when this process imported TVM), and share their node's cores as
    ``threads_per_worker`` says (see :class:`ProcessSession`).
    """

    __slots__ = ()

    def __init__(  # pylint: disable=super-init-not-called
        self,
        num_nodes: int,
        num_workers_per_node: int,
        num_groups: int,
        host: str,
        port: int,
        entrypoint: str = "discovm.worker",
        *,
        timeout: float | None = None,
        spin_us: int = 0,
        session_token: str | None = None,
        heartbeat: float | None = None,
        upload_modules: bool = False,
        local_threads: bool = False,
        devices: Sequence[DeviceLike] | None = None,
        threads_per_worker: int = 0,
    ) -> None:
        if heartbeat is not None and heartbeat <= 0:
            raise ValueError(f"heartbeat must be positive or None, not {heartbeat}")
        handle = module().session_new_socket(
            num_nodes,
            num_workers_per_node,
            num_groups,
            host,
            port,
            *_options(timeout, spin_us, None, devices),
            sys.executable,
            ["-m", WORKER_MODULE],
            session_token,
            0 if heartbeat is None else max(1, round(heartbeat * 1000)),
            upload_modules,
            local_threads,
            _worker_imports(entrypoint),
            threads_per_worker,
        )
        Session.__init__(self, handle)
