"""Search a rung's configuration space on the GPU at hand.

Legality is the registry's (decided before anything compiles); candidates compile in parallel
with NVRTC; any that fails or spills is dropped on the ptxas report; survivors are checked
against float64 (at the tuning shape and at a ragged one) and timed with the harness's
method (flushed L2, CUDA events, median). The winner can be stored as this GPU's default.

Every record is written to a partial file as soon as it is measured, so an interrupted
search run again picks up where it stopped (tune/resume.py); the dispatch tables are built
by tune/table.py.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable, Iterator, Mapping

from .. import registry
from ..registry import Rung, config_key
from ..runtime.compiler import CompileError, Resources, compile_kernel
from .resume import PartialLog, kernel_digest

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


def default_jobs() -> int:
    """Parallel NVRTC compiles: one per core this process may use (os.cpu_count() counts
    the host's, which in a container can be ten times more), at most MAX_JOBS."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_JOBS))


MAX_JOBS = 16


def measurement_key(rec: dict) -> tuple:
    """What identifies one measurement of a search: the configuration and the shape (None
    for a configuration rejected before any shape: it failed to compile or spilled)."""
    shape = (rec["M"], rec["N"], rec["K"]) if rec.get("status") != "rejected" else None
    return (rec["kernel"], config_key(rec["config"]), shape)


def partial_path(slug: str, rung: Rung, shapes: list[tuple[int, int, int]]) -> Path:
    from ..bench import results

    return results.results_root() / slug / f"tune-{rung.label}-{shapes_tag(shapes)}.partial.jsonl"


def shapes_tag(shapes: list[tuple[int, int, int]]) -> str:
    return "_".join(f"{M}x{N}x{K}" for M, N, K in shapes)


Measure = Callable[[dict, tuple[int, int, int], Resources], dict]


def search(rung: Rung, configs: list[dict], shapes: list[tuple[int, int, int]],
           resources: Mapping[str, Resources | Exception], measure: Measure,
           log: PartialLog, advance: Callable[[], None] = lambda: None) -> list[dict]:
    """The search loop, resumable: every configuration at every shape, skipping what `log`
    already holds and adding each new record to it the moment it is made.

    `resources[config_key(cfg)]` is the compile result of every configuration still to
    measure; `measure(cfg, shape, resources)` makes one shape's record (GPU work)."""
    digest = kernel_digest(rung.source)
    for cfg in configs:
        key = config_key(cfg)
        if log.has((rung.label, key, None)) or all(
                log.has((rung.label, key, s)) for s in shapes):
            advance()
            continue
        res = resources[key]
        rec = {"kernel": rung.label, "config": cfg, "kernel_digest": digest}
        if isinstance(res, Exception) or res.spills:
            log.add({**rec, "status": "rejected",
                     "note": str(res).splitlines()[0] if isinstance(res, Exception)
                     else "register spills"})
            advance()
            continue
        for shape in shapes:
            if not log.has((rung.label, key, shape)):
                log.add({**measure(cfg, shape, res), "kernel_digest": digest})
        advance()
    return log.records


def tune_rung(rung: Rung, shapes: list[tuple[int, int, int]], *, jobs: int | None = None,
              limit: int | None = None, write_defaults: bool = False,
              launches: int = 10, resume: bool = True, where: Mapping[str, int] | None = None,
              echo: Callable[[str], None] = lambda text: None) -> tuple[Path, dict | None]:
    """Search the rung's legal configurations at `shapes` on this GPU; write the results
    file (and, if asked, the winner as this GPU's default). Resumes an interrupted search
    of the same rung and shapes unless `resume` is False (see tune/resume.py). `where`
    fixes some constants (only the configurations with those values are searched)."""
    from ..bench import results
    from ..bench.runner import progress_bar
    from ..runtime.compiler import nvrtc_version
    from ..runtime.device import gpu_info

    gpu = gpu_info()
    configs = [c for c in rung.configs()
               if all(c.get(k) == v for k, v in (where or {}).items())][:limit]
    if not configs:
        raise ValueError(f"{rung.label} has no legal configuration with {dict(where or {})}")
    method = {"launches_per_round": launches, "rounds": 1, "warmup": 1}
    digest = kernel_digest(rung.source)
    log = PartialLog(partial_path(gpu.slug, rung, shapes),
                     {"gpu": gpu.name, "nvrtc": nvrtc_version(), "method": method},
                     measurement_key, resume=resume,
                     fresh=lambda rec: rec.get("kernel_digest") == digest)
    if log.note:
        echo(f"{rung.label}: {log.note}")
    todo = [c for c in configs if not log.has((rung.label, config_key(c), None))
            and not all(log.has((rung.label, config_key(c), s)) for s in shapes)]
    compiled = dict(zip(map(config_key, todo), (
        res for _, res in compile_many([(rung, c) for c in todo], gpu.arch,
                                       jobs or default_jobs()))))
    bench = _GPUMeasure(rung, shapes, launches, gpu) if todo else None
    with progress_bar() as progress:
        task = progress.add_task(f"tune {rung.label}", total=len(configs))
        search(rung, configs, shapes, compiled, bench.measure if bench else _nothing, log,
               lambda: progress.advance(task))

    run = results.new_run("tune", gpu, {**method, "l2_flush_bytes":
                                        bench.flush.nbytes if bench else None})
    if log.note:
        run["notes"].append(log.note)
    wanted = {config_key(c) for c in configs}
    run["records"] = [r for r in log.records if config_key(r["config"]) in wanted
                      and (r.get("status") == "rejected" or (r["M"], r["N"], r["K"]) in shapes)]
    run["records"] += bench.cublas_records() if bench else []
    best = _best(rung, run["records"], len(shapes))
    run["best"] = best
    path = results.write(run, gpu.slug, f"tune-{rung.label}-{shapes_tag(shapes)}-"
                                         f"{results.stamp()}")
    log.finish()
    if write_defaults and best is not None:
        _store_default(gpu.name, rung, best, str(path.relative_to(path.parents[2])))
    return path, best


def _nothing(cfg, shape, res) -> dict:
    raise AssertionError("nothing is left to measure")


class _GPUMeasure:
    """The GPU side of a search: operands and cuBLAS times per shape, set up once; one
    record per (configuration, shape): checked against float64 (at a ragged shape once per
    configuration, then at the shape), then timed on a flushed L2."""

    def __init__(self, rung: Rung, shapes, launches: int, gpu):
        import torch

        from ..bench.baselines import cublas_fp32
        from ..bench.measure import L2Flusher, median, time_launches

        self.rung, self.launches = rung, launches
        self.flush = L2Flusher(gpu.l2_bytes)
        self.ops = {}
        self.small: dict[str, object] = {}
        for M, N, K in shapes:
            A = torch.rand(M, K, device="cuda") * 2 - 1
            B = torch.rand(K, N, device="cuda") * 2 - 1
            C = torch.empty(M, N, device="cuda")
            ref = A.double() @ B.double()
            cub = cublas_fp32(A, B, torch.empty(M, N, device="cuda"))
            self.ops[(M, N, K)] = (A, B, C, ref, median(time_launches(cub, launches,
                                                                       self.flush)))

    def measure(self, cfg: dict, shape, res: Resources) -> dict:
        import torch

        from ..bench.check import check_gemm, error_bound
        from ..bench.measure import median, time_launches, tflops
        from ..bench.runner import rung_candidate

        M, N, K = shape
        A, B, C, ref, cub_us = self.ops[shape]
        cand = rung_candidate(self.rung, cfg)
        key = config_key(cfg)
        if key not in self.small:
            self.small[key] = check_gemm(cand.gemm, *RAGGED_CHECK, alpha=0.5, beta=2.0)
        small = self.small[key]
        rec = {"kernel": self.rung.label, "config": cfg, "registers": res.registers,
               "smem_bytes": res.smem_bytes, "M": M, "N": N, "K": K}
        C.fill_(float("nan"))
        launch = cand.bind(A, B, C)
        launch()
        torch.cuda.synchronize()
        err = float((C.double() - ref).abs().max() / ref.abs().max())
        ok = small.ok and bool(torch.isfinite(C).all()) and err <= error_bound(K)
        rec.update(error=err, correct=ok)
        if not ok:
            return {**rec, "status": "failed", "note": small.reason or "wrong result"}
        times = time_launches(launch, self.launches, self.flush)
        us = median(times)
        return {**rec, "status": "ok", "median_us": us, "tflops": tflops(M, N, K, us),
                "vs_cublas": cub_us / us, "times_us": [times]}

    def cublas_records(self) -> list[dict]:
        from ..bench.measure import tflops

        return [{"kernel": "cublas", "M": M, "N": N, "K": K, "status": "ok",
                 "median_us": us, "tflops": tflops(M, N, K, us), "vs_cublas": 1.0}
                for (M, N, K), (*_, us) in self.ops.items()]


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
