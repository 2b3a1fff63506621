"""What users call: sgemm (BLAS semantics) and matmul, on torch, CuPy or DLPack arrays.

    c = sgemmlab.matmul(a, b)                        # a @ b, exact FP32
    c = sgemmlab.matmul(a, b, precision="fp32_emulated")  # FP32-accurate, tensor cores
    sgemmlab.sgemm(a, b, c, alpha=0.5, beta=1.0)     # c = 0.5 a @ b + c, in place

Operands are float32 matrices (2-D) or batches of matrices (3-D) on one GPU, row- or
column-major (a transposed view is read as it lies, never copied); a 2-D operand against a
3-D one is broadcast over the batch, as is a batch of one. The work runs on the caller's
current stream: torch's for torch tensors, CuPy's for CuPy arrays, the stream a
__cuda_array_interface__ names (else the legacy default stream) otherwise. docs/api.md is
the reference.

precision: "ieee", the default, exact FP32 on the FMA units; "fp32_emulated", FP32-accurate
on Hopper's INT8 tensor cores (Ozaki scheme II: exact integer products recombined in FP64,
about 3x faster at large sizes); "tf32x3" (Triton's name), FP32-accurate on the TF32 tensor
cores (three TF32 products of a split operand, about 2.5x faster at large sizes); "tf32",
one TF32 product, NOT FP32 (a 10-bit mantissa: errors near 1e-4). Dispatch runs the
tensor-core rung where it serves the shape and an exact FP32 rung elsewhere (`sgemmlab
explain --precision`); nothing ever lowers the precision asked for.

This module only routes, once per call: the options are checked here (the precision by
dispatch's `check_precision`, the one place that knows the precisions), then a plain call
goes to `product`: the torch hot path (a dict lookup of what an earlier call checked) or, on
its miss and for everything else, the general path, which normalises the call once
(`product.normalise`: one `Call`) and plans it once. torch tensors that autograd or
torch.compile must see go through the operator `torch.ops.sgemmlab.matmul` (`torch_ops`),
which calls `product` in turn. How a call becomes a launch is told in `plan`.
"""

from __future__ import annotations

from typing import Any

from .dispatch import check_precision
from .errors import OperandError
from .plan import PLANS, describe, dims, product_shape
from .product import TORCH, check_target, flag, general, hot, scalars
from .registry import Config
from .runtime import arrays


def find_torch():
    """torch if the caller imported it (sgemmlab never imports it first). It does not
    register torch.ops.sgemmlab.matmul: a product on plain tensors does not need the
    operator, and registering it imports torch.library, the largest part of a first product
    in a program that imports sgemmlab before torch (docs/worklog.md); the first call that
    needs it does (`_via_op`), as does `import sgemmlab` after torch, or `import
    sgemmlab.torch_ops`."""
    if TORCH.module is None:
        TORCH.find()
    return TORCH.module


def clear_caches() -> None:
    """Forget every plan and bound launch (tests; dispatch does it when a table changes)."""
    PLANS.clear()


def _compiling() -> bool:
    return TORCH.is_compiling()


def _via_op(a, b, out, deterministic: bool, precision: str = "ieee"):
    """torch tensors that need autograd, torch.compile or a tensor subclass: the op. `out`
    gets the checks of every other path before anything runs."""
    from . import torch_ops

    torch = TORCH.module
    if out is not None and torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
        # torch refuses it too: a product copied into `out` would carry no gradient
        raise ValueError("out= cannot be used when a or b requires grad: autograd records no "
                         "product written into out (torch refuses it too); drop out=, or call "
                         "under torch.no_grad()")
    plain = TORCH.plain
    eager = not _compiling() and type(a) in plain and type(b) in plain
    if eager:  # the same refusals as without autograd (the op itself would take CPU
        # tensors, through its torch.matmul fallback)
        A, B = arrays.torch_operand(a, "a"), arrays.torch_operand(b, "b")
    if out is not None:
        _check_torch_out(out, a, b)
        if eager and type(out) in plain:
            C = arrays.torch_operand(out, "out", writable=True)
            describe((A.shape, A.strides), (B.shape, B.strides), (C.shape, C.strides))
            check_target(C, "out", A, B)
    r = torch_ops.matmul(a, b, deterministic, precision)
    if out is None:
        return r
    out.copy_(r)
    return out


def _check_torch_out(out, a, b) -> None:
    """`out` beside operands that go through the op (which checks a and b itself): a float32
    tensor on their device, of the product's shape exactly (never broadcast into)."""
    T = TORCH.Tensor
    if not isinstance(out, T):
        raise OperandError(f"out: {type(out).__name__} beside torch operands that need autograd "
                           "or torch.compile; pass a torch tensor")
    if out.dtype != TORCH.module.float32:
        raise OperandError(f"out: dtype is {out.dtype}, sgemmlab computes float32 only")
    if out.device != a.device:
        raise ValueError(f"out is on {out.device}, the operands on {a.device}")
    shape = tuple(product_shape(tuple(a.shape), tuple(b.shape)))
    if tuple(out.shape) != shape:
        raise ValueError(f"out is {dims(tuple(out.shape))}, the product is {dims(shape)}")


