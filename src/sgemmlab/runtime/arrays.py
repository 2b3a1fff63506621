"""Array interop: torch tensors, CuPy arrays, and anything with __dlpack__ or
__cuda_array_interface__, read without copies.

An `Operand` is what the API needs to know of an array: device pointer, shape, strides (in
elements), device, and which library it came from. torch tensors and CuPy arrays are read
directly (their attributes are cheaper than any protocol); everything else goes through
cuda.core's StridedMemoryView.

`matrix_layout` says how one matrix of an operand lies in memory, in the terms the kernels
take: row-major (A[m, k] at a + m*ld + k) or column-major (A[m, k] at a + k*ld + m), with
which leading dimension. Those two cover every transposed view; other strides are refused
with a `LayoutError` that says so.

`Matrix` and `as_matrix` are the older, row-major-only view (the benchmark's tests use it).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import LayoutError, OperandError
from . import driver, workspace


def library_of(obj: Any) -> str:
    mod = type(obj).__module__.split(".")[0]
    return mod if mod in ("torch", "cupy") else "other"


# -- operands --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Operand:
    obj: Any
    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # elements, never None
    device_id: int
    library: str  # "torch", "cupy" or "other"
    readonly: bool = False

    @property
    def empty(self) -> bool:
        return 0 in self.shape

    def span(self) -> tuple[int, int]:
        """[first byte, one past the last byte) the operand touches; (p, p) when empty."""
        if self.empty:
            return self.ptr, self.ptr
        last = sum((n - 1) * s for n, s in zip(self.shape, self.strides))
        return self.ptr, self.ptr + (last + 1) * 4

    def overlaps(self, other: "Operand") -> bool:
        (a0, a1), (b0, b1) = self.span(), other.span()
        return self.device_id == other.device_id and a0 < b1 and b0 < a1

    def same_array(self, other: "Operand") -> bool:
        """The same elements in the same places: an in-place update, not an overlap."""
        return (self.ptr, self.shape, self.strides, self.device_id) == (
            other.ptr, other.shape, other.strides, other.device_id)


def _shape_text(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, shape)) + ")"


def _check_dims(shape: tuple[int, ...], name: str) -> None:
    if len(shape) not in (2, 3):
        raise OperandError(f"{name}: expected a 2-D matrix or a 3-D batch of matrices, got "
                           f"shape {_shape_text(shape)}")


def torch_operand(t: Any, name: str, *, writable: bool = False) -> Operand:
    """A torch tensor, read from its attributes (no DLPack round trip). A view with torch's
    negative bit (`z.conj().imag`: its memory holds the values negated) is read through a
    resolved copy; one the product writes is refused (writing would store them unnegated).
    Tensors with no strided memory (sparse, nested, functorch's batched) are refused."""
    if str(t.dtype) != "torch.float32":
        raise OperandError(f"{name}: dtype is {t.dtype}, sgemmlab computes float32 only")
    if t.device.type != "cuda":
        raise OperandError(f"{name}: tensor is on {t.device}, not on a CUDA GPU")
    if str(t.layout) != "torch.strided" or t.is_nested:
        kind = "nested" if t.is_nested else str(t.layout).removeprefix("torch.")
        raise OperandError(f"{name}: a {kind} tensor; sgemmlab reads dense (strided) tensors "
                           "only (e.g. .to_dense())")
    if t.is_neg():
        if writable:
            raise OperandError(f"{name}: a view with torch's negative bit set (such as "
                               "z.conj().imag), which sgemmlab cannot write through; pass a "
                               "tensor without it")
        t = t.resolve_neg()  # a copy, on the current stream, which the launch follows
    shape = tuple(t.shape)
    _check_dims(shape, name)
    try:
        ptr = t.data_ptr()
    except RuntimeError as exc:  # no storage: a functorch batched tensor, a wrapper subclass
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise OperandError(f"{name}: torch gives no memory address for this tensor "
                           f"({first})") from None
    return Operand(t, ptr, shape, tuple(t.stride()), t.device.index, "torch")


def _cupy_operand(x: Any, name: str) -> Operand:
    if x.dtype != np.float32:
        raise OperandError(f"{name}: dtype is {x.dtype}, sgemmlab computes float32 only")
    shape = tuple(x.shape)
    _check_dims(shape, name)
    if any(s % 4 for s in x.strides):
        raise LayoutError(f"{name}: byte strides {x.strides} are not whole float32 elements")
    return Operand(x, int(x.data.ptr), shape, tuple(s // 4 for s in x.strides),
                   int(x.device.id), "cupy")


def as_operand(obj: Any, name: str, *, stream: int | None = None,
               writable: bool = False) -> Operand:
    """View `obj` as a float32 GPU matrix (2-D) or batch of matrices (3-D), or raise
    OperandError naming `name` and what is wrong. `writable`: the product writes it.

    `stream` is the handle of the stream the product will run on: arrays read through
    DLPack or __cuda_array_interface__ get it, and their producer orders its pending writes
    before that stream (the protocols' rule); None only inspects (no ordering). torch
    tensors and CuPy arrays are read from their attributes: their pending work is on their
    library's current stream, which the caller orders (`order_after`)."""
    lib = library_of(obj)
    if lib == "torch" and hasattr(obj, "data_ptr"):
        return torch_operand(obj, name, writable=writable)
    if lib == "cupy" and hasattr(obj, "data") and hasattr(obj, "strides"):
        return _cupy_operand(obj, name)
    if not (hasattr(obj, "__dlpack__") or hasattr(obj, "__cuda_array_interface__")):
        raise OperandError(
            f"{name}: {type(obj).__name__} is not a GPU array (expected a torch tensor, a "
            "CuPy array, or an object with __dlpack__ or __cuda_array_interface__)"
        )
    view = _view(obj, name, stream)
    if view.dtype != np.float32:
        raise OperandError(f"{name}: dtype is {view.dtype}, sgemmlab computes float32 only")
    if not view.on_device:
        raise OperandError(f"{name}: array is in host memory, not on a CUDA GPU")
    _check_dims(view.shape, name)
    strides = view.strides if view.strides is not None else contiguous_strides(view.shape)
    return Operand(obj, view.ptr, view.shape, strides, view.device_id, lib, view.readonly)


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return tuple(reversed(out))


# -- how a matrix lies in memory ---------------------------------------------------------------


def _round4(n: int) -> int:
    return -(-max(n, 1) // 4) * 4


def _free_ld(n: int) -> int:
    """The leading dimension of a matrix that never uses it (one row, or one column): a
    multiple of 4 keeps float4 legal, unless that passes the kernels' int32."""
    r = _round4(n)
    return r if r <= 2**31 - 1 else max(n, 1)


def matrix_layouts(rows: int, cols: int, s_row: int, s_col: int) -> list[tuple[bool, int]]:
    """Every (transposed, ld) the kernels can read this matrix with, row-major first.

    transposed=False: element (r, c) at r*ld + c (needs unit column stride, ld >= cols);
    transposed=True:  element (r, c) at c*ld + r (needs unit row stride, ld >= rows).
    A stride along a dimension of extent 1 is never used, so it does not matter; the ld of
    such a matrix is then free, and a multiple of 4 keeps the float4 variant legal."""
    found = []
    if cols <= 1 or s_col == 1:
        if rows <= 1:
            found.append((False, _free_ld(cols)))
        elif s_row >= max(cols, 1):
            found.append((False, s_row))
    if rows <= 1 or s_row == 1:
        if cols <= 1:
            found.append((True, _free_ld(rows)))
        elif s_col >= max(rows, 1):
            found.append((True, s_col))
    return found


def matrix_layout(op: Operand, name: str) -> list[tuple[bool, int]]:
    """matrix_layouts of the operand's matrices (the last two dimensions), or LayoutError."""
    rows, cols = op.shape[-2:]
    s_row, s_col = op.strides[-2:]
    if any(s < 0 for s in op.strides):
        raise LayoutError(f"{name}: strides {op.strides} (in elements) include a negative "
                          "one; make it contiguous first (e.g. .contiguous())")
    if op.empty:  # nothing is read or written: any strides will do
        return [(False, _free_ld(cols))]
    found = matrix_layouts(rows, cols, s_row, s_col)
    if not found:
        raise LayoutError(
            f"{name}: strides {op.strides} (in elements) of shape {_shape_text(op.shape)} are "
            "neither row-major (unit column stride, row stride >= columns) nor column-major "
            "(unit row stride, column stride >= rows); make it contiguous first "
            "(e.g. .contiguous())")
    return found


def batch_stride(op: Operand) -> int:
    """Elements from one matrix of a 3-D operand to the next; 0 for a 2-D operand or a batch
    of one (which the batch then broadcasts)."""
    if len(op.shape) == 2 or op.shape[0] == 1:
        return 0
    return op.strides[0]


def self_overlapping(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether two different indices may share an element. Dimensions sorted by stride must
    each step past everything the smaller ones span (a sufficient test, and exact for every
    permutation of a dense or padded array)."""
    if 0 in shape:
        return False
    dims = sorted((s, n) for n, s in zip(shape, strides) if n > 1)
    reach = 0  # elements spanned by the dimensions seen so far, minus one
    for s, n in dims:
        if s <= reach:
            return True
        reach += (n - 1) * s
    return False


# -- the older row-major matrix view -----------------------------------------------------------


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


def as_matrix(obj: Any, name: str) -> Matrix:
    """View `obj` as a row-major float32 GPU matrix, or raise OperandError naming `name`."""
    op = as_operand(obj, name)
    if len(op.shape) != 2:
        raise OperandError(f"{name}: expected a 2-D matrix, got shape {_shape_text(op.shape)}")
    rows, cols = op.shape
    row_major = [ld for transposed, ld in matrix_layout(op, name) if not transposed]
    if not row_major:
        raise LayoutError(
            f"{name}: strides {op.strides} (in elements) are not row-major with unit "
            f"column stride; make it contiguous first (e.g. .contiguous())"
        )
    ld = max(op.strides[0], cols, 1)
    return Matrix(obj, op.ptr, rows, cols, ld, op.device_id, op.library)


# -- protocols -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _View:
    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None  # elements; None: C-contiguous
    dtype: np.dtype
    device_id: int
    on_device: bool
    readonly: bool = False


def dlpack_stream(handle: int | None) -> int:
    """The consumer stream as the DLPack and CAI protocols write it: -1 asks for no
    ordering, 1 is the legacy default stream (DLPack reserves 0), anything else a handle."""
    if handle is None:
        return -1
    return 1 if handle == 0 else handle


def _view(obj: Any, name: str, stream: int | None = None) -> _View:
    """Pointer, shape, strides, dtype and device: cuda.core's StridedMemoryView (DLPack, or
    __cuda_array_interface__ v3), else a v2 interface read here (torch still exports v2).
    `stream` (a handle; None: no ordering) is the consumer stream the protocols order the
    producer's pending writes before."""
    from cuda.core.utils import StridedMemoryView

    make = getattr(StridedMemoryView, "from_any_interface", StridedMemoryView)
    try:
        v = make(obj, stream_ptr=dlpack_stream(stream))
    except Exception as exc:
        cai = getattr(obj, "__cuda_array_interface__", None)
        if not isinstance(cai, dict) or cai.get("version", 0) >= 3:
            raise OperandError(f"{name}: cannot be viewed as a GPU array ({exc})") from None
        return _view_cai_v2(cai, name)
    strides = tuple(v.strides) if v.strides is not None else None
    return _View(int(v.ptr), tuple(v.shape), strides, np.dtype(v.dtype), int(v.device_id),
                 bool(v.is_device_accessible), bool(getattr(v, "readonly", False)))


def _view_cai_v2(cai: dict, name: str) -> _View:
    dtype = np.dtype(cai["typestr"])
    ptr = int(cai["data"][0])
    strides = cai.get("strides")
    if strides is not None:
        if any(s % dtype.itemsize for s in strides):
            raise OperandError(f"{name}: byte strides {strides} are not whole elements")
        strides = tuple(s // dtype.itemsize for s in strides)
    device_id, on_device = 0, True
    if ptr:
        ordinal = driver.pointer_device(ptr)
        on_device = ordinal is not None
        device_id = ordinal or 0
    return _View(ptr, tuple(cai["shape"]), strides, dtype, device_id, on_device,
                 bool(cai["data"][1]))


# -- streams ---------------------------------------------------------------------------------


def current_stream_handle(obj: Any) -> int:
    """The caller's current stream for the array `obj`'s library: torch's (on the array's
    device), CuPy's, or the one a __cuda_array_interface__ names (else the legacy default
    stream, as DLPack producers assume)."""
    lib = library_of(obj)
    if lib == "torch":
        torch = sys.modules["torch"]
        return int(torch.cuda.current_stream(obj.device).cuda_stream)
    if lib == "cupy":
        cupy = sys.modules["cupy"]
        s = cupy.cuda.get_current_stream()
        handle = int(s.ptr)
        if handle not in _LONG_LIVED:
            _watch(s, handle)
        return handle
    cai = getattr(obj, "__cuda_array_interface__", None)
    if isinstance(cai, dict) and cai.get("stream"):
        return int(cai["stream"])
    return 0  # the legacy default stream, as DLPack producers assume


#: The legacy default stream (0, or CU_STREAM_LEGACY) and the per-thread one: never destroyed
_LONG_LIVED = (0, 1, 2)
_watched: dict[int, Any] = {}  # handle -> weak reference to the library's stream object


def _watch(owner: Any, handle: int) -> None:
    """When the library destroys its stream (CuPy does when the Stream object goes), forget
    what is kept for its handle: the stream's workspace (a later stream may get the same
    handle; a destroyed one must not be used)."""
    ref = _watched.get(handle)
    if ref is not None and ref() is owner:
        return
    import weakref

    try:
        _watched[handle] = weakref.ref(owner, lambda _ref, h=handle: stream_gone(h, _ref))
    except TypeError:  # an object without weak references: nothing to watch
        pass


def stream_gone(handle: int, ref: Any = None) -> None:
    """A stream was destroyed: its workspace goes (at the next allocation:
    runtime/workspace.py). This runs as a weak reference's callback, which may interrupt any
    code of this thread: no lock, no CUDA call, only notes."""
    if ref is not None and _watched.get(handle) is not ref:
        return  # the handle already belongs to a newer stream, watched in its own right
    _watched.pop(handle, None)
    workspace.stream_gone(handle)


def order_after(producer: int, consumer: int, device_id: int) -> None:
    """Make stream `consumer` wait for the work queued so far on stream `producer` (an event
    recorded on one, waited for by the other: what a DLPack producer does for its
    consumer). Used when an operand's library is not the one whose stream runs the call."""
    if producer == consumer:
        return
    from .device import device

    device(device_id)  # its primary context current in this thread
    try:
        driver.order_after(producer, consumer)
    except driver.DriverError as exc:
        raise RuntimeError(f"ordering stream {consumer:#x} after stream {producer:#x} "
                           f"failed: {exc}") from None


def stream_for(handle: int, device_id: int) -> driver.Stream:
    """The raw stream `handle` of device `device_id`, as launches and workspaces take it."""
    return driver.Stream(handle, device_id)
