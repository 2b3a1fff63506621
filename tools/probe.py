"""Quick exploration on the GPU: check and time a few configurations of a few rungs against
cuBLAS (paired, QUICK method) before committing to a full `sgemmlab tune`.

    PYTHONPATH=src python3 tools/probe.py --shape 1024 --shape 4096 \
        "12:TRANSPOSE_A=0|1,REGPF=0|1" "13:" "14:SPLIT=0|1,FIXUP=0|1" --out $OUT/probe.json

A spec is RUNG:OVERRIDES, the overrides applied to the rung's default for this GPU, with
`|` separating alternatives (their product is probed). Numbers from here steer the work;
the figures the project states come from `sgemmlab tune`, `ladder` and `bench` runs.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path


def expand(spec: str, gpu_name: str):
    from sgemmlab import registry

    key, _, rest = spec.partition(":")
    rung = registry.rung(key)
    base = rung.default(gpu_name)
    names, choices = [], []
    for item in filter(None, rest.split(",")):
        name, _, values = item.partition("=")
        names.append(name.strip().upper())
        choices.append([int(v) for v in values.split("|")])
    for values in itertools.product(*choices) if names else [()]:
        cfg = {**base, **dict(zip(names, values))}
        yield rung, cfg


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("specs", nargs="+")
    ap.add_argument("--shape", action="append", required=True,
                    help="N (square) or MxNxK; repeatable")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    from sgemmlab.bench.measure import QUICK, L2Flusher
    from sgemmlab.bench.runner import measure_shape, rung_candidate
    from sgemmlab.registry import config_key
    from sgemmlab.runtime.device import gpu_info
    from sgemmlab.tune.search import compile_many

    gpu = gpu_info()
    shapes = []
    for s in args.shape:
        parts = [int(x) for x in s.lower().split("x")]
        shapes.append(tuple(parts * 3) if len(parts) == 1 else tuple(parts))
    pairs = [(r, c) for spec in args.specs for r, c in expand(spec, gpu.name)]
    legal = []
    for r, c in pairs:
        if problems := r.violations(c):
            print(f"skip {r.label} {config_key(c)}: {'; '.join(problems)}")
        else:
            legal.append((r, c))
    built = []
    for (r, c), res in compile_many(legal, gpu.arch, jobs=16):
        if isinstance(res, Exception) or res.spills:
            print(f"drop {r.label} {config_key(c)}: {res}")
        else:
            built.append((r, c))
    flush = L2Flusher(gpu.l2_bytes)
    records = []
    for M, N, K in shapes:
        cands = [rung_candidate(r, c) for r, c in built]
        for rec in measure_shape(M, N, K, cands, QUICK, flush):
            rec.pop("times_us", None), rec.pop("cublas_times_us", None)
            records.append(rec)
            if rec["kernel"] != "cublas":
                ratio = rec.get("vs_cublas")
                shown = f"{100 * ratio:6.1f} %" if ratio else rec.get("status")
                print(f"{M}x{N}x{K} {rec['kernel']:16s} {shown}  "
                      f"{rec.get('median_us', 0):9.1f} us  regs {rec.get('registers')}  "
                      f"{config_key(rec['config'])}", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"gpu": gpu.name, "records": records}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
