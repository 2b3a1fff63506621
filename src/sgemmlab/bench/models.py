"""Model benchmarks: whole torch workloads with and without the switch (`sgemmlab bench --model`).

A practitioner turns sgemmlab on for a model with one line, `with sgemmlab.torch_mode():`.
What that buys — or costs — shows only in whole models: prefill and decode of a Llama,
a training step of a TransformerEncoder, a layer's F.linear at the shapes LLMs use, and
the host time a call pays. Each workload below is timed PAIRED in one run: the same
model, inputs and weights, once as torch runs it and once inside the switch.

    overhead           host µs per call, back to back: F.linear with bias and mm(x, W.t())
                       at 1×1024×1024 and 1×4096×4096, and relu on (1, 4096) (not a product:
                       it must cost nothing extra under the switch)
    linear             F.linear(x, W, bias) over 60 shapes, M in 1…2048 × (N, K) of Llama
                       and BERT layers; "b2b" (calls back to back) and "isolated" (the L2
                       flushed and the GPU idle before each call)
    encoder-small      nn.TransformerEncoder d 512 × 4 layers, 1 × 128 tokens
    encoder            nn.TransformerEncoder d 1024 × 6 layers, 16 × 512 tokens
    encoder-wide       nn.TransformerEncoder d 4096 × 2 layers, 4 × 256 tokens
                       (each: a training step — forward, MSE loss, backward, SGD step —
                       and an inference forward under no_grad)
    llama              LlamaForCausalLM, hidden 2048, 8 layers, 16 heads, MLP 5632, vocab
                       32000: prefill of 512 tokens at batch 1 and 8; greedy decode of 32
                       new tokens at batch 1 and 8 (one generate call: a 32-token prompt's
                       prefill, then 32 steps with the KV cache)
    llama-wide         the same at hidden 4096, 2 layers, 32 heads, MLP 11008; batch 1
    llama-graphs       llama's decode under CUDA graphs: transformers' static cache, each
    llama-wide-graphs  decode step torch.compile(mode="reduce-overhead")-d; batch 1 and 8
                       (llama), 1 (llama-wide)

The Llama workloads need transformers (pip install 'sgemmlab[models]'); without it each is
one "skipped" record. Weights are random (seeded): nothing is downloaded.

Method. Both sides see the same tensors. Round r times the side without the switch first
when r is even and the side with it first when r is odd (AB, BA, AB, …: neither always runs on
a GPU just warmed by the other); each side's sample is the time per call of `reps` calls
back to back, between CUDA events (`measure.time_launches`: the core every sgemmlab
number comes from), and the pair's ratio is the median over rounds of
t_without / t_with (> 1: the switch is faster). The switch is entered once per side and
round, outside the timed calls: its entry is not what a model pays per call. Before any
timing each side is warmed up (a product is planned on its first eager call; a CUDA graph
keeps the kernels of its capture, so each side compiles and captures its own model, with
its own switch setting) and its outputs are compared:

    prefill, infer   logits / outputs: max relative difference (check.relative_error)
    decode           tokens equal, and the logits up to the first differing token
    train            the first step's losses (both sides start from the same weights)
    linear           each side against float64 (check.error_bound(K), the gate)
    overhead         outputs against each other (relu: bit for bit)

A model's two sides are two FP32 computations of the same network, each within the FP32
bound of every product it makes; they may differ by twice that, compounded over its
layers: `model_bound`. A record whose check fails is still timed (the run is short and
the numbers explain the failure) but marked "failed"; the command then exits non-zero.

Precision. TF32 is off for both sides (allow_tf32 False, float32 matmul precision
"highest"). With `precision="tf32x3"` the switch runs FP32-accurate 3xTF32 tensor-core
products, with `precision="fp32_emulated"` Ozaki scheme II's where dispatch finds them
faster, and the baseline is still torch's exact FP32; records say which (`precision`,
`baseline`). The target this measures: the encoder's training step with the switch at
tf32x3 at least 1.8× torch's exact FP32 step (`TARGETS`), its loss within FP32's bound.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import gc
import math
import time
from typing import Any, Callable, Iterator

from .check import precision_bound, relative_error
from .llama import (  # noqa: F401 (the command and the tests name them here)
    _llama_cases,
    build_llama,
    cache_argument,
    static_cache,
    token_check,
)
from .workload import (  # noqa: F401 (re-exported for the command and tests)
    BASELINE,
    LINEAR_NK,
    PRECISIONS,
    SKIP_NO_TRANSFORMERS,
    TARGETS,
    Case,
    EncoderSpec,
    HostTimer,
    LinearSpec,
    LlamaSpec,
    OverheadSpec,
    Setup,
    Sides,
    Workload,
    _clamp,
    _counter,
    _diff_check,
    _labels,
    error_record,
    model_bound,
    pair_record,
    paired_rounds,
    precision_message,
    precision_of,
    skip_record,
    time_pair,
)


# -- overhead --------------------------------------------------------------------------------
def _host_us_per_call(setup: Setup, fn: Callable[[], Any], calls: int, sleep_s: float) -> float:
    """Host µs per call of `calls` calls back to back; on a GPU kept busy by a sleep kernel
    (measure.host_seconds_per_call), so no call waits for it and only host work is timed."""
    if setup.device == "cuda":
        import torch

        from .measure import host_seconds_per_call

        return host_seconds_per_call(torch, fn, calls, sleep_s) * 1e6
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e6


def _overhead_cases(setup: Setup, spec: OverheadSpec) -> Iterator[Case]:
    import torch
    import torch.nn.functional as F

    dev = setup.device
    g = torch.Generator(device=dev).manual_seed(0)
    paths: list[tuple[str, tuple, Callable[[], Any], float]] = []  # (op, M×N×K, fn, bound)
    for size in spec.sizes:
        x = torch.rand(1, size, device=dev, generator=g) - 0.5
        W = torch.rand(size, size, device=dev, generator=g) - 0.5
        b = torch.rand(size, device=dev, generator=g) - 0.5
        bound = 2 * precision_bound(size, setup.precision)
        paths.append(("F.linear+bias", (1, size, size),
                      functools.partial(F.linear, x, W, b), bound))
        paths.append(("mm(x, W.t())", (1, size, size),
                      functools.partial(torch.mm, x, W.t()), bound))
    r = torch.rand(1, spec.relu_width, device=dev, generator=g) - 0.5
    paths.append(("relu", (1, spec.relu_width, 0), functools.partial(torch.relu, r), 0.0))
    for op, (M, N, K), fn, bound in paths:
        labels = _labels("overhead", "overhead", "b2b", 1, op=op, M=M, N=N, K=K)
        yield Case(labels, functools.partial(_overhead_one, setup, spec, labels, fn, bound))


def _overhead_one(setup: Setup, spec: OverheadSpec, labels: dict, fn, bound: float) -> dict:
    sides = Sides(setup.switch, setup.precision)
    outs, loop_s = {}, 0.0
    for use in (False, True):
        with sides.on(use):
            for _ in range(max(setup.warmup, 20)):
                fn()
            outs[use] = fn()
            t0 = time.perf_counter()  # a loop the GPU may hold up: sizes the sleep
            for _ in range(spec.calls):
                fn()
            loop_s = max(loop_s, time.perf_counter() - t0)
    sleep_s = 2 * loop_s + 1e-3

    def time_side(use: bool) -> list[float]:
        with sides.on(use):
            return [_host_us_per_call(setup, fn, spec.calls, sleep_s)]

    pair = paired_rounds(time_side, spec.rounds)
    if bound == 0.0:  # not a product: the switch must leave it alone, bit for bit
        same = bool((outs[True] == outs[False]).all())
        check = {"kind": "bitwise", "equal": same, "ok": same}
    else:
        check = _diff_check("output", outs[False], outs[True], bound)
    us_without, us_with = pair.baseline_median_us, pair.candidate_median_us
    return pair_record(labels, pair, spec.calls, sides, check, timer="host",
                       us_without=us_without, us_with=us_with,
                       extra_us=us_with - us_without)


# -- linear ----------------------------------------------------------------------------------
def _linear_cases(setup: Setup, spec: LinearSpec) -> Iterator[Case]:
    import torch

    dev = setup.device
    g = torch.Generator(device=dev).manual_seed(0)
    for N, K in spec.nks:
        W = torch.rand(N, K, device=dev, generator=g) - 0.5
        b = torch.rand(N, device=dev, generator=g) - 0.5
        for M in spec.ms:
            x = torch.rand(M, K, device=dev, generator=g) - 0.5
            checked: dict = {}  # both modes of a shape share its one check
            for mode in spec.modes:
                labels = _labels("linear", "linear", mode, M, M=M, N=N, K=K)
                yield Case(labels, functools.partial(_linear_one, setup, spec, labels, x, W,
                                                     b, checked))
            del x
        del W, b


def _linear_one(setup: Setup, spec: LinearSpec, labels: dict, x, W, b, checked: dict) -> dict:
    import torch.nn.functional as F

    sides = Sides(setup.switch, setup.precision)
    fn = functools.partial(F.linear, x, W, b)
    K = labels["K"]
    isolated = labels["mode"] == "isolated"
    pair, reps, outs = time_pair(
        setup, sides, {False: fn, True: fn}, probes={False: fn, True: fn},
        mode="isolated" if isolated else "throughput",
        flush=setup.flusher() if isolated else None, sample_us=spec.sample_us,
        calls=spec.isolated_calls if isolated else spec.b2b_calls)
    if not checked:
        ref = x.double() @ W.double().t() + b.double()
        bound = precision_bound(K, setup.precision)
        err_with, err_without = relative_error(outs[True], ref), relative_error(outs[False], ref)
        # the gate is the switch's own error; torch's is shown beside it
        checked.update(kind="float64", error_with=err_with, error_without=err_without,
                       bound=bound, ok=err_with <= bound)
    return pair_record(labels, pair, reps, sides, dict(checked))


# -- nn.TransformerEncoder -------------------------------------------------------------------
def _encoder_cases(name: str, setup: Setup, spec: EncoderSpec) -> Iterator[Case]:
    import torch

    dev = setup.device
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(spec.d, spec.heads, spec.ff, dropout=0.0,
                                             batch_first=True, device=dev)
    base = torch.nn.TransformerEncoder(layer, spec.layers, enable_nested_tensor=False)
    g = torch.Generator(device=dev).manual_seed(1)
    x = torch.randn(spec.batch, spec.seq, spec.d, device=dev, generator=g)
    target = torch.randn(spec.batch, spec.seq, spec.d, device=dev, generator=g)
    bound = model_bound(max(spec.d, spec.ff), spec.layers, setup.precision)
    config = {"d": spec.d, "layers": spec.layers, "heads": spec.heads, "ff": spec.ff,
              "seq": spec.seq}
    for phase, measure in (("train", _encoder_train), ("infer", _encoder_infer)):
        labels = _labels(name, phase, "eager", spec.batch, config=config)
        yield Case(labels, functools.partial(measure, setup, spec, labels, base, x, target,
                                             bound))


def _encoder_train(setup: Setup, spec: EncoderSpec, labels: dict, base, x, target,
                   bound: float) -> dict:
    import torch
    import torch.nn.functional as F

    sides = Sides(setup.switch, setup.precision)
    losses: dict[bool, list] = {False: [], True: []}

    def make_step(use: bool):
        model = copy.deepcopy(base).train()  # both sides start from the same weights
        opt = torch.optim.SGD(model.parameters(), lr=spec.lr)

        def step():
            opt.zero_grad(set_to_none=True)
            loss = F.mse_loss(model(x), target)
            loss.backward()
            opt.step()
            losses[use].append(loss.detach())  # read after the timing: no sync in it
        return step

    steps = {use: make_step(use) for use in (False, True)}
    pair, reps, _ = time_pair(setup, sides, steps)
    l0, l1 = ([float(v) for v in losses[use]] for use in (False, True))
    first = abs(l1[0] - l0[0]) / abs(l0[0]) if l0[0] else abs(l1[0])
    drift = max(abs(a - b) / abs(a) if a else abs(b) for a, b in zip(l0, l1))
    check = {"kind": "loss", "first_step_rel_diff": first, "bound": bound,
             "ok": first <= bound, "loss_without": l0[0], "loss_with": l1[0],
             "max_rel_diff_any_step": drift, "steps_compared": min(len(l0), len(l1))}
    return pair_record(labels, pair, reps, sides, check)


def _encoder_infer(setup: Setup, spec: EncoderSpec, labels: dict, base, x, target,
                   bound: float) -> dict:
    import torch

    model = copy.deepcopy(base).eval()
    sides = Sides(setup.switch, setup.precision)

    def step():
        with torch.no_grad():
            return model(x)

    pair, reps, outs = time_pair(setup, sides, {False: step, True: step},
                                 probes={False: step, True: step})
    return pair_record(labels, pair, reps, sides, _diff_check("output", outs[False],
                                                             outs[True], bound))


# -- the catalogue ---------------------------------------------------------------------------
LLAMA = LlamaSpec(hidden=2048, layers=8, heads=16, intermediate=5632,
                  prefill_batches=(1, 8), decode_batches=(1, 8))
LLAMA_WIDE = LlamaSpec(hidden=4096, layers=2, heads=32, intermediate=11008,
                       prefill_batches=(1,), decode_batches=(1,))


def _encoder(name: str):
    return lambda setup, spec: _encoder_cases(name, setup, spec)


def _llama(name: str):
    return lambda setup, spec: _llama_cases(name, setup, spec)


#: name -> workload, in the order `all` runs them (the compiled ones last: they take longest)
WORKLOADS: dict[str, Workload] = {
    "overhead": Workload("host µs per call: F.linear, mm, relu", _overhead_cases,
                         OverheadSpec()),
    "linear": Workload("F.linear over 60 shapes, b2b and isolated", _linear_cases,
                       LinearSpec()),
    "encoder-small": Workload("TransformerEncoder d512×4, 1×128", _encoder("encoder-small"),
                              EncoderSpec(512, 4, 8, 2048, batch=1, seq=128)),
    "encoder": Workload("TransformerEncoder d1024×6, 16×512", _encoder("encoder"),
                        EncoderSpec(1024, 6, 16, 4096, batch=16, seq=512)),
    "encoder-wide": Workload("TransformerEncoder d4096×2, 4×256", _encoder("encoder-wide"),
                             EncoderSpec(4096, 2, 32, 16384, batch=4, seq=256)),
    "llama": Workload("Llama 2048×8: prefill 512, decode 32; batch 1, 8", _llama("llama"),
                      LLAMA),
    "llama-wide": Workload("Llama 4096×2: prefill 512, decode 32; batch 1",
                           _llama("llama-wide"), LLAMA_WIDE),
    "llama-graphs": Workload("llama's decode, CUDA graphs (static cache, compiled)",
                             _llama("llama-graphs"),
                             dataclasses.replace(LLAMA, prefill_batches=(), mode="graphs")),
    "llama-wide-graphs": Workload("llama-wide's decode, CUDA graphs",
                                  _llama("llama-wide-graphs"),
                                  dataclasses.replace(LLAMA_WIDE, prefill_batches=(),
                                                      mode="graphs")),
}


def workloads_for(names: list[str]) -> list[str]:
    """Workload names from the command line (repeated or comma-separated; 'all'), in
    WORKLOADS' order, each once. KeyError naming the choices for an unknown one."""
    asked = [n.strip() for text in names for n in text.split(",") if n.strip()]
    for n in asked:
        if n != "all" and n not in WORKLOADS:
            raise KeyError(f"unknown model workload {n!r}: choose from "
                           f"{', '.join(WORKLOADS)} or all")
    return [n for n in WORKLOADS if "all" in asked or n in asked]


