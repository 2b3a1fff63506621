"""What tools/pack_pair.py and tools/source_pair.py share: their command line (--rows,
--rounds, --calls), TF32 off, torch's glue found, and the results run they fill."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch  # noqa: E402

from sgemmlab import product  # noqa: E402
from sgemmlab.bench import results  # noqa: E402
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
