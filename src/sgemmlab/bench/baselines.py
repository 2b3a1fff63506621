"""What sgemmlab is measured against.

    cublas        cuBLAS SGEMM through torch, TF32 off: every ratio is against this one;
    cublas_tf32   cuBLAS on TF32 tensor cores: NOT FP32 (10-bit mantissa), shown for scale;
    tf32x3_torch  the composed 3xTF32 anchor of issue 14: three cuBLAS TF32 products of a
                  truncating split (big = x with its low 13 bits cleared, small = x - big),
                  small*big + big*small + big*big accumulated in C by addmm: what a user
                  can build from torch alone (about 4x SGEMM's error);
    triton        a tiled Triton matmul with IEEE FP32 dots, autotuned (triton_matmul.py).

cuBLAS (both) computes every problem the harness measures: batches (torch.matmul on 3-D
tensors: cuBLAS's batched GEMM) and column-major operands (transposed views). The Triton
kernel computes one product of row-major operands; it refuses the others, and their records
say so. A baseline whose package is missing is skipped with a note, never an error.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import Callable

from .candidates import Candidate

#: Extra baselines by command-line name -> the name their records carry.
RECORD_NAMES = {"tf32": "cublas_tf32", "triton": "triton", "tf32x3": "tf32x3_torch"}


class BaselineUnavailable(RuntimeError):
    """A baseline cannot run here (its package is missing); the message says why."""


def fp32_only() -> None:
    """Make torch's matmul plain FP32: no TF32 tensor cores anywhere."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


@contextmanager
def tf32_matmul():
    """TF32 for torch's matmul inside the block only. The flag is process-wide, so it is
    switched back off on the way out, even on error: the FP32 baseline timed next must
    never run on tensor cores."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        yield
    finally:
        fp32_only()


def tf32_is_on() -> bool:
    """Whether torch's matmul may use TF32 right now (it must not, outside tf32_matmul)."""
    import torch

    return bool(torch.backends.cuda.matmul.allow_tf32)


def cublas_fp32(A, B, C) -> Callable[[], None]:
    """A launch of cuBLAS SGEMM (torch.matmul, TF32 off) writing C = A @ B."""
    import torch

    fp32_only()
    return lambda: torch.matmul(A, B, out=C)


def cublas_tf32(A, B, C) -> Callable[[], None]:
    """A launch of cuBLAS on TF32 tensor cores writing C = A @ B (flag set and reset around
    each call)."""
    import torch

    def launch() -> None:
        with tf32_matmul():
            torch.matmul(A, B, out=C)

    return launch


def cublas_gemm(A, B, C, alpha: float, beta: float, tf32: bool = False) -> None:
    """cuBLAS with BLAS semantics, for the correctness gate (torch.addmm, or torch.baddbmm
    for a batch; TF32 off unless asked for)."""
    import torch

    fp32_only()
    with tf32_matmul() if tf32 else nullcontext():
        if beta == 0:
            torch.matmul(A, B, out=C)
            C.mul_(alpha)
        else:
            update = torch.baddbmm if C.dim() == 3 else torch.addmm
            C.copy_(update(C, A, B, beta=beta, alpha=alpha))


def tf32_split(x):
    """(big, small) of a float32 tensor: big keeps the sign, exponent and top 10 mantissa
    bits (TF32's, the low 13 cleared: a truncation), small = x - big (exact in FP32)."""
    import torch

    big = (x.contiguous().view(torch.int32) & -8192).view(torch.float32).view_as(x)
    return big, x - big


def tf32x3_torch_gemm(A, B, C, alpha: float = 1.0, beta: float = 0.0) -> None:
    """C = alpha A @ B + beta C by the composed anchor: A and B split (tf32_split), then
    three cuBLAS TF32 products summed into C, smallest terms first (torch.addmm / baddbmm
    with beta = 1 after the first). Runs with TF32 on for its products only."""
    import torch

    a_big, a_small = tf32_split(A)
    b_big, b_small = tf32_split(B)
    batched = C.dim() == 3
    update = torch.baddbmm if batched else torch.addmm
    with tf32_matmul():
        if batched:  # baddbmm wants two 3-D operands: a 2-D one is repeated
            n = C.shape[0]
            a_big, a_small, b_big, b_small = (t if t.dim() == 3 else t.expand(n, *t.shape)
                                              for t in (a_big, a_small, b_big, b_small))
        first = update(C, a_small, b_big, beta=beta, alpha=alpha) if beta != 0 else None
        if first is None:
            torch.matmul(a_small, b_big, out=C)
            if alpha != 1:
                C.mul_(alpha)
        else:
            C.copy_(first)
        C.copy_(update(C, a_big, b_small, alpha=alpha))
        C.copy_(update(C, a_big, b_big, alpha=alpha))


def tf32x3_torch(A, B, C) -> Callable[[], None]:
    """A launch of the composed anchor writing C = A @ B; the splits are inside the call (a
    user's anchor splits every time)."""
    import torch

    if not (C.dim() == 2 and A.dim() == 2 and B.dim() == 2):
        return lambda: tf32x3_torch_gemm(A, B, C)

    def launch() -> None:
        a_big, a_small = tf32_split(A)
        b_big, b_small = tf32_split(B)
        with tf32_matmul():
            torch.matmul(a_small, b_big, out=C)
            torch.addmm(C, a_big, b_small, out=C)
            torch.addmm(C, a_big, b_big, out=C)

    return launch


def _one_row_major_product(p) -> str | None:
    if p.plain:
        return None
    return (f"the Triton baseline computes one product of row-major operands, not {p} "
            "(a batch, a column-major operand or padded rows)")


def candidate(name: str) -> Candidate:
    """The Candidate for an extra baseline ('tf32' or 'triton').
    Raises BaselineUnavailable when its package is not installed."""
    if name == "tf32":
        return Candidate(RECORD_NAMES[name],
                         lambda A, B, C, alpha, beta: cublas_gemm(A, B, C, alpha, beta,
                                                                  tf32=True),
                         cublas_tf32, fp32=False,
                         info={"note": "TF32 tensor cores: NOT FP32, never gated"})
    if name == "tf32x3":
        return Candidate(RECORD_NAMES[name], tf32x3_torch_gemm, tf32x3_torch, fp32=False,
                         info={"note": "the composed anchor: three cuBLAS TF32 products of a "
                                       "truncating split (about 4x SGEMM's error)"})
    if name == "triton":
        try:
            from . import triton_matmul
        except ImportError as exc:
            raise BaselineUnavailable(f"triton baseline skipped: {exc}") from None
        return Candidate(RECORD_NAMES[name], triton_matmul.gemm, triton_matmul.bind,
                         info={"note": "tl.dot(input_precision='ieee'), autotuned"},
                         refuses=_one_row_major_product)
    raise KeyError(f"unknown baseline {name!r}")
