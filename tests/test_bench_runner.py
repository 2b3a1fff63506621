"""`runner.run` on a fake GPU: the results file it writes, the live board it feeds, and the
loud stop when cuBLAS FP32 is not FP32; and the harness's view of torch operands (layout,
batch, the launches it binds) on CPU tensors. (The real measurement: test_bench_gpu.py and
test_bench_problems_gpu.py.)"""

from __future__ import annotations

import io
import json
import types
from pathlib import Path

import pytest
from rich.console import Console

from sgemmlab.bench import results, runner, tables
from sgemmlab.bench.candidates import Candidate
from sgemmlab.bench.measure import QUICK
from sgemmlab.bench.problems import Problem
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

    def measure_shape(M, N, K, candidates, method, flush, peak, progress, *, layout="NN",
                      batch=1, pad=0, on_record=None):
        seen.append((M, N, K) if (batch, layout, pad) == (1, "NN", 0) else Problem(
            M, N, K, batch, layout, pad))
        return fake_records(M, N, K, cublas_ok=(M != 666))

    monkeypatch.setattr(runner, "measure_shape", measure_shape)
    return seen


def test_run_writes_every_shape_to_one_results_file(fake_gpu, tmp_path):
    _, path = runner.run("bench", "t", [(64, 64, 64), (128, 128, 128)], [], QUICK,
                         notes=["triton baseline skipped: test"])
    assert fake_gpu == [(64, 64, 64), (128, 128, 128)]
    assert path.parent == tmp_path / "nvidia-h200" / "bench" and path.name.startswith("t-")
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


def test_run_measures_each_problem_in_its_batch_and_layout_and_names_the_suites(fake_gpu):
    todo = [Problem(64, 64, 64), Problem(64, 64, 64, layout="TN"), Problem(32, 16, 8, 4),
            (128, 128, 128)]
    groups = {"mine": todo[:3], "random-2-s1": [Problem(128, 128, 128)]}
    _, path = runner.run("bench", "t", todo, [], QUICK, suites=groups)
    assert fake_gpu == [(64, 64, 64), Problem(64, 64, 64, layout="TN"), Problem(32, 16, 8, 4),
                        (128, 128, 128)]
    assert results.load(path)["suites"] == {
        "mine": ["64x64x64", "64x64x64:TN", "4@32x16x8"], "random-2-s1": ["128x128x128"]}


def test_auto_vs_best_keeps_layouts_and_batches_apart():
    def rec(kernel, vs, **more):
        return {"kernel": kernel, "M": 64, "N": 64, "K": 64, "status": "ok",
                "vs_cublas": vs, **more}

    records = [rec("13_hoisted", 1.0), rec("auto", 0.5, rung="13_hoisted"),
               rec("13_hoisted", 0.8, layout="TN"), rec("auto", 0.8, rung="13_hoisted",
                                                        layout="TN"),
               rec("14_streamk", 2.0, batch=4), rec("auto", 1.0, rung="14_streamk", batch=4)]
    rows = {row["problem"]: row for row in runner.auto_vs_best(records)}
    assert sorted(rows) == ["4@64×64×64", "64×64×64", "64×64×64:TN"]
    assert rows["64×64×64"]["ratio"] == 0.5 and rows["64×64×64:TN"]["ratio"] == 1.0
    assert rows["4@64×64×64"]["ratio"] == 0.5 and rows["4@64×64×64"]["batch"] == 4


# -- torch operands as the harness sees them (CPU tensors) ----------------------------------
@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def test_the_layout_of_an_operand_is_read_from_its_strides(torch):
    from sgemmlab.bench.check import uniform_matrices

    for rows, cols in ((5, 3), (1, 7), (7, 1), (1, 1)):
        for batch in (1, 3):
            row = uniform_matrices(rows, cols, batch=batch, device="cpu")
            col = uniform_matrices(rows, cols, col_major=True, batch=batch, device="cpu")
            assert tuple(row.shape[-2:]) == tuple(col.shape[-2:]) == (rows, cols)
            assert runner._matrix(row)[0] is False
            # a 1x1 matrix is both: read as row-major, which every rung can read
            assert runner._matrix(col)[0] is (rows * cols > 1), (rows, cols, col.stride())
    assert runner._matrix(uniform_matrices(5, 3, device="cpu")) == (False, 3)
    assert runner._matrix(uniform_matrices(5, 3, col_major=True, device="cpu")) == (True, 5)


