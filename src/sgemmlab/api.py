"""What users call: sgemm (BLAS semantics) and matmul, on torch, CuPy or DLPack arrays.

    c = sgemmlab.matmul(a, b)                        # a @ b, exact FP32
    sgemmlab.sgemm(a, b, c, alpha=0.5, beta=1.0)     # c = 0.5 a @ b + c, in place

Operands are float32 matrices (2-D) or batches of matrices (3-D) on one GPU, row- or
column-major (a transposed view is read as it lies, never copied); a 2-D operand against a
3-D one is broadcast over the batch, as is a batch of one. The work runs on the caller's
current stream: torch's for torch tensors, CuPy's for CuPy arrays, the stream a
__cuda_array_interface__ names (else the legacy default stream) otherwise. docs/api.md is
the reference.

How a call becomes a launch. The kernels compute a row-major C = alpha A B + beta C, with A
and B each row- or column-major, over a batch of strided products (`Launcher.bind`).
`describe` maps the caller's arrays onto that: a column-major C is computed as
C^T = B^T A^T (the operands swap and their layouts flip), and a batch whose B is broadcast
and whose A and C rows follow each other in memory is folded into one taller product.
Everything about a call except its pointers — the checks, that mapping, the dispatcher's
choice of rung and configuration, the launcher — is a `_Plan`, made once per (shapes,
strides, devices, alignment, options) and cached; a plan caches the bound launch per
(pointers, stream, alpha, beta), so a call that repeats one (a training step, the caching
allocator handing back the same blocks) costs a few dict lookups and the launch itself.
For plain torch tensors `matmul` reads them directly (no protocol objects at all).
"""

from __future__ import annotations

import math
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from . import registry
from .registry import Config, config_key
from .runtime import arrays
from .runtime.arrays import (Operand, OperandError, as_operand, batch_stride,
                             current_stream_handle, matrix_layout, self_overlapping)
from .runtime.device import device, gpu_info
from .runtime.launch import ConfigError, Launcher

INT32_MAX = 2**31 - 1
FLT_MAX = float(np.finfo(np.float32).max)
_PLAN_LIMIT = 4096  # plans kept (a cache, cleared when full)
_BOUND_LIMIT = 256  # bound launches kept per plan


# ---------------------------------------------------------------------------------------
# Shapes and layouts: from the caller's arrays to the kernels' terms
# ---------------------------------------------------------------------------------------
def _dims(shape) -> str:
    return "x".join(str(n) for n in shape)


def product_shape(a_shape, b_shape) -> tuple:
    """The shape of a @ b, or ValueError saying why there is none.

    (M, K) @ (K, N) -> (M, N). A 3-D operand is a batch: (batch, M, K) @ (K, N) and
    (M, K) @ (batch, K, N) broadcast the 2-D operand over the batch; two batches must have
    the same size, or one of them size 1 (broadcast). Also used, on symbolic sizes, by the
    torch op's fake implementation."""
    for name, shape in (("a", a_shape), ("b", b_shape)):
        if len(shape) not in (2, 3):
            raise OperandError(f"{name}: expected a 2-D matrix or a 3-D batch of matrices, "
                               f"got shape ({', '.join(map(str, shape))})")
    (M, K), (K2, N) = a_shape[-2:], b_shape[-2:]
    if K != K2:
        raise ValueError(f"inner dimensions differ: a is {_dims(a_shape)}, "
                         f"b is {_dims(b_shape)}")
    if len(a_shape) == 2 and len(b_shape) == 2:
        return (M, N)
    ba = a_shape[0] if len(a_shape) == 3 else None
    bb = b_shape[0] if len(b_shape) == 3 else None
    if ba is not None and bb is not None and ba != bb and ba != 1 and bb != 1:
        raise ValueError(f"batch sizes differ: a has {ba}, b has {bb} (they must be equal, "
                         "or one of them 1)")
    if ba is None or ba == 1:
        batch = bb if bb is not None else ba
    else:
        batch = ba
    return (batch, M, N)


