"""The tuner on the CPU, with fake measuring functions: an interrupted search or table build
resumes from what it measured, stale measurements are measured again, and the tables it
writes round-trip, merge and export."""

from __future__ import annotations

import json
import types

import pytest
from typer.testing import CliRunner

from conftest import (
    one_message,  # noqa: E402
    process_group,
)
from sgemmlab import dispatch, registry
from sgemmlab.bench import results, runner
from sgemmlab.cli import app
from sgemmlab.registry import config_key
from sgemmlab.runtime import device
from sgemmlab.runtime.compiler import Resources
from sgemmlab.tune import search, table
from sgemmlab.tune.resume import PartialLog, kernel_digest

GPU = device.GPUInfo(index=0, name="NVIDIA H200", compute_capability=(9, 0), sm_count=132,
                     l2_bytes=60 << 20, max_smem_per_block_optin=232448)
R10, R13, R14 = (registry.rung(n) for n in (10, 13, 14))
GOOD = Resources(registers=128, spill_stores=0, spill_loads=0, stack_bytes=0,
                 smem_bytes=1024, barriers=1)
SPILLS = Resources(registers=255, spill_stores=64, spill_loads=64, stack_bytes=64,
                   smem_bytes=1024, barriers=1)


class Stop(Exception):
    """Stands for Ctrl-C in the middle of a measurement."""


@pytest.fixture(autouse=True)
def isolated(isolated_dispatch):
    """Every test here: see conftest.isolated_dispatch."""


def key_of(rec):
    return (rec["name"],)


# -- the partial file ------------------------------------------------------------------------
def test_records_survive_a_restart_and_a_torn_last_line(tmp_path):
    path = tmp_path / "p.partial.jsonl"
    log = PartialLog(path, {"gpu": "g"}, key_of)
    log.add({"name": "a", "v": 1})
    log.add({"name": "b", "v": 2})
    with path.open("a") as f:
        f.write('{"name": "c", "v"')  # the write the interruption cut short
    again = PartialLog(path, {"gpu": "g"}, key_of)
    assert [r["name"] for r in again.records] == ["a", "b"]
    assert again.has(("a",)) and not again.has(("c",))
    assert "2 measurement(s) kept" in again.note
    assert path.read_text().count("\n") == 3  # the torn line is gone from the file too


def test_a_later_line_for_the_same_measurement_wins(tmp_path):
    log = PartialLog(tmp_path / "p", {}, key_of)
    log.add({"name": "a", "v": 1})
    log.add({"name": "a", "v": 2})
    assert PartialLog(tmp_path / "p", {}, key_of).records == [{"name": "a", "v": 2}]


def test_another_header_starts_over_and_says_what_differs(tmp_path):
    path = tmp_path / "p"
    PartialLog(path, {"gpu": "g", "method": 1}, key_of).add({"name": "a"})
    log = PartialLog(path, {"gpu": "g", "method": 2}, key_of)
    assert log.records == [] and "method" in log.note and "starting over" in log.note
    assert PartialLog(path, {"gpu": "g", "method": 2}, key_of).records == []


def test_stale_records_are_dropped_alone(tmp_path):
    path = tmp_path / "p"
    log = PartialLog(path, {}, key_of)
    log.extend([{"name": "a", "digest": "old"}, {"name": "b", "digest": "new"}])
    again = PartialLog(path, {}, key_of, fresh=lambda r: r["digest"] == "new")
    assert [r["name"] for r in again.records] == ["b"]
    assert "1 stale measurement(s)" in again.note


def test_no_resume_discards_and_finish_removes(tmp_path):
    path = tmp_path / "p"
    PartialLog(path, {}, key_of).add({"name": "a"})
    log = PartialLog(path, {}, key_of, resume=False)
    assert log.records == [] and "--no-resume" in log.note
    log.add({"name": "b"})
    assert log.drop(lambda r: r["name"] == "b") == 1
    assert PartialLog(path, {}, key_of).records == []
    log.finish()
    assert not path.exists()


def test_kernel_digest_follows_the_source():
    assert kernel_digest(R13.source) == kernel_digest(R13.source)
    assert kernel_digest(R13.source) != kernel_digest(R14.source)


