"""What users call: sgemm (BLAS semantics) and matmul, on torch, CuPy or DLPack arrays.

Operands are float32 row-major matrices on one GPU (any leading dimension >= the row length);
the work runs on the caller's current stream (torch's for torch tensors, CuPy's for CuPy
arrays, the __cuda_array_interface__ stream or the default stream otherwise).
"""

from __future__ import annotations

import math
import sys
from typing import Any

from . import registry
from .registry import Config
from .runtime.arrays import Matrix, OperandError, as_matrix, current_stream_handle, stream_for
from .runtime.device import gpu_info
from .runtime.launch import Launcher


def _empty_like(m: Matrix, rows: int, cols: int):
    if m.library == "torch":
        torch = sys.modules["torch"]
        return torch.empty((rows, cols), dtype=torch.float32, device=m.obj.device)
    if m.library == "cupy":
        cupy = sys.modules["cupy"]
        with cupy.cuda.Device(m.device_id):
            return cupy.empty((rows, cols), dtype=cupy.float32)
    raise OperandError("pass `out` (or `c`) when the operands are neither torch nor CuPy arrays")


def _zero(out: Matrix) -> None:
    """K == 0 with beta == 0: the product is all zeros (BLAS leaves nothing to compute)."""
    out.obj[...] = 0


def sgemm(a: Any, b: Any, c: Any = None, *, alpha: float = 1.0, beta: float = 0.0,
          out: Any = None, kernel: str | int | None = None, config: Config | None = None):
    """C = alpha * a @ b + beta * c, in FP32, and return it.

    a: (M, K), b: (K, N); c: (M, N) or None. With `out` the result goes there (it may be `c`
    itself, which is the BLAS in-place update); else into `c` when given; else into a new
    array of a's type. beta == 0 never reads c. `kernel` and `config` pick a rung of the
    ladder and its configuration (default: the best rung, tuned for this GPU).
    """
    if not (math.isfinite(alpha) and math.isfinite(beta)):
        raise ValueError(f"alpha and beta must be finite (got alpha={alpha}, beta={beta})")
    A, B = as_matrix(a, "a"), as_matrix(b, "b")
    if A.cols != B.rows:
        raise ValueError(f"inner dimensions differ: a is {A.rows}x{A.cols}, "
                         f"b is {B.rows}x{B.cols}")
    if A.device_id != B.device_id:
        raise ValueError(f"a is on GPU {A.device_id} and b on GPU {B.device_id}")
    M, K, N = A.rows, A.cols, B.cols
    Cin = as_matrix(c, "c") if c is not None else None
    if Cin is not None and (Cin.rows, Cin.cols) != (M, N):
        raise ValueError(f"c is {Cin.rows}x{Cin.cols}, the product is {M}x{N}")
    if beta != 0 and Cin is None:
        raise ValueError("beta != 0 needs c")
    target = out if out is not None else (c if c is not None else _empty_like(A, M, N))
    C = as_matrix(target, "out")
    if (C.rows, C.cols) != (M, N):
        raise ValueError(f"out is {C.rows}x{C.cols}, the product is {M}x{N}")
    if C.device_id != A.device_id:
        raise ValueError(f"out is on GPU {C.device_id}, the operands on GPU {A.device_id}")
    for name, m in (("a", A), ("b", B)):
        if C.overlaps(m):
            raise ValueError(f"out overlaps {name}: the kernels read {name} while writing out")
    if Cin is not None and beta != 0 and C.ptr != Cin.ptr and C.overlaps(Cin):
        raise ValueError("out partly overlaps c; pass the same array or disjoint ones")
    if M == 0 or N == 0:
        return target
    if beta != 0 and C.ptr != Cin.ptr:
        _copy_into(C, Cin)  # the kernel updates in place: C = alpha*AB + beta*C
    if K == 0:
        if beta == 0:
            _zero(C)
        else:
            C.obj[...] = C.obj * beta
        return target

    rung = registry.rung(kernel) if kernel is not None else registry.best()
    cfg = dict(config) if config is not None else rung.default(gpu_info(A.device_id).name)
    stream = stream_for(current_stream_handle(A), A.device_id)
    Launcher(rung, cfg, A.device_id)(M, N, K, alpha, A.ptr, A.ld, B.ptr, B.ld, beta,
                                     C.ptr, C.ld, stream)
    return target


def _copy_into(dst: Matrix, src: Matrix) -> None:
    dst.obj[...] = src.obj


def matmul(a: Any, b: Any, *, out: Any = None, kernel: str | int | None = None,
           config: Config | None = None):
    """a @ b in exact FP32 (no TF32): sgemm with alpha = 1, beta = 0."""
    return sgemm(a, b, out=out, kernel=kernel, config=config)
