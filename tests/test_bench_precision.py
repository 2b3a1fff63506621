"""`sgemmlab bench --precision` on a fake GPU (issue 14): what each precision measures and
calls its candidates, which baselines it brings, what the results file records, and the
report's ratio to the anchor. (The real measurement needs a Hopper GPU: test_bench_gpu.py.)"""

from __future__ import annotations

import json
import types

import pytest

from sgemmlab import registry
from sgemmlab.bench import readme, report, results, runner, suites
from sgemmlab.bench.measure import QUICK
from sgemmlab.bench.problems import Problem
from sgemmlab.runtime import device
from test_bench_cli import GPU, one_line_error, run
from test_bench_report import _cublas, _timed, bench_run, write


# -- the candidates: names, the FP32 gate, the precision each calls the API with -----------
@pytest.fixture
def api_calls(monkeypatch):
    """sgemmlab.matmul and sgemmlab.sgemm replaced by recorders of their keywords."""
    from sgemmlab import api

    calls = []
    monkeypatch.setattr(api, "matmul", lambda a, b, **kw: calls.append(("matmul", kw)))
    monkeypatch.setattr(api, "sgemm", lambda a, b, c=None, **kw: calls.append(("sgemm", kw)))
    return calls


@pytest.mark.parametrize("precision, name, fp32", [
    ("ieee", "{}", True), ("tf32x3", "{}[tf32x3]", True), ("tf32", "{}[tf32]", False)])
def test_matmul_and_auto_are_named_and_gated_for_their_precision(api_calls, precision, name,
                                                                  fp32):
    for c, kernel in ((runner.matmul_candidate(precision), "matmul"),
                      (runner.auto_candidate(GPU, precision), "auto")):
        assert c.kernel == name.format(kernel)
        assert c.fp32 is fp32  # 3xTF32 is gated by the FP32 bound; TF32 never
        assert ("NOT FP32" in c.info["note"]) is (not fp32)


def test_matmul_calls_the_api_at_its_precision(api_calls):
    c = runner.matmul_candidate("tf32x3")
    c.bind("A", "B", "C")()
    c.gemm("A", "B", "C", 1.0, 0.0)
    c.gemm("A", "B", "C", 0.75, -1.25)
    assert [(f, kw["precision"]) for f, kw in api_calls] == [
        ("matmul", "tf32x3"), ("matmul", "tf32x3"), ("sgemm", "tf32x3")]
    assert api_calls[2][1]["alpha"] == 0.75 and api_calls[2][1]["beta"] == -1.25


def test_auto_asks_dispatch_at_its_precision(isolated_dispatch, monkeypatch):
    from sgemmlab import dispatch

    asked = []

    def choose(M, N, K, **kw):
        asked.append(kw["precision"])
        return dispatch.forced("13_hoisted")

    monkeypatch.setattr(dispatch, "choose", choose)
    monkeypatch.setattr(runner, "rung_candidate", lambda r, cfg, layout="NN": runner.Candidate(
        r.label, None, None, dict(cfg), {"registers": 100}))
    auto = runner.auto_candidate(GPU, "tf32x3")
    assert auto.refuses(Problem(64, 64, 64)) is None
    assert auto.per_shape(Problem(64, 64, 64))["rung"] == "13_hoisted"  # the fallback shows
    assert set(asked) == {"tf32x3"}


class FakeLauncher:
    def __init__(self, rung, config=None, device_id=0):
        self.rung, self.config = rung, config

    def compiled(self):
        return types.SimpleNamespace(resources=types.SimpleNamespace(
            registers=168, spill_stores=0, spill_loads=0, smem_bytes=0))


@pytest.mark.parametrize("number, precision, fp32", [
    (19, "tf32", False), (20, "tf32x3", True), (13, "ieee", True)])
def test_a_rung_is_checked_at_its_own_precision(api_calls, monkeypatch, number, precision,
                                                 fp32):
    torch = pytest.importorskip("torch")
    from sgemmlab.runtime import launch

    monkeypatch.setattr(launch, "Launcher", FakeLauncher)
    r = registry.rung(number)
    assert r.precision == precision
    c = runner.rung_candidate(r, dict(r.seed))
    assert (c.kernel, c.fp32) == (r.label, fp32)
    assert ("NOT FP32" in c.info.get("note", "")) is (not fp32)
    A, B, C = torch.ones(4, 4), torch.ones(4, 4), torch.zeros(4, 4)
    c.gemm(A, B, C, 1.0, 0.0)
    ((f, kw),) = api_calls
    assert (f, kw["kernel"], kw["precision"]) == ("sgemm", r.label, precision)


# -- the baselines a precision brings along ------------------------------------------------
def test_tf32x3_adds_its_anchor_and_tf32_and_none_removes_them():
    assert suites.baselines_for([], "ieee") == ["triton", "tf32"]
    assert suites.baselines_for([], "tf32x3") == ["triton", "tf32", "tf32x3"]
    assert suites.baselines_for(["triton"], "tf32x3") == ["triton", "tf32x3", "tf32"]
    assert suites.baselines_for(["tf32x3"], "tf32x3") == ["tf32x3", "tf32"]
    assert suites.baselines_for(["triton"], "tf32") == ["triton", "tf32"]
    assert suites.baselines_for(["none"], "tf32x3") == []
    with pytest.raises(ValueError, match="unknown precision 'fp16'"):
        suites.baselines_for([], "fp16")


