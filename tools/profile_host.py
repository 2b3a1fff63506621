"""Where the host time of sgemmlab.matmul goes (H200 session tool).

    PYTHONPATH=src python3 tools/profile_host.py [--cold] [--out FILE] [MxNxK ...]

Warm (the default): for a few shapes, the host time per call of matmul(a, b, out=c),
matmul(a, b), the layers under matmul (torch_product, hot, key + lookup + launch), the
pre-bound launch and torch.matmul(a, b, out=c) in a loop of calls, then
cProfile's top entries for matmul(a, b, out=c).

--cold: each call as `bench` times it in its isolated mode (measure.time_launches): flush
the L2, synchronize, start event, call, end event; per path the median host time of the
call (perf_counter around it) and the median event time (the whole call as the GPU saw it:
host work, launch and kernel). After a synchronize the host runs the call from cold caches,
so these host times are larger than the loop's; the difference between two paths' event
times is what a `bench --confirm` ratio pays for it. The hot path is also timed in steps
(key, lookup, launch, version bump) from a replica of product.hot, so the step that grows
cold is named, and the bound launch's own packed cuLaunchKernel (runtime/launch.Packed) is
timed beside cuda.core's launch() of the same kernel and arguments. --out writes JSON.
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
from sgemmlab.product import TORCH, hot, out_key, torch_product
from sgemmlab.runtime.device import gpu_info
from sgemmlab.runtime.launch import Packed

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


def cold_us(rows: dict, flush, n: int = COLD) -> dict:
    """Per path, median host µs of one call and median event µs around it, isolated as
    bench does; the paths take turns call by call, so a drift of the machine reaches all."""
    events = {k: [] for k in rows}
    host: dict = {k: [] for k in rows}
    for _ in range(n):
        for k, fn in rows.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                enable_timing=True)
            flush()
            torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
            start.record()
            fn()
            t1 = time.perf_counter_ns()
            end.record()
            host[k].append((t1 - t0) / 1e3)
            events[k].append((start, end))
    torch.cuda.synchronize()
    return {k: {"host_us": statistics.median(host[k]),
                "event_us": statistics.median(s.elapsed_time(e) * 1e3 for s, e in events[k])}
            for k in rows}


def stepped(a, b, out, marks: list):
    """product.hot's `out` branch, with a perf_counter_ns mark after each step."""
    t = TORCH
    ns = time.perf_counter_ns
    marks.append(ns())
    key = out_key(a, b, out, False, "ieee", a.get_device())
    marks.append(ns())
    fn = PLANS.hot.get(key)
    marks.append(ns())
    prev = t.device_ready(a.get_device())
    marks.append(ns())
    fn()
    marks.append(ns())
    t.restore(prev)
    t.bump_version(out)
    marks.append(ns())


STEPS = ("key", "lookup", "device", "launch", "restore+version")


def packed_of(fn):
    """The runtime.launch.Packed a bound launch calls (itself, or in a workspace launch's
    closure state)."""
    if isinstance(fn, Packed):
        return fn
    for cell in fn.__closure__ or ():
        v = cell.cell_contents
        for x in v if isinstance(v, list) else [v]:
            if isinstance(x, Packed):
                return x
    return None


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
        plan = next(iter(p for p in PLANS.general.values()))
        fn = next(iter(PLANS.hot.values()))
        rows = {"matmul(out=)": lambda: sgemmlab.matmul(a, b, out=c),
                "matmul()": lambda: sgemmlab.matmul(a, b),
                # the layers between them, outermost first: what each adds cold
                "torch_product()": lambda: torch_product(a, b, False, c, "ieee"),
                "hot()": lambda: hot(a, b, c, False, "ieee"),
                "key+lookup+launch": lambda: PLANS.hot[out_key(a, b, c, False, "ieee",
                                                               0)](),
                "bound launch": fn,
                "torch.matmul(out=)": lambda: torch.matmul(a, b, out=c)}
        packed = packed_of(fn)
        if packed is not None:
            from cuda.core import LaunchConfig, launch

            cfg = LaunchConfig(grid=packed.grid, block=packed.block)
            rows["packed launch"] = packed
            rows["cuda.core launch"] = lambda: launch(packed.stream, cfg, packed.kernel,
                                                      *packed.args)
        if args.cold:
            for f in rows.values():  # warm every path (torch's allocator for matmul())
                for _ in range(3):
                    f()
            res = cold_us(rows, flush)
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
        from sgemmlab.bench.results import git_state

        report = {"environment": {"gpu": torch.cuda.get_device_name(), **git_state()},
                  "shapes": report}
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
