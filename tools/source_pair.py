"""addmm's shapes in a linear layer with the bias read in the product's own epilogue, in one
run, back to back, in alternating rounds: torch.addmm (cuBLAS, TF32 off); the plan with
the bias variant of the epilogue (SGEMM_SOURCE = 2, what a row stride of 0 picks); the
same plan forced onto the general source (SGEMM_SOURCE = 1, the row arithmetic of a matrix
source); the plan with beta 0 (no source at all). Does reading a bias cost the product time?

    python tools/source_pair.py [--rows 8192 --rows 512] [--rounds 5]

Writes results/<gpu>/pairs/source-<stamp>.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import pairing  # noqa: E402
import torch  # noqa: E402

from sgemmlab import plan as plan_mod  # noqa: E402
from sgemmlab import product  # noqa: E402
from sgemmlab.runtime import launch as launch_mod  # noqa: E402

# (N, K): the d 1024 encoder's QKV, out, FF up and FF down projections
WEIGHTS = ((3072, 1024), (1024, 1024), (4096, 1024), (1024, 4096))


def _launch(x, b, c, bias, beta: float, general: bool = False):
    """A fresh plan's bound launch (its own templates), bias read when beta != 0; with
    `general`, the general source's variant."""
    g = plan_mod.describe((tuple(x.shape), x.stride()), (tuple(b.shape), b.stride()),
                          (tuple(c.shape), c.stride()))
    p = plan_mod.make_plan(g, 0, None, None, False, True)
    kind = launch_mod.source_kind
    if general:
        launch_mod.source_kind = lambda s: launch_mod.SOURCE_MATRIX if s else 0
    try:
        kw = {"source": (bias.data_ptr(), 0)} if beta else {}
        fn = p.launch(x.data_ptr(), b.data_ptr(), c.data_ptr(), product.TORCH.raw_stream(0),
                      1.0, beta, **kw)
    finally:
        launch_mod.source_kind = kind
    return p, fn


def main() -> None:
    args, gpu, run = pairing.start("source-pair", __doc__, [8192, 512])
    for M in args.rows:
        for N, K in WEIGHTS:
            x = torch.rand(M, K, device="cuda") * 2 - 1
            w = torch.rand(N, K, device="cuda") * 2 - 1
            bias = torch.rand(N, device="cuda")
            b = w.t()
            want = x.double() @ w.double().t() + bias.double()
            outs = {k: torch.empty(M, N, device="cuda") for k in ("bias", "general", "plain")}
            p, bias_fn = _launch(x, b, outs["bias"], bias, 1.0)
            _, general_fn = _launch(x, b, outs["general"], bias, 1.0, general=True)
            _, plain_fn = _launch(x, b, outs["plain"], bias, 0.0)
            torch.cuda.synchronize()
            for k in ("bias", "general"):
                err = ((outs[k].double() - want).abs().max() / want.abs().max()).item()
                assert err < 1e-4, (M, N, K, k, err)
            sides = {"torch": lambda: torch.addmm(bias, x, b), "bias": bias_fn,
                     "general": general_fn, "plain": plain_fn}
            m, t = pairing.rounds(sides, args.rounds, args.calls)
            rec = {"M": M, "N": N, "K": K, "layout": "NT", "rung": p.rung.label,
                   "config": p.config, "packed": p.staging is not None,
                   **{f"{k}_us": v for k, v in m.items()},
                   **{f"{k}_rounds_us": v for k, v in t.items()},
                   **{f"{k}_vs_torch": m["torch"] / m[k] for k in ("bias", "general", "plain")}}
            run["records"].append(rec)
            print(f"{M}x{N}x{K} {p.rung.label} packed={rec['packed']}: torch {m['torch']:.1f}"
                  + "".join(f"  {k} {m[k]:.1f} ({rec[k + '_vs_torch']:.3f})"
                            for k in ("bias", "general", "plain")), flush=True)
    pairing.finish(run, gpu, "source-pair")


if __name__ == "__main__":
    main()