# -- the configuration search --------------------------------------------------------------
def fake_measure(calls, stop_after=None):
    def measure(cfg, shape, res):
        if stop_after is not None and len(calls) >= stop_after:
            raise Stop
        calls.append((config_key(cfg), shape))
        M, N, K = shape
        us = 100.0 + cfg["BM"] - cfg["STAGES"]
        return {"kernel": R13.label, "config": cfg, "M": M, "N": N, "K": K, "status": "ok",
                "correct": True, "median_us": us, "vs_cublas": 90.0 / us,
                "cublas_times_us": [[90.0], [91.0]]}
    return measure


SHAPES = [(256, 256, 256), (512, 512, 512)]


def test_an_interrupted_search_measures_only_what_is_missing(tmp_path):
    configs = list(R13.configs())[:6]
    resources = {config_key(c): GOOD for c in configs}
    resources[config_key(configs[2])] = RuntimeError("did not compile\nlog")
    resources[config_key(configs[4])] = SPILLS

    def log():
        return PartialLog(tmp_path / "t.partial.jsonl", {"gpu": "g"}, search.measurement_key,
                          fresh=lambda r: r.get("kernel_digest") == kernel_digest(R13.source))

    first: list = []
    with pytest.raises(Stop):
        search.search(R13, configs, SHAPES, resources, fake_measure(first, 3), log())
    assert len(first) == 3  # config 0 at both shapes, config 1 at one, then the stop
    second: list = []
    advanced = []
    records = search.search(R13, configs, SHAPES, resources, fake_measure(second), log(),
                            lambda: advanced.append(1))
    assert set(first).isdisjoint(second)
    assert len(first) + len(second) == 4 * len(SHAPES)  # 6 configs, 2 never measured
    assert len(advanced) == len(configs)
    rejected = [r for r in records if r["status"] == "rejected"]
    assert [r["note"] for r in rejected] == ["did not compile", "register spills"]
    third: list = []  # everything is there: nothing measured, nothing compiled
    search.search(R13, configs, SHAPES, {}, fake_measure(third), log())
    assert third == []


def test_records_of_a_changed_kernel_are_measured_again(tmp_path, monkeypatch):
    configs = list(R13.configs())[:2]
    resources = {config_key(c): GOOD for c in configs}
    path = tmp_path / "t.partial.jsonl"
    fresh = lambda r: r.get("kernel_digest") == kernel_digest(R13.source)  # noqa: E731
    search.search(R13, configs, SHAPES, resources, fake_measure([]),
                  PartialLog(path, {}, search.measurement_key, fresh=fresh))
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0]] + [
        json.dumps({**json.loads(x), "kernel_digest": "edited"}) for x in lines[1:3]]
        + lines[3:]) + "\n")
    again: list = []
    search.search(R13, configs, SHAPES, resources, fake_measure(again),
                  PartialLog(path, {}, search.measurement_key, fresh=fresh))
    assert again == [(config_key(configs[0]), s) for s in SHAPES]


class FakeGPUMeasure:
    made = 0

    def __init__(self, rung, method, gpu):
        type(self).made += 1
        assert method == search.TUNE
        self.flush = types.SimpleNamespace(nbytes=256 << 20)
        self.calls: list = []
        self.measure = fake_measure(self.calls, FakeGPUMeasure.stop_after)


def test_tune_rung_resumes_and_writes_one_results_file(tmp_path, monkeypatch):
    monkeypatch.setattr(device, "gpu_info", lambda index=0: GPU)
    compiled = []

    def compile_many(items, arch, jobs):
        compiled.extend(config_key(c) for _, c in items)
        return [((r, c), GOOD) for r, c in items]

    monkeypatch.setattr(search, "compile_many", compile_many)
    monkeypatch.setattr(search, "_GPUMeasure", FakeGPUMeasure)
    FakeGPUMeasure.stop_after = 5
    with pytest.raises(Stop):
        search.tune_rung(R13, SHAPES, limit=4)
    partial = search.partial_path(GPU.slug, R13, SHAPES)
    assert partial.is_file() and len(compiled) == 4
    FakeGPUMeasure.stop_after = None
    notes: list = []
    compiled.clear()
    path, best = search.tune_rung(R13, SHAPES, limit=4, echo=notes.append)
    assert "resuming" in notes[0] and "5 measurement(s) kept" in notes[0]
    assert len(compiled) == 2  # configs 0-1 were done: only 2-3 compile again
    assert not partial.exists()
    data = results.load(path)
    ok = [r for r in data["records"] if r["kernel"] == R13.label]
    assert len(ok) == 4 * len(SHAPES)
    assert len({(config_key(r["config"]), r["M"]) for r in ok}) == 8
    want = min((c for c in list(R13.configs())[:4]), key=lambda c: c["BM"] - c["STAGES"])
    assert best == want and data["best"] == want
    assert any("resuming" in n for n in data["notes"])
    assert data["method"] == {**search.TUNE.as_dict(), "l2_flush_bytes": 256 << 20}
    cublas = [r for r in data["records"] if r["kernel"] == "cublas"]
    assert sorted(r["M"] for r in cublas) == [256, 512]  # one per shape, from every pairing
    assert all(r["rounds"] == 2 * 4 and r["median_us"] == 90.5 for r in cublas)


