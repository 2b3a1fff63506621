"""Plan a launch of rung 14 (Stream-K): how many blocks, which tiles whole, which streamed.

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
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

MIN_KTILES = 4  # shortest k-range worth giving a block of its own
INT32_MAX = 2**31 - 1


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Plan:
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
def plan(split: int, fixup: int, bm: int, bn: int, bk: int, M: int, N: int, K: int,
         batch: int, slots_on_gpu: int) -> Plan:
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
    return Plan(grid=grid, tiles_n=tiles_n, tiles_mn=tiles_mn, dp_tiles=dp, sk_tiles=sk,
                sk_blocks=sk_blocks, k_tiles=KT, slots=slots, slot_floats=bm * bn,
                fixup=fixup)
