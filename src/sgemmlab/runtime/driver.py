"""The CUDA driver as the runtime uses it: one door, through ctypes on the driver library.

Everything the library does on a GPU after a kernel is compiled goes through here: the
device's name and attributes, its primary context made current, a cubin loaded and its
kernel looked up, a kernel's occupancy and attributes, a workspace allocated, zeroed and
freed in stream order, one stream ordered after another, and the launch itself.

Why not cuda.core here (it compiles the kernels, runtime/compiler.py, and the lab uses it):
the first product a program makes pays for whatever the library imports, and on the H200's
host, after torch, importing cuda.bindings.driver took 14 to 21 ms and cuda.core 63 to
183 ms more (`sgemmlab firstcall`'s "libraries_ms", six runs:
results/nvidia-h200/host/firstcall-20261204T15*.json.xz and -20261204T16*), against a first
call's budget of 50 ms. And a launch through cuda.bindings converts every argument through Python
objects on each call: a bound launch here is one cuLaunchKernel on plain integers. The
driver's C interface is stable across versions (each function keeps its ABI; a changed
one gets a new, suffixed name, which is what is called here: cuEventDestroy_v2).

The library is the one the process has loaded or would load for any CUDA program
(libcuda.so.1 by its soname, through the system's loader path, as torch and cuda.bindings
load it; nvcuda.dll on Windows): nothing is loaded from a directory another user could
write. Where it cannot be loaded there is no usable GPU (`NoGPUError`, runtime/device.py).

Objects handed out: `Function` (a loaded kernel: `handle` is the CUfunction as an int),
`Buffer` (device memory: `handle` its address), `Stream` (a raw CUstream as an int, with
the device it belongs to). Handles are plain integers throughout.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from typing import Callable

_lib: ctypes.CDLL | None | bool = None
_protos: dict[str, Callable] = {}
_lock = threading.Lock()

c_int, c_uint, c_size_t, c_void_p, c_char_p = (ctypes.c_int, ctypes.c_uint, ctypes.c_size_t,
                                               ctypes.c_void_p, ctypes.c_char_p)
_P = ctypes.POINTER

#: The driver functions called here: name -> argument types (each returns a CUresult).
SIGNATURES: dict[str, list] = {
    "cuInit": [c_uint],
    "cuGetErrorName": [c_int, _P(c_char_p)],
    "cuDeviceGetCount": [_P(c_int)],
    "cuDeviceGet": [_P(c_int), c_int],
    "cuDeviceGetName": [c_char_p, c_int, c_int],
    "cuDeviceGetAttribute": [_P(c_int), c_int, c_int],
    "cuDevicePrimaryCtxRetain": [_P(c_void_p), c_int],
    "cuCtxGetCurrent": [_P(c_void_p)],
    "cuCtxSetCurrent": [c_void_p],
    "cuCtxSynchronize": [],
    "cuModuleLoadData": [_P(c_void_p), c_void_p],
    "cuModuleGetFunction": [_P(c_void_p), c_void_p, c_char_p],
    "cuFuncGetAttribute": [_P(c_int), c_int, c_void_p],
    "cuFuncSetAttribute": [c_void_p, c_int, c_int],
    "cuOccupancyMaxActiveBlocksPerMultiprocessor": [_P(c_int), c_void_p, c_int, c_size_t],
    "cuMemAllocAsync": [_P(c_void_p), c_size_t, c_void_p],
    "cuMemsetD8Async": [c_void_p, ctypes.c_ubyte, c_size_t, c_void_p],
    "cuMemFreeAsync": [c_void_p, c_void_p],
    "cuEventCreate": [_P(c_void_p), c_uint],
    "cuEventRecord": [c_void_p, c_void_p],
    "cuStreamWaitEvent": [c_void_p, c_void_p, c_uint],
    "cuEventDestroy_v2": [c_void_p],
    "cuPointerGetAttribute": [c_void_p, c_int, c_void_p],
    "cuStreamIsCapturing": [c_void_p, _P(c_int)],
    "cuLaunchKernel": [c_void_p] + [c_uint] * 7 + [c_void_p] * 3,
    "cuLaunchKernelEx": [c_void_p, c_void_p, c_void_p, c_void_p],
}

# The enumerators used (cuda.h; tests/test_driver.py checks them against cuda.bindings')
ATTR_MULTIPROCESSOR_COUNT = 16
ATTR_L2_CACHE_SIZE = 38
ATTR_CC_MAJOR = 75
ATTR_CC_MINOR = 76
ATTR_MAX_SMEM_PER_BLOCK_OPTIN = 97
FUNC_ATTRIBUTES = {"MAX_THREADS_PER_BLOCK": 0, "SHARED_SIZE_BYTES": 1, "CONST_SIZE_BYTES": 2,
                   "LOCAL_SIZE_BYTES": 3, "NUM_REGS": 4, "MAX_DYNAMIC_SHARED_SIZE_BYTES": 8}
POINTER_DEVICE_ORDINAL = 9
LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6
EVENT_DISABLE_TIMING = 2
CAPTURE_ACTIVE = 1
SUCCESS = 0
#: Above this much dynamic shared memory a kernel must opt in (cuFuncSetAttribute).
DEFAULT_DYNAMIC_SMEM = 48 * 1024


class DriverError(RuntimeError):
    """A driver call failed: the message names the call and the driver's error."""

    def __init__(self, what: str, err: int):
        super().__init__(f"{what} failed: {error_name(err)}")
        self.code = err


