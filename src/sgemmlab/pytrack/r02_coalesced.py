"""Python rung 2 — global-memory coalescing: the same work, lanes of a warp along a row of C.

What changed from Python rung 1: threadIdx.x now picks the *column* (and blockIdx.x the
block column: the registry's grid puts columns on x for every rung but 1). One line moved.
A warp now reads one word of A (a broadcast) and 32 consecutive words of B per step of k.

Mirrors CUDA rung 2 (kernels/ladder/02_coalesced.cu); it differs only as Python rung 1 does.

SIM_CONFIG, BS = 8 (64 threads), for the simulator; the seed is BS = 32.
"""

from __future__ import annotations

from numba import cuda, float32

from sgemmlab import registry
from sgemmlab.pytrack import common

PY = registry.python_rung(2)  # this rung in the registry's Python track
TWIN, NAME, RUNG = PY.twin, PY.name, PY.rung
SIM_CONFIG = {"BS": 8}


@common.per_config
def kernel(cfg):
    """The compiled kernel for `cfg`: sgemm(M, N, K, alpha, A, B, beta, C)."""
    BS = cfg["BS"]

    @cuda.jit
    def sgemm(M, N, K, alpha, A, B, beta, C):
        col = cuda.blockIdx.x * BS + cuda.threadIdx.x  # lanes of a warp: consecutive columns
        row = cuda.blockIdx.y * BS + cuda.threadIdx.y
        if row >= M or col >= N:
            return
        acc = float32(0.0)
        for k in range(K):
            acc += A[row, k] * B[k, col]
        common.store_c(C, row, col, M, N, acc, alpha, beta)

    return sgemm


# the twin's launch geometry, and C = alpha * A @ B + beta * C at `cfg` (None: its seed)
grid, block, launch = common.entry_points(RUNG, kernel)
