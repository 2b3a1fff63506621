"""The accuracy harness (bench/accuracy.py, `sgemmlab accuracy`): the fuzz set, the metric,
the verdict and the loop on CPU tensors with injected candidates; one GPU smoke run."""

from __future__ import annotations

import json
import math

import pytest

from sgemmlab.bench import accuracy as acc
from sgemmlab.bench import results
from sgemmlab.bench.baselines import tf32_split
from sgemmlab.bench.check import error_bound
from sgemmlab.errors import ConfigError
from sgemmlab.runtime.device import GPUInfo

torch = pytest.importorskip("torch")  # the harness runs on torch tensors (CPU ones here)

# -- the fuzz set ---------------------------------------------------------------------------


def test_the_fuzz_set_is_fixed_and_covers_k_1_to_65536_in_four_distributions():
    every = acc.fuzz_set()
    assert every == acc.fuzz_set()
    assert len({c.name for c in every}) == len(every)
    assert {c.distribution for c in every} == set(acc.DISTRIBUTIONS)
    served = [c for c in every if (c.M, c.N) == acc.SERVED_MN]
    assert {(c.distribution, c.K) for c in served} == {
        (d, K) for d in acc.DISTRIBUTIONS for K in acc.SERVED_K}
    cases = [c for c in every if c not in served]
    for d in ("normal", "uniform", "mixed"):
        ks = {c.K for c in cases if c.distribution == d and (c.M, c.N) in (acc.MN, acc.MN_DEEP)}
        assert ks == set(acc.K_VALUES), d
    assert min(acc.K_VALUES) == 1 and max(acc.K_VALUES) == 65536
    assert {c.K for c in cases if c.distribution == "positive"} == set(acc.POSITIVE_K)
    for c in cases:  # a cheap float64 reference at the deepest K
        if c.K == 65536:
            assert (c.M, c.N) == acc.MN_DEEP
    shapes = {(c.M, c.N, c.K) for c in cases}
    assert {(257, 131, 1000), (1, 4096, 4096), (4096, 1, 4096)} <= shapes


def test_the_quick_set_is_a_subset_with_every_distribution_but_the_scaling_breakers():
    quick = acc.fuzz_set(quick=True)
    assert set(quick) < set(acc.fuzz_set())
    assert {c.distribution for c in quick} == set(acc.DISTRIBUTIONS) - set(acc.SCALING)
    assert {c.K for c in acc.fuzz_set() if c.distribution in acc.SCALING
            and (c.M, c.N) != acc.SERVED_MN} == set(acc.SCALING_K)
    assert len(quick) < len(acc.fuzz_set()) / 3


def test_inputs_are_the_same_for_the_same_seed_and_differ_otherwise():
    c = acc.case("normal", 8, 6, 5)
    A, B = acc.operands(c, 7, "cpu")
    A2, B2 = acc.operands(c, 7, "cpu")
    assert A.dtype == B.dtype == torch.float32
    assert A.shape == (8, 5) and B.shape == (5, 6)
    assert torch.equal(A, A2) and torch.equal(B, B2)
    assert not torch.equal(A, acc.operands(c, 8, "cpu")[0])
    assert not torch.equal(A, acc.operands(acc.case("normal", 8, 6, 6), 7, "cpu")[0][:, :5])


def test_each_distribution_draws_what_it_says():
    g = torch.Generator().manual_seed(0)
    u = acc.draw("uniform", 200, 200, g, "cpu")
    p = acc.draw("positive", 200, 200, g, "cpu")
    n = acc.draw("normal", 200, 200, g, "cpu")
    m = acc.draw("mixed", 200, 200, g, "cpu")
    assert u.min() >= -1 and u.max() <= 1 and u.min() < -0.99
    assert p.min() >= 0 and p.max() <= 1
    assert abs(float(n.mean())) < 0.02 and abs(float(n.std()) - 1) < 0.02
    # mixed: a wide dynamic range within each row, exponents beyond +-16 of a normal's
    _, e = torch.frexp(m[m != 0])
    assert int(e.max()) - int(e.min()) >= 32
    row = m[0].abs()
    assert float(row.max() / row[row > 0].min()) > 2.0**24
    with pytest.raises(ValueError, match="unknown distribution"):
        acc.draw("cauchy", 2, 2, g, "cpu")


