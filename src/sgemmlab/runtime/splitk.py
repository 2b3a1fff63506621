"""Plan a split-K launch (rungs 15, 16 and 18): the grid, the parts of K and the workspace.

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
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

MIN_KTILES = 4  # the shortest part worth a block of its own
MAX_PARTS = 64
WAVES = 2  # blocks wanted: this many times the block slots, when the tiles are fewer
MAX_PARTIAL_BYTES = 64 << 20  # the most scratch a split launch may take
MAX_GRID_Z = 65535


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Plan:
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
def plan(split: int, bm: int, bn: int, bk: int, M: int, N: int, K: int, batch: int,
         slots_on_gpu: int, rows_on_x: bool = False) -> Plan:
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
    return Plan(grid=(gx, gy, batch * parts), parts=parts, tiles=tiles, k_tiles=kt,
                tile_floats=bm * bn)
