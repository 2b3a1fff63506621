"""Rung 18 (small tiles, batches, split-K; kernels/small/) against float64 on the GPU (skipped
without one).

The method is tests/test_membound_gpu.py's (`_run`: fresh uniform inputs inside buffers of
NaN, C inside a buffer of SENTINEL, C itself NaN when beta = 0, bench/check.py's bound, and
nothing outside C may change), here over: ragged M, N, K from 1 to primes past the tiles, at
every part count of K (1, chosen to fill the GPU, and fixed ones: more parts than k-tiles
included); every layout, aligned or not; batches with their strides (a broadcast operand
included) and split-K together; the fixed-order fix-up bit for bit across runs; the
workspace's counters left at zero (a second call on the same stream is right too); and a
workspace replaced between two calls of a bound launch.
"""

from __future__ import annotations

import itertools

import pytest

import sgemmlab
from sgemmlab import registry
from sgemmlab.bench.check import check_result
from sgemmlab.runtime import workspace
from sgemmlab.runtime.arrays import stream_for
from sgemmlab.runtime.decompose import splitk as plan
from sgemmlab.runtime.launch import Launcher
from test_membound_gpu import LAYOUT_IDS, LAYOUTS, NAN, _bits, _run

pytestmark = pytest.mark.gpu

R18 = registry.rung(18)
SEED = R18.seed
SIDES = (1, 2, 17, 31, 33, 64, 127, 131)
DEEP = (1, 7, 16, 17, 131, 1000, 3635)
SPLITS = (1, 0, 3, 64)  # none, to fill the GPU, a few, more parts than short K has k-tiles
#: tile shapes of the space: the smallest, tall, wide, the largest thread tiles
CONFIGS = [SEED, R18.default("NVIDIA H200"), {**SEED, "BM": 16, "BN": 16, "TM": 1, "TN": 1},
           {**SEED, "BM": 64, "BN": 16, "TM": 4, "TN": 1, "BK": 16},
           {**SEED, "BM": 16, "BN": 128, "TM": 2, "TN": 4, "BK": 32},
           {**SEED, "BM": 64, "BN": 64, "TM": 4, "TN": 4, "BK": 16}]


def _torch():
    import torch

    return torch


def _ab(i):
    return [(1.0, 0.0), (0.5, -2.0), (-1.5, 1.0)][i % 3]


def test_the_configurations_tested_are_legal():
    for cfg in CONFIGS:
        assert R18.violations(cfg) == [], cfg


@pytest.mark.parametrize("split", SPLITS, ids=lambda s: f"split{s}")
@pytest.mark.parametrize("M", SIDES)
def test_ragged_shapes_at_every_split(M, split):
    cfg = {**SEED, "SPLIT": split}
    for i, (N, K) in enumerate(itertools.product(SIDES, DEEP)):
        if (i + M) % 4 and K not in (1, 3635):
            continue  # every N and K at some M; K = 1 and the deepest K everywhere
        alpha, beta = _ab(i)
        _run(R18, cfg, M, N, K, alpha=alpha, beta=beta, api=True)


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c['BM']}x{c['BN']}t{c['TM']}x{c['TN']}")
def test_tile_shapes(cfg):
    for i, (M, N, K) in enumerate([(1, 1, 1), (127, 129, 131), (29, 32, 3635), (65, 17, 9),
                                   (200, 300, 64), (16, 128, 32)]):
        alpha, beta = _ab(i)
        for split in (1, 0):
            _run(R18, {**cfg, "SPLIT": split}, M, N, K, alpha=alpha, beta=beta)


@pytest.mark.parametrize("mode", ["tight", "odd-ld", "offset"])
@pytest.mark.parametrize("ta, tb", LAYOUTS, ids=LAYOUT_IDS)
def test_every_layout(ta, tb, mode):
    for i, (M, N, K) in enumerate([(127, 129, 131), (29, 32, 3635), (3, 70, 33), (64, 5, 200)]):
        alpha, beta = _ab(i)
        _run(R18, {**SEED, "SPLIT": 0 if i % 2 else 5}, M, N, K, alpha=alpha, beta=beta,
             ta=ta, tb=tb, mode=mode)


