"""`sgemmlab run`: one rung once, checked against float64 — the thing to put under `ncu` or
`compute-sanitizer` (e.g. `ncu -k sgemm sgemmlab run -k 6 --size 4096`)."""

from __future__ import annotations

from ... import api, registry
from ...registry import Rung
from ..check import check_gemm

#: What a TF32 product's error may be (10 mantissa bits: about 1e-4 relative, measured).
TF32_BOUND = 1e-2


def run_once(rung: Rung, cfg: dict, shape: tuple[int, int, int], alpha: float = 1.0,
             beta: float = 0.0, repeat: int = 0) -> str:
    """Run `rung` at `cfg` on fresh operands 1 + `repeat` times; one line says what
    happened. A single run is checked against float64 (RuntimeError with that line when it
    fails); repeated in-place updates with beta != 0 change C, so repeats are only run."""
    M, N, K = shape

    def gemm(A, B, C, a, b):
        for _ in range(1 + repeat):
            api.sgemm(A, B, C, alpha=a, beta=b, out=C, kernel=rung.label, config=cfg,
                      precision=rung.precision)

    head = f"{rung.label} {registry.config_key(cfg)} {M}x{N}x{K}"
    if repeat:
        import torch

        A, B = torch.rand(M, K, device="cuda"), torch.rand(K, N, device="cuda")
        C = torch.rand(M, N, device="cuda")
        gemm(A, B, C, alpha, beta)
        torch.cuda.synchronize()
        return f"{head}: ran {1 + repeat}x"
    res = check_gemm(gemm, M, N, K, alpha=alpha, beta=beta)
    if rung.precision == "tf32":  # NOT FP32: judged by TF32's own size of error
        line = (f"{head}: error {res.error:.2e} (TF32, NOT FP32: FP32's bound is "
                f"{res.bound:.1e}, TF32's {TF32_BOUND:.0e})")
        if not res.error <= TF32_BOUND:  # NaN fails too
            raise RuntimeError(line + " FAILED")
        return line
    line = (f"{head}: error {res.error:.2e} (bound {res.bound:.1e}) "
            f"{'ok' if res.ok else 'FAILED: ' + res.reason}")
    if not res.ok:
        raise RuntimeError(line)
    return line
