"""The fuzz campaign's parts that need no GPU (bench/fuzz.py): what the strategy draws, and
the judge — IEEE propagation where the float64 reference is not finite, the FP32 bound and
the subnormal floor elsewhere — on CPU tensors, where each kind of wrong answer must fail."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
hypothesis = pytest.importorskip("hypothesis")

from hypothesis import given, settings  # noqa: E402

from sgemmlab.bench import fuzz  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(fuzz.cases())
def test_drawn_cases_are_well_formed(case):
    assert min(case.M, case.N, case.K) >= 1 and max(case.M, case.N) <= 4096
    assert case.M * case.N * case.K * case.batch <= fuzz.MAX_WORK or case.K == 1
    assert case.layout in ("NN", "NT", "TN", "TT") and case.batch >= 1
    assert (case.broadcast == "") or case.batch > 1
    assert not (case.precision == "tf32x3" and "inf" in case.inject)  # documented limit
    assert case.kernel in (None, "?")
    assert case.view in fuzz.VIEWS and case.producer in fuzz.PRODUCERS
    assert case.scalar in fuzz.SCALARS and case.entry in fuzz.ENTRIES
    if case.entry != "sgemm":  # what the switch hands to torch's kernels is not drawn
        assert case.alpha != 0 and case.precision in ("ieee", "fp32_emulated", "tf32x3")
        assert case.kernel is None and case.producer == "torch" and case.scalar == "float"
        assert case.view != "neg_c"


def test_the_campaign_draws_every_way_of_handing_operands_over():
    """Negative and conjugate views, the producers whose library is installed, every
    accepted scalar type, each way of calling (sgemm, torch ops under the switch): the
    strategy reaches each (hypothesis.find raises if not)."""
    from hypothesis import find

    producers = {p for p in fuzz.PRODUCERS if p == "torch" or fuzz._importable(p)}
    for field, values in (("view", fuzz.VIEWS), ("producer", producers),
                          ("scalar", fuzz.SCALARS), ("entry", fuzz.ENTRIES)):
        for v in set(values):
            find(fuzz.cases(), lambda c, f=field, v=v: getattr(c, f) == v,
                 settings=settings(max_examples=5000, database=None, deadline=None))


def test_the_campaign_draws_spikes_where_the_scheme_refuses_rows():
    """A finite spike in A or B with precision "fp32_emulated" and rung 26 asked for by
    name: the scheme refuses that row or column, and its outputs come from the fallback."""
    from hypothesis import find

    for inject in ("spike_a", "spike_b"):
        find(fuzz.cases(), lambda c, i=inject: c.inject == i and c.precision == "fp32_emulated"
             and c.kernel == "?" and c.K >= 256,
             settings=settings(max_examples=20000, database=None, deadline=None))


@pytest.mark.parametrize("how", fuzz.SCALARS)
@pytest.mark.parametrize("value", [1.0, 0.0, -2.5, 1e-40, 3.0])
def test_scalars_keep_their_float32_value_in_every_type(how, value):
    from sgemmlab.product import scalar

    if how == "cuda_tensor":
        pytest.skip("needs a GPU")
    got = fuzz.as_scalar(value, how)
    assert scalar("alpha", got) == scalar("alpha", value)


def _judge(C, ref, K=64):
    return fuzz.judge(torch.as_tensor(C, dtype=torch.float32), torch.as_tensor(ref).double(),
                      K, alpha_ab=torch.as_tensor(ref).double(), beta_c=None)


def test_a_right_answer_passes():
    ok, why, err = _judge([[1.0, -2.0]], [[1.0, -2.0 + 1e-8]])
    assert ok and why == "" and err < 1e-7


@pytest.mark.parametrize("C, ref, words", [
    ([[1.0, 2.0]], [[math.nan, 2.0]], "NaN of the reference"),
    ([[math.inf, 2.0]], [[-math.inf, 2.0]], "same Inf"),
    ([[math.nan, 2.0]], [[1.0, 2.0]], "NaN or Inf where the reference is finite"),
    ([[1.01, 2.0]], [[1.0, 2.0]], "error"),
])
def test_each_kind_of_wrong_answer_fails(C, ref, words):
    ok, why, _ = _judge(C, ref)
    assert not ok and words in why


def test_a_subnormal_result_is_judged_against_its_spacing():
    tiny = 3 * fuzz.SUBNORMAL_SPACING
    ok, _, _ = _judge([[tiny]], [[tiny * 1.2]], K=1)  # one spacing off: rounding, not a bug
    assert ok
    ok, _, _ = _judge([[tiny]], [[tiny * 40]], K=1)
    assert not ok


def test_where_atomics_may_flush_subnormals_a_zero_is_accepted_only_there():
    tiny = 3e-40  # subnormal in FP32
    strict = fuzz.judge(torch.tensor([[0.0]]), torch.tensor([[tiny]]).double(), 511,
                        alpha_ab=None, beta_c=torch.tensor([[tiny]]).double())
    loose = fuzz.judge(torch.tensor([[0.0]]), torch.tensor([[tiny]]).double(), 511,
                       alpha_ab=None, beta_c=torch.tensor([[tiny]]).double(),
                       spacing=fuzz.SMALLEST_NORMAL)
    assert not strict[0] and loose[0]


def test_the_summary_counts_flushed_subnormals_apart_from_the_worst_error():
    recs = [{"status": "ok", "kernel": None, "error": 1e-6},
            {"status": "ok", "kernel": "14_streamk", "error": 1.0, "flushed_subnormals": True},
            {"status": "refused", "kernel": "15_skinny_m"}]
    s = fuzz.summary(recs, None)
    assert (s["checked"], s["refused"], s["flushed_subnormals"], s["worst_error"]) == (
        2, 1, 1, 1e-6)


def test_tf32_operands_keep_ten_mantissa_bits_truncated_or_rounded():
    x = torch.tensor([1.0 + 2.0**-10 + 2.0**-11, -(1.0 + 2.0**-12), 3.0, float("inf"),
                      float("nan"), 1.0 + 2.0**-11])
    t, r = fuzz.tf32(x, "truncate"), fuzz.tf32(x, "round")
    assert t[:3].tolist() == [1.0 + 2.0**-10, -1.0, 3.0]
    assert r[:3].tolist() == [1.0 + 2.0**-9, -1.0, 3.0]
    assert r[5].item() == 1.0 + 2.0**-10  # a tie goes away from zero (cvt.rna)
    assert t[3].item() == float("inf") and r[3].item() == float("inf")
    assert torch.isnan(t[4]) and torch.isnan(r[4])


def test_a_tf32_product_is_judged_against_the_product_of_its_tf32_operands():
    """A 1 x 16384 dot product whose terms cancel to about 0.01: computed from operands as
    TF32 keeps them it misses float64 by far more than any bound relative to its value (the
    first campaign of session 9 failed there against TF32_BOUND), yet it is within FP32's
    bound of the product of those TF32 operands; one term left out fails that."""
    gen = torch.Generator().manual_seed(3)
    K = 16384
    a = torch.rand(1, K, generator=gen) * 2 - 1
    b = torch.rand(K, 1, generator=gen) * 2 - 1
    j = int(a[0].abs().argmax())  # one term cancels the rest down to about 0.01
    b[j, 0] -= float(((a.double() @ b.double()).item() - 0.01) / a[0, j].item())
    exact = a.double() @ b.double()
    kept = fuzz.tf32(a, "truncate").double() @ fuzz.tf32(b, "truncate").double()
    got = kept.float()
    assert abs(float(got.double() - exact)) / abs(float(exact)) > 1e-2  # TF32 vs FP32
    ok, why, _ = fuzz.judge(got, kept, K, alpha_ab=kept, beta_c=None)
    assert ok, why
    ok, _, _ = fuzz.judge(got, exact, K, alpha_ab=exact, beta_c=None)
    assert not ok  # against float64 of the FP32 operands it fails: the references differ
    missing = got - float(fuzz.tf32(a, "truncate")[0, 7] * fuzz.tf32(b, "truncate")[7, 0])
    ok, why, _ = fuzz.judge(missing, kept, K, alpha_ab=kept, beta_c=None)
    assert not ok, "one product left out went unseen"


def test_the_tf32_bound_covers_truncating_accumulation_and_no_more():
    from sgemmlab.bench.check import error_bound

    assert fuzz.tf32_bound(65536) == pytest.approx(65536 * 2.0**-24)
    assert fuzz.tf32_bound(64) == 16 * error_bound(64)
    assert fuzz.tf32_bound(2**20) == 2**20 * 2.0**-24  # linear in K past it


def test_a_cancelling_dot_product_is_judged_against_its_terms_rms():
    """The error of a sum whose terms cancel to a small value is measured against the root
    sum of squares of its terms: an error of a few 2^-24 of each term passes, a k-tile of
    32 products left out does not."""
    gen = torch.Generator().manual_seed(5)
    K = 16384
    a = torch.rand(1, K, generator=gen).double() * 2 - 1
    b = torch.rand(K, 1, generator=gen).double() * 2 - 1
    j = int(a[0].abs().argmax())
    b[j, 0] -= float(((a @ b).item() - 0.5) / a[0, j].item())
    ref = a @ b
    rms = (a * a) @ (b * b)
    rms = rms.sqrt()
    bound = fuzz.tf32_bound(K)
    off = ref + 0.5 * bound * float(rms)  # half the bound of the terms' scale
    ok, why, _ = fuzz.judge(off.float(), ref, K, alpha_ab=ref, beta_c=None, bound=bound,
                            terms_rms=rms)
    assert ok, why
    ok, _, _ = fuzz.judge(off.float(), ref, K, alpha_ab=ref, beta_c=None, bound=bound)
    assert not ok  # against its own value (0.5) the same error is too much
    short = ref - float(a[0, 32:64] @ b[32:64, 0])
    ok, _, _ = fuzz.judge(short.float(), ref, K, alpha_ab=ref, beta_c=None, bound=bound,
                          terms_rms=rms)
    assert not ok, "a k-tile left out went unseen"


def test_tf32_of_a_negative_view_is_that_of_its_values():
    """The judge of "tf32" cases reads an operand's bits: a view with torch's negative bit
    (which the campaign hands over) has its values' bits, not its memory's (the first
    campaign with such views stopped on torch's refusal to reinterpret one)."""
    x = torch.tensor([1.2345678, -3.3333333, 1e-3, float("inf")])
    for rounding in ("truncate", "round"):
        assert torch.equal(fuzz.tf32(torch._neg_view(-x), rounding), fuzz.tf32(x, rounding))