# -- the table build -----------------------------------------------------------------------
def test_candidates_are_the_defaults_and_every_streamk_decomposition():
    cands = table.candidates_for([R10, R13, R14], "NVIDIA H200")
    got = [(r.label, c.get("SPLIT"), c.get("FIXUP")) for r, c in cands]
    assert got[:3] == [("10_warptiling", None, None), ("13_hoisted", None, None),
                       ("14_streamk", 0, 0)]
    streamk = sorted((s, f) for lab, s, f in got if lab == "14_streamk")
    assert streamk == [(0, 0), (0, 1), (0, 2), (1, 0), (2, 0), (2, 1), (2, 2), (4, 0), (4, 1),
                       (4, 2)]
    assert all(r.is_legal(c) for r, c in cands)
    extra = {**R13.seed, "STAGES": 2}
    more = table.candidates_for([R13], "NVIDIA H200", [(R13, extra), (R13, dict(R13.seed))])
    assert [c for _, c in more] == [dict(R13.seed), extra]
    with pytest.raises(ValueError, match="illegal configuration"):
        table.candidates_for([R13], "NVIDIA H200", [(R13, {**R13.seed, "BM": 100})])


def test_split_k_into_parts_of_under_two_iterations_is_not_tried():
    cfg = {**R14.seed, "SPLIT": 4}  # BK = 8
    assert table.useful(R14, cfg, 64, 64, 64)  # 8 k-iterations: 2 per part
    assert table.useful(R14, cfg, 64, 64, 57)  # the 8th is partial
    assert not table.useful(R14, cfg, 64, 64, 56)
    assert table.useful(R14, {**cfg, "SPLIT": 2}, 64, 64, 32)
    assert table.useful(R13, {**R13.seed}, 64, 64, 8)


def fake_shape(calls, stop_at=None, ratio=None, cublas_ok=True):
    """runner.measure_shape's stand-in: records per candidate, made up but fixed."""
    def measure(M, N, K, candidates, *, layout="NN", on_record=None, **_):
        out = []
        for c in candidates:
            if stop_at is not None and len(calls) >= stop_at:
                raise Stop
            calls.append((layout, (M, N, K), c.kernel, config_key(c.config)))
            vs = (ratio or (lambda c, M: 1.0))(c, M)
            rec = {"kernel": c.kernel, "config": c.config, "M": M, "N": N, "K": K,
                   "fp32": True, "correct": True, "error": 1e-6, "status": "ok",
                   "median_us": 100.0 / vs, "vs_cublas": vs, "vs_cublas_min": vs,
                   "vs_cublas_max": vs}
            on_record(rec)
            out.append(rec)
        cublas = {"kernel": "cublas", "config": None, "M": M, "N": N, "K": K, "fp32": True,
                  "correct": cublas_ok, "error": 1e-6, "error_bound": 1e-5,
                  "check_note": "", "status": "ok", "median_us": 100.0, "vs_cublas": 1.0}
        return [cublas, *out]
    return measure


def make(r, cfg, layout):
    return runner.Candidate(r.label, None, None, dict(cfg))


