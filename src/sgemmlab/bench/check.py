"""Correctness gate: every kernel is checked against float64 before anything is timed.

Fresh random inputs each call (uniform in [-1, 1]: never zeros, which hide unwritten output),
in the layout and batch of the problem measured; the output is poisoned with NaN beforehand
when beta == 0, so an element the kernel did not write fails; any NaN or Inf fails. A batch
is checked whole: every product against its own float64 reference, one error over all.

The metric — the only one in sgemmlab (the harness, the tuner, `overhead` and every test
call `relative_error` / `check_result`):

    error = max|C - C_ref| / max(max|alpha A B|, max|beta C0|, max|C_ref|)     in float64

With beta != 0 the two terms can cancel in a small C (at 1 x 1, alpha AB + beta C0 can be a
hundred times smaller than either), and the result's own size then says nothing about the
rounding: the terms' sizes do. So can the K products of one dot product: at a C of one or
a few outputs, sum_k a_ik b_kj can cancel to a tenth of its terms' size. The rounding of a
dot product scales with the root sum of squares of its products, sqrt(sum_k (a_ik b_kj)^2),
so check_gemm passes that too (`terms`, times |alpha|); over a C of many outputs max|C_ref|
is several times it and decides. (All zeros: the error is absolute.)

The bound. The error of an FP32 dot product of length K with uniform inputs grows like
sqrt(K) * u (u = 2^-24, unit roundoff) times the size of the terms, for any summation
order a GEMM uses (blocked, split, tree). We allow
    bound(K) = 16 * u * sqrt(K)      (4096: 6.1e-5;  1: 9.5e-7, floored at 1e-6)
which passes correct FP32 kernels by a wide margin (cuBLAS: 0.7e-6 to 4.3e-6 on the H200)
and fails TF32, whose 10-bit mantissa gives about 3e-4 at any K.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

U32 = 2.0**-24


def error_bound(K: int) -> float:
    return max(16 * U32 * math.sqrt(max(K, 1)), 1e-6)


#: precision="tf32" (rung 19) is not FP32: TF32 keeps 10 of FP32's 23 mantissa bits, about
#: 3e-4 at any K (docs/worklog.md, rung 19); its results are held to this instead
TF32_BOUND = 4e-3


def precision_bound(K: int, precision: str = "ieee") -> float:
    """The bound a result of depth K at `precision` is held to: FP32's for "ieee",
    "fp32_emulated" and "tf32x3", TF32_BOUND for "tf32"."""
    return TF32_BOUND if precision == "tf32" else error_bound(K)



def _f64(x):
    """x in float64, as a torch tensor (any device) if it is one, else a numpy array."""
    if hasattr(x, "double") and hasattr(x, "device"):
        return x.double()
    import numpy as np

    return np.asarray(x, dtype=np.float64)


def _size(x) -> int:
    return int(x.numel()) if hasattr(x, "numel") else int(x.size)


def _absmax(x) -> float:
    return float(abs(x).max()) if _size(x) else 0.0


def _nonfinite(x) -> int:
    """How many elements are NaN or Inf (NaN < inf is False, as is inf < inf)."""
    return int((~(abs(x) < math.inf)).sum()) if _size(x) else 0


def relative_error(C, ref, *, alpha_ab=None, beta_c=None, terms=None) -> float:
    """max|C - ref| over the largest of max|ref|, max|alpha_ab|, max|beta_c| and max|terms|
    (the module's metric; pass the terms alpha*A@B and beta*C0 when beta != 0, and the
    products' root sum of squares as `terms`); inf if C holds a NaN or an Inf. Torch
    tensors (any device) or numpy arrays; shapes broadcast."""
    C, ref = _f64(C), _f64(ref)
    if _nonfinite(C):
        return math.inf
    scale = max([_absmax(ref)] + [_absmax(_f64(t)) for t in (alpha_ab, beta_c, terms)
                                  if t is not None])
    err = _absmax(C - ref)
    return err / scale if scale > 0 else err


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    error: float  # relative_error: max|C - C_ref| / max(|alpha AB|, |beta C|, |C_ref|)
    bound: float
    reason: str = ""

    def as_dict(self) -> dict:
        return {"correct": self.ok, "error": self.error, "error_bound": self.bound,
                "check_note": self.reason}


def check_result(C, ref, K: int, *, alpha_ab=None, beta_c=None, terms=None) -> CheckResult:
    """`C` against the float64 `ref` of a product of depth `K`: relative_error within
    error_bound(K), and no NaN or Inf anywhere in C."""
    bound = error_bound(K)
    if bad := _nonfinite(_f64(C)):
        return CheckResult(False, math.inf, bound,
                           f"{bad} of {_size(C)} outputs are NaN/Inf (unwritten or wrong)")
    err = relative_error(C, ref, alpha_ab=alpha_ab, beta_c=beta_c, terms=terms)
    if not err <= bound:  # a NaN in ref fails too
        return CheckResult(False, err, bound, f"error {err:.2e} exceeds the FP32 bound "
                           f"{bound:.2e} for K={K}")
    return CheckResult(True, err, bound)


def uniform_matrices(rows: int, cols: int, *, col_major: bool = False, batch: int = 1,
                     device: str = "cuda", generator=None, pad: int = 0):
    """A rows x cols matrix (batch > 1: a batch x rows x cols stack) uniform in [-1, 1],
    stored row-major, or column-major: a transposed view of contiguous cols x rows storage,
    as BLAS's 'T' and a caller's `.mT` have it. pad > 0: a view into storage whose rows (or
    columns) are `pad` floats longer, the padding NaN (a read of it shows)."""
    import torch

    lead = (batch,) if batch > 1 else ()
    dims = (cols, rows) if col_major else (rows, cols)
    x = torch.rand(*lead, dims[0], dims[1] + pad, device=device, generator=generator) * 2 - 1
    if pad:
        x[..., dims[1]:] = float("nan")
        x = x[..., :dims[1]]
    return x.transpose(-2, -1) if col_major else x


def random_operands(M: int, N: int, K: int, *, beta: float = 0.0, generator=None,
                    batch: int = 1, layout: str = "NN", device: str = "cuda", pad: int = 0):
    """A (M x K), B (K x N) uniform in [-1, 1], each stored as `layout` says (first letter A,
    second B: N row-major, T column-major), each a stack of `batch` when batch > 1; C
    (row-major) NaN-poisoned if beta == 0, else random; every one padded by `pad`
    (uniform_matrices)."""
    def uniform(rows: int, cols: int, col_major: bool = False):
        return uniform_matrices(rows, cols, col_major=col_major, batch=batch, device=device,
                                generator=generator, pad=pad)

    A, B = uniform(M, K, layout[0] == "T"), uniform(K, N, layout[1] == "T")
    C = uniform(M, N)
    if beta == 0:
        C.fill_(float("nan"))
    return A, B, C


GemmFn = Callable[..., None]  # fn(A, B, C, alpha, beta) writes C in place


def check_gemm(fn: GemmFn, M: int, N: int, K: int, *, alpha: float = 1.0, beta: float = 0.0,
               generator=None, batch: int = 1, layout: str = "NN",
               device: str = "cuda", pad: int = 0) -> CheckResult:
    """Run `fn` once on fresh operands (random_operands: `batch` products, A and B stored
    as `layout` says, every matrix padded by `pad`) and compare against a float64
    reference of every product."""
    import torch

    A, B, C = random_operands(M, N, K, beta=beta, generator=generator, batch=batch,
                              layout=layout, device=device, pad=pad)
    a, b = A.double(), B.double()
    ab = alpha * (a @ b)
    rss = abs(alpha) * torch.sqrt((a * a) @ (b * b))  # each output's products' size
    bc = beta * C.double() if beta != 0 else None
    ref = ab + bc if bc is not None else ab
    fn(A, B, C, alpha, beta)
    if C.is_cuda:
        torch.cuda.synchronize()
    return check_result(C, ref, K, alpha_ab=ab, beta_c=bc, terms=rss)