@dataclass(frozen=True, slots=True)
class Gemm:
    """One call in the kernels' terms: a batch of row-major C = alpha A B + beta C."""

    M: int
    N: int
    K: int
    batch: int
    trans_a: bool  # the kernel's A is column-major
    trans_b: bool
    lda: int
    ldb: int
    ldc: int
    stride_a: int  # elements from one product of the batch to the next; 0 repeats it
    stride_b: int
    stride_c: int
    swap: bool  # C is column-major: computed as C^T = B^T A^T, the caller's b is the A
    out_shape: tuple[int, ...]

    @property
    def empty(self) -> bool:
        return self.M == 0 or self.N == 0 or self.batch == 0


Geometry = tuple  # (shape, strides) of one operand


def describe(a: Geometry, b: Geometry, c: Geometry, c_name: str = "out") -> Gemm:
    """Map operands (shape, strides in elements) onto the kernels, or raise naming what
    cannot be: shapes (ValueError), 32-bit sizes (OverflowError), strides (LayoutError), an
    output whose elements share memory (OperandError)."""
    out_shape = product_shape(a[0], b[0])
    if tuple(c[0]) != tuple(out_shape):
        raise ValueError(f"{c_name} is {_dims(c[0])}, the product is {_dims(out_shape)}")
    M, K = a[0][-2:]
    N = b[0][-1]
    batch = out_shape[0] if len(out_shape) == 3 else 1
    for what, v in (("M", M), ("N", N), ("K", K), ("batch", batch)):
        if v > INT32_MAX:
            raise OverflowError(f"{what} = {v} does not fit the kernels' 32-bit size "
                                "arguments")
    ops = [Operand(None, 0, tuple(s), tuple(st), 0, "other") for s, st in (a, b, c)]
    la, lb, lc = (matrix_layout(op, name) for op, name in zip(ops, ("a", "b", c_name)))
    if self_overlapping(*c):
        raise OperandError(f"{c_name}: strides {tuple(c[1])} of shape {_dims(c[0])} make "
                           "different elements share memory; the output must not")
    # C: row-major unless only column-major fits it, or both do (a vector) and computing
    # C^T leaves fewer transposed operands for the kernel
    a_opts, b_opts = {t for t, _ in la}, {t for t, _ in lb}
    forced = [next(iter(o)) for o in (a_opts, b_opts) if len(o) == 1]
    c_opts = {t for t, _ in lc}
    swap = c_opts == {True} or (len(c_opts) == 2
                                and sum(not t for t in forced) < sum(forced))
    ta, lda = next((t, ld) for t, ld in sorted(la, key=lambda x: x[0] != swap))
    tb, ldb = next((t, ld) for t, ld in sorted(lb, key=lambda x: x[0] != swap))
    ldc = next(ld for t, ld in lc if t == swap)
    for name, ld in (("a", lda), ("b", ldb), (c_name, ldc)):
        if ld > INT32_MAX:
            raise OverflowError(f"{name}: leading dimension {ld} does not fit the kernels' "
                                "32-bit size arguments")
    sa, sb, sc = (batch_stride(op) for op in ops)
    if swap:  # C^T = B^T A^T: B^T is the kernel's A (its layout flips), A^T its B
        M, N = N, M
        (ta, lda, sa), (tb, ldb, sb) = (not tb, ldb, sb), (not ta, lda, sa)
    if batch <= 1:
        sa = sb = sc = 0
    elif sb == 0 and not ta and sa == M * lda and sc == M * ldc and batch * M <= INT32_MAX:
        # B shared by the batch, A's and C's rows one after another: one taller product
        M, batch, sa, sc = batch * M, 1, 0, 0
    return Gemm(M, N, K, batch, ta, tb, lda, ldb, ldc, sa, sb, sc, swap, tuple(out_shape))


# ---------------------------------------------------------------------------------------
# Plans: everything but the pointers, made once
# ---------------------------------------------------------------------------------------
def _choose(g: Gemm, device_id: int, deterministic: bool, aligned: bool):
    """(Rung, configuration) the dispatcher picks for this product on this GPU."""
    from .dispatch import choose

    info = gpu_info(device_id)
    c = choose(g.M, g.N, g.K, gpu_name=info.name, sm_count=info.sm_count,
               trans_a=g.trans_a, trans_b=g.trans_b, batch=g.batch,
               deterministic=deterministic, aligned=aligned)
    return registry.rung(c.rung), dict(c.config)


