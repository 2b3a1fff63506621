"""Why sgemmlab loses where it loses: for the worst problems of a bench results file, what
each side launches. torch's profiler records, for torch.matmul (cuBLAS, TF32 off) and for
sgemmlab.matmul on the same operands, every kernel of one call: its name (cuBLAS's names
carry the tile, the stages and the split), grid, block, registers, shared memory and device
time; beside them the dispatcher's choice (rung, configuration, decomposition, the table
entry and its distance) as the results file recorded it, and the waves each grid makes on
the GPU's SMs (the choice recomputed here where the record has none: `matmul` records
do not carry it). The reason a shape loses is read off that line: a tile that leaves SMs idle,
a split cuBLAS makes and dispatch does not, a packing copy, host time.

    python tools/worst_shapes.py RESULTS.json[.gz] [--worst 10] [--kernel matmul]

Writes results/<gpu>/bench/worst-<stamp>.json and prints one block per problem.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch  # noqa: E402

import sgemmlab  # noqa: E402
from sgemmlab import dispatch  # noqa: E402
from sgemmlab.bench import problems, results  # noqa: E402
from sgemmlab.bench.check import random_operands  # noqa: E402
from sgemmlab.bench.runner import operands_aligned  # noqa: E402
from sgemmlab.runtime.device import gpu_info  # noqa: E402

CALLS = 3  # profiled calls a side (the last one is reported: the first may compile)


def _records(path: Path) -> dict:
    return json.loads(results.read_text(path))


def _kernels(call, sms: int) -> list[dict]:
    """The kernels of the last of CALLS calls of `call`, from torch's profiler trace."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(CALLS - 1):
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        trace = json.load(open(f.name))
    out = []
    for e in trace.get("traceEvents", []):
        if e.get("cat") != "kernel":
            continue
        a = e.get("args", {})
        grid, block = a.get("grid", [0, 0, 0]), a.get("block", [0, 0, 0])
        blocks = grid[0] * grid[1] * grid[2]
        per_sm = a.get("blocks per SM")
        out.append({"name": e.get("name", "")[:160], "us": e.get("dur"), "grid": grid,
                    "block": block, "registers": a.get("registers per thread"),
                    "smem": a.get("shared memory"), "blocks": blocks,
                    "waves": round(blocks / sms, 2) if sms else None,
                    "blocks_per_sm": per_sm,
                    "occupancy_pct": a.get("est. achieved occupancy %")})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--worst", type=int, default=10)
    ap.add_argument("--kernel", default="matmul")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    data = _records(args.results)
    recs = [r for r in data["records"] if r.get("kernel") == args.kernel
            and r.get("vs_cublas") is not None]
    recs.sort(key=lambda r: r["vs_cublas"])
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    gpu = gpu_info(0)
    run = results.new_run("worst-shapes", gpu, {"calls": CALLS, "source": str(args.results),
                                                "worst": args.worst, "kernel": args.kernel})
    gen = torch.Generator(device="cuda").manual_seed(0)
    for r in recs[:args.worst]:
        p = problems.key(r)
        A, B, _ = random_operands(p.M, p.N, p.K, batch=p.batch, layout=p.layout, pad=p.pad,
                                  generator=gen)
        choice = dispatch.choose(p.M, p.N, p.K, gpu_name=gpu.name, sm_count=gpu.sm_count,
                                 trans_a=p.trans_a, trans_b=p.trans_b, batch=p.batch,
                                 aligned=operands_aligned(p), arch=getattr(gpu, "arch", ""))
        row = {"problem": str(p), "vs_cublas": r["vs_cublas"], "median_us": r.get("median_us"),
               "cublas_us": r.get("cublas_median_us"), "dispatch": r.get("dispatch") or {
                   "rung": choice.rung, "config": dict(choice.config),
                   "decomposition": choice.decomposition, "source": choice.source},
               "cublas": _kernels(lambda: torch.matmul(A, B), sms),
               "sgemmlab": _kernels(lambda: sgemmlab.matmul(A, B), sms)}
        run["records"].append(row)
        d = row["dispatch"] or {}
        print(f"{p}  {r['vs_cublas']:.3f}  dispatch ({d.get('source')}): {d.get('rung')} "
              f"{d.get('config')} {d.get('decomposition')}")
        for side in ("cublas", "sgemmlab"):
            for k in row[side]:
                print(f"  {side:8s} {k['us']:>8} us  grid {k['grid']} ({k['waves']} waves) "
                      f"block {k['block']} regs {k['registers']} smem {k['smem']}  "
                      f"{k['name'][:90]}")
    path = results.write(run, gpu.slug, f"worst-shapes-{results.stamp()}")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
