"""Python rung 4 — 1D blocktiling: each thread computes TM outputs of one column of C.

What changed from Python rung 3: a thread owns TM consecutive rows of one column of the
block's BM x BN tile, so the block is one-dimensional (BM/TM*BN threads) and the tiles are
rectangles, As BM x BK and Bs BK x BN, copied by loops that stride by THREADS. In the inner
loop one value of Bs, held in a register, serves TM multiply-adds. The TM accumulators are a
`cuda.local.array`, zeroed explicitly: a local array starts undefined (the course's kernels
5 and 6 left this out).

Mirrors CUDA rung 4 (kernels/ladder/04_blocktile_1d.cu). CUDA moves the A, B and C pointers to the
block's corner once; here the indices stay global (row0 + r, col0 + c), since Numba arrays
are indexed, not offset.

SIM_CONFIG, BM = BN = 16, BK = 4, TM = 8 (32 threads), for the simulator; the seed is
BM = BN = 64, BK = 8, TM = 8 (512 threads).
"""

from __future__ import annotations

from numba import cuda, float32

from sgemmlab import registry
from sgemmlab.pytrack import common

PY = registry.python_rung(4)  # this rung in the registry's Python track
TWIN, NAME, RUNG = PY.twin, PY.name, PY.rung
SIM_CONFIG = {"BM": 16, "BN": 16, "BK": 4, "TM": 8}


@common.per_config
def kernel(cfg):
    """The compiled kernel for `cfg`: sgemm(M, N, K, alpha, A, B, beta, C)."""
    BM, BN, BK, TM = cfg["BM"], cfg["BN"], cfg["BK"], cfg["TM"]
    THREADS = RUNG.threads(cfg)

    @cuda.jit
    def sgemm(M, N, K, alpha, A, B, beta, C):
        As = cuda.shared.array((BM, BK), float32)
        Bs = cuda.shared.array((BK, BN), float32)

        tid = cuda.threadIdx.x
        tc = tid % BN  # lanes of a warp: consecutive columns
        tr = tid // BN  # rows tr*TM .. tr*TM+TM-1 of the tile
        row0, col0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN

        acc = cuda.local.array(TM, float32)
        for i in range(TM):
            acc[i] = float32(0.0)
        for k0 in range(0, K, BK):
            # the block's threads copy both tiles, zero past the edges (common.copy_tile)
            common.copy_tile(As, A, row0, k0, M, K, tid, THREADS)
            common.copy_tile(Bs, B, k0, col0, K, N, tid, THREADS)
            cuda.syncthreads()
            for k in range(BK):
                b = Bs[k, tc]  # one load, reused TM times
                for i in range(TM):
                    acc[i] += As[tr * TM + i, k] * b
            cuda.syncthreads()  # the next copy must not overwrite tiles still being read
        for i in range(TM):
            common.store_c(C, row0 + tr * TM + i, col0 + tc, M, N, acc[i], alpha, beta)

    return sgemm


# the twin's launch geometry, and C = alpha * A @ B + beta * C at `cfg` (None: its seed)
grid, block, launch = common.entry_points(RUNG, kernel)
