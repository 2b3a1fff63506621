"""Ozaki scheme II in NumPy (sgemmlab/ozaki/reference.py), on the CPU: the moduli, residues
and the CRT are exact; products of small integers come out exact; the scaling is scale
invariant; with 7 moduli (COUNT) the error (componentwise, over |A||B|, as `sgemmlab
accuracy` measures it) is at most an FP32 product's on the accuracy set's distributions at
long K, and with 6 it is not;
and `scaling_loss` flags the inputs where it is not (short products of mixed magnitudes,
a row spanning 2^60), so that a caller can refuse them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sgemmlab.ozaki import reference as oz


def test_the_moduli_are_pairwise_coprime_int8_sized_and_largest_first():
    mods = oz.moduli(12)
    assert mods[0] == 256 and list(mods) == sorted(mods, reverse=True)
    assert all(math.gcd(a, b) == 1 for i, a in enumerate(mods) for b in mods[i + 1:])
    assert oz.moduli(8) == mods[:8] and math.log2(oz.product_bound(8)) > 63
    with pytest.raises(ValueError, match="1..20"):
        oz.moduli(0)


@pytest.mark.parametrize("m", [256, 255, 253, 251])
def test_residues_are_symmetric_int8_and_congruent(m):
    x = np.random.default_rng(m).integers(-2**40, 2**40, size=1000)
    r = oz.residues(x, m)
    assert r.dtype == np.int8 and r.min() >= -(m // 2) and r.max() <= m - 1 - m // 2
    assert (np.mod(x - r.astype(np.int64), m) == 0).all()


def test_the_crt_finds_every_integer_below_half_the_moduli_product():
    mods = oz.moduli(4)  # M about 2^32: every value exact in FP64
    half = math.prod(mods) // 2
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.integers(-half + 1, half, size=2000), [0, 1, -1, half - 1,
                                                                     -half + 1]])
    got = oz.crt([np.mod(x, m) for m in mods], mods)
    assert (got == x.astype(np.float64)).all()


def test_products_of_small_integers_are_exact():
    rng = np.random.default_rng(4)
    A = rng.integers(-250, 251, size=(33, 257)).astype(np.float32)
    B = rng.integers(-250, 251, size=(257, 17)).astype(np.float32)
    exact = A.astype(np.float64) @ B.astype(np.float64)  # below 257 * 250^2 < 2^24: exact
    # in FP32 too
    assert (oz.matmul(A, B) == exact.astype(np.float32)).all()


def test_scaling_is_scale_invariant():
    rng = np.random.default_rng(5)
    A = rng.standard_normal((16, 300)).astype(np.float32)
    B = rng.standard_normal((300, 12)).astype(np.float32)
    base = oz.matmul(A, B)
    for s in (2.0**-70, 2.0**-3, 1024.0, 2.0**60):
        assert (oz.matmul(A * np.float32(s), B) == base * np.float32(s)).all()
        assert (oz.matmul(A, B * np.float32(s)) == base * np.float32(s)).all()


def _draw(rng, distribution, rows, cols):
    if distribution == "normal":
        x = rng.standard_normal((rows, cols))
    elif distribution == "uniform":
        x = rng.uniform(-1, 1, (rows, cols))
    elif distribution == "positive":
        x = rng.uniform(0, 1, (rows, cols))
    else:  # "mixed", as bench/accuracy.py draws it: a normal times 2^e, e in [-16, 16]
        x = rng.standard_normal((rows, cols)) * np.ldexp(1.0, rng.integers(-16, 17,
                                                                           (rows, cols)))
    return x.astype(np.float32)


def _errors(C, A, B):
    A64, B64 = A.astype(np.float64), B.astype(np.float64)
    err = np.abs(C.astype(np.float64) - A64 @ B64) / (np.abs(A64) @ np.abs(B64))
    return float(err.max()), float(np.median(err))


@pytest.mark.parametrize("count, distribution", [
    (8, "normal"), (8, "uniform"), (8, "positive"), (8, "mixed"),
    (7, "normal"), (7, "uniform"), (7, "positive")])
@pytest.mark.parametrize("K", [1000, 4096])
def test_the_moduli_are_as_accurate_as_fp32_at_long_k(distribution, K, count):
    """8 moduli (COUNT) on every plain distribution; 7 where rows are flat."""
    rng = np.random.default_rng(K + len(distribution))
    A, B = _draw(rng, distribution, 48, K), _draw(rng, distribution, K, 40)
    ours, fp32 = _errors(oz.matmul(A, B, count), A, B), _errors(A @ B, A, B)
    assert ours[0] <= fp32[0] and ours[1] <= fp32[1], (ours, fp32)
    assert oz.scaling_loss(A, B, count) < 1


def test_fewer_moduli_are_not():
    """What decides the count: with 6 moduli the error on normal inputs at K = 4096 is
    several times FP32's; with 7, at K = 16384, it is about FP32's (no margin left), where
    8 keep it below a fifth."""
    assert oz.COUNT == 8
    rng = np.random.default_rng(7)
    A, B = _draw(rng, "normal", 48, 4096), _draw(rng, "normal", 4096, 40)
    assert _errors(oz.matmul(A, B, 6), A, B)[1] > 2 * _errors(A @ B, A, B)[1]
    rng = np.random.default_rng(1)
    A, B = _draw(rng, "normal", 48, 16384), _draw(rng, "normal", 16384, 40)
    fp32 = _errors(A @ B, A, B)[1]
    assert _errors(oz.matmul(A, B, 7), A, B)[1] > 0.8 * fp32
    assert _errors(oz.matmul(A, B, 8), A, B)[1] < 0.2 * fp32


def test_rounding_keeps_every_product_inside_half_the_moduli_product():
    """The radius leaves room for the rounding: rows at the largest norm it allows, every
    entry rounded up in magnitude, still give |A'B'| < M / 2 (Cauchy-Schwarz's worst case:
    a row times itself)."""
    for count in (2, 7, 8):
        for k in (1, 17, 4096, oz.MAX_K):
            if count == 2 and k == oz.MAX_K:  # M = 65280: no room for so many rounded terms
                with pytest.raises(ValueError, match="cannot hold"):
                    oz.radius(count, k)
                continue
            r = oz.radius(count, k)
            worst = (r + math.sqrt(k) / 2) ** 2
            assert 0 < r and worst < oz.product_bound(count) / 2
            assert oz.radius(count, k) < oz.radius(count, 1) or k == 1


@pytest.mark.parametrize("case", ["short-mixed", "row-spanning-2^60"])
def test_scaling_loss_flags_the_inputs_where_the_scheme_is_worse_than_fp32(case):
    rng = np.random.default_rng(8)
    if case == "short-mixed":  # a short product of mixed magnitudes
        A, B = _draw(rng, "mixed", 48, 17), _draw(rng, "mixed", 17, 40)
    else:  # one huge entry in a row, its partner zero in one column of B
        A, B = _draw(rng, "normal", 4, 64), _draw(rng, "normal", 64, 4)
        A[0, 0], B[0, 1] = 2.0**60, 0.0
    ours, fp32 = _errors(oz.matmul(A, B, flat=0.0), A, B), _errors(A @ B, A, B)
    assert ours[0] > 100 * fp32[0], "the scheme loses the small entries' bits here"
    assert oz.scaling_loss(A, B) > 1
    if case == "row-spanning-2^60":  # refused by the flatness rule: as accurate as FP32
        assert oz.flatness(A, 1)[0] < oz.FLAT
        assert _errors(oz.matmul(A, B), A, B)[0] <= fp32[0]


def test_operands_it_cannot_take_are_refused():
    A, B = np.ones((2, 3), np.float32), np.ones((3, 2), np.float32)
    A[0, 0] = np.nan
    with pytest.raises(ValueError, match="finite"):
        oz.matmul(A, B)
    with pytest.raises(ValueError, match="do not multiply"):
        oz.matmul(np.ones((2, 3), np.float32), np.ones((4, 2), np.float32))
    with pytest.raises(ValueError, match="split K"):
        oz.matmul(np.ones((1, oz.MAX_K + 1), np.float32), np.ones((oz.MAX_K + 1, 1),
                                                                  np.float32))


def test_zero_rows_and_columns_stay_zero():
    A = np.random.default_rng(9).standard_normal((5, 7)).astype(np.float32)
    B = np.random.default_rng(10).standard_normal((7, 6)).astype(np.float32)
    A[2], B[:, 4] = 0, 0
    C = oz.matmul(A, B)
    assert (C[2] == 0).all() and (C[:, 4] == 0).all()


@pytest.mark.parametrize("distribution", ["normal", "uniform", "positive", "mixed", "span",
                                          "subnormal", "spikes", "outliers"])
def test_on_the_accuracy_sets_inputs_it_is_as_accurate_as_fp32_or_says_it_may_not_be(
        distribution):
    """The accuracy harness's distributions (bench/accuracy.py, drawn on the CPU): wherever
    the scheme is less accurate than an FP32 product (max or median), scaling_loss is above 1,
    so a caller that refuses there never returns the worse answer; and on the plain
    distributions at K >= 255 it is below 1 (the scheme serves them)."""
    torch = pytest.importorskip("torch")
    from sgemmlab.bench import accuracy as acc

    for K in (17, 255, 1000, 4096):
        g = torch.Generator().manual_seed(K + 7)
        A = acc.draw(distribution, 64, K, g, "cpu").numpy()
        B = acc.draw(distribution, K, 48, g, "cpu").numpy()
        ours = _errors_guarded(oz.matmul(A, B), A, B)
        fp32 = _errors_guarded(A @ B, A, B)
        worse = ours[0] > fp32[0] or ours[1] > fp32[1]
        loss = oz.scaling_loss(A, B)
        assert not worse or loss > 1, (K, ours, fp32, loss)
        if distribution in ("normal", "uniform", "positive", "subnormal") and K >= 255:
            assert loss <= 1, (K, loss)


def _errors_guarded(C, A, B):
    """_errors with |A||B| = 0 taken as 1 (the absolute error there, as the harness does)."""
    A64, B64 = A.astype(np.float64), B.astype(np.float64)
    scale = np.abs(A64) @ np.abs(B64)
    err = np.abs(C.astype(np.float64) - A64 @ B64) / np.where(scale > 0, scale, 1.0)
    return float(err.max()), float(np.median(err))


def test_the_magnitude_floor_is_a_lower_bound_within_a_factor_of_two_where_it_keeps_all():
    rng = np.random.default_rng(11)
    A = rng.uniform(0.5, 1.0, (20, 300)).astype(np.float32)  # one binade: every entry kept
    B = rng.uniform(0.5, 1.0, (300, 30)).astype(np.float32)
    exact = np.abs(A.astype(np.float64)) @ np.abs(B.astype(np.float64))
    floor = oz.magnitude_floor(A, B)
    assert (floor <= exact).all() and (floor >= exact / 4).all()
    A[0, :] = 0  # a zero row: zero, not NaN
    assert (oz.magnitude_floor(A, B)[0] == 0).all()


@pytest.mark.parametrize("distribution", ["normal", "uniform", "positive", "mixed", "span",
                                          "subnormal", "spikes", "outliers"])
def test_the_coarse_loss_never_accepts_what_the_exact_one_refuses(distribution):
    """The refusal rule a kernel can afford (one more UINT8 product): at least the exact
    ratio everywhere, and still below 1 on the plain distributions at K >= 255."""
    torch = pytest.importorskip("torch")
    from sgemmlab.bench import accuracy as acc

    for K in (17, 255, 1000, 4096):
        g = torch.Generator().manual_seed(K + 7)
        A = acc.draw(distribution, 64, K, g, "cpu").numpy()
        B = acc.draw(distribution, K, 48, g, "cpu").numpy()
        exact, coarse = oz.scaling_loss(A, B), oz.scaling_loss(A, B, coarse=True)
        assert coarse >= exact, (K, exact, coarse)
        if distribution in ("normal", "uniform", "positive", "subnormal") and K >= 255:
            assert coarse <= 1, (K, coarse)


def test_the_deepest_k_cannot_overflow_int32():
    """The worst residues, -128 everywhere for the modulus 256, at MAX_K: the INT32 sum."""
    assert oz.MAX_K * 128 * 128 <= 2**31 - 1 < (oz.MAX_K + 1) * 128 * 128
    assert oz.residues(np.array([128, -128, 383]), 256).tolist() == [-128, -128, 127]


def test_the_flatness_rule_refuses_the_inputs_that_break_the_scaling():
    """Rows (columns) whose mass sits in a few entries are refused, flat ones are not: at
    K >= MIN_K every refused row of the accuracy set's breakers, none of the plain ones."""
    torch = pytest.importorskip("torch")
    from sgemmlab.bench import accuracy as acc

    for distribution, refused in (("normal", 0.0), ("uniform", 0.0), ("positive", 0.0),
                                  ("subnormal", 0.0), ("mixed", 0.9), ("span", 0.9),
                                  ("spikes", 0.5), ("outliers", 0.9)):
        g = torch.Generator().manual_seed(3)
        A = acc.draw(distribution, 64, oz.MIN_K, g, "cpu").numpy()
        share = float((oz.flatness(A, 1) < oz.FLAT).mean())
        assert share >= refused if refused else share == 0.0, (distribution, share)
    assert oz.flatness(np.zeros((2, 5)), 1).tolist() == [1.0, 1.0]
    assert oz.flatness(np.array([[3.0, 0.0, -3.0, 0.0]]), 1).tolist() == [1.0]


