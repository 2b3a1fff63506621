"""The bill of a rung, counted from its index arithmetic.

For each rung, `trace` replays one step of the kernel's K loop (BK values of k; one k for
the untiled rungs 1-2) and its epilogue for every thread of one block, in Python, with the
same index expressions as the .cu file: which global element each lane loads, which
shared-memory word it stores or reads, how many FFMAs it does. Indices are numpy arrays
over the block's threads, so each line below reads like the kernel's. The block is the one
at the origin of C, the matrices row-major with lda = K, ldb = ldc = N, every base address
256-byte aligned; rungs 6-14 and 21 are traced with float4 global accesses (SGEMM_VEC4 = 1),
and rungs 13-14 with both operands row-major (no SGEMM_TA / SGEMM_TB) and one product.

A cp.async (rungs 11-14) is one instruction with two halves, and the trace keeps both: the
global load it performs (operand A or B, counted like an LDG) and the shared store it
performs (As or Bs, counted like an STS of the same width, zero-filled bytes included).
Both are filed under the kind "cp.async" instead of "load" / "store", so a table shows which
copies go through registers (LDG + STS) and which do not (LDGSTS).

`count` then splits the threads into warps and counts, per warp instruction:
  global   bytes requested by the lanes, 32-byte sectors touched, 128-byte lines touched
           (one L1 wavefront each; a cp.async.cg bypasses L1 for data, but its request
           still goes through the L1TEX pipeline line by line);
  shared   4-byte words moved, and wavefronts: 32-bit accesses are served one warp at a
           time, 64-bit in half-warps, 128-bit in quarter-warps; within each phase the 32
           banks (word mod 32) serve one distinct word each per wavefront, so a phase
           takes as many wavefronts as the busiest bank has distinct words (equal words
           are a broadcast). Wavefronts beyond one per phase are bank conflicts.

Everything above is per K step. The one cost that is not is rung 14's Stream-K fix-up: it is
paid per split tile (a partial BM x BN tile out to the workspace and back), so `count` adds
it to the per-product DRAM figure only, from the launch plan (runtime/decompose.py), which
needs the GPU's block slots.

The figures are source-level, like the articles' counts: where the compiler fuses loads (it
turns four steps of rung 3-5's As reads into one LDS.128, and rung 11's scalar reads of the
row-major As too), the SASS section shows it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..registry import Config, Rung

F = 4  # bytes per float
SECTOR = 32
LINE = 128
BANKS = 32


@dataclass
class Access:
    """One instruction of the source, executed by every thread of the block."""

    operand: str  # A, B, C (global) or As, Bs (shared)
    store: bool
    width: int  # bytes per lane: 4 or 16
    addr: np.ndarray  # byte address per thread
    active: np.ndarray  # bool per thread
    epilogue: bool = False
    copy: bool = False  # one half of a cp.async (global read or shared write)

    @property
    def shared(self) -> bool:
        return self.operand.endswith("s")

    @property
    def kind(self) -> str:
        """How the bill files it: "load", "store", or "cp.async" (either half)."""
        return "cp.async" if self.copy else "store" if self.store else "load"


@dataclass
class Trace:
    threads: int
    bk: int  # values of k one step of the K loop covers
    ffma: int = 0  # per thread per step
    accesses: list[Access] = field(default_factory=list)


class _Tracer:
    """What the replays below call: one method per kind of instruction."""

    def __init__(self, threads: int, bk: int):
        self.t = Trace(threads, bk)
        self.tid = np.arange(threads)
        self.epilogue = False

    def _add(self, operand, store, width, elem, active, copy=False):
        elem = np.broadcast_to(np.asarray(elem, dtype=np.int64), self.tid.shape)
        act = np.ones(self.tid.shape, bool) if active is None else np.broadcast_to(
            np.asarray(active, bool), self.tid.shape)
        self.t.accesses.append(Access(operand, store, width, elem * F, act, self.epilogue,
                                      copy))

    def ldg(self, op, elem, active=None, width=F):
        self._add(op, False, width, elem, active)

    def stg(self, elem, active=None, width=F):
        self._add("C", True, width, elem, active)

    def sts(self, op, word, active=None, width=F):
        self._add(op, True, width, word, active)

    def lds(self, op, word, width=F):
        self._add(op, False, width, word, None)

    def ldgsts(self, op, elem, word, live=None, reads=None, width=F):
        """cp.async of `width` bytes from global element `elem` of `op` to shared word `word`
        of `op`s: every `live` lane writes its shared bytes (zero-filled where the copy asks
        for none), and only lanes that also `reads` touch global memory."""
        live = np.ones(self.tid.shape, bool) if live is None else np.asarray(live, bool)
        reads = live if reads is None else live & np.asarray(reads, bool)
        self._add(op, False, width, elem, reads, copy=True)
        self._add(op + "s", True, width, word, live, copy=True)

    def ffma(self, n):
        self.t.ffma += n


# -- the replays: one K step of each rung, for block (0, 0) -----------------------------
def _untiled(rung, c, M, N, K):
    BS = c["BS"]
    t = _Tracer(BS * BS, 1)
    tx, ty = t.tid % BS, t.tid // BS
    row, col = (tx, ty) if rung.rows_on_x else (ty, tx)  # rung 1's flaw is this line
    ok = (row < M) & (col < N)
    k = 0
    t.ldg("A", row * K + k, ok)
    t.ldg("B", k * N + col, ok)
    t.ffma(1)
    t.epilogue = True
    t.stg(row * N + col, ok)
    return t.t


def _smem_tiling(rung, c, M, N, K):
    BS = c["BS"]
    t = _Tracer(BS * BS, BS)
    tx, ty = t.tid % BS, t.tid // BS
    row, col = ty, tx
    t.ldg("A", row * K + tx, (row < M) & (tx < K))
    t.sts("As", ty * BS + tx)
    t.ldg("B", ty * N + col, (ty < K) & (col < N))
    t.sts("Bs", ty * BS + tx)
    for k in range(BS):
        t.lds("As", ty * BS + k)
        t.lds("Bs", k * BS + tx)
        t.ffma(1)
    t.epilogue = True
    t.stg(row * N + col, (row < M) & (col < N))
    return t.t


def _copy_scalar(t, c, M, N, K, THREADS):
    """Rungs 4-5: the strided copy loops, one float per iteration, As[BM][BK], Bs[BK][BN]."""
    BM, BN, BK = c["BM"], c["BN"], c["BK"]
    for src, rows, cols, ld, rows_in, cols_in in (("A", BM, BK, K, M, K),
                                                  ("B", BK, BN, N, K, N)):
        for base in range(0, rows * cols, THREADS):
            i = base + t.tid
            r, col = i // cols, i % cols
            live = i < rows * cols
            t.ldg(src, r * ld + col, live & (r < rows_in) & (col < cols_in))
            t.sts(src + "s", r * cols + col, live)


def _blocktile_1d(rung, c, M, N, K):
    BM, BN, BK, TM = c["BM"], c["BN"], c["BK"], c["TM"]
    THREADS = BM // TM * BN
    t = _Tracer(THREADS, BK)
    tc, tr = t.tid % BN, t.tid // BN
    _copy_scalar(t, c, M, N, K, THREADS)
    for k in range(BK):
        t.lds("Bs", k * BN + tc)
        for i in range(TM):
            t.lds("As", (tr * TM + i) * BK + k)
        t.ffma(TM)
    t.epilogue = True
    for i in range(TM):
        t.stg((tr * TM + i) * N + tc, (tr * TM + i < M) & (tc < N))
    return t.t


def _blocktile_2d(rung, c, M, N, K):
    BM, BN, BK, TM, TN = c["BM"], c["BN"], c["BK"], c["TM"], c["TN"]
    THREADS = (BM // TM) * (BN // TN)
    t = _Tracer(THREADS, BK)
    tc, tr = t.tid % (BN // TN), t.tid // (BN // TN)
    _copy_scalar(t, c, M, N, K, THREADS)
    for k in range(BK):
        for i in range(TM):
            t.lds("As", (tr * TM + i) * BK + k)
        for j in range(TN):
            t.lds("Bs", k * BN + tc * TN + j)
        t.ffma(TM * TN)
    t.epilogue = True
    for i in range(TM):
        for j in range(TN):
            r, col = tr * TM + i, tc * TN + j
            t.stg(r * N + col, (r < M) & (col < N))
    return t.t


def _copy_vec4(t, c, M, N, K, THREADS, a_stride, per_thread=None):
    """Rungs 6-10: float4 loads of A along k (stored transposed, four STS) and of B."""
    BM, BN, BK = c["BM"], c["BN"], c["BK"]
    bases_a = range(0, BM * BK // 4, THREADS) if per_thread is None else [
        s * THREADS for s in range(per_thread[0])]
    bases_b = range(0, BK * BN // 4, THREADS) if per_thread is None else [
        s * THREADS for s in range(per_thread[1])]
    for base in bases_a:
        i = base + t.tid
        r, col = i // (BK // 4), i % (BK // 4) * 4
        live = i < BM * BK // 4
        t.ldg("A", r * K + col, live & (r < M) & (col + 3 < K), width=16)
        for j in range(4):  # transpose A while storing it
            t.sts("As", (col + j) * a_stride + r, live)
    for base in bases_b:
        i = base + t.tid
        r, col = i // (BN // 4), i % (BN // 4) * 4
        live = i < BK * BN // 4
        t.ldg("B", r * N + col, live & (r < K) & (col + 3 < N), width=16)
        t.sts("Bs", r * BN + col, live, width=16)


def _vectorized(rung, c, M, N, K):
    """Rungs 6-9: they differ in the B columns a thread owns (7+) and the padding (8+)."""
    BM, BN, BK, TM, TN = c["BM"], c["BN"], c["BK"], c["TM"], c["TN"]
    THREADS = (BM // TM) * (BN // TN)
    a_stride = BM + c.get("PAD", 0)
    t = _Tracer(THREADS, BK)
    tc, tr = t.tid % (BN // TN), t.tid // (BN // TN)
    group_stride = BN // (TN // 4)

    def bcol(j):  # rung 6: TN adjacent columns; 7-9: TN/4 float4 groups spread out
        return tc * TN + j if rung.number == 6 else j // 4 * group_stride + tc * 4

    _copy_vec4(t, c, M, N, K, THREADS, a_stride)
    for k in range(BK):
        for i in range(0, TM, 4):
            t.lds("As", k * a_stride + tr * TM + i, width=16)
        for j in range(0, TN, 4):
            t.lds("Bs", k * BN + bcol(j), width=16)
        t.ffma(TM * TN)
    t.epilogue = True
    for i in range(TM):
        for j in range(0, TN, 4):
            r, col = tr * TM + i, bcol(j)
            t.stg(r * N + col, (r < M) & (col + 3 < N), width=16)
    return t.t


def _warp_geometry(rung, c, t):
    """Rungs 10-12: where a lane's TM x TN pieces sit (first row, first column) and the
    sub-tile spacing; WMITER comes from the registry's derived values."""
    BN, WM, WN, TN, WNITER = c["BN"], c["WM"], c["WN"], c["TN"], c["WNITER"]
    WMITER = rung.derived(c)["WMITER"]
    WSUBM, WSUBN = WM // WMITER, WN // WNITER
    warp, lane = t.tid // 32, t.tid % 32
    wr, wc = warp // (BN // WN), warp % (BN // WN)
    lr, lc = lane // (WSUBN // TN), lane % (WSUBN // TN)
    return wr * WM + lr * c["TM"], wc * WN + lc * TN, WMITER, WSUBM, WSUBN