def _named(g: Gemm, device_id: int, kernel, config, deterministic: bool):
    """(Rung, configuration) the caller named; refused early when it cannot serve."""
    rung = registry.rung(kernel) if kernel is not None else registry.best()
    cfg = dict(config) if config is not None else rung.default(gpu_info(device_id).name)
    if (g.trans_a or g.trans_b) and not rung.supports("layouts"):
        which = " and ".join(n for n, t in (("A", g.trans_a), ("B", g.trans_b)) if t)
        raise ConfigError(f"rung {rung.label} reads row-major operands only, and the "
                          f"kernel's {which} is column-major here (a transposed view, or a "
                          "column-major out): name a rung with layouts, or let dispatch "
                          "choose (kernel=None)")
    if deterministic and not rung.deterministic(cfg):
        raise ConfigError(f"rung {rung.label} at {config_key(cfg)} is not bit-reproducible "
                          "(atomic fix-up of split tiles); deterministic=True refuses it")
    return rung, cfg


class _Plan:
    """One cached call shape. `launch(pa, pb, pc, stream, alpha, beta)` runs it on the
    caller's pointers (in the caller's order: the plan swaps them when it computes C^T)."""

    __slots__ = ("gemm", "out_shape", "kind", "device_id", "rung", "config", "launcher",
                 "per_item", "reuse", "bound", "lock")

    def __init__(self, gemm: Gemm, device_id: int, rung=None, config=None):
        self.gemm = gemm
        self.out_shape = gemm.out_shape
        self.device_id = device_id
        self.kind = "empty" if gemm.empty else "scale" if gemm.K == 0 else "gemm"
        self.rung, self.config = rung, config
        self.launcher = Launcher(rung, config, device_id) if rung is not None else None
        # a rung without batches computes a batch one product per launch
        self.per_item = rung is not None and gemm.batch > 1 and not rung.supports("batched")
        # a bound launch can be reused for the same pointers (a Stream-K launch re-reads
        # its stream's workspace when a bigger call has replaced it)
        self.reuse = rung is not None
        self.bound: dict[tuple, Callable[[], None]] = {}
        self.lock = threading.Lock()

    def launch(self, pa: int, pb: int, pc: int, handle: int, alpha: float,
               beta: float) -> None:
        key = (pa, pb, pc, handle, alpha, beta)
        fn = self.bound.get(key)
        if fn is None:
            fn = self._bind(key)
        fn()

    def _bind(self, key: tuple) -> Callable[[], None]:
        pa, pb, pc, handle, alpha, beta = key
        g = self.gemm
        if g.swap:
            pa, pb = pb, pa
        stream = _stream(handle, self.device_id)
        bind = self.launcher.bind
        kw = {"trans_a": True} if g.trans_a else {}
        if g.trans_b:
            kw["trans_b"] = True
        if self.per_item:
            fns = [bind(g.M, g.N, g.K, alpha, pa + 4 * i * g.stride_a, g.lda,
                        pb + 4 * i * g.stride_b, g.ldb, beta, pc + 4 * i * g.stride_c, g.ldc,
                        stream, **kw) for i in range(g.batch)]

            def fn():
                for f in fns:
                    f()
        else:
            if g.batch > 1:
                kw.update(batch=g.batch, stride_a=g.stride_a, stride_b=g.stride_b,
                          stride_c=g.stride_c)
            fn = bind(g.M, g.N, g.K, alpha, pa, g.lda, pb, g.ldb, beta, pc, g.ldc, stream,
                      **kw)
        if self.reuse:
            with self.lock:
                if len(self.bound) >= _BOUND_LIMIT:
                    self.bound.clear()
                self.bound[key] = fn
        return fn


_plans: dict[tuple, _Plan] = {}  # the general path's plans
_fast_plans: dict[tuple, _Plan] = {}  # matmul of two plain torch tensors into a new one
_plan_lock = threading.Lock()


