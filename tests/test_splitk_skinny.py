"""Split-K in the skinny rungs 15 and 16 (runtime/decompose.py's plan as they use it), without
a GPU.

Their tile is the rung's block tile (RM x BN for 15, BM x RN for 16), their unit of K the
quantum of 128 the kernels step by (every part starts on a 16-byte boundary of the streamed
operand), and rung 16 puts its row tiles on gridDim.x: the plan's grid must be the one the
kernel indexes, its parts must cover K in whole quanta once each, and the workspace must
hold one slot per (tile, part).
"""

from __future__ import annotations

import pytest

from sgemmlab import registry
from sgemmlab.runtime import decompose
from sgemmlab.runtime.decompose import splitk as plan

R15, R16 = registry.rung(15), registry.rung(16)
SLOTS = 132


def _plan(rung, cfg, M, N, K):
    rows, cols = rung.tile(cfg)
    return plan(cfg["SPLIT"], rows, cols, rung.k_unit(cfg), M, N, K, 1, SLOTS, rung.rows_on_x)


def test_the_skinny_rungs_split_in_quanta_of_128():
    for r in (R15, R16):
        assert "splitk" in r.features and "SPLIT" in r.host_only
        assert r.k_unit(r.seed) == 128
        assert r.seed["SPLIT"] == 0 and r.is_legal(r.seed)
        assert not r.is_legal({**r.seed, "SPLIT": 65})
        assert "SPLIT" not in r.macros(r.seed)  # host-only: one cubin for every split
    assert registry.rung(18).k_unit(registry.rung(18).seed) == registry.rung(18).seed["BK"]


def test_the_kernels_quantum_is_the_registrys():
    """The kernels step K by `constexpr int KQ`; the planner by k_unit: one number, twice."""
    import re

    from sgemmlab.runtime.compiler import KERNEL_DIR

    text = (KERNEL_DIR / "membound" / "skinny.cuh").read_text()  # what 15 and 16 share
    found = re.findall(r"constexpr int KQ = (\d+);", text)
    for r in (R15, R16):
        assert '#include "membound/skinny.cuh"' in (KERNEL_DIR / r.source).read_text()
        assert found == [str(r.k_unit(r.seed))], (r.source, found)


@pytest.mark.parametrize("rung", [R15, R16], ids=["r15", "r16"])
@pytest.mark.parametrize("split", [0, 1, 3, 64])
@pytest.mark.parametrize("long_, K", [(1, 1), (1, 9240), (2125, 9240), (4096, 4096),
                                      (100_000, 300), (33, 13251)])
def test_the_grid_is_the_kernels_and_parts_cover_k_in_quanta(rung, split, long_, K):
    cfg = {**rung.seed, "SPLIT": split}
    small = 3
    M, N = (small, long_) if rung is R15 else (long_, small)
    p = _plan(rung, cfg, M, N, K)
    assert p.grid[:2] == rung.grid(cfg, M, N)[:2]  # the kernel's blockIdx.x and y
    assert p.grid[2] == p.parts
    units = -(-K // 128)
    assert p.k_tiles == units and 1 <= p.parts <= units
    firsts = [units * q // p.parts for q in range(p.parts + 1)]
    assert firsts[0] == 0 and firsts[-1] == units
    assert all(b > a for a, b in zip(firsts, firsts[1:])), "a part without a quantum of K"
    rows, cols = rung.tile(cfg)
    if p.parts > 1:
        assert p.scratch_bytes == p.tiles * p.parts * rows * cols * 4
    if split == 0 and p.parts > 1:
        assert p.tiles < SLOTS and units // p.parts >= decompose.MIN_KTILES


def test_a_short_output_with_a_long_k_is_split_to_fill_the_gpu():
    # 1 x 2125 x 9240: 67 column tiles of 32 on 132 slots; 73 quanta allow 18 parts of 4
    p = _plan(R15, R15.seed, 1, 2125, 9240)
    assert p.tiles == 67 and p.parts == -(-2 * SLOTS // 67)
    # 592 x 1 x 13251 on rung 16 (rows on x): 19 row tiles, 104 quanta -> 26 parts of 4
    p = _plan(R16, R16.seed, 592, 1, 13251)
    assert p.grid[0] == 19 and p.parts == min(-(-2 * SLOTS // 19), 104 // decompose.MIN_KTILES)
    # enough tiles already: no split
    assert _plan(R15, R15.seed, 16, 32 * SLOTS, 16384).parts == 1


def test_rung_16s_long_side_may_pass_65535_row_tiles():
    cfg = {**R16.seed, "SPLIT": 1}
    p = _plan(R16, cfg, 32 * 70000, 1, 64)
    assert p.grid == (70000, 1, 1)
    with pytest.raises(OverflowError, match="gridDim"):
        _plan(R15, {**R15.seed, "SPLIT": 1}, 16, 32 * 2**31, 64)
