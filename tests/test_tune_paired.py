"""The tuner measures with the harness's paired loop (runner.measure_shape, method TUNE),
keeps its ragged check through the one metric, picks the winner by paired ratio, and can
re-measure a given list of configurations. On the CPU, every GPU step replaced."""

from __future__ import annotations

import ast
import json
import types
from pathlib import Path

import pytest

from sgemmlab import registry
from sgemmlab.bench import check, runner
from sgemmlab.bench.check import CheckResult
from sgemmlab.registry import config_key
from sgemmlab.runtime import device
from sgemmlab.runtime.compiler import Resources
from sgemmlab.tune import search

GPU = device.GPUInfo(index=0, name="NVIDIA H200", compute_capability=(9, 0), sm_count=132,
                     l2_bytes=60 << 20, max_smem_per_block_optin=232448)
R3, R13 = registry.rung(3), registry.rung(13)
GOOD = Resources(registers=128, spill_stores=0, spill_loads=0, stack_bytes=0,
                 smem_bytes=1024, barriers=1)
SHAPES = [(256, 256, 256), (512, 512, 512)]
OK = CheckResult(True, 1e-6, 2.6e-4)


@pytest.fixture(autouse=True)
def isolated(isolated_dispatch):
    """Every test here: see conftest.isolated_dispatch."""


def rec(cfg, shape, vs, us=100.0, status="ok"):
    M, N, K = shape
    return {"kernel": R13.label, "config": dict(cfg), "M": M, "N": N, "K": K,
            "status": status, "median_us": us, "vs_cublas": vs,
            "cublas_times_us": [[us * vs]] * 3}


@pytest.fixture
def fake_harness(monkeypatch):
    """_GPUMeasure with the GPU steps replaced; returns what they were asked to do."""
    seen = types.SimpleNamespace(shapes=[], checks=[], cublas_ok=True, ragged=OK)
    monkeypatch.setattr("sgemmlab.bench.measure.L2Flusher",
                        lambda l2: types.SimpleNamespace(nbytes=4 * l2))
    monkeypatch.setattr(runner, "rung_candidate", lambda r, cfg, layout="NN":
                        runner.Candidate(r.label, "gemm", None, dict(cfg), {"registers": 96}))
    monkeypatch.setattr(runner, "tf32_is_on", lambda: False)

    def check_gemm(fn, M, N, K, *, alpha=1.0, beta=0.0):
        seen.checks.append((fn, (M, N, K), alpha, beta))
        return seen.ragged

    def measure_shape(M, N, K, candidates, method, flush, peak=None, progress=None, **kw):
        seen.shapes.append(((M, N, K), [c.config for c in candidates], method, flush.nbytes,
                            peak))
        cublas = {"kernel": "cublas", "M": M, "N": N, "K": K, "correct": seen.cublas_ok,
                  "error": 1e-6 if seen.cublas_ok else 3e-4, "error_bound": 6e-5}
        return [cublas, rec(candidates[0].config, (M, N, K), 0.9)]

    monkeypatch.setattr(check, "check_gemm", check_gemm)
    monkeypatch.setattr(runner, "measure_shape", measure_shape)
    return seen


def test_each_configuration_is_measured_paired_by_the_harness(fake_harness):
    m = search._GPUMeasure(R13, search.TUNE, GPU)
    cfg = dict(R13.seed)
    out = [m.measure(cfg, s, GOOD) for s in SHAPES]
    assert [r["M"] for r in out] == [256, 512] and all(r["vs_cublas"] == 0.9 for r in out)
    assert [s[0] for s in fake_harness.shapes] == SHAPES
    for _, configs, method, flush_bytes, peak in fake_harness.shapes:
        assert configs == [cfg] and method == search.TUNE and method.rounds >= 3
        assert flush_bytes == 4 * GPU.l2_bytes and peak > 0
    # the ragged check: once per configuration, with alpha and beta, through the metric
    assert fake_harness.checks == [("gemm", search.RAGGED_CHECK, 0.5, 2.0)]