def _stream(handle: int, device_id: int):
    return arrays.stream_for(handle, device_id)


def _aligned(g: Gemm, pointers_aligned: bool) -> bool:
    return pointers_aligned and all(
        v % 4 == 0 for v in (g.lda, g.ldb, g.ldc, g.stride_a, g.stride_b, g.stride_c))


def _make_plan(g: Gemm, device_id: int, kernel, config, deterministic: bool,
               pointers_aligned: bool) -> _Plan:
    if g.empty or g.K == 0:
        return _Plan(g, device_id)
    if kernel is None and config is None:
        rung, cfg = _choose(g, device_id, deterministic, _aligned(g, pointers_aligned))
    else:
        rung, cfg = _named(g, device_id, kernel, config, deterministic)
    return _Plan(g, device_id, rung, cfg)


def _cached(cache: dict, key: tuple, make: Callable[[], _Plan]) -> _Plan:
    plan = cache.get(key)
    if plan is None:
        with _plan_lock:
            plan = cache.get(key)
            if plan is None:
                plan = make()  # raises for what cannot run: nothing is cached then
                if len(cache) >= _PLAN_LIMIT:
                    cache.clear()
                cache[key] = plan
    return plan


def _remember_fast(key: tuple, plan: _Plan) -> None:
    if key not in _fast_plans:
        with _plan_lock:
            if len(_fast_plans) >= _PLAN_LIMIT:
                _fast_plans.clear()
            _fast_plans[key] = plan


def clear_caches() -> None:
    """Forget every plan and bound launch (tests; after a tuning table changed)."""
    with _plan_lock:
        _plans.clear()
        _fast_plans.clear()


# ---------------------------------------------------------------------------------------
# Scalars, devices, streams
# ---------------------------------------------------------------------------------------
def _scalars(alpha, beta) -> tuple[float, float]:
    """alpha and beta as the float32 values the kernels see (a value too large for float32
    would become infinite: refused, like NaN and infinity, whose meaning BLAS leaves open)."""
    out = []
    for name, v in (("alpha", alpha), ("beta", beta)):
        try:
            f = float(v)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be a real number, got {v!r}") from None
        if not math.isfinite(f):
            raise ValueError(f"alpha and beta must be finite (got alpha={alpha}, beta={beta})")
        if abs(f) > FLT_MAX:
            raise ValueError(f"alpha and beta must be finite in float32 (the kernels' type): "
                             f"{name} = {f:g} overflows it")
        out.append(float(np.float32(f)))
    return out[0], out[1]


_tls = threading.local()


def _make_current(device_id: int) -> None:
    """The kernels launch into the calling thread's current CUDA context: make it the
    device's primary context (the one torch and CuPy use too)."""
    device(device_id)
    _tls.device = device_id


# ---------------------------------------------------------------------------------------
# torch
# ---------------------------------------------------------------------------------------
_torch = None  # the torch module, once the caller has imported it
_Tensor: type | None = None
_PLAIN: frozenset = frozenset()  # torch.Tensor, torch.nn.Parameter: read directly
_F32 = None
_raw_stream: Callable[[int], int] | None = None
_cur_device: Callable[[], int] | None = None
_increment_version: Callable[[Any], None] | None = None


def _find_torch():
    """torch if the caller imported it (sgemmlab never imports it first); registers
    torch.ops.sgemmlab.matmul on first sight."""
    global _torch, _Tensor, _PLAIN, _F32, _raw_stream, _cur_device, _increment_version
    if _torch is None and "torch" in sys.modules:
        torch = sys.modules["torch"]
        C = torch._C
        _raw_stream = getattr(C, "_cuda_getCurrentRawStream", None) or (
            lambda i: torch.cuda.current_stream(i).cuda_stream)
        _cur_device = getattr(C, "_cuda_getDevice", None) or torch.cuda.current_device
        _F32 = torch.float32
        _increment_version = getattr(torch.autograd.graph, "increment_version", None)
        _PLAIN = frozenset({torch.Tensor, torch.nn.Parameter})
        _Tensor = torch.Tensor
        _torch = torch
        from . import torch_ops  # noqa: F401  (registers the op)
    return _torch


