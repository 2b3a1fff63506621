"""What the harness measures: a `Candidate` is a GEMM under a name, with a way to check it
and a way to launch it, and a way to say which problems it cannot compute. runner.py builds
the rungs' candidates, baselines.py the baselines'; both import this module and not each
other.

Operands reach `gemm` and `bind` as torch tensors in the problem's batch and layout (2-D, or
3-D for a batch; A and B row-major or transposed views, C row-major): a candidate reads
what it is given from the tensors' shapes and strides."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from .check import GemmFn
from .problems import Problem


@dataclass
class Candidate:
    kernel: str  # the name results files use: a rung label, "cublas", "triton", ...
    gemm: GemmFn  # fn(A, B, C, alpha, beta): for the correctness check
    bind: Callable[[Any, Any, Any], Callable[[], None]]  # (A, B, C) -> launch of C = A @ B
    config: dict | None = None
    info: dict = field(default_factory=dict)  # registers, notes: copied into the record
    fp32: bool = True  # False for TF32 baselines: their check is reported, never gating
    #: problem -> fields of that problem's record (its config, what dispatch chose, a
    #: note...), for candidates that are a different kernel at each problem ("auto")
    per_shape: Callable[[Problem], dict] | None = None
    #: problem -> why this candidate cannot compute it (a layout or batch it does not read,
    #: a shape outside its domain), or None; the harness records the reason, never a crash
    refuses: Callable[[Problem], str | None] | None = None
