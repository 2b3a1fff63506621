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
products and the baseline is still torch's exact FP32; records say which (`precision`,
`baseline`). The target this measures: the encoder's training step with the switch at
tf32x3 at least 1.8× torch's exact FP32 step (`TARGETS`), its loss within FP32's bound.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import gc
import itertools
import math
import time
import types
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from .check import precision_bound, relative_error
from .measure import Paired, median, time_launches

PRECISIONS = ("ieee", "tf32x3")
BASELINE = "torch FP32 (TF32 off)"
#: (workload, phase, switch precision) -> the ratio it is meant to reach
TARGETS = {("encoder", "train", "tf32x3"): 1.8}
SKIP_NO_TRANSFORMERS = ("transformers is not installed: the Llama workloads need it "
                        "(pip install 'sgemmlab[models]')")


# -- the workloads' sizes -------------------------------------------------------------------
@dataclass(frozen=True)
class LlamaSpec:
    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab: int = 32000
    prefill_batches: tuple[int, ...] = ()
    decode_batches: tuple[int, ...] = ()
    mode: str = "eager"  # "graphs": decode with CUDA graphs (prefill_batches unused)
    prefill_tokens: int = 512
    prompt_tokens: int = 32
    new_tokens: int = 32


@dataclass(frozen=True)
class EncoderSpec:
    d: int
    layers: int
    heads: int
    ff: int
    batch: int
    seq: int
    lr: float = 1e-3


#: (N, K) of F.linear's weight: Llama-2-7B's attention, MLP up and down, Llama-3-8B's MLP up,
#: a 1024-wide layer, BERT-base's MLP up
LINEAR_NK = ((4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (1024, 1024),
             (3072, 768))


@dataclass(frozen=True)
class LinearSpec:
    ms: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 512, 2048)
    nks: tuple[tuple[int, int], ...] = LINEAR_NK
    modes: tuple[str, ...] = ("b2b", "isolated")
    sample_us: float = 5000.0  # a side's sample takes about this long...
    b2b_calls: tuple[int, int] = (10, 200)  # ...within these many calls
    isolated_calls: tuple[int, int] = (3, 10)


@dataclass(frozen=True)
class OverheadSpec:
    sizes: tuple[int, ...] = (1024, 4096)  # 1 × size × size
    relu_width: int = 4096
    calls: int = 200  # calls per sample
    rounds: int = 9  # host time is noisier than GPU time


@dataclass(frozen=True)
class Workload:
    what: str
    cases: Callable[..., Iterator["Case"]]
    spec: Any


# -- what every workload shares ------------------------------------------------------------
@dataclass
class Setup:
    """Where and how the workloads run. The tests run them on the CPU with tiny specs, a
    stand-in switch and no compile."""

    switch: Callable[..., Any] | None = None  # None: sgemmlab.torch_mode
    precision: str = "ieee"
    device: str = "cuda"
    rounds: int = 5
    sample_ms: float = 100.0  # a model side's sample: about this long, 1 to max_reps calls
    max_reps: int = 20
    warmup: int = 2
    timer: Any = None  # measure.CudaTimer on a GPU, HostTimer elsewhere
    flush: Callable[[], None] | None = None  # isolated mode's L2 flush (L2Flusher on a GPU)
    l2_bytes: int = 0
    compile: Callable[..., Any] | None = None  # None: torch.compile
    specs: dict[str, Any] = field(default_factory=dict)  # workload -> spec, over the defaults

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            raise ValueError(precision_message(self.precision))
        if self.switch is None:
            import sgemmlab

            self.switch = sgemmlab.torch_mode
        if self.timer is None:
            from .measure import CudaTimer

            self.timer = CudaTimer() if self.device == "cuda" else HostTimer()

    def flusher(self) -> Callable[[], None]:
        if self.flush is None:
            from .measure import L2Flusher

            self.flush = L2Flusher(self.l2_bytes)
        return self.flush

    def torch_compile(self, fn, **options):
        import torch

        return (self.compile or torch.compile)(fn, **options)


class HostTimer:
    """measure.Timer on the host clock, for a CPU (the tests): each mark waits for the
    device, so the time between two marks is the work between them."""

    def __init__(self, synchronize: Callable[[], None] = lambda: None):
        self.synchronize = synchronize

    def record(self) -> float:
        self.synchronize()
        return time.perf_counter()

    def elapsed_us(self, start: float, end: float) -> float:
        return (end - start) * 1e6


def _counter(value) -> Counter:
    if isinstance(value, Mapping):
        return Counter(value)
    if isinstance(value, int) and value:  # a total without the names
        return Counter({"(all)": value})
    return Counter()


