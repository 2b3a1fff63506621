"""Correctness gate: every kernel is checked against float64 before anything is timed.

Fresh random inputs each call (uniform in [-1, 1]: never zeros, which hide unwritten output);
the output is poisoned with NaN beforehand when beta == 0, so an element the kernel did not
write fails; any NaN or Inf fails.

The bound. The error of an FP32 dot product of length K with uniform inputs grows like
sqrt(K) * u (u = 2^-24, unit roundoff) times the size of the terms, for any summation
order a GEMM uses (blocked, split, tree). We normalise by the largest of max|alpha A B|,
max|beta C| and max|C_ref| (with beta != 0 the two can cancel in a small C: at 1 x 1, alpha AB + beta C can
be a hundred times smaller than either, and its size then says nothing about the rounding;
for beta == 0 this is max|C_ref|) and allow
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


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    error: float  # max|C - C_ref| / max(|alpha AB|, |beta C|, |C_ref|), in float64
    bound: float
    reason: str = ""

    def as_dict(self) -> dict:
        return {"correct": self.ok, "error": self.error, "error_bound": self.bound,
                "check_note": self.reason}


def random_operands(M: int, N: int, K: int, *, beta: float = 0.0, generator=None):
    """A (M x K), B (K x N) uniform in [-1, 1]; C NaN-poisoned if beta == 0, else random."""
    import torch

    def uniform(*shape):
        return torch.rand(*shape, device="cuda", generator=generator) * 2 - 1

    A, B = uniform(M, K), uniform(K, N)
    C = torch.full((M, N), float("nan"), device="cuda") if beta == 0 else uniform(M, N)
    return A, B, C


GemmFn = Callable[..., None]  # fn(A, B, C, alpha, beta) writes C in place


def check_gemm(fn: GemmFn, M: int, N: int, K: int, *, alpha: float = 1.0, beta: float = 0.0,
               generator=None) -> CheckResult:
    """Run `fn` once on fresh operands and compare against a float64 reference."""
    import torch

    A, B, C = random_operands(M, N, K, beta=beta, generator=generator)
    ref = alpha * (A.double() @ B.double())
    # the error is measured against the largest of alpha AB, beta C and their sum: the sum
    # can cancel to almost nothing in a small C (1 x 1), and its size says nothing then
    scale = float(ref.abs().max())
    if beta != 0:
        scale = max(scale, float((beta * C.double()).abs().max()))
        ref += beta * C.double()
        scale = max(scale, float(ref.abs().max()))
    fn(A, B, C, alpha, beta)
    torch.cuda.synchronize()
    bound = error_bound(K)
    if not bool(torch.isfinite(C).all()):
        bad = int((~torch.isfinite(C)).sum())
        return CheckResult(False, math.inf, bound,
                           f"{bad} of {C.numel()} outputs are NaN/Inf (unwritten or wrong)")
    err = float((C.double() - ref).abs().max()) / (scale if scale > 0 else 1.0)
    if err > bound:
        return CheckResult(False, err, bound, f"error {err:.2e} exceeds the FP32 bound "
                           f"{bound:.2e} for K={K}")
    return CheckResult(True, err, bound)