def test_problem_of_operands(torch):
    from sgemmlab.bench.check import random_operands

    for p in (Problem(6, 5, 4), Problem(6, 5, 4, 3, "TN"), Problem(1, 5, 4, layout="TT"),
              Problem(6, 1, 4, 2, "NT"), Problem(6, 5, 4, pad=3),
              Problem(6, 5, 4, 2, "TT", 4)):
        A, B, C = random_operands(p.M, p.N, p.K, batch=p.batch, layout=p.layout,
                                  device="cpu", pad=p.pad)
        assert runner.problem_of(A, B) == p
        assert tuple(C.shape) == ((p.batch,) if p.batch > 1 else ()) + (p.M, p.N)
        assert C.isnan().all()  # beta == 0: poisoned
        lds = tuple(runner._matrix(x)[1] for x in (A, B, C))
        assert lds == p.lds(), (p, lds)
        assert not A.isnan().any() and not B.isnan().any()  # the padding is outside


def test_padded_operands_keep_nan_in_their_padding(torch):
    from sgemmlab.bench.check import uniform_matrices

    x = uniform_matrices(3, 5, device="cpu", pad=2)
    assert x.shape == (3, 5) and x.stride() == (7, 1)
    storage = torch.as_strided(x, (3, 7), (7, 1))
    assert storage[:, 5:].isnan().all() and not storage[:, :5].isnan().any()
    t = uniform_matrices(3, 5, col_major=True, batch=2, device="cpu", pad=1)
    assert t.shape == (2, 3, 5) and t.stride() == (20, 1, 4)


def test_stored_makes_an_operand_column_major_once(torch):
    x = torch.arange(12.0).reshape(3, 4)
    t = runner._stored(x, "T")
    assert runner._matrix(t)[0] and torch.equal(t, x)
    assert runner._stored(t, "T") is t  # already column-major: no copy
    assert runner._stored(x, "N") is x
    one = torch.arange(4.0).reshape(1, 4)  # a row: column-major needs its own strides
    assert runner._matrix(runner._stored(one, "T"))[0]
    b = torch.arange(24.0).reshape(2, 3, 4)
    tb = runner._stored(b, "T")
    assert runner._matrix(tb) == (True, 3) and torch.equal(tb, b)


def test_operands_aligned_is_what_the_api_would_see():
    # the leading dimensions: lda = K (row-major A) or M (column-major), ldb = N or K, ldc = N
    assert runner.operands_aligned(Problem(5, 8, 8))
    assert not runner.operands_aligned(Problem(8, 8, 5))
    assert runner.operands_aligned(Problem(8, 8, 5, layout="TN"))  # K leads nothing here
    assert not runner.operands_aligned(Problem(8, 8, 5, layout="TT"))  # ldb = K
    assert not runner.operands_aligned(Problem(2, 8, 8, layout="TN"))  # lda = M
    assert not runner.operands_aligned(Problem(8, 6, 8, layout="NT"))  # ldc = N
    assert runner.operands_aligned(Problem(3, 4, 4, 5))  # batch strides 12, 16, 12
    # padded rows: every leading dimension grows by the pad
    assert runner.operands_aligned(Problem(5, 8, 8, pad=4))
    assert not runner.operands_aligned(Problem(5, 8, 8, pad=3))
    assert runner.operands_aligned(Problem(5, 9, 5, layout="TT", pad=3))  # 8, 8, 12
    assert not runner.operands_aligned(Problem(5, 7, 5, layout="TT", pad=3))  # ldc 10
    assert runner.operands_aligned(Problem(3, 5, 5, 5, "NN", 3))  # 8, 8, 8; 24, 40, 24



