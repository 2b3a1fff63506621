"""Where a product through the drop-in switch spends its time: host against GPU, and the
host time of each piece of the switch's path. A probe, run on the GPU machine:

    tools/h200.sh anatomy      # PYTHONPATH=src python3 tools/switch_anatomy.py

For each layer shape, F.linear and mm(x, W.t()) without and with sgemmlab.torch_mode():
host µs per call (the GPU kept busy by a sleep kernel: bench/measure.py's method) and GPU
µs per call (CUDA events around 200 calls queued behind a sleep: the kernels back to back),
and the rung dispatch ran. Then, at 1x1024x1024, the host µs of the pieces: allocation, the
bias copy, the hot path's key and launch, a ctypes cuLaunchKernel on the same packed
arguments, and a Python aten::mm kernel that only allocates (the dispatcher's boxing).
It writes results/<gpu>/host/switch-anatomy-<time>.json (bench/results.py: the environment and
the commit with the measurements). The first run, at 7aa67f5, before this file wrote its
own results, is results/nvidia-h200/host/switch-anatomy-20261202T2032Z.json.
"""

from __future__ import annotations

import ctypes
import json
import sys

sys.path.insert(0, "src")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import sgemmlab  # noqa: E402
from sgemmlab import product  # noqa: E402
from sgemmlab.bench import results  # noqa: E402
from sgemmlab.bench.measure import host_seconds_per_call  # noqa: E402
from sgemmlab.runtime.launch import Packed  # noqa: E402

SHAPES = [(1, 1024, 1024), (1, 4096, 4096), (8, 4096, 4096), (32, 4096, 4096),
          (32, 11008, 4096), (32, 4096, 11008), (128, 3072, 768), (512, 4096, 4096)]


def host(fn, calls=200, reps=9) -> float:
    for _ in range(50):
        fn()
    xs = sorted(host_seconds_per_call(torch, fn, calls, 0.004) * 1e6 for _ in range(reps))
    return round(xs[reps // 2], 2)


def gpu(fn, calls=200, reps=5) -> float:
    for _ in range(20):
        fn()
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        torch.cuda._sleep(int(0.02 * 2e9))
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(calls):
            fn()
        e.record()
        torch.cuda.synchronize()
        out.append(s.elapsed_time(e) / calls * 1000)
    out.sort()
    return round(out[reps // 2], 2)


def shapes() -> dict:
    res = {}
    for M, N, K in SHAPES:
        x, W = torch.randn(M, K, device="cuda"), torch.randn(N, K, device="cuda")
        bias, Wt = torch.randn(N, device="cuda"), W.t()
        row = {}
        for label, fn in [("mm", lambda: torch.mm(x, Wt)),
                          ("linear", lambda: F.linear(x, W, bias))]:
            row[label + " torch host/gpu"] = (host(fn), gpu(fn))
            with sgemmlab.torch_mode():
                row[label + " switch host/gpu"] = (host(fn), gpu(fn))
        row["sgemmlab.matmul host/gpu"] = (host(lambda: sgemmlab.matmul(x, Wt)),
                                           gpu(lambda: sgemmlab.matmul(x, Wt)))
        plan = product.PLANS.fast.get(product.fast_key(x, Wt, False, "ieee"))
        row["rung"] = (plan.rung.label, plan.config, str(plan.gemm)) if plan else None
        res[f"{M}x{N}x{K}"] = row
    return res


def pieces() -> dict:
    x, W = torch.randn(1, 1024, device="cuda"), torch.randn(1024, 1024, device="cuda")
    bias, Wt = torch.randn(1024, device="cuda"), W.t()
    out = torch.empty(1, 1024, device="cuda")
    p = {
        "torch.empty": host(lambda: torch.empty((1, 1024), dtype=torch.float32,
                                                device=x.device)),
        "new_empty": host(lambda: x.new_empty((1, 1024))),
        "expand.clone": host(lambda: bias.expand((1, 1024)).clone(
            memory_format=torch.contiguous_format)),
        "out.add_(bias)": host(lambda: out.add_(bias)),
        "relu": host(lambda: torch.relu(x)),
        "hot": host(lambda: product.hot(x, Wt, None, False, "ieee")),
        "fast_key": host(lambda: product.fast_key(x, Wt, False, "ieee")),
    }
    plan = product.PLANS.fast.get(product.fast_key(x, Wt, False, "ieee"))
    h = product.TORCH.raw_stream(0)
    p["plan.launch same ptrs"] = host(
        lambda: plan.launch(x.data_ptr(), Wt.data_ptr(), out.data_ptr(), h, 1.0, 0.0))
    fn = plan.launch(x.data_ptr(), Wt.data_ptr(), out.data_ptr(), h, 1.0, 0.0)
    p["bound fn type"] = type(fn).__name__
    if isinstance(fn, Packed):
        f = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
        f.restype = ctypes.c_int
        c = fn._call
        args = (ctypes.c_void_p(int(c[0])), *[ctypes.c_uint(v) for v in c[1:7]],
                ctypes.c_uint(0), ctypes.c_void_p(int(c[8])), ctypes.c_void_p(c[9]),
                ctypes.c_void_p(0))
        p["Packed()"] = host(fn)
        p["ctypes cuLaunchKernel"] = host(lambda: f(*args))
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("mm", lambda ks, a, b: a.new_empty((a.shape[0], b.shape[1])), "CUDA",
             with_keyset=True)
    p["py aten::mm returning new_empty"] = host(lambda: torch.mm(x, Wt))
    lib._destroy()
    p["torch.mm"] = host(lambda: torch.mm(x, Wt))
    return p


def main() -> None:
    from sgemmlab.runtime.device import gpu_info

    torch.backends.cuda.matmul.allow_tf32 = False
    res = shapes()
    res["pieces 1x1024x1024"] = pieces()
    gpu = gpu_info(0)
    run = results.new_run("switch-anatomy", gpu, {
        "host": "µs per call, the GPU kept busy (bench/measure.py)",
        "gpu": "µs per call, 200 calls queued behind a sleep, CUDA events"})
    run["measurements"] = res
    print(json.dumps(res, indent=1))
    print("results:", results.write(run, gpu.slug, f"switch-anatomy-{results.stamp()}"))


if __name__ == "__main__":
    main()
