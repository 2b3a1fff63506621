"""Array interop: torch tensors, CuPy arrays, and anything with __dlpack__ or
__cuda_array_interface__, seen through cuda.core's StridedMemoryView (no copies).

A `Matrix` is what a kernel needs to know of an operand: device pointer, shape, row stride
(the leading dimension, in elements), and which library and stream it came from.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np


class OperandError(ValueError):
    """An operand sgemmlab cannot use as it is; the message names the problem."""


@dataclass(frozen=True)
class Matrix:
    obj: Any
    ptr: int
    rows: int
    cols: int
    ld: int  # elements from one row to the next
    device_id: int
    library: str  # "torch", "cupy" or "other"

    @property
    def nbytes_span(self) -> int:
        """Bytes from the first element to one past the last."""
        if self.rows == 0 or self.cols == 0:
            return 0
        return ((self.rows - 1) * self.ld + self.cols) * 4

    def overlaps(self, other: "Matrix") -> bool:
        a0, a1 = self.ptr, self.ptr + self.nbytes_span
        b0, b1 = other.ptr, other.ptr + other.nbytes_span
        return self.device_id == other.device_id and a0 < b1 and b0 < a1


def library_of(obj: Any) -> str:
    mod = type(obj).__module__.split(".")[0]
    return mod if mod in ("torch", "cupy") else "other"


def as_matrix(obj: Any, name: str) -> Matrix:
    """View `obj` as a row-major float32 GPU matrix, or raise OperandError naming `name`."""
    if not (hasattr(obj, "__dlpack__") or hasattr(obj, "__cuda_array_interface__")):
        raise OperandError(
            f"{name}: {type(obj).__name__} is not a GPU array (expected a torch tensor, a "
            "CuPy array, or an object with __dlpack__ or __cuda_array_interface__)"
        )
    lib = library_of(obj)
    if lib == "torch":
        if str(obj.dtype) != "torch.float32":
            raise OperandError(f"{name}: dtype is {obj.dtype}, sgemmlab computes float32 only")
        if obj.device.type != "cuda":
            raise OperandError(f"{name}: tensor is on {obj.device}, not on a CUDA GPU")
    view = _view(obj, name)
    if view.dtype != np.float32:
        raise OperandError(f"{name}: dtype is {view.dtype}, sgemmlab computes float32 only")
    if not view.on_device:
        raise OperandError(f"{name}: array is in host memory, not on a CUDA GPU")
    shape = view.shape
    if len(shape) != 2:
        raise OperandError(f"{name}: expected a 2-D matrix, got shape {shape}")
    rows, cols = shape
    strides = view.strides or (cols, 1)  # None means C-contiguous
    if cols > 1 and strides[1] != 1 or rows > 1 and strides[0] < cols:
        raise OperandError(
            f"{name}: strides {tuple(strides)} (in elements) are not row-major with unit "
            f"column stride; make it contiguous first (e.g. .contiguous())"
        )
    ld = max(int(strides[0]), cols, 1)
    return Matrix(obj, view.ptr, rows, cols, ld, view.device_id, lib)


@dataclass(frozen=True)
class _View:
    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None  # elements; None: C-contiguous
    dtype: np.dtype
    device_id: int
    on_device: bool


def _view(obj: Any, name: str) -> _View:
    """Pointer, shape, strides, dtype and device: cuda.core's StridedMemoryView (DLPack, or
    __cuda_array_interface__ v3), else a v2 interface read here (torch still exports v2)."""
    from cuda.core.utils import StridedMemoryView

    make = getattr(StridedMemoryView, "from_any_interface", StridedMemoryView)
    try:
        v = make(obj, stream_ptr=-1)
    except Exception as exc:
        cai = getattr(obj, "__cuda_array_interface__", None)
        if not isinstance(cai, dict) or cai.get("version", 0) >= 3:
            raise OperandError(f"{name}: cannot be viewed as a GPU array ({exc})") from None
        return _view_cai_v2(cai, name)
    strides = tuple(v.strides) if v.strides is not None else None
    return _View(int(v.ptr), tuple(v.shape), strides, np.dtype(v.dtype), int(v.device_id),
                 bool(v.is_device_accessible))


def _view_cai_v2(cai: dict, name: str) -> _View:
    from cuda.bindings import driver

    dtype = np.dtype(cai["typestr"])
    ptr = int(cai["data"][0])
    strides = cai.get("strides")
    if strides is not None:
        if any(s % dtype.itemsize for s in strides):
            raise OperandError(f"{name}: byte strides {strides} are not whole elements")
        strides = tuple(s // dtype.itemsize for s in strides)
    device_id, on_device = 0, True
    if ptr:
        err, ordinal = driver.cuPointerGetAttribute(
            driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
        on_device = err == driver.CUresult.CUDA_SUCCESS
        device_id = int(ordinal) if on_device else 0
    return _View(ptr, tuple(cai["shape"]), strides, dtype, device_id, on_device)


class _StreamHandle:
    """Hands a raw CUDA stream handle to cuda.core through the __cuda_stream__ protocol."""

    def __init__(self, handle: int):
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


def current_stream_handle(m: Matrix) -> int:
    """The caller's current stream for `m`'s library: torch's, CuPy's, or the CAI's."""
    if m.library == "torch":
        torch = sys.modules["torch"]
        return int(torch.cuda.current_stream(m.obj.device).cuda_stream)
    if m.library == "cupy":
        cupy = sys.modules["cupy"]
        return int(cupy.cuda.get_current_stream().ptr)
    cai = getattr(m.obj, "__cuda_array_interface__", None)
    if isinstance(cai, dict) and cai.get("stream"):
        return int(cai["stream"])
    return 0  # the legacy default stream, as DLPack producers assume


@cache
def stream_for(handle: int, device_id: int):
    """A cuda.core Stream wrapping an existing handle (cached: wrapping costs microseconds)."""
    from .device import device

    return device(device_id).create_stream(_StreamHandle(handle))