class FakeLauncher:
    """Records what the harness binds; the launches it returns record that they ran."""

    def __init__(self, rung, config=None, device_id=0):
        self.rung, self.config, self.binds, self.ran = rung, config, [], []

    def compiled(self):
        return types.SimpleNamespace(resources=types.SimpleNamespace(
            registers=64, spill_stores=0, spill_loads=0, smem_bytes=0))

    def bind(self, *args, **kw):
        self.binds.append((args, kw))
        return lambda: self.ran.append(len(self.ran))


@pytest.fixture
def fake_stream(torch, monkeypatch):
    from sgemmlab.runtime import arrays

    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda: types.SimpleNamespace(cuda_stream=0))
    monkeypatch.setattr(arrays, "stream_for", lambda handle, device: "stream")


def _rung(features):
    return types.SimpleNamespace(label="99_test", features=frozenset(features),
                                 supports=lambda f: f in features)


def test_a_batch_on_a_rung_with_batches_is_one_launch(torch, fake_stream):
    from sgemmlab.bench.check import random_operands

    A, B, C = random_operands(6, 5, 4, batch=3, layout="TN", device="cpu")
    launcher = FakeLauncher(_rung({"batched", "layouts"}))
    runner._bind(launcher, A, B, C)()
    ((args, kw),) = launcher.binds
    assert args[:3] == (6, 5, 4) and args[4:7] == (A.data_ptr(), 6, B.data_ptr())
    assert args[7] == 5 and args[9:11] == (C.data_ptr(), 5)  # ldb = N, ldc = N
    assert kw == {"trans_a": True, "trans_b": False, "batch": 3, "stride_a": 24,
                  "stride_b": 20, "stride_c": 30}
    assert launcher.ran == [0]


def test_a_batch_on_a_rung_without_batches_is_one_launch_per_product(torch, fake_stream):
    from sgemmlab.bench.check import random_operands

    A, B, C = random_operands(6, 5, 4, batch=3, device="cpu")
    launcher = FakeLauncher(_rung(set()))
    runner._bind(launcher, A, B, C)()
    assert len(launcher.binds) == 3 and launcher.ran == [0, 1, 2]
    for i, (args, kw) in enumerate(launcher.binds):
        assert kw == {}  # row-major, and no batch keywords
        assert args[4] == A.data_ptr() + 4 * i * 24 and args[6] == B.data_ptr() + 4 * i * 20
        assert args[9] == C.data_ptr() + 4 * i * 30


def test_a_rung_refuses_what_it_cannot_compute_and_notes_a_batch_it_runs_per_product(
        monkeypatch):
    from sgemmlab import registry
    from sgemmlab.runtime import launch

    monkeypatch.setattr(launch, "Launcher", FakeLauncher)
    plain = next(r for r in registry.RUNGS if not r.features)
    both = next(r for r in registry.RUNGS if {"layouts", "batched"} <= r.features)
    c = runner.rung_candidate(plain, dict(plain.seed))
    assert c.refuses(Problem(64, 64, 64)) is None
    assert "layouts" in c.refuses(Problem(64, 64, 64, layout="NT"))
    assert c.refuses(Problem(64, 64, 64, 4)) is None  # runs, one launch per product
    assert "one launch per product" in c.per_shape(Problem(64, 64, 64, 4))["note"]
    assert c.per_shape(Problem(64, 64, 64)) == {}
    # the table builder's candidate: its own layout needs the feature too
    assert "layouts" in runner.rung_candidate(plain, dict(plain.seed), "TN").refuses(
        Problem(64, 64, 64))
    d = runner.rung_candidate(both, dict(both.seed))
    assert d.refuses(Problem(64, 64, 64, 4, "TT")) is None
    assert d.per_shape(Problem(64, 64, 64, 4)) == {}
    narrow = next((r for r in registry.ALL if not r.serves(4096, 4096, 4096)), None)
    if narrow is not None:
        n = runner.rung_candidate(narrow, dict(narrow.seed))
        assert narrow.domain in n.refuses(Problem(4096, 4096, 4096))