def test_the_scaling_breakers_draw_what_they_say():
    g = torch.Generator().manual_seed(1)
    span = acc.draw("span", 64, 512, g, "cpu")
    row = span[0].abs()
    assert float(row.max() / row[row > 0].min()) > 2.0**50  # a row spans about 2^60
    _, e = torch.frexp(span[span != 0])
    assert int(e.max()) - int(e.min()) >= 60
    sub = acc.draw("subnormal", 64, 512, g, "cpu")
    tiny = torch.finfo(torch.float32).tiny  # the smallest normal
    assert (sub[1::2].abs() < tiny).all() and (sub[0::2].abs() >= tiny).float().mean() > 0.99
    assert (sub[1::2] != 0).float().mean() > 0.99, "subnormal, not flushed to zero"
    spikes = acc.draw("spikes", 256, 256, g, "cpu")
    huge = spikes.abs() > 2.0**30
    assert 0.5 / acc.SPIKE_EVERY < float(huge.float().mean()) < 2.0 / acc.SPIKE_EVERY
    assert float(spikes[~huge].abs().max()) < 10
    out = acc.draw("outliers", 64, 1100, g, "cpu")
    big = out.abs().amax(dim=0) > 2.0**6
    assert big.nonzero().flatten().tolist() == [0, 512, 1024]  # the outlier features
    assert float(out[:, ~big].abs().max()) < 10


# -- the metric -----------------------------------------------------------------------------


def _error(A, B, C) -> acc.Error:
    A, B, C = (torch.tensor(x, dtype=torch.float32) for x in (A, B, C))
    return acc.componentwise_error(C, *acc.reference(A, B))


def test_a_known_error_gives_its_value():
    # ref 11, |A||B| 11: an error of 0.011 is 1e-3
    e = _error([[1.0, 2.0]], [[3.0], [4.0]], [[11.011]])
    assert e.max == pytest.approx(1e-3, rel=1e-4) and e.nonfinite == 0
    assert e.relative == pytest.approx(1e-3, rel=1e-4)


def test_the_error_is_normalised_by_abs_a_times_abs_b_not_by_the_result():
    # 1 - 1 = 0 from terms of size 2: an error of 0.5 is 0.25 of the terms, not infinite
    e = _error([[1.0, -1.0]], [[1.0], [1.0]], [[0.5]])
    assert e.max == 0.25


def test_a_zero_denominator_gives_the_absolute_error():
    e = _error([[0.0, 0.0], [1.0, 1.0]], [[1.0], [1.0]], [[0.5], [2.0]])
    assert e.max == 0.5 and e.median == 0.0  # torch.median: the lower middle value


def test_max_and_median_over_every_element():
    ref = torch.ones(1, 5, dtype=torch.float64)
    C = torch.tensor([[1.0, 1.1, 1.2, 1.3, 1.5]])
    e = acc.componentwise_error(C, ref, ref)
    assert e.max == pytest.approx(0.5) and e.median == pytest.approx(0.2)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_nonfinite_output_is_an_infinite_error(bad):
    e = _error([[1.0, 2.0]], [[3.0, 1.0], [4.0, 1.0]], [[11.0, bad]])
    assert e.max == e.median == e.relative == math.inf and e.nonfinite == 1


def test_ratios_to_a_zero_or_nonfinite_baseline():
    assert acc.ratio(2.0, 4.0) == 0.5
    assert acc.ratio(0.0, 0.0) == 1.0
    assert acc.ratio(1e-9, 0.0) == math.inf
    assert acc.ratio(1.0, math.inf) is None


# -- the verdict ----------------------------------------------------------------------------


