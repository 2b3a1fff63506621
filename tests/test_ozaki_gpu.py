"""Ozaki scheme II on the H200 (runtime/ozaki.py: rung 26 and hopper/ozaki.cu's steps)
against its NumPy specification, sgemmlab/ozaki/reference.py, bit for bit: the integer part
is exact, and both round the same integer the same way. Ragged shapes (1 and primes), every
layout of A and B, leading dimensions past the row, 1 to 8 moduli, alpha and beta (beta == 0
never reads C: C starts as NaN), and rows of A or columns of B holding Inf or NaN (those
outputs are the FP32 dot product, with IEEE's specials). Inputs are fresh every test;
outputs are poisoned with NaN, so an element never written fails."""

from __future__ import annotations

import numpy as np
import pytest

from sgemmlab.ozaki import reference as ref
from test_tensor_gpu import HOPPER

pytestmark = pytest.mark.gpu


def _run(a, b, c, alpha=1.0, beta=0.0, count=ref.COUNT, cluster=1, fused=True, rows_r=None,
         gemm=None, crt_int=False, merged=False, scale_blocks=1, rows_k=4, early=False):
    """C = alpha A B + beta C through runtime/ozaki.bind on torch tensors: A, B either layout
    (a transposed view is read as it lies), C row-major; `fused`: ozaki.FUSED for the call
    (oz_scale where the rows fit, or oz_norms then oz_split); `rows_r`: ozaki.SCALE_ROWS_R
    (oz_scale's rows a block where r is contiguous); `gemm`: rung 26's configuration over
    its seed; `crt_int`: ozaki.CRT_INT (oz_crt_int's integer sums); `merged`: ozaki.MERGED
    (a pass both operands take in one launch); `scale_blocks`: ozaki.SCALE_BLOCKS (oz_scale's
    launch bounds); `rows_k`: ozaki.SCALE_ROWS_K (its rows a block where k is contiguous);
    `early`: ozaki.FALLBACK_EARLY (with merged: the fallback in the splits' launch)."""
    import torch

    from sgemmlab.runtime import ozaki
    from sgemmlab.runtime.arrays import stream_for

    def lay(x):
        if x.stride(1) == 1:
            return False, x.stride(0)
        assert x.stride(0) == 1
        return True, x.stride(1)

    ta, lda = lay(a)
    tb, ldb = lay(b)
    M, K = a.shape
    N = b.shape[1]
    assert c.stride(1) == 1
    stream = stream_for(torch.cuda.current_stream().cuda_stream, 0)
    names = ("FUSED", "SCALE_ROWS_R", "CRT_INT", "MERGED", "SCALE_BLOCKS", "SCALE_ROWS_K",
             "FALLBACK_EARLY")
    saved = [getattr(ozaki, n) for n in names]
    for n, v in zip(names, (fused, rows_r or ozaki.SCALE_ROWS_R, crt_int, merged, scale_blocks,
                            rows_k, early)):
        setattr(ozaki, n, v)
    try:
        launch = ozaki.bind(0, M, N, K, alpha, a.data_ptr(), lda, b.data_ptr(), ldb, beta,
                            c.data_ptr(), c.stride(0), stream, trans_a=ta, trans_b=tb,
                            count=count,
                            cfg={**ozaki.rung().seed, "CLUSTER": cluster, **(gemm or {})})
    finally:
        for n, v in zip(names, saved):
            setattr(ozaki, n, v)
    launch()
    torch.cuda.synchronize()


