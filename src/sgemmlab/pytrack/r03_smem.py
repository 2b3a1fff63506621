"""Python rung 3 — shared-memory cache blocking: stage BS x BS tiles of A and B, reuse them.

What changed from Python rung 2: the block copies a BS x BS tile of A and one of B into
shared memory (`cuda.shared.array`, sized by the constant BS), waits at a barrier, and every
thread then runs BS steps of k out of shared memory; a second barrier keeps the next copy
from overwriting tiles still in use. Elements past an edge are stored as zeros, so the
k loop needs no guard; no thread returns early, because every thread must reach the
barriers.

Mirrors CUDA rung 3 (kernels/ladder/03_smem_tiling.cu); where CUDA unrolls the k loop with
#pragma unroll, Numba leaves unrolling to LLVM (BS is a constant, so it may).

SIM_CONFIG, BS = 8 (64 threads, 512 B of shared memory), for the simulator; the seed is
BS = 32.
"""

from __future__ import annotations

from numba import cuda, float32

from sgemmlab import registry
from sgemmlab.pytrack import common

PY = registry.python_rung(3)  # this rung in the registry's Python track
TWIN, NAME, RUNG = PY.twin, PY.name, PY.rung
SIM_CONFIG = {"BS": 8}


@common.per_config
def kernel(cfg):
    """The compiled kernel for `cfg`: sgemm(M, N, K, alpha, A, B, beta, C)."""
    BS = cfg["BS"]

    @cuda.jit
    def sgemm(M, N, K, alpha, A, B, beta, C):
        As = cuda.shared.array((BS, BS), float32)
        Bs = cuda.shared.array((BS, BS), float32)

        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y  # tx: column inside the tile
        row = cuda.blockIdx.y * BS + ty
        col = cuda.blockIdx.x * BS + tx

        acc = float32(0.0)
        for k0 in range(0, K, BS):
            # each thread copies one element of each tile, zero past the edges
            As[ty, tx] = common.load_or_zero(A, row, k0 + tx, M, K)
            Bs[ty, tx] = common.load_or_zero(B, k0 + ty, col, K, N)
            cuda.syncthreads()
            for k in range(BS):
                acc += As[ty, k] * Bs[k, tx]
            cuda.syncthreads()  # the next copy must not overwrite tiles still being read
        common.store_c(C, row, col, M, N, acc, alpha, beta)

    return sgemm


# the twin's launch geometry, and C = alpha * A @ B + beta * C at `cfg` (None: its seed)
grid, block, launch = common.entry_points(RUNG, kernel)
