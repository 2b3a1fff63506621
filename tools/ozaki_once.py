"""One product of Ozaki scheme II (runtime/ozaki.bind) on the GPU, twice (the first loads and
warms; the second is the one to profile), for each of rung 26's configurations named: what
`tools/h200.sh ozakistalls` runs under Nsight Compute to see where rung 26's time goes.

    PYTHONPATH=src python3 tools/ozaki_once.py --size 2048 --count 8 \
        --gemm STORE16=1/PINGPONG=1,STORE16=1

Each configuration is printed before its products, so that ncu's report (every launch of
the kernels it names, two products a configuration: the second is the warm one) reads in
order.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main() -> None:
    import torch

    from sgemmlab.runtime import ozaki
    from sgemmlab.runtime.arrays import stream_for

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=2048)
    p.add_argument("--count", type=int, default=8)
    p.add_argument("--gemm", default="", help="'/'-separated configurations over rung 26's "
                                              "seed, e.g. STORE16=1/PINGPONG=1,STORE16=1; "
                                              "the seed itself first")
    args = p.parse_args()
    n = args.size
    a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    c = torch.empty(n, n, device="cuda")
    stream = stream_for(torch.cuda.current_stream().cuda_stream, 0)
    for spec in [""] + [s for s in args.gemm.split("/") if s]:
        over = {k: int(v) for k, v in (kv.split("=") for kv in spec.split(",") if kv)}
        print(f"--- rung 26 {spec or 'seed'} at {n}^3, {args.count} moduli", flush=True)
        launch = ozaki.bind(0, n, n, n, 1.0, a.data_ptr(), n, b.data_ptr(), n, 0.0,
                            c.data_ptr(), n, stream, count=args.count,
                            cfg={**ozaki.rung().seed, **over})
        for _ in range(2):
            launch()
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