def library() -> ctypes.CDLL | None:
    """The driver library, or None where it cannot be loaded (no driver installed)."""
    global _lib
    if _lib is None:
        with _lock:
            if _lib is None:
                name = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
                try:
                    _lib = ctypes.CDLL(name)
                except OSError:
                    _lib = False
    return _lib or None


def fn(name: str) -> Callable:
    """The driver function `name` with its prototype (SIGNATURES), looked up once. Raises
    OSError when there is no driver library."""
    f = _protos.get(name)
    if f is None:
        lib = library()
        if lib is None:
            raise OSError("no CUDA driver library")
        f = getattr(lib, name)
        f.argtypes, f.restype = SIGNATURES[name], c_int
        _protos[name] = f
    return f


def call(name: str, *args, what: str | None = None) -> None:
    """Call the driver function `name`; DriverError (naming `what`, or the call) on failure."""
    err = fn(name)(*args)
    if err != SUCCESS:
        raise DriverError(what or name, err)


def error_name(err: int) -> str:
    """The driver's name for a CUresult, e.g. 'CUDA_ERROR_INVALID_VALUE' (else the number)."""
    text = c_char_p()
    try:
        if fn("cuGetErrorName")(int(err), ctypes.byref(text)) == SUCCESS and text.value:
            return f"{text.value.decode()} ({int(err)})"
    except (OSError, TypeError, ValueError):
        pass
    return f"CUresult {err!r}"


# -- devices and contexts ------------------------------------------------------------------

_initialised = False
_primary: dict[int, int] = {}  # device ordinal -> its primary context (retained once)


def init() -> None:
    """cuInit, once per process."""
    global _initialised
    if not _initialised:
        call("cuInit", 0)
        _initialised = True


def device_count() -> int:
    init()
    n = c_int()
    call("cuDeviceGetCount", ctypes.byref(n))
    return n.value


def _ordinal(index: int) -> int:
    init()
    dev = c_int()
    call("cuDeviceGet", ctypes.byref(dev), int(index), what=f"cuDeviceGet({index})")
    return dev.value


def name(index: int) -> str:
    buf = ctypes.create_string_buffer(256)
    call("cuDeviceGetName", buf, 256, _ordinal(index))
    return buf.value.decode(errors="replace")


def attribute(index: int, which: int) -> int:
    v = c_int()
    call("cuDeviceGetAttribute", ctypes.byref(v), which, _ordinal(index),
         what=f"cuDeviceGetAttribute({which})")
    return v.value


def make_current(index: int) -> None:
    """Make device `index`'s primary context (torch's and CuPy's) current in this thread."""
    ctx = _primary.get(index)
    if ctx is None:
        with _lock:
            ctx = _primary.get(index)
            if ctx is None:
                handle = c_void_p()
                call("cuDevicePrimaryCtxRetain", ctypes.byref(handle), _ordinal(index))
                ctx = _primary[index] = handle.value
    cur = c_void_p()
    call("cuCtxGetCurrent", ctypes.byref(cur))
    if cur.value != ctx:
        call("cuCtxSetCurrent", c_void_p(ctx))


