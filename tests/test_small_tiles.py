"""Rung 18's launch plan (runtime/decompose.py) and its place in dispatch, without a GPU.

The plan: the grid covers every tile of every product once per part; parts never outnumber
k-tiles, never go below MIN_KTILES k-tiles when chosen (SPLIT = 0), stop once the blocks
fill WAVES waves, and keep the workspace within MAX_PARTIAL_BYTES; the workspace is sized
exactly for the kernel's slots and counters; a grid that cannot launch is refused.
(The kernel's arithmetic of the part ranges is mirrored here: every k-tile in exactly one
part.)
"""

from __future__ import annotations

import itertools

import pytest

from sgemmlab import dispatch, registry
from sgemmlab.runtime import decompose
from sgemmlab.runtime.decompose import splitk as plan

R18 = registry.rung(18)
SLOTS = 264  # 132 SMs x 2 blocks


def _ranges(kt: int, parts: int) -> list[tuple[int, int]]:
    """The kernel's k-tiles of each part: [kt p / parts, kt (p+1) / parts)."""
    return [(kt * p // parts, kt * (p + 1) // parts) for p in range(parts)]


@pytest.mark.parametrize("M, N, K, batch", [(1, 1, 1, 1), (127, 129, 131, 1), (29, 32, 3635, 1),
                                            (32, 128, 128, 32), (4096, 4096, 4096, 1),
                                            (16, 16, 10**6, 1), (1, 2000, 64, 300)])
@pytest.mark.parametrize("split", [0, 1, 2, 7, 64])
def test_the_plan_covers_every_tile_and_k_tile_once(M, N, K, batch, split):
    bm, bn, bk = 32, 32, 16
    p = plan(split, bm, bn, bk, M, N, K, batch, SLOTS)
    gx, gy, gz = p.grid
    assert gx * bn >= N > (gx - 1) * bn and gy * bm >= M > (gy - 1) * bm
    assert gz == batch * p.parts and p.tiles == gx * gy * batch
    kt = -(-K // bk)
    assert p.k_tiles == kt and 1 <= p.parts <= max(kt, 1)
    covered = [t for a, b in _ranges(kt, p.parts) for t in range(a, b)]
    assert covered == list(range(kt))
    if split >= 1:
        fit = decompose.MAX_PARTIAL_BYTES // (p.tiles * bm * bn * 4)
        assert p.parts == max(1, min(split, kt, fit))
    else:
        assert p.parts == 1 or kt // p.parts >= decompose.MIN_KTILES
        assert p.parts <= decompose.MAX_PARTS
        if p.tiles >= SLOTS:
            assert p.parts == 1
    if p.parts > 1:
        assert p.scratch_bytes == p.tiles * p.parts * bm * bn * 4
        assert p.zeroed_bytes >= 4 * p.tiles and p.zeroed_bytes % 16 == 0
    else:
        assert p.scratch_bytes == p.zeroed_bytes == 0


def test_auto_parts_fill_the_gpu_and_no_more():
    # one 32 x 32 tile of 228 k-tiles: two waves want 528 parts; parts of 4 k-tiles allow 57
    assert plan(0, 32, 32, 16, 29, 32, 3635, 1, SLOTS).parts == 228 // decompose.MIN_KTILES
    # ... and a deeper K stops at MAX_PARTS
    assert plan(0, 32, 32, 16, 29, 32, 10**5, 1, SLOTS).parts == decompose.MAX_PARTS
    # 20 tiles: 2 x 264 / 20 -> 27 wanted, but 131 / 16 = 9 k-tiles allow 2 parts of 4
    assert plan(0, 32, 32, 16, 127, 129, 131, 1, SLOTS).parts == 2
    # a full wave of tiles: no split
    assert plan(0, 32, 32, 16, 32 * 16, 32 * 17, 10**5, 1, SLOTS).parts == 1
    # the workspace cap
    p = plan(0, 64, 64, 8, 64 * 8, 64 * 8, 10**6, 1, SLOTS)
    assert p.scratch_bytes <= decompose.MAX_PARTIAL_BYTES


def test_a_grid_that_cannot_launch_is_refused():
    with pytest.raises(OverflowError, match="gridDim"):
        plan(1, 16, 16, 8, 16 * 65536, 16, 16, 1, SLOTS)
    with pytest.raises(OverflowError, match="gridDim"):
        plan(1, 16, 16, 8, 16, 16, 16, 65536, SLOTS)  # a batch past gridDim.z
    # an explicit split of many tiles stays within the workspace cap (and 2^31 tiles)
    p = plan(64, 16, 16, 8, 16 * 4096, 16 * 4096, 10**5, 1, SLOTS)
    assert p.parts == 1 and p.scratch_bytes == 0
    with pytest.raises(ValueError):
        plan(-1, 16, 16, 8, 1, 1, 1, 1, SLOTS)


def test_the_domain_is_what_the_grid_can_hold():
    limit = 65535 * min(R18.space["BM"])
    assert str(limit) in R18.domain
    assert R18.serves(limit, 1, 1) and not R18.serves(limit + 1, 1, 1)
    for cfg in itertools.islice(R18.configs(), 0, None, 7):
        plan(cfg["SPLIT"], cfg["BM"], cfg["BN"], cfg["BK"], limit, 3, 5, 1, SLOTS)


def test_every_configuration_is_deterministic_and_split_k_is_described():
    for cfg in R18.configs():
        assert R18.deterministic(cfg)
    assert dispatch.decomposition(R18, {**R18.seed, "SPLIT": 0}) == (
        "split-K, parts to fill the GPU, fixed-order fix-up")
    assert dispatch.decomposition(R18, {**R18.seed, "SPLIT": 8}) == (
        "split-K x8, fixed-order fix-up")
    assert dispatch.decomposition(R18, {**R18.seed, "SPLIT": 1}) == "data-parallel"


def test_small_products_go_to_the_small_tiles_and_large_ones_do_not(isolated_dispatch):
    def choose(*shape, **kw):
        return dispatch.choose(*shape, gpu_name="NVIDIA H200", sm_count=132, **kw)

    for shape in [(127, 129, 131), (29, 32, 3635), (64, 64, 64), (200, 100, 50)]:
        c = choose(*shape)
        assert c.rung == R18.label and c.source == "heuristic", (shape, c.reason)
    c = choose(128, 128, 128, batch=32)  # batched: the rung has batches
    assert c.rung == R18.label, c.reason
    c = choose(127, 129, 131, deterministic=True)  # its fix-up is in a fixed order
    assert c.rung == R18.label, c.reason
    for shape in [(4096, 4096, 4096), (1024, 1024, 1024), (2048, 2048, 64)]:
        assert choose(*shape).rung != R18.label, shape
