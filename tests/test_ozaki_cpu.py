"""The scheme's passes (kernels/hopper/ozaki.cu) on the CPU, through the runtime's own
launches (tests/cuda_cpu.py: the passes emulated, rung 26's INT8 products in NumPy), bit
for bit against the NumPy reference: what tests/test_ozaki_gpu.py checks on the H200, here
on every machine, CI's included. Ragged shapes (1 and primes), every layout of A and B,
leading dimensions past the row, 1 to 8 moduli, alpha and beta, Inf and NaN, and rows the
flatness rule refuses, few or all of them; outputs start as NaN, so one never written fails;
every buffer ends against an unmapped page; the workspace's zeroed region must be 0 again
after each product. The GPU tests stay the judge of what the emulator cannot see (races
between blocks, the GPU's memory model, NVRTC's code)."""

from __future__ import annotations

import numpy as np
import pytest

import cuda_cpu
from sgemmlab.ozaki import reference as ref

pytestmark = pytest.mark.skipif(cuda_cpu.compiler() is None, reason="no C++ compiler")


@pytest.fixture(scope="module")
def run():
    with cuda_cpu.ozaki_on_cpu() as go:
        yield go


def _normal(rows, cols, seed):
    return np.random.default_rng(seed).standard_normal((rows, cols), dtype=np.float32)


def _nan(M, N):
    return np.full((M, N), np.nan, np.float32)


SHAPES = [(1, 1, 1), (7, 13, 5), (1, 300, 97), (131, 1, 257), (128, 256, 128),
          (131, 257, 300), (263, 509, 1031), (64, 600, 33)]


@pytest.mark.parametrize("M, N, K", SHAPES)
@pytest.mark.parametrize("ta, tb", [(False, False), (True, True), (False, True), (True, False)])
@pytest.mark.parametrize("fused, rows_r, crt_int", [(True, 4, False), (True, 8, False),
                                                    (False, None, False), (True, 4, True)])
def test_bit_for_bit_with_the_reference(run, M, N, K, ta, tb, fused, rows_r, crt_int):
    """fused: oz_scale (one pass an operand; rows_r of them a block where r is contiguous),
    or oz_norms then oz_split; crt_int: oz_crt_int's integer sums for the recombination."""
    seed = M * 7919 + N * 31 + K + 2 * ta + tb
    a, b = _normal(M, K, seed), _normal(K, N, seed + 1)
    np.testing.assert_array_equal(
        run(a, b, _nan(M, N), ta=ta, tb=tb, fused=fused, rows_r=rows_r, crt_int=crt_int),
        ref.matmul(a, b))


@pytest.mark.parametrize("M, N, K", SHAPES + [(67, 40, 8195)])
@pytest.mark.parametrize("ta, tb", [(False, False), (True, True), (False, True), (True, False)])
def test_two_rows_a_block_bit_for_bit(run, M, N, K, ta, tb):
    """oz_scale staging 2 rows a block (SCALE_ROWS_K and SCALE_ROWS_R 2: 128 threads a row
    where k is contiguous, a float2 of the two rows where r is), K = 8195 past oz_norms'
    chunks too."""
    seed = M * 7 + N * 3 + K + 2 * ta + tb
    a, b = _normal(M, K, seed), _normal(K, N, seed + 1)
    np.testing.assert_array_equal(run(a, b, _nan(M, N), ta=ta, tb=tb, rows_k=2, rows_r=2),
                                  ref.matmul(a, b))