def test_measure_all_resumes_shape_by_candidate(tmp_path):
    cands = table.candidates_for([R13, R14], "NVIDIA H200")
    shapes = [(1024, 1024, 1024), (4096, 4096, 64)]

    def log():
        return PartialLog(tmp_path / "t.partial.jsonl", {}, table.record_key,
                          fresh=table._fresh)

    first: list = []
    with pytest.raises(Stop):
        table.measure_all(table.plan(shapes, ["NN"], cands, log()), log(),
                          fake_shape(first, stop_at=len(cands) + 2), make)
    todo = table.plan(shapes, ["NN"], cands, log())
    assert len(todo[("NN", shapes[0])]) == 0  # every candidate done there, 2 more after
    # 4096x4096x64 has 8 k-iterations: split 4 (2 each) stays, nothing is left out...
    assert len(todo[("NN", shapes[1])]) == len(cands) - 2
    second: list = []
    table.measure_all(todo, log(), fake_shape(second), make)
    assert set(first).isdisjoint(second) and len(first) + len(second) == 2 * len(cands)
    recs = log().records
    assert sum(r["kernel"] == "cublas" for r in recs) == 2
    assert all(r["kernel_digest"] == kernel_digest(registry.rung(r["kernel"]).source)
               for r in recs if r["kernel"] != "cublas")


def test_a_batched_shape_is_measured_on_batched_rungs_and_resumes_by_batch(tmp_path):
    """A (M, N, K, batch) shape goes to the rungs that take a batch in one launch; its
    records carry the batch, and the same M, N, K at another batch is another shape."""
    from sgemmlab.tune import grid

    cands = grid.grid_candidates("NVIDIA H200")
    log = PartialLog(tmp_path / "b.partial.jsonl", {}, table.record_key)
    shapes = [(4, 64, 64, 32), (4, 64, 64)]  # rung 15 serves M = 4, one product a launch
    todo = table.plan(shapes, ["NN"], cands, log, grid.useful)
    batched = todo[("NN", shapes[0])]
    assert batched and all("batched" in r.features for r, _ in batched)
    assert any("batched" not in r.features for r, _ in todo[("NN", shapes[1])])
    calls: list = []

    def measure(M, N, K, candidates, *, batch=1, on_record=None, **kw):
        recs = fake_shape(calls)(M, N, K, candidates, on_record=lambda r: on_record(
            {**r, "batch": batch}), **kw)
        return [{**r, "batch": batch} for r in recs]

    table.measure_all({k: v for k, v in todo.items() if k[1] == shapes[0]}, log, measure, make)
    assert {r.get("batch") for r in log.records} == {32}
    again = table.plan(shapes, ["NN"], cands, log, grid.useful)
    assert again[("NN", shapes[0])] == []  # resumed: nothing left at batch 32 ...
    assert len(again[("NN", shapes[1])]) == len(todo[("NN", shapes[1])])  # ... all at 1
    assert all(len(p) == 4 and p[3] in grid.BATCHES for p in grid.batch_problems())


def test_a_bad_baseline_drops_that_shapes_records(tmp_path):
    cands = table.candidates_for([R13], "NVIDIA H200")
    log = PartialLog(tmp_path / "t", {}, table.record_key)
    with pytest.raises(RuntimeError, match="cuBLAS FP32 fails"):
        table.measure_all(table.plan([(64, 64, 64)], ["NN"], cands, log), log,
                          fake_shape([], cublas_ok=False), make,
                          runner.fp32_baseline_problem)
    assert log.records == [] and PartialLog(tmp_path / "t", {}, table.record_key).records == []


@pytest.fixture
def fake_gpu(monkeypatch):
    monkeypatch.setattr(device, "gpu_info", lambda index=0: GPU)
    monkeypatch.setattr(table, "compile_many",
                        lambda items, arch, jobs: [((r, c), GOOD) for r, c in items])
    monkeypatch.setattr(runner, "rung_candidate", make)
    monkeypatch.setattr("sgemmlab.bench.measure.L2Flusher",
                        lambda l2: types.SimpleNamespace(nbytes=4 * l2))
    monkeypatch.setattr(runner, "tf32_is_on", lambda: False)

    def use(measure):
        def measure_shape(M, N, K, cands, method, flush, peak, progress, **kw):
            assert method.grouped  # a table ranks candidates that share one baseline
            return measure(M, N, K, cands, **kw)

        monkeypatch.setattr(runner, "measure_shape", measure_shape)
    return use


def streamk_wins_small(c, M):
    """Made-up ratios: atomic Stream-K wins below 2048, rung 13 above."""
    if c.kernel == "14_streamk":
        return 1.1 + 0.01 * c.config["FIXUP"] if M < 2048 and c.config["SPLIT"] == 0 else 0.9
    return 1.0