def test_the_verdict_needs_both_max_and_median_at_most_cublas():
    base = acc.Error(max=1e-7, median=1e-8, relative=1e-7)
    assert acc.passes(base, base)
    assert acc.passes(acc.Error(0.5e-7, 0.5e-8, 0), base)
    assert not acc.passes(acc.Error(1.01e-7, 1e-8, 0), base)
    assert not acc.passes(acc.Error(1e-7, 1.01e-8, 0), base)
    assert not acc.passes(acc.Error(math.inf, math.inf, math.inf, 1), base)


# -- the harness on CPU tensors, with injected candidates ------------------------------------


def _fp32(A, B, C):
    torch.matmul(A, B, out=C)


def _rounded(A, B, C):  # the correctly rounded product: never worse than any FP32 result
    C.copy_(A.double() @ B.double())


def _perturbed(A, B, C):  # a few bits lost everywhere: must fail
    torch.matmul(A, B, out=C)
    C.mul_(1 + 2.0**-18)


def _tf32_like(A, B, C):
    C.copy_(tf32_split(A)[0] @ tf32_split(B)[0])


def _unwritten(A, B, C):
    C[: C.shape[0] // 2 + 1] = 0


def _not_here(A, B, C):
    raise ConfigError("rung 20 needs Hopper (sm_90a)")


def _broken(A, B, C):
    raise RuntimeError("launch failed")


FAKES = [acc.Contender("cublas", _fp32, False), acc.Contender("ieee", _fp32, True),
         acc.Contender("rounded", _rounded, True), acc.Contender("perturbed", _perturbed, True),
         acc.Contender("tf32", _tf32_like, False), acc.Contender("unwritten", _unwritten, True),
         acc.Contender("tf32x3_rung", _not_here, True), acc.Contender("broken", _broken, True)]
# (not the scaling breakers: a perturbation of 2^-18 vanishes in a subnormal output)
SMALL = [acc.case(d, 9, 7, K) for d in acc.DISTRIBUTIONS if d not in acc.SCALING
         for K in (1, 17, 300)]


@pytest.fixture(scope="module")
def harness():
    return acc.run_cases(SMALL, FAKES, seed=3, device="cpu")


def test_every_case_has_a_record_of_every_candidate(harness):
    records, _ = harness
    assert len(records) == len(SMALL) * len(FAKES)
    assert {(r["case"], r["candidate"]) for r in records} == {
        (c.name, f.name) for c in SMALL for f in FAKES}


def test_candidates_as_good_as_cublas_pass_and_a_worse_one_fails(harness):
    records, summary = harness
    s = {x["candidate"]: x for x in summary}
    assert s["ieee"]["passed"] == len(SMALL) and s["ieee"]["all_passed"]
    assert s["ieee"]["worst_max_ratio"] == 1.0
    assert s["rounded"]["all_passed"] and s["rounded"]["worst_max_ratio"] <= 1.0
    assert s["perturbed"]["passed"] == 0 and not s["perturbed"]["all_passed"]
    assert set(s["perturbed"]["failed"]) == {c.name for c in SMALL}
    assert s["perturbed"]["worst_max_ratio"] > 2
    for r in records:
        if r["candidate"] == "perturbed":
            assert r["passed"] is False and r["vs_cublas_max"] > 1


def test_tf32_candidates_are_reported_never_judged(harness):
    records, summary = harness
    s = {x["candidate"]: x for x in summary}
    assert s["tf32"]["kind"] == "NOT FP32" and "passed" not in s["tf32"]
    assert s["tf32"]["worst_max_ratio"] > 100  # 10 mantissa bits, not 23
    assert all("passed" not in r for r in records if r["candidate"] in ("tf32", "cublas"))


def test_an_unwritten_output_is_inf_and_fails(harness):
    records, summary = harness
    for r in records:
        if r["candidate"] == "unwritten":
            assert r["max"] == math.inf and r["nonfinite"] > 0 and "NaN/Inf" in r["note"]
            assert r["passed"] is False
    assert not {x["candidate"]: x for x in summary}["unwritten"]["all_passed"]


def test_a_config_error_is_unavailable_and_another_error_is_recorded(harness):
    records, summary = harness
    s = {x["candidate"]: x for x in summary}
    assert s["tf32x3_rung"]["unavailable"] == ["rung 20 needs Hopper (sm_90a)"]
    assert s["tf32x3_rung"]["measured"] == 0 and s["tf32x3_rung"]["all_passed"] is False
    assert s["broken"]["errors"][0].endswith("RuntimeError: launch failed")
    assert len(s["broken"]["failed"]) == len(SMALL)
    assert {r["status"] for r in records if r["candidate"] == "tf32x3_rung"} == {"unavailable"}


def test_the_tables_show_every_case_and_candidate(harness):
    from rich.console import Console

    records, summary = harness
    run = {"cases": [vars(c) for c in SMALL], "records": records, "summary": summary,
           "candidates": {f.name: {"kind": acc.kind_of(f)} for f in FAKES}}
    console = Console(width=300, record=True)
    for t in acc.tables(run):
        console.print(t)
    text = console.export_text()
    assert all(c.name in text for c in SMALL) and "✗" in text and "n/a" in text
    assert "tf32 †" in text and "not judged" in text


def test_the_results_file_has_the_runs_environment_and_every_record(tmp_path, monkeypatch):
    monkeypatch.setenv("SGEMMLAB_RESULTS_DIR", str(tmp_path))
    gpu = GPUInfo(0, "Fake GPU", (9, 0), 132, 50 << 20, 227 << 10)
    run, path = acc.run(SMALL[:2], FAKES[:3], seed=1, device="cpu", gpu=gpu)
    assert path.parent == tmp_path / "fake-gpu" / "accuracy" and path.name.startswith("2026")
    data = results.load(path)
    assert data["kind"] == "accuracy" and data["method"]["seed"] == 1
    assert {"gpu", "git_commit", "source_digest", "versions"} <= set(data["environment"])
    assert len(data["records"]) == 2 * 3 and [c["name"] for c in data["cases"]] == [
        c.name for c in SMALL[:2]]
    assert data["summary"] == json.loads(json.dumps(run["summary"]))


def test_contenders_put_cublas_first_and_refuse_unknown_names():
    assert [c.name for c in acc.contenders()] == list(acc.CONTENDERS)
    assert [c.name for c in acc.contenders(["tf32x3", "ieee", "tf32x3"])] == [
        "cublas", "tf32x3", "ieee"]
    judged = {c.name for c in acc.CONTENDERS.values() if c.fp32}
    assert judged == {"ieee", "fp32_emulated", "tf32x3", "tf32x3_rung"}
    with pytest.raises(KeyError, match="unknown candidate 'fp16'"):
        acc.contenders(["fp16"])
    # the scheme's candidates run when named, never by default
    assert [c.name for c in acc.contenders(["ozaki8"])] == ["cublas", "ozaki8"]
    assert all(c.fp32 for c in acc.ON_REQUEST.values())


# -- on the GPU -----------------------------------------------------------------------------


@pytest.mark.gpu
def test_the_quick_fuzz_set_on_the_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("SGEMMLAB_RESULTS_DIR", str(tmp_path))
    cases = acc.fuzz_set(quick=True)
    run, path = acc.run(cases, acc.contenders(), seed=0)
    assert path.is_file() and results.load(path)["kind"] == "accuracy"
    by = {(r["case"], r["candidate"]): r for r in run["records"]}
    for c in cases:
        base, ieee = by[(c.name, "cublas")], by[(c.name, "ieee")]
        assert base["status"] == "ok" and base["relative_error"] <= error_bound(c.K), c.name
        assert ieee["status"] == "ok" and ieee["relative_error"] <= error_bound(c.K), c.name
        for name in acc.CONTENDERS:
            assert by[(c.name, name)]["status"] in ("ok", "unavailable"), (c.name, name)
    summary = {s["candidate"]: s for s in run["summary"]}
    assert summary["tf32x3"]["measured"] == len(cases)  # dispatch serves every shape
