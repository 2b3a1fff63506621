"""What tools/pack_pair.py, tools/source_pair.py and tools/stage_pair.py share: their command
line (--rows, --rounds, --calls), TF32 off, torch's glue found, the results run they fill,
and the alternating rounds that time their sides."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch  # noqa: E402

from sgemmlab import product  # noqa: E402
from sgemmlab.bench import results  # noqa: E402
from sgemmlab.bench.measure import median, time_launches  # noqa: E402
from sgemmlab.runtime.device import gpu_info  # noqa: E402


def start(kind: str, doc: str, rows: list[int]):
    """(arguments, GPU, results run of `kind`) for a pairing tool whose docstring is `doc`;
    `rows` when --rows is not given."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--rows", type=int, action="append")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    args.rows = args.rows or rows
    torch.backends.cuda.matmul.allow_tf32 = False
    product.TORCH.find()
    gpu = gpu_info(0)
    run = results.new_run(kind, gpu, {"mode": "throughput", "calls": args.calls,
                                      "rounds": args.rounds})
    return args, gpu, run


def finish(run: dict, gpu, kind: str) -> None:
    path = results.write(run, gpu.slug, f"{kind}-{results.stamp()}")
    print(f"results: {path}")


def rounds(sides: dict, count: int, calls: int) -> tuple[dict[str, float], dict[str, list]]:
    """Each side (name -> a launch) timed back to back, `calls` calls a round, in `count`
    rounds whose order alternates (forward, then backward), three warm-up calls before each:
    (median µs per call, every round's) by side."""
    times: dict[str, list[float]] = {k: [] for k in sides}
    for r in range(count):
        for k in (list(sides) if r % 2 == 0 else list(reversed(sides))):
            for _ in range(3):
                sides[k]()
            times[k].append(median(time_launches(sides[k], calls, None, "throughput")))
    return {k: median(v) for k, v in times.items()}, times
