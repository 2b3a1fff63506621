"""The harness on a real GPU: the correctness gate, the baselines' precision, the paired loop,
a whole bench run and the ceilings. Skipped cleanly where there is no GPU (conftest.py)."""

from __future__ import annotations

import json

import pytest

from sgemmlab import registry
from sgemmlab.bench.measure import Method

pytestmark = pytest.mark.gpu

TINY = Method(launches=3, rounds=3, warmup=1)


def test_cublas_fp32_passes_the_bound_and_tf32_does_not():
    from sgemmlab.bench.baselines import cublas_gemm, tf32_is_on
    from sgemmlab.bench.check import check_gemm

    fp32 = check_gemm(cublas_gemm, 512, 512, 4096)
    tf32 = check_gemm(lambda A, B, C, a, b: cublas_gemm(A, B, C, a, b, tf32=True),
                      512, 512, 4096)
    assert fp32.ok and fp32.error < fp32.bound / 4, fp32
    assert not tf32.ok and tf32.error > tf32.bound, tf32  # 10-bit mantissa: ~3e-4
    assert not tf32_is_on()  # the TF32 call switched the flag back off


def test_the_tf32_launch_leaves_torch_in_fp32():
    import torch

    from sgemmlab.bench.baselines import cublas_tf32, tf32_is_on

    A, B, C = (torch.rand(256, 256, device="cuda") for _ in range(3))
    cublas_tf32(A, B, C)()
    torch.cuda.synchronize()
    assert not tf32_is_on()


def test_a_wrong_candidate_is_reported_failed_and_never_timed():
    import torch

    from sgemmlab.bench.measure import L2Flusher
    from sgemmlab.bench.runner import Candidate, measure_shape
    from sgemmlab.runtime.device import gpu_info

    def half(A, B, C, alpha, beta):  # writes only the top half of C
        h = C.shape[0] // 2
        C[:h] = alpha * (A[:h] @ B) + (beta * C[:h] if beta else 0)

    def never(A, B, C):
        raise AssertionError("a candidate that failed its check was timed")

    recs = measure_shape(256, 256, 256, [Candidate("half", half, never)], TINY,
                         L2Flusher(gpu_info().l2_bytes))
    cublas, bad = recs
    assert bad["status"] == "failed" and not bad["correct"]
    assert "NaN" in bad["check_note"]
    assert "median_us" not in bad and "times_us" not in bad
    assert cublas["correct"] and cublas["status"] == "not timed"
    torch.cuda.synchronize()


def test_paired_loop_on_the_gpu_gives_sane_ratios():
    import torch

    from sgemmlab.bench.measure import L2Flusher, paired
    from sgemmlab.runtime.device import gpu_info

    A, B = torch.rand(1024, 1024, device="cuda"), torch.rand(1024, 1024, device="cuda")
    C1, C2 = torch.empty_like(A), torch.empty_like(A)
    p = paired(lambda: torch.matmul(A, B, out=C1), lambda: torch.matmul(A, B, out=C2),
               TINY, L2Flusher(gpu_info().l2_bytes))
    assert len(p.candidate_us) == len(p.baseline_us) == TINY.rounds
    assert all(len(r) == TINY.launches for r in p.candidate_us)
    assert 0.8 < p.summary()["vs_cublas"] < 1.25  # the same kernel against itself


def test_a_tiny_bench_writes_a_valid_results_file(tmp_path, monkeypatch):
    from sgemmlab.bench import report, results, runner
    from sgemmlab.bench.baselines import candidate

    monkeypatch.setenv("SGEMMLAB_RESULTS_DIR", str(tmp_path))
    rung = registry.rung(3)  # a small rung that exists in every checkout
    cands = [runner.rung_candidate(rung, rung.seed), candidate("tf32")]
    run, path = runner.run("bench", "test", [(256, 256, 256), (67, 45, 33)], cands, TINY)
    # results/<gpu>/<kind>/<name>-<stamp>.json (bench.results.place)
    assert path.parent.parent.parent == tmp_path and path.parent.name == "bench"
    assert path.is_file()
    data = results.load(path)
    assert data == json.loads(json.dumps(run))  # what was returned is what was written
    assert data["kind"] == "bench" and data["command"]
    assert data["ceilings"]["ffma_tflops"] > 0
    for rec in data["records"]:
        assert rec["status"] == "ok", rec
        for key in ("kernel", "M", "N", "K", "median_us", "tflops", "vs_cublas", "rounds",
                    "vs_cublas_min", "vs_cublas_max", "times_us", "correct", "error"):
            assert key in rec, (key, rec["kernel"])
        assert rec["vs_cublas_min"] <= rec["vs_cublas"] <= rec["vs_cublas_max"]
    tf32 = [r for r in data["records"] if r["kernel"] == "cublas_tf32"]
    assert tf32 and all(r["fp32"] is False for r in tf32)
    text, written = report.build([path], tmp_path / "report")
    assert "03_smem" in text and len(written) == 7


def test_bench_command_end_to_end(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from sgemmlab.cli import app

    monkeypatch.setenv("SGEMMLAB_RESULTS_DIR", str(tmp_path))
    result = CliRunner().invoke(app, ["bench", "--shape", "128,128,128", "--kernel", "3",
                                      "--baseline", "none", "--quiet"])
    assert result.exit_code == 0, result.output
    assert len(list(tmp_path.glob("*/bench/128x128x128-*.json"))) == 1


def test_bench_grouped_gives_every_kernel_the_same_baseline(tmp_path, monkeypatch):
    import json

    from typer.testing import CliRunner

    from sgemmlab.cli import app

    monkeypatch.setenv("SGEMMLAB_RESULTS_DIR", str(tmp_path))
    result = CliRunner().invoke(app, ["bench", "--shape", "200x136x72", "--kernel", "3",
                                      "--kernel", "10", "--baseline", "none", "--grouped",
                                      "--quiet"])
    assert result.exit_code == 0, result.output
    data = json.loads(next(tmp_path.glob("*/bench/200x136x72-*.json")).read_text())
    assert data["method"]["grouped"] is True
    by = {r["kernel"]: r for r in data["records"]}
    rung3, rung10 = by["03_smem"], by["10_warptiling"]
    assert rung3["correct"] and rung10["correct"]
    assert rung3["cublas_times_us"] == rung10["cublas_times_us"] == by["cublas"]["times_us"]
    assert len(by["cublas"]["times_us"]) == data["method"]["rounds"]


def test_triton_baseline_is_correct_on_ragged_shapes():
    pytest.importorskip("triton")
    from sgemmlab.bench.baselines import candidate
    from sgemmlab.bench.runner import check_candidate

    tri = candidate("triton")
    for shape in ((67, 45, 33), (129, 257, 100)):
        res = check_candidate(tri, *shape)
        assert res.ok, (shape, res)


def test_ceilings_are_plausible_and_become_the_default(tmp_path, monkeypatch):
    from sgemmlab.bench import ceilings, results
    from sgemmlab.runtime.device import gpu_info

    monkeypatch.setenv("SGEMMLAB_RESULTS_DIR", str(tmp_path))
    run, path = ceilings.run(launches=3)
    ffma, copy = run["records"]
    assert 5 < ffma["tflops"] < 200 and 0.3 < copy["tbps"] < 20
    if ffma["sass_ffma"] is not None:
        assert ffma["sass_ffma"] >= ffma["sass_ffma_loop_body"]
    got = results.ceilings_for(gpu_info().slug)
    assert got["ffma_tflops"] == ffma["tflops"] and got["source"] == str(path)
