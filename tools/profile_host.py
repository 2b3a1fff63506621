"""Where the host time of sgemmlab.matmul goes (H200 session tool).

    PYTHONPATH=src python3 tools/profile_host.py [--cold] [--out FILE] [MxNxK ...]

Warm (the default): for a few shapes, the host time per call of matmul(a, b, out=c),
matmul(a, b), the pre-bound launch and torch.matmul(a, b, out=c) in a loop of calls, then
cProfile's top entries for matmul(a, b, out=c).

--cold: each call as `bench` times it in its isolated mode (measure.time_launches): flush
the L2, synchronize, start event, call, end event; per path the median host time of the
call (perf_counter around it) and the median event time (the whole call as the GPU saw it:
host work, launch and kernel). After a synchronize the host runs the call from cold caches,
so these host times are larger than the loop's; the difference between two paths' event
times is what a `bench --confirm` ratio pays for it. The hot path is also timed in steps
(checks, key, lookups, launch, version bump) from a replica of product.torch_product, so
the step that grows cold is named. --out writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import time

import torch

import sgemmlab
from sgemmlab.bench.measure import L2Flusher
from sgemmlab.plan import PLANS
from sgemmlab.product import TORCH, _fast_key
from sgemmlab.runtime.device import gpu_info

CALLS = 3000
COLD = 200


def per_call_us(fn, calls: int = CALLS) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


def cold_us(fn, flush, n: int = COLD) -> dict:
    """Median host µs of one call and median event µs around it, isolated as bench does."""
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(n)]
    host = []
    for start, end in events:
        flush()
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        start.record()
        fn()
        t1 = time.perf_counter_ns()
        end.record()
        host.append((t1 - t0) / 1e3)
    torch.cuda.synchronize()
    gpu = [s.elapsed_time(e) * 1e3 for s, e in events]
    return {"host_us": statistics.median(host), "event_us": statistics.median(gpu)}


def stepped(a, b, out, marks: list):
    """product.torch_product's `out` branch, with a perf_counter_ns mark after each step."""
    t = TORCH
    ns = time.perf_counter_ns
    marks.append(ns())
    ok = a.dtype is t.f32 and b.dtype is t.f32 and a.is_cuda and b.is_cuda and \
        out.dtype is t.f32 and out.is_cuda
    pa, pb = a.data_ptr(), b.data_ptr()
    marks.append(ns())
    key = _fast_key(a, b, pa, pb, False, "ieee", out)
    marks.append(ns())
    plan = PLANS.fast.get(key)
    dev = plan.device_id
    fn = plan.bound.get((pa, pb, out.data_ptr(), t.raw_stream(dev), 1.0, 0.0))
    marks.append(ns())
    prev = t.device_ready(dev)
    marks.append(ns())
    fn()
    marks.append(ns())
    t.restore(prev)
    t.bump_version(out)
    marks.append(ns())
    assert ok


STEPS = ("checks+pointers", "key", "lookups", "device", "launch", "restore+version")


def cold_steps(a, b, c, flush, n: int = COLD) -> dict:
    rows = []
    for _ in range(n):
        flush()
        torch.cuda.synchronize()
        marks: list = []
        stepped(a, b, c, marks)
        rows.append([(y - x) / 1e3 for x, y in zip(marks, marks[1:])])
    torch.cuda.synchronize()
    return {s: statistics.median(col) for s, col in zip(STEPS, zip(*rows))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shapes", nargs="*", default=["2x2215x11", "256x256x256", "1407x1x358"])
    ap.add_argument("--cold", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    flush = L2Flusher(gpu_info(0).l2_bytes) if args.cold else None
    report = {}
    for text in args.shapes:
        M, N, K = map(int, text.split("x"))
        a = torch.rand(M, K, device="cuda")
        b = torch.rand(K, N, device="cuda")
        c = torch.empty(M, N, device="cuda")
        sgemmlab.matmul(a, b, out=c)
        plan = next(iter(p for p in PLANS.fast.values()))
        fn = next(iter(plan.bound.values()))
        rows = {"matmul(out=)": lambda: sgemmlab.matmul(a, b, out=c),
                "matmul()": lambda: sgemmlab.matmul(a, b),
                "bound launch": fn,
                "torch.matmul(out=)": lambda: torch.matmul(a, b, out=c)}
        if args.cold:
            for f in rows.values():  # warm every path (torch's allocator for matmul())
                for _ in range(3):
                    f()
            res = {k: cold_us(f, flush) for k, f in rows.items()}
            res["steps"] = cold_steps(a, b, c, flush)
            res["warm_us"] = {k: per_call_us(f) for k, f in rows.items()}
            report[text] = {"rung": plan.rung.label, **res}
            print(f"{text} ({plan.rung.label})", flush=True)
            for k in rows:
                print(f"  {k:20s} cold host {res[k]['host_us']:7.2f} us  event "
                      f"{res[k]['event_us']:9.2f} us  warm host {res['warm_us'][k]:6.2f} us")
            print("  steps (cold): " + ", ".join(f"{k} {v:.2f}" for k, v in
                                                 res["steps"].items()), flush=True)
        else:
            print(f"{text} ({plan.rung.label}): " + ", ".join(
                f"{k} {per_call_us(f):.2f} us" for k, f in rows.items()), flush=True)
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(CALLS):
                sgemmlab.matmul(a, b, out=c)
            prof.disable()
            torch.cuda.synchronize()
            pstats.Stats(prof).sort_stats("tottime").print_stats(12)
        PLANS.clear()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
