"""The bill of a kernel: how many FLOPs it performs per byte it moves, from its tiling alone.

This is the x coordinate of a kernel on the roofline. It is a model, not a measurement: it
counts the traffic of one block tile between DRAM and the SM and assumes nothing is reused
across blocks through the L2 (which makes it a lower bound on the intensity a profiler sees).

A block computing a BM x BN tile of C walks K in steps of BK; each step reads a BM x BK
slice of A and a BK x BN slice of B (4 bytes a float) and performs 2*BM*BN*BK FLOPs:

    intensity = 2*BM*BN*BK / ((BM + BN)*BK*4)  FLOP/byte  (= BM*BN / (2*(BM + BN)))

Rungs 1 and 2 do not tile: every FFMA (2 FLOPs) loads one float of A and one of B from
global memory, 8 bytes, whatever the block shape: 0.25 FLOP/byte.
"""

from __future__ import annotations

from ..registry import Config, Rung

BYTES_PER_FLOAT = 4
UNTILED_INTENSITY = 2 / (2 * BYTES_PER_FLOAT)  # 2 FLOPs per 8 bytes loaded


def block_tile_intensity(rung: Rung, config: Config) -> float:
    """FLOP per DRAM byte of one block tile of `rung` at `config` (see the module doc)."""
    if rung.number <= 2:
        return UNTILED_INTENSITY
    BM, BN = rung.tile(config)
    BK = config.get("BK", config.get("BS"))  # rung 3 steps K by its square tile side
    return 2 * BM * BN * BK / ((BM + BN) * BK * BYTES_PER_FLOAT)


def minimal_intensity(M: int, N: int, K: int) -> float:
    """The most a GEMM can reach: A and B read once, C written once.
    Used for kernels without a configuration here (cuBLAS, Triton)."""
    return 2 * M * N * K / (BYTES_PER_FLOAT * (M * K + K * N + M * N))
