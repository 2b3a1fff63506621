"""Python rung 7 — warptiling: block, warp and thread tiles; the copy split in two; a search.

What changed from Python rung 6: a level between the block and the thread. The BM x BN
block tile is cut into (BM/WM) x (BN/WN) warp tiles, one per warp; a warp computes its tile
as WMITER x WNITER sub-tiles of (WM/WMITER) x (WN/WNITER), in each of which every lane owns
the same TM x TN piece. Per step of k a lane loads WMITER*TM values of A and WNITER*TN of B
and does their outer product. The copy is split into fetch (global -> local arrays) and
stash (local arrays -> shared, A transposed into rows padded by PAD); PREFETCH = 1 fetches
tile k+1 right after the barrier that publishes tile k. Like the course's kernel 7, the
module also carries a small autotuning search: CANDIDATES, a handful of legal
configurations, and `search(shapes, time_fn)`, which times each and keeps the fastest.

Mirrors CUDA rung 10 (kernels/ladder/10_warptiling.cu); the registry derives WMITER. Where it
differs: fetch and stash are device functions built with the kernel (CUDA: lambdas), their
staging registers are local arrays of four floats per copy (no float4, as in Python rung
6), and the fragment reads and C stores are scalar loops.

SIM_CONFIG, BM = BN = 64, BK = 8, WM = WN = 32, WNITER = 2 (WMITER = 1), TM = TN = 4,
PAD = 4, PREFETCH = 1: 4 warps (128 threads), the fewest rung 10's rules allow. The seed is
BM = BN = 128, BK = 16, WM = 64, WN = 32, WNITER = 2, TM = 8, TN = 4 (256 threads).
"""

from __future__ import annotations

from typing import Callable, Iterable

from numba import cuda, float32

from sgemmlab import registry
from sgemmlab.pytrack import common

PY = registry.python_rung(7)  # this rung in the registry's Python track
TWIN, NAME, RUNG = PY.twin, PY.name, PY.rung
SIM_CONFIG = {"BM": 64, "BN": 64, "BK": 8, "WM": 32, "WN": 32, "WNITER": 2, "TM": 4, "TN": 4,
              "PAD": 4, "PREFETCH": 1}


