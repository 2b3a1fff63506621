"""`sgemmlab bench --model` without a GPU: the pairing, the records, the checks and the
summary of bench/models.py, its workloads run on the CPU at tiny sizes with stand-in
switches (the real one and the real sizes run on the H200), and the command line."""

from __future__ import annotations

import contextlib
import math
import sys
from collections import Counter

import pytest
from typer.testing import CliRunner

from conftest import one_message  # noqa: E402
from sgemmlab.bench import models, results
from sgemmlab.bench.check import error_bound
from sgemmlab.bench.measure import Paired
from sgemmlab.cli import app
from sgemmlab.runtime import device

GPU = device.GPUInfo(index=0, name="NVIDIA H200", compute_capability=(9, 0), sm_count=132,
                     l2_bytes=60 << 20, max_smem_per_block_optin=232448)

REQUIRED = {"model", "phase", "mode", "batch", "ratio", "t_without_ms", "t_with_ms", "check",
            "served", "status", "precision", "baseline"}


class CountingSwitch:
    """A switch that computes nothing: it counts how often it is made and entered, and
    whether it is on now (the class's `active`)."""

    made: list = []
    active = False

    def __init__(self, precision="ieee"):
        self.precision = precision
        self.served, self.passed = Counter(), 0
        CountingSwitch.made.append(self)

    def __enter__(self):
        CountingSwitch.active = True
        self.served["mm"] += 1
        return self

    def __exit__(self, *exc):
        CountingSwitch.active = False


@pytest.fixture
def counting():
    CountingSwitch.made = []
    CountingSwitch.active = False
    return CountingSwitch


# -- pairing and ratio, on a simulated clock: no torch -----------------------------------------
def test_rounds_alternate_which_side_goes_first():
    order = []

    def time_side(use):
        order.append(use)
        return [1000.0 if use else 2000.0]

    pair = models.paired_rounds(time_side, 4)
    assert order == [False, True, True, False, False, True, True, False]
    assert pair.ratios == [2.0] * 4  # without / with
    assert pair.baseline_us == [[2000.0]] * 4 and pair.candidate_us == [[1000.0]] * 4


class Clock:
    """A Timer on simulated microseconds, moved only by the steps."""

    def __init__(self):
        self.now = 0.0

    def record(self):
        return self.now

    def synchronize(self):
        pass

    def elapsed_us(self, start, end):
        return end - start


def test_time_pair_warms_each_side_inside_its_switch_and_sizes_the_samples(counting):
    clock = Clock()
    seen = []

    def step(cost, use):
        def run():
            assert counting.active == use  # each side runs under its own setting, always
            seen.append(use)
            clock.now += cost
        return run

    setup = models.Setup(switch=counting, device="cpu", timer=clock, rounds=3, warmup=2,
                         sample_ms=10, max_reps=4)
    sides = models.Sides(counting, "ieee")
    steps = {False: step(2000.0, False), True: step(500.0, True)}
    probes = {False: lambda: "out-without", True: lambda: "out-with"}
    pair, reps, outs = models.time_pair(setup, sides, steps, probes=probes)
    assert outs == {False: "out-without", True: "out-with"}
    assert reps == 4  # 10 ms / 2 ms = 5 calls, capped at max_reps
    assert pair.ratios == [4.0] * 3  # the switch side is 4x faster: ratio > 1
    assert len(counting.made) == 1 + 3  # once to warm up, then once per round
    assert seen[:3] == [False] * 3 and seen[3:6] == [True] * 3  # 2 warm-up, 1 sizing call


def test_a_slower_switch_gives_a_ratio_below_one(counting):
    pair = Paired(candidate_us=[[3000.0]], baseline_us=[[1000.0]])
    sides = models.Sides(counting, "ieee")
    rec = models.pair_record(models._labels("encoder", "infer", "eager", 2), pair, 1, sides,
                             {"kind": "output", "ok": True})
    assert rec["ratio"] == pytest.approx(1 / 3)
    assert rec["t_without_ms"] == 1.0 and rec["t_with_ms"] == 3.0
    assert REQUIRED <= set(rec) and rec["status"] == "ok"
    assert rec["baseline"] == models.BASELINE and "target" not in rec


def test_sides_make_a_switch_per_entry_and_add_up_its_counters(counting):
    sides = models.Sides(counting, "tf32x3")
    with sides.on(False):
        assert not counting.active
    for _ in range(3):
        with sides.on(True):
            assert counting.active
    assert len(counting.made) == 3 and {m.precision for m in counting.made} == {"tf32x3"}
    assert sides.served == Counter({"mm": 3})


