"""The two call paths of a product: the general one (any array library) and the torch hot
path. `sgemmlab.api` (sgemm, matmul) and `torch.ops.sgemmlab.matmul` both call these.

A call flows down, each step once: operands -> `normalise` (one `Call`: every array read and
checked once, on the stream the call runs on) -> `plan.describe` (a problem in the kernels'
terms) -> a cached `plan.Plan` (the dispatcher's choice) -> a bound launch -> the runtime.
For two plain torch tensors `hot` reads them directly (no protocol objects at all) and only
looks up what an earlier call checked; anything new goes through `general`, which
normalises and plans it and fills the hot path's caches.

sgemmlab never imports torch first: `TORCH.find()` picks it up once the caller has.
"""

from __future__ import annotations

import math
import numbers
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .errors import OperandError
from .plan import PLANS, Plan, describe, dims, make_plan, product_shape
from .registry import config_key
from .runtime import arrays
from .runtime.arrays import Operand, as_operand, current_stream_handle
from .runtime.device import device

FLT_MAX = float(np.finfo(np.float32).max)


# ---------------------------------------------------------------------------------------
# Scalars and devices
# ---------------------------------------------------------------------------------------
def scalar(name: str, v) -> float:
    """alpha or beta as the float32 value the kernels see. Real numbers only: Python int and
    float, NumPy's real scalars and 0-d arrays, 0-d real tensors; not bool, str, bytes,
    Decimal or complex (a TypeError naming it). Refused with ValueError: NaN and infinity
    (BLAS leaves their meaning open), and a value that float32 cannot hold — beyond
    ±3.4e38 (OverflowError), or non-zero and so small that it rounds to 0 (a beta that
    became 0 would mean "C is never read")."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
        v = _zero_dim(name, v)
    try:
        f = float(v)
    except OverflowError:  # an int past float64's range
        text = str(v)
        raise OverflowError(f"{name} = {text[:12]}... ({len(text)} digits) overflows "
                            "float32 (the kernels' type: at most 3.4e38)") from None
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {v!r}") from None
    if not math.isfinite(f):
        raise ValueError(f"{name} must be finite, got {f}")
    if abs(f) > FLT_MAX:
        raise OverflowError(f"{name} = {f:g} overflows float32 (the kernels' type: at most "
                            "3.4e38)")
    f32 = float(np.float32(f))
    if f32 == 0 and f != 0:
        raise ValueError(f"{name} = {f:g} is non-zero but rounds to 0 in float32 (the "
                         "kernels' type); pass 0, or a value of at least 1.4e-45")
    return f32


def _zero_dim(name: str, v):
    """A 0-d real array (NumPy, torch, CuPy: anything with .ndim, .dtype and .item()) as its
    Python number; anything else is refused with a TypeError naming it."""
    dtype = getattr(v, "dtype", None)
    kind = getattr(np.dtype(dtype), "kind", None) if _numpy_dtype(dtype) else None
    is_real_tensor = getattr(v, "ndim", None) == 0 and (
        kind in ("i", "u", "f") or str(dtype) in _REAL_TORCH_DTYPES)
    if not is_real_tensor:
        raise TypeError(f"{name} must be a real number, got {v!r} ({type(v).__name__}; "
                        "accepted: int, float, NumPy real scalars, 0-d real arrays)")
    return v.item()


def _numpy_dtype(dtype) -> bool:
    try:
        np.dtype(dtype)
        return True
    except TypeError:
        return False


_REAL_TORCH_DTYPES = frozenset(f"torch.{t}" for t in (
    "float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
    "uint16", "uint32", "uint64"))


def scalars(alpha, beta) -> tuple[float, float]:
    """alpha and beta as the float32 values the kernels see (`scalar`)."""
    return scalar("alpha", alpha), scalar("beta", beta)


def flag(name: str, v) -> bool:
    """A yes/no option (deterministic): a bool, never a string or a number that would count
    as one."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    raise TypeError(f"{name} must be True or False, got {v!r}")


_tls = threading.local()


