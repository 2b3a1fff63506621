"""`runner.run` on a fake GPU: the results file it writes, the live board it feeds, and the
loud stop when cuBLAS FP32 is not FP32. (The real measurement: test_bench_gpu.py.)"""

from __future__ import annotations

import io
import json
import types
from pathlib import Path

import pytest
from rich.console import Console

from sgemmlab.bench import results, runner, tables
from sgemmlab.bench.measure import QUICK
from sgemmlab.runtime import device

GPU = device.GPUInfo(index=0, name="NVIDIA H200", compute_capability=(9, 0), sm_count=132,
                     l2_bytes=60 << 20, max_smem_per_block_optin=232448)


def fake_records(M, N, K, cublas_ok=True):
    base = {"M": M, "N": N, "K": K, "fp32": True, "error_bound": 6e-5, "check_note": ""}
    return [
        {**base, "kernel": "cublas", "correct": cublas_ok, "error": 3e-6 if cublas_ok
         else 3e-4, "status": "ok", "median_us": 100.0, "tflops": 1.0, "vs_cublas": 1.0,
         "vs_cublas_min": 1.0, "vs_cublas_max": 1.0, "rounds": 3, "times_us": [[100.0]]},
        {**base, "kernel": "10_warptiling", "correct": True, "error": 2e-6, "status": "ok",
         "median_us": 110.0, "tflops": 0.9, "vs_cublas": 0.91, "vs_cublas_min": 0.9,
         "vs_cublas_max": 0.92, "rounds": 3, "times_us": [[110.0]],
         "cublas_times_us": [[100.0]]},
    ]


@pytest.fixture
def fake_gpu(tmp_path, monkeypatch):
    """runner.run with everything that needs a GPU replaced; returns the shapes measured."""
    monkeypatch.setenv("SGEMMLAB_RESULTS_DIR", str(tmp_path))
    monkeypatch.setattr(device, "gpu_info", lambda index=0: GPU)
    monkeypatch.setattr(runner, "L2Flusher", lambda l2: types.SimpleNamespace(nbytes=4 * l2))
    monkeypatch.setattr(runner, "tf32_is_on", lambda: False)
    seen = []

    def measure_shape(M, N, K, candidates, method, flush, peak, progress):
        seen.append((M, N, K))
        return fake_records(M, N, K, cublas_ok=(M != 666))

    monkeypatch.setattr(runner, "measure_shape", measure_shape)
    return seen


def test_run_writes_every_shape_to_one_results_file(fake_gpu, tmp_path):
    _, path = runner.run("bench", "t", [(64, 64, 64), (128, 128, 128)], [], QUICK,
                         notes=["triton baseline skipped: test"])
    assert fake_gpu == [(64, 64, 64), (128, 128, 128)]
    assert path.parent == tmp_path / "nvidia-h200" and path.name.startswith("bench-t-")
    data = results.load(path)
    assert len(data["records"]) == 4 and data["notes"] == ["triton baseline skipped: test"]
    assert data["method"]["l2_flush_bytes"] == 4 * GPU.l2_bytes
    assert data["method"]["rounds"] == QUICK.rounds
    assert data["ceilings"] == results.H200_CEILINGS  # none measured in this folder yet


def test_a_cublas_that_fails_fp32_stops_the_run_loudly_and_keeps_the_evidence(fake_gpu):
    with pytest.raises(runner.BaselineError) as err:
        runner.run("bench", "t", [(64, 64, 64), (666, 64, 64), (128, 128, 128)], [], QUICK)
    msg = str(err.value)
    assert "cuBLAS FP32 fails the FP32 bound at 666×64×64" in msg
    assert fake_gpu == [(64, 64, 64), (666, 64, 64)]  # nothing measured after it
    path = msg.rsplit("results so far: ", 1)[1].rstrip(")")
    data = json.loads(Path(path).read_text())
    assert [r["M"] for r in data["records"]] == [64, 64, 666, 666]


def test_tf32_left_on_stops_the_run(fake_gpu, monkeypatch):
    monkeypatch.setattr(runner, "tf32_is_on", lambda: True)
    with pytest.raises(runner.BaselineError, match="TF32 flag was left on"):
        runner.run("bench", "t", [(64, 64, 64)], [], QUICK)


def test_the_live_board_shows_the_records_so_far(fake_gpu):
    out = io.StringIO()
    progress = runner.new_progress()
    with tables.LiveBoard("H200 test", progress, Console(file=out, width=200)) as board:
        progress.add_task("10_warptiling 64x64x64", total=1, completed=1)
        runner.run("bench", "t", [(64, 64, 64)], [], QUICK, board=board)
    assert len(board.records) == 2
    assert all(not t.visible for t in progress.tasks)  # finished work leaves the display
    text = out.getvalue()
    assert "H200 test" in text and "10_warptiling" in text and "91.0" in text
