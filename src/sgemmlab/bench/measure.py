"""The measurement core every sgemmlab number comes from (ladder, bench, tune, tables).

Method (../shared/seeds/001: "The confirmed result"):
  * correctness first: a kernel that fails the float64 check is never timed (check.py);
  * `rounds` rounds alternate candidate and baseline (which goes first alternates too), so
    each round gives a paired ratio baseline/candidate measured seconds apart on the same
    clocks; we report the median ratio and its min-max over rounds;
  * grouped (`Method.grouped`, what a dispatch table uses): where several candidates meet
    at one problem, each round times the baseline once and then every candidate, in an
    order rotated by one place from round to round, and every candidate's ratio of that
    round divides by the same baseline samples. Candidates paired one by one each meet a
    different stretch of the baseline, and the baseline drifts more than a bound launch
    (cuBLAS does more host work after a synchronize), so pairs can rank two candidates by
    their baselines' drift; in a group their ratios rank as their own times do;
  * what one launch's time is depends on the mode (`Method.mode`):

    isolated (the default)  per launch: flush the L2 (a write and a read of >= 4x its size:
        each launch starts from DRAM, as in a model where other layers evict; L2Flusher says
        why the read), synchronize so the GPU is
        idle, record the start event, call, record the end event. The start event fires the
        moment it is recorded, so the time is the whole call as its caller pays it: host
        work (argument checks, dispatch, binding, the launch itself) plus the kernel, for
        sgemmlab and cuBLAS alike. The median of `launches` per round.
    throughput  `launches` calls queued back to back between one pair of events, no flush
        and no synchronize in between: the time per call of a loop, where one call's host
        work overlaps the kernel before it. One sample per round. For small shapes, where
        the two differ most, both are worth knowing.

Times come from a `Timer` (CUDA events by default; the tests pass a simulated one).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

Launch = Callable[[], None]
MODES = ("isolated", "throughput")


@dataclass(frozen=True)
class Method:
    launches: int = 20  # timed launches per round
    rounds: int = 3  # alternating rounds (each gives one paired ratio)
    warmup: int = 3  # untimed launches before the first round
    mode: str = "isolated"  # see the module docstring
    grouped: bool = False  # all candidates of a problem in shared rounds (module docstring)

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"unknown timing mode {self.mode!r}; choose from {MODES}")

    def as_dict(self) -> dict:
        return {"launches_per_round": self.launches, "rounds": self.rounds,
                "warmup": self.warmup, "mode": self.mode, "grouped": self.grouped}


QUICK = Method()
CONFIRM = Method(launches=40, rounds=15)


class Timer(Protocol):
    """Where times come from: marks recorded in the GPU's stream, and a wait for it."""

    def record(self) -> Any: ...  # a mark at this point of the stream

    def synchronize(self) -> None: ...  # return once the GPU has done all queued work

    def elapsed_us(self, start: Any, end: Any) -> float: ...


class CudaTimer:
    """torch.cuda events on the current stream. The events of a series are made before it
    (`prepare`): making one costs host time, which must not fall between a start and an end."""

    def __init__(self):
        self._pool: list = []

    def prepare(self, n: int) -> None:
        import torch

        self._pool = [torch.cuda.Event(enable_timing=True) for _ in range(n)]

    def record(self):
        import torch

        event = self._pool.pop() if self._pool else torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()

    def elapsed_us(self, start, end) -> float:
        return start.elapsed_time(end) * 1e3