def _lds_b_fragments(t, at, WNITER, WSUBN, TN):
    """Rungs 10-12: a lane's B values at one k, float4 reads from row k of Bs starting at
    `at`, TN per warp sub-tile, WNITER sub-tiles WSUBN apart."""
    for wn in range(WNITER):
        for j in range(0, TN, 4):
            t.lds("Bs", at + wn * WSUBN + j, width=16)


def _store_warp_tile(t, c, M, N, trow, tcol, WMITER, WSUBM, WSUBN):
    """Rungs 10-12's epilogue: float4 stores of each sub-tile row."""
    t.epilogue = True
    for wm in range(WMITER):
        for i in range(c["TM"]):
            for wn in range(c["WNITER"]):
                for j in range(0, c["TN"], 4):
                    r, col = trow + wm * WSUBM + i, tcol + wn * WSUBN + j
                    t.stg(r * N + col, (r < M) & (col + 3 < N), width=16)


def _warptiling(rung, c, M, N, K):
    BM, BN, BK = c["BM"], c["BN"], c["BK"]
    TM, TN, WNITER = c["TM"], c["TN"], c["WNITER"]
    THREADS = rung.threads(c)
    a_stride = BM + c["PAD"]
    t = _Tracer(THREADS, BK)
    trow, tcol, WMITER, WSUBM, WSUBN = _warp_geometry(rung, c, t)
    loads = (-(-(BM * BK // 4) // THREADS), -(-(BK * BN // 4) // THREADS))
    _copy_vec4(t, c, M, N, K, THREADS, a_stride, per_thread=loads)
    for k in range(BK):
        for wm in range(WMITER):
            for i in range(0, TM, 4):
                t.lds("As", k * a_stride + trow + wm * WSUBM + i, width=16)
        _lds_b_fragments(t, k * BN + tcol, WNITER, WSUBN, TN)
        t.ffma(WMITER * TM * WNITER * TN)
    _store_warp_tile(t, c, M, N, trow, tcol, WMITER, WSUBM, WSUBN)
    return t.t


def _cp_async(rung, c, M, N, K):
    """Rungs 11-12 (rung 12 is rung 11's code with its two switches): rung 10's warp tiles
    fed by cp.async. One K step is one tile of the ring; STAGES changes when a copy lands,
    not what it moves, and REGPF changes when a fragment is loaded (one k ahead), not how
    many: BK fragment loads per tile either way. So neither appears in the bill; they show
    in the registers, the shared memory and the SASS."""
    BM, BN, BK, PAD = c["BM"], c["BN"], c["BK"], c["PAD"]
    TM, TN, WNITER = c["TM"], c["TN"], c["WNITER"]
    transpose_a = c.get("TRANSPOSE_A", 0)  # rung 11 has no such switch: A as it lies
    a_ld = BM + PAD if transpose_a else BK + PAD  # As[k][m] or As[m][k]

    def a_at(r, k):
        return k * a_ld + r if transpose_a else r * a_ld + k

    THREADS = rung.threads(c)
    t = _Tracer(THREADS, BK)
    trow, tcol, WMITER, WSUBM, WSUBN = _warp_geometry(rung, c, t)
    k0 = 0
    # copy_tile: A in granules of 4 consecutive k of one row ...
    for base in range(0, BM * BK // 4, THREADS):
        i = base + t.tid
        r, col = i // (BK // 4), i % (BK // 4) * 4
        live = i < BM * BK // 4
        if not transpose_a:  # one 16-byte copy keeps the row: As[m][k]
            t.ldgsts("A", r * K + k0 + col, a_at(r, col), live, (r < M) & (k0 + col < K),
                     width=16)
        else:  # four 4-byte copies scatter it into a column: As[k][m]
            for j in range(4):
                t.ldgsts("A", r * K + k0 + col + j, a_at(r, col + j), live,
                         (r < M) & (k0 + col + j < K))
    # ... and B in granules of 4 consecutive columns of one row
    for base in range(0, BK * BN // 4, THREADS):
        i = base + t.tid
        r, col = i // (BN // 4), i % (BN // 4) * 4
        live = i < BK * BN // 4
        t.ldgsts("B", (k0 + r) * N + col, r * BN + col, live, (k0 + r < K) & (col < N),
                 width=16)
    for k in range(BK):  # load_fragments(read, k, ...)
        for wm in range(WMITER):
            for i in range(0, TM, 4):
                r = trow + wm * WSUBM + i
                if transpose_a:
                    t.lds("As", a_at(r, k), width=16)
                else:  # TM scalar reads down a column of the row-major As
                    for q in range(4):
                        t.lds("As", a_at(r + q, k))
        _lds_b_fragments(t, k * BN + tcol, WNITER, WSUBN, TN)
        t.ffma(WMITER * TM * WNITER * TN)
    _store_warp_tile(t, c, M, N, trow, tcol, WMITER, WSUBM, WSUBN)
    return t.t


def _tile_copy(t, c, op, ext, ld, k_major, lda, ext_valid, K, via_registers):
    """Rungs 13-14: TileCopy<EXT, LD, K_MAJOR> of the first k-tile (kt = 0) into
    `op`s[BK][ld]: copy() with cp.async, or, via_registers (REG_TRANSPOSE 1 or 2, K_MAJOR),
    fetch() with 16-byte loads and stash() with four 4-byte stores per granule."""
    BK, THREADS = c["BK"], t.tid.size
    per_row = BK // 4 if k_major else ext // 4  # granules per source row
    granules = ext * BK // 4
    copies = -(-granules // THREADS)
    pass_rows = THREADS // per_row  # source rows one pass of the block covers
    dst_step = pass_rows if k_major else pass_rows * ld
    row, q = t.tid // per_row, t.tid % per_row * 4
    k_left = K  # k still to copy from this k-tile on
    edge = k_left < BK  # only the last, partial k-tile checks k
    for s in range(copies):
        live = t.tid + s * THREADS < granules  # the thread's granule exists
        if k_major:  # 4 consecutive k of one row -> a column of the tile
            src = np.minimum(row + s * pass_rows, ext_valid - 1) * lda + q  # clamped row
            dst = q * ld + row + s * dst_step
            if via_registers:
                vec = live & (not edge or q + 4 <= k_left)
                t.ldg(op, src, vec, width=16)
                if edge:  # the scalar fallback of the partial k-tile
                    for j in range(4):
                        t.ldg(op, src + j, live & ~vec & (q + j < k_left))
                for j in range(4):  # stash(): transpose through registers
                    t.sts(op + "s", dst + j * ld, live)
            else:
                for j in range(4):
                    t.ldgsts(op, src + j, dst + j * ld, live, not edge or q + j < k_left)
        else:  # 4 consecutive floats along the tile's extent: one 16-byte copy
            k = row + s * pass_rows
            fill = 4 * np.clip(ext_valid - q, 0, 4)
            reads = (fill > 0) & (not edge or k < k_left)
            t.ldgsts(op, k * lda + q, row * ld + q + s * dst_step, live, reads, width=16)


def _hoisted(rung, c, M, N, K):
    """Rung 13: TM x TN patches of 4 x 4 pieces; A (k-major, row-major in memory) scattered
    into As[k][m] by 4-byte cp.async, or with REG_TRANSPOSE = 1 fetched by LDG.128 and
    stashed by 4 STS.32; B by 16-byte cp.async into Bs[k][n]. The fragment loads of one
    tile are BK steps whichever k they prefetch (the first k of the next tile is loaded
    during this tile's last), so one K step holds BK of them."""
    BM, BN, BK, WM, WN = c["BM"], c["BN"], c["BK"], c["WM"], c["WN"]
    TM, TN, PAD = c["TM"], c["TN"], c["PAD"]
    a_ld, b_ld = BM + PAD, BN + PAD
    t = _Tracer(rung.threads(c), BK)
    _tile_copy(t, c, "A", BM, a_ld, True, K, M, K, via_registers=c["REG_TRANSPOSE"] in (1, 2))
    _tile_copy(t, c, "B", BN, b_ld, False, N, N, K, via_registers=False)
    warp, lane = t.tid // 32, t.tid % 32  # Patch
    wr, wc = warp // (BN // WN), warp % (BN // WN)
    lr, lc = lane // (WN // TN), lane % (WN // TN)
    prow, pcol = wr * WM + lr * 4, wc * WN + lc * 4
    piece_rows, piece_cols = WM // (TM // 4), WN // (TN // 4)
    for k in range(BK):
        for i in range(TM // 4):
            t.lds("As", k * a_ld + prow + i * piece_rows, width=16)
        for j in range(TN // 4):
            t.lds("Bs", k * b_ld + pcol + j * piece_cols, width=16)
        t.ffma(TM * TN)
    t.epilogue = True  # store_patch
    for i in range(TM):
        for j in range(0, TN, 4):
            r, col = prow + i // 4 * piece_rows + i % 4, pcol + j // 4 * piece_cols
            t.stg(r * N + col, (r < M) & (col + 3 < N), width=16)
    return t.t


def _streamk(rung, c, M, N, K):
    """Rung 14: every k-tile a block computes is rung 13's (same tile_product), whichever
    tile and k-range the stream hands it. The fix-up is not in here: it moves a BM x BN
    partial tile per contributor per split tile, not per K step; `count` adds it to the
    per-product DRAM bytes (see stream_k_fixup)."""
    return _hoisted(rung, c, M, N, K)


def _volkov2008(rung, c, M, N, K):
    """Rung 21 (history/21_volkov2008.cu): BN threads in one row, thread t owning column t of
    a TM x BN tile. One K step is tile(k0 = 0): A's TM x BK tile by float4 along k (rows past
    M read the last row), stored transposed into As[k][m] by four STS; then per k one LDG of
    B (the prefetch: rows k0+4 .. k0+BK+3, this step's loads, whichever step uses them;
    columns past N read the last one) and TM/4 LDS.128 of As[k][i..i+3], one address for
    every lane (a broadcast), for TM FFMAs."""
    BN, TM, BK = c["BN"], c["TM"], c["BK"]
    t = _Tracer(BN, BK)
    col = np.minimum(t.tid, N - 1)
    k0 = 0
    edge = k0 + BK + 4 > K  # tile<true>: the loads that pass K read zero
    bound = K - k0 if edge else BK
    for s in range(-(-(TM * BK // 4) // BN)):
        i = t.tid + s * BN
        r, q = i // (BK // 4), i % (BK // 4) * 4
        live = i < TM * BK // 4
        src = np.minimum(r, M - 1) * K + k0 + q
        vec = live & (q + 3 < bound)
        t.ldg("A", src, vec, width=16)
        if edge:  # load4_or_zero's element-by-element path at the edge of K
            for j in range(4):
                t.ldg("A", src + j, live & ~vec & (q + j < bound))
        for j in range(4):
            t.sts("As", (q + j) * TM + r, live)
    for k in range(0, BK, 4):
        for q in range(4):  # next_b: B four k ahead
            kk = k0 + k + 4 + q
            t.ldg("B", kk * N + col, kk < K)
        for q in range(4):
            for i in range(0, TM, 4):
                t.lds("As", (k + q) * TM + i, width=16)
        t.ffma(4 * TM)
    t.epilogue = True
    for i in range(TM):
        t.stg(i * N + t.tid, (i < M) & (t.tid < N))
    return t.t


_REPLAY = {1: _untiled, 2: _untiled, 3: _smem_tiling, 4: _blocktile_1d, 5: _blocktile_2d,
           6: _vectorized, 7: _vectorized, 8: _vectorized, 9: _vectorized, 10: _warptiling,
           11: _cp_async, 12: _cp_async, 13: _hoisted, 14: _streamk, 21: _volkov2008}


def _replayed() -> str:
    """The rungs _REPLAY covers, as runs of numbers: '1-14, 21'."""
    runs: list[list[int]] = []
    for n in sorted(_REPLAY):
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def trace(rung: Rung, config: Config, shape=(4096, 4096, 4096)) -> Trace:
    """One K step (and the epilogue) of the block at the origin, every thread. ValueError
    for a rung whose replay is not written (the family, 15-18: their bill is in their
    headers)."""
    M, N, K = shape
    # a twin (22-25) runs its base's threads and tiles: the same bill
    replay = _REPLAY.get(rung.number if rung.base is None else rung.base)
    if replay is None:
        raise ValueError(f"rung {rung.label} has no per-thread replay yet (inspect covers "
                         f"rungs {_replayed()}); its bill is in its header, "
                         f"kernels/{rung.page}")
    return replay(rung, dict(config), M, N, K)


# -- counting ----------------------------------------------------------------------------
def _distinct(rows: np.ndarray) -> np.ndarray:
    """Distinct values per row, ignoring -1 (an inactive lane)."""
    s = np.sort(rows, axis=1)
    new = np.ones(s.shape, bool)
    new[:, 1:] = s[:, 1:] != s[:, :-1]
    return (new & (s >= 0)).sum(axis=1)


def _units(a: Access, size: int) -> np.ndarray:
    """Per warp (rows), the `size`-byte units each active lane's bytes fall in (-1: none)."""
    first, last = a.addr // size, (a.addr + a.width - 1) // size
    span = int((last - first).max()) + 1
    u = first[:, None] + np.arange(span)[None, :]
    u = np.where((u <= last[:, None]) & a.active[:, None], u, -1)
    return u.reshape(-1, 32 * span)


def wavefronts(words: np.ndarray, active: np.ndarray, width: int) -> tuple[int, int]:
    """(wavefronts, phases) one warp instruction needs; `words` is each lane's first word."""
    lanes = {4: 32, 8: 16, 16: 8}[width]
    total = phases = 0
    for p in range(0, 32, lanes):
        act = active[p:p + lanes]
        if not act.any():
            continue
        w = words[p:p + lanes][act][:, None] + np.arange(width // F)[None, :]
        uniq = np.unique(w)
        total += int(np.bincount(uniq % BANKS, minlength=BANKS).max())
        phases += 1
    return total, phases


@dataclass
class OperandBill:
    """Per warp per K step (C: per warp, once, in the epilogue)."""

    instructions: float = 0.0
    bytes_requested: float = 0.0
    sectors: float = 0.0
    lines: float = 0.0
    words: float = 0.0  # shared: 4-byte words per lane, summed over lanes
    wavefronts: float = 0.0
    ideal: float = 0.0  # shared: wavefronts without conflicts

    @property
    def sector_bytes(self) -> float:
        return self.sectors * SECTOR

    @property
    def conflict_ways(self) -> float:
        return self.wavefronts / self.ideal if self.ideal else 0.0


@dataclass
class Bill:
    rung: str
    config: dict
    shape: tuple[int, int, int]
    threads: int
    warps: int
    bk: int
    ffma_per_warp: float  # per K step: lane FFMAs / 32
    ops: dict  # (operand, "load"|"store"|"cp.async") -> OperandBill
    block_bytes_requested: int  # global load bytes the whole block asks for per K step
    block_bytes_distinct: int  # distinct global bytes the block reads per K step
    grid: tuple[int, int, int]
    k_steps: int
    fixup: Fixup | None = None  # rung 14: the Stream-K fix-up of one product

    # -- the headline figures -------------------------------------------------------------
    def op(self, operand: str, kind: str = "load") -> OperandBill:
        return self.ops.get((operand, kind), OperandBill())

    def _global_reads(self) -> list[OperandBill]:
        """A and B as loads and as the global half of cp.async copies."""
        return [self.op(o, k) for o in ("A", "B") for k in ("load", "cp.async")]

    @property
    def flops_per_warp(self) -> float:
        return 2 * 32 * self.ffma_per_warp

    @property
    def global_sector_bytes_per_warp(self) -> float:
        """A and B, per warp per K step: the seed's 1056 (rung 1) and 160 (rung 2)."""
        return sum(b.sector_bytes for b in self._global_reads())

    @property
    def smem_loads_per_ffma(self) -> float:
        """4-byte shared words a thread reads per FFMA: 2.0 / 1.125 / 0.25 for rungs 3-5."""
        words = self.op("As").words + self.op("Bs").words
        return words / (32 * self.ffma_per_warp) if self.ffma_per_warp else 0.0

    @property
    def lds_per_ffma(self) -> float:
        """Shared load instructions (as written in the source) per FFMA."""
        n = self.op("As").instructions + self.op("Bs").instructions
        return n / self.ffma_per_warp if self.ffma_per_warp else 0.0

    @property
    def copy_instructions(self) -> dict:
        """Per warp per K step, the instructions that bring A and B in: global loads into
        registers (LDG; rungs 1-2 feed the FFMAs with them, the others stash them), shared
        stores from registers (STS), and cp.async copies (LDGSTS, counted by their shared
        half: a copy of zero bytes still issues)."""
        def n(ops, kind):
            return sum(self.op(o, kind).instructions for o in ops)
        return {"LDG": n(("A", "B"), "load"), "STS": n(("As", "Bs"), "store"),
                "LDGSTS": n(("As", "Bs"), "cp.async")}

    @property
    def smem_wavefronts_per_warp(self) -> float:
        return sum(b.wavefronts for (o, _), b in self.ops.items() if o in ("As", "Bs"))

    @property
    def l1_wavefronts_per_warp(self) -> float:
        return sum(b.lines for b in self._global_reads())

    @property
    def intensity(self) -> float:
        """FLOP per global byte the block's loads request (no reuse through any cache):
        2*BM*BN*BK / ((BM+BN)*BK*4) for the tiled rungs, 0.25 for rungs 1-2."""
        return self.warps * self.flops_per_warp / self.block_bytes_requested

    @property
    def fixup_bytes(self) -> int:
        return self.fixup.bytes if self.fixup else 0

    @property
    def dram_bytes(self) -> int:
        """The block-tile model: each block reads its distinct bytes of every K step (reuse
        inside a block is free, across blocks none), C is written once; and rung 14's
        fix-up traffic, which the model, reusing nothing through the L2, counts in full."""
        M, N, _ = self.shape
        blocks = self.grid[0] * self.grid[1]
        return (blocks * self.k_steps * self.block_bytes_distinct + M * N * F
                + self.fixup_bytes)

    @property
    def minimal_dram_bytes(self) -> int:
        M, N, K = self.shape
        return F * (M * K + K * N + M * N)

    def to_dict(self) -> dict:
        return {
            "rung": self.rung, "config": self.config, "shape": list(self.shape),
            "threads": self.threads, "bk": self.bk, "ffma_per_warp": self.ffma_per_warp,
            "global_sector_bytes_per_warp": self.global_sector_bytes_per_warp,
            "smem_loads_per_ffma": self.smem_loads_per_ffma,
            "lds_per_ffma": self.lds_per_ffma, "intensity": self.intensity,
            "copy_instructions": self.copy_instructions,
            "block_bytes_requested": self.block_bytes_requested,
            "block_bytes_distinct": self.block_bytes_distinct,
            "dram_bytes": self.dram_bytes, "minimal_dram_bytes": self.minimal_dram_bytes,
            "fixup": vars(self.fixup) | {"bytes": self.fixup.bytes} if self.fixup else None,
            "smem_wavefronts_per_warp": self.smem_wavefronts_per_warp,
            "l1_wavefronts_per_warp": self.l1_wavefronts_per_warp,
            "ops": {f"{o}.{k}": {**vars(b), "sector_bytes": b.sector_bytes,
                                 "conflict_ways": b.conflict_ways}
                    for (o, k), b in self.ops.items()},
        }


@dataclass(frozen=True)
class Fixup:
    """Rung 14's fix-up for one product: what the split tiles' partial sums move."""

    slots: int  # the GPU's resident blocks the plan was made for (SMs x blocks per SM)
    plan: str  # runtime/decompose.py's description of the launch
    split_tiles: int  # tiles whose k-tiles more than one block computes
    contributions: int  # (block, split tile) pairs: partial tiles written
    written: int  # bytes
    read: int  # bytes

    @property
    def bytes(self) -> int:
        return self.written + self.read


def stream_k_fixup(config: Config, shape, slots: int) -> Fixup:
    """The fix-up traffic of rung 14 at `config` for one M x N x K product on a GPU with
    `slots` resident blocks, from the launch plan. A tile finished by c blocks (c >= 2)
    costs, with S = BM x BN x 4 bytes:
      FIXUP = 0  c partials written to their slots, then all c read back by the last block
                 in block order: c S written, c S read;
      FIXUP = 1  c vector-atomic adds into one tile (c S sent to the L2), the sum read once
                 and the tile zeroed for the next launch: (c + 1) S written, S read;
      FIXUP = 2  the first to finish stores C as for a whole tile, the c - 1 others add into
                 C with vector atomics: (c - 1) S written beyond C's own store, none read.
    A block whose range covers a whole tile stores it directly and moves nothing here."""
    from ..runtime.decompose import streamk as plan

    M, N, K = shape
    p = plan(config["SPLIT"], config["FIXUP"], config["BM"], config["BN"], config["BK"],
             M, N, K, 1, slots)
    per_tile = [0] * p.sk_tiles  # contributors of each streamed tile
    for first, last in p.ranges():
        if last > first:
            for tile in range(first // p.k_tiles, (last - 1) // p.k_tiles + 1):
                per_tile[tile] += 1
    split = [c for c in per_tile if c >= 2]
    S = p.slot_floats * F
    parts = sum(split)
    if config["FIXUP"] == 0:
        written, read = parts * S, parts * S
    elif config["FIXUP"] == 2:
        written, read = (parts - len(split)) * S, 0
    else:
        written, read = (parts + len(split)) * S, len(split) * S
    return Fixup(slots, p.describe(), len(split), parts, written, read)


def count(rung: Rung, config: Config, shape=(4096, 4096, 4096),
          slots: int | None = None) -> Bill:
    """Trace one K step of `rung` at `config` and count it per warp (see the module doc).
    `slots`, the GPU's resident blocks (SMs x blocks per SM), is what rung 14's launch plan
    needs to count its fix-up; without it the fix-up is left out (Bill.fixup is None)."""
    t = trace(rung, config, shape)
    warps = t.threads // 32
    ops: dict[tuple[str, str], OperandBill] = {}
    requested = 0
    distinct: dict[str, set] = {}
    for a in t.accesses:
        b = ops.setdefault((a.operand, a.kind), OperandBill())
        lanes = a.active.reshape(warps, 32)
        b.instructions += float(lanes.any(axis=1).sum())
        if a.shared:
            b.words += float(lanes.sum()) * a.width // F
            words = (a.addr // F).reshape(warps, 32)
            for w in range(warps):
                wf, ph = wavefronts(words[w], lanes[w], a.width)
                b.wavefronts += wf
                b.ideal += ph
            continue
        b.bytes_requested += float(lanes.sum()) * a.width
        b.sectors += float(_distinct(_units(a, SECTOR)).sum())
        b.lines += float(_distinct(_units(a, LINE)).sum())
        if not a.store:
            requested += int(lanes.sum()) * a.width
            live = a.addr[a.active]
            distinct.setdefault(a.operand, set()).update(
                (live[:, None] + np.arange(0, a.width, F)).ravel().tolist())
    for b in ops.values():
        for name in ("instructions", "bytes_requested", "sectors", "lines", "words",
                     "wavefronts", "ideal"):
            setattr(b, name, getattr(b, name) / warps)
    M, N, K = shape
    fixup = (stream_k_fixup(config, shape, slots)
             if rung.supports("streamk") and slots is not None else None)
    return Bill(rung.label, dict(config), tuple(shape), t.threads, warps, t.bk,
                t.ffma, ops, requested, sum(map(len, distinct.values())) * F,
                rung.grid(config, M, N), -(-K // t.bk), fixup)
