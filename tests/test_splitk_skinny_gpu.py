"""Split-K in the skinny rungs 15 and 16 against float64 on the GPU (skipped without one).

The method is tests/test_membound_gpu.py's (`_run`: fresh inputs inside buffers of NaN, C in
a buffer of SENTINEL, C itself NaN when beta = 0, bench/check.py's bound, nothing outside C
changed), here at every part count (none, chosen to fill the GPU, a few, more than K has
quanta) over K from 1 to past 8192, quanta boundaries (127, 128, 129) included, the small
side 1 to 16, every layout aligned and not, and the fixed-order fix-up bit for bit across
runs with the workspace's counters left at zero.
"""

from __future__ import annotations

import itertools

import pytest

from sgemmlab import registry
from sgemmlab.runtime.decompose import splitk as plan
from test_membound_gpu import LAYOUT_IDS, LAYOUTS, _bits, _run

pytestmark = pytest.mark.gpu

R15, R16 = registry.rung(15), registry.rung(16)
SPLITS = (1, 0, 3, 64)
DEEP = (1, 127, 128, 129, 1000, 4097, 9240)


def _torch():
    import torch

    return torch


def _mn(rung, small, long_):
    return (small, long_) if rung is R15 else (long_, small)


def _ab(i):
    return [(1.0, 0.0), (0.5, -2.0), (-1.5, 1.0)][i % 3]


@pytest.mark.parametrize("split", SPLITS, ids=lambda s: f"split{s}")
@pytest.mark.parametrize("rung", [R15, R16], ids=["r15", "r16"])
def test_every_split_over_k_and_the_sides(rung, split):
    cfg = {**rung.seed, "SPLIT": split}
    for i, (small, long_, K) in enumerate(itertools.product((1, 5, 16), (1, 33, 1000), DEEP)):
        alpha, beta = _ab(i)
        M, N = _mn(rung, small, long_)
        _run(rung, cfg, M, N, K, alpha=alpha, beta=beta)


@pytest.mark.parametrize("mode", ["tight", "odd-ld", "offset"])
@pytest.mark.parametrize("ta, tb", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("rung", [R15, R16], ids=["r15", "r16"])
def test_every_layout_split(rung, ta, tb, mode):
    for i, (small, long_, K) in enumerate([(1, 2125, 9240), (7, 300, 5000), (16, 64, 1031)]):
        alpha, beta = _ab(i)
        M, N = _mn(rung, small, long_)
        _run(rung, {**rung.seed, "SPLIT": 0 if i % 2 else 5}, M, N, K, alpha=alpha, beta=beta,
             ta=ta, tb=tb, mode=mode)


@pytest.mark.parametrize("rung", [R15, R16], ids=["r15", "r16"])
def test_the_fix_up_is_bit_reproducible_and_leaves_the_counters_zero(rung):
    torch = _torch()
    cfg = {**rung.seed, "SPLIT": 0}
    M, N = _mn(rung, 3, 700)
    K = 13251
    C, A, B = _run(rung, cfg, M, N, K)
    first = C.view.clone()
    for _ in range(3):  # the counters must be zero again, or a later call would sum wrongly
        _run(rung, cfg, M, N, K, operands=(C, A, B))
        assert torch.equal(_bits(C.view), _bits(first)), "split-K results differ run to run"
    rows, cols = rung.tile(cfg)
    p = plan(0, rows, cols, rung.k_unit(cfg), M, N, K, 1,
             torch.cuda.get_device_properties(0).multi_processor_count, rung.rows_on_x)
    assert p.parts > 1, "this shape must split (it is the case being tested)"