def synchronize(index: int) -> None:
    """Wait for all work queued on device `index` (its primary context)."""
    make_current(index)
    call("cuCtxSynchronize")


# -- streams and memory ------------------------------------------------------------------------


class Stream:
    """A raw CUstream (an int; 0 is the legacy default stream) of device `device_id`."""

    __slots__ = ("handle", "device_id")

    def __init__(self, handle: int, device_id: int = 0):
        self.handle, self.device_id = int(handle), int(device_id)

    def __repr__(self) -> str:
        return f"Stream({self.handle:#x}, device {self.device_id})"


#: The legacy default stream: never destroyed, so buffers are freed on it.
LEGACY = Stream(0)


class Buffer:
    """`size` bytes of device memory at `handle`, allocated in stream order (cuMemAllocAsync,
    from the device's default pool) and freed in stream order on the stream `close` names
    (else the one set_deallocation_stream named, else the one it was allocated on)."""

    __slots__ = ("handle", "size", "device_id", "_free_on")

    def __init__(self, handle: int, size: int, device_id: int, stream: Stream):
        self.handle, self.size, self.device_id, self._free_on = handle, size, device_id, stream

    def fill(self, value: int, *, stream: Stream) -> None:
        call("cuMemsetD8Async", c_void_p(self.handle), value, self.size, c_void_p(stream.handle))

    def set_deallocation_stream(self, stream: Stream) -> None:
        self._free_on = stream

    def close(self, stream: Stream | None = None) -> None:
        if self.handle:
            make_current(self.device_id)
            s = stream if stream is not None else self._free_on
            call("cuMemFreeAsync", c_void_p(self.handle), c_void_p(s.handle))
            self.handle = 0


def allocate(index: int, size: int, stream: Stream) -> Buffer:
    make_current(index)
    ptr = c_void_p()
    call("cuMemAllocAsync", ctypes.byref(ptr), int(size), c_void_p(stream.handle),
         what=f"cuMemAllocAsync({size} bytes)")
    return Buffer(int(ptr.value or 0), int(size), index, stream)


def order_after(producer: int, consumer: int) -> None:
    """Stream `consumer` waits for the work queued so far on stream `producer` (an event
    recorded on one, waited for by the other; the current context must be theirs)."""
    ev = c_void_p()
    call("cuEventCreate", ctypes.byref(ev), EVENT_DISABLE_TIMING)
    try:
        call("cuEventRecord", ev, c_void_p(producer))
        call("cuStreamWaitEvent", c_void_p(consumer), ev, 0)
    finally:
        fn("cuEventDestroy_v2")(ev)  # released once the wait has passed it


def pointer_device(ptr: int) -> int | None:
    """The ordinal of the device that holds address `ptr`, or None when no device does."""
    try:
        init()
        v = c_int()
        err = fn("cuPointerGetAttribute")(ctypes.byref(v), POINTER_DEVICE_ORDINAL,
                                          c_void_p(ptr))
    except (OSError, DriverError):
        return None
    return v.value if err == SUCCESS else None


# -- modules and kernels -------------------------------------------------------------------------


class Function:
    """One extern "C" kernel of a loaded cubin: `handle` is its CUfunction (an int), what
    runtime/packed.Packed launches."""

    __slots__ = ("handle", "name", "module", "dynamic_smem")

    def __init__(self, handle: int, name: str, module: "Module", dynamic_smem: int = 0):
        self.handle, self.name, self.module, self.dynamic_smem = (
            handle, name, module, dynamic_smem)

    def attribute(self, which: str) -> int:
        """A CU_FUNC_ATTRIBUTE_* of the kernel, e.g. 'NUM_REGS'."""
        v = c_int()
        call("cuFuncGetAttribute", ctypes.byref(v), FUNC_ATTRIBUTES[which],
             c_void_p(self.handle), what=f"cuFuncGetAttribute({self.name}, {which})")
        return v.value

    def max_active_blocks(self, threads: int, dynamic_smem: int = 0) -> int:
        """Blocks of `threads` that fit on one SM at once (the driver's occupancy query)."""
        v = c_int()
        call("cuOccupancyMaxActiveBlocksPerMultiprocessor", ctypes.byref(v),
             c_void_p(self.handle), int(threads), int(dynamic_smem))
        return v.value