def test_outlier_features_are_refused_though_the_scheme_alone_would_serve_them():
    """A known limit of the flatness rule: activations with a few outlier features (4
    columns of 4096 at 1000x) are refused row by row (their outputs come from the FP64
    fallback: correct, slow), while the scheme without the rule is far more accurate than
    FP32 there. A rule that sees the product must change the first assertion."""
    rng = np.random.default_rng(0)
    A = rng.standard_normal((64, 4096)).astype(np.float32)
    A[:, :4] *= 1000
    B = rng.standard_normal((4096, 64)).astype(np.float32)
    assert (oz.flatness(A, 1) < oz.FLAT).all()
    alone, fp32 = _errors(oz.matmul(A, B, flat=0.0), A, B), _errors(A @ B, A, B)
    assert alone[0] < 0.2 * fp32[0]


@pytest.mark.parametrize("distribution", ["normal", "uniform", "positive", "mixed", "span",
                                          "subnormal", "spikes", "outliers"])
@pytest.mark.parametrize("rule", oz.RULES)
def test_as_served_it_is_at_least_as_accurate_as_fp32_on_every_distribution(distribution,
                                                                            rule):
    """The scheme as it serves a product (K >= MIN_K, refused outputs summed in FP64): max
    and median error at most an FP32 product's, on each of the accuracy set's seven
    distributions, by either rule. rule="product" (the flatness rule's outputs, then the
    coarse loss per output, one more UINT8 product on the GPU) never refuses an output the
    flatness rule serves, and serves most of the mixed and span inputs' outputs, which the
    flatness rule refuses wholesale."""
    torch = pytest.importorskip("torch")
    from sgemmlab.bench import accuracy as acc

    for K in (oz.MIN_K, 1000, 4096):
        g = torch.Generator().manual_seed(K + 11)
        A = acc.draw(distribution, 64, K, g, "cpu").numpy()
        B = acc.draw(distribution, K, 48, g, "cpu").numpy()
        ours = _errors_guarded(oz.matmul(A, B, rule=rule), A, B)
        fp32 = _errors_guarded(A @ B, A, B)
        assert ours[0] <= fp32[0] and ours[1] <= fp32[1], (K, ours, fp32)
        if rule == "product":
            product, flat = oz.refusals(A, B, rule="product"), oz.refusals(A, B)
            assert not (product & ~flat).any()
            if distribution in ("mixed", "span") and K >= 1000:
                assert product.mean() < 0.1 < flat.mean(), (K, product.mean(), flat.mean())


