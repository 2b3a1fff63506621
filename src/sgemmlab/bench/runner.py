"""One loop for every measurement: check each candidate, then time it paired with cuBLAS.

`sgemmlab ladder`, `sgemmlab bench`, the tuner (tune/search.py: one configuration at a
time) and the table builder (tune/table.py) all call `measure_shape`; they differ only in
which candidates they pass, the `Method` and what they print. `run` measures a list of
shapes and writes the results file (`sgemmlab bench` uses it).

What a time is (measure.py): in the default isolated mode, one call from a synchronized,
idle GPU with a flushed L2, the events around the call itself, so the host work of the
call (for `matmul_candidate`, the whole API) is inside its time, cuBLAS's included; in
throughput mode, the time per call of calls queued back to back. Every ratio is paired:
candidate and cuBLAS alternate round by round at the same shape.

Candidates (candidates.Candidate): a rung at a configuration (`rung_candidate`: a launch
bound once, so only the launch's own host work is timed), the dispatcher's choice per shape
(`auto_candidate`: what `--kernel auto` measures), the public API called on every launch
(`matmul_candidate`: `--kernel matmul`, its host overhead included), and the baselines
(baselines.py).
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Callable, Sequence

from . import results
from .baselines import cublas_fp32, cublas_gemm, tf32_is_on
from .candidates import Candidate
from .check import CheckResult, check_gemm
from .measure import L2Flusher, Method, median, paired, tflops

#: alpha/beta used by the second correctness check of every candidate.
CHECK_ALPHA, CHECK_BETA = 0.75, -1.25


def check_candidate(c: Candidate, M: int, N: int, K: int) -> CheckResult:
    """beta = 0 on NaN-poisoned output, then alpha/beta on random C; the worse result."""
    first = check_gemm(c.gemm, M, N, K)
    if not first.ok:
        return first
    second = check_gemm(c.gemm, M, N, K, alpha=CHECK_ALPHA, beta=CHECK_BETA)
    return second if not second.ok or second.error > first.error else first


def _record(c: Candidate, M: int, N: int, K: int, chk: CheckResult) -> dict:
    extra = dict(c.per_shape(M, N, K)) if c.per_shape else {}
    return {"kernel": c.kernel, "config": extra.pop("config", c.config), "M": M, "N": N,
            "K": K, "fp32": c.fp32, **chk.as_dict(), **c.info, **extra}


def operands(M: int, N: int, K: int, layout: str = "NN"):
    """A (M x K) and B (K x N) uniform in [-1, 1], each stored row-major ('N') or
    column-major ('T': a transposed view of a contiguous K x M or N x K tensor)."""
    import torch

    def uniform(rows: int, cols: int, col_major: bool):
        if col_major:
            return (torch.rand(cols, rows, device="cuda") * 2 - 1).t()
        return torch.rand(rows, cols, device="cuda") * 2 - 1

    return uniform(M, K, layout[0] == "T"), uniform(K, N, layout[1] == "T")


def measure_shape(M: int, N: int, K: int, candidates: list[Candidate], method: Method,
                  flush: L2Flusher, peak_tflops: float | None = None,
                  progress=None, *, layout: str = "NN",
                  on_record: Callable[[dict], None] | None = None) -> list[dict]:
    """Records for cuBLAS and each candidate at one shape (see results.py for the fields).

    `layout` stores A and B row-major ('N') or column-major ('T'), cuBLAS included (records
    then carry a "layout" field); `on_record` gets each candidate's record the moment it
    is complete (the tuner persists it, so an interrupted run resumes)."""
    import torch

    A, B = operands(M, N, K, layout)
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
        if layout != "NN":
            rec["layout"] = layout
        records.append(rec)
        if progress:
            progress.advance(task)
        if not chk.ok and cand.fp32:
            rec["status"] = "failed"
            if progress:
                progress.update(task, completed=method.rounds + 1)
            if on_record:
                on_record(rec)
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
        if on_record:
            on_record(rec)
    if cublas_rounds:
        us = median([median(r) for r in cublas_rounds])
        cublas_rec.update(status="ok", median_us=us, tflops=tflops(M, N, K, us),
                          vs_cublas=1.0, vs_cublas_min=1.0, vs_cublas_max=1.0,
                          rounds=len(cublas_rounds), times_us=cublas_rounds)
        if peak_tflops:
            cublas_rec["pct_of_peak"] = 100 * cublas_rec["tflops"] / peak_tflops
    else:
        cublas_rec["status"] = "not timed"
    if layout != "NN":
        cublas_rec["layout"] = layout
    return [cublas_rec, *records]


def _pointers(A, B, C) -> tuple:
    """(M, N, K, a, lda, b, ldb, c, ldc, trans_a, trans_b) of torch operands, each of A and
    B row-major (unit column stride) or column-major (unit row stride)."""
    M, K = A.shape
    N = B.shape[1]
    ta, tb = A.stride(1) != 1, B.stride(1) != 1
    return (M, N, K, A.data_ptr(), A.stride(1) if ta else A.stride(0), B.data_ptr(),
            B.stride(1) if tb else B.stride(0), C.data_ptr(), C.stride(0), ta, tb)


def _bind(launcher, A, B, C, alpha: float = 1.0, beta: float = 0.0):
    """launcher.bind on torch operands, on torch's current stream."""
    import torch

    from ..runtime.arrays import stream_for

    stream = stream_for(int(torch.cuda.current_stream().cuda_stream), 0)
    M, N, K, a, lda, b, ldb, c, ldc, ta, tb = _pointers(A, B, C)
    layouts = {"trans_a": ta, "trans_b": tb} if ta or tb else {}
    return launcher.bind(M, N, K, alpha, a, lda, b, ldb, beta, c, ldc, stream, **layouts)