# -- running them ----------------------------------------------------------------------------
@contextlib.contextmanager
def fp32_everywhere(device: str):
    """TF32 off for the run (both sides: the baseline is torch's exact FP32), restored after."""
    if device != "cuda":
        yield
        return
    import torch

    tf32, prec = torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(prec)
        torch.backends.cuda.matmul.allow_tf32 = tf32


def _release(device: str) -> None:
    """What one workload left behind goes before the next: models, compiled graphs."""
    gc.collect()
    if device == "cuda":
        import torch

        torch._dynamo.reset()
        torch.cuda.empty_cache()


def run_workloads(names: list[str], setup: Setup,
                  on_record: Callable[[dict], None] | None = None) -> list[dict]:
    """Every case of every workload named, one record each. A case that raises becomes an
    "error" record (and so does a workload whose models cannot be built); the others go on."""
    records: list[dict] = []

    def emit(rec: dict) -> None:
        records.append(rec)
        if on_record:
            on_record(rec)

    with fp32_everywhere(setup.device):
        for name in names:
            wl = WORKLOADS[name]
            cases = wl.cases(setup, setup.specs.get(name, wl.spec))
            while True:
                try:
                    case = next(cases)
                except StopIteration:
                    break
                except Exception as exc:  # building the workload failed: the rest of it too
                    emit(error_record(_labels(name, None, None, None), exc))
                    break
                try:
                    rec = case.measure()
                except Exception as exc:
                    rec = error_record(case.labels, exc)
                emit(rec)
            del cases
            _release(setup.device)
    return records


