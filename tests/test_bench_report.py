"""`sgemmlab report` from results files fabricated here, shaped like a real bench run on the
H200 (the fixture lives in a tmp dir, never under results/)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sgemmlab.bench import report, results, tables
from sgemmlab.bench.bill import minimal_intensity
from sgemmlab.cli import app

WARPTILING_CFG = {"BM": 128, "BN": 128, "BK": 16, "WM": 64, "WN": 64, "WNITER": 4, "TM": 8,
                  "TN": 4, "PAD": 4}


def _timed(kernel, M, N, K, cublas_us, ratios, *, config=None, fp32=True, correct=True,
           error=2e-6, **info):
    """A record as runner.measure_shape writes it: three rounds of three launches."""
    cand = [[cublas_us / r * f for f in (0.99, 1.0, 1.03)] for r in ratios]
    base = [[cublas_us * f for f in (0.995, 1.0, 1.02)] for _ in ratios]
    us = sorted(c[1] for c in cand)[1]
    mid = sorted(ratios)[1]
    return {"kernel": kernel, "config": config, "M": M, "N": N, "K": K, "fp32": fp32,
            "correct": correct, "error": error, "error_bound": 16 * 2**-24 * math.sqrt(K),
            "check_note": "", "status": "ok", "median_us": us,
            "tflops": 2 * M * N * K / us / 1e6, "vs_cublas": mid, "vs_cublas_min": min(ratios),
            "vs_cublas_max": max(ratios), "rounds": len(ratios), "round_ratios": ratios,
            "cublas_median_us": cublas_us, "times_us": cand, "cublas_times_us": base,
            "pct_of_peak": 100 * 2 * M * N * K / us / 1e6 / 63.6, **info}


def _cublas(M, N, K, us, *, correct=True, error=3e-6, **problem):
    rec = _timed("cublas", M, N, K, us, [1.0, 1.0, 1.0], correct=correct, error=error,
                 **problem)
    rec.pop("cublas_times_us")
    return rec


def bench_run(cublas_ok: bool = True) -> dict:
    """Two shapes; rung 10, Triton, TF32, and rung 5 failing its check at the ragged one."""
    recs = []
    warp = {4096: [0.90, 0.88, 0.92], 1000: [1.05, 1.00, 1.10]}  # medians 0.90 and 1.05
    for (M, N, K), us in (((4096, 4096, 4096), 2687.0), ((1000, 1000, 1000), 45.0)):
        recs += [
            _cublas(M, N, K, us, correct=cublas_ok, error=3e-6 if cublas_ok else 3e-4),
            _timed("10_warptiling", M, N, K, us, warp[M], config=WARPTILING_CFG,
                   registers=128, spill_bytes=0, smem_bytes=25600, threads=128),
            _timed("triton", M, N, K, us, [0.86, 0.88, 0.87], note="ieee"),
            _timed("cublas_tf32", M, N, K, us, [7.8, 7.9, 8.0], fp32=False, correct=False,
                   error=2.9e-4),
        ]
    recs.append({"kernel": "05_blocktile2d", "config": {"BM": 128, "BN": 128, "BK": 8,
                 "TM": 8, "TN": 8}, "M": 1000, "N": 1000, "K": 1000, "fp32": True,
                 "correct": False, "error": math.inf, "error_bound": 5e-5,
                 "check_note": "512 of 1000000 outputs are NaN/Inf", "status": "failed",
                 "registers": 90})
    return {
        "schema": results.SCHEMA, "kind": "bench",
        "command": "sgemmlab bench --shape 4096,4096,4096 --shape 1000,1000,1000 -k 10 -k 5",
        "created": "2026-11-29T12:00:00+00:00",
        "environment": {"gpu": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132,
                        "l2_bytes": 62914560, "driver": "580.159.04",
                        "sm_clock_mhz_before": 1980, "sm_clock_mhz_after": 1980,
                        "versions": {"torch": "2.11.0+cu130", "triton": "3.6.0"},
                        "git_commit": "0123456789abcdef", "git_dirty": False,
                        "source_digest": "feedfacecafebeef", "host": "h200"},
        "method": {"launches_per_round": 20, "rounds": 3, "warmup": 3,
                   "l2_flush_bytes": 268435456},
        "ceilings": dict(results.H200_CEILINGS), "notes": [], "records": recs,
    }


def ceilings_run(ffma: float, copy: float, created: str) -> dict:
    run = {**bench_run(), "kind": "ceilings", "created": created, "command": "sgemmlab ceilings"}
    run["ceilings"] = {"ffma_tflops": ffma, "copy_tbps": copy, "source": "test"}
    run["records"] = [{"kernel": "ffma_peak", "status": "ok", "tflops": ffma},
                      {"kernel": "d2d_copy", "status": "ok", "tbps": copy}]
    return run


def write(path: Path, run: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(run))
    return path


@pytest.fixture
def bench_file(tmp_path) -> Path:
    return write(results.place("nvidia-h200", "bench-test-20261129T120000Z.json", tmp_path),
                 bench_run())


def test_report_writes_markdown_and_three_charts_in_png_and_svg(bench_file, tmp_path):
    text, written = report.build([bench_file], tmp_path / "out")
    assert written[0] == tmp_path / "out" / "report.md"
    assert written[0].read_text() == text
    names = sorted(p.name for p in written[1:])
    assert names == sorted(f"{c}.{e}" for c in report.CHARTS for e in ("png", "svg"))
    for p in written[1:]:
        head = p.read_bytes()[:200]
        assert head.startswith(b"\x89PNG") if p.suffix == ".png" else b"<svg" in head
    for c in report.CHARTS:
        assert f"]({c}.svg)" in text  # the Markdown shows every chart


def test_the_source_line_gives_the_commit_and_a_correction_of_it(tmp_path):
    run = bench_run()
    run["environment"] |= {"git_dirty": True}
    dirty = write(tmp_path / "a" / "bench-a-20261129T120000Z.json", run)
    assert "commit 0123456789 (dirty)" in report.build([dirty], tmp_path / "o1")[0]
    run["corrected"] = {"git_commit": "fedcba9876543210", "git_dirty": False, "why": "x"}
    fixed = write(tmp_path / "b" / "bench-b-20261129T120000Z.json", run)
    text = report.build([fixed], tmp_path / "o2")[0]
    assert "commit fedcba9876 (corrected:" in text and "(dirty)" not in text


def test_report_default_folder_is_beside_the_first_file(bench_file):
    _, written = report.build([bench_file])
    assert written[0].parent == bench_file.parent / f"{bench_file.stem}-report"


def test_report_tables(bench_file, tmp_path):
    text, _ = report.build([bench_file], tmp_path / "out")
    assert text.startswith("# sgemmlab report: NVIDIA H200")
    assert "sgemmlab bench --shape 4096,4096,4096" in text  # where the numbers came from
    # the per-kernel summary: geometric mean over the two shapes of each median ratio
    row = next(line for line in text.splitlines() if line.startswith("| 10_warptiling | 2 |"))
    assert row == "| 10_warptiling | 2 | 97.2 | 90.0 | 105.0 |"  # sqrt(0.90 * 1.05); lo; hi
    assert "| cublas_tf32 (TF32: NOT FP32) | 2 |" in text
    assert "05_blocktile2d (FAILED check, not timed)" in text
    # per shape, with the rounds' spread and the check verdict
    assert "### 4096×4096×4096" in text and "### 1000×1000×1000" in text
    assert "88.0–92.0" in text
    assert "above FP32 bound" in text  # TF32's check, reported, not gating
    assert "passed the FP32 bound at all 2 shapes" in text  # cuBLAS's own check


def test_report_says_loudly_when_cublas_was_not_fp32(tmp_path):
    path = write(tmp_path / "bad.json", bench_run(cublas_ok=False))
    text, _ = report.build([path], tmp_path / "out")
    assert "cuBLAS FP32 FAILED the FP32 bound" in text
    assert "not valid" in text


def test_summary_skips_failed_and_untimed_records():
    summary = {s["kernel"]: s for s in report.summarize(bench_run()["records"])}
    assert "05_blocktile2d" not in summary
    w = summary["10_warptiling"]
    assert (w["shapes"], w["lo"], w["hi"]) == (2, 0.90, 1.05)
    assert w["geomean"] == pytest.approx((0.90 * 1.05) ** 0.5)
    assert summary["cublas_tf32"]["fp32"] is False


def test_roofline_intensity_from_the_bill_or_the_shape():
    recs = {r["kernel"]: r for r in bench_run()["records"] if r["M"] == 4096}
    assert report.intensity(recs["10_warptiling"]) == pytest.approx(32.0)
    assert report.intensity(recs["triton"]) == pytest.approx(minimal_intensity(4096, 4096,
                                                                               4096))
    assert report.intensity(recs["cublas"]) == pytest.approx(4096 / 6)


def test_newest_measured_ceilings_beside_the_results_win(bench_file, tmp_path):
    write(results.place("nvidia-h200", "ceilings-20261128T000000Z.json", tmp_path),
          ceilings_run(60.0, 4.0, "2026-11-28T00:00:00+00:00"))
    write(results.place("nvidia-h200", "ceilings-20261129T000000Z.json", tmp_path),
          ceilings_run(61.5, 4.1, "2026-11-29T00:00:00+00:00"))
    text, _ = report.build([bench_file], tmp_path / "out")
    assert "FFMA peak 61.5 TFLOP/s, copy bandwidth 4.10 TB/s" in text


def test_a_ceilings_file_on_the_command_line_wins(bench_file, tmp_path):
    write(results.place("nvidia-h200", "ceilings-20261129T000000Z.json", tmp_path),
          ceilings_run(61.5, 4.1, "2026-11-29T00:00:00+00:00"))
    given = write(tmp_path / "elsewhere" / "c.json",
                  ceilings_run(59.0, 3.9, "2026-11-01T00:00:00+00:00"))
    text, _ = report.build([bench_file, given], tmp_path / "out")
    assert "FFMA peak 59.0 TFLOP/s" in text


def test_without_measured_ceilings_the_run_recorded_ones_are_used(bench_file, tmp_path):
    text, _ = report.build([bench_file], tmp_path / "out")
    assert "FFMA peak 63.6 TFLOP/s, copy bandwidth 4.22 TB/s (from H200-baseline.md)" in text


def test_markdown_table_has_one_cell_per_header():
    md = tables.markdown(bench_run()["records"])
    lines = md.strip().splitlines()
    widths = {line.count("|") for line in lines}
    assert len(widths) == 1 and len(lines) == 2 + len(bench_run()["records"])


def test_report_command(bench_file, tmp_path):
    result = CliRunner().invoke(app, ["report", str(bench_file), "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    assert "# sgemmlab report: NVIDIA H200" in result.output
    assert (tmp_path / "o" / "roofline.svg").is_file()


@pytest.mark.parametrize("content", ["{not json", json.dumps({"schema": "other/1"})])
def test_report_refuses_a_file_that_is_not_results_in_one_line(tmp_path, content):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    result = CliRunner().invoke(app, ["report", str(bad)])
    assert result.exit_code != 0
    lines = result.output.strip().splitlines()  # one sentence, folded to 100 columns
    assert lines[0].startswith(str(bad)) and all(line.startswith("  ") for line in lines[1:])
    assert max(map(len, lines)) <= 100 and "Traceback" not in result.output


# -- batches, layouts, suites and the random suite ----------------------------------------
def _auto(M, N, K, ratio, *, rung="14_streamk", split="Stream-K, atomic fix-up",
          source="heuristic", **problem):
    rec = _timed("auto", M, N, K, 100.0, [ratio * 0.99, ratio, ratio * 1.01],
                 config={"BM": 128, "SPLIT": 0}, rung=rung, **problem)
    rec["dispatch"] = {"rung": rung, "decomposition": split, "source": source}
    return rec


RANDOM = [(100 + i, 200 + i, 300 + i) for i in range(15)]
RATIOS = [1.02, 0.95, 0.85, 1.10, 0.70, 0.99, 0.91, 0.89, 1.00, 0.97, 0.60, 1.05, 0.93,
          0.98, 0.96]


def random_run() -> dict:
    """A bench run over a random suite of 15 shapes (auto and rung 13), a batched problem
    and 4096³ in two layouts (rung 13 timed in both, rung 5 skipped at TN)."""
    run = bench_run()
    recs = [r for r in run["records"] if r["M"] == 4096]
    for (M, N, K), ratio in zip(RANDOM, RATIOS):
        recs += [_cublas(M, N, K, 100.0), _auto(M, N, K, ratio),
                 _timed("13_hoisted", M, N, K, 100.0, [0.9, 0.9, 0.9])]
    recs[-1] = {**recs[-1], "status": "failed", "correct": False}  # one check failed
    recs += [_cublas(4096, 4096, 4096, 2700.0, layout="TN"),
             _timed("10_warptiling", 4096, 4096, 4096, 2700.0, [0.5, 0.5, 0.5], layout="TN"),
             {"kernel": "05_blocktile2d", "M": 4096, "N": 4096, "K": 4096, "layout": "TN",
              "fp32": True, "status": "skipped",
              "skip_note": "05_blocktile2d reads row-major operands only: TN needs a rung "
                           "with layouts"},
             _cublas(128, 128, 128, 10.0, batch=32),
             _timed("10_warptiling", 128, 128, 128, 10.0, [2.0, 2.0, 2.0], batch=32)]
    run["records"] = recs
    run["suites"] = {"square": ["4096x4096x4096"],
                     "layouts": ["4096x4096x4096:TN"],
                     "batched": ["32@128x128x128"],
                     "random-15-s1": [f"{M}x{N}x{K}" for M, N, K in RANDOM]}
    return run


def test_suite_summary_is_a_geometric_mean_per_suite_and_kernel():
    run = random_run()
    rows = {(s["suite"], s["kernel"]): s for s in report.suite_summary(run["records"],
                                                                     run["suites"])}
    assert rows[("square", "10_warptiling")]["geomean"] == pytest.approx(0.90)
    assert rows[("layouts", "10_warptiling")]["geomean"] == pytest.approx(0.5)
    assert rows[("batched", "10_warptiling")]["geomean"] == pytest.approx(2.0)
    # the square suite's 4096³ is not the layouts suite's: they never merge
    assert rows[("square", "10_warptiling")]["shapes"] == 1
    auto = rows[("random-15-s1", "auto")]
    assert auto["shapes"] == 15
    assert auto["geomean"] == pytest.approx(math.exp(sum(map(math.log, RATIOS)) / 15))
    assert rows[("random-15-s1", "13_hoisted")]["shapes"] == 14  # one failed its check
    assert ("layouts", "05_blocktile2d") not in rows  # skipped: nothing to average


def test_random_summary_median_count_below_and_the_worst_ten():
    run = random_run()
    got = {s["kernel"]: s for s in report.random_summary(run["records"],
                                                         run["suites"]["random-15-s1"])}
    assert set(got) == {"auto", "13_hoisted"}  # cuBLAS is the reference, not a kernel here
    auto = got["auto"]
    assert auto["problems"] == 15 and auto["median"] == pytest.approx(0.96)
    assert auto["below"] == 4  # 0.85, 0.70, 0.89, 0.60
    worst = auto["worst"]
    assert len(worst) == 10
    assert [w["vs_cublas"] for w in worst] == pytest.approx(sorted(RATIOS)[:10])
    first = worst[0]
    assert first["problem"] == "110×210×310" and first["rung"] == "14_streamk"
    assert first["decomposition"] == "Stream-K, atomic fix-up"
    assert first["source"] == "heuristic"
    assert (got["13_hoisted"]["problems"], got["13_hoisted"]["failed"]) == (14, 1)
    assert got["13_hoisted"]["below"] == 0  # 0.9 is not below 0.9


def test_random_summary_can_fail():
    """A summary that counted wrong would be caught: move one ratio and the numbers move."""
    run = random_run()
    for r in run["records"]:
        if r["kernel"] == "auto" and r["M"] == 100:
            r["vs_cublas"] = 0.5
    (auto, _) = report.random_summary(run["records"], run["suites"]["random-15-s1"])
    assert auto["below"] == 5 and auto["worst"][0]["problem"] == "100×200×300"
    assert auto["median"] == pytest.approx(0.95)


def test_random_and_suite_lines_for_the_terminal():
    run = random_run()
    lines = report.random_lines("random-15-s1", report.random_summary(
        run["records"], run["suites"]["random-15-s1"]))
    assert lines[0] == ("random-15-s1, auto: median 96.0 % of cuBLAS over 15 shapes, 4 below "
                        "90 %; the worst 10:")
    assert "110×210×310" in lines[1] and "60.0 %" in lines[1]
    assert "14_streamk" in lines[1] and "Stream-K, atomic fix-up (heuristic)" in lines[1]
    assert any(line.startswith("random-15-s1, 13_hoisted:") and "1 FAILED" in line
               for line in lines)
    suite = report.suite_lines(report.suite_summary(run["records"], run["suites"]))
    assert "layouts: 10_warptiling 50.0 %" in suite
    assert not any("cublas" in line for line in suite)


def test_report_keeps_layouts_and_batches_apart_and_summarizes_the_suites(tmp_path):
    path = write(results.place("nvidia-h200", "bench-random-20261229T120000Z.json", tmp_path),
                 random_run())
    text, _ = report.build([path], tmp_path / "out")
    assert "### 4096×4096×4096\n" in text and "### 4096×4096×4096:TN\n" in text
    assert "### 32@128×128×128\n" in text
    assert "05_blocktile2d (skipped: cannot compute it)" in text
    assert "- `05_blocktile2d` skipped: 05_blocktile2d reads row-major operands only" in text
    assert "## % of cuBLAS FP32 per suite" in text
    assert "| layouts | 10_warptiling | 1 | 50.0 | 50.0 | 50.0 |" in text
    assert "## Random shapes: random-15-s1" in text
    assert "random-15-s1, auto: median 96.0 % of cuBLAS over 15 shapes, 4 below 90 %." in text
    assert "| 110×210×310 | 60.0 | 14_streamk BM=128,SPLIT=0, Stream-K" in text


def test_an_old_results_file_has_no_suites_and_reads_as_before(bench_file, tmp_path):
    text, _ = report.build([bench_file], tmp_path / "out")
    assert "per suite" not in text and "Random shapes" not in text


def test_the_scoreboard_prints_the_problem():
    recs = random_run()["records"]
    body = tables.rows(recs)
    shapes = {row[1] for row in body}
    assert {"4096×4096×4096", "4096×4096×4096:TN", "32@128×128×128"} <= shapes


def test_floors_are_the_bytes_and_the_flops_of_the_whole_problem():
    ceil = {"copy_tbps": 4.0, "ffma_tflops": 50.0}
    rec = {"M": 1, "N": 4096, "K": 4096, "kernel": "auto", "median_us": 20.0}
    b, f = report.floors_us(rec, ceil)
    assert b == pytest.approx(4 * (4096 + 4096 * 4096 + 4096) / 4e12 * 1e6)
    assert f == pytest.approx(2 * 4096 * 4096 / 50e12 * 1e6)
    b8, f8 = report.floors_us({**rec, "batch": 8}, ceil)
    assert (b8, f8) == pytest.approx((8 * b, 8 * f))
    row = report.floor_table([rec], ceil).splitlines()[2]
    assert row.startswith("| 1×4096×4096 | auto | 20.0 |")
    assert f"| {100 * b / 20.0:.1f} |" in row  # % of the bytes floor
    # a compute-bound problem: the roofline is the FLOP floor
    big = {"M": 4096, "N": 4096, "K": 4096, "kernel": "auto", "median_us": 3000.0}
    b, f = report.floors_us(big, ceil)
    assert f > b and report.floor_table([big], ceil).splitlines()[2].endswith(
        f"| {100 * f / 3000.0:.1f} |")


def test_the_report_puts_the_memory_bound_suites_against_their_floors(tmp_path):
    recs = [{"kernel": k, "M": 1, "N": 4096, "K": 4096, "status": "ok", "median_us": us,
             "tflops": 2 * 4096 * 4096 / us / 1e6, "vs_cublas": 30.0 / us,
             "vs_cublas_min": 30.0 / us, "vs_cublas_max": 30.0 / us, "correct": True,
             "error": 1e-7, "error_bound": 1e-6, "fp32": True}
            for k, us in (("cublas", 30.0), ("auto", 20.0))]
    run = {"schema": results.SCHEMA, "kind": "bench", "command": "sgemmlab bench",
           "created": "2026-12-01T00:00:00+00:00", "environment": {"gpu": "NVIDIA H200"},
           "method": {}, "ceilings": {"copy_tbps": 4.23, "ffma_tflops": 66.2}, "notes": [],
           "records": recs, "suites": {"vector": ["1x4096x4096"]}}
    path = tmp_path / "bench-vector.json"
    path.write_text(json.dumps(run))
    text, _ = report.build([path], tmp_path / "out")
    assert "## The memory-bound suites against their floors" in text
    assert "| 1×4096×4096 | auto | 20.0 | 15.9 |" in text