class Sides:
    """The two sides of a pair: without the switch (nothing entered) and with it. Each
    entry makes a new switch object; the counters of all of them (`served`: what it
    computed, `passed`: what it gave back to torch) add up here."""

    def __init__(self, switch: Callable[..., Any], precision: str):
        self.switch, self.precision = switch, precision
        self.served: Counter = Counter()
        self.passed: Counter = Counter()

    @contextlib.contextmanager
    def on(self, use: bool):
        if not use:
            yield
            return
        mode = self.switch(precision=self.precision)
        entered = None
        try:
            with mode as entered:
                yield
        finally:
            src = mode if hasattr(mode, "served") else entered
            self.served += _counter(getattr(src, "served", None))
            self.passed += _counter(getattr(src, "passed", None))


def paired_rounds(time_side: Callable[[bool], list[float]], rounds: int) -> Paired:
    """`rounds` rounds of both sides: round r times the side without the switch first
    when r is even, the side with it first when r is odd. `time_side(with_switch)` gives
    a side's samples (µs per call). The switch is the candidate, torch the baseline.
    (measure.grouped_rounds takes one launch function per side; here a side is a switch
    setting held through its round, which a launch entering it per call would time.)"""
    out = Paired()
    for r in range(rounds):
        got = {}
        for use in ((False, True) if r % 2 == 0 else (True, False)):
            got[use] = time_side(use)
        out.baseline_us.append(got[False])
        out.candidate_us.append(got[True])
    return out


def _clamp(x: float, lo: int, hi: int) -> int:
    return max(lo, min(hi, int(x)))


def time_pair(setup: Setup, sides: Sides, steps: Mapping[bool, Callable[[], Any]], *,
              probes: Mapping[bool, Callable[[], Any]] | None = None, mode: str = "throughput",
              flush: Callable[[], None] | None = None, sample_us: float | None = None,
              calls: tuple[int, int] | None = None) -> tuple[Paired, int, dict]:
    """Warm each side up inside its switch setting, probe its outputs there (what the
    check compares), then time both in paired rounds. (pair, calls per sample, probed
    outputs by side.) `mode` is measure's: "throughput" (calls back to back, one sample
    per round) or "isolated" (each call alone after `flush`)."""
    sample_us = setup.sample_ms * 1e3 if sample_us is None else sample_us
    lo, hi = calls or (1, setup.max_reps)
    outs, one = {}, {}
    for use in (False, True):
        with sides.on(use):
            for _ in range(setup.warmup):
                steps[use]()
            if probes:
                outs[use] = probes[use]()
            one[use] = median(time_launches(steps[use], 1, flush, mode, setup.timer))
    reps = _clamp(sample_us / max(*one.values(), 1e-3), lo, hi)

    def time_side(use: bool) -> list[float]:
        with sides.on(use):
            return time_launches(steps[use], reps, flush, mode, setup.timer)

    return paired_rounds(time_side, setup.rounds), reps, outs


def model_bound(depth: int, layers: int, precision: str = "ieee") -> float:
    """How far two FP32 runs of a network of `layers` layers, whose deepest product sums
    `depth` terms, may differ: twice one product's bound (one for each side), once for
    each layer and once for the head."""
    return 2 * (layers + 1) * precision_bound(depth, precision)


# -- records ---------------------------------------------------------------------------------
@dataclass
class Case:
    """One record to come: its labels (known before it runs) and how to measure it."""

    labels: dict
    measure: Callable[[], dict]


def _labels(model: str, phase: str | None, mode: str | None, batch: int | None,
            **more) -> dict:
    return {"model": model, "phase": phase, "mode": mode, "batch": batch, **more}


def pair_record(labels: dict, pair: Paired, reps: int, sides: Sides, check: dict,
                **more) -> dict:
    """A timed record: the labels, both sides' times, their ratio (t_without / t_with:
    > 1 means the switch is faster), the check and the switch's counters."""
    ratios = pair.ratios
    ratio = median(ratios)
    rec = {**labels, "status": "ok" if check["ok"] else "failed",
           "ratio": ratio, "ratio_min": min(ratios), "ratio_max": max(ratios),
           "t_without_ms": pair.baseline_median_us / 1e3,
           "t_with_ms": pair.candidate_median_us / 1e3,
           "check": check, "served": dict(sides.served), "passed": dict(sides.passed),
           "precision": sides.precision, "baseline": BASELINE,
           "rounds": len(ratios), "calls_per_sample": reps, "round_ratios": ratios,
           "times_without_us": pair.baseline_us, "times_with_us": pair.candidate_us, **more}
    target = TARGETS.get((labels["model"], labels["phase"], sides.precision))
    if target is not None:
        rec["target"] = {"ratio": target, "met": ratio >= target and check["ok"]}
    return rec


def error_record(labels: dict, exc: BaseException) -> dict:
    return {**labels, "status": "error", "error": f"{type(exc).__name__}: {exc}"[:2000]}


def skip_record(labels: dict, why: str) -> dict:
    return {**labels, "status": "skipped", "skip_note": why}