def _hot(a, b, out) -> bool:
    """Plain torch tensors whose product autograd need not see: the hot path serves them."""
    plain = TORCH.plain
    tp = type(a)
    if tp is not type(b) or tp not in plain or out is not None and type(out) not in plain:
        return False
    grad = a.requires_grad or b.requires_grad or out is not None and out.requires_grad
    return not (grad and TORCH.module.is_grad_enabled())


def _needs_op(a, b) -> bool:
    T = TORCH.Tensor
    if not (isinstance(a, T) and isinstance(b, T)):
        return False  # one torch tensor beside another library's array: the general path
    if type(a) not in TORCH.plain or type(b) not in TORCH.plain:
        return True  # FakeTensor, FunctionalTensor, ...: the dispatcher knows them
    return TORCH.module.is_grad_enabled() and (a.requires_grad or b.requires_grad)


def sgemm(a: Any, b: Any, c: Any = None, *, alpha: float = 1.0, beta: float = 0.0,
          out: Any = None, kernel: str | int | None = None, config: Config | None = None,
          deterministic: bool = False, precision: str = "ieee"):
    """C = alpha * a @ b + beta * c in FP32, and return it (BLAS SGEMM semantics).

    a: (M, K) or (batch, M, K); b: (K, N) or (batch, K, N); c: the product's shape, or None.
    With `out` the result goes there (it may be `c` itself: the BLAS in-place update); else
    into `c` when given; else into a new array of a's type (torch or CuPy). beta == 0 never
    reads c (it may hold NaN). `kernel` and `config` name a rung of the ladder and its
    configuration instead of the dispatcher's choice; `deterministic=True` guarantees
    bit-identical results run to run. `precision`: "ieee" | "fp32_emulated" | "tf32x3" |
    "tf32" (the module docstring); a named rung must compute in the precision asked
    (ConfigError otherwise).
    Raises OperandError / ValueError / OverflowError naming the problem; docs/api.md lists
    them.
    """
    alpha, beta = scalars(alpha, beta)
    deterministic = flag("deterministic", deterministic)
    precision = check_precision(precision)
    if TORCH.module is None:
        find_torch()
    return general(a, b, c, alpha, beta, out, kernel, config, deterministic,
                   precision=precision)


def free_workspaces() -> int:
    """Give back the scratch memory sgemmlab keeps between calls, as torch.cuda.empty_cache()
    does for torch's cache; returns the bytes freed. That memory is one workspace per stream
    (Stream-K's counters and partial tiles, split-K's parts, the tensor rungs' operand
    copies), grown to the largest call so far and otherwise kept until the process ends: a
    tf32x3 product of 16 GiB operands leaves tens of GiB there. Each buffer is freed in order
    on its own stream, after the work queued there, and the next call that needs one
    allocates it again. Not while another thread launches sgemmlab work on the same stream,
    during a CUDA graph capture, or while a graph captured outside torch with sgemmlab calls
    in it may still be replayed (it uses its stream's workspace; graphs that torch captures
    have memory of their own)."""
    from .runtime import workspace

    return workspace.release_all()


def matmul(a: Any, b: Any, *, out: Any = None, kernel: str | int | None = None,
           config: Config | None = None, deterministic: bool = False,
           precision: str = "ieee"):
    """a @ b: sgemm with alpha = 1, beta = 0; exact FP32 (no TF32) unless `precision` says
    "fp32_emulated" or "tf32x3" (FP32-accurate tensor cores) or "tf32" (NOT FP32).

    torch tensors that require grad (with grad mode on), tensor subclasses, and every call
    under torch.compile go through torch.ops.sgemmlab.matmul instead (differentiable,
    traceable, CUDA-graph safe); `kernel` and `config` are then left to dispatch."""
    if deterministic.__class__ is not bool:  # the hot path's keys would take 1 for True
        deterministic = flag("deterministic", deterministic)
    if TORCH.Tensor is None:
        find_torch()
    if TORCH.Tensor is not None:
        plain = kernel is None and config is None
        if plain and not _compiling() and _hot(a, b, out):
            r = hot(a, b, out, deterministic, precision)  # what an earlier call checked
            if r is not None:
                return r
            return general(a, b, None, 1.0, 0.0, out, None, None, deterministic, fast=True,
                           precision=check_precision(precision))
        precision = check_precision(precision)
        T = TORCH.Tensor
        if isinstance(a, T) and isinstance(b, T) and (_compiling() or _needs_op(a, b)):
            return _via_op(a, b, out, deterministic, precision)
    else:
        precision = check_precision(precision)
    return general(a, b, None, 1.0, 0.0, out, kernel, config, deterministic,
                   precision=precision)