def test_the_candidates_of_a_precision():
    got, notes = suites.candidates([], ["auto", "matmul"], ["tf32x3", "tf32"], GPU, "tf32x3")
    assert [(c.kernel, c.fp32) for c in got] == [
        ("auto[tf32x3]", True), ("matmul[tf32x3]", True), ("tf32x3_torch", False),
        ("cublas_tf32", False)]
    assert notes == []


def test_a_changed_configuration_is_its_rung_at_the_default_with_those_values(monkeypatch):
    """`bench --config 24:REG_TRANSPOSE=1`: rung 24 once more, its default changed."""
    from sgemmlab import registry

    monkeypatch.setattr(runner, "rung_candidate", lambda rung, cfg: (rung.label, cfg))
    r = registry.rung(24)
    got, _ = suites.candidates([r], [], [], GPU, "ieee", [(r, {"REG_TRANSPOSE": 1})])
    assert got == [(r.label, r.default(GPU.name)),
                   (r.label, r.default(GPU.name) | {"REG_TRANSPOSE": 1})]
    assert got[0][1] != got[1][1]
    with pytest.raises(ValueError, match="24_streamk_steady at .*configuration must set"):
        suites.candidates([], [], [], GPU, "ieee", [(r, {"FOO": 1})])


# -- the command line ----------------------------------------------------------------------
TIMES_US = {"cublas": 100.0, "matmul[tf32x3]": 40.0, "auto[tf32x3]": 50.0,
            "tf32x3_torch": 120.0, "cublas_tf32": 30.0}


@pytest.fixture
def fake_bench(monkeypatch, tmp_path):
    """`bench` on a fake GPU whose runner times every candidate as TIMES_US says."""
    from sgemmlab.cli import measure

    monkeypatch.setattr(device, "gpu_info", lambda index=0: GPU)
    monkeypatch.setattr(measure, "require_torch", lambda: None)
    asked = {}

    def fake_run(kind, tag, shapes, candidates, method, notes=(), board=None, *, suites=None,
                 precision="ieee"):
        asked.update(precision=precision, kernels=[c.kernel for c in candidates])
        recs = []
        for p in map(Problem.of, shapes):
            for name in ["cublas", *asked["kernels"]]:
                us = TIMES_US.get(name, 100.0)
                recs.append({**p.fields(), "kernel": name, "status": "ok", "median_us": us,
                             "vs_cublas": 100.0 / us, "fp32": name != "cublas_tf32",
                             "precision": precision})
        return {"records": recs}, tmp_path / "bench.json"

    monkeypatch.setattr(runner, "run", fake_run)
    return asked


def test_bench_measures_matmul_and_auto_at_the_precision_asked(fake_bench):
    result = run("bench", "--shape", "64x64x64", "-k", "matmul", "-k", "auto", "-b", "tf32",
                 "--precision", "tf32x3", "--quiet")
    assert result.exit_code == 0, result.output
    assert fake_bench == {"precision": "tf32x3", "kernels": [
        "matmul[tf32x3]", "auto[tf32x3]", "cublas_tf32", "tf32x3_torch"]}
    out = result.output
    assert "matmul[tf32x3] at 64×64×64: 250.0 % of cuBLAS SGEMM, 300.0 % of tf32x3_torch" in out
    assert "auto[tf32x3] at 64×64×64: 200.0 % of cuBLAS SGEMM, 240.0 % of tf32x3_torch" in out


def test_bench_at_ieee_keeps_the_plain_names(fake_bench):
    result = run("bench", "--shape", "64x64x64", "-k", "matmul", "-b", "none", "--quiet")
    assert result.exit_code == 0, result.output
    assert fake_bench == {"precision": "ieee", "kernels": ["matmul"]}
    assert "tf32x3_torch" not in result.output


def test_baseline_none_leaves_out_the_anchor(fake_bench):
    result = run("bench", "--shape", "64x64x64", "-k", "matmul", "-b", "none", "--precision",
                 "tf32x3", "--quiet")
    assert result.exit_code == 0, result.output
    assert fake_bench["kernels"] == ["matmul[tf32x3]"]
    assert "matmul[tf32x3] at 64×64×64: 250.0 % of cuBLAS SGEMM, tf32x3_torch not timed" \
        in result.output


def test_an_unknown_precision_is_one_sentence_before_the_gpu_is_looked_for(monkeypatch):
    def refuse(index=0):
        raise device.NoGPUError("No usable NVIDIA GPU (test)")

    monkeypatch.setattr(device, "gpu_info", refuse)
    one_line_error(run("bench", "--precision", "fp16"), "unknown precision", "'fp16'",
                   "ieee, fp32_emulated, tf32x3, tf32")


