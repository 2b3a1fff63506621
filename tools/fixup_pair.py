"""Rung 14 before and after its atomic fix-ups kept subnormal partials (a compare-and-swap for
a partial below 2^-100): the same configuration built from a previous source file and from
the current one, with each FIXUP, timed in alternating rounds in one run, cuBLAS beside.
Does keeping subnormals cost normal data anything?

    git show 63bbfa4:src/sgemmlab/kernels/ladder/14_streamk.cu > .cache/14_streamk_prev.cu
    python tools/fixup_pair.py --previous .cache/14_streamk_prev.cu [--rounds 7]

Writes results/<gpu>/pairs/fixup-pair-<stamp>.json.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pairing  # noqa: E402
import torch  # noqa: E402

from sgemmlab import product, registry  # noqa: E402
from sgemmlab.bench import results  # noqa: E402
from sgemmlab.runtime.arrays import stream_for  # noqa: E402
from sgemmlab.runtime.compiler import KERNEL_DIR  # noqa: E402
from sgemmlab.runtime.device import gpu_info  # noqa: E402
from sgemmlab.runtime.launch import Launcher  # noqa: E402

SHAPES = ((1024, 1024, 1024), (4096, 4096, 4096), (256, 192, 16384), (2049, 2049, 511))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--previous", required=True, type=Path)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    product.TORCH.find()
    gpu = gpu_info(0)
    run = results.new_run("fixup-pair", gpu, {"mode": "throughput", "calls": args.calls,
                                              "rounds": args.rounds,
                                              "previous": str(args.previous)})
    now = registry.rung(14)
    # the previous source beside the current one's includes (it includes ladder/13_hoisted.cu)
    prev_path = KERNEL_DIR / "ladder" / "14_streamk_previous.cu"
    prev_path.write_text(args.previous.read_text())
    try:
        before = replace(now, name="streamk_previous", source="ladder/14_streamk_previous.cu")
        stream = stream_for(product.TORCH.raw_stream(0), 0)
        for M, N, K in SHAPES:
            a = torch.randn(M, K, device="cuda")
            b = torch.randn(K, N, device="cuda")
            for fixup in (1, 2):
                cfg = {**now.default(gpu.name), "FIXUP": fixup}
                sides, outs = {}, {}
                for name, rung in (("previous", before), ("now", now)):
                    c = torch.empty(M, N, device="cuda")
                    outs[name] = c
                    sides[name] = Launcher(rung, cfg).bind(
                        M, N, K, 1.0, a.data_ptr(), K, b.data_ptr(), N, 0.0, c.data_ptr(), N,
                        stream)
                cub = torch.empty(M, N, device="cuda")
                sides["cublas"] = lambda: torch.matmul(a, b, out=cub)
                for f in sides.values():
                    f()
                torch.cuda.synchronize()
                assert torch.allclose(outs["previous"], outs["now"], rtol=1e-4, atol=1e-3)
                m, t = pairing.rounds(sides, args.rounds, args.calls)
                rec = {"M": M, "N": N, "K": K, "FIXUP": fixup,
                       **{f"{k}_us": v for k, v in m.items()},
                       **{f"{k}_rounds_us": v for k, v in t.items()},
                       "now_vs_previous": m["previous"] / m["now"],
                       "now_vs_cublas": m["cublas"] / m["now"]}
                run["records"].append(rec)
                print(f"{M}x{N}x{K} FIXUP={fixup}: previous {m['previous']:.1f} us, now "
                      f"{m['now']:.1f} us ({rec['now_vs_previous']:.3f}x), cuBLAS "
                      f"{m['cublas']:.1f} us", flush=True)
    finally:
        prev_path.unlink()
    pairing.finish(run, gpu, "fixup-pair")


if __name__ == "__main__":
    main()