def make_current(device_id: int) -> None:
    """The kernels launch into the calling thread's current CUDA context: make it the
    device's primary context (the one torch and CuPy use too)."""
    device(device_id)
    _tls.device = device_id


# ---------------------------------------------------------------------------------------
# torch, once the caller has imported it
# ---------------------------------------------------------------------------------------
class TorchGlue:
    """What the hot path needs of torch, looked up once: the module, the plain tensor
    types, and torch's private fast calls for the current stream and device."""

    def __init__(self):
        self.module = None
        self.Tensor: type | None = None
        self.plain: frozenset = frozenset()  # torch.Tensor, torch.nn.Parameter
        self.raw_stream: Callable[[int], int] | None = None
        self.cur_device: Callable[[], int] | None = None
        self.increment_version: Callable[[tuple], None] | None = None
        self.is_compiling: Callable[[], bool] = lambda: False

    def find(self):
        """torch if the caller imported it (sgemmlab never imports it first), else None."""
        torch = sys.modules.get("torch")  # None also where an import of it failed
        if self.module is None and torch is not None:
            C = torch._C
            self.raw_stream = getattr(C, "_cuda_getCurrentRawStream", None) or (
                lambda i: torch.cuda.current_stream(i).cuda_stream)
            self.cur_device = getattr(C, "_cuda_getDevice", None) or torch.cuda.current_device
            # torch's own call under torch.autograd.graph.increment_version: it takes a
            # tuple, and leaves inference tensors (which have no version counter) alone
            self.increment_version = getattr(C, "_increment_version", None) or getattr(
                torch.autograd.graph, "increment_version", None)
            self.is_compiling = torch.compiler.is_compiling
            self.plain = frozenset({torch.Tensor, torch.nn.Parameter})
            self.Tensor = torch.Tensor
            self.module = torch
        return self.module

    def device_ready(self, dev: int) -> int | None:
        """Make `dev` current for a launch on torch tensors; returns the device to switch
        back to afterwards (torch code expects its current device unchanged), or None."""
        prev = self.cur_device()
        if prev == dev and getattr(_tls, "device", -1) == dev:
            return None
        make_current(dev)
        return prev if prev != dev else None

    @staticmethod
    def restore(prev: int | None) -> None:
        if prev is not None:
            make_current(prev)

    def bump_version(self, x) -> None:
        """Tell autograd that `x` changed in place (a tensor saved for backward then errors
        instead of silently giving wrong gradients)."""
        if self.increment_version is not None:
            self.increment_version((x,))

    def autograd_guard(self, a, b, c, out, beta: float) -> None:
        """sgemm writes through raw pointers, which autograd cannot see: refuse rather than
        return a result whose gradient would silently be missing."""
        if self.Tensor is None or not self.module.is_grad_enabled():
            return
        c_used = beta != 0 or out is None  # read, or written (the result goes into c)
        for name, x in (("a", a), ("b", b), ("c", c if c_used else None), ("out", out)):
            if isinstance(x, self.Tensor) and x.requires_grad:
                raise ValueError(f"{name} requires grad, and sgemm records no autograd graph: "
                                 "use sgemmlab.matmul (differentiable), or call it under "
                                 "torch.no_grad()")


TORCH = TorchGlue()


def fast_key(a, b, deterministic, precision) -> tuple:
    """The hot path's key for a @ b into a new tensor: what its plan depends on (shapes,
    strides, dtypes, devices, whether both pointers are 16-byte aligned, the options)."""
    return (a.shape, a.stride(), b.shape, b.stride(), a.dtype, b.dtype, a.get_device(),
            b.get_device(), (a.data_ptr() | b.data_ptr()) & 15 == 0, deterministic, precision)


def out_key(a, b, out, deterministic, precision, dev: int) -> tuple:
    """The hot path's key for a @ b into `out`: these very pointers on the current stream of
    a's device `dev` (a.get_device(), which the caller has read), and everything the checks
    of the bound launch read."""
    return (a.data_ptr(), b.data_ptr(), out.data_ptr(), TORCH.raw_stream(dev), a.shape,
            a.stride(), b.shape, b.stride(), out.shape, out.stride(), a.dtype, b.dtype,
            out.dtype, dev, b.get_device(), out.get_device(), deterministic, precision)