def test_with_overlap_every_launch_but_the_first_is_overlapped(run):
    """ozaki.OVERLAP: the product's launches after its first go through cuLaunchKernelEx
    with programmatic stream serialization (each kernel waits for the one before it first:
    tests/test_hopper_compile.py checks their sources), and the product is the same."""
    from unittest import mock

    from sgemmlab.runtime import ozaki, packed

    made = []
    init = packed.Packed.__init__

    def spy(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)

    a, b = _normal(131, 300, 5), _normal(300, 257, 6)
    with mock.patch.object(ozaki, "OVERLAP", True), \
            mock.patch.object(packed.Packed, "__init__", spy):
        got = run(a, b, _nan(131, 257), tb=True)
    np.testing.assert_array_equal(got, ref.matmul(a, b))
    assert len(made) == len(ozaki.steps_order(True, True))
    assert [p._config is not None for p in made] == [False] + [True] * (len(made) - 1)


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("fused", [True, False])
def test_threads_taking_turns_in_drawn_orders(run, fused, seed):
    """The passes when, between barriers, the threads run in an order drawn afresh each
    round (tests/cuda_cpu.py, Library.order): a read of another thread's write that no
    barrier orders shows in more ways than first to last and back."""
    a, b = _normal(131, 300, seed), _normal(300, 263, seed + 10)
    np.testing.assert_array_equal(run(a, b, _nan(131, 263), tb=True, fused=fused, order=seed),
                                  ref.matmul(a, b))


@pytest.mark.parametrize("crt_int", [False, True])
@pytest.mark.parametrize("count", [1, 2, 5, 6, 8])
def test_every_count_of_moduli(run, count, crt_int):
    a, b = _normal(97, 389, count), _normal(389, 211, count + 100)
    np.testing.assert_array_equal(run(a, b, _nan(97, 211), count=count, crt_int=crt_int),
                                  ref.matmul(a, b, count))


@pytest.mark.parametrize("crt_int", [False, True])
def test_alpha_and_beta(run, crt_int):
    M, N, K = 133, 71, 517
    a, b, c0 = _normal(M, K, 1), _normal(K, N, 2), _normal(M, N, 3)
    got = run(a, b, c0, alpha=0.75, beta=-1.5, tb=True, crt_int=crt_int)
    ab = ref.matmul(a, b)
    want = (np.float32(0.75) * ab + np.float32(-1.5) * c0).astype(np.float32)
    terms = np.abs(np.float32(0.75) * ab) + np.abs(np.float32(1.5) * c0)
    assert (np.abs(got - want) <= 2**-22 * terms).all()


@pytest.mark.parametrize("ta, tb, rows_r", [(False, False, 4), (False, False, 8),
                                           (False, True, 8), (True, True, 8)])
def test_scale_invariance_and_a_long_k(run, ta, tb, rows_r):
    """K = 8195 crosses oz_norms' chunks. oz_scale stages rows of all of it, 4 a block;
    with 8 a block where r is contiguous (A when ta, B^T unless tb) they do not fit: each
    operand then takes its own path, and oz_ksums sums only oz_scale's."""
    M, N, K = 67, 40, 8195
    a, b = _normal(M, K, 5), _normal(K, N, 6)
    c1 = run(a, b, _nan(M, N), ta=ta, tb=tb, rows_r=rows_r)
    c2 = run(a * np.float32(2.0**40), b * np.float32(2.0**-70), _nan(M, N), ta=ta, tb=tb,
             rows_r=rows_r)
    np.testing.assert_array_equal(c2, c1 * np.float32(2.0**-30))
    np.testing.assert_array_equal(c1, ref.matmul(a, b))


@pytest.mark.parametrize("crt_int", [False, True])
def test_inf_and_nan_rows_give_ieee_specials(run, crt_int):
    M, N, K = 40, 50, 300
    a, b = _normal(M, K, 7), _normal(K, N, 8)
    a[3, 17], a[9, 2], b[100, 11] = np.inf, np.nan, -np.inf
    got = run(a, b, _nan(M, N), crt_int=crt_int)
    with np.errstate(invalid="ignore", over="ignore"):
        want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_array_equal(np.sign(got[np.isinf(got)]), np.sign(want[np.isinf(want)]))
    rows = [i for i in range(M) if i not in (3, 9)]
    cols = [j for j in range(N) if j != 11]
    np.testing.assert_array_equal(got[np.ix_(rows, cols)], ref.matmul(a[rows], b[:, cols]))


def _spiky(rows, cols, seed, every):
    """Normal values with a huge entry in every `every`-th row: rows the flatness rule
    refuses, scattered across the tiles."""
    x = _normal(rows, cols, seed)
    x[::every, seed % cols] = 2.0**40
    return x