def test_the_product_rule_serves_outlier_features():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((64, 4096)).astype(np.float32)
    A[:, :4] *= 1000
    B = rng.standard_normal((4096, 64)).astype(np.float32)
    assert oz.refusals(A, B).all()
    assert oz.refusals(A, B, rule="product").mean() < 0.2
    assert _errors(oz.matmul(A, B, rule="product"), A, B)[0] < 0.2 * _errors(A @ B, A, B)[0]
    with pytest.raises(ValueError, match="rule must be one of"):
        oz.refusals(A, B, rule="magic")


def _outliers(rng, K, features=4, times=1000.0):
    A = rng.standard_normal((64, K)).astype(np.float32)
    A[:, :features] *= times
    return A, rng.standard_normal((K, 48)).astype(np.float32)


def test_balance_is_exact_and_keeps_the_product():
    """A D and D^-1 B in FP64 are A and B to the bit, times powers of two: every term of the
    product is the same, and the balanced norms of column k and row k are within 4x."""
    rng = np.random.default_rng(5)
    A, B = _outliers(rng, 1000)
    B[:, 3] = 0.0
    B[7, :] *= 2.0**-30
    d = oz.balance(A, B)
    Ad = np.ldexp(A.astype(np.float64), d[None, :])
    Bd = np.ldexp(B.astype(np.float64), -d[:, None])
    np.testing.assert_array_equal(np.ldexp(Ad, -d[None, :]), A.astype(np.float64))
    np.testing.assert_array_equal(Ad[0, :, None] * Bd, A[0, :, None].astype(np.float64) * B)
    ratio = np.linalg.norm(Ad, axis=0) / np.linalg.norm(Bd, axis=1)
    assert (ratio >= 0.25).all() and (ratio <= 4.0).all()
    assert d[:4].max() < -3 and abs(d[7]) >= 7  # the outliers shrink; row 7 grows
    assert oz.balance(np.zeros((2, 3)), np.ones((3, 2))).tolist() == [0, 0, 0]