def rung_candidate(rung, config: dict, layout: str = "NN") -> Candidate:
    """A rung of the ladder at `config`, through the public API (for the check) and a
    pre-bound launch (for timing). With a layout other than "NN" the check stores the
    operands in that layout and launches directly (the API takes row-major operands)."""
    from ..api import sgemm
    from ..runtime.launch import Launcher

    launcher = Launcher(rung, config)

    def gemm(A, B, C, alpha, beta):
        if layout == "NN":
            sgemm(A, B, C, alpha=alpha, beta=beta, out=C, kernel=rung.label, config=config)
            return
        a = A.t().contiguous().t() if layout[0] == "T" else A
        b = B.t().contiguous().t() if layout[1] == "T" else B
        _bind(launcher, a, b, C, alpha, beta)()

    res = launcher.compiled().resources
    info = {"registers": res.registers, "spill_bytes": res.spill_stores + res.spill_loads,
            "smem_bytes": res.smem_bytes, "threads": rung.threads(config)}
    return Candidate(rung.label, gemm, lambda A, B, C: _bind(launcher, A, B, C),
                     dict(config), info)


def auto_candidate(gpu) -> Candidate:
    """`--kernel auto`: at each shape, the rung and configuration the dispatcher chooses for
    this GPU, bound through the launcher like any rung; each record carries the choice."""
    from .. import dispatch, registry

    def choice(M: int, N: int, K: int) -> dispatch.Choice:
        # what the API sees for torch operands: 16-byte aligned bases, lda = K, ldb = N
        return dispatch.choose(M, N, K, gpu_name=gpu.name, sm_count=gpu.sm_count,
                               aligned=K % 4 == 0 and N % 4 == 0)

    cache: dict[tuple, Candidate] = {}

    def chosen(M: int, N: int, K: int) -> Candidate:
        c = choice(M, N, K)
        key = (c.rung, registry.config_key(c.config))
        if key not in cache:
            cache[key] = rung_candidate(registry.rung(c.rung), dict(c.config))
        return cache[key]

    def gemm(A, B, C, alpha, beta):
        chosen(A.shape[0], B.shape[1], A.shape[1]).gemm(A, B, C, alpha, beta)

    def bind(A, B, C):
        return chosen(A.shape[0], B.shape[1], A.shape[1]).bind(A, B, C)

    def per_shape(M: int, N: int, K: int) -> dict:
        c = choice(M, N, K)
        return {**chosen(M, N, K).info, "config": dict(c.config), "rung": c.rung,
                "dispatch": c.as_dict()}

    return Candidate("auto", gemm, bind, None,
                     {"note": "the dispatcher's choice per shape (sgemmlab explain)"},
                     per_shape=per_shape)


def matmul_candidate() -> Candidate:
    """`--kernel matmul`: sgemmlab.matmul(A, B, out=C) on every launch, so the host work of
    the API (operand checks, dispatch, binding) is inside the timing."""
    from ..api import matmul, sgemm

    def gemm(A, B, C, alpha, beta):
        if alpha == 1 and beta == 0:
            matmul(A, B, out=C)
        else:
            sgemm(A, B, C, alpha=alpha, beta=beta, out=C)

    return Candidate("matmul", gemm, lambda A, B, C: (lambda: matmul(A, B, out=C)),
                     info={"note": "sgemmlab.matmul per launch: host overhead included"})


def auto_vs_best(records: list[dict]) -> list[dict]:
    """Per shape where `auto` and at least one rung were timed: auto's paired ratio over the
    best rung's (1.0: dispatch picked as well as the best rung measured)."""
    by_shape: dict[tuple, list[dict]] = {}
    for r in records:
        if r.get("status") == "ok" and isinstance(r.get("vs_cublas"), (int, float)):
            by_shape.setdefault((r["M"], r["N"], r["K"]), []).append(r)
    out = []
    for shape, recs in by_shape.items():
        auto = next((r for r in recs if r["kernel"] == "auto"), None)
        rungs = [r for r in recs if r["kernel"][:2].isdigit()]
        if auto is None or not rungs:
            continue
        top = max(rungs, key=lambda r: r["vs_cublas"])
        out.append({"M": shape[0], "N": shape[1], "K": shape[2], "auto": auto.get("rung"),
                    "best": top["kernel"], "ratio": auto["vs_cublas"] / top["vs_cublas"]})
    return out


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
