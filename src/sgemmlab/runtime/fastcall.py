"""The driver calls every launch makes, through ctypes: cuLaunchKernel, and
cuStreamIsCapturing for the launches that use a workspace.

cuda.bindings wraps each driver function in a layer that converts every argument through
Python objects, per call. A bound launch is one cuLaunchKernel on arguments packed once
(launch.Packed), and a product through the drop-in switch makes one or two on every call:
here the same driver function is called through a ctypes prototype on plain integers.
Where the driver library cannot be found this way (another platform), None is returned and
the callers keep cuda.bindings.

The library is the one the process has already loaded for cuda.bindings (by its soname,
through the system's loader path): nothing is loaded from a directory another user could
write.
"""

from __future__ import annotations

import ctypes
import sys

_lib: ctypes.CDLL | None | bool = None


def _libcuda() -> ctypes.CDLL | None:
    global _lib
    if _lib is None:
        _lib = False
        if sys.platform.startswith("linux"):
            try:
                _lib = ctypes.CDLL("libcuda.so.1")
            except OSError:
                pass
    return _lib or None


_launch = None


def launch_kernel():
    """cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra) -> CUresult
    as an int, on integer handles; or None."""
    global _launch
    if _launch is None:
        lib = _libcuda()
        if lib is None:
            return None
        f = lib.cuLaunchKernel
        f.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
        f.restype = ctypes.c_int
        _launch = f
    return _launch


def stream_is_capturing(handle: int):
    """A call that says whether stream `handle` is being captured into a CUDA graph (an
    error counts as not capturing, as the cuda.bindings probe it replaces did); or None."""
    lib = _libcuda()
    if lib is None:
        return None
    f = lib.cuStreamIsCapturing
    f.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    f.restype = ctypes.c_int
    active = 1  # CU_STREAM_CAPTURE_STATUS_ACTIVE
    c_int, byref = ctypes.c_int, ctypes.byref

    def probe() -> bool:
        status = c_int(0)  # one per call: threads may probe one stream at once
        return f(handle, byref(status)) == 0 and status.value == active

    return probe


def addresses() -> tuple[int, int] | None:
    """The addresses of cuLaunchKernel and cuStreamIsCapturing in that library, for the
    drop-in switch's native kernels (csrc/switch.cpp calls them through these); or None."""
    lib = _libcuda()
    if lib is None:
        return None
    return (ctypes.cast(lib.cuLaunchKernel, ctypes.c_void_p).value,
            ctypes.cast(lib.cuStreamIsCapturing, ctypes.c_void_p).value)