def test_a_configuration_wrong_at_the_ragged_shape_is_never_timed(fake_harness):
    fake_harness.ragged = CheckResult(False, 3e-2, 1e-5, "error 3.00e-02 exceeds the FP32 "
                                      "bound")
    r = search._GPUMeasure(R13, search.TUNE, GPU).measure(dict(R13.seed), SHAPES[0], GOOD)
    assert r["status"] == "failed" and r["correct"] is False and r["error"] == 3e-2
    assert r["check_note"].startswith("at 67x45x33: error 3.00e-02")
    assert fake_harness.shapes == []


def test_a_cublas_that_is_not_fp32_stops_the_search(fake_harness):
    fake_harness.cublas_ok = False
    with pytest.raises(runner.BaselineError, match="cuBLAS FP32 fails"):
        search._GPUMeasure(R13, search.TUNE, GPU).measure(dict(R13.seed), SHAPES[0], GOOD)


def test_the_winner_is_the_best_paired_ratio_not_the_least_raw_time():
    a, b, c = (dict(R13.seed, STAGES=s) for s in (2, 3, 4))
    records = [
        rec(a, SHAPES[0], 0.80, us=90.0), rec(a, SHAPES[1], 0.80, us=700.0),  # least time
        rec(b, SHAPES[0], 1.20, us=95.0), rec(b, SHAPES[1], 0.70, us=800.0),  # gmean 0.917
        rec(c, SHAPES[0], 2.00, us=50.0),  # best ratio, but at one shape only
        rec(c, SHAPES[1], 2.00, us=50.0, status="failed"),
    ]
    assert search.best_config(R13, records, SHAPES) == b
    assert search.best_config(R13, records, SHAPES[:1]) == c
    assert search.best_config(R13, records[:1], SHAPES) is None


def test_cublas_gets_one_record_per_shape_from_every_pairing():
    a, b = dict(R13.seed, STAGES=2), dict(R13.seed, STAGES=3)
    records = [rec(a, SHAPES[0], 1.0, us=100.0), rec(b, SHAPES[0], 0.5, us=300.0),
               rec(a, SHAPES[1], 1.0, us=200.0)]
    out = {r["M"]: r for r in search.cublas_records(records)}
    assert out[256]["rounds"] == 6 and out[256]["times_us"] == [[100.0]] * 3 + [[150.0]] * 3
    assert out[256]["median_us"] == 125.0 and out[512]["median_us"] == 200.0


class FakeMeasure:
    def __init__(self, rung, method, gpu):
        self.flush = types.SimpleNamespace(nbytes=256 << 20)
        self.calls: list = []

    def measure(self, cfg, shape, res):
        self.calls.append(config_key(cfg))
        # STAGES=2 is the fastest in raw time, STAGES=4 the best against its cuBLAS rounds
        vs = {2: 0.8, 3: 0.9, 4: 1.1}[cfg["STAGES"]]
        return rec(cfg, shape, vs, us={2: 50.0, 3: 80.0, 4: 90.0}[cfg["STAGES"]])


@pytest.fixture
def fake_tune(monkeypatch, tmp_path):
    monkeypatch.setattr(device, "gpu_info", lambda index=0: GPU)
    compiled: list = []

    def compile_many(items, arch, jobs):
        compiled.extend(config_key(c) for _, c in items)
        return [((r, c), GOOD) for r, c in items]

    monkeypatch.setattr(search, "compile_many", compile_many)
    monkeypatch.setattr(search, "_GPUMeasure", FakeMeasure)
    monkeypatch.setattr(search, "DEFAULTS_PATH", tmp_path / "defaults.json")
    no_defaults = lambda: {}  # noqa: E731
    no_defaults.cache_clear = lambda: None  # what _store_default calls after writing
    monkeypatch.setattr(registry, "tuned_defaults", no_defaults)
    monkeypatch.setattr(registry.core, "tuned_defaults", no_defaults)
    return compiled


