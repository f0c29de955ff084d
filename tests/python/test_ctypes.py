"""Drives libdiscovm.so from Python with nothing but ctypes.

Wraps Python callables as packed functions with dvm_func_new, calls them through
dvm_func_call, and checks that errors raised in a callback (with dvm_error_raise, or as Python
exceptions turned into errors) come back with their kind and message.

Usage: python3 tests/python/test_ctypes.py [path/to/libdiscovm.so]
(the path defaults to $DVM_LIBRARY, then "libdiscovm.so"). Exits 1 if any check fails.
"""

import ctypes
import os
import sys

from object_header import DVMObject

# ---- The ABI: the 16-byte value and the packed calling convention -----------------------------

K_NONE, K_INT, K_BOOL, K_FLOAT = 0, 1, 2, 3
K_SMALL_STR, K_STR = 11, 65
K_STATIC_OBJECT_BEGIN = 64

DVM_OK, DVM_VALUE_ERROR, DVM_TYPE_ERROR, DVM_KEY_ERROR = 0, 1, 2, 4
DVM_OTHER_ERROR = 11


class _Payload(ctypes.Union):
    _fields_ = [
        ("v_int64", ctypes.c_int64),
        ("v_float64", ctypes.c_double),
        ("v_ptr", ctypes.c_void_p),
        ("v_bytes", ctypes.c_char * 8),
    ]


class DVMAny(ctypes.Structure):
    _anonymous_ = ("_payload",)
    _fields_ = [
        ("type_index", ctypes.c_int32),
        ("zero_padding", ctypes.c_uint32),  # small_str_len for small strings
        ("_payload", _Payload),
    ]


class DVMByteArray(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("size", ctypes.c_size_t)]


SAFE_CALL = ctypes.CFUNCTYPE(
    ctypes.c_int32, ctypes.c_void_p, ctypes.POINTER(DVMAny), ctypes.c_int32, ctypes.POINTER(DVMAny)
)
DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def load(path):
    lib = ctypes.CDLL(path)
    signatures = {
        "dvm_version": (ctypes.c_char_p, []),
        "dvm_func_new": (
            ctypes.c_int32,
            [ctypes.c_void_p, SAFE_CALL, DELETER, ctypes.POINTER(ctypes.c_void_p)],
        ),
        "dvm_func_call": (
            ctypes.c_int32,
            [ctypes.c_void_p, ctypes.POINTER(DVMAny), ctypes.c_int32, ctypes.POINTER(DVMAny)],
        ),
        "dvm_func_free": (None, [ctypes.c_void_p]),
        "dvm_func_register_global": (ctypes.c_int32, [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int32]),
        "dvm_func_get_global": (ctypes.c_int32, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]),
        "dvm_func_remove_global": (ctypes.c_int32, [ctypes.c_char_p]),
        "dvm_error_raise": (None, [ctypes.c_char_p, ctypes.c_char_p]),
        "dvm_last_error_kind": (ctypes.c_char_p, []),
        "dvm_last_error_message": (ctypes.c_char_p, []),
        "dvm_string_new": (ctypes.c_int32, [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(DVMAny)]),
        "dvm_any_release": (ctypes.c_int32, [ctypes.POINTER(DVMAny)]),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes
    return lib


# ---- Wrapping Python callables ------------------------------------------------------------------


def to_python(value):
    """A Python value from a borrowed argument."""
    if value.type_index == K_INT:
        return value.v_int64
    if value.type_index == K_BOOL:
        return bool(value.v_int64)
    if value.type_index == K_FLOAT:
        return value.v_float64
    if value.type_index == K_SMALL_STR:
        return bytes(value.v_bytes)[: value.zero_padding].decode()
    if value.type_index == K_STR:
        # The object's cell (a byte array) follows its 24-byte header.
        cell = DVMByteArray.from_address(value.v_ptr + ctypes.sizeof(DVMObject))
        return ctypes.string_at(cell.data, cell.size).decode()
    raise TypeError(f"unsupported type index {value.type_index}")


def store_result(lib, value, result):
    """Writes a Python value into the caller's result slot (which holds None)."""
    if isinstance(value, bool):
        result.type_index, result.v_int64 = K_BOOL, int(value)
    elif isinstance(value, int):
        result.type_index, result.v_int64 = K_INT, value
    elif isinstance(value, float):
        result.type_index, result.v_float64 = K_FLOAT, value
    elif isinstance(value, str):
        data = value.encode()
        if lib.dvm_string_new(data, len(data), ctypes.byref(result)) != DVM_OK:
            raise RuntimeError(lib.dvm_last_error_message().decode())
    elif value is not None:
        raise TypeError(f"cannot return a {type(value).__name__}")


