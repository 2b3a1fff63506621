"""One loop for every measurement: check each candidate, then time it paired with cuBLAS.

`sgemmlab ladder`, `sgemmlab bench` and the tuner all call `measure_shape`; they differ only
in which candidates they pass and what they print. `run` measures a list of shapes and
writes the results file (`sgemmlab bench` uses it).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from . import results
from .baselines import cublas_fp32, cublas_gemm, tf32_is_on
from .check import CheckResult, GemmFn, check_gemm
from .measure import L2Flusher, Method, median, paired, tflops

#: alpha/beta used by the second correctness check of every candidate.
CHECK_ALPHA, CHECK_BETA = 0.75, -1.25


@dataclass
class Candidate:
    kernel: str  # the name results files use: a rung label, "cublas", "triton", ...
    gemm: GemmFn  # fn(A, B, C, alpha, beta): for the correctness check
    bind: Callable[[Any, Any, Any], Callable[[], None]]  # (A, B, C) -> launch of C = A @ B
    config: dict | None = None
    info: dict = field(default_factory=dict)  # registers, notes: copied into the record
    fp32: bool = True  # False for TF32 baselines: their check is reported, never gating


def check_candidate(c: Candidate, M: int, N: int, K: int) -> CheckResult:
    """beta = 0 on NaN-poisoned output, then alpha/beta on random C; the worse result."""
    first = check_gemm(c.gemm, M, N, K)
    if not first.ok:
        return first
    second = check_gemm(c.gemm, M, N, K, alpha=CHECK_ALPHA, beta=CHECK_BETA)
    return second if not second.ok or second.error > first.error else first


def _record(c: Candidate, M: int, N: int, K: int, chk: CheckResult) -> dict:
    return {"kernel": c.kernel, "config": c.config, "M": M, "N": N, "K": K,
            "fp32": c.fp32, **chk.as_dict(), **c.info}


def measure_shape(M: int, N: int, K: int, candidates: list[Candidate], method: Method,
                  flush: L2Flusher, peak_tflops: float | None = None,
                  progress=None) -> list[dict]:
    """Records for cuBLAS and each candidate at one shape (see results.py for the fields)."""
    import torch

    A = torch.rand(M, K, device="cuda") * 2 - 1
    B = torch.rand(K, N, device="cuda") * 2 - 1
    C = torch.empty(M, N, device="cuda")
    Cb = torch.empty(M, N, device="cuda")
    cublas = cublas_fp32(A, B, Cb)

    base = Candidate("cublas", cublas_gemm, lambda a, b, c: cublas)
    cublas_rec = _record(base, M, N, K, check_gemm(cublas_gemm, M, N, K))
    cublas_rounds: list[list[float]] = []
    records = []
    for cand in candidates:
        task = progress.add_task(f"{cand.kernel} {M}x{N}x{K}", total=method.rounds + 1) \
            if progress else None
        chk = check_candidate(cand, M, N, K)
        rec = _record(cand, M, N, K, chk)
        records.append(rec)
        if progress:
            progress.advance(task)
        if not chk.ok and cand.fp32:
            rec["status"] = "failed"
            if progress:
                progress.update(task, completed=method.rounds + 1)
            continue
        p = paired(cand.bind(A, B, C), cublas, method, flush,
                   on_round=(lambda r: progress.advance(task)) if progress else None)
        us = p.candidate_median_us
        rec.update(status="ok", median_us=us, tflops=tflops(M, N, K, us), **p.summary(),
                   cublas_median_us=p.baseline_median_us, times_us=p.candidate_us,
                   cublas_times_us=p.baseline_us)
        if peak_tflops:
            rec["pct_of_peak"] = 100 * rec["tflops"] / peak_tflops
        cublas_rounds += p.baseline_us
    if cublas_rounds:
        us = median([median(r) for r in cublas_rounds])
        cublas_rec.update(status="ok", median_us=us, tflops=tflops(M, N, K, us),
                          vs_cublas=1.0, vs_cublas_min=1.0, vs_cublas_max=1.0,
                          rounds=len(cublas_rounds), times_us=cublas_rounds)
        if peak_tflops:
            cublas_rec["pct_of_peak"] = 100 * cublas_rec["tflops"] / peak_tflops
    else:
        cublas_rec["status"] = "not timed"
    return [cublas_rec, *records]


def rung_candidate(rung, config: dict) -> Candidate:
    """A rung of the ladder at `config`, through the public API (for the check) and a
    pre-bound launch (for timing)."""
    import torch

    from ..api import sgemm
    from ..runtime.arrays import stream_for
    from ..runtime.launch import Launcher

    launcher = Launcher(rung, config)

    def gemm(A, B, C, alpha, beta):
        sgemm(A, B, C, alpha=alpha, beta=beta, out=C, kernel=rung.label, config=config)

    def bind(A, B, C):
        stream = stream_for(int(torch.cuda.current_stream().cuda_stream), 0)
        M, K = A.shape
        N = B.shape[1]
        return launcher.bind(M, N, K, 1.0, A.data_ptr(), A.stride(0), B.data_ptr(),
                             B.stride(0), 0.0, C.data_ptr(), C.stride(0), stream)

    res = launcher.compiled().resources
    info = {"registers": res.registers, "spill_bytes": res.spill_stores + res.spill_loads,
            "smem_bytes": res.smem_bytes, "threads": rung.threads(config)}
    return Candidate(rung.label, gemm, bind, dict(config), info)


def new_progress():
    """A rich Progress with one bar per (candidate, shape): check, then each round."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), transient=False)


