"""Mistakes on the `bench` and `ceilings` command lines end in one plain sentence and a
non-zero exit, never a traceback; arguments are checked before the GPU is looked for."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from conftest import one_message  # noqa: E402
from sgemmlab.bench.problems import Problem
from sgemmlab.cli import app
from sgemmlab.runtime import device


def run(*args):
    return CliRunner().invoke(app, list(args))


def one_line_error(result, *words):
    assert result.exit_code not in (0, None), result.output
    assert isinstance(result.exception, SystemExit), result.exception  # not a crash
    text = one_message(result.output)
    for w in words:
        assert w in text


@pytest.fixture
def no_gpu(monkeypatch):
    """Behave as on a machine without a GPU, even where there is one."""
    def refuse(index=0):
        raise device.NoGPUError("No usable NVIDIA GPU was found (test); sgemmlab needs one "
                                "to run kernels.")

    monkeypatch.setattr(device, "gpu_info", refuse)


def test_unknown_kernel():
    one_line_error(run("bench", "--kernel", "99"), "unknown kernel", "99", "sgemmlab info")


@pytest.mark.parametrize("shape", ["4096,4096", "4096,4096,0", "big", "32x128x128x128",
                                   "0@64x64x64", "64x64x64:XT", "2@3@4x4x4"])
def test_malformed_shape(shape):
    one_line_error(run("bench", "--shape", shape), "--shape", shape, "M,N,K", "BATCH@",
                   ":LAYOUT")


def test_seed_without_random(no_gpu):
    one_line_error(run("bench", "--seed", "3"), "--seed", "--random")


def test_random_needs_a_positive_count():
    result = run("bench", "--random", "0")
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_the_suite_help_names_every_suite():
    from sgemmlab.bench.suites import SUITES

    out = " ".join(run("bench", "--help").output.split())
    for name in SUITES:
        assert name in out
    assert "BATCH@" in out and "--random" in out and "--seed" in out


def test_the_tuner_refuses_a_batched_or_transposed_suite():
    one_line_error(run("tune", "--suite", "batched"), "32@128x128x128", "--layout")


# -- a whole bench command on a fake GPU: what it asks the runner for, what it prints ------
GPU = device.GPUInfo(index=0, name="NVIDIA H200", compute_capability=(9, 0), sm_count=132,
                     l2_bytes=60 << 20, max_smem_per_block_optin=232448)


@pytest.fixture
def fake_bench(monkeypatch, tmp_path):
    """`bench` with the GPU and the runner replaced: auto's ratio at M x N x K is made up
    from the shape, and one problem in ten is skipped."""
    from sgemmlab.bench import runner, suites
    from sgemmlab.cli import measure

    monkeypatch.setattr(device, "gpu_info", lambda index=0: GPU)
    monkeypatch.setattr(measure, "require_torch", lambda: None)  # CI has no torch
    monkeypatch.setattr(suites, "dispatch_grid", lambda gpu: {Problem(64, 64, 64)})
    asked = {}

    def fake_run(kind, tag, shapes, candidates, method, notes=(), board=None, *, suites=None,
                 precision="ieee"):
        problems = [Problem.of(s) for s in shapes]
        asked.update(kind=kind, tag=tag, problems=problems, suites=suites, notes=list(notes),
                     kernels=[c.kernel for c in candidates], precision=precision)
        recs = []
        for i, p in enumerate(problems):
            base = {**p.fields(), "fp32": True}
            recs.append({**base, "kernel": "cublas", "status": "ok", "vs_cublas": 1.0})
            if i % 10 == 9:
                recs.append({**base, "kernel": "auto", "status": "skipped",
                             "skip_note": "no rung serves this (test)"})
            else:
                recs.append({**base, "kernel": "auto", "status": "ok",
                             "vs_cublas": 0.5 + (p.M % 7) / 10, "rung": "14_streamk",
                             "config": {"SPLIT": 0},
                             "dispatch": {"decomposition": "Stream-K", "source": "heuristic"}})
        return {"records": recs}, tmp_path / "bench.json"

    monkeypatch.setattr(runner, "run", fake_run)
    return asked


def test_bench_random_draws_off_the_grid_tags_the_run_and_summarizes_it(fake_bench):
    from sgemmlab.bench import suites

    result = run("bench", "--random", "20", "--seed", "2026", "-k", "auto", "-b", "none",
                 "--shape", "8@64x64x64:TN", "--quiet")
    assert result.exit_code == 0, result.output
    drawn = suites.random_shapes(20, 2026, exclude={(64, 64, 64)})
    assert fake_bench["tag"] == "random-20-s2026-8@64x64x64-TN"
    assert fake_bench["problems"] == [*drawn, Problem(64, 64, 64, 8, "TN")]
    assert fake_bench["suites"] == {"random-20-s2026": drawn}  # no default suite beside it
    assert fake_bench["kernels"] == ["auto"]
    assert any("random-20-s2026" in n and "seed 2026" in n for n in fake_bench["notes"])
    out = result.output
    assert "random-20-s2026, auto: median" in out and "over 18 shapes" in out
    assert "2 skipped; the worst 10:" in out
    assert "% of cuBLAS FP32 per suite (geometric mean):" in out
    assert "skipped auto at 2 problems: no rung serves this (test)" in out


def test_bench_random_mix_draws_every_kind_of_problem(fake_bench):
    from sgemmlab.bench import suites

    result = run("bench", "--random", "12", "--seed", "5", "--mix", "-k", "auto", "-b",
                 "none", "--quiet")
    assert result.exit_code == 0, result.output
    drawn = suites.random_mix(12, 5, exclude={(64, 64, 64)})
    assert fake_bench["problems"] == drawn and fake_bench["tag"] == "random-mix-12-s5"
    assert any("batches of 2-64" in n for n in fake_bench["notes"])
    assert "random-mix-12-s5, auto: median" in result.output


def test_mix_without_random(no_gpu):
    one_line_error(run("bench", "--mix"), "--mix", "--random")


def test_bench_suites_and_problems(fake_bench):
    result = run("bench", "-s", "batched", "-s", "layouts", "--shape", "7,8,9", "-k", "auto",
                 "-b", "none", "--quiet")
    assert result.exit_code == 0, result.output
    from sgemmlab.bench import suites

    assert fake_bench["tag"] == "batched-layouts-7x8x9"
    assert fake_bench["problems"] == [*suites.SUITES["batched"], *suites.SUITES["layouts"],
                                      Problem(7, 8, 9)]
    assert list(fake_bench["suites"]) == ["batched", "layouts"]
    assert "Random" not in result.output and "random-" not in result.output


def test_bench_with_nothing_named_measures_the_default_suite(fake_bench):
    result = run("bench", "-k", "auto", "-b", "none", "--quiet")
    assert result.exit_code == 0, result.output
    assert fake_bench["tag"] == "square" and list(fake_bench["suites"]) == ["square"]


def test_unknown_suite():
    one_line_error(run("bench", "--suite", "huge"), "unknown suite", "huge", "ragged")


@pytest.mark.parametrize("args, words", [
    (["--baseline", "cutlass"], ["unknown baseline", "cutlass"]),
    (["--baseline", "none", "--baseline", "tf32"], ["none", "combined"]),
])
def test_bad_baseline(args, words):
    one_line_error(run("bench", *args), *words)


def test_argument_errors_come_before_the_gpu_check(no_gpu):
    one_line_error(run("bench", "--kernel", "99", "--suite", "small"), "unknown kernel")


@pytest.mark.parametrize("command", [["bench"], ["bench", "--suite", "small", "-k", "all"],
                                     ["ceilings"]])
def test_no_gpu(no_gpu, command):
    one_line_error(run(*command), "No usable NVIDIA GPU")


def test_report_of_a_missing_file(tmp_path):
    one_line_error(run("report", str(tmp_path / "nope.json")), "nope.json")


def test_the_three_commands_are_registered():
    out = run("--help").output
    for name in ("bench", "ceilings", "report"):
        assert name in out
