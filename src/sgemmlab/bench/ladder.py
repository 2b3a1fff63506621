"""`sgemmlab ladder`: every rung at its tuned configuration (the climb, 1-14, and the 2008
rung, 21), checked, then timed against cuBLAS in the same run (runner.run: the same loop as
`sgemmlab bench`).

`--track numba` measures the Python track (registry.PYTHON) instead: each Python rung beside
its CUDA C++ twin at the twin's configuration on this GPU, and Python rung 7 at every
configuration of its search (pytrack/r07_warptiling.CANDIDATES, the course's kernel 7),
all paired against cuBLAS in one run, so each Python/CUDA ratio comes from one file."""

from __future__ import annotations

from pathlib import Path

from .. import registry
from ..runtime.device import gpu_info
from . import runner
from .candidates import Candidate
from .measure import QUICK, Method
from .tables import LiveBoard

TRACKS = ("cuda", "numba")


def track_candidates(gpu_name: str, pys: list[registry.PyRung] | None = None
                     ) -> list[Candidate]:
    """The Python track's candidates: per Python rung its CUDA twin at the twin's default
    for `gpu_name`, then the Python rung at that configuration and at the other
    configurations of its search, if it has one."""
    from ..pytrack import module
    from .pytrack import python_candidate

    out = []
    for py in pys or registry.PYTHON:
        cfg = py.rung.default(gpu_name)
        out.append(runner.rung_candidate(py.rung, cfg))
        searched = [dict(c) for c in getattr(module(py), "CANDIDATES", ())]
        for c in [cfg] + [c for c in searched if c != cfg]:
            out.append(python_candidate(py, c))
    return out


def run(shapes: list[tuple[int, int, int]], rungs: list[registry.Rung] | None = None,
        method: Method = QUICK, live: bool = True, track: str = "cuda",
        pys: list[registry.PyRung] | None = None) -> tuple[dict, Path]:
    """Measure the ladder (or the Python track) at each shape; write
    results/<gpu>/ladder/*.json (ladder-numba-*.json); return both."""
    if track not in TRACKS:
        raise ValueError(f"unknown track {track!r}; choose from {', '.join(TRACKS)}")
    gpu = gpu_info()
    if track == "numba":
        candidates = track_candidates(gpu.name, pys)
    else:
        candidates = [runner.rung_candidate(r, r.default(gpu.name))
                      for r in (rungs or registry.RUNGS + registry.HISTORY)]
    tag = "_".join(f"{M}x{N}x{K}" for M, N, K in shapes)
    kind = "ladder" if track == "cuda" else "ladder-numba"
    if not live:
        return runner.run(kind, tag, shapes, candidates, method)
    what = "the ladder" if track == "cuda" else "the Python track beside its CUDA twins"
    title = f"{gpu.name}: {what} vs cuBLAS FP32 (TF32 off)"
    with LiveBoard(title, runner.new_progress()) as board:
        return runner.run(kind, tag, shapes, candidates, method, board=board)
