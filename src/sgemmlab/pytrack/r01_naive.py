"""Python rung 1 — naive: one thread per element of C, operands straight from global memory.

Mirrors CUDA rung 1 (kernels/ladder/01_naive.cu), line for line: thread (x, y) owns C[row][col]
with the *row* from x, so the lanes of a warp walk different rows of A and write C a row
apart — the flaw rung 2 fixes. The first Python rung: nothing came before it.

Where it differs: the kernel is Python that Numba compiles; BS enters as a constant of the
closure that `kernel(cfg)` builds (one compiled kernel per configuration), where NVRTC gets
-DBS. Arrays carry their shapes, so there are no leading dimensions.

SIM_CONFIG, BS = 8 (64 threads), keeps the simulator quick; the seed BS = 32 is 1024 threads
per block, one Python thread each.
"""

from __future__ import annotations

from numba import cuda, float32

from sgemmlab import registry
from sgemmlab.pytrack import common

PY = registry.python_rung(1)  # this rung in the registry's Python track
TWIN, NAME, RUNG = PY.twin, PY.name, PY.rung
SIM_CONFIG = {"BS": 8}


@common.per_config
def kernel(cfg):
    """The compiled kernel for `cfg`: sgemm(M, N, K, alpha, A, B, beta, C)."""
    BS = cfg["BS"]

    @cuda.jit
    def sgemm(M, N, K, alpha, A, B, beta, C):
        row = cuda.blockIdx.x * BS + cuda.threadIdx.x  # lanes of a warp: consecutive rows
        col = cuda.blockIdx.y * BS + cuda.threadIdx.y
        if row >= M or col >= N:
            return
        acc = float32(0.0)
        for k in range(K):
            acc += A[row, k] * B[k, col]
        common.store_c(C, row, col, M, N, acc, alpha, beta)

    return sgemm


# the twin's launch geometry, and C = alpha * A @ B + beta * C at `cfg` (None: its seed)
grid, block, launch = common.entry_points(RUNG, kernel)