def hot(a, b, out, deterministic, precision):
    """a @ b for two plain torch tensors (and `out`, plain too), or None when no earlier
    call checked these: the first thing `matmul` tries. Only lookups: an entry exists only
    where the general path checked the same key (the caller has checked the types and that
    autograd need not see the product). Keys hold the options as passed, so a value the
    general path would normalize or refuse finds nothing here and goes there."""
    dev = a.get_device()
    if dev < 0 or a.is_neg() or b.is_neg() or out is not None and out.is_neg():
        return None  # the general path reads a negative view through a resolved copy
    t = TORCH
    try:
        key = (fast_key(a, b, deterministic, precision) if out is None else
               out_key(a, b, out, deterministic, precision, dev))
        found = (PLANS.fast if out is None else PLANS.hot).get(key)
    except (TypeError, RuntimeError):  # an unhashable option, a tensor without strides or
        return None  # memory (sparse, nested): the general path names the problem
    if found is None:
        return None
    if out is None:
        plan = found
        out = a.new_empty(plan.out_shape)
        if plan.kind == "gemm":
            dev = plan.device_id
            prev = t.device_ready(dev)
            plan.launch(a.data_ptr(), b.data_ptr(), out.data_ptr(), t.raw_stream(dev), 1.0,
                        0.0)
            t.restore(prev)
        elif plan.kind == "scale":
            out.zero_()
        return out
    prev = t.device_ready(dev)
    found()
    t.restore(prev)
    t.bump_version(out)
    return out


def torch_product(a, b, deterministic: bool = False, out=None, precision: str = "ieee"):
    """a @ b for plain torch tensors (into `out`, or a new tensor): torch.ops.sgemmlab.matmul's
    path. `hot` serves what an earlier call checked (its keys hold dtypes and devices, so
    anything else misses there); anything new goes through the general path, which checks
    it all and fills the caches."""
    r = hot(a, b, out, deterministic, precision)
    if r is not None:
        return r
    return general(a, b, None, 1.0, 0.0, out, None, None, deterministic, fast=True,
                   precision=precision)


# ---------------------------------------------------------------------------------------
# Outputs, copies and scaling in the caller's library
# ---------------------------------------------------------------------------------------
def new_output(like: Operand, shape: tuple[int, ...]):
    if like.library == "torch":
        torch = TORCH.module
        return torch.empty(shape, dtype=torch.float32, device=like.obj.device)
    if like.library == "cupy":
        cupy = sys.modules["cupy"]
        with cupy.cuda.Device(like.device_id):
            return cupy.empty(shape, dtype=cupy.float32)
    raise OperandError("pass `out` (or `c`) when the operands are neither torch nor CuPy "
                       "arrays: sgemmlab cannot make a new array of their type")


def _copy_into(dst: Operand, src: Operand) -> None:
    """dst = src, on the caller's current stream (the one the launch follows)."""
    if dst.library == "torch":
        s = src.obj if src.library == "torch" else TORCH.module.as_tensor(
            src.obj, device=dst.obj.device)
        dst.obj.copy_(s)
    elif dst.library == "cupy":
        dst.obj[...] = sys.modules["cupy"].asarray(src.obj)
    else:
        try:
            dst.obj[...] = src.obj
        except Exception:
            raise OperandError("out: copying c into it (beta != 0, out is not c) needs "
                               "torch or CuPy arrays; pass out=c to update c in place") from None


def _scale(dst: Operand, beta: float) -> None:
    """K == 0 or alpha == 0: C = beta C (zeros when beta == 0: C is not read then)."""
    x = dst.obj
    try:
        if beta == 0:
            x[...] = 0
        elif beta != 1:
            x[...] = x * beta
    except Exception:
        raise OperandError("out: K == 0 or alpha == 0 leaves out = beta*c, which needs "
                           "torch or CuPy arrays to compute") from None


