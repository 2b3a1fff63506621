"""Each rung replayed in Python, thread by thread, from its index arithmetic.

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

The counting (bill.py) and the visualizer (visual.py) both read these traces.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..registry import Config, Rung

F = 4  # bytes per float


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
