"""How a launch cuts its work: the one place the grid, the parts of K and the workspace of a
decomposed launch are planned, for the three families that decompose.

- `streamk`: rung 14 and its twins (22-25), a persistent grid over (tile, k-range) work;
- `splitk`: rungs 15, 16 and 18, blockIdx.z carrying the batch and a part of K;
- `tensor`: rung 20 with TAIL, the last partial wave (or every tile, when there are fewer
  tiles than SMs) split along K.

Every plan says its grid, the workspace it needs (`zeroed_bytes`, the region the kernels leave
zero: counters, and `scratch_bytes`, anything between launches: partial tiles) and
`describe()`s itself for `sgemmlab explain`. Pure arithmetic: no GPU.

Stream-K (rung 14): how many blocks, which tiles whole, which streamed.

The work of a product is T = batch x ceil(M/BM) x ceil(N/BN) output tiles of KT = ceil(K/BK)
k-tiles each. With G block slots on the GPU (SMs x blocks per SM):

SPLIT = 1  data-parallel: every tile whole, min(T, G) persistent blocks looping over them.
SPLIT = s  split-K: every tile's k-tiles cut into min(s, KT) equal ranges, one block each
           (T x s blocks; not persistent. FIXUP 0 and 1 never wait: the last block of a
           tile to finish fixes it up, so any grid works. FIXUP 2 does wait: the first
           finisher stores into C and the others spin until it has; they wait only on
           a block that is already running, so any grid works there too).
SPLIT = 0  Stream-K: when T is a whole number of waves (T % G == 0), all tiles whole. Else
           all but the last one or two waves' worth of tiles stay whole (dp_tiles, a multiple
           of G), and the k-tiles of the rest (G to 2G tiles, or all T when T < G) are cut
           into equal ranges over the blocks, never shorter than MIN_KTILES k-tiles (a range
           pays the pipeline's fill and a fix-up; shorter ones cost more than they share).

Partial tiles meet in a workspace (runtime/workspace.py): one counter per streamed tile and,
for FIXUP = 1, one accumulation tile per streamed tile, in the region the kernel leaves zeroed;
for FIXUP = 0 a slot per (block, tile) pair of the stream (block + tile is unique, see
kernels/ladder/14_streamk.cu) in the scratch region; for FIXUP = 2 (partials added into C itself)
three counters per streamed tile and nothing else.

Split-K (rungs 15, 16 and 18): the grid, the parts of K and the workspace.

The work of a product is T = batch x ceil(M/BM) x ceil(N/BN) output tiles (BM x BN: the
rung's block tile) of KT = ceil(K/BK) units of K each (BK: rung 18's k-tile, rungs 15-16's
quantum of 128). The grid is (tiles across N, tiles down M, batch x parts), or (tiles down
M, tiles across N, ...) for a rung that puts rows on x (rung 16): blockIdx.z carries the
product of the batch and the part of K.

SPLIT = s >= 1  K in min(s, KT) parts, fixed by the configuration (fewer where the
                partial tiles would pass MAX_PARTIAL_BYTES);
SPLIT = 0       the parts chosen here, per problem: enough blocks for WAVES waves of the
                GPU's block slots when the tiles alone are fewer, never a part shorter than
                MIN_KTILES k-tiles (each part pays a partial tile's store and the fix-up's
                read), never more than MAX_PARTS, never a workspace past MAX_PARTIAL_BYTES.

With more than one part, each tile has a counter (the workspace's zeroed region, which the
kernel leaves zero) and one partial tile per part (the scratch region).

Tensor rungs (rung 20 with TAIL): the parts of a split tile meet in the workspace (a 128 x 128
partial tile per part, a counter per consumer thread per split tile), and the last to arrive
adds them in a fixed order.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..registry import TILE_M

#: The shortest run of k-tiles worth a block (or a part) of its own, in every family: each
#: pays a pipeline's fill and a fix-up's traffic, so shorter ones cost more than they share.
MIN_KTILES = 4


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)

INT32_MAX = 2**31 - 1



@dataclass(frozen=True)
class StreamKPlan:
    grid: int  # blocks launched
    tiles_n: int  # tiles across N
    tiles_mn: int  # tiles per product of the batch
    dp_tiles: int  # tiles computed whole, first, in full waves
    sk_tiles: int  # tiles whose k-tiles are streamed
    sk_blocks: int  # blocks sharing the stream
    k_tiles: int  # KT
    slots: int  # partial tiles the workspace holds
    slot_floats: int  # BM x BN
    fixup: int  # 0 ordered (slots in scratch), 1 atomic (slots in the zeroed region),
    #             2 atomic into C (counters only)

    @property
    def zeroed_bytes(self) -> int:
        """The workspace region kept zero between launches: the counters (16-byte aligned),
        then, for the atomic fix-up, one tile per streamed tile."""
        return self.counters_bytes + (self.slots * self.slot_floats * 4
                                      if self.fixup == 1 else 0)

    @property
    def scratch_bytes(self) -> int:
        """The region for the ordered fix-up's partial tiles (anything between launches)."""
        return self.slots * self.slot_floats * 4 if self.fixup == 0 else 0

    @property
    def counters_bytes(self) -> int:
        """One int per streamed tile (three for FIXUP = 2: tickets, ready, done)."""
        per_tile = 3 if self.fixup == 2 else 1
        return -(-4 * per_tile * self.sk_tiles // 16) * 16

    def ranges(self) -> list[tuple[int, int]]:
        """Each streaming block's [first, last) k-tiles of the stream (what the kernel's
        Stream::first computes), for tests and `sgemmlab explain`."""
        total = self.sk_tiles * self.k_tiles
        return [(total * b // self.sk_blocks, total * (b + 1) // self.sk_blocks)
                for b in range(self.sk_blocks)]

    def describe(self) -> str:
        if not self.sk_tiles:
            return f"{self.dp_tiles} whole tiles on {self.grid} persistent blocks"
        per = self.sk_tiles * self.k_tiles / self.sk_blocks
        head = f"{self.dp_tiles} whole tiles, then " if self.dp_tiles else ""
        return (f"{head}{self.sk_tiles} tiles x {self.k_tiles} k-tiles streamed over "
                f"{self.sk_blocks} blocks ({per:.1f} k-tiles each), grid {self.grid}")


@lru_cache(maxsize=4096)
def streamk(split: int, fixup: int, bm: int, bn: int, bk: int, M: int, N: int, K: int,
         batch: int, slots_on_gpu: int) -> StreamKPlan:
    """The launch of rung 14 for one problem; `slots_on_gpu` = SMs x resident blocks per SM."""
    if min(M, N, K, batch, slots_on_gpu) < 1:
        raise ValueError("plan needs M, N, K, batch and the GPU's block slots >= 1")
    tiles_n = ceil_div(N, bn)
    tiles_mn = ceil_div(M, bm) * tiles_n
    T, KT, G = batch * tiles_mn, ceil_div(K, bk), slots_on_gpu
    if split == 1:
        dp, sk, sk_blocks, grid = T, 0, 0, min(T, G)
    elif split >= 2:
        dp, sk = 0, T
        sk_blocks = grid = T * min(split, KT)
    else:
        waves, rest = divmod(T, G)
        if rest == 0:
            dp, sk, sk_blocks, grid = T, 0, 0, G
        else:
            dp = max(waves - 1, 0) * G
            sk = T - dp
            sk_blocks = max(1, min(G, sk * KT // MIN_KTILES))
            grid = max(min(dp, G), sk_blocks)
    # the kernel's int arithmetic: `tile += gridDim.x` past the last tile, three counters a
    # streamed tile for FIXUP 2, and the 64-bit products of Stream::owner
    if T + grid > INT32_MAX or (fixup == 2 and 3 * sk > INT32_MAX) or \
            sk * KT * (sk_blocks + 1) >= 2**63:
        raise OverflowError(f"rung 14 cannot index {T} tiles of {KT} k-tiles over {grid} "
                            f"blocks in its 32-bit (and 64-bit) arithmetic: batch {batch} is "
                            "too large for it; let dispatch choose, or split the batch")
    slots = {0: sk_blocks + sk, 1: sk}.get(fixup, 0) if sk else 0
    return StreamKPlan(grid=grid, tiles_n=tiles_n, tiles_mn=tiles_mn, dp_tiles=dp, sk_tiles=sk,
                sk_blocks=sk_blocks, k_tiles=KT, slots=slots, slot_floats=bm * bn,
                fixup=fixup)





MAX_PARTS = 64  # the most parts of K
WAVES = 2  # blocks wanted: this many times the block slots, when the tiles are fewer
MAX_PARTIAL_BYTES = 64 << 20  # the most scratch a split launch may take
MAX_GRID_Z = 65535



@dataclass(frozen=True)
class SplitKPlan:
    grid: tuple[int, int, int]
    parts: int  # K cut into this many parts (1: no workspace)
    tiles: int  # output tiles of the whole batch
    k_tiles: int  # KT
    tile_floats: int  # BM x BN

    @property
    def zeroed_bytes(self) -> int:
        """One counter per tile (16-byte multiple); nothing without a split."""
        return -(-4 * self.tiles // 16) * 16 if self.parts > 1 else 0

    @property
    def scratch_bytes(self) -> int:
        """A partial tile per (tile, part); nothing without a split."""
        return self.tiles * self.parts * self.tile_floats * 4 if self.parts > 1 else 0

    def describe(self) -> str:
        gx, gy, gz = self.grid
        if self.parts == 1:
            return f"{self.tiles} tiles, one block each (grid {gx}x{gy}x{gz})"
        per = self.k_tiles / self.parts
        return (f"{self.tiles} tiles x {self.parts} parts of K ({per:.1f} k-tiles each), "
                f"{self.tiles * self.parts} blocks, a fixed-order fix-up")


def auto_parts(tiles: int, k_tiles: int, tile_floats: int, batch: int, slots: int) -> int:
    """SPLIT = 0: the parts of K for `tiles` tiles on a GPU with `slots` block slots."""
    if tiles >= slots:
        return 1
    want = ceil_div(WAVES * slots, tiles)
    fit = MAX_PARTIAL_BYTES // max(tiles * tile_floats * 4, 1)
    return max(1, min(want, k_tiles // MIN_KTILES, MAX_PARTS, fit, MAX_GRID_Z // batch))


@lru_cache(maxsize=4096)
def splitk(split: int, bm: int, bn: int, bk: int, M: int, N: int, K: int, batch: int,
         slots_on_gpu: int, rows_on_x: bool = False) -> SplitKPlan:
    """The launch of a split-K rung for one problem; `slots_on_gpu` = SMs x resident blocks
    per SM. OverflowError when the grid cannot hold it."""
    if min(M, N, K, batch, slots_on_gpu) < 1 or split < 0:
        raise ValueError("plan needs M, N, K, batch and the GPU's block slots >= 1, "
                         "and SPLIT >= 0")
    gx, gy = ceil_div(N, bn), ceil_div(M, bm)
    if rows_on_x:
        gx, gy = gy, gx
    tiles, kt = gx * gy * batch, ceil_div(K, bk)
    if split == 0:
        parts = auto_parts(tiles, kt, bm * bn, batch, slots_on_gpu)
    else:  # as asked, within the k-tiles and the workspace cap
        fit = MAX_PARTIAL_BYTES // max(tiles * bm * bn * 4, 1)
        parts = max(1, min(split, kt, fit))
    if gx >= 2**31 or gy > 65535 or batch * parts > MAX_GRID_Z:
        raise OverflowError(f"{M}x{N}, batch={batch} in {parts} parts of K need {gx} x "
                            f"{gy} x {batch * parts} blocks along gridDim.x, y and z, which "
                            "allow 2^31 - 1, 65535 and 65535")
    return SplitKPlan(grid=(gx, gy, batch * parts), parts=parts, tiles=tiles, k_tiles=kt,
                tile_floats=bm * bn)


# -- the tensor rungs -------------------------------------------------------------------------
TAIL_MAX = 8  # TAIL: parts per leftover tile at most
SPLIT_MAX = 16  # TAIL, fewer tiles than SMs: parts per tile at most (MIN_KTILES each)


def tail_splits(tiles: int, grid: int, ktiles: int) -> int:
    """TAIL: the parts along K each tile of the last, partial wave becomes (1: none). The
    tiles % grid leftover tiles become parts that fill the grid once, at most TAIL_MAX and
    at most one k-tile each. The kernel reads this as `splits`."""
    rest = tiles % grid
    if rest == 0:
        return 1
    return max(1, min(TAIL_MAX, grid // rest, ktiles))


def split_plan(tiles: int, ktiles: int, sms: int, tail: bool) -> tuple[int, int]:
    """(grid, splits) of rung 20's persistent launch. Without TAIL: min(tiles, SMs) blocks,
    nothing split. With it: at least a wave of tiles, the last partial wave's tiles split
    along K (`tail_splits`); fewer tiles than SMs, every tile split into up to SPLIT_MAX
    parts of MIN_KTILES k-tiles or more, on tiles x parts blocks (the kernel then has
    no whole tiles: gridDim.x > tiles)."""
    if not tail:
        return min(tiles, sms), 1
    if tiles >= sms:
        return sms, tail_splits(tiles, sms, ktiles)
    splits = max(1, min(SPLIT_MAX, sms // tiles, ktiles // MIN_KTILES))
    return tiles * splits, splits


def split_workspace(tiles: int, grid: int, splits: int) -> tuple[int, int]:
    """(floats of partial sums, counters) for `split_plan`'s (grid, splits): per part a
    128 x 128 tile, per split tile a counter for each of the 256 consumer threads."""
    if splits == 1:
        return 0, 0
    rest = tiles % grid  # the split tiles: the last partial wave, or all when grid > tiles
    return rest * splits * TILE_M * 128, rest * 2 * 128



@dataclass(frozen=True)
class TensorPlan:
    grid: int  # persistent blocks
    splits: int  # parts along K of each split tile (1: none)
    tiles: int
    k_tiles: int

    @property
    def work_floats(self) -> int:
        return split_workspace(self.tiles, self.grid, self.splits)[0]

    @property
    def counters(self) -> int:
        return split_workspace(self.tiles, self.grid, self.splits)[1]

    @property
    def zeroed_bytes(self) -> int:
        return 4 * self.counters

    @property
    def scratch_bytes(self) -> int:
        return 4 * self.work_floats

    def describe(self) -> str:
        if self.splits == 1:
            return f"{self.tiles} tiles on {self.grid} persistent blocks"
        return (f"{self.tiles} tiles on {self.grid} persistent blocks, the split ones in "
                f"{self.splits} parts of K")


def tensor(tiles: int, k_tiles: int, sms: int, tail: bool) -> TensorPlan:
    """The launch of a tensor rung: `split_plan`'s grid and parts as a plan."""
    grid, splits = split_plan(tiles, k_tiles, sms, tail)
    return TensorPlan(grid=grid, splits=splits, tiles=tiles, k_tiles=k_tiles)