# ---------------------------------------------------------------------------------------
# The general path
# ---------------------------------------------------------------------------------------
def check_target(C: Operand, name: str, A: Operand, B: Operand) -> None:
    """What every path checks of the array a product is written to, besides its shape and
    strides (`describe`): the operands' GPU, writable, no overlap with an input."""
    if C.device_id != A.device_id:
        raise ValueError(f"{name} is on GPU {C.device_id}, the operands on GPU {A.device_id}")
    if C.readonly:
        raise OperandError(f"{name}: the array is read-only")
    for other, m in (("a", A), ("b", B)):
        if C.overlaps(m):
            raise ValueError(f"{name} overlaps {other}: the kernels read {other} while writing "
                             f"{name}")


def launch_stream(a, target) -> tuple[str, int]:
    """(library, stream handle) of the stream a call runs on: the current stream of the
    library of `target` (out, or c), when it is torch's or CuPy's; else of a's library (a
    new output is of a's library); else the stream a's __cuda_array_interface__ names, else
    the legacy default stream."""
    lead = target if target is not None and arrays.library_of(target) != "other" else a
    return arrays.library_of(lead), current_stream_handle(lead)


def _order_operands(ops: list[Operand], lead_library: str, handle: int) -> None:
    """torch and CuPy operands are read from their attributes, so the DLPack producer's
    duty is ours: one of another library than the call's stream follows its own library's
    current stream (an event, as a DLPack producer would record)."""
    for op in ops:
        if op.library in ("torch", "cupy") and op.library != lead_library:
            arrays.order_after(current_stream_handle(op.obj), handle, op.device_id)


@dataclass(slots=True)
class Call:
    """One call, normalised once: its arrays read (runtime.arrays.Operand: pointer, shape,
    strides, dtype and device, each checked as it was read) on the stream it runs on, checked
    against each other, and its options. The plan's key and the launch read it; nothing
    reads the caller's arrays again."""

    A: Operand
    B: Operand
    Cin: Operand | None  # c (read where beta != 0)
    ops: dict[str, Operand]  # every array passed, by its name
    given: Any  # the array written, when the caller gave one (out, else c)
    name: str  # "out" or "c": what messages call the output
    out_shape: tuple[int, ...]
    lead: str  # the library whose current stream the call runs on ...
    handle: int  # ... and that stream
    kernel: Any
    config: Any
    deterministic: bool
    precision: str

    @property
    def options(self) -> tuple:
        """The plan key's options: what a plan depends on besides the geometry."""
        return (self.kernel, config_key(self.config) if self.config is not None else None,
                self.deterministic, self.precision)

    def plan(self, c_geometry: tuple, aligned: bool) -> Plan:
        """The cached plan of this call with C of `c_geometry` (shape, strides)."""
        A, B = self.A, self.B
        key = (A.shape, A.strides, B.shape, B.strides, *c_geometry, A.device_id, aligned,
               *self.options)
        return PLANS.get(key, lambda: make_plan(
            describe((A.shape, A.strides), (B.shape, B.strides), c_geometry, self.name),
            A.device_id, self.kernel, self.config, self.deterministic, aligned,
            self.precision))


