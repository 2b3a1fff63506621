"""Where the host time of sgemmlab.matmul goes (H200 session tool): for a few shapes, the
host time per call of matmul(a, b, out=c), matmul(a, b), the pre-bound launch and
torch.matmul(a, b, out=c), then cProfile's top entries for matmul(a, b, out=c).

    PYTHONPATH=src python3 tools/profile_host.py [MxNxK ...]
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time

import torch

import sgemmlab
from sgemmlab.plan import PLANS

CALLS = 3000


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


def main(shapes: list[str]) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    for text in shapes:
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


if __name__ == "__main__":
    main(sys.argv[1:] or ["2x2215x11", "256x256x256", "1407x1x358"])