def _compiling() -> bool:
    return _torch.compiler.is_compiling()


def _torch_device_ready(dev: int) -> int | None:
    """Make `dev` current for a launch on torch tensors; returns the device to switch back
    to afterwards (torch code expects its current device unchanged), or None."""
    prev = _cur_device()
    if prev == dev and getattr(_tls, "device", -1) == dev:
        return None
    _make_current(dev)
    return prev if prev != dev else None


def _restore(prev: int | None) -> None:
    if prev is not None:
        _make_current(prev)


def _fast_key(a, b, pa: int, pb: int, deterministic: bool, out=None) -> tuple:
    key = (a.shape, a.stride(), b.shape, b.stride(), a.get_device(), b.get_device(),
           (pa | pb) & 15 == 0, deterministic)
    return key if out is None else key + (out.shape, out.stride(), out.get_device())


def torch_product(a, b, deterministic: bool = False, out=None):
    """a @ b for plain torch tensors (into `out`, or a new tensor): the hot path of
    `matmul` and of torch.ops.sgemmlab.matmul. It only looks up what an earlier call
    checked: the plan of these shapes and strides and, with `out`, the bound launch of
    these very pointers (whose overlap checks passed when it was bound). Anything new goes
    through the general path, which checks it all and fills the caches."""
    if a.dtype is _F32 and b.dtype is _F32 and a.is_cuda and b.is_cuda:
        pa, pb = a.data_ptr(), b.data_ptr()
        if out is None:
            plan = _fast_plans.get(_fast_key(a, b, pa, pb, deterministic))
            if plan is not None:
                out = a.new_empty(plan.out_shape)
                if plan.kind == "gemm":
                    dev = plan.device_id
                    prev = _torch_device_ready(dev)
                    plan.launch(pa, pb, out.data_ptr(), _raw_stream(dev), 1.0, 0.0)
                    _restore(prev)
                elif plan.kind == "scale":
                    out.zero_()
                return out
        elif out.dtype is _F32 and out.is_cuda:
            plan = _fast_plans.get(_fast_key(a, b, pa, pb, deterministic, out))
            if plan is not None:
                dev = plan.device_id
                fn = plan.bound.get((pa, pb, out.data_ptr(), _raw_stream(dev), 1.0, 0.0))
                if fn is not None:
                    prev = _torch_device_ready(dev)
                    fn()
                    _restore(prev)
                    _bump_version(out)
                    return out
    return _sgemm(a, b, None, 1.0, 0.0, out, None, None, deterministic, fast=True)


def _via_op(a, b, out, deterministic: bool):
    """torch tensors that need autograd, torch.compile or a tensor subclass: the op."""
    from . import torch_ops

    if not _compiling() and type(a) in _PLAIN and type(b) in _PLAIN:
        # eager tensors: the same refusals as without autograd (the op itself would take
        # CPU tensors, through its torch.matmul fallback)
        arrays.torch_operand(a, "a")
        arrays.torch_operand(b, "b")
    r = torch_ops.matmul(a, b, deterministic)
    if out is None:
        return r
    out.copy_(r)
    return out


def _hot(a, b, out) -> bool:
    """Plain torch tensors whose product autograd need not see: `torch_product` serves them."""
    tp = type(a)
    if tp is not type(b) or tp not in _PLAIN or out is not None and type(out) not in _PLAIN:
        return False
    grad = a.requires_grad or b.requires_grad or out is not None and out.requires_grad
    return not (grad and _torch.is_grad_enabled())


def _needs_op(a, b) -> bool:
    T = _Tensor
    if not (isinstance(a, T) and isinstance(b, T)):
        return False  # one torch tensor beside another library's array: the general path
    if type(a) not in _PLAIN or type(b) not in _PLAIN:
        return True  # FakeTensor, FunctionalTensor, ...: the dispatcher knows them
    return _torch.is_grad_enabled() and (a.requires_grad or b.requires_grad)