def test_build_table_resumes_then_writes_the_table_dispatch_reads(fake_gpu, tmp_path):
    shapes = [(1024, 1024, 1024), (4096, 4096, 4096)]
    calls: list = []
    fake_gpu(fake_shape(calls, stop_at=5, ratio=streamk_wins_small))
    with pytest.raises(Stop):
        table.build_table(shapes, [R13, R14], tag="t", live=False)
    assert dispatch.load_table(GPU.name) is None  # no table before the run completes
    more: list = []
    fake_gpu(fake_shape(more, ratio=streamk_wins_small))
    out = tmp_path / "export" / "nvidia-h200.json"
    notes: list = []
    done = table.build_table(shapes, [R13, R14], tag="t", live=False, export=out,
                             echo=notes.append)
    assert "5 measurement(s) kept" in notes[0]
    n = len(table.candidates_for([R13, R14], GPU.name))
    assert len(calls) + len(more) == 2 * n and set(calls).isdisjoint(more)
    assert not (tmp_path / "results" / GPU.slug / "table" / "t.partial.jsonl").exists()

    assert done.written == [dispatch.user_table_path(GPU.name), out]
    assert json.loads(out.read_text()) == json.loads(done.written[0].read_text())
    t = dispatch.read_table(out)
    assert t.data["gpu"] == GPU.name and t.data["sm_count"] == 132
    assert len(t.entries) == 2 * n and all(e["source"] == f"results/{GPU.slug}/"
                                        f"table/{done.results.name}" for e in t.entries)
    won = {w["M"]: (w["rung"], w["config"].get("FIXUP")) for w in t.data["winners"]}
    assert won == {1024: ("14_streamk", 2), 4096: ("13_hoisted", None)}  # ratio grows with FIXUP
    run = results.load(done.results)
    assert sum(r["kernel"] == "cublas" for r in run["records"]) == 2

    c = dispatch.choose(1024, 1024, 1024, gpu_name=GPU.name, sm_count=132)
    assert (c.source, c.rung, c.config["FIXUP"]) == ("table", "14_streamk", 2)
    d = dispatch.choose(1024, 1024, 1024, gpu_name=GPU.name, sm_count=132,
                        deterministic=True)
    assert (d.rung, d.config["FIXUP"], d.config["SPLIT"]) == ("14_streamk", 0, 0)


def test_a_second_build_merges_into_the_current_table(fake_gpu):
    fake_gpu(fake_shape([], ratio=streamk_wins_small))
    table.build_table([(1024, 1024, 1024), (4096, 4096, 4096)], [R13, R14], tag="a",
                      live=False)
    fake_gpu(fake_shape([], ratio=lambda c, M: 1.3 if c.kernel == "13_hoisted" else 1.0))
    done = table.build_table([(1024, 1024, 1024), (2048, 2048, 2048)], [R13], tag="b",
                             live=False)
    t = dispatch.load_table(GPU.name)
    by_shape = {}
    for e in t.entries:
        by_shape.setdefault(e["M"], set()).add(e["rung"])
    assert by_shape == {1024: {"13_hoisted"}, 2048: {"13_hoisted"},
                        4096: {"13_hoisted", "14_streamk"}}
    assert len(t.data["sources"]) == 2 and t.data["command"] == done.table["command"]


def test_export_copies_the_current_table_and_needs_one(tmp_path):
    with pytest.raises(FileNotFoundError, match="sgemmlab tune --table"):
        table.export_table(GPU.name, tmp_path / "x.json")
    data = dispatch.new_table(GPU.name, "9.0", 132, [
        {"M": 64, "N": 64, "K": 64, "rung": "13_hoisted", "config": dict(R13.seed),
         "median_us": 5.0, "vs_cublas": 1.0}])
    dispatch.write_table(data, dispatch.package_table_path(GPU.name))
    path, t = table.export_table(GPU.name, tmp_path / "x.json")
    assert t.where == "package" and json.loads(path.read_text()) == data


# -- the command line ----------------------------------------------------------------------
def cli(*args):
    return CliRunner().invoke(app, list(args))