# -- summary and table -----------------------------------------------------------------------
def case_label(rec: dict) -> str:
    if "M" in rec:
        op = f"{rec['op']} " if rec.get("op") else ""
        return f"{op}{rec['M']}×{rec['N']}×{rec['K']}" if rec.get("K") else \
            f"{op}{rec['M']}×{rec['N']}"
    return f"b{rec['batch']}" if rec.get("batch") is not None else "-"


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def summarize(records: list[dict]) -> dict:
    """Per workload, phase and timing mode: how many pairs, the geometric mean of their
    ratios and the worst (lowest) one, with its case; and the run's failures and targets."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        if isinstance(r.get("ratio"), (int, float)) and r["ratio"] > 0:
            groups.setdefault((r["model"], r["phase"], r["mode"]), []).append(r)
    rows = []
    for (model, phase, mode), recs in groups.items():
        worst = min(recs, key=lambda r: r["ratio"])
        rows.append({"model": model, "phase": phase, "mode": mode, "pairs": len(recs),
                     "geomean": geomean([r["ratio"] for r in recs]),
                     "worst": {"ratio": worst["ratio"], "case": case_label(worst)}})
    return {"groups": rows,
            "failed_checks": [_where(r) for r in records if r.get("status") == "failed"],
            "errors": [f"{_where(r)}: {r['error']}" for r in records
                       if r.get("status") == "error"],
            "skipped": [f"{r['model']}: {r['skip_note']}" for r in records
                        if r.get("status") == "skipped"],
            "targets": [{"case": _where(r), **r["target"], "ratio_measured": r["ratio"]}
                        for r in records if "target" in r]}


def _where(r: dict) -> str:
    """A record's place in words: 'llama decode graphs b8', 'linear b2b 1×4096×4096'."""
    phase = r.get("phase") if r.get("phase") != r.get("model") else None
    return " ".join(str(v) for v in (r.get("model"), phase, r.get("mode"), case_label(r))
                    if v not in (None, "-"))


