"""Sizes near 2^31 (issue 18): every overflow the kernels' int arithmetic could hit is
refused on the host with an OverflowError naming the size, before anything launches — or
it cannot happen (tests/test_reliability_gpu.py runs K at the limit on the H200).

The audit (docs/worklog.md, session 9): row and batch offsets are formed in 64 bits in
every kernel; the k index is an int that may run one k-tile past K before it is compared
(`k0 += BK`, `ceil_div(K, BK)`), rung 21 three more, the tensor rungs' pre-pass 255; tile
indices of C are ints; Stream-K's tile loop, its counters and its 64-bit owner arithmetic
grow with the batch. No CUDA here: shapes only, and the plans.
"""

from __future__ import annotations

import pytest

from sgemmlab import dispatch, plan, registry
from sgemmlab.runtime import decompose, limits
from sgemmlab.runtime.limits import INT32_MAX, K_MAX


def _describe(M, N, K):
    return plan.describe(((M, K), (K, 1)), ((K, N), (N, 1)), ((M, N), (N, 1)))


def test_k_up_to_the_limit_plans_and_one_past_it_is_refused_naming_k():
    assert _describe(2, 1, K_MAX).K == K_MAX
    assert _describe(2, 1, K_MAX - 1).K == K_MAX - 1  # ragged
    with pytest.raises(OverflowError, match=rf"K = {K_MAX + 1} exceeds {K_MAX}"):
        _describe(2, 1, K_MAX + 1)
    with pytest.raises(OverflowError, match="K = 2147483647"):
        _describe(1, 1, INT32_MAX)  # refused on K, not on a leading dimension


def test_dispatch_refuses_k_past_the_limit_in_the_same_words():
    dispatch.choose(2, 1, K_MAX, gpu_name="NVIDIA H200", sm_count=132)
    with pytest.raises(OverflowError, match=rf"K = {K_MAX + 1} exceeds"):
        dispatch.choose(2, 1, K_MAX + 1, gpu_name="NVIDIA H200", sm_count=132)


def _k_advance(r, cfg) -> int:
    """How far past K a rung's k index can go before it is compared: one k-tile (BK, or BS
    for rungs 1-3), rung 21 three more, the tensor rungs' pre-pass a tile of 256."""
    if r.supports("tma"):
        return 255
    step = cfg.get("BK", cfg.get("BS", 0))
    return step + (3 if r.number == 21 else 0)


@pytest.mark.parametrize("r", registry.ALL + registry.TENSOR + registry.HISTORY,
                         ids=lambda r: r.label)
def test_k_max_leaves_room_for_every_legal_configuration(r):
    worst = max(_k_advance(r, cfg) for cfg in r.configs())
    assert K_MAX + worst <= INT32_MAX, f"{r.label}: k may reach {K_MAX + worst}"


def test_the_last_tile_of_m_or_n_must_fit_the_kernels_int():
    limits.check_tiles(24, 24, 2**31 - 8, 1, "r")  # a multiple of 24
    with pytest.raises(OverflowError, match=r"M = 2147483641: r's tiles of 24"):
        limits.check_tiles(24, 24, INT32_MAX - 6, 1, "r")  # 2^31 - 7
    with pytest.raises(OverflowError, match=r"N = 2147483521: rung 20's tiles of 256"):
        limits.check_tiles(128, 256, 1, INT32_MAX - 126, "rung 20")
    limits.check_tiles(128, 128, 2**31 - 128, 2**31 - 128, "rung 20")  # whole tiles fit


@pytest.mark.parametrize("args, ok", [
    ((1, 2, 128, 256, 8, 1, 1, 1, INT32_MAX, 132), False),  # tile += gridDim.x wraps
    ((0, 2, 128, 256, 8, 1, 1, 1, 2_147_483_580, 132), False),
    ((2, 2, 128, 256, 8, 1, 1, 16, 715_827_884, 132), False),  # 3 counters per tile
    ((2, 2, 128, 256, 8, 1, 1, 16, 715_827_883 // 2, 132), True),
    ((4, 2, 128, 256, 8, 1, 1, 4096, 67_108_864, 132), False),  # owner's 64-bit product
    ((4, 2, 128, 256, 8, 1, 1, 4096, 1000, 132), True),
], ids=["dp", "streamk", "fixup2-counters", "fixup2-fits", "owner", "owner-fits"])
def test_stream_k_refuses_what_its_arithmetic_cannot_index(args, ok):
    if ok:
        decompose.streamk(*args)
    else:
        with pytest.raises(OverflowError, match="rung 14 cannot index"):
            decompose.streamk(*args)


def test_a_vector_with_a_free_leading_dimension_keeps_it_within_int32():
    g = plan.describe(((1, 1), (1, 1)), ((1, INT32_MAX), (INT32_MAX, 1)),
                      ((1, INT32_MAX), (INT32_MAX, 1)))
    assert g.ldb <= INT32_MAX and g.ldc <= INT32_MAX


def test_a_derived_kernel_argument_is_converted_with_a_check():
    assert int(limits.int32("tiles", 7)) == 7
    with pytest.raises(OverflowError, match="tiles = 2147483648"):
        limits.int32("tiles", 2**31)
