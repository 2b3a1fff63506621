"""One product in a chosen layout, at a chosen rung and configuration: the thing to put
under Nsight Compute when a layout runs slower than another (`tools/h200.sh layoutstalls`).

    python tools/layout_probe.py --layout NT --kernel 24 --config BM=128,... [--size 4096]

A and B are stored as the layout says (N row-major, T column-major), checked against
float64 once, then launched `--repeat` more times.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch  # noqa: E402

import sgemmlab  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layout", default="NT")
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--config", default="")
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    n = args.size
    cfg = {k: int(v) for k, v in (kv.split("=") for kv in args.config.split(",") if kv)}

    def operand(trans: bool):
        t = torch.rand(n, n, device="cuda") * 2 - 1
        return t.t() if trans else t

    a, b = operand(args.layout[0] == "T"), operand(args.layout[1] == "T")
    c = torch.empty(n, n, device="cuda")
    for i in range(1 + args.repeat):
        sgemmlab.sgemm(a, b, c, out=c, kernel=args.kernel, config=cfg or None)
        if i == 0:
            err = ((c.double() - a.double() @ b.double()).abs().max() /
                   (a.double().abs() @ b.double().abs()).max()).item()
            print(f"{args.layout} rung {args.kernel} {n}^3: max error {err:.1e}")
            assert err < 1e-5
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
