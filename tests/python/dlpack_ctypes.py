"""What the DLPack tests share: DLPack and the object header as ctypes structures, the library's
tensor and stream functions, PyCapsules through Python's C API, an exporter of our tensors for
the __dlpack__ protocol, and the check counters.

Imported by the test scripts next to it; the library is the path given as the script's first
argument (default: libdiscovm.so on the loader's path).
"""

import ctypes
import sys

from object_header import DVMObject

# ---- DLPack, as ctypes structures (the object header is in object_header.py) ---------------------


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


class DLManagedTensor(ctypes.Structure):
    pass


VERSIONED_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))
LEGACY_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensorVersioned._fields_ = [
    ("major", ctypes.c_uint32),
    ("minor", ctypes.c_uint32),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.c_void_p),
    ("flags", ctypes.c_uint64),
    ("dl_tensor", DLTensor),
]
DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.c_void_p),
]


KDL_CPU, KDL_CUDA, KDL_FLOAT = 1, 2, 2
CPU = DLDevice(KDL_CPU, 0)
GPU0 = DLDevice(KDL_CUDA, 0)
F32 = DLDataType(KDL_FLOAT, 32, 1)
DVM_OK, DVM_VALUE_ERROR = 0, 1

# ---- The library -------------------------------------------------------------------------------

lib = ctypes.CDLL(sys.argv[1] if len(sys.argv) > 1 else "libdiscovm.so")
P = ctypes.c_void_p
lib.dvm_device_count.argtypes = [ctypes.c_int32, ctypes.POINTER(ctypes.c_int32)]
lib.dvm_tensor_empty.argtypes = [
    ctypes.POINTER(ctypes.c_int64), ctypes.c_int32, DLDataType, DLDevice, ctypes.POINTER(P)
]
lib.dvm_tensor_free.argtypes = [P]
lib.dvm_tensor_free.restype = None
lib.dvm_tensor_read.argtypes = [P, P, ctypes.c_size_t]
lib.dvm_tensor_write.argtypes = [P, P, ctypes.c_size_t]
lib.dvm_tensor_copy.argtypes = [P, P, P]
lib.dvm_tensor_to_dlpack.argtypes = [P, ctypes.POINTER(P)]
lib.dvm_tensor_from_dlpack.argtypes = [P, ctypes.POINTER(P)]
lib.dvm_stream_new.argtypes = [DLDevice, ctypes.POINTER(P)]
lib.dvm_stream_sync.argtypes = [P]
lib.dvm_stream_free.argtypes = [P]
lib.dvm_stream_free.restype = None
lib.dvm_object_inc_ref.argtypes = [P]
lib.dvm_last_error_kind.restype = ctypes.c_char_p
lib.dvm_last_error_message.restype = ctypes.c_char_p

failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print(f"FAILED: {what}", file=sys.stderr)


def finish(what):
    """Exits 1 if a check failed, else says that every check of `what` passed."""
    if failures:
        print(f"{failures} checks FAILED", file=sys.stderr)
        sys.exit(1)
    print(f"{what}: all checks passed")


def ok(status, what):
    if status != DVM_OK:
        kind = lib.dvm_last_error_kind().decode()
        message = lib.dvm_last_error_message().decode()
        raise SystemExit(f"FAILED: {what} returned {status}: {kind}: {message}")


def strong_count(handle):
    return DVMObject.from_address(handle).combined_ref_count & 0xFFFFFFFF


def empty(shape, device=CPU):
    dims = (ctypes.c_int64 * len(shape))(*shape)
    out = P()
    ok(lib.dvm_tensor_empty(dims, len(shape), F32, device, ctypes.byref(out)), "dvm_tensor_empty")
    return out.value


def read_f32(handle, count):
    out = (ctypes.c_float * count)()
    ok(lib.dvm_tensor_read(handle, out, ctypes.sizeof(out)), "dvm_tensor_read")
    return list(out)


def write_f32(handle, values):
    data = (ctypes.c_float * len(values))(*values)
    ok(lib.dvm_tensor_write(handle, data, ctypes.sizeof(data)), "dvm_tensor_write")


# ---- PyCapsules through the C API of Python ----------------------------------------------------

api = ctypes.pythonapi
# A destructor gets a capsule that is being destroyed: take it as a bare pointer (a py_object
# would touch its reference count) and use the raw forms of the capsule functions.
CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, P)
raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, P, ctypes.c_char_p)(("PyCapsule_IsValid", api))
raw_get_pointer = ctypes.PYFUNCTYPE(P, P, ctypes.c_char_p)(("PyCapsule_GetPointer", api))
api.PyCapsule_New.restype = ctypes.py_object
api.PyCapsule_New.argtypes = [P, ctypes.c_char_p, CAPSULE_DESTRUCTOR]
api.PyCapsule_IsValid.restype = ctypes.c_int
api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
api.PyCapsule_GetPointer.restype = P
api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
api.PyCapsule_SetName.restype = ctypes.c_int
api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]

VERSIONED, LEGACY = b"dltensor_versioned", b"dltensor"
USED = b"used_dltensor_versioned"


def release_versioned(address):
    managed = ctypes.cast(address, ctypes.POINTER(DLManagedTensorVersioned))
    VERSIONED_DELETER(managed.contents.deleter)(managed)


# Legacy wrappers alive until their consumer calls the deleter, by address.
legacy_wrappers = {}


@LEGACY_DELETER
def legacy_deleter(wrapper):
    address = ctypes.addressof(wrapper.contents)
    release_versioned(legacy_wrappers.pop(address).manager_ctx)


@CAPSULE_DESTRUCTOR
def drop_unconsumed(capsule):
    # A capsule nobody consumed still owns the export (DLPack's rule).
    if raw_is_valid(capsule, VERSIONED):
        release_versioned(raw_get_pointer(capsule, VERSIONED))
    elif raw_is_valid(capsule, LEGACY):
        wrapper = ctypes.cast(raw_get_pointer(capsule, LEGACY), ctypes.POINTER(DLManagedTensor))
        legacy_deleter(wrapper)


class Export:
    """Hands a consumer one export of our tensor through the __dlpack__ protocol: a versioned
    capsule when it asks for DLPack 1.x, else a legacy one wrapping it. `asked` records the
    max_version it asked for. An export nobody consumes is released with the object."""

    def __init__(self, handle):
        managed = P()
        ok(lib.dvm_tensor_to_dlpack(handle, ctypes.byref(managed)), "dvm_tensor_to_dlpack")
        self.managed = managed.value
        self.device = ctypes.cast(self.managed, ctypes.POINTER(DLManagedTensorVersioned)) \
            .contents.dl_tensor.device
        self.asked = None

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        # Our writes are synchronous: the data is ready for any stream the consumer names.
        self.asked = max_version
        managed, self.managed = self.managed, None
        if max_version is not None and max_version[0] >= 1:
            return api.PyCapsule_New(managed, VERSIONED, drop_unconsumed)
        versioned = ctypes.cast(managed, ctypes.POINTER(DLManagedTensorVersioned)).contents
        wrapper = DLManagedTensor()
        wrapper.dl_tensor = versioned.dl_tensor
        wrapper.manager_ctx = managed
        wrapper.deleter = ctypes.cast(legacy_deleter, P).value
        legacy_wrappers[ctypes.addressof(wrapper)] = wrapper
        return api.PyCapsule_New(ctypes.addressof(wrapper), LEGACY, drop_unconsumed)

    def __dlpack_device__(self):
        return (self.device.device_type, self.device.device_id)

    def __del__(self):
        if self.managed is not None:
            release_versioned(self.managed)