def test_the_fixed_order_fix_up_is_bit_reproducible_and_leaves_the_counters_zero():
    torch = _torch()
    cfg = {**SEED, "SPLIT": 0}
    M, N, K = 29, 32, 3635
    C, A, B = _run(R18, cfg, M, N, K)
    first = C.view.clone()
    for _ in range(3):  # the counters must be zero again, or a later call would sum wrongly
        _run(R18, cfg, M, N, K, operands=(C, A, B))
        assert torch.equal(_bits(C.view), _bits(first)), "split-K results differ run to run"
    p = plan(0, cfg["BM"], cfg["BN"], cfg["BK"], M, N, K, 1,
             torch.cuda.get_device_properties(0).multi_processor_count)
    assert p.parts > 1, "this shape must split (it is the case being tested)"


def _batched(batch, M, N, K, cfg, *, alpha=1.0, beta=0.0, share=None):
    """A batched product through the launcher: A (batch, M, K), B (batch, K, N), C (batch, M,
    N), or with `share` ("a" / "b") that operand one matrix for the whole batch (stride 0)."""
    torch = _torch()
    A = torch.rand(1 if share == "a" else batch, M, K, device="cuda") * 2 - 1
    B = torch.rand(1 if share == "b" else batch, K, N, device="cuda") * 2 - 1
    C = (torch.full((batch, M, N), NAN, device="cuda") if beta == 0
         else torch.rand(batch, M, N, device="cuda") * 2 - 1)
    ab = alpha * (A.double() @ B.double())
    bc = beta * C.double() if beta != 0 else None
    ref = ab + bc if bc is not None else ab
    stream = stream_for(int(torch.cuda.current_stream().cuda_stream), 0)
    Launcher(R18, cfg).bind(M, N, K, alpha, A.data_ptr(), K, B.data_ptr(), N, beta,
                            C.data_ptr(), N, stream, batch=batch,
                            stride_a=0 if share == "a" else M * K,
                            stride_b=0 if share == "b" else K * N, stride_c=M * N)()
    torch.cuda.synchronize()
    res = check_result(C, ref, K, alpha_ab=ab, beta_c=bc)
    assert res.ok, f"batch {batch} x {M}x{N}x{K} {cfg} share={share}: {res.reason}"


@pytest.mark.parametrize("split", (1, 0, 4), ids=lambda s: f"split{s}")
def test_batches_with_split_k(split):
    cfg = {**SEED, "SPLIT": split}
    for i, (batch, M, N, K) in enumerate([(32, 128, 128, 128), (7, 1, 33, 1000), (3, 31, 1, 17),
                                          (256, 16, 16, 16), (2, 127, 129, 2000)]):
        alpha, beta = _ab(i)
        _batched(batch, M, N, K, cfg, alpha=alpha, beta=beta)
    _batched(5, 33, 65, 300, cfg, share="a", alpha=0.5, beta=1.0)
    _batched(5, 33, 65, 300, cfg, share="b")


def test_batched_products_through_the_api():
    torch = _torch()
    a = torch.rand(9, 31, 77, device="cuda") * 2 - 1
    b = torch.rand(9, 77, 45, device="cuda") * 2 - 1
    out = sgemmlab.matmul(a, b, kernel=R18.label, config={**SEED, "SPLIT": 0})
    ref = a.double() @ b.double()
    res = check_result(out, ref, 77)
    assert res.ok, res.reason


def test_a_bound_launch_follows_a_replaced_workspace():
    """A bound split launch re-reads its stream's workspace when a bigger call has replaced
    it (workspace.generation), so both calls stay right."""
    torch = _torch()
    small, big = (31, 33, 2000), (64, 128, 16000)
    cfg = {**SEED, "SPLIT": 0}
    torch.cuda.synchronize()
    workspace.release_all()  # earlier tests in this process may have grown it already
    Cs, As, Bs = _run(R18, cfg, *small, api=True)  # binds a launch the API keeps
    before = workspace.generation
    _run(R18, {**cfg, "BM": 64, "BN": 64, "TM": 4, "TN": 4}, *big, api=True)
    assert workspace.generation > before, "the big call must have replaced the workspace"
    _run(R18, cfg, *small, operands=(Cs, As, Bs), api=True)  # the kept launch, re-pointed
    torch.cuda.synchronize()