@common.per_config
def kernel(cfg):
    """The compiled kernel for `cfg`: sgemm(M, N, K, alpha, A, B, beta, C)."""
    c = RUNG.macros(cfg)  # the configuration, WMITER and THREADS
    BM, BN, BK, WM, WN, TM, TN = (c[k] for k in ("BM", "BN", "BK", "WM", "WN", "TM", "TN"))
    WMITER, WNITER, PAD, PREFETCH, THREADS = (
        c[k] for k in ("WMITER", "WNITER", "PAD", "PREFETCH", "THREADS"))
    WSUBM, WSUBN = WM // WMITER, WN // WNITER  # the warp's sub-tile
    # Numba sizes shared and local arrays by constants: arithmetic inside the kernel would
    # be a run-time value, so the sizes are computed here, in Python
    AS_ROW = BM + PAD  # a row of the transposed A tile
    FM, FN = WMITER * TM, WNITER * TN  # a lane's fragments of A and B per step of k
    A_LOADS = -(-(BM * BK // 4) // THREADS)  # groups of four floats per thread per tile
    B_LOADS = -(-(BK * BN // 4) // THREADS)
    load = common.load_or_zero

    @cuda.jit(device=True)
    def fetch(A, B, ra, rb, tid, row0, col0, k0, M, N, K):
        for t in range(A_LOADS):
            i = tid + t * THREADS
            if i < BM * BK // 4:
                r, q = i // (BK // 4), i % (BK // 4) * 4
                for v in range(4):
                    ra[t, v] = load(A, row0 + r, k0 + q + v, M, K)
        for t in range(B_LOADS):
            i = tid + t * THREADS
            if i < BK * BN // 4:
                r, q = i // (BN // 4), i % (BN // 4) * 4
                for v in range(4):
                    rb[t, v] = load(B, k0 + r, col0 + q + v, K, N)

    @cuda.jit(device=True)
    def stash(As, Bs, ra, rb, tid):
        for t in range(A_LOADS):
            i = tid + t * THREADS
            if i < BM * BK // 4:
                r, q = i // (BK // 4), i % (BK // 4) * 4
                for v in range(4):  # transpose A while storing it
                    As[q + v, r] = ra[t, v]
        for t in range(B_LOADS):
            i = tid + t * THREADS
            if i < BK * BN // 4:
                r, q = i // (BN // 4), i % (BN // 4) * 4
                for v in range(4):
                    Bs[r, q + v] = rb[t, v]

    @cuda.jit
    def sgemm(M, N, K, alpha, A, B, beta, C):
        As = cuda.shared.array((BK, AS_ROW), float32)  # transposed, rows padded
        Bs = cuda.shared.array((BK, BN), float32)

        tid = cuda.threadIdx.x
        warp, lane = tid // 32, tid % 32
        wr, wc = warp // (BN // WN), warp % (BN // WN)  # the warp's tile in the block's
        lr, lc = lane // (WSUBN // TN), lane % (WSUBN // TN)  # the lane's piece
        # the lane's first output, (sub-tile 0, 0), in the block tile; the others are
        # WSUBM rows and WSUBN columns apart
        trow, tcol = wr * WM + lr * TM, wc * WN + lc * TN
        row0, col0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN

        acc = cuda.local.array((FM, FN), float32)
        regM = cuda.local.array(FM, float32)
        regN = cuda.local.array(FN, float32)
        ra = cuda.local.array((A_LOADS, 4), float32)
        rb = cuda.local.array((B_LOADS, 4), float32)
        for i in range(WMITER * TM):
            for j in range(WNITER * TN):
                acc[i, j] = float32(0.0)

        fetch(A, B, ra, rb, tid, row0, col0, 0, M, N, K)
        for k0 in range(0, K, BK):
            stash(As, Bs, ra, rb, tid)
            cuda.syncthreads()
            if PREFETCH and k0 + BK < K:  # the next tile's loads fly during this tile's math
                fetch(A, B, ra, rb, tid, row0, col0, k0 + BK, M, N, K)
            for k in range(BK):
                # the lane's column of A and row of B across all its sub-tiles
                for wm in range(WMITER):
                    for i in range(TM):
                        regM[wm * TM + i] = As[k, trow + wm * WSUBM + i]
                for wn in range(WNITER):
                    for j in range(TN):
                        regN[wn * TN + j] = Bs[k, tcol + wn * WSUBN + j]
                for i in range(WMITER * TM):
                    for j in range(WNITER * TN):
                        acc[i, j] += regM[i] * regN[j]
            cuda.syncthreads()  # the next stash must not overwrite tiles still being read
            if not PREFETCH and k0 + BK < K:
                fetch(A, B, ra, rb, tid, row0, col0, k0 + BK, M, N, K)
        for wm in range(WMITER):
            for i in range(TM):
                for wn in range(WNITER):
                    for j in range(TN):
                        common.store_c(C, row0 + trow + wm * WSUBM + i,
                                       col0 + tcol + wn * WSUBN + j, M, N,
                                       acc[wm * TM + i, wn * TN + j], alpha, beta)

    return sgemm


# the twin's launch geometry, and C = alpha * A @ B + beta * C at `cfg` (None: its seed)
grid, block, launch = common.entry_points(RUNG, kernel)


# -- the search (the course's kernel 7) ------------------------------------------------------
#: A handful of legal configurations of rung 10's space: the seed, the H200 default, and
#: neighbours that vary one idea each (block shape, warp shape, WNITER, BK, TM, PREFETCH).
CANDIDATES: tuple[dict[str, int], ...] = tuple(
    {**c, "TN": 4, "PAD": 4} for c in (
        {"BM": 128, "BN": 128, "BK": 16, "WM": 64, "WN": 32, "WNITER": 2, "TM": 8,
         "PREFETCH": 0},  # the seed
        {"BM": 64, "BN": 256, "BK": 16, "WM": 32, "WN": 64, "WNITER": 1, "TM": 4,
         "PREFETCH": 1},  # the H200 default
        {"BM": 128, "BN": 128, "BK": 16, "WM": 64, "WN": 32, "WNITER": 2, "TM": 8,
         "PREFETCH": 1},
        {"BM": 128, "BN": 128, "BK": 32, "WM": 64, "WN": 32, "WNITER": 2, "TM": 8,
         "PREFETCH": 1},
        {"BM": 128, "BN": 64, "BK": 16, "WM": 32, "WN": 32, "WNITER": 1, "TM": 4,
         "PREFETCH": 1},
        {"BM": 64, "BN": 128, "BK": 16, "WM": 32, "WN": 64, "WNITER": 4, "TM": 4,
         "PREFETCH": 1},
        {"BM": 256, "BN": 64, "BK": 16, "WM": 32, "WN": 64, "WNITER": 4, "TM": 4,
         "PREFETCH": 1},
        {"BM": 64, "BN": 64, "BK": 16, "WM": 32, "WN": 32, "WNITER": 1, "TM": 4,
         "PREFETCH": 1},
    )
)


def search(shapes: Iterable[tuple[int, int, int]],
           time_fn: Callable[[dict[str, int], int, int, int], float],
           candidates: Iterable[dict[str, int]] = CANDIDATES,
           ) -> tuple[dict[str, int], list[tuple[dict[str, int], float]]]:
    """Time every candidate on every (M, N, K) of `shapes` with `time_fn(cfg, M, N, K)`
    (seconds, measured by the caller: on a GPU, e.g. the median of a few launches) and
    keep the fastest by total time. Returns (fastest, [(cfg, total seconds), ...])."""
    shapes = list(shapes)
    if not shapes:
        raise ValueError("search needs at least one shape")
    timed = []
    for cfg in candidates:
        cfg = common.checked(RUNG, cfg)  # an illegal candidate is an error, not a result
        timed.append((cfg, sum(time_fn(cfg, M, N, K) for M, N, K in shapes)))
    if not timed:
        raise ValueError("search needs at least one candidate")
    return min(timed, key=lambda t: t[1])[0], timed
