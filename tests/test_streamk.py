"""Rung 14's launch plan (CPU): the partition of the work and the workspace it needs.

The kernel and runtime/decompose.py must agree on who computes what. These tests replay the
kernel's arithmetic (kernels/ladder/14_streamk.cu: Stream::first, Stream::owner, the slot b + t)
on the plan and check what a wrong plan would break: every k-tile of every tile computed
exactly once, whole tiles in full waves, ranges never shorter than MIN_KTILES unless there
is nothing to share, distinct workspace slots for every (block, split tile) pair, all
inside the workspace.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sgemmlab.runtime.decompose import MIN_KTILES, ceil_div
from sgemmlab.runtime.decompose import StreamKPlan as Plan
from sgemmlab.runtime.decompose import streamk as plan


def first(total: int, blocks: int, b: int) -> int:  # Stream::first
    return total * b // blocks


def owner(total: int, blocks: int, x: int) -> int:  # Stream::owner
    return ((x + 1) * blocks + total - 1) // total - 1


def work(p: Plan) -> list[tuple[int, int, int, int]]:
    """(block, tile, first k-tile, end k-tile) for every piece of work the kernel runs."""
    out = []
    for b in range(p.grid):
        out += [(b, t, 0, p.k_tiles) for t in range(b, p.dp_tiles, p.grid)]
    total = p.sk_tiles * p.k_tiles
    for b in range(p.sk_blocks):
        x, end = first(total, p.sk_blocks, b), first(total, p.sk_blocks, b + 1)
        while x < end:
            t, kb = divmod(x, p.k_tiles)
            ke = min(p.k_tiles, kb + end - x)
            out.append((b, p.dp_tiles + t, kb, ke))
            x += ke - kb
    return out


def check_plan(p: Plan, tiles: int) -> None:
    pieces = work(p)
    covered: dict[int, list[tuple[int, int]]] = {}
    for _, t, kb, ke in pieces:
        assert 0 <= kb < ke <= p.k_tiles
        covered.setdefault(t, []).append((kb, ke))
    assert sorted(covered) == list(range(tiles)), "some tile is never computed"
    for t, ranges in covered.items():
        ranges.sort()
        assert ranges[0][0] == 0 and ranges[-1][1] == p.k_tiles, f"tile {t} misses k-tiles"
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])), f"tile {t}: gap/overlap"
    total = p.sk_tiles * p.k_tiles
    slots = set()
    for b, t, kb, ke in pieces:
        if t < p.dp_tiles or (kb == 0 and ke == p.k_tiles):
            continue
        rel = t - p.dp_tiles
        lo, hi = owner(total, p.sk_blocks, rel * p.k_tiles), owner(
            total, p.sk_blocks, (rel + 1) * p.k_tiles - 1)
        assert lo <= b <= hi, "the kernel's owner() misses a contributor"
        assert hi > lo, "a split tile with one contributor would wait for nobody"
        slot = b + rel
        assert slot not in slots, f"slot {slot} shared by two partial tiles"
        slots.add(slot)
        assert slot < p.slots or p.slots == p.sk_tiles or p.fixup == 2, \
            "slot past the workspace"  # (FIXUP = 2 has no slots: partials go into C)
    assert p.grid <= max(p.dp_tiles, p.sk_blocks, 1) or p.sk_blocks == 0


@settings(max_examples=300, deadline=None)
@given(split=st.sampled_from([0, 1, 2, 3, 4, 16]), fixup=st.sampled_from([0, 1, 2]),
       M=st.integers(1, 5000), N=st.integers(1, 5000), K=st.integers(1, 9000),
       batch=st.integers(1, 4), slots=st.sampled_from([1, 7, 132, 264]))
def test_every_k_tile_of_every_tile_is_computed_once(split, fixup, M, N, K, batch, slots):
    p = plan(split, fixup, 128, 128, 8, M, N, K, batch, slots)
    tiles = batch * ceil_div(M, 128) * ceil_div(N, 128)
    assert p.tiles_mn * batch == tiles
    check_plan(p, tiles)


def test_stream_k_keeps_full_waves_whole_and_streams_the_rest():
    # 1024^3 in 128 x 128 tiles: 64 tiles < 264 slots: all streamed, 128 k-tiles of 8 each
    p = plan(0, 0, 128, 128, 8, 1024, 1024, 1024, 1, 264)
    assert (p.dp_tiles, p.sk_tiles, p.sk_blocks, p.grid) == (0, 64, 264, 264)
    # 4096^3: 1024 tiles = 3 waves of 264 + 232: 2 waves whole, the last 1.88 waves streamed
    p = plan(0, 0, 128, 128, 8, 4096, 4096, 4096, 1, 264)
    assert (p.dp_tiles, p.sk_tiles, p.grid) == (528, 496, 264)
    # a whole number of waves needs no stream at all
    p = plan(0, 0, 128, 128, 8, 128 * 12, 128 * 22, 1024, 1, 264)
    assert (p.dp_tiles, p.sk_tiles, p.slots) == (264, 0, 0)


def test_ranges_are_never_shorter_than_the_minimum_when_there_is_enough_work():
    for K in (64, 256, 1000, 4096):
        p = plan(0, 0, 128, 128, 8, 300, 300, K, 1, 264)
        lengths = [e - s for s, e in p.ranges()]
        if p.sk_tiles * p.k_tiles >= MIN_KTILES:
            assert min(lengths) >= MIN_KTILES, (K, lengths[:5])


def test_split_k_cuts_every_tile_into_equal_parts():
    p = plan(4, 0, 128, 128, 8, 256, 256, 4096, 1, 264)
    assert (p.dp_tiles, p.sk_tiles, p.sk_blocks, p.grid) == (0, 4, 16, 16)
    assert {e - s for s, e in p.ranges()} == {128}
    # never more parts than k-tiles
    assert plan(16, 0, 128, 128, 8, 256, 256, 40, 1, 264).sk_blocks == 4 * 5


def test_data_parallel_is_persistent_and_never_splits():
    p = plan(1, 1, 64, 64, 8, 4096, 4096, 512, 1, 264)
    assert (p.sk_tiles, p.grid, p.slots) == (0, 264, 0)


def test_workspace_regions():
    ordered = plan(0, 0, 128, 128, 8, 1024, 1024, 1024, 1, 264)
    atomic = plan(0, 1, 128, 128, 8, 1024, 1024, 1024, 1, 264)
    tile = 128 * 128 * 4
    assert ordered.slots == ordered.sk_blocks + ordered.sk_tiles
    assert atomic.slots == atomic.sk_tiles
    # counters (and the atomic tiles) in the region kept zero; ordered partials in scratch
    assert ordered.zeroed_bytes == ordered.counters_bytes >= 4 * ordered.sk_tiles
    assert ordered.scratch_bytes == ordered.slots * tile
    assert atomic.zeroed_bytes == atomic.counters_bytes + atomic.slots * tile
    assert atomic.scratch_bytes == 0
    assert ordered.counters_bytes % 16 == 0
    # into C: three counters per streamed tile (tickets, ready, done), no tile anywhere
    into_c = plan(0, 2, 128, 128, 8, 1024, 1024, 1024, 1, 264)
    assert into_c.slots == 0 and into_c.scratch_bytes == 0
    assert into_c.zeroed_bytes == into_c.counters_bytes == -(-12 * into_c.sk_tiles // 16) * 16


@pytest.mark.parametrize("bad", [(0, 1, 1, 1, 1), (1, 1, 0, 1, 1), (1, 1, 1, 1, 0)])
def test_plan_refuses_empty_problems(bad):
    M, N, K, batch, slots = bad
    with pytest.raises(ValueError):
        plan(0, 0, 128, 128, 8, M, N, K, batch, slots)


def test_small_exhaustive_grid_of_problems():
    for M, N, K, slots in itertools.product((1, 100, 300), (1, 129, 700), (1, 9, 33, 300),
                                            (1, 3, 8)):
        p = plan(0, 0, 64, 64, 8, M, N, K, 1, slots)
        check_plan(p, ceil_div(M, 64) * ceil_div(N, 64))
