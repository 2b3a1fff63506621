"""The statistics of the measurement core, on a fake clock: no GPU needed.

`measure.time_launches` is the only function that touches CUDA events; replacing it with a
script of times lets every other line of measure.py run here.
"""

from __future__ import annotations

import statistics

import pytest

from sgemmlab.bench import measure
from sgemmlab.bench.measure import CONFIRM, QUICK, Method, Paired


class Script:
    """A fake `time_launches`: each launch function's n-th call returns `script[name](n, k)`
    (k launches asked for); every call is logged as (name, k)."""

    def __init__(self, monkeypatch, **script):
        self.script, self.calls, self.count = script, [], {}
        monkeypatch.setattr(measure, "time_launches", self)

    def __call__(self, fn, n, flush, mode="isolated", timer=None):
        name = fn.__name__
        i = self.count.get(name, 0)
        self.count[name] = i + 1
        self.calls.append((name, n))
        return list(self.script[name](i, n))


def launches():
    """Two launch functions that count how often they were run directly (the warmup)."""
    ran = {"candidate": 0, "baseline": 0}

    def candidate():
        ran["candidate"] += 1

    def baseline():
        ran["baseline"] += 1

    return candidate, baseline, ran


def test_median_is_the_middle_not_the_mean():
    assert measure.median([1.0, 2.0, 100.0]) == 2.0
    assert measure.median([1.0, 2.0, 3.0, 10.0]) == 2.5


def test_paired_ratio_is_baseline_over_candidate_per_round():
    p = Paired(candidate_us=[[100, 100, 900], [50, 50, 50]],
               baseline_us=[[120, 130, 110], [40, 60, 50]])
    assert p.ratios == pytest.approx([1.2, 1.0])  # > 1: the candidate was faster
    assert p.candidate_median_us == pytest.approx(75.0)  # median of the round medians
    assert p.baseline_median_us == pytest.approx(85.0)


def test_summary_reports_median_ratio_and_its_min_max():
    p = Paired(candidate_us=[[100], [110], [90], [100]],
               baseline_us=[[120], [110], [99], [95]])
    s = p.summary()
    ratios = [1.2, 1.0, 1.1, 0.95]
    assert s["round_ratios"] == pytest.approx(ratios)
    assert s["vs_cublas"] == pytest.approx(statistics.median(ratios))
    assert s["vs_cublas_min"] == pytest.approx(0.95)
    assert s["vs_cublas_max"] == pytest.approx(1.2)
    assert s["rounds"] == 4


def test_rounds_alternate_who_goes_first(monkeypatch):
    script = Script(monkeypatch, candidate=lambda i, n: [10.0] * n,
                    baseline=lambda i, n: [10.0] * n)
    candidate, baseline, ran = launches()
    measure.paired(candidate, baseline, Method(launches=5, rounds=4, warmup=2), flush=None)
    assert ran == {"candidate": 2, "baseline": 2}  # warmup runs both, untimed
    assert script.calls == [
        ("candidate", 1),  # one probe launch sizes the rounds
        ("candidate", 5), ("baseline", 5),
        ("baseline", 5), ("candidate", 5),
        ("candidate", 5), ("baseline", 5),
        ("baseline", 5), ("candidate", 5),
    ]


def test_paired_keeps_raw_times_and_pairs_each_round(monkeypatch):
    rounds_c = [[100, 101, 5000], [110, 109, 111], [90, 90, 91]]  # an outlier in round 0
    rounds_b = [[120, 120, 121], [110, 110, 110], [99, 99, 98]]
    Script(monkeypatch,
           candidate=lambda i, n: [100.0] if i == 0 else rounds_c[i - 1],  # call 0: probe
           baseline=lambda i, n: rounds_b[i])
    candidate, baseline, _ = launches()
    seen = []
    p = measure.paired(candidate, baseline, Method(launches=3, rounds=3, warmup=0),
                       flush=None, on_round=seen.append)
    assert seen == [0, 1, 2]
    assert p.candidate_us == rounds_c and p.baseline_us == rounds_b
    assert p.ratios == pytest.approx([120 / 101, 1.0, 99 / 90])
    assert p.summary()["vs_cublas"] == pytest.approx(99 / 90)
    assert p.candidate_median_us == pytest.approx(101.0)  # the outlier does not move it


@pytest.mark.parametrize("one_launch_us, expected", [
    (10.0, 20),  # fast kernels get the full count
    (1e5, 20),  # 20 launches x 0.1 s = the 2 s budget exactly
    (5e5, 4),  # slow: 2 s / 0.5 s
    (3e6, 3),  # very slow (rung 1 at 8192^3): never fewer than 3
])
def test_slow_kernels_get_fewer_launches_per_round(monkeypatch, one_launch_us, expected):
    Script(monkeypatch, candidate=lambda i, n: [one_launch_us] * n)
    candidate, _, _ = launches()
    assert measure.adapt_launches(candidate, Method(launches=20), flush=None) == expected


def test_confirm_is_the_published_method_and_quick_is_lighter():
    assert (CONFIRM.launches, CONFIRM.rounds) == (40, 15)
    assert QUICK.launches * QUICK.rounds < CONFIRM.launches * CONFIRM.rounds
    assert QUICK.rounds % 2 == 1  # an odd count: the median round is a real round
    assert QUICK.mode == CONFIRM.mode == "isolated"


def test_the_mode_is_recorded_and_checked():
    assert Method(mode="throughput").as_dict() == {
        "launches_per_round": 20, "rounds": 3, "warmup": 3, "mode": "throughput",
        "grouped": False}
    with pytest.raises(ValueError, match="unknown timing mode"):
        Method(mode="fast")


def test_grouped_rounds_share_the_baseline_and_rotate_the_order(monkeypatch):
    """Each round times the baseline once and every candidate once, [a, b, baseline]
    rotated left by one place a round; both candidates divide by the same samples."""
    base = [[100.0] * 3, [130.0] * 3, [110.0] * 3, [120.0] * 3]  # a drifting baseline
    script = Script(monkeypatch, a=lambda i, n: [100.0] * n,
                    b=lambda i, n: [90.0] * n if i else [90.0],
                    baseline=lambda i, n: base[i])
    ran = []

    def a():
        ran.append("a")

    def b():
        ran.append("b")

    def baseline():
        ran.append("baseline")

    prs = measure.grouped_rounds([a, b], baseline, Method(launches=3, rounds=4, warmup=1),
                                 flush=None)
    assert ran == ["a", "b", "baseline"]  # the warmup: every function once, untimed
    assert script.calls == [("a", 1), ("b", 1),  # each candidate's probe sizes its rounds
                            ("a", 3), ("b", 3), ("baseline", 3),
                            ("b", 3), ("baseline", 3), ("a", 3),
                            ("baseline", 3), ("a", 3), ("b", 3),
                            ("a", 3), ("b", 3), ("baseline", 3)]
    pa, pb = prs
    assert pa.baseline_us == pb.baseline_us == base
    assert pa.ratios == pytest.approx([1.0, 1.3, 1.1, 1.2])
    # the two ratios of a round differ only by the candidates' own times
    assert [rb / ra for ra, rb in zip(pa.ratios, pb.ratios)] == pytest.approx([100 / 90] * 4)


def test_tflops():
    # cuBLAS at 4096^3 on the H200 (H200-baseline.md): 2687 us -> 51.2 TFLOP/s
    assert measure.tflops(4096, 4096, 4096, 2687.0) == pytest.approx(51.15, abs=0.01)
