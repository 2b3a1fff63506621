"""Host overhead per call: sgemmlab.matmul against torch.matmul (`sgemmlab overhead`).

The budget: at 256^3, without CUDA graphs, a call of sgemmlab.matmul may cost the
calling CPU thread at most 1.5x what torch.matmul costs it. Host time, not GPU time, is what
a small product in a Python loop pays, and what a drop-in replacement must not make worse.

Method. For each path, `calls` back-to-back calls on the same operands, each returning a new
tensor (the result is dropped at once, so the caching allocator hands the same block back:
the steady state of a loop); the CPU wall time of the loop divided by `calls` is one sample.
Before each loop the GPU is given a sleep kernel longer than the loop, so no call ever waits
for the GPU (the launch queue holds every call of a loop) and nothing but host work is
timed; torch.cuda.synchronize runs only before and after the loop. Every path is warmed up
first (plans, compiled kernels, cuBLAS handles), the paths alternate within a repetition,
and the median of `repeats` samples is reported with the min and max. Beside the two paths
the budget compares, the record has torch.ops.sgemmlab.matmul (the dispatcher's share),
sgemmlab.matmul into a preallocated `out`, and torch.empty alone (the allocation every
returning path pays), to show where the time goes.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

from ..measure import host_seconds_per_call

BUDGET = 1.5


def measure(size: int = 256, calls: int = 200, repeats: int = 15, warmup: int = 100,
            device_id: int = 0) -> dict[str, Any]:
    """Host microseconds per call of each path (median, min, max over `repeats`), the
    ratio sgemmlab.matmul / torch.matmul, and whether it is within BUDGET."""
    import torch

    import sgemmlab
    import sgemmlab.torch_ops  # noqa: F401

    from ..check import check_result

    dev = torch.device("cuda", device_id)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # cuBLAS FP32, the product we replace
    try:
        with torch.cuda.device(dev):
            g = torch.Generator(device=dev).manual_seed(0)
            a = torch.rand(size, size, device=dev, generator=g) * 2 - 1
            b = torch.rand(size, size, device=dev, generator=g) * 2 - 1
            out = torch.empty(size, size, device=dev)
            checked = check_result(sgemmlab.matmul(a, b), a.double() @ b.double(), size)
            if not checked.ok:
                raise AssertionError(f"sgemmlab.matmul at {size}^3 is wrong: {checked.reason}")
            error = checked.error
            op = torch.ops.sgemmlab.matmul
            paths: dict[str, Callable[[], Any]] = {
                "torch.matmul": lambda: torch.matmul(a, b),
                "sgemmlab.matmul": lambda: sgemmlab.matmul(a, b),
                "torch.ops.sgemmlab.matmul": lambda: op(a, b),
                "sgemmlab.matmul(out=)": lambda: sgemmlab.matmul(a, b, out=out),
                "torch.empty": lambda: torch.empty((size, size), device=dev),
            }
            for fn in paths.values():
                for _ in range(warmup):
                    fn()
            torch.cuda.synchronize()
            # size the sleep from an unhidden loop: twice the slowest path's loop time
            t0 = time.perf_counter()
            for fn in paths.values():
                for _ in range(calls):
                    fn()
            sleep_s = 2 * (time.perf_counter() - t0) + 1e-3
            torch.cuda.synchronize()
            samples: dict[str, list[float]] = {name: [] for name in paths}
            names = list(paths)
            for r in range(repeats):
                order = names if r % 2 == 0 else names[::-1]
                for name in order:
                    s = host_seconds_per_call(torch, paths[name], calls, sleep_s)
                    samples[name].append(s * 1e6)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32

    records = [{"path": name, "M": size, "N": size, "K": size,
                "median_us": statistics.median(us), "min_us": min(us), "max_us": max(us),
                "samples_us": us} for name, us in samples.items()]
    med = {r["path"]: r["median_us"] for r in records}
    ratio = med["sgemmlab.matmul"] / med["torch.matmul"]
    return {"records": records, "ratio": ratio, "budget": BUDGET,
            "within_budget": ratio <= BUDGET, "error": error, "choice": _choice(size, device_id)}


def _choice(size: int, device_id: int) -> dict[str, Any] | None:
    """What dispatch runs at this shape (recorded beside the times)."""
    try:
        from ...dispatch import choose
        from ...runtime.device import gpu_info

        info = gpu_info(device_id)
        c = choose(size, size, size, gpu_name=info.name, sm_count=info.sm_count)
        return {"rung": c.rung, "config": dict(c.config), "decomposition": c.decomposition}
    except Exception as exc:  # the times stand on their own
        return {"error": str(exc)}


def run(size: int = 256, calls: int = 200, repeats: int = 15, device_id: int = 0):
    """measure(), written to results/<gpu>/host/overhead-<stamp>.json: (run dict, path)."""
    from ...runtime.device import gpu_info
    from .. import results

    gpu = gpu_info(device_id)
    m = measure(size=size, calls=calls, repeats=repeats, device_id=device_id)
    method = {"calls_per_sample": calls, "repeats": repeats, "statistic": "median",
              "timer": "time.perf_counter around the loop; GPU kept busy by a sleep kernel",
              "budget": BUDGET}
    run_ = results.new_run("overhead", gpu, method)
    run_["records"] = m["records"]
    run_["summary"] = {k: m[k] for k in ("ratio", "budget", "within_budget", "error",
                                         "choice")}
    path = results.write(run_, gpu.slug, f"overhead-{results.stamp()}")
    return run_, path
