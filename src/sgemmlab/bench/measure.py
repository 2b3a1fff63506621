"""The measurement core every sgemmlab number comes from (ladder, bench, tune).

Method (../shared/seeds/001: "The confirmed result"):
  * correctness first: a kernel that fails the float64 check is never timed (check.py);
  * the L2 is flushed before every timed launch by writing a buffer >= 4x the L2, outside the
    timed region: each launch starts from DRAM, as in a real model where other layers evict;
  * one pair of CUDA events around each launch; the median of `launches` per round;
  * `rounds` rounds alternate candidate and baseline (which goes first alternates too), so
    each round gives a paired ratio baseline/candidate measured seconds apart on the same
    clocks; we report the median ratio and its min-max over rounds.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable

Launch = Callable[[], None]


@dataclass(frozen=True)
class Method:
    launches: int = 20  # timed launches per round
    rounds: int = 3  # alternating rounds (each gives one paired ratio)
    warmup: int = 3  # untimed launches before the first round

    def as_dict(self) -> dict:
        return {"launches_per_round": self.launches, "rounds": self.rounds,
                "warmup": self.warmup}


QUICK = Method()
CONFIRM = Method(launches=40, rounds=15)


class L2Flusher:
    """Evicts the L2 by writing a buffer of at least 4x its size (and at least 256 MiB)."""

    def __init__(self, l2_bytes: int):
        import torch

        self.nbytes = max(4 * l2_bytes, 256 << 20)
        self.buffer = torch.empty(self.nbytes // 4, dtype=torch.float32, device="cuda")
        self._value = 0.0

    def __call__(self) -> None:
        self._value += 1.0  # a new value each time, so nothing can skip the write
        self.buffer.fill_(self._value)


def time_launches(fn: Launch, n: int, flush: L2Flusher | None) -> list[float]:
    """Microseconds of `n` launches of `fn`, each on a flushed L2 (unless `flush` is None:
    the ceilings, which never read the same data twice), timed with CUDA events."""
    import torch

    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(n)]
    for start, end in events:
        if flush is not None:
            flush()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) * 1e3 for start, end in events]


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


def adapt_launches(fn: Launch, method: Method, flush: L2Flusher,
                   budget_us: float = 2e6) -> int:
    """Launches per round, cut down for very slow kernels (rung 1 at 4096^3 takes ~0.3 s)
    so one round stays near `budget_us`; never below 3."""
    one = median(time_launches(fn, 1, flush))
    return max(3, min(method.launches, int(budget_us // max(one, 1.0))))


def paired(candidate: Launch, baseline: Launch, method: Method, flush: L2Flusher,
           on_round: Callable[[int], None] | None = None) -> Paired:
    """Time `candidate` and `baseline` in `method.rounds` alternating rounds."""
    for _ in range(method.warmup):
        candidate()
        baseline()
    n = adapt_launches(candidate, method, flush)
    out = Paired()
    for r in range(method.rounds):
        if r % 2 == 0:
            c = time_launches(candidate, n, flush)
            b = time_launches(baseline, n, flush)
        else:
            b = time_launches(baseline, n, flush)
            c = time_launches(candidate, n, flush)
        out.candidate_us.append(c)
        out.baseline_us.append(b)
        if on_round:
            on_round(r)
    return out


def tflops(M: int, N: int, K: int, us: float) -> float:
    return 2.0 * M * N * K / (us * 1e-6) / 1e12
