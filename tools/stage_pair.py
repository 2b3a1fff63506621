"""Misaligned products several ways in one run, to see what a packed plan gains and where:

    torch          torch.matmul (cuBLAS, TF32 off) on the misaligned operands
    in_place       sgemmlab reading them where they are (plan.STAGE off: scalar variants)
    transposed     a packed plan whose column-major operands are copied row-major
    kept           a packed plan whose copies keep the caller's layout (plan.STAGE_KEEP_A
                   and STAGE_KEEP_B both on; by default only A keeps its layout)
    aligned        sgemmlab on the same matrices stored with every leading dimension
                   padded to a multiple of 4 (no copy: the aligned speed a packed plan
                   can reach; kept - aligned is what its copies cost)
    torch_aligned  torch.matmul on those padded operands (does cuBLAS lose to misalignment?)

Every packed side has the gate lowered (plan.STAGE_SHARE), so every problem packs. Back to
back, in alternating rounds; ratios are torch's median over each side's (torch_aligned's
over aligned's). Every side is checked against float64 first.

    python tools/stage_pair.py [--rounds 5] [--calls 20] [--seed S ... | --shapes]

Problems: the misaligned, one-product, FFMA-bound-ish problems (2^25 flops or more, both
sides 16 or more, K 32 or more) of the mixed random sets of the given seeds
(bench.suites.random_mix, 300 problems), every --every'th by size; --shapes: the fixed list
below instead. Writes results/<gpu>/pairs/stage-<stamp>.json.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import pairing  # noqa: E402
import torch  # noqa: E402

from sgemmlab import plan as plan_mod  # noqa: E402
from sgemmlab import product  # noqa: E402

# (M, N, K, layout): misaligned FFMA-bound shapes of earlier random sets, odd cubes beside an
# aligned one, and column-major operands
SHAPES = [(2470, 6014, 1534, "NN"), (971, 4102, 377, "NN"), (203, 87, 12790, "NN"),
          (9594, 283, 734, "NN"), (7765, 3177, 385, "NN"), (4095, 4095, 4095, "NN"),
          (4097, 4097, 4097, "NN"), (1862, 208, 849, "NN"), (500, 9189, 161, "NN"),
          (196, 987, 1683, "NN"), (61, 3505, 1753, "NN"), (33, 8191, 1025, "NN"),
          (2047, 2049, 1023, "TN"), (2047, 2049, 1023, "NT"), (1031, 3001, 2003, "TT"),
          (768, 3071, 767, "NN")]
MIN_FLOPS = 2**25


def mix_problems(seeds: list[int], every: int) -> list[tuple[int, int, int, str, int]]:
    """(M, N, K, layout, pad) of the seeds' mixed sets that pack (see the docstring)."""
    from sgemmlab.bench import suites
    from sgemmlab.bench.runner import operands_aligned

    out = set()
    for seed in seeds:
        for p in suites.random_mix(300, seed):
            if p.batch == 1 and not operands_aligned(p) and min(p.M, p.N) >= 16 and \
                    p.K >= 32 and 2 * p.M * p.N * p.K >= MIN_FLOPS:
                out.add((p.M, p.N, p.K, p.layout, p.pad))
    return sorted(out, key=lambda s: s[0] * s[1] * s[2])[::every]


