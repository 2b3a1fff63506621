"""x @ W^T three ways in one run: torch.matmul (cuBLAS, TF32 off), sgemmlab.matmul on a
row-major copy of W^T (plan.PACK_B, the default at many rows) and sgemmlab.matmul reading
W^T where it is (PACK_B off): what the packed plans gain at the linear layers' shapes, and
from how many rows on (plan.PACK_MIN_M). Back to back, in alternating rounds; the ratios
are torch's median over each side's.

    python tools/pack_pair.py [--rows 512 --rows 2048 ...] [--rounds 5]

Writes results/<gpu>/pairs/pack-<stamp>.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import pairing  # noqa: E402
import torch  # noqa: E402

from sgemmlab import plan as plan_mod  # noqa: E402
from sgemmlab import product  # noqa: E402

# (N, K) of the layers measured: encoder d 1024 (QKV, out, FF up, FF down), Llama 2048 and
# 4096 (q/o, gate/up, down)
WEIGHTS = ((3072, 1024), (1024, 1024), (4096, 1024), (1024, 4096), (2048, 2048),
           (5632, 2048), (2048, 5632), (4096, 4096), (11008, 4096), (4096, 11008))


DEFAULT_MIN = (plan_mod.PACK_MIN_M, plan_mod.PACK_MIN_OUTPUTS)


def _side(x, w, want, packed: bool):
    """The product's launch on a plan made with PACK_B = `packed`, checked once, and its
    output (kept alive by the caller)."""
    plan_mod.PACK_B = packed
    M, N = x.shape[0], w.shape[0]
    c = torch.empty(M, N, device="cuda")
    b = w.t()
    g = plan_mod.describe((tuple(x.shape), x.stride()), (tuple(b.shape), b.stride()),
                          (tuple(c.shape), c.stride()))
    p = plan_mod.make_plan(g, 0, None, None, False, True)
    assert (p.staging is not None) == (plan_mod.packed_b(g, True, "ieee") is not None)
    fn = p.launch(x.data_ptr(), b.data_ptr(), c.data_ptr(), product.TORCH.raw_stream(0),
                  1.0, 0.0)
    torch.cuda.synchronize()
    err = ((c.double() - want).abs().max() / want.abs().max()).item()
    assert err < 1e-4, (M, N, packed, err)
    plan_mod.PACK_B = True
    return fn, c


def measure(M: int, N: int, K: int, rounds: int, calls: int) -> dict:
    """One shape's record: each side's median time per call over alternating rounds."""
    x = torch.rand(M, K, device="cuda") * 2 - 1
    w = torch.rand(N, K, device="cuda") * 2 - 1
    want = x.double() @ w.double().t()
    packed, c1 = _side(x, w, want, True)
    in_place, c2 = _side(x, w, want, False)
    sides = {"torch": lambda: torch.matmul(x, w.t()), "packed": packed, "in_place": in_place}
    med, times = pairing.rounds(sides, rounds, calls)
    rec = {"M": M, "N": N, "K": K, "layout": "NT",
           "packs": M >= DEFAULT_MIN[0] and M * N >= DEFAULT_MIN[1],  # at dispatch's gate
           **{f"{k}_us": v for k, v in med.items()},
           **{f"{k}_rounds_us": v for k, v in times.items()}}
    rec["packed_vs_torch"] = rec["torch_us"] / rec["packed_us"]
    rec["in_place_vs_torch"] = rec["torch_us"] / rec["in_place_us"]
    return rec


def main() -> None:
    args, gpu, run = pairing.start("pack-pair", __doc__, [512, 1024, 2048, 4096, 8192])
    # every size packs here, to see from where it pays (PACK_MIN_M is what dispatch uses)
    plan_mod.PACK_MIN_M, plan_mod.PACK_MIN_OUTPUTS = 1, 1
    for M in args.rows:
        for N, K in WEIGHTS:
            rec = measure(M, N, K, args.rounds, args.calls)
            run["records"].append(rec)
            print(f"{M:>5}x{N:>5}x{K:>5}  torch {rec['torch_us']:8.1f}  packed "
                  f"{rec['packed_us']:8.1f} ({rec['packed_vs_torch']:.3f})  in place "
                  f"{rec['in_place_us']:8.1f} ({rec['in_place_vs_torch']:.3f})", flush=True)
    pairing.finish(run, gpu, "pack-pair")


if __name__ == "__main__":
    main()
