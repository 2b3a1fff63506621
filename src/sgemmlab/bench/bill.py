"""The bill of a kernel: how many FLOPs it performs per byte it moves, from its tiling alone.

This is the x coordinate of a kernel on the roofline; the count itself lives in
sgemmlab.anatomy.bill (the whole bill of every rung), this module keeps the report's names.
It is a model, not a measurement: it counts the traffic of one block tile between DRAM and
the SM and assumes nothing is reused across blocks through the L2 (which makes it a lower
bound on the intensity a profiler sees).

A block computing a BM x BN tile of C walks K in steps of BK; each step reads a BM x BK
slice of A and a BK x BN slice of B (4 bytes a float) and performs 2*BM*BN*BK FLOPs:

    intensity = 2*BM*BN*BK / ((BM + BN)*BK*4)  FLOP/byte  (= BM*BN / (2*(BM + BN)))

Rungs 1 and 2 do not tile: every FFMA (2 FLOPs) loads one float of A and one of B from
global memory, 8 bytes, whatever the block shape: 0.25 FLOP/byte.
"""

from __future__ import annotations

from ..registry import Config, Rung

BYTES_PER_FLOAT = 4


def block_tile_intensity(rung: Rung, config: Config) -> float:
    """FLOP per DRAM byte of one block tile of `rung` at `config` (see the module doc).
    Counted by sgemmlab.anatomy.bill from the kernel's index arithmetic: one implementation."""
    from ..anatomy.bill import count

    return count(rung, config).intensity


def minimal_intensity(M: int, N: int, K: int) -> float:
    """The most a GEMM can reach: A and B read once, C written once.
    Used for kernels without a configuration here (cuBLAS, Triton)."""
    return 2 * M * N * K / (BYTES_PER_FLOAT * (M * K + K * N + M * N))
