"""addmm's shapes in a linear layer, with and without the bias read in the product's own
epilogue: does the source variant of a kernel cost time? One run, back to back, paired
rounds: torch.addmm (cuBLAS), the plan with the bias as its source, the plan with beta 0.

    python tools/source_pair.py [--rows 8192] [--rounds 5]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch  # noqa: E402

from sgemmlab import plan as plan_mod  # noqa: E402
from sgemmlab import product  # noqa: E402
from sgemmlab.bench.measure import median, time_launches  # noqa: E402

WEIGHTS = ((3072, 1024), (1024, 1024), (4096, 1024), (1024, 4096))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, action="append")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    product.TORCH.find()
    for M in args.rows or [8192]:
        for N, K in WEIGHTS:
            x = torch.rand(M, K, device="cuda")
            w = torch.rand(N, K, device="cuda")
            bias = torch.rand(N, device="cuda")
            b = w.t()
            c = torch.empty(M, N, device="cuda")
            g = plan_mod.describe((tuple(x.shape), x.stride()), (tuple(b.shape), b.stride()),
                                  (tuple(c.shape), c.stride()))
            p = plan_mod.make_plan(g, 0, None, None, False, True)
            s = product.TORCH.raw_stream(0)
            with_src = p.launch(x.data_ptr(), b.data_ptr(), c.data_ptr(), s, 1.0, 1.0,
                                source=(bias.data_ptr(), 0))
            plain = p.launch(x.data_ptr(), b.data_ptr(), c.data_ptr(), s, 1.0, 0.0)
            sides = {"torch": lambda: torch.addmm(bias, x, b), "source": with_src,
                     "plain": plain}
            t = {k: [] for k in sides}
            for r in range(args.rounds):
                for k in (list(sides) if r % 2 == 0 else list(reversed(sides))):
                    t[k].append(median(time_launches(sides[k], 20, None, "throughput")))
            m = {k: median(v) for k, v in t.items()}
            print(f"{M}x{N}x{K} {p.rung.label} pack={p.pack is not None}: torch "
                  f"{m['torch']:.1f}  source {m['source']:.1f} ({m['torch'] / m['source']:.3f})"
                  f"  plain {m['plain']:.1f} ({m['torch'] / m['plain']:.3f})", flush=True)


if __name__ == "__main__":
    main()
