"""Search a rung's configuration space on the GPU at hand.

Legality is the registry's (decided before anything compiles); candidates compile in parallel
with NVRTC; any that fails or spills is dropped on the ptxas report. Each survivor is checked
against float64 once at a ragged shape (RAGGED_CHECK), then measured at every tuning shape by
the harness's own runner.measure_shape: checked there (beta = 0 on NaN-poisoned output, then
alpha/beta), then timed paired with cuBLAS in alternating rounds (TUNE: cheap, but paired).
The winner is the configuration with the best paired ratio to cuBLAS (the geometric mean
over the shapes of each shape's median ratio), never a raw time from another round; it can
be stored as this GPU's default. `tune_rung(configs=...)` re-measures a given list instead
of the space (the shipped defaults are re-derived that way from a candidate list).

Every record is written to a partial file as soon as it is measured, so an interrupted
search run again picks up where it stopped (tune/resume.py); the dispatch tables are built
by tune/table.py.
"""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable, Iterator, Mapping

from .. import registry
from ..bench.check import CheckResult
from ..bench.measure import Method
from ..registry import Rung, config_key
from ..runtime.compiler import CompileError, Resources, compile_kernel
from ..runtime.files import write_atomic
from ..runtime.launch import variant_macros
from .resume import PartialLog, kernel_digest

RAGGED_CHECK = (67, 45, 33)  # multiples of no tile: every edge path runs
#: For a rung that does not serve RAGGED_CHECK (the memory-bound family): the first of these
#: ragged shapes it does serve (one dimension small, the others still multiples of nothing).
RAGGED_FALLBACKS = ((13, 45, 33), (67, 13, 33), (67, 45, 13))


def ragged_check(rung: Rung) -> tuple[int, int, int]:
    """The ragged shape a configuration of `rung` is checked at before it is timed."""
    for shape in (RAGGED_CHECK, *RAGGED_FALLBACKS):
        if rung.serves(*shape):
            return shape
    raise ValueError(f"{rung.label} serves none of the ragged check shapes")
RAGGED_ALPHA, RAGGED_BETA = 0.5, 2.0
#: The tuner's method: few launches, but paired and alternating like every other number.
TUNE = Method(launches=10, rounds=3, warmup=1)
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
        # a tensor-core rung: its own target (sm_90a) and the host's shared-memory size,
        # as runtime/hopper.py compiles it
        extra = {"SMEM_EXPECT": r.dynamic_smem(cfg)} if r.supports("tma") else {}
        for vec4 in ((True, False) if r.vectorized else (False,)):
            work.append((r.source, r.macros(cfg) | variant_macros(r, vec4) | extra,
                         r.arch or arch))
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
    # atomic: every later import reads this file, and a cut one would break them all
    write_atomic(DEFAULTS_PATH, json.dumps(data, indent=1, sort_keys=True) + "\n")
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


def partial_path(slug: str, rung: Rung, shapes: list[tuple[int, int, int]],
                 listed: list[dict] | None = None) -> Path:
    from ..bench import results

    return results.place(slug, f"{run_name(rung, shapes, listed)}.partial.jsonl")


def shapes_tag(shapes: list[tuple[int, int, int]]) -> str:
    return "_".join(f"{M}x{N}x{K}" for M, N, K in shapes)


def run_name(rung: Rung, shapes: list[tuple[int, int, int]],
             listed: list[dict] | None = None) -> str:
    """tune-<rung>-<shapes>, and -list<digest> for a given configuration list (its own
    partial file: finishing it never throws away an interrupted search of the space)."""
    name = f"tune-{rung.label}-{shapes_tag(shapes)}"
    if listed is None:
        return name
    keys = "\n".join(sorted(config_key(c) for c in listed))
    return f"{name}-list{hashlib.sha256(keys.encode()).hexdigest()[:8]}"


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


