"""The ladder's single source of truth: what every rung is and which configurations are legal.

One module per track: `ladder` (rungs 1-14, kernels/ladder/), `family` (15-18, the memory-bound
and small products), `tensor` (19-20 and 26, Hopper's tensor cores), `history` (21), `postcompile`
(22-25: rungs 13 and 14 with the operand-order pass and the branch-free steady loop) and
`python` (the Numba track); `core` says what a rung is. Look any rung up with `rung()`.

Each rung is described once, here: its source file, its configuration space (the compile-time
constants it takes, with the values worth searching), the rules that make a configuration
legal, and its launch geometry. The runner, the tests, the tuner and the CLI read this module;
nothing else hard-codes a tile size.

Glossary (used the same way in every kernel and every docstring):
    M, N, K     C is M x N, the reduction runs over K.
    BS          rungs 1-3: side of the square thread block / tile.
    BM, BN, BK  the block tile: a thread block computes a BM x BN tile of C, walking K in
                steps of BK.
    TM, TN      the thread tile: each thread accumulates TM x TN outputs in registers
                (rung 21: TM rows of one column, so its block tile is TM x BN).
    WM, WN      the warp tile: each warp owns a WM x WN piece of the block tile (rung 10),
                computed in WMITER x WNITER sub-tiles.
    PAD         extra floats at the end of every row of the transposed A tile in shared memory.
    STAGES      rungs 11-14: shared-memory buffers in the cp.async ring.
    TRANSPOSE_A, REGPF  rung 12's switches: A stored [k][m] in shared memory; fragments
                double-buffered in registers.
    SPLIT, FIXUP  rung 14: the decomposition (0 Stream-K, 1 data-parallel, s >= 2 split-K in
                s parts) and how partial sums meet (0 fixed order, 1 atomic into a
                workspace tile, 2 atomic into C itself). Rungs 15, 16, 18: K in SPLIT
                parts, 0 meaning "as many as fill the GPU" (runtime/decompose.py),
                fixed-order fix-up.
    RM, RN, WARPS, UNROLL  rungs 15-16: rows (columns) of C per block, warps per block,
                float4 per lane in flight.
    GROUP_M     rungs 19-20 and 26: row-tiles walked together by the persistent grid (L2
                reuse); STAGES there is the depth of the TMA ring.
    CLUSTER     rung 26: 2 pairs neighbouring blocks, which share B's tile (TMA multicast).
    PROMOTE, INFLIGHT, TAIL, ORDER  rung 20: k-tiles in a run of the tensor core's sum
                before it is added into FP32 registers; a k-tile's products left in flight
                while the next is split; the last wave (and few tiles) split along K; which
                products the tensor core adds first (kernels/hopper/20_3xtf32_wgmma.cu).

Legality is decided here, in Python, before anything compiles. The kernels repeat the
structural rules as static_asserts, and the tests check both directions: every illegal
configuration is refused by the compiler, and legal ones compile. What is guaranteed of
the legal ones, exactly: tools/compile_sweep.py compiles every distinct legal build (both
alignment variants) and results/compile/ keeps what ptxas said of each; every build of
every rung compiles, and none spills or has a stack frame but those data/spills.json lists
(`known_spills`: where the register rule is an estimate, rungs 13, 14 and 16; the seeds and
tuned defaults are never among them). tests/test_compile.py holds the newest sweep to this
registry, these sources and that list, and compiles a covering sample of every space (both
variants, every layout) in each CI run.
"""

from __future__ import annotations

from .core import (
    FEATURES,
    MAX_REGISTERS_PER_BLOCK,
    MAX_REGISTERS_PER_THREAD,
    MAX_STATIC_SMEM,
    MAX_THREADS_PER_BLOCK,
    MAY_BE_ZERO,
    PRECISIONS,
    Config,
    Rule,
    Rung,
    config_key,
    covering_sample,
    known_spills,
    parse_config,
    tuned_defaults,
    tuned_defaults_why,
)
from .family import FAMILY, MEMBOUND, SMALL, SMALL_MAX_M, TINY_K_MAX_N
from .history import HISTORY
from .ladder import RUNGS
from .postcompile import ORDERED, POST_ARCHS, POST_MACROS, STAND_INS
from .python import PYTHON, PyRung, python_rung
from .tensor import TENSOR, TILE_K, TILE_M

__all__ = [
    "ALL", "FAMILY", "FEATURES", "HISTORY", "MAX_REGISTERS_PER_BLOCK",
    "MAX_REGISTERS_PER_THREAD", "MAX_STATIC_SMEM", "MAX_THREADS_PER_BLOCK", "MAY_BE_ZERO",
    "MEMBOUND", "ORDERED", "POST_ARCHS", "POST_MACROS", "PRECISIONS", "PYTHON", "RUNGS",
    "SMALL", "SMALL_MAX_M", "STAND_INS", "TENSOR", "TILE_K", "TILE_M", "TINY_K_MAX_N",
    "TWIN_OF", "Config", "PyRung", "Rule", "Rung", "UnknownRung", "best", "config_key",
    "covering_sample", "known_spills", "parse_config", "python_rung", "rung", "tuned_defaults",
    "tuned_defaults_why",
]

#: The FP32 rungs dispatch chooses among: the ladder and the family.
ALL: tuple[Rung, ...] = RUNGS + FAMILY
_LOOKED_UP = tuple(sorted(ALL + TENSOR + HISTORY + ORDERED,  # every rung `rung()` finds
                          key=lambda r: r.number))
_BY_NAME = {r.name: r for r in _LOOKED_UP} | {r.label: r for r in _LOOKED_UP} | {
    str(r.number): r for r in _LOOKED_UP}

#: base label -> the twin dispatch runs in its place on POST_ARCHS, at the table's
#: configuration of the base (postcompile.STAND_INS: rungs 22 and 23).
TWIN_OF = {_BY_NAME[str(t.base)].label: t.label for t in ORDERED if t.number in STAND_INS}


class UnknownRung(KeyError):
    """A rung name or number no track has. A KeyError whose message prints as written, not
    as the repr KeyError gives it."""

    def __str__(self) -> str:
        return str(self.args[0])


def rung(key: str | int) -> Rung:
    """Look a rung up by number (10), slug ('warptiling') or label ('10_warptiling')."""
    try:
        return _BY_NAME[str(key)]
    except KeyError:
        raise UnknownRung(f"unknown kernel {key!r}: the rungs are numbered "
                          f"{_LOOKED_UP[0].number}-{_LOOKED_UP[-1].number}; "
                          "`sgemmlab info` lists them") from None


def best(arch: str | None = None) -> Rung:
    """The rung `--kernel best` means, and `matmul(config=...)` without `kernel`: the top of
    the FP32 ladder for a GPU of `arch`. On POST_ARCHS (sm_90), where the post-compile
    passes were measured, that is rung 24 (rung 14's Stream-K with the branch-free steady
    loop and the operand-order pass: what dispatch runs for large products there); on any
    other GPU, or when the GPU is not known, rung 14. (`matmul` with neither asks the
    dispatcher.)"""
    top = max(RUNGS, key=lambda r: r.number)
    if arch in POST_ARCHS:
        return next(t for t in ORDERED if t.base == top.number and t.defines)
    return top
