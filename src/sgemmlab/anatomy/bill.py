"""The bill of a rung, counted from its index arithmetic.

replay.py's `trace` replays one K step of the block at the origin, every thread: which
global element each lane loads, which shared word it stores or reads, how many FFMAs it
does. `count` splits those threads into warps and counts, per warp instruction:
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

from dataclasses import dataclass

import numpy as np

from ..registry import Config, Rung
from .replay import Access, F, Trace, trace

__all__ = ["BANKS", "F", "LINE", "SECTOR", "Access", "Bill", "Fixup", "OperandBill", "Trace",
           "count", "stream_k_fixup", "trace", "wavefronts"]

SECTOR = 32
LINE = 128
BANKS = 32


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