def _operand(rows, cols, trans, seed, ld_extra=0):
    """A (rows x cols) float32 tensor on the GPU, fresh normal values, row-major with `ld_extra`
    more columns of padding, or (trans) a transposed view of a column-major buffer."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    if trans:
        buf = torch.randn(cols, rows + ld_extra, device="cuda", generator=g)
        return buf[:, :rows].t()
    buf = torch.randn(rows, cols + ld_extra, device="cuda", generator=g)
    return buf[:, :cols]


#: the launches a product takes: separate, merged (ozaki.MERGED), and merged with the
#: fallback in the splits' launch (ozaki.FALLBACK_EARLY)
MODES = [{}, {"merged": True}, {"merged": True, "early": True}]
MODE_IDS = ["separate", "merged", "merged_early"]

SHAPES = [(1, 1, 1), (7, 13, 5), (1, 300, 97), (131, 1, 257), (128, 256, 128),
          (131, 257, 300), (263, 509, 1031), (64, 600, 33)]


@HOPPER
@pytest.mark.parametrize("M, N, K", SHAPES)
@pytest.mark.parametrize("ta, tb", [(False, False), (True, True), (False, True), (True, False)])
@pytest.mark.parametrize("cluster, fused, rows_r, gemm, extra", [
    (1, True, 4, None, {}), (2, True, 4, None, {}), (1, True, 8, None, {}),
    (1, False, None, None, {}), (1, True, 4, {"STORE16": 0}, {}),
    (2, True, 4, {"STORE16": 0}, {}), (1, True, 4, {"PINGPONG": 1, "STORE16": 1}, {}),
    (1, True, 4, {"PINGPONG": 1, "BN": 128, "STAGES": 6}, {}),
    (1, True, 4, None, {"crt_int": True}), (1, True, 4, None, {"merged": True}),
    (1, False, None, None, {"merged": True}), (1, True, 8, None, {"scale_blocks": 4}),
    (1, True, 4, None, {"merged": True, "scale_blocks": 3}), (1, True, 2, None, {"rows_k": 2}),
    (1, True, 2, None, {"rows_k": 2, "scale_blocks": 3, "merged": True}),
    (1, True, 4, None, {"merged": True, "early": True}), (1, True, 4, {"EXACT_DIV": 1}, {}),
    (1, True, 4, {"PINGPONG": 1, "STORE16": 1, "EXACT_DIV": 1}, {})])
def test_bit_for_bit_with_the_reference(M, N, K, ta, tb, cluster, fused, rows_r, gemm, extra):
    """cluster 2: pairs of blocks share B's tiles by multicast (an odd count of row-tiles
    leaves one block of a pair computing zeros past M); fused False: oz_norms and oz_split
    instead of oz_scale; rows_r 8: oz_scale's 8 rows a block where r is contiguous; gemm:
    rung 26 without its 16-byte stores (the seed has them), and its warpgroups each on its own
    tile in turns; crt_int: the recombination's integer sums (oz_crt_int); merged: a pass
    both operands take in one launch (ozaki.MERGED), with oz_scale or the two passes;
    scale_blocks: oz_scale built for 3 or 4 blocks an SM (ozaki.SCALE_BLOCKS); rows 2: its
    2-row staging (ozaki.SCALE_ROWS_K and _R); EXACT_DIV: rung 26's residues by an exact
    division."""
    import torch

    seed = M * 7919 + N * 31 + K + 2 * ta + tb
    a = _operand(M, K, ta, seed, ld_extra=3)
    b = _operand(K, N, tb, seed + 1, ld_extra=5)
    c = torch.full((M, N), float("nan"), device="cuda")
    _run(a, b, c, cluster=cluster, fused=fused, rows_r=rows_r, gemm=gemm, **extra)
    want = ref.matmul(a.cpu().numpy(), b.cpu().numpy())
    np.testing.assert_array_equal(c.cpu().numpy(), want)


@HOPPER
@pytest.mark.parametrize("crt_int", [False, True])
@pytest.mark.parametrize("count", [1, 2, 5, 6, 8])
def test_every_count_of_moduli(count, crt_int):
    import torch

    a = _operand(97, 389, False, count)
    b = _operand(389, 211, False, count + 100)
    c = torch.full((97, 211), float("nan"), device="cuda")
    _run(a, b, c, count=count, crt_int=crt_int)
    np.testing.assert_array_equal(c.cpu().numpy(),
                                  ref.matmul(a.cpu().numpy(), b.cpu().numpy(), count))


@HOPPER
def test_alpha_and_beta():
    import torch

    M, N, K = 133, 71, 517
    a, b = _operand(M, K, False, 1), _operand(K, N, True, 2)
    c0 = torch.randn(M, N, device="cuda")
    c = c0.clone()
    _run(a, b, c, alpha=0.75, beta=-1.5)
    ab = ref.matmul(a.cpu().numpy(), b.cpu().numpy())
    c0 = c0.cpu().numpy()
    want = (np.float32(0.75) * ab + np.float32(-1.5) * c0).astype(np.float32)
    # the epilogue's alpha * x + beta * c in FP32 (one fma or two roundings): an ulp or two
    # of the terms, which may cancel
    terms = np.abs(np.float32(0.75) * ab) + np.abs(np.float32(1.5) * c0)
    assert (np.abs(c.cpu().numpy() - want) <= 2**-22 * terms).all()


@HOPPER
@pytest.mark.parametrize("tb", [False, True])
def test_scale_invariance_and_a_long_k(tb):
    """2^40 A B^-... a power of two in A comes out exactly (the exponents absorb it), at a K
    that crosses several of oz_norms' chunks and rung 26's k-tiles; with B column-major
    (tb), oz_scale stages rows of all 8195 k, and without, B's rows do not fit and the two
    passes run."""
    import torch

    M, N, K = 67, 300, 8195
    a, b = _operand(M, K, False, 5), _operand(K, N, tb, 6)
    c1 = torch.full((M, N), float("nan"), device="cuda")
    c2 = torch.full((M, N), float("nan"), device="cuda")
    _run(a, b, c1)
    _run(a * 2.0**40, b * 2.0**-70, c2)
    np.testing.assert_array_equal(c2.cpu().numpy(), c1.cpu().numpy() * np.float32(2.0**-30))
    np.testing.assert_array_equal(c1.cpu().numpy(), ref.matmul(a.cpu().numpy(),
                                                               b.cpu().numpy()))


@HOPPER
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_inf_and_nan_rows_give_ieee_specials(mode):
    import torch

    M, N, K = 40, 50, 300
    a, b = _operand(M, K, False, 7).clone(), _operand(K, N, False, 8).clone()
    a[3, 17] = float("inf")
    a[9, 2] = float("nan")
    b[100, 11] = float("-inf")
    c = torch.full((M, N), float("nan"), device="cuda")
    _run(a, b, c, **mode)
    got = c.cpu().numpy()
    a64, b64 = a.double().cpu().numpy(), b.double().cpu().numpy()
    with np.errstate(invalid="ignore", over="ignore"):
        want = a64 @ b64
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    special = np.isnan(want) | np.isinf(want)
    np.testing.assert_array_equal(np.sign(got[np.isinf(got)]), np.sign(want[np.isinf(want)]))
    rows = [i for i in range(M) if i not in (3, 9)]
    cols = [j for j in range(N) if j != 11]
    plain = ref.matmul(a.cpu().numpy()[rows], b.cpu().numpy()[:, cols])
    np.testing.assert_array_equal(got[np.ix_(rows, cols)], plain)
    assert not np.isnan(got[~special]).any()


@HOPPER
@pytest.mark.parametrize("cluster", [1, 2])
def test_rows_the_flatness_rule_refuses_are_dot_products_summed_in_fp64(cluster):
    """Rows of A and columns of B whose mass sits in a few entries (reference.FLAT): their
    outputs come from the FP32 inputs summed in FP64, the rest from the scheme; both as the
    reference gives them, and no worse than an FP32 product where the scheme alone loses
    everything to the huge entries."""
    import torch

    M, N, K = 70, 90, 700
    a, b = _operand(M, K, False, 21).clone(), _operand(K, N, True, 22).clone()
    a[5, ::97] = 2.0**40  # a few huge entries: row 5 is refused
    b[::131, 7] = -(2.0**35)  # column 7 too
    b[3, 8] = 2.0**50  # and column 8, by a single one
    an, bn = a.cpu().numpy(), b.cpu().numpy()
    assert (ref.flatness(an, 1) < ref.FLAT).tolist().count(True) == 1
    assert (ref.flatness(bn, 0) < ref.FLAT).tolist().count(True) == 2
    c = torch.full((M, N), float("nan"), device="cuda")
    _run(a, b, c, cluster=cluster)
    got = c.cpu().numpy()
    np.testing.assert_array_equal(got, ref.matmul(an, bn))
    exact = an.astype(np.float64) @ bn.astype(np.float64)
    scale = np.abs(an.astype(np.float64)) @ np.abs(bn.astype(np.float64))
    err, fp32 = np.abs(got - exact) / scale, np.abs((an @ bn) - exact) / scale
    assert err.max() <= fp32.max()


def _spiky(rows, cols, trans, seed, every, ld_extra=0):
    """`_operand` with a huge entry in every `every`-th row (every row when 1): rows the
    flatness rule refuses, scattered across the tiles."""
    x = _operand(rows, cols, trans, seed, ld_extra).clone()
    x[::every, seed % cols] = 2.0**40
    return x


@HOPPER
@pytest.mark.parametrize("M, N, K, every_a, every_b",
                         [(263, 509, 1031, 3, 7), (131, 257, 300, 1, 1), (300, 70, 257, 1, 5),
                          (1, 300, 97, 1, 2), (600, 1, 260, 2, 1), (1100, 1030, 200, 1, 50)])
@pytest.mark.parametrize("ta, tb", [(False, False), (True, True), (False, True)])
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_many_refused_rows_and_columns_come_from_the_tiled_fallback(M, N, K, every_a,
                                                                    every_b, ta, tb, mode):
    """Rows of A and columns of B refused everywhere (every one, or one in a few, scattered
    over the tiles): their outputs are the FP64 sums of the reference, the rest the scheme's,
    bit for bit; beta != 0 shows an output whose row and column are both refused is written
    once. Few tiles cut K into slices (added up by the tile's last slice); 1100 x 1030 with
    every row refused has more tiles than the fallback's wave has blocks, and K = 97 is too
    short to cut: both walk the whole of K a tile."""
    import torch

    a = _spiky(M, K, ta, 31 + M, every_a, ld_extra=3)
    b = _spiky(N, K, not tb, 37 + N, every_b, ld_extra=5).t()  # columns of B: rows of B^T
    an, bn = a.cpu().numpy(), b.cpu().numpy()
    assert (ref.flatness(an, 1) < ref.FLAT).sum() == len(range(0, M, every_a))
    assert (ref.flatness(bn, 0) < ref.FLAT).sum() == len(range(0, N, every_b))
    c0 = torch.randn(M, N, device="cuda")
    c = c0.clone()
    _run(a, b, c, alpha=1.0, beta=0.5, **mode)
    got = c.cpu().numpy()
    want = ref.matmul(an, bn) + np.float32(0.5) * c0.cpu().numpy()
    terms = np.abs(ref.matmul(an, bn)) + np.abs(np.float32(0.5) * c0.cpu().numpy())
    assert (np.abs(got - want) <= 2**-22 * terms).all()
    c = torch.full((M, N), float("nan"), device="cuda")
    _run(a, b, c, **mode)
    np.testing.assert_array_equal(c.cpu().numpy(), ref.matmul(an, bn))


@HOPPER
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_the_fallback_leaves_its_counts_at_zero_for_the_next_product(mode):
    """A product with many refused rows, then a smaller one with none on the same stream's
    workspace: had the refused counts stayed, the second would write the first's rows (past
    its own M), or take its outputs from the fallback. (merged_early: the splits' launch
    sets them back, and hands oz_crt a snapshot, which the second product writes again.)"""
    import torch

    big_a, big_b = _spiky(400, 300, False, 3, 2), _operand(300, 90, False, 4)
    c = torch.full((400, 90), float("nan"), device="cuda")
    _run(big_a, big_b, c, **mode)
    np.testing.assert_array_equal(c.cpu().numpy(),
                                  ref.matmul(big_a.cpu().numpy(), big_b.cpu().numpy()))
    a, b = _operand(50, 300, False, 5), _operand(300, 90, False, 6)
    guard = torch.full((400, 90), float("nan"), device="cuda")
    small = guard[:50]
    _run(a, b, small, **mode)
    np.testing.assert_array_equal(small.cpu().numpy(),
                                  ref.matmul(a.cpu().numpy(), b.cpu().numpy()))
    assert torch.isnan(guard[50:]).all()


def _outlier_features(M, K, trans, seed, features=4, times=1000.0):
    """Activations with a few outlier features: `features` columns of A at `times` the rest."""
    a = _operand(M, K, trans, seed).clone()
    a[:, :features] *= times
    return a


@HOPPER
@pytest.mark.parametrize("ta, tb", [(False, False), (True, True), (False, True)])
@pytest.mark.parametrize("M, N, K", [(300, 200, 1500), (131, 257, 4097)])
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_outlier_features_are_balanced_and_served_by_the_scheme(M, N, K, ta, tb, mode):
    """The flatness rule refuses every row; balanced (oz_balance, the norms again on A D and
    D^-1 B) the scheme serves them: the outputs are the reference's, bit for bit, and the
    reference serves (nearly) all of them without the fallback."""
    import torch

    a = _outlier_features(M, K, ta, M + K)
    b = _operand(K, N, tb, M + K + 1)
    an, bn = a.cpu().numpy(), b.cpu().numpy()
    assert ref.refusals(an, bn).all()
    _, _, refused = ref.served(an, bn, balanced=True)
    assert refused.mean() < 0.3
    c = torch.full((M, N), float("nan"), device="cuda")
    _run(a, b, c, **mode)
    np.testing.assert_array_equal(c.cpu().numpy(), ref.matmul(an, bn))


@HOPPER
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_balancing_is_not_taken_where_it_refuses_more(mode):
    """Every 10th row of A holds one entry of 2^20: balancing would shrink those columns of
    A by 2^-9 and grow B's matching rows by 2^9, leaving A's rows as uneven and every column
    of B uneven too. It refuses more, so the first scaling stands; bit for bit as the
    reference takes it."""
    import torch

    from test_ozaki_cpu import _spikes_balancing_would_spread

    an, bn = _spikes_balancing_would_spread(269)
    assert ref.refusals(an, bn).any() and ref.served(an, bn, balanced=True)[0] is an
    c = torch.full((200, 150), float("nan"), device="cuda")
    _run(torch.from_numpy(an).cuda(), torch.from_numpy(bn).cuda(), c, **mode)
    np.testing.assert_array_equal(c.cpu().numpy(), ref.matmul(an, bn, balanced=False))