def test_tune_a_given_list_of_configurations(fake_tune, tmp_path):
    listed = [dict(R13.seed, STAGES=s) for s in (2, 3, 4)]
    path, best = search.tune_rung(R13, SHAPES, configs=listed, write_defaults=True)
    assert sorted(fake_tune) == sorted(config_key(c) for c in listed)  # nothing else
    assert best == listed[2]  # by ratio, not the raw-time winner STAGES=2
    data = json.loads(path.read_text())
    assert data["configs"] == listed and data["best"] == listed[2]
    assert data["method"]["rounds"] == search.TUNE.rounds
    assert data["method"]["mode"] == "isolated"
    assert "-list" in path.name
    assert not search.partial_path(GPU.slug, R13, SHAPES, listed).exists()
    stored = json.loads((tmp_path / "defaults.json").read_text())
    assert stored["gpus"][GPU.name][R13.label] == listed[2]
    assert stored["sources"][GPU.name][R13.label].endswith(path.name)


def test_a_list_has_its_own_partial_file_and_must_be_legal(fake_tune):
    listed = [dict(R13.seed)]
    assert search.partial_path(GPU.slug, R13, SHAPES, listed) != search.partial_path(
        GPU.slug, R13, SHAPES)
    with pytest.raises(ValueError, match="illegal configuration"):
        search.tune_rung(R13, SHAPES, configs=[dict(R13.seed, BM=100)])
    assert fake_tune == []


def test_compile_variants_come_from_the_launchers_rule(monkeypatch):
    """The float4 rule lives in runtime.launch.variant_macros alone."""
    built = []
    monkeypatch.setattr(search, "_compile_one", lambda args: built.append(args[1]) or GOOD)
    list(search.compile_many([(R13, dict(R13.seed)), (R3, dict(R3.seed))], jobs=1))
    assert [m.get("SGEMM_VEC4") for m in built] == [1, None, None]  # r13 twice, r3 once
    built.clear()
    monkeypatch.setattr(search, "variant_macros", lambda rung, vec4: {"RULE": int(vec4)})
    list(search.compile_many([(R13, dict(R13.seed))], jobs=1))
    assert [m["RULE"] for m in built] == [1, 0]


SRC = Path(search.__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    """Module names a file imports, relative ones resolved inside sgemmlab."""
    pkg = ["sgemmlab", *path.parent.relative_to(SRC).parts]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = pkg[:len(pkg) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            out |= {mod} | {f"{mod}.{a.name}" for a in node.names}
    return out


@pytest.mark.parametrize("path", sorted((SRC / "bench").glob("*.py"))
                         + sorted((SRC / "tune").glob("*.py")), ids=lambda p: p.name)
def test_the_lab_never_imports_the_command_line(path):
    if path.name == "commands.py":
        pytest.skip("bench/commands.py is the command line's own module")
    bad = {m for m in _imports(path) if m in ("sgemmlab.cli", "sgemmlab.bench.commands")}
    assert not bad, f"{path.name} imports {bad}"


def test_baselines_and_runner_share_the_candidate_type_without_a_cycle():
    from sgemmlab.bench import baselines, candidates

    assert not any(m.startswith("sgemmlab.bench.runner")
                   for m in _imports(Path(baselines.__file__)))
    assert runner.Candidate is candidates.Candidate


def test_every_rung_has_a_ragged_check_shape_it_serves():
    from sgemmlab import registry
    from sgemmlab.tune.search import RAGGED_CHECK, ragged_check

    for r in registry.ALL:
        shape = ragged_check(r)
        assert r.serves(*shape)
        assert shape == RAGGED_CHECK or not r.serves(*RAGGED_CHECK)
    assert ragged_check(registry.rung(15))[0] <= 16
    assert ragged_check(registry.rung(17)) == RAGGED_CHECK  # K = 33: rung 17's chunked path