def summary_lines(summary: dict) -> list[str]:
    out = [f"{_where({**g, 'batch': None})}: geo-mean {g['geomean']:.3f} over {g['pairs']} "
           f"pair{'s' if g['pairs'] != 1 else ''}, worst {g['worst']['ratio']:.3f} "
           f"({g['worst']['case']})" for g in summary["groups"]]
    out += [f"target: {t['case']}: {t['ratio_measured']:.2f}× (wants ≥ {t['ratio']}×): "
            f"{'met' if t['met'] else 'NOT met'}" for t in summary["targets"]]
    out += [f"skipped {s}" for s in summary["skipped"]]
    out += [f"check FAILED: {s}" for s in summary["failed_checks"]]
    out += [f"error: {s}" for s in summary["errors"]]
    return out


def _check_cell(rec: dict) -> str:
    c = rec.get("check")
    if not isinstance(c, dict):
        return {"error": "ERROR", "skipped": "skipped"}.get(rec.get("status", ""), "-")
    value = next((c[k] for k in ("max_rel_diff", "max_rel_diff_logits", "first_step_rel_diff",
                                 "error_with") if k in c), None)
    word = "ok" if c["ok"] else "FAIL"
    if c["kind"] == "tokens" and not c["tokens_equal"]:
        word = "FAIL tokens"
    return word if value is None else f"{word} {value:.1e}"


