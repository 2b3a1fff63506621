"""What every workload of `sgemmlab bench --model` shares (bench/models.py has the method):
the sizes of each kind, the set-up both sides run under, paired timing of the two sides,
the FP32 bound two sides may differ by, and the records a case writes."""


from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from .check import precision_bound, relative_error
from .measure import Paired, median, time_launches

PRECISIONS = ("ieee", "fp32_emulated", "tf32x3")
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


def precision_message(precision: str) -> str:
    return (f"--model measures FP32 products: --precision must be ieee, fp32_emulated or "
            f"tf32x3, not "
            f"{precision!r} (TF32 is not FP32)")


def precision_of(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(precision_message(precision))
    return precision