def test_a_failed_check_marks_the_record_failed(counting):
    pair = Paired(candidate_us=[[1.0]], baseline_us=[[1.0]])
    rec = models.pair_record(models._labels("linear", "linear", "b2b", 1), pair, 1,
                             models.Sides(counting, "ieee"), {"kind": "float64", "ok": False})
    assert rec["status"] == "failed"


@pytest.mark.parametrize("ratio, precision, met", [(1.9, "tf32x3", True), (1.7, "tf32x3", False),
                                                   (1.9, "ieee", None)])
def test_the_target_is_recorded_only_where_it_applies(counting, ratio, precision, met):
    pair = Paired(candidate_us=[[1000.0]], baseline_us=[[1000.0 * ratio]])
    rec = models.pair_record(models._labels("encoder", "train", "eager", 16), pair, 1,
                             models.Sides(counting, precision), {"kind": "loss", "ok": True})
    if met is None:
        assert "target" not in rec
    else:
        assert rec["target"] == {"ratio": 1.8, "met": met}


def test_the_model_bound_grows_with_layers_and_depth():
    assert models.model_bound(4096, 6) == 2 * 7 * error_bound(4096)
    assert models.model_bound(4096, 8) > models.model_bound(4096, 2)
    assert models.model_bound(11008, 2) > models.model_bound(4096, 2)
    assert models.model_bound(4096, 6, "tf32x3") == models.model_bound(4096, 6)


# -- summary -----------------------------------------------------------------------------------
def _rec(model, phase, mode, ratio, status="ok", **more):
    return {"model": model, "phase": phase, "mode": mode, "batch": 1, "ratio": ratio,
            "status": status, **more}


def test_summary_geomean_and_worst_per_group():
    recs = [_rec("linear", "linear", "b2b", 2.0, M=1, N=4096, K=4096),
            _rec("linear", "linear", "b2b", 0.5, M=2048, N=1024, K=1024),
            _rec("linear", "linear", "b2b", 1.0, M=8, N=3072, K=768),
            _rec("linear", "linear", "isolated", 1.2, M=1, N=4096, K=4096),
            _rec("llama", "decode", "graphs", 0.9, status="failed"),
            {"model": "llama", "phase": None, "mode": "eager", "batch": None,
             "status": "skipped", "skip_note": "no transformers"},
            {"model": "encoder", "phase": "train", "mode": "eager", "batch": 16,
             "status": "error", "error": "RuntimeError: out of memory"},
            _rec("encoder", "train", "eager", 1.9, target={"ratio": 1.8, "met": True})]
    s = models.summarize(recs)
    groups = {(g["model"], g["mode"]): g for g in s["groups"]}
    b2b = groups["linear", "b2b"]
    assert b2b["pairs"] == 3 and b2b["geomean"] == pytest.approx(1.0)
    assert b2b["worst"] == {"ratio": 0.5, "case": "2048×1024×1024"}
    assert groups["linear", "isolated"]["geomean"] == pytest.approx(1.2)
    assert ("encoder", "eager") in groups and len(s["groups"]) == 4
    assert s["failed_checks"] == ["llama decode graphs b1"]
    assert s["errors"] == ["encoder train eager b16: RuntimeError: out of memory"]
    assert s["skipped"] == ["llama: no transformers"]
    assert s["targets"][0]["met"] and s["targets"][0]["ratio_measured"] == 1.9
    lines = models.summary_lines(s)
    assert "linear b2b: geo-mean 1.000 over 3 pairs, worst 0.500 (2048×1024×1024)" in lines
    assert any(line.startswith("target: encoder train eager b1: 1.90×") for line in lines)
    assert any("check FAILED" in line for line in lines)


def test_geomean():
    assert models.geomean([1.0, 4.0]) == pytest.approx(2.0)
    assert models.geomean([0.5, 0.5, 8.0]) == pytest.approx(math.pow(2.0, 1 / 3))


def test_workload_names():
    assert models.workloads_for(["all"]) == list(models.WORKLOADS)
    assert models.workloads_for(["llama,linear", "linear"]) == ["linear", "llama"]
    with pytest.raises(KeyError, match="unknown model workload 'gpt'"):
        models.workloads_for(["gpt"])
    with pytest.raises(ValueError, match="ieee, fp32_emulated or tf32x3"):
        models.precision_of("tf32")