def _diff_check(kind: str, without, with_, bound: float, **more) -> dict:
    rel = relative_error(with_, without)
    return {"kind": kind, "max_rel_diff": rel, "bound": bound, "ok": rel <= bound, **more}


# -- overhead --------------------------------------------------------------------------------
def _host_us_per_call(setup: Setup, fn: Callable[[], Any], calls: int, sleep_s: float) -> float:
    """Host µs per call of `calls` calls back to back; on a GPU kept busy by a sleep kernel
    (overhead.py's method), so no call waits for it and only host work is timed."""
    if setup.device == "cuda":
        import torch

        from .overhead import host_seconds_per_call

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


# -- Llama -----------------------------------------------------------------------------------
def _llama_cases(name: str, setup: Setup, spec: LlamaSpec) -> Iterator[Case]:
    try:
        import transformers  # noqa: F401
    except ImportError:
        yield Case(_labels(name, None, spec.mode, None),
                   functools.partial(skip_record, _labels(name, None, spec.mode, None),
                                     SKIP_NO_TRANSFORMERS))
        return
    import torch

    model = build_llama(spec, setup.device)
    config = {"hidden": spec.hidden, "layers": spec.layers, "heads": spec.heads,
              "intermediate": spec.intermediate, "vocab": spec.vocab,
              "attention": getattr(model.config, "_attn_implementation", None)}
    bound = model_bound(max(spec.hidden, spec.intermediate), spec.layers, setup.precision)
    g = torch.Generator(device=setup.device).manual_seed(1)
    if spec.mode == "eager":
        for batch in spec.prefill_batches:
            ids = torch.randint(3, spec.vocab, (batch, spec.prefill_tokens),
                                device=setup.device, generator=g)
            labels = _labels(name, "prefill", "eager", batch, tokens=spec.prefill_tokens,
                             config=config)
            yield Case(labels, functools.partial(_llama_prefill, setup, labels, model, ids,
                                                 bound))
    for batch in spec.decode_batches:
        prompt = torch.randint(3, spec.vocab, (batch, spec.prompt_tokens),
                               device=setup.device, generator=g)
        labels = _labels(name, "decode", spec.mode, batch, prompt_tokens=spec.prompt_tokens,
                         new_tokens=spec.new_tokens, config=config)
        yield Case(labels, functools.partial(_llama_decode, setup, spec, labels, model, prompt,
                                             bound))