@pytest.mark.parametrize("M, N, K, every_a, every_b",
                         [(263, 509, 1031, 3, 7), (131, 257, 300, 1, 1), (300, 70, 257, 1, 5),
                          (1, 300, 97, 1, 2), (600, 1, 260, 2, 1), (1100, 1030, 200, 1, 50)])
@pytest.mark.parametrize("ta, tb, fused", [(False, False, True), (True, True, True),
                                          (False, True, True), (False, False, False)])
def test_many_refused_rows_and_columns_come_from_the_tiled_fallback(run, M, N, K, every_a,
                                                                    every_b, ta, tb, fused):
    """Their outputs are the FP64 sums of the reference, the rest the scheme's, bit for bit;
    beta != 0 shows an output whose row and column are both refused is written once; the
    emulated wave (3 SMs) is smaller than the tiles, so blocks walk several."""
    a = _spiky(M, K, 31 + M, every_a)
    b = _spiky(N, K, 37 + N, every_b).T.copy()
    assert (ref.flatness(a, 1) < ref.FLAT).sum() == len(range(0, M, every_a))
    assert (ref.flatness(b, 0) < ref.FLAT).sum() == len(range(0, N, every_b))
    c0 = _normal(M, N, 9)
    got = run(a, b, c0, beta=0.5, ta=ta, tb=tb, fused=fused)
    want = ref.matmul(a, b) + np.float32(0.5) * c0
    terms = np.abs(ref.matmul(a, b)) + np.abs(np.float32(0.5) * c0)
    assert (np.abs(got - want) <= 2**-22 * terms).all()
    np.testing.assert_array_equal(run(a, b, _nan(M, N), ta=ta, tb=tb, fused=fused),
                                  ref.matmul(a, b))


def test_the_fallback_leaves_its_counts_at_zero_for_the_next_product(run):
    big_a, big_b = _spiky(400, 300, 3, 2), _normal(300, 90, 4)
    np.testing.assert_array_equal(run(big_a, big_b, _nan(400, 90)), ref.matmul(big_a, big_b))
    a, b = _normal(50, 300, 5), _normal(300, 90, 6)
    np.testing.assert_array_equal(run(a, b, _nan(50, 90), guard=350), ref.matmul(a, b))


def _outlier_features(M, K, seed, features=4, times=1000.0):
    """Activations with a few outlier features: `features` columns of A at `times` the rest."""
    a = _normal(M, K, seed)
    a[:, :features] *= np.float32(times)
    return a


@pytest.mark.parametrize("ta, tb, fused", [(False, False, True), (True, True, True),
                                          (False, True, True), (False, False, False)])
@pytest.mark.parametrize("M, N, K", [(300, 200, 1500), (131, 257, 4097)])
def test_outlier_features_are_balanced_and_served_by_the_scheme(run, M, N, K, ta, tb, fused):
    """The flatness rule refuses every row; balanced (oz_balance, the norms again on A D and
    D^-1 B) the scheme serves them: bit for bit as the reference, which serves (nearly) all
    of them without the fallback."""
    a, b = _outlier_features(M, K, M + K), _normal(K, N, M + K + 1)
    assert ref.refusals(a, b).all()
    _, _, refused = ref.served(a, b, balanced=True)
    assert refused.mean() < 0.3
    np.testing.assert_array_equal(run(a, b, _nan(M, N), ta=ta, tb=tb, fused=fused),
                                  ref.matmul(a, b))


def _spikes_balancing_would_spread(seed):
    """Every 10th row of A holds one entry of 2^20 (a column of its own): balancing would
    shrink those columns of A by 2^-9 and grow B's matching rows by 2^9, which leaves A's
    rows as uneven and makes every column of B uneven too."""
    a, b = _normal(200, 256, seed), _normal(256, 150, seed + 1)
    for i in range(0, 200, 10):
        a[i, (7 * i) % 256] = 2.0**20
    return a, b


def test_balancing_is_not_taken_where_it_refuses_more(run):
    """Balanced, the scheme would refuse more outputs, so the first scaling stands."""
    a, b = _spikes_balancing_would_spread(269)
    assert ref.refusals(a, b).any() and ref.served(a, b, balanced=True)[0] is a  # not taken
    np.testing.assert_array_equal(run(a, b, _nan(200, 150)), ref.matmul(a, b, balanced=False))