@pytest.mark.parametrize("K, share", [(1000, 0.3), (4096, 0.0)])
@pytest.mark.parametrize("features, times", [(4, 1000.0), (6, 100.0)])
def test_balancing_serves_outlier_features(K, share, features, times):
    """Activations with a few outlier features, which the flatness rule refuses row by row:
    balanced, the scheme serves (nearly) all of their outputs, far more accurately than an
    FP32 product."""
    rng = np.random.default_rng(K + features)
    A, B = _outliers(rng, K, features, times)
    assert oz.refusals(A, B).mean() > 0.5
    _, _, refused = oz.served(A, B, balanced=True)
    assert refused.mean() <= share
    ours, fp32 = _errors(oz.matmul(A, B, balanced=True), A, B), _errors(A @ B, A, B)
    assert ours[0] < 0.2 * fp32[0] and ours[1] < 0.2 * fp32[1]


@pytest.mark.parametrize("distribution", ["normal", "uniform", "positive", "mixed", "span",
                                          "subnormal", "spikes", "outliers"])
def test_balanced_it_is_as_accurate_as_fp32_and_never_refuses_more(distribution):
    """Balancing is tried only where the rule refuses, and kept only where it refuses fewer
    outputs: on the accuracy set's distributions the served product stays at or below an
    FP32 product's max and median error."""
    torch = pytest.importorskip("torch")
    from sgemmlab.bench import accuracy as acc

    for K in (oz.MIN_K, 1000, 4096):
        g = torch.Generator().manual_seed(K + 13)
        A = acc.draw(distribution, 64, K, g, "cpu").numpy()
        B = acc.draw(distribution, K, 48, g, "cpu").numpy()
        _, _, refused = oz.served(A, B, balanced=True)
        assert refused.sum() <= oz.refusals(A, B).sum()
        ours = _errors_guarded(oz.matmul(A, B, balanced=True), A, B)
        fp32 = _errors_guarded(A @ B, A, B)
        assert ours[0] <= fp32[0] and ours[1] <= fp32[1], (K, ours, fp32)
