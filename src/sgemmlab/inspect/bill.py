"""The bill of a rung, counted from its index arithmetic.

For each rung, `trace` replays one step of the kernel's K loop (BK values of k; one k for
the untiled rungs 1-2) and its epilogue for every thread of one block, in Python, with the
same index expressions as the .cu file: which global element each lane loads, which
shared-memory word it stores or reads, how many FFMAs it does. Indices are numpy arrays
over the block's threads, so each line below reads like the kernel's. The block is the one
at the origin of C, the matrices row-major with lda = K, ldb = ldc = N, every base address
256-byte aligned; rungs 6-10 are traced with float4 global accesses (SGEMM_VEC4 = 1).

`count` then splits the threads into warps and counts, per warp instruction:
  global   bytes requested by the lanes, 32-byte sectors touched, 128-byte lines touched
           (one L1 wavefront each);
  shared   4-byte words moved, and wavefronts: 32-bit accesses are served one warp at a
           time, 64-bit in half-warps, 128-bit in quarter-warps; within each phase the 32
           banks (word mod 32) serve one distinct word each per wavefront, so a phase
           takes as many wavefronts as the busiest bank has distinct words (equal words
           are a broadcast). Wavefronts beyond one per phase are bank conflicts.

The figures are source-level, like the articles' counts: where the compiler fuses loads (it
turns four steps of rung 3-5's As reads into one LDS.128), the SASS section shows it.
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

    @property
    def shared(self) -> bool:
        return self.operand.endswith("s")


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

    def _add(self, operand, store, width, elem, active):
        elem = np.broadcast_to(np.asarray(elem, dtype=np.int64), self.tid.shape)
        act = np.ones(self.tid.shape, bool) if active is None else np.broadcast_to(
            np.asarray(active, bool), self.tid.shape)
        self.t.accesses.append(Access(operand, store, width, elem * F, act, self.epilogue))

    def ldg(self, op, elem, active=None, width=F):
        self._add(op, False, width, elem, active)

    def stg(self, elem, active=None, width=F):
        self._add("C", True, width, elem, active)

    def sts(self, op, word, active=None, width=F):
        self._add(op, True, width, word, active)

    def lds(self, op, word, width=F):
        self._add(op, False, width, word, None)

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
    """Rungs 4-5: the strided copy loops, one float per iteration, As[BM][BK]."""
    BM, BN, BK = c["BM"], c["BN"], c["BK"]
    for base in range(0, BM * BK, THREADS):
        i = base + t.tid
        r, col = i // BK, i % BK
        live = i < BM * BK
        t.ldg("A", r * K + col, live & (r < M) & (col < K))
        t.sts("As", r * BK + col, live)
    for base in range(0, BK * BN, THREADS):
        i = base + t.tid
        r, col = i // BN, i % BN
        live = i < BK * BN
        t.ldg("B", r * N + col, live & (r < K) & (col < N))
        t.sts("Bs", r * BN + col, live)


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


def _warptiling(rung, c, M, N, K):
    BM, BN, BK, WM, WN = c["BM"], c["BN"], c["BK"], c["WM"], c["WN"]
    TM, TN, WNITER = c["TM"], c["TN"], c["WNITER"]
    WMITER = rung.derived(c)["WMITER"]
    WSUBM, WSUBN = WM // WMITER, WN // WNITER
    THREADS = rung.threads(c)
    a_stride = BM + c["PAD"]
    t = _Tracer(THREADS, BK)
    warp, lane = t.tid // 32, t.tid % 32
    wr, wc = warp // (BN // WN), warp % (BN // WN)
    lr, lc = lane // (WSUBN // TN), lane % (WSUBN // TN)
    trow, tcol = wr * WM + lr * TM, wc * WN + lc * TN
    loads = (-(-(BM * BK // 4) // THREADS), -(-(BK * BN // 4) // THREADS))
    _copy_vec4(t, c, M, N, K, THREADS, a_stride, per_thread=loads)
    for k in range(BK):
        for wm in range(WMITER):
            for i in range(0, TM, 4):
                t.lds("As", k * a_stride + trow + wm * WSUBM + i, width=16)
        for wn in range(WNITER):
            for j in range(0, TN, 4):
                t.lds("Bs", k * BN + tcol + wn * WSUBN + j, width=16)
        t.ffma(WMITER * TM * WNITER * TN)
    t.epilogue = True
    for wm in range(WMITER):
        for i in range(TM):
            for wn in range(WNITER):
                for j in range(0, TN, 4):
                    r, col = trow + wm * WSUBM + i, tcol + wn * WSUBN + j
                    t.stg(r * N + col, (r < M) & (col + 3 < N), width=16)
    return t.t


_REPLAY = {1: _untiled, 2: _untiled, 3: _smem_tiling, 4: _blocktile_1d, 5: _blocktile_2d,
           6: _vectorized, 7: _vectorized, 8: _vectorized, 9: _vectorized, 10: _warptiling}


def trace(rung: Rung, config: Config, shape=(4096, 4096, 4096)) -> Trace:
    """One K step (and the epilogue) of the block at the origin, every thread."""
    M, N, K = shape
    return _REPLAY[rung.number](rung, dict(config), M, N, K)


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
    ops: dict  # (operand, "load"|"store") -> OperandBill
    block_bytes_requested: int  # global load bytes the whole block asks for per K step
    block_bytes_distinct: int  # distinct global bytes the block reads per K step
    grid: tuple[int, int, int]
    k_steps: int

    # -- the headline figures -------------------------------------------------------------
    def op(self, operand: str, kind: str = "load") -> OperandBill:
        return self.ops.get((operand, kind), OperandBill())

    @property
    def flops_per_warp(self) -> float:
        return 2 * 32 * self.ffma_per_warp

    @property
    def global_sector_bytes_per_warp(self) -> float:
        """A and B, per warp per K step: the seed's 1056 (rung 1) and 160 (rung 2)."""
        return self.op("A").sector_bytes + self.op("B").sector_bytes

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
    def smem_wavefronts_per_warp(self) -> float:
        return sum(b.wavefronts for (o, _), b in self.ops.items() if o in ("As", "Bs"))

    @property
    def l1_wavefronts_per_warp(self) -> float:
        return self.op("A").lines + self.op("B").lines

    @property
    def intensity(self) -> float:
        """FLOP per global byte the block's loads request (no reuse through any cache):
        2*BM*BN*BK / ((BM+BN)*BK*4) for the tiled rungs, 0.25 for rungs 1-2."""
        return self.warps * self.flops_per_warp / self.block_bytes_requested

    @property
    def dram_bytes(self) -> int:
        """The block-tile model: each block reads its distinct bytes of every K step (reuse
        inside a block is free, across blocks none), C is written once."""
        M, N, _ = self.shape
        blocks = self.grid[0] * self.grid[1]
        return blocks * self.k_steps * self.block_bytes_distinct + M * N * F

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
            "block_bytes_requested": self.block_bytes_requested,
            "block_bytes_distinct": self.block_bytes_distinct,
            "dram_bytes": self.dram_bytes, "minimal_dram_bytes": self.minimal_dram_bytes,
            "smem_wavefronts_per_warp": self.smem_wavefronts_per_warp,
            "l1_wavefronts_per_warp": self.l1_wavefronts_per_warp,
            "ops": {f"{o}.{k}": {**vars(b), "sector_bytes": b.sector_bytes,
                                 "conflict_ways": b.conflict_ways}
                    for (o, k), b in self.ops.items()},
        }


def count(rung: Rung, config: Config, shape=(4096, 4096, 4096)) -> Bill:
    """Trace one K step of `rung` at `config` and count it per warp (see the module doc)."""
    t = trace(rung, config, shape)
    warps = t.threads // 32
    ops: dict[tuple[str, str], OperandBill] = {}
    requested = 0
    distinct: dict[str, set] = {}
    for a in t.accesses:
        b = ops.setdefault((a.operand, "store" if a.store else "load"), OperandBill())
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
    return Bill(rung.label, dict(config), tuple(shape), t.threads, warps, t.bk,
                t.ffma, ops, requested, sum(map(len, distinct.values())) * F,
                rung.grid(config, M, N), -(-K // t.bk))