def test_a_balanced_product_then_a_plain_one_on_the_same_workspace(run):
    """The second norms' counts are set back to 0 as the first's are: a later product with
    nothing refused takes the first scaling, and writes nothing past its M."""
    a, b = _outlier_features(300, 1500, 11), _normal(1500, 90, 12)
    np.testing.assert_array_equal(run(a, b, _nan(300, 90)), ref.matmul(a, b))
    a, b = _normal(50, 1500, 13), _normal(1500, 90, 14)
    np.testing.assert_array_equal(run(a, b, _nan(50, 90), guard=250), ref.matmul(a, b))


@pytest.mark.parametrize("M, N, K, every_a", [(1, 300, 1031, 1), (70, 130, 1031, 69),
                                              (5, 1, 700, 2), (130, 70, 4100, 64)])
def test_a_few_refused_rows_in_a_wave_of_more_blocks_than_tiles(run, M, N, K, every_a):
    """A wave of 40 blocks (20 SMs, 2 blocks an SM) for one to six tiles of refused rows:
    bit for bit, and with beta != 0 each output written once."""
    a, b = _spiky(M, K, 41 + M, every_a), _normal(K, N, 43)
    np.testing.assert_array_equal(run(a, b, _nan(M, N), sms=20), ref.matmul(a, b))
    c0 = _normal(M, N, 47)
    got = run(a, b, c0, beta=-0.25, sms=20, tb=True)
    want = ref.matmul(a, b) - np.float32(0.25) * c0
    terms = np.abs(ref.matmul(a, b)) + np.abs(np.float32(0.25) * c0)
    assert (np.abs(got - want) <= 2**-22 * terms).all()


@pytest.mark.parametrize("ta, tb", [(False, False), (True, True)])
def test_outlier_features_where_one_operand_takes_each_path(run, ta, tb):
    """K = 6500 with 8 rows a block where r is contiguous: rows along k fit oz_scale, rows
    along r do not; the balance reads oz_ksums' sums for one operand and oz_norms' for the
    other."""
    M, N, K = 70, 60, 6500
    a, b = _outlier_features(M, K, 17), _normal(K, N, 18)
    assert ref.refusals(a, b).all() and ref.served(a, b, balanced=True)[2].mean() < 0.3
    np.testing.assert_array_equal(run(a, b, _nan(M, N), ta=ta, tb=tb, rows_r=8),
                                  ref.matmul(a, b))


def _merged_cases():
    """(name, a, b, c, run's keywords) for the merged launches: plain inputs in three
    layouts, outlier features through each path (oz_scale_ab, oz_norms_ab, and one operand
    each way), many refused rows and columns with beta, Inf and NaN, and the balancing that
    is not taken."""
    a, b = _normal(131, 300, 51), _normal(300, 257, 52)
    out = [("plain", a, b, None, {}), ("plain_t", a, b, None, {"ta": True, "tb": True}),
           ("plain_two_pass", a, b, None, {"tb": True, "fused": False})]
    a, b = _outlier_features(300, 1500, 53), _normal(1500, 200, 54)
    out += [("outliers", a, b, None, {}), ("outliers_t", a, b, None, {"ta": True, "tb": True}),
            ("outliers_two_pass", a, b, None, {"fused": False})]
    a, b = _outlier_features(70, 6500, 55), _normal(6500, 60, 56)
    out.append(("outliers_each_path", a, b, None, {"rows_r": 8}))
    a, b = _outlier_features(131, 1500, 57), _normal(1500, 97, 58)
    out.append(("outliers_rows2", a, b, None, {"rows_r": 2, "rows_k": 2, "tb": True}))
    a, b = _spiky(263, 1031, 57, 3), _spiky(509, 1031, 58, 7).T.copy()
    out.append(("refused", a, b, _normal(263, 509, 59), {"beta": 0.5, "tb": True}))
    a, b = _normal(40, 300, 60), _normal(300, 50, 61)
    a[3, 17], a[9, 2], b[100, 11] = np.inf, np.nan, -np.inf
    out.append(("inf_nan", a, b, None, {}))
    a, b = _spikes_balancing_would_spread(62)
    out.append(("not_balanced", a, b, None, {}))
    return out