def progress_line(rec: dict) -> str:
    """One line per record as it comes (the table follows at the end)."""
    head = f"{_where(rec)}:"
    if rec.get("status") == "error":
        return f"{head} ERROR {rec['error'][:160]}"
    if rec.get("status") == "skipped":
        return f"{head} skipped: {rec['skip_note']}"
    return (f"{head} {rec['t_without_ms']:.4g} ms without, {rec['t_with_ms']:.4g} ms with: "
            f"{rec['ratio']:.3f}× ({_check_cell(rec)})")


def table(records: list[dict], title: str):
    """The rich Table of a run's records: each pair's times, ratio and check."""
    from rich.table import Table

    t = Table(title=title)
    for i, head in enumerate(("workload", "phase", "mode", "case", "without ms", "with ms",
                              "ratio", "check", "served")):
        t.add_column(head, justify="left" if i < 4 else "right")
    for r in records:
        timed = isinstance(r.get("ratio"), (int, float))
        cells = [f"{r[k]:.4g}" if timed else "-" for k in ("t_without_ms", "t_with_ms")]
        style = {"failed": "red", "error": "red", "skipped": "dim"}.get(r.get("status", ""))
        t.add_row(str(r.get("model")), str(r.get("phase") or "-"), str(r.get("mode") or "-"),
                  case_label(r), *cells, f"{r['ratio']:.3f}" if timed else "-", _check_cell(r),
                  str(sum(r.get("served", {}).values())) if timed else "-", style=style)
    return t


