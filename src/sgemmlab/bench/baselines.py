"""What sgemmlab is measured against. cuBLAS FP32 through torch, with TF32 switched off."""

from __future__ import annotations

from typing import Callable


def fp32_only() -> None:
    """Make torch's matmul plain FP32: no TF32 tensor cores anywhere."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def cublas_fp32(A, B, C) -> Callable[[], None]:
    """A launch of cuBLAS SGEMM (torch.matmul, TF32 off) writing C = A @ B."""
    import torch

    fp32_only()
    return lambda: torch.matmul(A, B, out=C)


def cublas_gemm(A, B, C, alpha: float, beta: float) -> None:
    """cuBLAS with BLAS semantics, for the correctness gate (torch.addmm, TF32 off)."""
    import torch

    fp32_only()
    if beta == 0:
        torch.matmul(A, B, out=C)
        C.mul_(alpha)
    else:
        C.copy_(torch.addmm(C, A, B, beta=beta, alpha=alpha))
