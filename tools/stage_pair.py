"""Misaligned products three ways in one run: torch.matmul (cuBLAS, TF32 off), sgemmlab on a
packed plan (plan.STAGE, the default: the operands that close the float4 paths copied into
aligned, zero-padded buffers, C written element by element where its rows are not aligned)
and sgemmlab reading them where they are (STAGE off: the scalar variants); where the packed
plan writes C element by element on a configuration that reads A through registers, a
fourth side at REG_TRANSPOSE=0 (plan.STAGE_REG_TRANSPOSE). What the packed plans gain,
and where (plan.STAGE_MIN_*). Back to back, in alternating rounds; the ratios
are torch's median over each side's. Every shape is checked against float64 first.

    python tools/stage_pair.py [--rounds 5] [--calls 20] [--all]

--all: every shape packs (the gate lowered), to see where it pays; by default the gate is
dispatch's and the record says whether it packed. Writes results/<gpu>/stage-pair-<stamp>.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import pairing  # noqa: E402
import torch  # noqa: E402

from sgemmlab import plan as plan_mod  # noqa: E402
from sgemmlab import product  # noqa: E402

# (M, N, K, layout): the misaligned FFMA-bound shapes cuBLAS led at (K or N not a multiple of
# 4), the awkward mid-size ones, odd cubes beside an aligned one, and column-major operands
SHAPES = [(2470, 6014, 1534, "NN"), (971, 4102, 377, "NN"), (203, 87, 12790, "NN"),
          (9594, 283, 734, "NN"), (7765, 3177, 385, "NN"), (4095, 4095, 4095, "NN"),
          (4097, 4097, 4097, "NN"), (1862, 208, 849, "NN"), (500, 9189, 161, "NN"),
          (196, 987, 1683, "NN"), (61, 3505, 1753, "NN"), (33, 8191, 1025, "NN"),
          (2047, 2049, 1023, "TN"), (2047, 2049, 1023, "NT"), (1031, 3001, 2003, "TT"),
          (768, 3071, 767, "NN"), (4092, 4092, 4092, "NN")]


def _operand(rows: int, cols: int, col_major: bool):
    t = torch.rand((cols, rows) if col_major else (rows, cols), device="cuda") * 2 - 1
    return t.t() if col_major else t


def _side(a, b, want, staged: bool, reg_transpose: int | None = None):
    """The product's launch on a plan made with STAGE = `staged` (and STAGE_REG_TRANSPOSE =
    `reg_transpose`), checked once, its plan and output (kept alive by the caller)."""
    plan_mod.STAGE, plan_mod.STAGE_REG_TRANSPOSE = staged, reg_transpose
    c = torch.empty(a.shape[0], b.shape[1], device="cuda")
    g = plan_mod.describe((tuple(a.shape), a.stride()), (tuple(b.shape), b.stride()),
                          (tuple(c.shape), c.stride()))
    aligned = (a.data_ptr() | b.data_ptr() | c.data_ptr()) & 15 == 0
    p = plan_mod.make_plan(g, 0, None, None, False, aligned)
    fn = p.launch(a.data_ptr(), b.data_ptr(), c.data_ptr(), product.TORCH.raw_stream(0),
                  1.0, 0.0)
    torch.cuda.synchronize()
    err = ((c.double() - want).abs().max() / want.abs().max()).item()
    assert err < 1e-4, (tuple(a.shape), tuple(b.shape), staged, err)
    plan_mod.STAGE, plan_mod.STAGE_REG_TRANSPOSE = True, None
    return p, fn, c


def main() -> None:
    every = "--all" in sys.argv
    if every:
        sys.argv.remove("--all")
    args, gpu, run = pairing.start("stage-pair", __doc__, [0])
    if every:
        for name in ("STAGE_MIN_MN", "STAGE_MIN_K", "STAGE_MIN_K_T", "STAGE_MIN_FLOPS"):
            setattr(plan_mod, name, 1)
    for M, N, K, layout in SHAPES:
        a = _operand(M, K, layout[0] == "T")
        b = _operand(K, N, layout[1] == "T")
        want = a.double() @ b.double()
        p1, staged, c1 = _side(a, b, want, True)
        p2, in_place, c2 = _side(a, b, want, False)
        p3, staged_rt0, c3 = _side(a, b, want, True, 0)
        sides = {"torch": lambda: torch.matmul(a, b), "staged": staged, "in_place": in_place}
        if p3.config != p1.config:  # the table's choice reads A through registers
            sides["staged_rt0"] = staged_rt0
        med, times = pairing.rounds(sides, args.rounds, args.calls)
        notes = p1.staging.notes() if p1.staging else []
        rec = {"M": M, "N": N, "K": K, "layout": layout, "stages": p1.staging is not None,
               "copies": notes, "rung": p1.rung.label, "config": p1.config,
               "in_place_rung": p2.rung.label, "in_place_config": p2.config,
               **{f"{k}_us": v for k, v in med.items()},
               **{f"{k}_rounds_us": v for k, v in times.items()},
               **{f"{k}_vs_torch": med["torch"] / med[k] for k in sides if k != "torch"}}
        run["records"].append(rec)
        print(f"{M:>5}x{N:>5}x{K:>5} {layout} stages={rec['stages']!s:5} torch "
              f"{med['torch']:9.1f}  staged {med['staged']:9.1f} "
              f"({rec['staged_vs_torch']:.3f})  in place {med['in_place']:9.1f} "
              f"({rec['in_place_vs_torch']:.3f})"
              + (f"  REG_TRANSPOSE=0 {med['staged_rt0']:9.1f} "
                 f"({rec['staged_rt0_vs_torch']:.3f})" if "staged_rt0" in med else ""),
              flush=True)
        del c1, c2, c3
    pairing.finish(run, gpu, "stage-pair")


if __name__ == "__main__":
    main()