def _operand(rows: int, cols: int, col_major: bool, pad: int, padded4: bool):
    """rows x cols, stored column-major for `col_major`, its leading dimension `pad` floats
    longer, or (`padded4`) rounded up to a multiple of 4."""
    lead, other = (rows, cols) if col_major else (cols, rows)
    ld = -(-lead // 4) * 4 if padded4 else lead + pad
    t = (torch.rand((other, ld), device="cuda") * 2 - 1)[:, :lead]
    return t.t() if col_major else t


def _side(a, b, want, stage: bool, keep: bool, pad: int):
    """The product's launch on a plan made with STAGE = `stage` (and STAGE_KEEP_A and _B =
    `keep`; C's rows `pad` floats longer), checked once: (its plan, the launch, C), kept
    alive by the caller."""
    saved = plan_mod.STAGE_KEEP_A, plan_mod.STAGE_KEEP_B
    plan_mod.STAGE, plan_mod.STAGE_KEEP_A, plan_mod.STAGE_KEEP_B = stage, keep, keep
    M, N = a.shape[0], b.shape[1]
    c = torch.full((M, N + pad), float("nan"), device="cuda")[:, :N]
    g = plan_mod.describe((tuple(a.shape), a.stride()), (tuple(b.shape), b.stride()),
                          (tuple(c.shape), c.stride()))
    aligned = (a.data_ptr() | b.data_ptr() | c.data_ptr()) & 15 == 0
    p = plan_mod.make_plan(g, 0, None, None, False, aligned)
    fn = p.launch(a.data_ptr(), b.data_ptr(), c.data_ptr(), product.TORCH.raw_stream(0),
                  1.0, 0.0)
    torch.cuda.synchronize()
    err = ((c.double() - want).abs().max() / want.abs().max()).item()
    assert err < 1e-4 and not c.isnan().any(), (tuple(a.shape), tuple(b.shape), stage, err)
    plan_mod.STAGE, (plan_mod.STAGE_KEEP_A, plan_mod.STAGE_KEEP_B) = True, saved
    return p, fn, c


def _aligned(kept, a4, b4, want):
    """The kept plan's product without its copies, on a4 and b4 (whose leading dimensions
    are the copies') into a C whose rows are a multiple of 4 floats apart: (plan, launch,
    C)."""
    M, N = kept.gemm.M, kept.gemm.N
    c = torch.full((M, -(-N // 4) * 4), float("nan"), device="cuda")[:, :N]
    g = dataclasses.replace(kept.gemm, lda=max(a4.stride()), ldb=max(b4.stride()),
                            ldc=c.stride(0))
    assert not g.swap and (g.trans_a, g.trans_b) == (a4.stride(0) == 1, b4.stride(0) == 1)
    p = plan_mod.Plan(g, 0, kept.rung, kept.config, staging=plan_mod.Staging(g, (), True))
    fn = p.launch(a4.data_ptr(), b4.data_ptr(), c.data_ptr(), product.TORCH.raw_stream(0),
                  1.0, 0.0)
    torch.cuda.synchronize()
    err = ((c.double() - want).abs().max() / want.abs().max()).item()
    assert err < 1e-4 and not c.isnan().any(), ("aligned", tuple(a4.shape), err)
    return p, fn, c


def main() -> None:
    seeds, every = [], 1
    while "--seed" in sys.argv:
        i = sys.argv.index("--seed")
        seeds.append(int(sys.argv[i + 1]))
        del sys.argv[i:i + 2]
    if "--every" in sys.argv:
        i = sys.argv.index("--every")
        every = int(sys.argv[i + 1])
        del sys.argv[i:i + 2]
    fixed = "--shapes" in sys.argv
    if fixed:
        sys.argv.remove("--shapes")
    args, gpu, run = pairing.start("stage-pair", __doc__, [0])
    run["notes"].append(f"problems: {'the fixed list' if fixed else f'seeds {seeds}'}")
    todo = [(*s, 0) for s in SHAPES] if fixed or not seeds else mix_problems(seeds, every)
    saved = plan_mod.STAGE_SHARE
    plan_mod.STAGE_SHARE = 1e30
    for M, N, K, layout, pad in todo:
        ta, tb = layout[0] == "T", layout[1] == "T"
        a = _operand(M, K, ta, pad, False)
        b = _operand(K, N, tb, pad, False)
        a4, b4 = _operand(M, K, ta, 0, True), _operand(K, N, tb, 0, True)
        a4.copy_(a)
        b4.copy_(b)
        want = a.double() @ b.double()
        keep = []  # plans, launches and outputs stay alive through the rounds
        sides = {"torch": lambda: torch.matmul(a, b)}
        for name, stage, kept in (("in_place", False, True), ("transposed", True, False),
                                  ("kept", True, True)):
            p, fn, c = _side(a, b, want, stage, kept, pad)
            keep.append((name, p, c))
            sides[name] = fn
        p, fn, c = _aligned(keep[-1][1], a4, b4, want)
        keep.append(("aligned", p, c))
        sides["aligned"] = fn
        sides["torch_aligned"] = lambda: torch.matmul(a4, b4)
        med, times = pairing.rounds(sides, args.rounds, args.calls)
        plans = {name: p for name, p, _ in keep}
        rec = {"M": M, "N": N, "K": K, "layout": layout, "pad": pad,
               "copies": {k: p.staging.notes() if p.staging else [] for k, p in plans.items()},
               "rungs": {k: [p.rung.label, p.config] for k, p in plans.items()},
               **{f"{k}_us": v for k, v in med.items()},
               **{f"{k}_rounds_us": v for k, v in times.items()},
               **{f"{k}_vs_torch": med["torch"] / med[k] for k in sides
                  if k not in ("torch", "aligned", "torch_aligned")},
               "aligned_vs_torch_aligned": med["torch_aligned"] / med["aligned"]}
        run["records"].append(rec)
        print(f"{M:>5}x{N:>5}x{K:>5} {layout}+{pad} torch {med['torch']:8.1f}  in place "
              f"{rec['in_place_vs_torch']:.3f}  transposed {rec['transposed_vs_torch']:.3f}  "
              f"kept {rec['kept_vs_torch']:.3f}  aligned {med['aligned']:8.1f} "
              f"({rec['aligned_vs_torch_aligned']:.3f} of torch aligned "
              f"{med['torch_aligned']:8.1f})", flush=True)
        del keep
    plan_mod.STAGE_SHARE = saved
    pairing.finish(run, gpu, "stage-pair")


if __name__ == "__main__":
    main()