def test_auto_refuses_what_dispatch_cannot_serve_and_records_the_choice(
        isolated_dispatch, monkeypatch):
    from sgemmlab import dispatch

    fake = Candidate("13_hoisted", None, None, {}, {"registers": 200})
    monkeypatch.setattr(runner, "rung_candidate", lambda r, cfg, layout="NN": fake)
    asked = []

    def choose(M, N, K, **kw):
        asked.append(((M, N, K), kw))
        if kw["batch"] > 65535:
            raise dispatch.DispatchError("no rung serves this (test)")
        return dispatch.forced("13_hoisted")

    monkeypatch.setattr(dispatch, "choose", choose)
    auto = runner.auto_candidate(GPU)
    assert auto.refuses(Problem(64, 64, 64, 65536)) == "no rung serves this (test)"
    assert auto.refuses(Problem(64, 64, 64, 8, "TN")) is None
    rec = runner._record(auto, 64, 64, 64, runner.CheckResult(True, 1e-6, 1e-5), batch=8,
                         layout="TN")
    assert (rec["batch"], rec["layout"], rec["rung"]) == (8, "TN", "13_hoisted")
    assert asked[-1] == ((64, 64, 64), {"gpu_name": GPU.name, "sm_count": GPU.sm_count,
                                        "trans_a": True, "trans_b": False, "batch": 8,
                                        "aligned": True, "precision": "ieee",
                                        "arch": GPU.arch})


def test_the_triton_baseline_refuses_batches_and_layouts():
    from sgemmlab.bench import baselines

    assert baselines._one_row_major_product(Problem(64, 64, 64)) is None
    for p in (Problem(64, 64, 64, 2), Problem(64, 64, 64, layout="TN")):
        assert "Triton" in baselines._one_row_major_product(p)


def test_a_grouped_method_checks_every_candidate_then_times_them_on_one_baseline(
        monkeypatch, torch):
    """measure_shape with Method.grouped: the failed candidate is reported at once and never
    timed; the other two are timed in shared rounds, so both records carry the same cuBLAS
    samples, and cuBLAS's own record counts each round once."""
    from sgemmlab.bench import measure
    from sgemmlab.bench.check import CheckResult

    monkeypatch.setattr(runner, "output", lambda p: None)
    monkeypatch.setattr(runner, "operands", lambda p: (None, None))

    def cublas():
        pass

    monkeypatch.setattr(runner, "cublas_fp32", lambda A, B, C: cublas)
    monkeypatch.setattr(runner, "check_gemm", lambda *a, **kw: CheckResult(True, 1e-6, 6e-5))
    verdict = {"fast": True, "slow": True, "wrong": False}
    monkeypatch.setattr(runner, "check_candidate", lambda c, *a, **kw: CheckResult(
        verdict[c.kernel], 1e-6 if verdict[c.kernel] else 1.0, 6e-5))
    own = {"fast": 80.0, "slow": 100.0}
    base = iter([120.0, 100.0, 110.0])
    timed = []

    def time_launches(fn, n, flush, mode="isolated", timer=None):
        timed.append(fn.__name__)
        return [next(base)] * n if fn is cublas else [own[fn.__name__]] * n

    monkeypatch.setattr(measure, "time_launches", time_launches)

    def candidate(name):
        def launch():
            pass

        launch.__name__ = name
        return Candidate(name, lambda *a: None, lambda A, B, C: launch)

    seen = []
    recs = runner.measure_shape(
        64, 64, 64, [candidate("fast"), candidate("wrong"), candidate("slow")],
        measure.Method(launches=3, rounds=3, warmup=0, grouped=True),
        types.SimpleNamespace(nbytes=0), on_record=lambda r: seen.append(r["kernel"]))
    assert seen == ["wrong", "fast", "slow"]  # the failure at once, the rest together
    assert "wrong" not in timed and timed.count("cublas") == 3  # once a round
    by = {r["kernel"]: r for r in recs}
    assert by["wrong"]["status"] == "failed" and "median_us" not in by["wrong"]
    assert by["fast"]["cublas_times_us"] == by["slow"]["cublas_times_us"] == by[
        "cublas"]["times_us"] == [[120.0] * 3, [100.0] * 3, [110.0] * 3]
    assert by["cublas"]["rounds"] == 3
    assert by["fast"]["vs_cublas"] == pytest.approx(110 / 80)
    assert by["slow"]["vs_cublas"] == pytest.approx(110 / 100)
