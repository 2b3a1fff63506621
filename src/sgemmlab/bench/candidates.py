"""What the harness measures: a `Candidate` is a GEMM under a name, with a way to check it
and a way to launch it. runner.py builds the rungs' candidates, baselines.py the baselines';
both import this module and not each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from .check import GemmFn


@dataclass
class Candidate:
    kernel: str  # the name results files use: a rung label, "cublas", "triton", ...
    gemm: GemmFn  # fn(A, B, C, alpha, beta): for the correctness check
    bind: Callable[[Any, Any, Any], Callable[[], None]]  # (A, B, C) -> launch of C = A @ B
    config: dict | None = None
    info: dict = field(default_factory=dict)  # registers, notes: copied into the record
    fp32: bool = True  # False for TF32 baselines: their check is reported, never gating
    #: (M, N, K) -> fields of that shape's record (its config, what dispatch chose...), for
    #: candidates that are a different kernel at each shape ("auto")
    per_shape: Callable[[int, int, int], dict] | None = None