# -- transformers missing: a clean skip, and the results file --------------------------------
@pytest.fixture
def no_transformers(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import raises ImportError


def test_without_transformers_a_llama_workload_is_one_skip_record(no_transformers, counting):
    setup = models.Setup(switch=counting, device="cpu")
    recs = models.run_workloads(["llama", "llama-graphs"], setup)
    assert [(r["model"], r["status"]) for r in recs] == [("llama", "skipped"),
                                                         ("llama-graphs", "skipped")]
    assert "sgemmlab[models]" in recs[0]["skip_note"] and recs[1]["mode"] == "graphs"
    assert counting.made == []  # nothing ran


def test_run_writes_a_models_results_file(no_transformers, counting, monkeypatch, tmp_path):
    monkeypatch.setattr(device, "gpu_info", lambda index=0: GPU)
    monkeypatch.setenv("SGEMMLAB_RESULTS_DIR", str(tmp_path))
    seen = []
    run, path = models.run(["llama"], "tf32x3", seen.append, switch=counting, device="cpu")
    assert path.parent == tmp_path / "nvidia-h200" / "models" and path.name[0].isdigit()
    data = results.load(path)
    assert data["kind"] == "models" and data["method"]["precision"] == "tf32x3"
    assert data["method"]["baseline"] == models.BASELINE
    assert data["records"] == seen and data["summary"]["skipped"]


# -- the workloads on the CPU, tiny ------------------------------------------------------------
TINY = {
    "overhead": models.OverheadSpec(sizes=(16,), relu_width=16, calls=10, rounds=2),
    "linear": models.LinearSpec(ms=(1, 4), nks=((8, 16), (24, 8))),
    "encoder": models.EncoderSpec(32, 2, 4, 64, batch=2, seq=8),
    "llama": models.LlamaSpec(32, 2, 4, 64, vocab=128, prefill_batches=(1, 2),
                              decode_batches=(2,), prefill_tokens=8, prompt_tokens=4,
                              new_tokens=6),
    "llama-graphs": models.LlamaSpec(32, 2, 4, 64, vocab=128, decode_batches=(1,),
                                     mode="graphs", prompt_tokens=4, new_tokens=6),
}


def products_switch(torch, perturb: float = 0.0, sleep_s: float = 0.0):
    """A switch on the CPU: a TorchFunctionMode that counts the products (F.linear, mm,
    matmul, ...) it sees, can spoil them by `perturb` (relative) and slow them down."""
    import time

    from torch.overrides import TorchFunctionMode

    names = {"linear", "mm", "matmul", "addmm", "bmm", "baddbmm", "__matmul__"}

    class Switch(TorchFunctionMode):
        made: list = []

        def __init__(self, precision="ieee"):
            super().__init__()
            self.precision, self.served, self.passed = precision, Counter(), Counter()
            Switch.made.append(self)

        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if getattr(func, "__name__", "") in names:
                self.served[func.__name__] += 1
                if sleep_s:
                    time.sleep(sleep_s)
                if perturb:
                    with torch.no_grad():
                        out = out + perturb * out.abs().max()
            return out

    return Switch


@pytest.fixture
def torch_cpu():
    """torch on one thread: tiny ops on a busy machine otherwise wait on idle threads."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield torch
    torch.set_num_threads(threads)


def tiny_setup(switch, **more):
    return models.Setup(switch=switch, device="cpu", rounds=2, sample_ms=1, warmup=1,
                        flush=lambda: None, specs=TINY, **more)


def test_overhead_linear_and_encoder_records(torch_cpu):
    switch = products_switch(torch_cpu)
    recs = models.run_workloads(["overhead", "linear", "encoder"], tiny_setup(switch))
    assert all(REQUIRED <= set(r) for r in recs), [set(REQUIRED) - set(r) for r in recs]
    assert all(r["status"] == "ok" and r["check"]["ok"] for r in recs), recs
    over = [r for r in recs if r["model"] == "overhead"]
    assert [r["op"] for r in over] == ["F.linear+bias", "mm(x, W.t())", "relu"]
    assert over[0]["served"] == {"linear": over[0]["served"]["linear"]}
    assert over[2]["served"] == {} and over[2]["check"]["kind"] == "bitwise"
    assert all("extra_us" in r and r["timer"] == "host" for r in over)
    lin = [r for r in recs if r["model"] == "linear"]
    assert [(r["mode"], r["M"], r["N"], r["K"]) for r in lin] == [
        (mode, M, N, K) for N, K in ((8, 16), (24, 8)) for M in (1, 4)
        for mode in ("b2b", "isolated")]
    assert all(r["batch"] == r["M"] and r["check"]["kind"] == "float64" for r in lin)
    enc = [r for r in recs if r["model"] == "encoder"]
    assert [(r["phase"], r["mode"], r["batch"]) for r in enc] == [("train", "eager", 2),
                                                                  ("infer", "eager", 2)]
    train = enc[0]["check"]
    assert train["kind"] == "loss" and train["first_step_rel_diff"] == 0.0
    assert train["loss_with"] == train["loss_without"]
    assert all(r["served"] for r in recs if r.get("op") != "relu")
    # the switch is made once to warm up and once per round, for each record
    assert len(switch.made) == len(recs) * (1 + 2)


def test_a_switch_that_spoils_products_fails_the_checks(torch_cpu):
    recs = models.run_workloads(["linear", "encoder"], tiny_setup(
        products_switch(torch_cpu, perturb=1e-2)))
    assert recs and all(r["status"] == "failed" and not r["check"]["ok"] for r in recs)


def test_a_slow_switch_shows_a_ratio_below_one(torch_cpu):
    rec = models.run_workloads(["encoder"], tiny_setup(
        products_switch(torch_cpu, sleep_s=2e-3)))[1]
    assert rec["phase"] == "infer" and rec["ratio"] < 0.5
    assert rec["t_with_ms"] > rec["t_without_ms"]


def test_a_failing_workload_is_an_error_record_and_the_run_goes_on(torch_cpu):
    specs = {**TINY, "encoder": models.EncoderSpec(30, 1, 4, 64, batch=1, seq=4)}
    setup = models.Setup(switch=products_switch(torch_cpu), device="cpu", rounds=1,
                         sample_ms=1, warmup=1, flush=lambda: None, specs=specs)
    recs = models.run_workloads(["encoder", "linear"], setup)
    assert recs[0]["model"] == "encoder" and recs[0]["status"] == "error"
    assert "divisible" in recs[0]["error"]
    assert {r["model"] for r in recs[1:]} == {"linear"} and len(recs) == 1 + 8


def test_token_check(torch_cpu):
    torch = torch_cpu
    seq = torch.tensor([[5, 6, 7, 8, 9]])
    logits = [torch.tensor([[0.0, 1.0, 3.0]]), torch.tensor([[2.0, 1.9, 0.0]])]
    same = models.token_check(seq, logits, seq.clone(), [t.clone() for t in logits], 3, 1e-5)
    assert same["ok"] and same["tokens_equal"] and same["max_rel_diff_logits"] == 0.0
    other = torch.tensor([[5, 6, 7, 8, 4]])
    nudged = [logits[0].clone(), logits[1] + 1e-3]
    diff = models.token_check(seq, logits, other, nudged, 3, 1e-5)
    assert not diff["ok"] and not diff["tokens_equal"] and diff["first_diff_step"] == 1
    assert diff["margin_at_first_diff"] == pytest.approx(0.1)
    assert diff["max_rel_diff_logits"] == pytest.approx(1e-3 / 3.0, rel=1e-3)  # max|ref| 3


# -- Llama, with transformers ------------------------------------------------------------------
@pytest.fixture
def transformers(torch_cpu):
    return pytest.importorskip("transformers")


def test_llama_prefill_and_decode(transformers):
    import torch

    switch = products_switch(torch)
    recs = models.run_workloads(["llama"], tiny_setup(switch))
    assert [(r["phase"], r["mode"], r["batch"]) for r in recs] == [
        ("prefill", "eager", 1), ("prefill", "eager", 2), ("decode", "eager", 2)]
    assert all(r["status"] == "ok" for r in recs), recs
    assert all(REQUIRED <= set(r) and r["served"] for r in recs)
    assert recs[0]["check"]["kind"] == "logits" and recs[0]["tokens"] == 8
    dec = recs[2]
    assert dec["check"]["tokens_equal"] and dec["check"]["tokens"] == 2 * 6
    assert dec["new_tokens"] == 6 and dec["config"]["hidden"] == 32


def test_llama_graphs_compile_a_function_per_side_first_run_under_its_switch(transformers):
    import torch

    switch = products_switch(torch)
    compiled = []

    def fake_compile(fn, **options):
        entry = {"fn": fn, "options": options, "calls": 0, "first_under_switch": None}
        compiled.append(entry)

        def run(*args, **kwargs):
            if entry["first_under_switch"] is None:
                entry["first_under_switch"] = bool(torch.overrides._get_current_function_mode())
            entry["calls"] += 1
            return fn(*args, **kwargs)
        return run

    recs = models.run_workloads(["llama-graphs"], tiny_setup(switch, compile=fake_compile))
    assert len(recs) == 1 and recs[0]["status"] == "ok", recs
    assert recs[0]["mode"] == "graphs" and recs[0]["check"]["tokens_equal"]
    without, with_ = compiled
    assert without["fn"].__code__ is not with_["fn"].__code__  # no graph shared
    assert without["options"] == {"mode": "reduce-overhead", "fullgraph": True}
    assert (without["first_under_switch"], with_["first_under_switch"]) == (False, True)
    # the decode steps (5 after the prefill) of every generate go through the compiled one
    assert without["calls"] == with_["calls"] and without["calls"] % 5 == 0
    assert without["calls"] >= 5 * (1 + 1 + 1 + 2)  # warm-up, probe, sizing, two rounds


def test_the_static_cache_is_made_for_the_installed_transformers(transformers):
    model = models.build_llama(TINY["llama"], "cpu")
    assert models.static_cache(model, 2, 16) is not None
    assert models.cache_argument(model) in ("cache", "past_key_values")


# -- the command line --------------------------------------------------------------------------
def run_cli(*args):
    return CliRunner().invoke(app, list(args))


def one_line_error(result, *words):
    assert result.exit_code == 2, result.output
    text = one_message(result.output)
    for w in words:
        assert w in text


@pytest.fixture
def fake_models(monkeypatch, tmp_path):
    """`bench --model` with the GPU and the runner replaced."""
    from sgemmlab.cli import measure

    monkeypatch.setattr(device, "gpu_info", lambda index=0: GPU)
    monkeypatch.setattr(measure, "require_torch", lambda: None)
    asked = {}

    def fake_run(names, precision, on_record=None):
        asked.update(names=names, precision=precision)
        recs = [{**_rec("linear", "linear", "b2b", 1.25, M=1, N=4096, K=4096),
                 "t_without_ms": 0.05, "t_with_ms": 0.04,
                 "check": {"kind": "float64", "error_with": 1e-7, "ok": True},
                 "served": {"addmm": 40}}]
        if "llama" in names:
            recs.append({**_rec("llama", "decode", "eager", 0.8, status=asked.get("status",
                                                                                   "ok")),
                         "t_without_ms": 200.0, "t_with_ms": 250.0, "served": {"mm": 9},
                         "check": {"kind": "tokens", "tokens_equal": True, "ok": True,
                                   "max_rel_diff_logits": 1e-6}})
        for r in recs:
            if on_record:
                on_record(r)
        run = {"records": recs, "summary": models.summarize(recs)}
        return run, tmp_path / "models-x.json"

    monkeypatch.setattr(models, "run", fake_run)
    return asked


def test_model_option_repeats_and_expands(fake_models):
    result = run_cli("bench", "--model", "llama", "--model", "linear,overhead")
    assert result.exit_code == 0, result.output
    assert fake_models == {"names": ["overhead", "linear", "llama"], "precision": "ieee"}
    out = result.output
    assert "linear b2b 1×4096×4096: 0.05 ms without, 0.04 ms with: 1.250×" in out
    assert "linear b2b: geo-mean 1.250 over 1 pair" in out
    assert "without / with sgemmlab.torch_mode" in out and "results:" in out


def test_model_all_at_tf32x3(fake_models):
    result = run_cli("bench", "--model", "all", "--precision", "tf32x3", "--quiet")
    assert result.exit_code == 0, result.output
    assert fake_models == {"names": list(models.WORKLOADS), "precision": "tf32x3"}
    assert "0.05 ms without" not in result.output  # quiet: the table only


def test_a_failed_model_check_exits_non_zero(fake_models):
    fake_models["status"] = "failed"
    result = run_cli("bench", "--model", "llama")
    assert result.exit_code == 3 and "failed their check" in result.output


@pytest.mark.parametrize("args, words", [
    (["--model", "gpt2"], ["unknown model workload", "gpt2", "llama-graphs"]),
    (["--model", "llama", "--precision", "tf32"], ["ieee, fp32_emulated or tf32x3", "not FP32"]),
    (["--model", "llama", "--suite", "square", "-k", "auto"], ["--suite", "--kernel"]),
    (["--model", "linear", "--mode", "throughput"], ["--mode"]),
])
def test_model_usage_errors_before_the_gpu(monkeypatch, args, words):
    def refuse(index=0):
        raise AssertionError("the GPU was looked for before the arguments were checked")

    monkeypatch.setattr(device, "gpu_info", refuse)
    one_line_error(run_cli("bench", *args), *words)


def test_the_help_names_the_workloads():
    out = " ".join(run_cli("bench", "--help").output.split())
    assert "--model" in out and "llama-wide-graphs" in out


def test_no_context_switch_leaks(counting):
    """Sides.on(True) leaves the switch even when the measured code raises."""
    sides = models.Sides(counting, "ieee")
    with contextlib.suppress(RuntimeError), sides.on(True):
        raise RuntimeError("inside")
    assert not counting.active and sides.served == Counter({"mm": 1})