def _autograd_guard(a, b, c, out, beta: float) -> None:
    """sgemm writes through raw pointers, which autograd cannot see: refuse rather than
    return a result whose gradient would silently be missing."""
    T = _Tensor
    if T is None or not _torch.is_grad_enabled():
        return
    for name, x in (("a", a), ("b", b), ("c", c if beta != 0 else None), ("out", out)):
        if isinstance(x, T) and x.requires_grad:
            raise ValueError(f"{name} requires grad, and sgemm records no autograd graph: "
                             "use sgemmlab.matmul (differentiable), or call it under "
                             "torch.no_grad()")


def _bump_version(x) -> None:
    """Tell autograd that `x` changed in place (a tensor saved for backward then errors
    instead of silently giving wrong gradients)."""
    if _increment_version is not None and not x.is_inference():
        _increment_version(x)


# ---------------------------------------------------------------------------------------
# Outputs, copies and scaling in the caller's library
# ---------------------------------------------------------------------------------------
def _new_output(like: Operand, shape: tuple[int, ...]):
    if like.library == "torch":
        return _torch.empty(shape, dtype=_torch.float32, device=like.obj.device)
    if like.library == "cupy":
        cupy = sys.modules["cupy"]
        with cupy.cuda.Device(like.device_id):
            return cupy.empty(shape, dtype=cupy.float32)
    raise OperandError("pass `out` (or `c`) when the operands are neither torch nor CuPy "
                       "arrays: sgemmlab cannot make a new array of their type")


def _copy_into(dst: Operand, src: Operand) -> None:
    """dst = src, on the caller's current stream (the one the launch follows)."""
    if dst.library == "torch":
        s = src.obj if src.library == "torch" else _torch.as_tensor(src.obj,
                                                                    device=dst.obj.device)
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
    """K == 0: C = beta C (zeros when beta == 0: C is not read then)."""
    x = dst.obj
    try:
        if beta == 0:
            x[...] = 0
        elif beta != 1:
            x[...] = x * beta
    except Exception:
        raise OperandError("out: K == 0 leaves out = beta*c, which needs torch or CuPy "
                           "arrays to compute") from None


# ---------------------------------------------------------------------------------------
# The API
# ---------------------------------------------------------------------------------------
def sgemm(a: Any, b: Any, c: Any = None, *, alpha: float = 1.0, beta: float = 0.0,
          out: Any = None, kernel: str | int | None = None, config: Config | None = None,
          deterministic: bool = False):
    """C = alpha * a @ b + beta * c in FP32, and return it (BLAS SGEMM semantics).

    a: (M, K) or (batch, M, K); b: (K, N) or (batch, K, N); c: the product's shape, or None.
    With `out` the result goes there (it may be `c` itself: the BLAS in-place update); else
    into `c` when given; else into a new array of a's type (torch or CuPy). beta == 0 never
    reads c (it may hold NaN). `kernel` and `config` name a rung of the ladder and its
    configuration instead of the dispatcher's choice; `deterministic=True` guarantees
    bit-identical results run to run. Raises OperandError / ValueError / OverflowError
    naming the problem; docs/api.md lists them.
    """
    alpha, beta = _scalars(alpha, beta)
    return _sgemm(a, b, c, alpha, beta, out, kernel, config, bool(deterministic))


def matmul(a: Any, b: Any, *, out: Any = None, kernel: str | int | None = None,
           config: Config | None = None, deterministic: bool = False):
    """a @ b in exact FP32 (no TF32): sgemm with alpha = 1, beta = 0.

    torch tensors that require grad (with grad mode on), tensor subclasses, and every call
    under torch.compile go through torch.ops.sgemmlab.matmul instead (differentiable,
    traceable, CUDA-graph safe); `kernel` and `config` are then left to dispatch."""
    if _Tensor is not None or _find_torch() is not None:
        if _compiling() and isinstance(a, _Tensor) and isinstance(b, _Tensor):
            return _via_op(a, b, out, deterministic)
        if kernel is None and config is None and _hot(a, b, out):
            return torch_product(a, b, deterministic, out)
        if _needs_op(a, b):
            return _via_op(a, b, out, deterministic)
    return _sgemm(a, b, None, 1.0, 0.0, out, kernel, config, bool(deterministic))


