"""Search a rung's configuration space on the GPU at hand.

Legality is the registry's (decided before anything compiles); candidates compile in parallel
with NVRTC; any that fails or spills is dropped on the ptxas report; survivors are checked
against float64 (at the tuning shape and at a ragged one) and timed with the harness's
method (flushed L2, CUDA events, median). The winner can be stored as this GPU's default.
"""

from __future__ import annotations

import json
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Iterable, Iterator

from .. import registry
from ..registry import Rung, config_key
from ..runtime.compiler import CompileError, Resources, compile_kernel

RAGGED_CHECK = (67, 45, 33)  # multiples of no tile: every edge path runs
DEFAULTS_PATH = Path(__file__).resolve().parent.parent / "data" / "defaults.json"


def _compile_one(args) -> Resources | Exception:
    source, macros, arch = args
    try:
        return compile_kernel(source, macros, arch).resources
    except Exception as exc:  # reported per configuration, never fatal to the search
        return exc


def compile_many(items: list[tuple[Rung, dict]], arch: str = "sm_90", jobs: int = 2
                 ) -> Iterator[tuple[tuple[Rung, dict], Resources | Exception]]:
    """Compile (rung, config) pairs in parallel; yields ((rung, config), Resources or the
    exception). Vectorized rungs are built in both alignment variants (the launcher picks
    one per call): the float4 variant's resources are reported, and a failure or a spill
    in either variant is the configuration's."""
    work, owner = [], []
    for i, (r, cfg) in enumerate(items):
        for vec4 in ((1, 0) if r.vectorized else (0,)):
            work.append((r.source, r.macros(cfg) | ({"SGEMM_VEC4": 1} if vec4 else {}), arch))
            owner.append(i)
    per_item: list[list[Resources | Exception]] = [[] for _ in items]
    if jobs <= 1 or len(work) <= 1:
        for i, res in zip(owner, map(_compile_one, work)):
            per_item[i].append(res)
    else:
        ctx = multiprocessing.get_context("spawn")  # children never touch the CUDA driver
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
            for i, res in zip(owner, pool.map(_compile_one, work)):
                per_item[i].append(res)
    for item, variants in zip(items, per_item):
        errors = [v for v in variants if isinstance(v, Exception)] + [
            CompileError("the compiler gave no resource report") for v in variants
            if not isinstance(v, Exception) and not v.known]
        spilled = [v for v in variants if not isinstance(v, Exception) and v.spills]
        yield item, (errors or spilled or variants)[0]


def _store_default(gpu_name: str, rung: Rung, cfg: dict, source: str) -> None:
    data = json.loads(DEFAULTS_PATH.read_text()) if DEFAULTS_PATH.is_file() else {
        "about": "Per-GPU default configuration of each rung: the winner of `sgemmlab tune` "
                 "(see the results file named under sources).", "gpus": {}, "sources": {}}
    data["gpus"].setdefault(gpu_name, {})[rung.label] = cfg
    data["sources"].setdefault(gpu_name, {})[rung.label] = source
    DEFAULTS_PATH.parent.mkdir(parents=True, exist_ok=True)
    DEFAULTS_PATH.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    registry.tuned_defaults.cache_clear()


def tune_rung(rung: Rung, shapes: list[tuple[int, int, int]], *, jobs: int = 8,
              limit: int | None = None, write_defaults: bool = False,
              launches: int = 10) -> tuple[Path, dict]:
    import torch

    from ..bench import results
    from ..bench.baselines import cublas_fp32
    from ..bench.check import check_gemm, error_bound
    from ..bench.measure import L2Flusher, median, time_launches, tflops
    from ..bench.runner import progress_bar, rung_candidate
    from ..runtime.device import gpu_info

    gpu = gpu_info()
    configs = list(rung.configs())[:limit]
    flush = L2Flusher(gpu.l2_bytes)
    run = results.new_run("tune", gpu, {"launches_per_round": launches, "rounds": 1,
                                        "warmup": 1, "l2_flush_bytes": flush.nbytes})
    compiled = dict(zip(map(config_key, configs), (
        res for _, res in compile_many([(rung, c) for c in configs], gpu.arch, jobs))))
    ops = {}
    for M, N, K in shapes:
        A = torch.rand(M, K, device="cuda") * 2 - 1
        B = torch.rand(K, N, device="cuda") * 2 - 1
        C = torch.empty(M, N, device="cuda")
        ref = A.double() @ B.double()
        cub = cublas_fp32(A, B, torch.empty(M, N, device="cuda"))
        ops[(M, N, K)] = (A, B, C, ref, median(time_launches(cub, launches, flush)))

    with progress_bar() as progress:
        task = progress.add_task(f"tune {rung.label}", total=len(configs))
        for cfg in configs:
            res = compiled[config_key(cfg)]
            rec = {"kernel": rung.label, "config": cfg}
            if isinstance(res, Exception) or res.spills:
                rec.update(status="rejected", note=str(res).splitlines()[0]
                           if isinstance(res, Exception) else "register spills")
                run["records"].append(rec)
                progress.advance(task)
                continue
            rec.update(registers=res.registers, smem_bytes=res.smem_bytes)
            cand = rung_candidate(rung, cfg)
            small = check_gemm(cand.gemm, *RAGGED_CHECK, alpha=0.5, beta=2.0)
            for (M, N, K), (A, B, C, ref, cub_us) in ops.items():
                C.fill_(float("nan"))
                launch = cand.bind(A, B, C)
                launch()
                torch.cuda.synchronize()
                err = float((C.double() - ref).abs().max() / ref.abs().max())
                ok = small.ok and bool(torch.isfinite(C).all()) and err <= error_bound(K)
                shape_rec = {**rec, "M": M, "N": N, "K": K, "error": err, "correct": ok}
                if ok:
                    times = time_launches(launch, launches, flush)
                    us = median(times)
                    shape_rec.update(status="ok", median_us=us, tflops=tflops(M, N, K, us),
                                     vs_cublas=cub_us / us, times_us=[times])
                else:
                    shape_rec.update(status="failed", note=small.reason or "wrong result")
                run["records"].append(shape_rec)
            progress.advance(task)

    for (M, N, K), (*_, cub_us) in ops.items():
        run["records"].append({"kernel": "cublas", "M": M, "N": N, "K": K, "status": "ok",
                               "median_us": cub_us, "tflops": tflops(M, N, K, cub_us),
                               "vs_cublas": 1.0})
    best = _best(rung, run["records"], len(shapes))
    run["best"] = best
    tag = "_".join(f"{M}x{N}x{K}" for M, N, K in shapes)
    path = results.write(run, gpu.slug, f"tune-{rung.label}-{tag}-{results.stamp()}")
    if write_defaults and best is not None:
        _store_default(gpu.name, rung, best, str(path.relative_to(path.parents[2])))
    return path, best


def _best(rung: Rung, records: list[dict], nshapes: int) -> dict | None:
    """The configuration with the least total time over all shapes, correct on every one."""
    total: dict[str, float] = {}
    count: dict[str, int] = {}
    for r in records:
        if r["kernel"] == rung.label and r.get("status") == "ok":
            k = config_key(r["config"])
            total[k] = total.get(k, 0.0) + r["median_us"]
            count[k] = count.get(k, 0) + 1
    done = [k for k in total if count[k] == nshapes]
    if not done:
        return None
    return registry.parse_config(min(done, key=total.__getitem__))
