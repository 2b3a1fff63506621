"""What refused rows cost Ozaki scheme II (rung 26, runtime/ozaki.py): the whole product on
inputs whose rows the flatness rule refuses (none; one in a hundred; half; every one or
most, as activations with a few outlier features give; two, as a few tokens' massive
activations give), timed against exact FP32
(`sgemmlab.matmul(..., precision="ieee")`) and cuBLAS SGEMM (torch.matmul, TF32 off),
interleaved in one run, with each one's error. A probe for the kernel work; writes JSON.

    PYTHONPATH=src python3 tools/refusal_probe.py --sizes 2048,4096 --out refusal.json

It imports the package (and tools/ozaki_probe.py's helpers) from the tree it sits in, so the
same file in another checkout measures that checkout's code: tools/h200.sh's `refusal` stage
runs the copy in .cache/baseline, a checkout carried beside the tree, after this one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ozaki_probe import _time, in_order, write_json  # noqa: E402

#: name -> (what it is, how A's rows are made uneven)
CASES = {
    "none": "normal entries: no row refused",
    "one_in_100": "every 100th row of A holds one entry of 2^20: 1 % of its rows refused",
    "half": "every other row of A holds one entry of 2^20",
    "outlier_features": "4 columns of A at 1000x the rest (outlier features): every row",
    "outlier_100x": "6 columns of A at 100x the rest: most rows",
    "massive": "2 rows of A with 2 entries of 1e4 (massive activations of a few tokens)",
}


def operands(case: str, M: int, N: int, K: int, seed: int):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(M, K, device="cuda", generator=g)
    b = torch.randn(K, N, device="cuda", generator=g)
    if case == "one_in_100":
        a[::100, 7] = 2.0**20
    elif case == "half":
        a[::2, 7] = 2.0**20
    elif case == "outlier_features":
        a[:, :4] *= 1000.0
    elif case == "outlier_100x":
        a[:, :6] *= 100.0
    elif case == "massive":
        a[:2, 5] = a[:2, 9] = 1e4
    return a, b


def measure(case: str, M: int, N: int, K: int, reps: int) -> dict:
    import torch

    import sgemmlab
    from sgemmlab.ozaki import reference as ref
    from sgemmlab.runtime import ozaki
    from sgemmlab.runtime.arrays import stream_for

    a, b = operands(case, M, N, K, M + K)
    refused = int((ref.flatness(a.cpu().numpy(), 1) < ref.FLAT).sum())
    c = torch.empty(M, N, device="cuda")
    stream = stream_for(torch.cuda.current_stream().cuda_stream, 0)
    launch = ozaki.bind(0, M, N, K, 1.0, a.data_ptr(), K, b.data_ptr(), N, 0.0,
                        c.data_ptr(), N, stream)
    exact = torch.empty_like(c)
    runs = {"scheme": launch,
            "ieee": lambda: sgemmlab.matmul(a, b, out=exact, precision="ieee"),
            "cublas": lambda: torch.matmul(a, b, out=exact)}
    for fn in runs.values():  # warm: compiled, loaded, planned
        fn()
    torch.cuda.synchronize()
    times = {name: [] for name in runs}
    for _ in range(reps):  # interleaved
        for name, fn in runs.items():
            times[name].append(_time(fn, 1)[0])
    per = {name: statistics.median(t) for name, t in zip(
        ozaki.steps_order(ozaki.use_scale(K, True), ozaki.use_scale(K, False)),
        zip(*(in_order(launch._steps) for _ in range(reps))))}
    want = a.double() @ b.double()
    scale = a.double().abs() @ b.double().abs()
    errors = {}
    for name in ("scheme", "cublas"):
        runs[name]()
        torch.cuda.synchronize()
        got = c if name == "scheme" else exact
        e = (got.double() - want).abs() / scale
        errors[name] = {"max": float(e.max()), "median": float(e.median()),
                        "nan": int(torch.isnan(got).sum())}
    ms = {name: statistics.median(t) for name, t in times.items()}
    return {"case": case, "what": CASES[case], "shape": [M, N, K], "refused_rows": refused,
            "ms": ms, "steps_ms": per,
            "scheme_over_ieee": ms["ieee"] / ms["scheme"],
            "scheme_over_cublas": ms["cublas"] / ms["scheme"], "errors": errors}


def main() -> None:
    import torch

    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="2048,4096")
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--out", default="refusal-probe.json")
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    records = []
    for n in map(int, args.sizes.split(",")):
        for case in args.cases.split(","):
            rec = measure(case, n, n, n, args.reps)
            print(json.dumps(rec), flush=True)
            records.append(rec)
    write_json(args.out, "tools/refusal_probe.py",
               "paired within this run: scheme, ieee and cublas interleaved, medians of "
               f"{args.reps}; errors componentwise over |A||B|", records,
               tree=str(Path(__file__).resolve().parents[1]))


if __name__ == "__main__":
    main()
