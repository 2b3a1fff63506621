"""Where precision="fp32_emulated" should run Ozaki scheme II: per shape, in one run and
interleaved, cuBLAS SGEMM (torch.matmul, TF32 off), sgemmlab.matmul at "ieee" (exact FP32,
dispatch's choice), sgemmlab.matmul at "fp32_emulated" (dispatch's choice: rung 26 or exact
FP32, by dispatch/tensor.py's cost model) and rung 26 forced. It records what dispatch chose
and what the cost model predicted, so the rule can be checked where it turns: wherever
dispatch runs rung 26, it must not be slower than exact FP32. Writes JSON.

    PYTHONPATH=src python3 tools/emulated_pair.py --out emulated.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ozaki_probe import _time, write_json  # noqa: E402  (_time: CUDA events, one call)

#: cubes around the turn, K along at fixed sides, and shapes of models' layers
SHAPES = ([(n, n, n) for n in (512, 768, 1024, 1280, 1536, 1792, 2048, 2560, 3072, 4096)]
          + [(4096, 4096, k) for k in (256, 512, 1024, 2048)]
          + [(8192, 8192, k) for k in (256, 512, 1024)]
          + [(16384, 1024, 1024), (1024, 16384, 4096), (2048, 2048, 8192),
             (1024, 1024, 16384), (256, 256, 65536), (512, 512, 8192), (8192, 1024, 8192),
             (4096, 14336, 4096), (4096, 4096, 14336), (2048, 11008, 4096)])
#: shapes the constants were not fitted to (--check): around the turn, and odd sizes
CHECK = ([(n, n, n) for n in (1408, 1664, 1920, 2304, 3001)]
         + [(4096, 4096, 768), (6144, 6144, 512), (8192, 8192, 640), (3000, 5000, 700),
            (5000, 3000, 3000), (6144, 1536, 6144), (12288, 4096, 1024), (1536, 1536, 12288)])


def measure(M: int, N: int, K: int, reps: int) -> dict:
    import torch

    import sgemmlab
    from sgemmlab import dispatch
    from sgemmlab.dispatch import tensor
    from sgemmlab.runtime.device import gpu_info

    info = gpu_info()
    choice = dispatch.choose(M, N, K, gpu_name=info.name, sm_count=info.sm_count,
                             precision="fp32_emulated", arch=info.arch)
    a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    c = torch.empty(M, N, device="cuda")
    runs = {
        "cublas": lambda: torch.matmul(a, b, out=c),
        "ieee": lambda: sgemmlab.matmul(a, b, out=c),
        "fp32_emulated": lambda: sgemmlab.matmul(a, b, out=c, precision="fp32_emulated"),
        "rung26": lambda: sgemmlab.matmul(a, b, out=c, kernel=26, precision="fp32_emulated"),
    }
    for fn in runs.values():  # plans, compiles and workspaces first
        fn()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(reps):  # paired: every candidate once per round
        for name, fn in runs.items():
            times[name].append(_time(fn, 1)[0])
    ms = {name: statistics.median(t) for name, t in times.items()}
    return {"shape": [M, N, K], "chosen": choice.rung,
            "predicted_us": {"fp32_emulated": tensor.emulated_us(M, N, K, info.sm_count),
                             "ieee": tensor.fp32_us(M, N, K)},
            "ms": ms, "vs_cublas": {n: ms["cublas"] / t for n, t in ms.items()},
            "rung26_over_ieee": ms["ieee"] / ms["rung26"],
            "served_over_ieee": ms["ieee"] / ms["fp32_emulated"]}


def main() -> None:
    import torch

    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--check", action="store_true",
                   help="the shapes the cost model was not fitted to (CHECK) instead")
    p.add_argument("--out", default="emulated-pair.json")
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    records = []
    for shape in CHECK if args.check else SHAPES:
        rec = measure(*shape, args.reps)
        print(json.dumps(rec), flush=True)
        records.append(rec)
        torch.cuda.empty_cache()
    chosen = [r for r in records if r["chosen"].startswith("26_")]
    write_json(args.out, "tools/emulated_pair.py",
               "paired within this run: the four candidates interleaved per round, medians "
               f"of {args.reps} rounds, CUDA events, L2 not flushed; normal inputs", records,
               shapes="CHECK (not fitted to)" if args.check else "SHAPES (the fit's)",
               chosen_not_slower_than_ieee=all(r["served_over_ieee"] >= 1 for r in chosen))


if __name__ == "__main__":
    main()