def test_tune_export_on_the_command_line(monkeypatch, tmp_path):
    monkeypatch.setattr(device, "gpu_info", lambda index=0: GPU)
    out = cli("tune", "--export", str(tmp_path / "t.json"))
    assert out.exit_code == 1 and "no tuning table for NVIDIA H200" in out.output
    data = dispatch.new_table(GPU.name, "9.0", 132, [
        {"M": 64, "N": 64, "K": 64, "rung": "13_hoisted", "config": dict(R13.seed),
         "median_us": 5.0, "vs_cublas": 1.0}])
    dispatch.write_table(data, dispatch.user_table_path(GPU.name))
    out = cli("tune", "--export", str(tmp_path / "t.json"))
    assert out.exit_code == 0, out.output
    assert "exported the user cache table of NVIDIA H200 (1 entries)" in out.output
    assert dispatch.read_table(tmp_path / "t.json").data == data


@pytest.mark.parametrize("args, words, code", [
    (["--table", "--suite", "huge"], "unknown suite", 1),
    (["--table", "-k", "10,99"], "unknown kernel '99'", 1),
    (["--table", "--config", "13"], "RUNG:NAME=VALUE", 1),
    (["--table", "--config", "13:BM=x"], "malformed", 1),
    (["--layout", "TN"], "applies to --table and --grid", 1),
    (["--grid", "--config", "13:BM=64"], "--config and --confirm to --table", 1),
    (["--confirm"], "--config and --confirm to --table", 1),
    (["--table", "--write-defaults"], "not --table", 2),
])
def test_tune_argument_errors_come_before_the_gpu(args, words, code, monkeypatch):
    def refuse(index=0):
        raise device.NoGPUError("No usable NVIDIA GPU was found (test)")

    monkeypatch.setattr(device, "gpu_info", refuse)
    out = cli("tune", *args)
    assert out.exit_code == code and words in out.output, out.output
    one_message(out.output)


def test_tune_table_on_the_command_line(fake_gpu, monkeypatch, tmp_path):
    fake_gpu(fake_shape([], ratio=streamk_wins_small))
    monkeypatch.setattr("sgemmlab.cli.tune.require_torch", lambda: None)
    out = cli("tune", "--table", "--suite", "square", "--shape", "100,200,300",
              "--rungs", "13,14", "--export", str(tmp_path / "t.json"), "--quiet")
    assert out.exit_code == 0, out.output
    t = dispatch.read_table(tmp_path / "t.json")
    assert {(w["M"], w["N"], w["K"]) for w in t.data["winners"]} == {
        (1024,) * 3, (2048,) * 3, (4096,) * 3, (8192,) * 3, (100, 200, 300)}
    assert "1024×1024×1024 NN" in out.output and "14_streamk" in out.output
    run = results.load(out.output.split("results: ")[1].split()[0])
    assert run["kind"] == "tune" and len(run["table"]["candidates"]) == len(
        table.candidates_for([registry.rung(13), registry.rung(14)], GPU.name))


INTERRUPTED = """
import signal
# Ctrl-C's default in Python, whatever this process inherited: a suite started under nohup
# or as a background job ignores SIGINT, and that would outlive exec
signal.signal(signal.SIGINT, signal.default_int_handler)
from sgemmlab import registry
from sgemmlab.tune.search import compile_many
r = registry.rung(13)
items = [(r, c) for c in list(r.configs())[:40]]
print("compiling", flush=True)
list(compile_many(items, "sm_90", jobs=2))
print("finished", flush=True)
"""


def test_an_interrupted_compile_stops_at_once(tmp_path):
    """Ctrl-C (or `timeout -s INT`, which signals the whole process group) during the
    parallel compile ends the search now, not after every queued compile: 40 cold builds
    take about a minute on two cores. Every wait is bounded, and the whole group goes at
    the end (conftest.process_group)."""
    import os
    import select
    import signal
    import subprocess
    import sys
    import time

    env = dict(os.environ, SGEMMLAB_CACHE_DIR=str(tmp_path / "cache"))
    with process_group([sys.executable, "-c", INTERRUPTED], env=env, text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert select.select([proc.stdout], [], [], 120)[0], "not started within 120 s"
        assert proc.stdout.readline().strip() == "compiling"
        time.sleep(4)  # the workers are compiling
        sent = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)  # the whole group, as Ctrl-C and `timeout` do
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("the interrupted compile did not stop within 30 s")
    assert time.monotonic() - sent < 20
    assert "finished" not in out
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