class L2Flusher:
    """Evicts the L2: writes a buffer of at least 4x its size (and at least 256 MiB), then
    reads it back. The read matters: after the write alone the L2 is full of dirty lines,
    and their write-back to DRAM lands in the next kernel, adding microseconds to any
    memory-bound one (cuBLAS's too). After the read the L2 holds clean lines of the buffer,
    which the timed call evicts for free, as in a model whose previous layer read its
    weights."""

    def __init__(self, l2_bytes: int):
        import torch

        self.nbytes = max(4 * l2_bytes, 256 << 20)
        self.buffer = torch.empty(self.nbytes // 4, dtype=torch.float32, device="cuda")
        self._sink = torch.empty((), dtype=torch.float32, device="cuda")
        self._value = 0.0

    def __call__(self) -> None:
        import torch

        self._value += 1.0  # a new value each time, so nothing can skip the write
        self.buffer.fill_(self._value)
        torch.amax(self.buffer, dim=0, out=self._sink)  # read every line back


def time_launches(fn: Launch, n: int, flush: Callable[[], None] | None,
                  mode: str = "isolated", timer: Timer | None = None) -> list[float]:
    """Microseconds per launch of `fn`, measured as `mode` says (module docstring):
    isolated, `n` samples, each after `flush` (None: no flush) and a synchronize;
    throughput, one sample, the time per call of `n` calls queued back to back."""
    timer = timer or CudaTimer()
    if hasattr(timer, "prepare"):
        timer.prepare(2 * n)
    if mode == "throughput":
        timer.synchronize()
        start = timer.record()
        for _ in range(n):
            fn()
        end = timer.record()
        timer.synchronize()
        return [timer.elapsed_us(start, end) / n]
    if mode != "isolated":
        raise ValueError(f"unknown timing mode {mode!r}; choose from {MODES}")
    marks = []
    for _ in range(n):
        if flush is not None:
            flush()
        timer.synchronize()  # the GPU is idle: the call's host work is inside its time
        start = timer.record()
        fn()
        marks.append((start, timer.record()))
    timer.synchronize()
    return [timer.elapsed_us(start, end) for start, end in marks]


SM_CLOCK_HZ = 2.0e9  # for sizing the sleep kernel: a faster clock only makes it shorter


def host_seconds_per_call(torch, fn: Callable[[], Any], calls: int, sleep_s: float) -> float:
    """Host time, not GPU time: CPU seconds per call over `calls` calls back to back. A sleep
    kernel longer than the loop is queued first, so no call waits for the GPU and only the
    calling thread's work is timed (`sgemmlab overhead`, the model bench's overhead cases)."""
    torch.cuda.synchronize()
    torch.cuda._sleep(int(sleep_s * SM_CLOCK_HZ))
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls


def median(xs: list[float]) -> float:
    return float(statistics.median(xs))


@dataclass
class Paired:
    """Times of a candidate and its baseline over alternating rounds, and their ratios."""

    candidate_us: list[list[float]] = field(default_factory=list)  # per round, raw
    baseline_us: list[list[float]] = field(default_factory=list)

    @property
    def ratios(self) -> list[float]:
        """Per round: baseline median / candidate median (> 1: candidate faster)."""
        return [median(b) / median(c) for c, b in zip(self.candidate_us, self.baseline_us)]

    @property
    def candidate_median_us(self) -> float:
        """The median over rounds of each round's median."""
        return median([median(r) for r in self.candidate_us])

    @property
    def baseline_median_us(self) -> float:
        return median([median(r) for r in self.baseline_us])

    def summary(self) -> dict:
        r = self.ratios
        return {"vs_cublas": median(r), "vs_cublas_min": min(r), "vs_cublas_max": max(r),
                "rounds": len(r), "round_ratios": r}


def adapt_launches(fn: Launch, method: Method, flush: L2Flusher | None,
                   budget_us: float = 2e6, timer: Timer | None = None) -> int:
    """Launches per round, cut down for very slow kernels (rung 1 at 4096^3 takes ~0.3 s)
    so one round stays near `budget_us`; never below 3."""
    one = median(time_launches(fn, 1, flush, method.mode, timer))
    return max(3, min(method.launches, int(budget_us // max(one, 1.0))))


def paired(candidate: Launch, baseline: Launch, method: Method, flush: L2Flusher | None,
           on_round: Callable[[int], None] | None = None,
           timer: Timer | None = None) -> Paired:
    """Time `candidate` and `baseline` in `method.rounds` alternating rounds: a group of
    one (`grouped_rounds`), whose rotation alternates who goes first."""
    return grouped_rounds([candidate], baseline, method, flush, on_round, timer)[0]


def grouped_rounds(candidates: list[Launch], baseline: Launch, method: Method,
                   flush: L2Flusher | None, on_round: Callable[[int], None] | None = None,
                   timer: Timer | None = None) -> list[Paired]:
    """Time the baseline and every candidate in `method.rounds` shared rounds (the module
    docstring's grouped method); one Paired per candidate, all holding the same baseline
    samples. Round r runs [candidates..., baseline] rotated left by r places (with one
    candidate: candidate first in even rounds, baseline first in odd ones)."""
    timer = timer or CudaTimer()
    for _ in range(method.warmup):
        for fn in (*candidates, baseline):
            fn()
    counts = [adapt_launches(fn, method, flush, timer=timer) for fn in candidates]
    n_base = max(counts, default=method.launches)
    out = [Paired() for _ in candidates]
    order = [*range(len(candidates)), None]  # None: the baseline
    for r in range(method.rounds):
        shift = r % len(order)
        times: dict[int | None, list[float]] = {}
        for i in order[shift:] + order[:shift]:
            times[i] = time_launches(baseline if i is None else candidates[i],
                                     n_base if i is None else counts[i], flush,
                                     method.mode, timer)
        for i, pr in enumerate(out):
            pr.candidate_us.append(times[i])
            pr.baseline_us.append(times[None])
        if on_round:
            on_round(r)
    return out


def tflops(M: int, N: int, K: int, us: float, batch: int = 1) -> float:
    """TFLOP/s of `batch` products M x N x K (2 M N K FLOP each) done in `us`."""
    return 2.0 * batch * M * N * K / (us * 1e-6) / 1e12