def progress_bar(enabled: bool = True):
    """A rich progress display (a no-op context when disabled)."""
    return new_progress() if enabled else nullcontext(None)


class BaselineError(RuntimeError):
    """cuBLAS FP32 is not FP32 (it failed the bound, or TF32 was left on): every ratio of
    the run would compare against the wrong thing."""


def fp32_baseline_problem(records: list[dict]) -> str | None:
    """Why the cuBLAS FP32 baseline of one shape's records cannot be trusted, or None."""
    for rec in records:
        if rec["kernel"] == "cublas" and not rec.get("correct"):
            return (f"cuBLAS FP32 fails the FP32 bound at {rec['M']}×{rec['N']}×{rec['K']}: "
                    f"error {rec['error']:.2e} > bound {rec['error_bound']:.2e} "
                    f"({rec.get('check_note') or 'is TF32 on?'})")
    if tf32_is_on():
        return "torch's TF32 flag was left on after the measurement: cuBLAS was not FP32"
    return None


def run(kind: str, tag: str, shapes: list[tuple[int, int, int]],
        candidates: list[Candidate], method: Method, notes: Sequence[str] = (),
        board=None) -> tuple[dict, Path]:
    """Measure `candidates` at every shape and write results/<gpu>/<kind>-<tag>-<time>.json.

    `board` (tables.LiveBoard) draws progress and the records so far. Stops with a
    BaselineError, after writing what it has, the moment cuBLAS FP32 is not FP32.
    """
    from ..runtime.device import gpu_info

    gpu = gpu_info()
    flush = L2Flusher(gpu.l2_bytes)
    out = results.new_run(kind, gpu, {**method.as_dict(), "l2_flush_bytes": flush.nbytes})
    out["notes"] += list(notes)
    peak = out["ceilings"]["ffma_tflops"]
    name = f"{kind}-{tag}-{results.stamp()}"
    for M, N, K in shapes:
        recs = measure_shape(M, N, K, candidates, method, flush, peak,
                             board.progress if board else None)
        out["records"] += recs
        if board:
            board.show(out["records"])
        if problem := fp32_baseline_problem(recs):
            path = results.write(out, gpu.slug, name)
            raise BaselineError(f"{problem}. Nothing measured against it is valid "
                                f"(results so far: {path})")
    return out, results.write(out, gpu.slug, name)