def build_llama(spec: LlamaSpec, device: str):
    """A LlamaForCausalLM of `spec`'s sizes with random weights (seed 0), float32, eval."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=spec.vocab, hidden_size=spec.hidden,
                         intermediate_size=spec.intermediate, num_hidden_layers=spec.layers,
                         num_attention_heads=spec.heads, num_key_value_heads=spec.heads,
                         max_position_embeddings=max(2048, spec.prefill_tokens,
                                                     spec.prompt_tokens + spec.new_tokens),
                         pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    with torch.device(device):  # initialised where it runs: 2-3 GB of weights
        model = LlamaForCausalLM(config)
    return model.to(device=device, dtype=torch.float32).eval()


def _llama_prefill(setup: Setup, labels: dict, model, ids, bound: float) -> dict:
    import torch

    sides = Sides(setup.switch, setup.precision)

    def step():
        with torch.no_grad():
            return model(input_ids=ids).logits

    pair, reps, outs = time_pair(setup, sides, {False: step, True: step},
                                 probes={False: step, True: step})
    check = _diff_check("logits", outs[False], outs[True], bound)
    del outs
    return pair_record(labels, pair, reps, sides, check)


def _generate_kwargs(spec: LlamaSpec, prompt) -> dict:
    import torch

    n = spec.new_tokens
    return {"attention_mask": torch.ones_like(prompt), "do_sample": False,
            "max_new_tokens": n, "min_new_tokens": n, "pad_token_id": 0}


def _llama_decode(setup: Setup, spec: LlamaSpec, labels: dict, model, prompt,
                  bound: float) -> dict:
    sides = Sides(setup.switch, setup.precision)
    kw = _generate_kwargs(spec, prompt)
    if spec.mode == "graphs":
        # a captured graph keeps the kernels of its capture: each side gets its own model
        # copy, compiled function and static cache, first run with its own switch setting
        gens = {use: graphs_generate(setup, copy.deepcopy(model), prompt, kw,
                                     tag="with" if use else "without")
                for use in (False, True)}
    else:
        gens = {use: functools.partial(model.generate, prompt, **kw) for use in (False, True)}

    def probe(use: bool):
        out = gens[use](return_dict_in_generate=True, output_logits=True)
        return out.sequences, [t.clone() for t in out.logits]

    pair, reps, outs = time_pair(setup, sides, gens,
                                 probes={use: functools.partial(probe, use)
                                         for use in (False, True)})
    check = token_check(*outs[False], *outs[True], spec.prompt_tokens, bound)
    return pair_record(labels, pair, reps, sides, check)


def token_check(seq_without, logits_without, seq_with, logits_with, prompt_tokens: int,
                bound: float) -> dict:
    """Greedy decode's check: the same tokens on both sides, and the logits within the
    bound up to the first token that differs (after it, the two sides read different
    text). Where tokens differ, the baseline's margin between its top two logits at that
    step says whether it was a near tie."""
    import torch

    new_without, new_with = seq_without[:, prompt_tokens:], seq_with[:, prompt_tokens:]
    equal = bool(new_without.shape == new_with.shape and torch.equal(new_without, new_with))
    steps = min(new_without.shape[1], new_with.shape[1], len(logits_without), len(logits_with))
    differ = (new_without[:, :steps] != new_with[:, :steps]).any(dim=0).nonzero()
    upto = int(differ[0]) + 1 if len(differ) else steps
    rel = relative_error(torch.stack(logits_with[:upto], 1),
                         torch.stack(logits_without[:upto], 1))
    out = {"kind": "tokens", "tokens_equal": equal, "tokens": int(new_without.numel()),
           "max_rel_diff_logits": rel, "bound": bound, "ok": equal and rel <= bound}
    if not equal and len(differ):
        top2 = logits_without[upto - 1].double().topk(2, dim=-1).values
        out["first_diff_step"] = upto - 1
        out["margin_at_first_diff"] = float((top2[:, 0] - top2[:, 1]).min())
    return out


def _decode_forward(model, *args, **kwargs):
    return type(model).forward(model, *args, **kwargs)


def _own_code(fn: Callable, tag: str) -> Callable:
    """A copy of `fn` with a code object of its own. torch.compile keeps what it compiled
    (and so the CUDA graph captured from it) on the code object of the function it
    compiles; two sides compiled from copies never share a graph."""
    name = f"{fn.__name__}_{tag}"
    code = fn.__code__.replace(co_name=name, co_qualname=name)
    return types.FunctionType(code, fn.__globals__, name)


_compiled_serial = itertools.count()  # a new name for every compiled function


def graphs_generate(setup: Setup, model, prompt, kw: dict, tag: str) -> Callable[..., Any]:
    """model.generate with a static KV cache whose decode steps run a function compiled
    with mode="reduce-overhead" (CUDA graphs); the prefill stays eager, as transformers'
    own generate-time compile does it. A call resets the cache and returns generate's
    result."""
    import torch

    eager = model.forward
    step = setup.torch_compile(_own_code(_decode_forward, f"{tag}_{next(_compiled_serial)}"),
                               mode="reduce-overhead", fullgraph=True)

    @functools.wraps(eager)  # generate reads forward's signature
    def forward(*args, **kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None or ids.shape[-1] != 1:
            return eager(*args, **kwargs)
        # a new step: the last one's outputs, which generate has copied, may be overwritten
        torch.compiler.cudagraph_mark_step_begin()
        return step(model, *args, **kwargs)

    model.forward = forward
    extra = dict(kw)
    from transformers import GenerationConfig

    if hasattr(GenerationConfig(), "disable_compile"):  # no second compile of its own
        extra["disable_compile"] = True
    cache = static_cache(model, prompt.shape[0], prompt.shape[1] + kw["max_new_tokens"])
    if cache is None:
        extra["cache_implementation"] = "static"  # generate's own (a new one each call)
    else:
        extra[cache_argument(model)] = cache

    def generate(**more):
        if cache is not None:
            cache.reset()
        return model.generate(prompt, **extra, **more)
    return generate


def cache_argument(model) -> str:
    """The name under which forward takes the KV cache: past_key_values in transformers
    4, cache in 5."""
    import inspect

    params = inspect.signature(type(model).forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def static_cache(model, batch: int, length: int):
    """One StaticCache for every call (its tensors keep their addresses, which a CUDA
    graph needs), made with the arguments this transformers' StaticCache takes; None if
    it cannot be made here."""
    import inspect

    try:
        from transformers import StaticCache

        params = inspect.signature(StaticCache.__init__).parameters
        offer = {"config": model.config, "max_cache_len": length, "device": model.device,
                 "dtype": model.dtype}
        offer["max_batch_size" if "max_batch_size" in params else "batch_size"] = batch
        return StaticCache(**{k: v for k, v in offer.items() if k in params})
    except Exception:
        return None


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


def precision_message(precision: str) -> str:
    return (f"--model measures FP32 products: --precision must be ieee or tf32x3, not "
            f"{precision!r} (TF32 is not FP32)")


def precision_of(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(precision_message(precision))
    return precision


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
    """The workloads `names` on this GPU, written to results/<gpu>/models-<stamp>.json
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