MERGED_CASES = _merged_cases()


@pytest.mark.parametrize("early", [False, True])
@pytest.mark.parametrize("blocks_reversed", [False, True])
@pytest.mark.parametrize("case", range(len(MERGED_CASES)),
                         ids=[c[0] for c in MERGED_CASES])
def test_merged_launches_give_the_same_bits(run, case, blocks_reversed, early):
    """ozaki.MERGED (a pass both operands take in one launch; oz_ksums writes d), and with
    FALLBACK_EARLY the fallback's wave in the splits' launch, against the separate launches,
    bit for bit, and each run with every grid's blocks first to last and last to first: in
    oz_scale_ab, B's blocks then run before A's, find no refusal counted yet and write their
    residues, which oz_split writes again with the scaling taken; in oz_split_ab the
    fallback's blocks run before the splits', and the last block out of either kind sets
    the counts back (the run checks the zeroed region after each product)."""
    _, a, b, c, kw = MERGED_CASES[case]
    M, N = a.shape[0], b.shape[1]
    with np.errstate(invalid="ignore", over="ignore"):
        want = run(a, b, _nan(M, N) if c is None else c.copy(), **kw)
        got = run(a, b, _nan(M, N) if c is None else c.copy(), merged=True,
                  blocks_reversed=blocks_reversed, early=early, **kw)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("scale_a, scale_b, rows_r, early, names", [
    (True, True, None, False,
     ("scale_ab", "ksums", "norms2_ab", "split_ab", "gemm", "crt", "fallback")),
    (False, False, None, False,
     ("norms_ab", "balance", "norms2_ab", "split_ab", "gemm", "crt", "fallback")),
    (True, False, 8, False,
     ("scale_a", "norms_b", "ksums", "norms2_ab", "split_ab", "gemm", "crt", "fallback")),
    (True, True, None, True,
     ("scale_ab", "ksums", "norms2_ab", "split_fallback_ab", "gemm", "crt"))])
def test_merged_launches_by_name(run, scale_a, scale_b, rows_r, early, names):
    """What MERGED launches: seven kernels where both operands take the same pass (eleven
    with oz_scale, ten with the two passes, without it); eight where K = 6500 with 8 rows a
    block of B^T fits oz_scale for A only; six with FALLBACK_EARLY."""
    from unittest import mock

    from sgemmlab.runtime import ozaki, packed

    made = []
    init = packed.Packed.__init__

    def spy(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)

    M, N, K = 70, 60, 6500
    a, b = _normal(M, K, 63), _normal(K, N, 64)
    with mock.patch.object(packed.Packed, "__init__", spy):
        got = run(a, b, _nan(M, N), fused=scale_a, rows_r=rows_r, merged=True, early=early)
    np.testing.assert_array_equal(got, ref.matmul(a, b))
    assert ozaki.steps_order(scale_a, scale_b, True, early) == names
    kernel = {"gemm": "gemm", "crt": "oz_crt", "norms2_ab": "oz_norms_ab", "scale_a": "oz_scale",
              "norms_b": "oz_norms", "split_fallback_ab": "oz_split_ab"}
    assert [p.kernel.name for p in made] == [kernel.get(n, "oz_" + n) for n in names]


@pytest.mark.parametrize("early", [False, True])
def test_merged_a_balanced_product_then_a_plain_one_on_the_same_scratch(run, early):
    """The scratch as a GPU leaves it (not NaN again): a product whose balanced scaling is
    taken, then one with nothing refused. With FALLBACK_EARLY oz_crt reads the counts'
    snapshot in scratch, which the second product must write (zeros) although its
    splits' launch has nothing to set back; left as the first wrote it, the second would
    take the first's second exponents."""
    a, b = _outlier_features(300, 1500, 21), _normal(1500, 90, 22)
    np.testing.assert_array_equal(run(a, b, _nan(300, 90), merged=True, early=early),
                                  ref.matmul(a, b))
    a, b = _normal(300, 1500, 23), _normal(1500, 90, 24)
    np.testing.assert_array_equal(run(a, b, _nan(300, 90), merged=True, early=early,
                                      keep_scratch=True), ref.matmul(a, b))
