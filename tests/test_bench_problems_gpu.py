"""The harness on a real GPU at batched and transposed problems: records say what was
measured (batch, layout, FLOP of the whole batch), the check covers every product, a rung
that cannot read a layout is skipped with its reason, one without batches runs per product.
Skipped cleanly where there is no GPU (conftest.py)."""

from __future__ import annotations

import pytest

from sgemmlab import registry
from sgemmlab.bench.measure import Method
from sgemmlab.bench.problems import Problem

pytestmark = pytest.mark.gpu

TINY = Method(launches=3, rounds=3, warmup=1)
PLAIN = registry.rung(3)  # a small rung with neither layouts nor batches


def _both():
    return next(r for r in registry.RUNGS if {"layouts", "batched"} <= r.features)


def _measure(p: Problem, candidates):
    from sgemmlab.bench.measure import L2Flusher
    from sgemmlab.bench.runner import measure_shape
    from sgemmlab.runtime.device import gpu_info

    return measure_shape(p.M, p.N, p.K, candidates, TINY, L2Flusher(gpu_info().l2_bytes),
                         layout=p.layout, batch=p.batch, pad=p.pad)


def _cands(*rungs):
    from sgemmlab.bench.runner import rung_candidate
    from sgemmlab.runtime.device import gpu_info

    name = gpu_info().name
    return [rung_candidate(r, r.default(name)) for r in rungs]


def test_a_batched_problem_is_checked_and_timed_whole():
    p = Problem(67, 45, 33, batch=3)
    both = _both()
    recs = _measure(p, _cands(both, PLAIN))
    by = {r["kernel"]: r for r in recs}
    assert set(by) == {"cublas", both.label, PLAIN.label}
    for rec in recs:
        assert rec["status"] == "ok" and rec["correct"], rec
        assert (rec["M"], rec["N"], rec["K"], rec["batch"]) == (67, 45, 33, 3)
        assert "layout" not in rec  # NN: not written
        assert rec["tflops"] == pytest.approx(p.flops / rec["median_us"] / 1e6)
    assert "one launch per product" in by[PLAIN.label]["note"]
    assert "note" not in by[both.label]


def test_a_transposed_problem_skips_a_rung_without_layouts():
    p = Problem(67, 45, 33, layout="TN")
    both = _both()
    recs = _measure(p, _cands(both, PLAIN))
    cublas, good, skipped = recs
    for rec in (cublas, good):
        assert rec["status"] == "ok" and rec["correct"] and rec["layout"] == "TN", rec
        assert "batch" not in rec
    assert skipped["kernel"] == PLAIN.label and skipped["status"] == "skipped"
    assert "layouts" in skipped["skip_note"] and skipped["layout"] == "TN"
    assert "median_us" not in skipped and "correct" not in skipped


@pytest.mark.parametrize("p", [Problem(130, 70, 40, 2, "TT"), Problem(1, 300, 200, 4, "NT"),
                               Problem(257, 1, 129, layout="TN"),
                               Problem(67, 45, 33, 3, "NT", 3), Problem(64, 64, 64, pad=4),
                               Problem(1030, 1029, 1031, pad=1)], ids=str)
def test_auto_and_matmul_at_batches_and_layouts(p):
    from sgemmlab import dispatch
    from sgemmlab.bench.runner import auto_candidate, matmul_candidate, operands_aligned
    from sgemmlab.runtime.device import gpu_info

    g = gpu_info()
    dispatch.clear_cache()
    recs = _measure(p, [auto_candidate(g), matmul_candidate()])
    cublas, auto, matmul = recs
    for rec in recs:
        assert rec["status"] == "ok" and rec["correct"], rec
        assert Problem.of(rec) == p
    want = dispatch.choose(p.M, p.N, p.K, gpu_name=g.name, sm_count=g.sm_count,
                           trans_a=p.trans_a, trans_b=p.trans_b, batch=p.batch,
                           aligned=operands_aligned(p), arch=getattr(g, "arch", ""))
    assert auto["rung"] == want.rung and auto["config"] == dict(want.config)


def test_the_check_covers_every_product_and_layout_on_the_gpu():
    from sgemmlab.bench.baselines import cublas_gemm
    from sgemmlab.bench.check import check_gemm
    from sgemmlab.bench.runner import check_candidate

    for p in (Problem(67, 45, 33, 3, "TT"), Problem(64, 64, 64, layout="NT")):
        res = check_gemm(cublas_gemm, p.M, p.N, p.K, batch=p.batch, layout=p.layout,
                         alpha=0.75, beta=-1.25)
        assert res.ok, (p, res)

    (cand,) = _cands(_both())

    def first_only(A, B, C, alpha, beta):  # a wrong "batched" kernel: product 0 only
        cand.gemm(A[:1], B[:1], C[:1], alpha, beta)

    from sgemmlab.bench.candidates import Candidate

    wrong = Candidate("first_only", first_only, cand.bind)
    assert not check_candidate(wrong, 64, 64, 64, batch=3).ok


def test_a_run_over_problems_writes_them_and_their_suites(tmp_path, monkeypatch):
    from sgemmlab.bench import report, results, runner

    monkeypatch.setenv("SGEMMLAB_RESULTS_DIR", str(tmp_path))
    todo = [Problem(64, 64, 64, 2), Problem(64, 64, 64, layout="TN"), Problem(64, 64, 64)]
    run, path = runner.run("bench", "test", todo, _cands(_both()), TINY,
                           suites={"mine": todo})
    data = results.load(path)
    assert data["suites"] == {"mine": ["2@64x64x64", "64x64x64:TN", "64x64x64"]}
    assert [Problem.of(r) for r in data["records"]] == [p for p in todo for _ in range(2)]
    text, _ = report.build([path], tmp_path / "report")
    assert "### 2@64×64×64" in text and "### 64×64×64:TN" in text and "### 64×64×64\n" in text
    assert "| mine |" in text


def test_triton_is_skipped_at_a_batch_with_its_reason():
    pytest.importorskip("triton")
    from sgemmlab.bench.baselines import candidate

    cublas, tri = _measure(Problem(64, 64, 64, 2), [candidate("triton")])
    assert cublas["status"] == "not timed"
    assert tri["status"] == "skipped" and "Triton" in tri["skip_note"]
