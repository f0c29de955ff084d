"""The header every object of the library starts with (24 bytes), as a ctypes structure, for the
ctypes test scripts next to this file."""

import ctypes


class DVMObject(ctypes.Structure):
    _fields_ = [
        ("combined_ref_count", ctypes.c_uint64),
        ("type_index", ctypes.c_int32),
        ("padding", ctypes.c_uint32),
        ("deleter", ctypes.c_void_p),
    ]