class PackedFunction:
    """A Python callable as a discovm function. A Python exception in the callable is raised as
    an error of the same kind (its class name) for the caller."""

    deleted = 0  # how many wrappers the library has released

    def __init__(self, lib, callable_):
        self.lib = lib
        self.callable = callable_
        # Keep the ctypes callbacks alive as long as the library may call them.
        self._call = SAFE_CALL(self._safe_call)
        self._delete = DELETER(self._deleter)
        self.handle = ctypes.c_void_p()
        status = lib.dvm_func_new(None, self._call, self._delete, ctypes.byref(self.handle))
        if status != DVM_OK:
            raise RuntimeError(lib.dvm_last_error_message().decode())

    def _safe_call(self, _self, args, num_args, result):
        try:
            values = [to_python(args[i]) for i in range(num_args)]
            store_result(self.lib, self.callable(*values), result.contents)
            return 0
        except RaisedError:
            return -1  # the callable raised through dvm_error_raise itself
        except Exception as error:  # noqa: BLE001 - every failure goes back to the caller
            self.lib.dvm_error_raise(type(error).__name__.encode(), str(error).encode())
            return -1

    @staticmethod
    def _deleter(_self):
        PackedFunction.deleted += 1

    def __call__(self, *args):
        """Calls through dvm_func_call; returns (status, value or (kind, message))."""
        return call(self.lib, self.handle, *args)

    def free(self):
        self.lib.dvm_func_free(self.handle)


class RaisedError(Exception):
    """Raised by a callable that already reported its error with dvm_error_raise."""


def call(lib, handle, *args):
    packed = (DVMAny * max(len(args), 1))()
    for slot, value in zip(packed, args):
        store_result(lib, value, slot)
    result = DVMAny()
    status = lib.dvm_func_call(handle, packed, len(args), ctypes.byref(result))
    for slot in packed[: len(args)]:
        lib.dvm_any_release(ctypes.byref(slot))
    if status != DVM_OK:
        return status, (lib.dvm_last_error_kind().decode(), lib.dvm_last_error_message().decode())
    value = to_python(result) if result.type_index != K_NONE else None
    lib.dvm_any_release(ctypes.byref(result))
    return status, value


# ---- The checks -------------------------------------------------------------------------------

failures = []
passed = 0


def check(condition, what):
    global passed
    if condition:
        passed += 1
    else:
        failures.append(what)
        print(f"FAILED: {what}", file=sys.stderr)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("DVM_LIBRARY", "libdiscovm.so")
    lib = load(path)
    print(f"loaded discovm {lib.dvm_version().decode()} from {path}")
    check(ctypes.sizeof(DVMAny) == 16, "DVMAny is 16 bytes")
    check(ctypes.sizeof(DVMObject) == 24, "DVMObject is 24 bytes")

    # A Python callable reading Int arguments and writing an Int result.
    add = PackedFunction(lib, lambda a, b: a + b)
    status, value = add(40, 2)
    check(status == DVM_OK and value == 42, f"add(40, 2) -> {status}, {value!r}")
    status, value = add(-(2**62), -(2**62))
    check(status == DVM_OK and value == -(2**63), f"add at the int64 edge -> {status}, {value!r}")

    # Floats, bools and strings (small and heap) travel too.
    status, value = add(1.5, 2)
    check(status == DVM_OK and value == 3.5, f"add(1.5, 2) -> {status}, {value!r}")
    status, value = add("py", "thon")
    check(status == DVM_OK and value == "python", f"add('py', 'thon') -> {status}, {value!r}")
    status, value = add("a longer ", "string value")
    check(
        status == DVM_OK and value == "a longer string value",
        f"add of heap strings -> {status}, {value!r}",
    )

    # An error raised with dvm_error_raise inside the callback arrives with kind and message.
    def reject(x):
        lib.dvm_error_raise(b"ValueError", f"x must be positive, got {x}".encode())
        raise RaisedError()

    rejecting = PackedFunction(lib, reject)
    status, value = rejecting(-3)
    check(
        status == DVM_VALUE_ERROR and value == ("ValueError", "x must be positive, got -3"),
        f"dvm_error_raise from Python -> {status}, {value!r}",
    )

    # A Python exception becomes an error of the same kind; unknown kinds keep their name.
    status, value = add(1)
    check(
        status == DVM_TYPE_ERROR and value[0] == "TypeError" and "missing 1 required" in value[1],
        f"a Python TypeError -> {status}, {value!r}",
    )
    divide = PackedFunction(lib, lambda a, b: a // b)
    status, value = divide(1, 0)
    check(
        status == DVM_OTHER_ERROR and value[0] == "ZeroDivisionError",
        f"a Python ZeroDivisionError -> {status}, {value!r}",
    )

    # Through the global registry, as any other language would find it.
    check(lib.dvm_func_register_global(b"test.python.add", add.handle, 0) == DVM_OK, "register")
    found = ctypes.c_void_p()
    check(lib.dvm_func_get_global(b"test.python.add", ctypes.byref(found)) == DVM_OK, "lookup")
    check(found.value == add.handle.value, "the registry returns the same function")
    status, value = call(lib, found, 20, 22)
    check(status == DVM_OK and value == 42, f"registry add(20, 22) -> {status}, {value!r}")
    lib.dvm_func_free(found)
    status = lib.dvm_func_get_global(b"test.python.missing", ctypes.byref(found))
    check(
        status == DVM_KEY_ERROR and b"test.python.missing" in lib.dvm_last_error_message(),
        f"missing global -> {status}",
    )
    check(lib.dvm_func_remove_global(b"test.python.add") == DVM_OK, "remove")

    # Each wrapper's deleter runs once, when its last reference goes.
    for function in (add, rejecting, divide):
        function.free()
    check(PackedFunction.deleted == 3, f"deleters ran {PackedFunction.deleted} times, expected 3")

    if failures:
        print(f"test_ctypes: {len(failures)} of {passed + len(failures)} checks FAILED")
        return 1
    print(f"test_ctypes: all {passed} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