def run(names: list[str], precision: str = "ieee",
        on_record: Callable[[dict], None] | None = None, device_id: int = 0,
        **setup_options) -> tuple[dict, Any]:
    """The workloads `names` on this GPU, written to results/<gpu>/models/<stamp>.json
    after each workload (a run stopped early keeps what it measured): (run dict, path)."""
    from ..runtime.device import gpu_info
    from . import results

    gpu = gpu_info(device_id)
    setup = Setup(precision=precision, l2_bytes=gpu.l2_bytes, **setup_options)
    method = {"pairing": "rounds alternate which side goes first (without, with; with, "
                         "without; ...)", "rounds": setup.rounds,
              "sample_ms": setup.sample_ms, "max_calls_per_sample": setup.max_reps,
              "warmup": setup.warmup, "timer": "CUDA events around a sample's calls "
              "(overhead: host time, the GPU kept busy)", "precision": precision,
              "baseline": BASELINE, "tf32": False,
              "workloads": {n: WORKLOADS[n].what for n in names}}
    run_ = results.new_run("models", gpu, method)
    name = f"models-{results.stamp()}"
    path = None
    for workload in names:
        run_["records"] += run_workloads([workload], setup, on_record)
        run_["summary"] = summarize(run_["records"])
        path = results.write(run_, gpu.slug, name)
    return run_, path