class Module:
    """A cubin loaded into the current context (cuModuleLoadData; kept loaded)."""

    __slots__ = ("handle", "_image")

    def __init__(self, cubin: bytes):
        self._image = bytes(cubin)  # the driver reads it during the call only; kept anyway
        handle = c_void_p()
        call("cuModuleLoadData", ctypes.byref(handle), self._image)
        self.handle = handle.value

    def function(self, name: str, dynamic_smem: int = 0) -> Function:
        """The kernel `name`, opted in to `dynamic_smem` bytes of dynamic shared memory
        where that is above the default limit."""
        f = c_void_p()
        call("cuModuleGetFunction", ctypes.byref(f), c_void_p(self.handle), name.encode(),
             what=f"cuModuleGetFunction({name})")
        out = Function(f.value, name, self, dynamic_smem)
        if dynamic_smem > DEFAULT_DYNAMIC_SMEM:
            call("cuFuncSetAttribute", c_void_p(out.handle),
                 FUNC_ATTRIBUTES["MAX_DYNAMIC_SHARED_SIZE_BYTES"], int(dynamic_smem),
                 what=f"cuFuncSetAttribute({name}, max dynamic shared = {dynamic_smem})")
        return out


def load(cubin: bytes, entry: str, device_id: int = 0, dynamic_smem: int = 0) -> Function:
    """Kernel `entry` of `cubin`, loaded into device `device_id`'s primary context."""
    make_current(device_id)
    return Module(cubin).function(entry, dynamic_smem)


# -- the calls every launch makes ----------------------------------------------------------------


def launch_kernel() -> Callable | None:
    """cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra) -> CUresult
    as an int, on integer handles; None without a driver library."""
    try:
        return fn("cuLaunchKernel")
    except OSError:
        return None


class LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute (cuda.h): an id, padded to 8 bytes, and a 64-byte value."""

    _fields_ = [("id", c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_char * 64)]


class LaunchConfig(ctypes.Structure):
    """CUlaunchConfig (cuda.h): grid, block, dynamic shared memory, stream, attributes."""

    _fields_ = [("grid", c_uint * 3), ("block", c_uint * 3), ("shared", c_uint),
                ("stream", c_void_p), ("attrs", _P(LaunchAttribute)), ("count", c_uint)]


def overlapped_config(grid, block, shared: int, stream: int) -> tuple[LaunchConfig, object]:
    """A launch configuration with programmatic stream serialization: the kernel may start
    while the one before it in the stream finishes, and waits for it (its
    `griddepcontrol.wait`, hopper/entry.cuh's griddep_wait) before it reads or writes
    anything. (config, its attribute, to keep alive with it)"""
    attr = LaunchAttribute()
    attr.id = LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    ctypes.memmove(ctypes.addressof(attr) + LaunchAttribute.value.offset,
                   ctypes.byref(c_int(1)), ctypes.sizeof(c_int))
    config = LaunchConfig((c_uint * 3)(*grid), (c_uint * 3)(*block), shared, stream,
                          ctypes.pointer(attr), 1)
    return config, attr


def launch_kernel_ex() -> Callable | None:
    """cuLaunchKernelEx(config, f, params, extra) -> CUresult as an int; None without a
    driver library."""
    try:
        return fn("cuLaunchKernelEx")
    except (OSError, AttributeError):
        return None


def stream_is_capturing(handle: int) -> Callable[[], bool] | None:
    """A call that says whether stream `handle` is being captured into a CUDA graph (an
    error counts as not capturing); None without a driver library."""
    try:
        f = fn("cuStreamIsCapturing")
    except OSError:
        return None
    c, byref = c_int, ctypes.byref

    def probe() -> bool:
        status = c(0)  # one per call: threads may probe one stream at once
        return f(handle, byref(status)) == SUCCESS and status.value == CAPTURE_ACTIVE

    return probe


def addresses() -> tuple[int, int] | None:
    """The addresses of cuLaunchKernel and cuStreamIsCapturing in the driver library, for the
    drop-in switch's native kernels (csrc/switch.cpp calls them through these); or None."""
    lib = library()
    if lib is None:
        return None
    return (ctypes.cast(lib.cuLaunchKernel, c_void_p).value,
            ctypes.cast(lib.cuStreamIsCapturing, c_void_p).value)
