"""What a time holds (bench/measure.py). Isolated mode: the host work of a call is inside
its time, even right after an L2 flush; throughput mode: calls back to back between one
pair of events, the time per call. On a simulated GPU (a stream on the host clock) here,
and with real CUDA events on a GPU (skipped without one)."""

from __future__ import annotations

import os
import time

import pytest

from sgemmlab.bench import measure
from sgemmlab.bench.measure import Method

HOST_S = 0.01  # host work inside the call (large beside scheduling noise: tests run in parallel)
FLUSH_S = 0.1  # the flush's GPU time: far longer than the host work (sleep overshoots)
KERNEL_S = 20e-6


class SimulatedGPU:
    """One stream on the host clock: queued work runs in order; a mark fires when the
    stream reaches it (at once on an idle GPU); synchronize waits for the queue."""

    def __init__(self):
        self.free_at = time.perf_counter()
        self.syncs = 0

    def run(self, seconds: float) -> None:  # queue GPU work: a kernel, a flush
        self.free_at = max(time.perf_counter(), self.free_at) + seconds

    def record(self) -> float:
        self.free_at = max(time.perf_counter(), self.free_at)
        return self.free_at

    def synchronize(self) -> None:
        self.syncs += 1
        time.sleep(max(0.0, self.free_at - time.perf_counter()))

    def elapsed_us(self, start: float, end: float) -> float:
        return (end - start) * 1e6


def host_bound_call(gpu: SimulatedGPU):
    def call():
        time.sleep(HOST_S)  # argument checks, dispatch, binding: before the launch
        gpu.run(KERNEL_S)

    return call


def test_the_simulation_shows_how_a_queued_flush_hides_host_work():
    """The old order (flush, start event, call, end event; no wait): the start event fires
    only when the flush is done, by which time the host work is over."""
    gpu = SimulatedGPU()
    call = host_bound_call(gpu)
    gpu.run(FLUSH_S)
    start = gpu.record()
    call()
    hidden = gpu.elapsed_us(start, gpu.record())
    assert hidden < 0.5 * HOST_S * 1e6


def test_isolated_mode_measures_the_host_work_of_the_call():
    gpu = SimulatedGPU()
    flushes = []

    def flush():
        flushes.append(1)
        gpu.run(FLUSH_S)

    times = measure.time_launches(host_bound_call(gpu), 3, flush, "isolated", gpu)
    assert len(times) == 3 and len(flushes) == 3
    assert min(times) >= HOST_S * 1e6
    assert max(times) < (HOST_S + FLUSH_S) * 1e6  # the flush itself stays out


def test_throughput_mode_is_the_time_per_call_back_to_back():
    gpu = SimulatedGPU()

    def never():
        raise AssertionError("throughput mode never flushes")

    def gpu_bound():  # no host work: the queue runs ahead, each call costs its kernel
        gpu.run(1e-3)

    (per_call,) = measure.time_launches(gpu_bound, 5, never, "throughput", gpu)
    assert 1e3 <= per_call < 1.3e3
    (host,) = measure.time_launches(host_bound_call(gpu), 5, never, "throughput", gpu)
    assert host >= HOST_S * 1e6  # host-bound: the loop pays the host work per call
    syncs = gpu.syncs
    measure.time_launches(gpu_bound, 5, None, "throughput", gpu)
    assert gpu.syncs - syncs == 2  # one before the batch, one after: none in between


def test_paired_rounds_charge_the_host_work_to_whoever_does_it():
    """sgemmlab and cuBLAS alike: a candidate with host work inside its call is slower than
    a baseline without, by that host work, in every round."""
    gpu = SimulatedGPU()
    p = measure.paired(host_bound_call(gpu), lambda: gpu.run(KERNEL_S),
                       Method(launches=3, rounds=2, warmup=0), lambda: gpu.run(FLUSH_S),
                       timer=gpu)
    assert all(min(r) >= HOST_S * 1e6 for r in p.candidate_us)
    assert all(measure.median(r) < 0.5 * HOST_S * 1e6 for r in p.baseline_us)
    assert max(p.ratios) < 0.5
    t = measure.paired(host_bound_call(gpu), lambda: gpu.run(KERNEL_S),
                       Method(launches=3, rounds=1, warmup=0, mode="throughput"), None,
                       timer=gpu)
    assert [len(r) for r in t.candidate_us] == [1]  # one sample per round


@pytest.mark.gpu
def test_host_work_inside_a_call_is_measured_with_cuda_events():
    """A launch that sleeps 1 ms on the host before a tiny op measures >= 1 ms, right after
    a flush that keeps the GPU busy for longer than that (a spin kernel of ~3 ms: the real
    256 MiB flush takes ~80 us on an H200, and hid that much host work of every call); the
    same op without the sleep measures far less.

    It needs the GPU to itself, as every timing does: another process's kernels (pytest -n)
    delay the start event until that process's time slice ends, past the host work."""
    import torch

    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        pytest.skip("timing needs the GPU to itself: run this file without pytest -n")
    x = torch.zeros(16, device="cuda")

    def flush():
        torch.cuda._sleep(int(3e-3 * 2e9))  # ~3 ms at 2 GHz, longer at lower clocks

    def slow():
        time.sleep(1e-3)
        x.add_(1)

    def fast():
        x.add_(1)

    fast()
    slow_us = measure.time_launches(slow, 10, flush)
    assert min(slow_us) >= 1000, slow_us
    assert measure.median(measure.time_launches(fast, 10, flush)) < 500
    (per_call,) = measure.time_launches(slow, 10, None, "throughput")
    assert per_call >= 1000, per_call  # a host-bound loop pays it on every call
