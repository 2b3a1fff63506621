"""The compiled variants of a rung beside its configuration: the macros that pick float4
global accesses, column-major operands, beta's term from a source of its own, and C written
element by element (kernels/common.cuh, kernels/epilogue.cuh). Shared by the launchers
(runtime/launch.py, runtime/hopper.py) and the builders (prebuild, the wheel's bundle)."""

from __future__ import annotations

from ..registry import Rung

#: The kinds of source an epilogue reads beta's term from (kernels/epilogue.cuh's
#: SGEMM_SOURCE): none (C), a matrix of its own row stride, one row repeated (a bias).
NO_SOURCE, SOURCE_MATRIX, SOURCE_BIAS = 0, 1, 2


def source_kind(source: tuple[int, int] | None) -> int:
    """The SGEMM_SOURCE a launch reading `source` ((pointer, row stride) or None) takes."""
    return NO_SOURCE if source is None else SOURCE_BIAS if source[1] == 0 else SOURCE_MATRIX


def variant_macros(rung: Rung, vec4: bool, trans_a: bool = False, trans_b: bool = False,
                   source: int = NO_SOURCE, store4: bool = True) -> dict[str, int]:
    """The macros that pick a compiled variant: float4 globals, column-major A or B, beta's
    term from a source X of its own (kernels/epilogue.cuh's SGEMM_SOURCE: `source` is
    SOURCE_MATRIX or SOURCE_BIAS; True means SOURCE_MATRIX); store4 False with vec4: C
    (and X) element by element (the "store4" feature, common.cuh's SGEMM_STORE4)."""
    out = {"SGEMM_VEC4": 1} if rung.vectorized and vec4 else {}
    if trans_a:
        out["SGEMM_TA"] = 1
    if trans_b:
        out["SGEMM_TB"] = 1
    if source:
        out["SGEMM_SOURCE"] = int(source)
    if "SGEMM_VEC4" in out and not store4:  # A and B by float4, C element by element
        out["SGEMM_STORE4"] = 0
    return out