def _sgemm(a, b, c, alpha: float, beta: float, out, kernel, config, deterministic: bool,
           fast: bool = False):
    """The general path. fast=True: called by `torch_product` (plain torch tensors, no
    kernel or config), whose caches it fills; autograd is then the caller's business."""
    if _torch is None:
        _find_torch()
    if _torch is not None and not fast:
        _autograd_guard(a, b, c, out, beta)
    A, B = as_operand(a, "a"), as_operand(b, "b")
    if A.device_id != B.device_id:
        raise ValueError(f"a is on GPU {A.device_id} and b on GPU {B.device_id}")
    out_shape = tuple(product_shape(A.shape, B.shape))
    Cin = as_operand(c, "c") if c is not None else None
    if Cin is not None:
        if Cin.shape != out_shape:
            raise ValueError(f"c is {_dims(Cin.shape)}, the product is {_dims(out_shape)}")
        if Cin.device_id != A.device_id:
            raise ValueError(f"c is on GPU {Cin.device_id}, a and b on GPU {A.device_id}")
    if beta != 0 and Cin is None:
        raise ValueError("beta != 0 needs c")
    name = "out" if out is not None or c is None else "c"
    options = (kernel, config_key(config) if config is not None else None, deterministic)

    def plan_for(c_geometry: Geometry, aligned: bool) -> _Plan:
        key = (A.shape, A.strides, B.shape, B.strides, *c_geometry, A.device_id, aligned,
               *options)
        return _cached(_plans, key, lambda: _make_plan(
            describe((A.shape, A.strides), (B.shape, B.strides), c_geometry, name),
            A.device_id, kernel, config, deterministic, aligned))

    if out is None and c is None:
        # a new, contiguous, allocator-aligned output: planned (and so checked) before it
        # is allocated, and it overlaps nothing
        if A.library == "other":
            _new_output(A, out_shape)  # refuses: there is no library to make one with
        plan = plan_for((out_shape, arrays.contiguous_strides(out_shape)),
                        (A.ptr | B.ptr) & 15 == 0)
        if fast:  # the hot path serves these two tensors from now on
            _remember_fast(_fast_key(a, b, A.ptr, B.ptr, deterministic), plan)
        target = _new_output(A, out_shape)
        C = as_operand(target, name)
    else:
        target = out if out is not None else c
        C = as_operand(target, name)
        if C.device_id != A.device_id:
            raise ValueError(f"{name} is on GPU {C.device_id}, the operands on GPU "
                             f"{A.device_id}")
        if C.readonly:
            raise OperandError(f"{name}: the array is read-only")
        plan = plan_for((C.shape, C.strides), (A.ptr | B.ptr | C.ptr) & 15 == 0)
        if fast and plan.kind == "gemm":  # the hot path, once this call has bound a launch
            _remember_fast(_fast_key(a, b, A.ptr, B.ptr, deterministic, target), plan)
        for other, m in (("a", A), ("b", B)):
            if C.overlaps(m):
                raise ValueError(f"{name} overlaps {other}: the kernels read {other} while "
                                 f"writing {name}")
        if Cin is not None and beta != 0 and not C.same_array(Cin) and C.overlaps(Cin):
            raise ValueError(f"{name} partly overlaps c; pass the same array or disjoint ones")
    if plan.kind == "empty":
        return target
    if beta != 0 and not C.same_array(Cin):
        _copy_into(C, Cin)  # the kernel updates in place: C = alpha*AB + beta*C
    if plan.kind == "scale":
        _scale(C, beta)
    else:
        lead = C if C.library != "other" else A  # whose library's stream the call runs on
        handle = current_stream_handle(lead)
        if lead.library == "torch":
            prev = _torch_device_ready(A.device_id)
            plan.launch(A.ptr, B.ptr, C.ptr, handle, alpha, beta)
            _restore(prev)
        else:
            _make_current(A.device_id)
            plan.launch(A.ptr, B.ptr, C.ptr, handle, alpha, beta)
    if C.library == "torch" and target is not None and (out is not None or c is not None):
        _bump_version(C.obj)
    return target