# -- the results file ----------------------------------------------------------------------
def test_the_run_and_every_record_carry_the_precision(tmp_path, monkeypatch):
    monkeypatch.setenv("SGEMMLAB_RESULTS_DIR", str(tmp_path))
    monkeypatch.setattr(device, "gpu_info", lambda index=0: GPU)
    monkeypatch.setattr(runner, "L2Flusher", lambda l2: types.SimpleNamespace(nbytes=l2))
    monkeypatch.setattr(runner, "tf32_is_on", lambda: False)
    monkeypatch.setattr(runner, "measure_shape", lambda M, N, K, *a, **kw: [
        {"kernel": k, "M": M, "N": N, "K": K, "correct": True} for k in ("cublas", "auto")])
    out, path = runner.run("bench", "t", [(64, 64, 64), (8, 8, 8)], [], QUICK,
                           precision="tf32x3")
    data = results.load(path)
    assert data["precision"] == "tf32x3"
    assert [r["precision"] for r in data["records"]] == ["tf32x3"] * 4


# -- the report: the anchor ratio, TF32 labelled ------------------------------------------
def precision_run() -> dict:
    """A tf32x3 run at two problems (the anchor timed at the first only) and, beside it,
    TF32 against cuBLAS TF32 and rung 20 against the anchor."""
    recs = []
    for (M, N, K), anchor_us in (((4096, 4096, 4096), 3000.0), ((1000, 1000, 1000), None)):
        cublas_us = 2700.0 if M == 4096 else 45.0
        kernel_us = {"matmul[tf32x3]": 1500.0 if M == 4096 else 30.0,
                     "auto[tf32x3]": 2000.0 if M == 4096 else 45.0}
        recs += [_cublas(M, N, K, cublas_us)]
        recs += [_timed(k, M, N, K, cublas_us, [cublas_us / us] * 3) for k, us in
                 kernel_us.items()]
        if anchor_us:
            recs.append(_timed("tf32x3_torch", M, N, K, cublas_us, [cublas_us / anchor_us] * 3,
                               fp32=False))
    M = N = K = 4096
    recs += [_timed("20_3xtf32_wgmma", M, N, K, 2700.0, [2700.0 / 1200.0] * 3),
             _timed("matmul[tf32]", M, N, K, 2700.0, [2700.0 / 500.0] * 3, fp32=False),
             _timed("cublas_tf32", M, N, K, 2700.0, [2700.0 / 400.0] * 3, fp32=False)]
    return {**bench_run(), "precision": "tf32x3", "records": recs}


def test_vs_anchor_is_the_anchors_time_over_the_kernels_in_the_same_run():
    rows = {(r["problem"], r["kernel"]): r for r in report.vs_anchor(precision_run()["records"])}
    big = "4096×4096×4096"
    m = rows[(big, "matmul[tf32x3]")]
    assert m["anchor"] == "tf32x3_torch" and m["vs_anchor"] == pytest.approx(2.0)
    assert m["vs_cublas"] == pytest.approx(2700.0 / 1500.0)  # the paired ratio, as recorded
    assert rows[(big, "auto[tf32x3]")]["vs_anchor"] == pytest.approx(1.5)
    assert rows[(big, "20_3xtf32_wgmma")]["vs_anchor"] == pytest.approx(2.5)  # its own
    assert rows[("1000×1000×1000", "matmul[tf32x3]")]["vs_anchor"] is None  # no anchor there
    tf32 = rows[(big, "matmul[tf32]")]
    assert tf32["anchor"] == "cublas_tf32" and tf32["vs_anchor"] == pytest.approx(0.8)
    assert "NOT FP32" in tf32["label"] and "NOT FP32" not in m["label"]
    # the baselines and FP32 kernels are what the ratios are against, not rows of their own
    assert not {k for _, k in rows} & {"cublas", "tf32x3_torch", "cublas_tf32"}


def test_an_ieee_run_has_no_anchor_rows():
    assert report.vs_anchor(bench_run()["records"]) == []


def test_the_report_shows_the_anchor_ratio_and_labels_tf32(tmp_path):
    path = write(tmp_path / "nvidia-h200" / "bench-tf32x3.json", precision_run())
    text, _ = report.build([path], tmp_path / "out")
    assert "## Tensor cores: against cuBLAS SGEMM and the anchor" in text
    assert "| 4096×4096×4096 | matmul[tf32x3] | 180.0 | tf32x3_torch | 200.0 |" in text
    assert "| 1000×1000×1000 | matmul[tf32x3] | 150.0 | tf32x3_torch | - |" in text
    assert "| 4096×4096×4096 | matmul[tf32] (TF32: NOT FP32) | 540.0 | cublas_tf32 | 80.0 |" \
        in text
    old = write(tmp_path / "old.json", bench_run())  # an FP32 run: no such section
    assert "against cuBLAS SGEMM and the anchor" not in report.build([old], tmp_path / "o")[0]


def test_the_readme_scoreboard_puts_the_anchor_ratio_under_the_table(tmp_path):
    path = tmp_path / "bench-tf32x3.json"
    path.write_text(json.dumps(precision_run()))
    text = readme.scoreboard([path])
    assert "- matmul[tf32x3] at 4096×4096×4096: 180.0 % of cuBLAS SGEMM, 200.0 % of " \
           "tf32x3_torch" in text
