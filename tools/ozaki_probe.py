"""Explore rung 26's pipeline on the GPU: each of its launches timed alone, the whole product
against cuBLAS SGEMM (torch.matmul, TF32 off) in the same run, and its error beside cuBLAS's
on the same inputs. A probe for the kernel work (the project's figures come from `sgemmlab
bench`); writes JSON.

    PYTHONPATH=src python3 tools/ozaki_probe.py --sizes 4096,8192 --out probe.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def _time(fn, reps: int) -> list[float]:
    import torch

    out = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e))
    return out


def _per_call(fn, burst: int) -> list[float]:
    """One sample: `burst` calls back to back, timed together, per call (a burst of 40 is
    how `sgemmlab bench` times: the board's power and clock as under a sustained load)."""
    return [t / burst for t in _time(lambda: [fn() for _ in range(burst)], 1)]


def in_order(steps) -> list[float]:
    """Each launch's time, in one pass through them in order. (Timed alone, over and over,
    oz_norms would count refused rows again and again, which only oz_fallback sets back:
    `measure` does that only on normal inputs, where nothing is refused.)"""
    import torch

    events = [torch.cuda.Event(enable_timing=True) for _ in range(len(steps) + 1)]
    events[0].record()
    for step, e in zip(steps, events[1:]):
        step()
        e.record()
    events[-1].synchronize()
    return [s.elapsed_time(e) for s, e in zip(events, events[1:])]


def write_json(path: str, tool: str, note: str, records: list, **extra) -> None:
    """A probe's results file: the tool, the commit it ran (SGEMMLAB_GIT_COMMIT), the GPU and
    torch, a note on how it paired, anything `extra`, and its records. (tools/emulated_pair.py
    and tools/refusal_probe.py write theirs with it too.)"""
    import os

    import torch

    Path(path).write_text(json.dumps({
        "tool": tool, "commit": os.environ.get("SGEMMLAB_GIT_COMMIT"),
        "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "note": note,
        **extra, "records": records}, indent=1))


def under_smi(fn, seconds: float = 3.0) -> dict:
    """Run fn() over and over for `seconds` while nvidia-smi samples the SM clock and the
    board's power every 100 ms: their medians, and the power limit."""
    import subprocess
    import time

    import torch

    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,power.limit",
                            "--format=csv,noheader,nounits", "-lms", "100"],
                           stdout=subprocess.PIPE, text=True)
    end = time.time() + seconds
    while time.time() < end:
        fn()
        torch.cuda.synchronize()
    smi.terminate()
    rows = [[float(x) for x in line.split(",")] for line in smi.communicate()[0].splitlines()
            if line.count(",") == 2]
    rows = rows[len(rows) // 4:]  # past the ramp
    return {"samples": len(rows),
            "sm_clock_mhz_median": statistics.median(r[0] for r in rows),
            "power_w_median": statistics.median(r[1] for r in rows),
            "power_limit_w": rows[0][2]} if rows else {"samples": 0}


def combo(spec: str) -> tuple[dict, dict]:
    """"MERGED=1,SCALE_BLOCKS=3,GROUP_M=16" -> (ozaki's switches, each of its own type, as a
    results file records them: bench/results.SETTINGS; rung 26's configuration, as
    ozaki.gemm_overrides reads it)."""
    from sgemmlab.bench.results import SETTINGS, parse_settings
    from sgemmlab.runtime.ozaki import gemm_overrides

    pairs = [kv.strip() for kv in spec.split(",") if kv.strip()]
    ours = [kv for kv in pairs if kv.split("=")[0] in SETTINGS["runtime.ozaki"]]
    switches = {name: value for _, name, value in
                parse_settings(f"runtime.ozaki.{kv}" for kv in ours)}
    return switches, gemm_overrides(",".join(kv for kv in pairs if kv not in ours))


def measure(M: int, N: int, K: int, count: int, reps: int, b_cols: bool = False,
            cluster: int = 1, smi: bool = False, stages: int = 4, group_m: int = 8,
            crt_rows: bool = False, two_pass: bool = False, rows_r8: bool = False,
            gemm_variants: tuple[str, ...] = (), overlap: bool = False,
            burst: int = 1, crt_int: bool = False, merged: bool = False,
            scale_blocks: tuple[int, ...] = (), rows2: bool = False,
            combos: tuple[str, ...] = ()) -> dict:
    import torch

    from sgemmlab.runtime import ozaki
    from sgemmlab.runtime.arrays import stream_for

    a = torch.randn(M, K, device="cuda")
    b = torch.randn(N, K, device="cuda").t() if b_cols else torch.randn(K, N, device="cuda")
    c = torch.empty(M, N, device="cuda")
    stream = stream_for(torch.cuda.current_stream().cuda_stream, 0)
    cfg = {**ozaki.rung().seed, "CLUSTER": cluster, "STAGES": stages, "GROUP_M": group_m}

    def bind(gemm: dict | None = None, **switches):
        """The product bound with rung 26's configuration `gemm` over this run's, and ozaki's
        module switches set as given (then restored); and its launches' names (which
        operands oz_scale takes: A row-major has its rows along k, B^T where B is
        column-major)."""
        saved = {name: getattr(ozaki, name) for name in switches}
        for name, value in switches.items():
            setattr(ozaki, name, value)
        try:
            order = ozaki.steps_order(ozaki.use_scale(K, True), ozaki.use_scale(K, b_cols))
            return ozaki.bind(0, M, N, K, 1.0, a.data_ptr(), K, b.data_ptr(),
                              K if b_cols else N, 0.0, c.data_ptr(), N, stream, count=count,
                              trans_b=b_cols, cfg={**cfg, **(gemm or {})}), order
        finally:
            for name, value in saved.items():
                setattr(ozaki, name, value)

    launch, order = bind()
    launch()
    torch.cuda.synchronize()
    fused = "scale_a" in order, "scale_b" in order
    steps = dict(zip(order, launch._steps))
    per = {name: statistics.median(_time(step, reps)) for name, step in steps.items()}
    # the same product another way, its whole time paired with this one's below
    variants = {}
    if two_pass and any(fused):  # oz_norms and oz_split
        variants["two_pass"] = bind(FUSED=False)
    if rows_r8 and not b_cols:  # 8 rows a block of B^T
        variants["rows_r8"] = bind(SCALE_ROWS_R=8)
    if crt_int:  # the recombination's sums in INT32 pieces (oz_crt_int)
        variants["crt_int"] = bind(CRT_INT=True)
    if merged:  # a pass both operands take in one launch, or (where that is the default) not;
        # and with the fallback's wave in the splits' launch
        variants["separate" if ozaki.MERGED else "merged"] = bind(MERGED=not ozaki.MERGED)
        if not ozaki.FALLBACK_EARLY:
            variants["merged_early"] = bind(MERGED=True, FALLBACK_EARLY=True)
    for n in scale_blocks:  # oz_scale's launch bounds: n blocks an SM
        variants[f"scale_blocks{n}"] = bind(SCALE_BLOCKS=n)
    if rows2:  # oz_scale's 2 rows a block, alone and with those launch bounds it is built for
        for n in (1, *[b for b in scale_blocks if b <= 3]):
            variants["rows2" + (f"_blocks{n}" if n != 1 else "")] = bind(
                SCALE_ROWS_K=2, SCALE_ROWS_R=2, SCALE_BLOCKS=n)
    if overlap:  # every launch but the first overlapping the one before it, or (where
        # that is the default) none
        variants["plain" if ozaki.OVERLAP else "overlap"] = bind(OVERLAP=not ozaki.OVERLAP)
    for spec in gemm_variants:  # rung 26 in another configuration ("STORE16=1,PINGPONG=1")
        variants[f"gemm[{spec}]"] = bind(ozaki.gemm_overrides(spec))
    for spec in combos:  # several of ozaki's switches at once, and rung 26's configuration
        switches, over = combo(spec)
        variants[f"set[{spec}]"] = bind(over, **switches)
    for name, (other, other_order) in variants.items():
        other()
        torch.cuda.synchronize()
        per.update({f"{name}_{step}": statistics.median(_time(launch_, reps))
                    for step, launch_ in zip(other_order, other._steps)})
    variants = {name: other for name, (other, _) in variants.items()}
    if crt_rows:  # oz_crt with a row per thread (its first grid), beside the one-wave grid
        again, _ = bind(CRT_ONE_WAVE=False)
        at = order.index("crt")
        crt, rowwise = launch._steps[at], again._steps[at]
        rounds = [(_time(crt, 1)[0], _time(rowwise, 1)[0]) for _ in range(reps)]
        per["crt"] = statistics.median(r[0] for r in rounds)  # paired with the next
        per["crt_row_per_thread"] = statistics.median(r[1] for r in rounds)
    # paired, interleaved: each round runs the product, its variants and cuBLAS once, in an
    # order drawn afresh (seeded by the shape): run in one fixed order, each one follows the
    # same neighbour every round, and in bursts the board's power state after that
    # neighbour moved a variant by more than the few percent an A/B must tell apart
    runs = {"ozaki": launch, **variants, "cublas": lambda: torch.matmul(a, b, out=c)}
    times = {name: [] for name in runs}
    rng = random.Random(M * 1_000_003 + N * 1009 + K)
    for _ in range(reps):
        for name in rng.sample(list(runs), len(runs)):
            times[name] += _per_call(runs[name], burst)
    whole, cublas = times.pop("ozaki"), times.pop("cublas")
    others = times
    same = {}
    for name, other in variants.items():  # the same bits but where a row's exponent sits
        other()                           # on a boundary that two sums' orders round apart
        torch.cuda.synchronize()
        theirs = c.clone()
        launch()
        torch.cuda.synchronize()
        same[name] = float((c == theirs).double().mean())
    launch()
    torch.cuda.synchronize()
    mine = c.clone()
    torch.matmul(a, b, out=c)
    ref = a.double() @ b.double()
    scale = a.double().abs() @ b.double().abs()
    e_mine, e_cub = (mine.double() - ref).abs() / scale, (c.double() - ref).abs() / scale
    ops = 2.0 * M * N * K
    extra = {}
    if smi:  # the clock and power under the INT8 products alone, and under cuBLAS SGEMM
        extra = {"smi_gemm": under_smi(steps["gemm"]),
                 "smi_cublas": under_smi(lambda: torch.matmul(a, b, out=c))}
    return {**extra, "shape": [M, N, K], "count": count, "cluster": cluster,
            "stages": stages, "group_m": group_m, "burst": burst,
            "b": "column-major" if b_cols else "row-major",
            "steps_ms": per, "one_pass_scale": list(fused),
            **{f"{name}_ms": statistics.median(t) for name, t in others.items()},
            **{f"{name}_same_bits": v for name, v in same.items()},
            "ozaki_ms": statistics.median(whole), "cublas_ms": statistics.median(cublas),
            "gemm_tops": ops * count / (per["gemm"] * 1e-3) / 1e12,
            "speedup": statistics.median(cublas) / statistics.median(whole),
            "err_max": float(e_mine.max()), "err_median": float(e_mine.median()),
            "cublas_err_max": float(e_cub.max()), "cublas_err_median": float(e_cub.median())}


def main() -> None:
    import torch

    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="4096,8192")
    p.add_argument("--count", type=int, default=7)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--b-cols", action="store_true", help="also with B column-major")
    p.add_argument("--clusters", default="1", help="rung 26's CLUSTER values, e.g. 1,2")
    p.add_argument("--stages", default="4", help="rung 26's STAGES values, e.g. 3,4")
    p.add_argument("--group-m", default="8", help="rung 26's GROUP_M values, e.g. 4,8,16")
    p.add_argument("--crt-rows", action="store_true",
                   help="also time oz_crt with a row per thread, paired with its one-wave grid")
    p.add_argument("--two-pass", action="store_true",
                   help="also the product by oz_norms and oz_split where oz_scale runs, paired")
    p.add_argument("--rows-r8", action="store_true",
                   help="also the product with oz_scale's 8 rows a block of B^T, paired")
    p.add_argument("--gemm", default="",
                   help="also rung 26 in other configurations, paired: '/'-separated (no "
                        "quotes needed), e.g. STORE16=1/PINGPONG=1,STORE16=1")
    p.add_argument("--overlap", action="store_true",
                   help="also the product with its launches overlapped (ozaki.OVERLAP) "
                        "or, where that is the default, not: paired")
    p.add_argument("--crt-int", action="store_true",
                   help="also the product with oz_crt_int's integer sums (ozaki.CRT_INT), "
                        "paired")
    p.add_argument("--merged", action="store_true",
                   help="also the product with a pass both operands take in one launch "
                        "(ozaki.MERGED) or, where that is the default, not: paired")
    p.add_argument("--scale-blocks", default="",
                   help="also the product with oz_scale built for this many blocks an SM "
                        "(ozaki.SCALE_BLOCKS), paired: e.g. 3,4")
    p.add_argument("--rows2", action="store_true",
                   help="also the product with oz_scale staging 2 rows a block "
                        "(ozaki.SCALE_ROWS_K and _R), alone and with each --scale-blocks: "
                        "paired")
    p.add_argument("--set", default="",
                   help="also the product with several of ozaki's switches and rung 26's "
                        "configuration at once, paired: '/'-separated, e.g. "
                        "MERGED=1,FALLBACK_EARLY=1,SCALE_BLOCKS=3/MERGED=1,GROUP_M=16")
    p.add_argument("--burst", type=int, default=1,
                   help="each paired sample is this many calls back to back (40: as the "
                        "bench times, under sustained power)")
    p.add_argument("--smi", action="store_true",
                   help="also sample the SM clock and power under the products (nvidia-smi)")
    p.add_argument("--out", default="ozaki-probe.json")
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    records = []
    for n in map(int, args.sizes.split(",")):
        for cols, cl, st, gm in itertools.product(
                (False, True) if args.b_cols else (False,), map(int, args.clusters.split(",")),
                map(int, args.stages.split(",")), map(int, args.group_m.split(","))):
            rec = measure(n, n, n, args.count, args.reps, cols, cl, args.smi, st, gm,
                          args.crt_rows, args.two_pass, args.rows_r8,
                          tuple(v for v in args.gemm.split("/") if v), args.overlap,
                          args.burst, args.crt_int, args.merged,
                          tuple(int(v) for v in args.scale_blocks.split(",") if v),
                          args.rows2, tuple(v for v in args.set.split("/") if v))
            print(json.dumps(rec), flush=True)
            records.append(rec)
            torch.cuda.empty_cache()
    write_json(args.out, "tools/ozaki_probe.py",
               "paired within this run: ozaki_ms, each variant's and cublas_ms "
               "interleaved, in an order drawn afresh each round (seeded by the shape), "
               f"medians of {args.reps} samples of {args.burst} calls each, per call; errors "
               "componentwise over |A||B|, normal inputs", records)


if __name__ == "__main__":
    main()
