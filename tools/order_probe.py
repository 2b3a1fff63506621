"""Probe for issue 19's lever, before any rung is built on it: rungs 13 and 14 at their H200
defaults, as ptxas ordered them and after runtime/sassedit.reorder (each run of FFMAs
reordered so it reads fewer registers per bank, the reuse flags set to match). Checks both
against float64 at ragged and square shapes, then times the reordered kernel against the
original, paired, L2 flushed (bench/measure.paired, the bench's own method), and cuBLAS
beside them. Writes results/<gpu>/order-probe-*.json.

    PYTHONPATH=src python3 tools/order_probe.py [--rounds 9]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

SHAPES = [(2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (4096, 4096, 256),
          (256, 4096, 4096)]
CHECKS = [(1, 1, 1), (127, 129, 131), (1000, 1001, 999), (4096, 4096, 4096)]


def main() -> int:
    import torch

    from sgemmlab import registry
    from sgemmlab.bench import results
    from sgemmlab.bench.check import check_result
    from sgemmlab.bench.measure import L2Flusher, Method, median, paired
    from sgemmlab.bench.runner import _bind
    from sgemmlab.registry import config_key
    from sgemmlab.runtime import launch, sassedit
    from sgemmlab.runtime.device import gpu_info

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    gpu = gpu_info()
    method = Method(launches=20, rounds=args.rounds)
    flush = L2Flusher(gpu.l2_bytes)
    records = []
    for label in ("13", "14"):
        rung = registry.rung(label)
        cfg = rung.default(gpu.name)
        launcher = launch.Launcher(rung, cfg)
        from cuda.core import ObjectCode

        swap = {}  # load() key -> (ptxas kernel, reordered kernel, Compiled), both variants
        for vec4 in (True, False):
            kernel, compiled = launch.load(rung, cfg, vec4)
            words = list(sassedit.text(compiled.cubin, "sgemm").words)
            new = sassedit.reorder(words)
            edits = {i: w for i, (v, w) in enumerate(zip(words, new)) if v != w}
            cubin = sassedit.replace(compiled.cubin, "sgemm", edits)
            ordered = ObjectCode.from_cubin(cubin).get_kernel("sgemm")
            key = (rung.label, config_key(rung.macros(cfg)), vec4, False, False, 0)
            swap[key] = (kernel, ordered, compiled)
            if vec4:
                model = (sassedit.operand_cycles(words), sassedit.operand_cycles(new))
                changed = len(edits)
        print(f"rung {label}: {changed} instructions changed; model over the kernel "
              f"{model[0]['per_instruction']} -> {model[1]['per_instruction']}")

        def bound(which, A, B, C):
            for key, (k0, k1, comp) in swap.items():
                launch._loaded[key] = (k1 if which == "ordered" else k0, comp)
            return _bind(launcher, A, B, C)

        for M, N, K in CHECKS:
            A = torch.rand(M, K, device="cuda") * 2 - 1
            B = torch.rand(K, N, device="cuda") * 2 - 1
            ref = (A.double() @ B.double())
            for name in ("ptxas", "ordered"):
                C = torch.full((M, N), float("nan"), device="cuda")
                bound(name, A, B, C)()
                torch.cuda.synchronize()
                res = check_result(C, ref, K)
                records.append({"kind": "check", "rung": label, "variant": name, "M": M,
                                "N": N, "K": K, "ok": res.ok, "error": res.error})
                print(f"  check {name:8s} {M}x{N}x{K}: {'ok' if res.ok else res.reason}")
                if not res.ok:
                    return 1
        for M, N, K in SHAPES:
            A = torch.rand(M, K, device="cuda") * 2 - 1
            B = torch.rand(K, N, device="cuda") * 2 - 1
            C = torch.empty(M, N, device="cuda")
            torch.backends.cuda.matmul.allow_tf32 = False
            fo, fn = bound("ordered", A, B, C), bound("ptxas", A, B, C)

            def cublas():
                torch.mm(A, B, out=C)

            p = paired(fo, fn, method, flush)
            q = paired(fo, cublas, method, flush)
            ratio = median([b / c for c, b in zip(map(median, p.candidate_us),
                                                  map(median, p.baseline_us))])
            vs = median([b / c for c, b in zip(map(median, q.candidate_us),
                                               map(median, q.baseline_us))])
            rec = {"kind": "time", "rung": label, "M": M, "N": N, "K": K,
                   "ordered_us": median([median(x) for x in p.candidate_us]),
                   "ptxas_us": median([median(x) for x in p.baseline_us]),
                   "speedup_vs_ptxas": ratio, "ordered_vs_cublas": vs,
                   "rounds": [p.candidate_us, p.baseline_us, q.baseline_us]}
            records.append(rec)
            print(f"  {M}x{N}x{K}: ordered {rec['ordered_us']:.1f} us, ptxas "
                  f"{rec['ptxas_us']:.1f} us: x{ratio:.4f}; ordered/cuBLAS x{vs:.4f}")
        records.append({"kind": "model", "rung": label, "ptxas": model[0],
                        "ordered": model[1], "changed": changed})
    run = results.new_run("order-probe", gpu, method.as_dict() | {"flush": True})
    run["records"] = records
    path = results.write(run, gpu.slug, f"order-probe-{results.stamp()}")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
