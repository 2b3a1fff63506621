"""Python rung 6 — four floats per copy step, A transposed in shared memory.

What changed from Python rung 5: each step of the copy loops moves four consecutive floats
(A along k, B along n), and A is stored transposed, As[BK][BM], so a thread's column
fragment of A is contiguous in shared memory, like its row fragment of B.

Mirrors CUDA rung 6 (kernels/ladder/06_vectorized.cu), where it differs most: Numba has no float4
type and no reinterpreting cast, so a thread reads its four floats in four consecutive,
edge-guarded statements (what load4_or_zero does at an edge) and stores them in four;
whether they become one 16-byte instruction is up to LLVM, not promised as in CUDA. The
fragment reads (TM/4 float4 per step of k in CUDA) and the float4 stores of C are plain
loops for the same reason. The rules that make float4 legal in CUDA (BK, BN, TM, TN
multiples of 4) still hold here: they keep the copy's groups of four inside one row.

SIM_CONFIG, BM = 16, BN = 32, BK = 8, TM = TN = 4 (32 threads), for the simulator; the seed
is BM = BN = 128, BK = 8, TM = TN = 8 (256 threads).
"""

from __future__ import annotations

from numba import cuda, float32

from sgemmlab import registry
from sgemmlab.pytrack import common

PY = registry.python_rung(6)  # this rung in the registry's Python track
TWIN, NAME, RUNG = PY.twin, PY.name, PY.rung
SIM_CONFIG = {"BM": 16, "BN": 32, "BK": 8, "TM": 4, "TN": 4}


@common.per_config
def kernel(cfg):
    """The compiled kernel for `cfg`: sgemm(M, N, K, alpha, A, B, beta, C)."""
    BM, BN, BK, TM, TN = (cfg[k] for k in ("BM", "BN", "BK", "TM", "TN"))
    THREADS = RUNG.threads(cfg)
    load = common.load_or_zero

    @cuda.jit
    def sgemm(M, N, K, alpha, A, B, beta, C):
        As = cuda.shared.array((BK, BM), float32)  # transposed: k-major
        Bs = cuda.shared.array((BK, BN), float32)

        tid = cuda.threadIdx.x
        tc = tid % (BN // TN)
        tr = tid // (BN // TN)
        row0, col0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN

        acc = cuda.local.array((TM, TN), float32)
        regM = cuda.local.array(TM, float32)
        regN = cuda.local.array(TN, float32)
        for i in range(TM):
            for j in range(TN):
                acc[i, j] = float32(0.0)
        for k0 in range(0, K, BK):
            for i in range(tid, BM * BK // 4, THREADS):
                r, c = i // (BK // 4), i % (BK // 4) * 4
                # four consecutive floats of row r (no float4 in Numba); transpose A while
                # storing it
                As[c + 0, r] = load(A, row0 + r, k0 + c + 0, M, K)
                As[c + 1, r] = load(A, row0 + r, k0 + c + 1, M, K)
                As[c + 2, r] = load(A, row0 + r, k0 + c + 2, M, K)
                As[c + 3, r] = load(A, row0 + r, k0 + c + 3, M, K)
            for i in range(tid, BK * BN // 4, THREADS):
                r, c = i // (BN // 4), i % (BN // 4) * 4
                Bs[r, c + 0] = load(B, k0 + r, col0 + c + 0, K, N)
                Bs[r, c + 1] = load(B, k0 + r, col0 + c + 1, K, N)
                Bs[r, c + 2] = load(B, k0 + r, col0 + c + 2, K, N)
                Bs[r, c + 3] = load(B, k0 + r, col0 + c + 3, K, N)
            cuda.syncthreads()
            for k in range(BK):
                for i in range(TM):  # contiguous now: As[k] is a row of the transposed tile
                    regM[i] = As[k, tr * TM + i]
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
