"""`sgemmlab ladder`: every rung at its tuned configuration, checked, then timed against
cuBLAS in the same run; a scoreboard, a results JSON and a bar chart."""

from __future__ import annotations

from pathlib import Path

from .. import registry
from ..runtime.device import gpu_info
from . import results
from .measure import QUICK, L2Flusher, Method
from .runner import measure_shape, progress_bar, rung_candidate


def run(shapes: list[tuple[int, int, int]], rungs: list[registry.Rung] | None = None,
        method: Method = QUICK, show_progress: bool = True) -> tuple[dict, Path]:
    """Measure the ladder at each shape; write results/<gpu>/ladder-*.json; return both."""
    gpu = gpu_info()
    rungs = list(rungs or registry.RUNGS)
    flush = L2Flusher(gpu.l2_bytes)
    out = results.new_run("ladder", gpu, {**method.as_dict(), "l2_flush_bytes": flush.nbytes})
    peak = out["ceilings"]["ffma_tflops"]
    with progress_bar(show_progress) as progress:
        candidates = [rung_candidate(r, r.default(gpu.name)) for r in rungs]
        for M, N, K in shapes:
            out["records"] += measure_shape(M, N, K, candidates, method, flush, peak,
                                            progress)
    tag = "_".join(f"{M}x{N}x{K}" for M, N, K in shapes)
    path = results.write(out, gpu.slug, f"ladder-{tag}-{results.stamp()}")
    return out, path