def tune_rung(rung: Rung, shapes: list[tuple[int, int, int]], *,
              configs: list[dict] | None = None, method: Method = TUNE,
              jobs: int | None = None, limit: int | None = None, write_defaults: bool = False,
              resume: bool = True, where: Mapping[str, int] | None = None,
              echo: Callable[[str], None] = lambda text: None) -> tuple[Path, dict | None]:
    """Search the rung's legal configurations at `shapes` on this GPU; write the results
    file (and, if asked, the winner as this GPU's default). `configs` measures that list
    instead of the whole space (each must be legal); `where` keeps only the configurations
    with those values, `limit` the first ones. Resumes an interrupted search of the same
    rung, shapes and list unless `resume` is False (see tune/resume.py)."""
    from ..bench import results
    from ..bench.runner import progress_bar
    from ..runtime.compiler import nvrtc_version
    from ..runtime.device import gpu_info

    gpu = gpu_info()
    listed = None if configs is None else [dict(c) for c in configs]
    for c in listed or []:
        if problems := rung.violations(c):
            raise ValueError(f"illegal configuration {config_key(c)} for {rung.label}: "
                             + "; ".join(problems))
    configs = [c for c in (rung.configs() if listed is None else listed)
               if all(c.get(k) == v for k, v in (where or {}).items())][:limit]
    if not configs:
        raise ValueError(f"no configuration of {rung.label} is listed" if listed == [] else
                         f"{rung.label} has no legal configuration with {dict(where or {})}")
    digest = kernel_digest(rung.source)
    log = PartialLog(partial_path(gpu.slug, rung, shapes, listed),
                     {"gpu": gpu.name, "nvrtc": nvrtc_version(), "method": method.as_dict()},
                     measurement_key, resume=resume,
                     fresh=lambda rec: rec.get("kernel_digest") == digest)
    if log.note:
        echo(f"{rung.label}: {log.note}")
    todo = [c for c in configs if not log.has((rung.label, config_key(c), None))
            and not all(log.has((rung.label, config_key(c), s)) for s in shapes)]
    compiled = dict(zip(map(config_key, todo), (
        res for _, res in compile_many([(rung, c) for c in todo], gpu.arch,
                                       jobs or default_jobs()))))
    bench = _GPUMeasure(rung, method, gpu) if todo else None
    with progress_bar() as progress:
        task = progress.add_task(f"tune {rung.label}", total=len(configs))
        search(rung, configs, shapes, compiled, bench.measure if bench else _nothing, log,
               lambda: progress.advance(task))

    run = results.new_run("tune", gpu, {**method.as_dict(), "l2_flush_bytes":
                                        bench.flush.nbytes if bench else None})
    if log.note:
        run["notes"].append(log.note)
    wanted = {config_key(c) for c in configs}
    run["records"] = [r for r in log.records if config_key(r["config"]) in wanted
                      and (r.get("status") == "rejected" or (r["M"], r["N"], r["K"]) in shapes)]
    run["records"] += cublas_records(run["records"])
    if listed is not None:
        run["configs"] = configs
    best = best_config(rung, run["records"], shapes)
    run["best"] = best
    path = results.write(run, gpu.slug, f"{run_name(rung, shapes, listed)}-{results.stamp()}")
    log.finish()
    if write_defaults and best is not None:
        _store_default(gpu.name, rung, best, str(path.relative_to(path.parents[2])))
    return path, best


def _nothing(cfg, shape, res) -> dict:
    raise AssertionError("nothing is left to measure")


class _GPUMeasure:
    """The GPU side of a search: one record per (configuration, shape), made by
    runner.measure_shape with the search's method, after a check at RAGGED_CHECK once per
    configuration (a configuration wrong there is never timed)."""

    def __init__(self, rung: Rung, method: Method, gpu):
        from ..bench import results
        from ..bench.measure import L2Flusher

        self.rung, self.method = rung, method
        self.flush = L2Flusher(gpu.l2_bytes)
        self.peak = results.ceilings_for(gpu.slug)["ffma_tflops"]
        self.ragged: dict[str, CheckResult] = {}

    def measure(self, cfg: dict, shape, res: Resources) -> dict:
        from ..bench import runner
        from ..bench.check import check_gemm

        M, N, K = shape
        cand = runner.rung_candidate(self.rung, cfg)
        key = config_key(cfg)
        shape_r = ragged_check(self.rung)
        if key not in self.ragged:
            self.ragged[key] = check_gemm(cand.gemm, *shape_r, alpha=RAGGED_ALPHA,
                                          beta=RAGGED_BETA)
        ragged = self.ragged[key]
        if not ragged.ok:
            where = "x".join(map(str, shape_r))
            return {"kernel": self.rung.label, "config": cfg, "M": M, "N": N, "K": K,
                    "fp32": True, **ragged.as_dict(), **cand.info, "status": "failed",
                    "check_note": f"at {where}: {ragged.reason}"}
        recs = runner.measure_shape(M, N, K, [cand], self.method, self.flush, self.peak)
        if problem := runner.fp32_baseline_problem(recs):
            raise runner.BaselineError(f"{problem}: nothing is measured against it")
        return recs[1]


def cublas_records(records: list[dict]) -> list[dict]:
    """One cuBLAS record per shape, from the rounds cuBLAS was timed in, paired with each
    configuration measured there (the records' cublas_times_us)."""
    from ..bench.measure import median, tflops

    rounds: dict[tuple[int, int, int], list[list[float]]] = {}
    for r in records:
        if r.get("status") == "ok" and r.get("cublas_times_us"):
            rounds.setdefault((r["M"], r["N"], r["K"]), []).extend(r["cublas_times_us"])
    out = []
    for (M, N, K), times in rounds.items():
        us = median([median(t) for t in times])
        out.append({"kernel": "cublas", "config": None, "M": M, "N": N, "K": K,
                    "status": "ok", "median_us": us, "tflops": tflops(M, N, K, us),
                    "vs_cublas": 1.0, "rounds": len(times), "times_us": times})
    return out


def best_config(rung: Rung, records: list[dict], shapes: list[tuple[int, int, int]]
                ) -> dict | None:
    """The configuration with the best paired ratio to cuBLAS: the geometric mean over
    `shapes` of each shape's median ratio (vs_cublas), among those measured correct at
    every shape. Raw times never compare across rounds."""
    ratios: dict[str, dict[tuple, float]] = {}
    for r in records:
        if r["kernel"] == rung.label and r.get("status") == "ok":
            ratios.setdefault(config_key(r["config"]), {})[(r["M"], r["N"], r["K"])] = \
                r["vs_cublas"]
    wanted = set(map(tuple, shapes))
    done = {k: v for k, v in ratios.items() if wanted <= set(v)}
    if not done:
        return None

    def score(k: str) -> float:
        return math.exp(sum(math.log(done[k][s]) for s in wanted) / len(wanted))

    return registry.parse_config(max(done, key=score))