def normalise(a, b, c, beta: float, out, kernel, config, deterministic: bool,
              precision: str) -> Call:
    """Every check of a call's arrays and their agreement (the precision and the scalars
    are the caller's: api checked them), as one `Call`; raises naming the problem."""
    given = out if out is not None else c
    arrays_in = {n: x for n, x in (("a", a), ("b", b), ("c", c), ("out", out))
                 if x is not None}
    writes = {"a": False, "b": False, "c": out is None, "out": True}
    # arrays of torch and CuPy are read first (a CPU tensor must fail before its stream is
    # asked for); those of other libraries get the stream the call runs on, so that their
    # producers order their pending writes before it (DLPack's and CAI's stream protocol)
    direct = {n: as_operand(x, n, writable=writes[n]) for n, x in arrays_in.items()
              if arrays.library_of(x) != "other"}
    lead, handle = launch_stream(a, given)
    ops = {n: direct.get(n) or as_operand(x, n, stream=handle, writable=writes[n])
           for n, x in arrays_in.items()}
    A, B, Cin = ops["a"], ops["b"], ops.get("c")
    if A.device_id != B.device_id:
        raise ValueError(f"a is on GPU {A.device_id} and b on GPU {B.device_id}")
    out_shape = tuple(product_shape(A.shape, B.shape))
    if Cin is not None:
        if Cin.shape != out_shape:
            raise ValueError(f"c is {dims(Cin.shape)}, the product is {dims(out_shape)}")
        if Cin.device_id != A.device_id:
            raise ValueError(f"c is on GPU {Cin.device_id}, a and b on GPU {A.device_id}")
    if beta != 0 and Cin is None:
        raise ValueError("beta != 0 needs c")
    if config is not None and not isinstance(config, Mapping):
        raise TypeError(f"config must be a mapping of constant names to integers (e.g. "
                        f"{{'BM': 128, ...}}), got {type(config).__name__}")
    name = "out" if out is not None or c is None else "c"
    return Call(A, B, Cin, ops, given, name, out_shape, lead, handle, kernel, config,
                deterministic, precision)


def general(a, b, c, alpha: float, beta: float, out, kernel, config, deterministic: bool,
            fast: bool = False, precision: str = "ieee"):
    """C = alpha a @ b + beta c into out / c / a new array: the call normalised (`normalise`),
    planned once (`Call.plan`) and launched. fast=True: a plain torch product (no kernel or
    config) whose hot-path caches it fills; autograd is then the caller's business."""
    if TORCH.module is None:
        TORCH.find()
    if TORCH.module is not None and not fast:
        TORCH.autograd_guard(a, b, c, out, beta)
    call = normalise(a, b, c, beta, out, kernel, config, deterministic, precision)
    A, B, Cin, name = call.A, call.B, call.Cin, call.name
    # an operand read through a resolved copy (torch's negative bit) is not the caller's
    # tensor: the hot path must not remember its key, or its pointer
    fast = fast and A.obj is a and B.obj is b
    if call.given is None:
        # a new, contiguous, allocator-aligned output: planned (and so checked) before it
        # is allocated, and it overlaps nothing
        if A.library == "other":
            new_output(A, call.out_shape)  # refuses: there is no library to make one with
        plan = call.plan((call.out_shape, arrays.contiguous_strides(call.out_shape)),
                         (A.ptr | B.ptr) & 15 == 0)
        if fast:  # the hot path serves these two tensors from now on
            PLANS.remember_fast(fast_key(a, b, deterministic, precision), plan)
        target = new_output(A, call.out_shape)
        C = as_operand(target, name, writable=True)
    else:
        target = call.given
        C = call.ops[name]
        plan = call.plan((C.shape, C.strides), (A.ptr | B.ptr | C.ptr) & 15 == 0)
        check_target(C, name, A, B)
        if Cin is not None and beta != 0 and not C.same_array(Cin) and C.overlaps(Cin):
            raise ValueError(f"{name} partly overlaps c; pass the same array or disjoint ones")
    if plan.kind == "empty":
        return target
    lead, handle = call.lead, call.handle
    _order_operands(list(call.ops.values()), lead, handle)
    if beta != 0 and not C.same_array(Cin):
        _copy_into(C, Cin)  # the kernel updates in place: C = alpha*AB + beta*C
    if plan.kind == "scale" or alpha == 0:  # BLAS: alpha == 0 reads neither A nor B
        _scale(C, beta)
    elif lead == "torch":
        prev = TORCH.device_ready(A.device_id)
        fn = plan.launch(A.ptr, B.ptr, C.ptr, handle, alpha, beta)
        TORCH.restore(prev)
        if fast and out is not None:  # every check passed: the hot path has this launch
            PLANS.remember_hot(out_key(a, b, out, deterministic, precision,
                                       a.get_device()), fn)
    else:
        make_current(A.device_id)
        plan.launch(A.ptr, B.ptr, C.ptr, handle, alpha, beta)
    if C.library == "torch" and call.given is not None:
        TORCH.bump_version(C.obj)
    return target
