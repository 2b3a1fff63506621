"""The Python track in the harness: a Numba rung as a Candidate, checked and timed like any.

A Python rung (registry.PYTHON, sgemmlab/pytrack/) runs on torch's operands through their
CUDA array interface (no copy) on torch's current stream, so the same loop as the CUDA rungs
checks it against float64 and times it paired with cuBLAS (runner.measure_shape). Its record
is named by its label (py03_smem) and says which CUDA rung it mirrors ("twin"), so a ladder
run of both tracks pairs each Python rung with its twin at the same configuration.

What the time includes: Numba's launch, which types every argument in Python before it
calls the driver (tens of microseconds, nothing beside a 4096^3 product's milliseconds, but
not nothing at small shapes: `sgemmlab ladder --track numba` measures large squares).
"""

from __future__ import annotations

from .. import registry
from .candidates import Candidate
from .problems import Problem


def python_candidate(py: registry.PyRung, config: registry.Config | None = None) -> Candidate:
    """Python rung `py` at `config` (None: its twin's seed), compiled now for the one
    signature launches use (pytrack.build.SIGNATURE) so its registers are known."""
    import numpy as np

    from ..pytrack import build, common, module  # (numba after its numpy shim)

    cuda = common.cuda

    mod = module(py)
    cfg = common.checked(py.rung, config)
    kern = mod.kernel(cfg)
    compiled = kern.compile(build.SIGNATURE)

    def launcher(A, B, C, alpha: float, beta: float):
        import torch

        M, K = A.shape
        N = B.shape[1]
        stream = cuda.external_stream(torch.cuda.current_stream().cuda_stream)
        a, b, c = (cuda.as_cuda_array(x) for x in (A, B, C))
        grid, block = mod.grid(cfg, M, N), mod.block(cfg)
        al, be = np.float32(alpha), np.float32(beta)

        def launch() -> None:
            kern[grid, block, stream](M, N, K, al, a, b, be, c)

        return launch

    def gemm(A, B, C, alpha, beta):
        launcher(A.contiguous(), B.contiguous(), C, alpha, beta)()

    def refuses(p: Problem) -> str | None:
        if p.layout != "NN" or p.batch > 1:
            return (f"{py.label} computes one product of row-major matrices (the Python "
                    "track has no layouts or batches)")
        return None

    info = {"registers": _attr(compiled, "regs_per_thread"),
            "spill_bytes": _attr(compiled, "local_mem_per_thread"),
            "smem_bytes": _attr(compiled, "shared_mem_per_block"),
            "threads": py.rung.threads(cfg), "track": "numba", "twin": py.rung.label}
    return Candidate(py.label, gemm, lambda A, B, C: launcher(A, B, C, 1.0, 0.0), dict(cfg),
                     info, refuses=refuses)


def _attr(compiled, name: str) -> int:
    """A resource Numba reports for the compiled kernel (-1 where this version has none)."""
    try:
        return int(getattr(compiled, name))
    except (AttributeError, TypeError, ValueError):
        return -1
