"""Power and SM clock of one product at a time, back to back: is a kernel power-capped?

    PYTHONPATH=src python3 tools/power_trace.py [--size 8192] [--seconds 3]

For each workload (sgemmlab precision="tf32x3", "tf32", "ieee"; cuBLAS SGEMM and TF32 via
torch.matmul) the same product is launched back to back for --seconds while nvidia-smi
samples the SM clock and the board power every 100 ms; the first half second of each is
left out (the ramp). Writes results/<gpu>/power-<size>-<UTC>.json: per workload the samples,
their medians and minima, and the calls per second (so a TFLOP/s at that power).
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))


def sampler(out: list, stop: threading.Event) -> None:
    cmd = ["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
           "-lms", "100"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if stop.is_set():
            break
        try:
            mhz, watts = (float(x) for x in line.split(","))
        except ValueError:
            continue
        out.append((time.time(), mhz, watts))
    proc.terminate()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=8192)
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    import torch

    import sgemmlab
    from sgemmlab.bench import results
    from sgemmlab.bench.baselines import fp32_only, tf32_matmul
    from sgemmlab.runtime.device import gpu_info

    n = args.size
    a, b = torch.rand(n, n, device="cuda"), torch.rand(n, n, device="cuda")
    c = torch.empty(n, n, device="cuda")
    fp32_only()

    def cublas_tf32():
        with tf32_matmul():
            torch.matmul(a, b, out=c)

    work = {"sgemmlab tf32x3": lambda: sgemmlab.matmul(a, b, out=c, precision="tf32x3"),
            "sgemmlab tf32": lambda: sgemmlab.matmul(a, b, out=c, precision="tf32"),
            "sgemmlab ieee": lambda: sgemmlab.matmul(a, b, out=c),
            "cublas": lambda: torch.matmul(a, b, out=c),
            "cublas_tf32": cublas_tf32}
    samples: list = []
    stop = threading.Event()
    t = threading.Thread(target=sampler, args=(samples, stop), daemon=True)
    t.start()
    time.sleep(0.5)
    out = {}
    for name, fn in work.items():
        fn()
        torch.cuda.synchronize()
        time.sleep(1.0)  # back to idle between workloads
        start = time.time()
        calls = 0
        while time.time() - start < args.seconds:
            for _ in range(4):
                fn()
            torch.cuda.synchronize()
            calls += 4
        end = time.time()
        mine = [(m, w) for ts, m, w in samples if start + 0.5 <= ts <= end]
        rate = calls / (end - start)
        out[name] = {"calls_per_s": rate, "tflops": 2 * n**3 * rate / 1e12,
                     "samples": mine,
                     "sm_mhz_median": statistics.median(m for m, _ in mine) if mine else None,
                     "sm_mhz_min": min((m for m, _ in mine), default=None),
                     "watts_median": statistics.median(w for _, w in mine) if mine else None}
        print(f"{name:16s} {out[name]['tflops']:7.1f} TFLOP/s  SM clock median "
              f"{out[name]['sm_mhz_median']} MHz (min {out[name]['sm_mhz_min']}), power "
              f"median {out[name]['watts_median']} W", flush=True)
    stop.set()
    gpu = gpu_info()
    run = results.new_run("power", gpu, {"what": "back-to-back calls, no L2 flush; nvidia-smi "
                                                 "every 100 ms, the first 0.5 s left out",
                                         "size": n, "seconds": args.seconds})
    run["workloads"] = out
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    print(f"wrote {results.write(run, gpu.slug, f'power-{n}-{stamp}')}")

if __name__ == "__main__":
    main()
