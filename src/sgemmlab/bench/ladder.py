"""`sgemmlab ladder`: every rung at its tuned configuration, checked, then timed against
cuBLAS in the same run (runner.run: the same loop as `sgemmlab bench`)."""

from __future__ import annotations

from pathlib import Path

from .. import registry
from ..runtime.device import gpu_info
from . import runner
from .measure import QUICK, Method
from .tables import LiveBoard


def run(shapes: list[tuple[int, int, int]], rungs: list[registry.Rung] | None = None,
        method: Method = QUICK, live: bool = True) -> tuple[dict, Path]:
    """Measure the ladder at each shape; write results/<gpu>/ladder-*.json; return both."""
    gpu = gpu_info()
    candidates = [runner.rung_candidate(r, r.default(gpu.name))
                  for r in (rungs or registry.RUNGS)]
    tag = "_".join(f"{M}x{N}x{K}" for M, N, K in shapes)
    if not live:
        return runner.run("ladder", tag, shapes, candidates, method)
    title = f"{gpu.name}: the ladder vs cuBLAS FP32 (TF32 off)"
    with LiveBoard(title, runner.new_progress()) as board:
        return runner.run("ladder", tag, shapes, candidates, method, board=board)
