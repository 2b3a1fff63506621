"""Python rung 5 — 2D blocktiling: each thread computes a TM x TN patch of C as outer products.

What changed from Python rung 4: the thread's TM x 1 strip becomes a TM x TN patch, so
(BM/TM) * (BN/TN) threads cover the block tile. At each step of k a thread copies the TM
values of As it needs into regM and the TN values of Bs into regN (local arrays: registers
once compiled), then does the TM * TN multiply-adds of their outer product: each value of A
is reused TN times, each value of B TM times.

Mirrors CUDA rung 5 (kernels/ladder/05_blocktile_2d.cu); indices stay global as in Python rung 4,
and the accumulators are zeroed by a loop where CUDA writes `= {}`.

SIM_CONFIG, BM = 16, BN = 32, BK = 4, TM = TN = 4 (32 threads), for the simulator; the seed
is BM = BN = 128, BK = 8, TM = TN = 8 (256 threads).
"""

from __future__ import annotations

from numba import cuda, float32

from sgemmlab import registry
from sgemmlab.pytrack import common

PY = registry.python_rung(5)  # this rung in the registry's Python track
TWIN, NAME, RUNG = PY.twin, PY.name, PY.rung
SIM_CONFIG = {"BM": 16, "BN": 32, "BK": 4, "TM": 4, "TN": 4}


@common.per_config
def kernel(cfg):
    """The compiled kernel for `cfg`: sgemm(M, N, K, alpha, A, B, beta, C)."""
    BM, BN, BK, TM, TN = (cfg[k] for k in ("BM", "BN", "BK", "TM", "TN"))
    THREADS = RUNG.threads(cfg)

    @cuda.jit
    def sgemm(M, N, K, alpha, A, B, beta, C):
        As = cuda.shared.array((BM, BK), float32)
        Bs = cuda.shared.array((BK, BN), float32)

        tid = cuda.threadIdx.x
        tc = tid % (BN // TN)  # columns tc*TN .. tc*TN+TN-1 of the tile
        tr = tid // (BN // TN)  # rows tr*TM .. tr*TM+TM-1
        row0, col0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN

        acc = cuda.local.array((TM, TN), float32)
        regM = cuda.local.array(TM, float32)
        regN = cuda.local.array(TN, float32)
        for i in range(TM):
            for j in range(TN):
                acc[i, j] = float32(0.0)
        for k0 in range(0, K, BK):
            # the block's threads copy both tiles, zero past the edges (common.copy_tile)
            common.copy_tile(As, A, row0, k0, M, K, tid, THREADS)
            common.copy_tile(Bs, B, k0, col0, K, N, tid, THREADS)
            cuda.syncthreads()
            for k in range(BK):
                # stage the two fragments in registers: TM + TN loads feed TM * TN FFMAs
                for i in range(TM):
                    regM[i] = As[tr * TM + i, k]
                for j in range(TN):
                    regN[j] = Bs[k, tc * TN + j]
                for i in range(TM):
                    for j in range(TN):
                        acc[i, j] += regM[i] * regN[j]
            cuda.syncthreads()
        for i in range(TM):
            for j in range(TN):
                common.store_c(C, row0 + tr * TM + i, col0 + tc * TN + j, M, N, acc[i, j],
                               alpha, beta)

    return sgemm


# the twin's launch geometry, and C = alpha * A @ B + beta * C at `cfg` (None: its seed)
grid, block, launch = common.entry_points(RUNG, kernel)
