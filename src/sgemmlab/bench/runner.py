"""One loop for every measurement: check each candidate, then time it paired with cuBLAS.

`sgemmlab ladder`, `sgemmlab bench`, the tuner (tune/search.py: one configuration at a
time) and the table builder (tune/table.py) all call `measure_shape`; they differ only in
which candidates they pass, the `Method` and what they print. `run` measures a list of
problems and writes the results file (`sgemmlab bench` uses it).

A problem (problems.py) is a shape, a batch and a layout, measured as it is stored: A and B
row-major or column-major (a transposed view of contiguous storage), a batch as 3-D tensors
(A batch x M x K, B batch x K x N, C batch x M x N); cuBLAS gets the same operands
(torch.matmul: its batched GEMM for a batch). FLOP and TFLOP/s count every product of the
batch. A candidate that cannot compute a problem says why (Candidate.refuses); its record is
then "skipped" with that reason, and nothing of it is checked or timed.

What a time is (measure.py): in the default isolated mode, one call from a synchronized,
idle GPU with a flushed L2, the events around the call itself, so the host work of the
call (for `matmul_candidate`, the whole API) is inside its time, cuBLAS's included; in
throughput mode, the time per call of calls queued back to back. Every ratio is paired:
candidate and cuBLAS alternate round by round at the same problem; grouped
(Method.grouped), every candidate of a problem and cuBLAS share each round.

Candidates (candidates.Candidate): a rung at a configuration (`rung_candidate`: a launch
bound once, so only the launch's own host work is timed), the dispatcher's choice per
problem (`auto_candidate`: what `--kernel auto` measures), the public API called on every
launch (`matmul_candidate`: `--kernel matmul`, its host overhead included), and the
baselines (baselines.py).

Precision (registry.PRECISIONS): `auto` and `matmul` are measured at the run's precision and
named for it at a tensor-core one (matmul[tf32x3]); a rung computes at its own
(Rung.precision: rungs 19 and 20 on tensor cores). A TF32 candidate is not FP32: its check
is reported, never gated (Candidate.fp32 False); 3xTF32 is gated by the FP32 bound like
any FP32 kernel. Every record of `run` carries the run's precision, as does the file.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from ..dispatch import layout_of
from ..runtime.limits import strides_vec4_ok
from . import results
from .baselines import cublas_fp32, cublas_gemm, tf32_is_on
from .candidates import Candidate
from .check import CheckResult, check_gemm, uniform_matrices
from .measure import L2Flusher, Method, grouped_rounds, median, paired, tflops
from .problems import Problem, key

#: alpha/beta used by the second correctness check of every candidate.
CHECK_ALPHA, CHECK_BETA = 0.75, -1.25

#: The note a TF32 candidate's records carry (tables label them too: fp32 is False).
TF32_NOTE = "TF32 tensor cores: NOT FP32, never gated"


def kernel_name(kernel: str, precision: str) -> str:
    """The name records carry: matmul[tf32x3] at a tensor-core precision, the plain name at
    ieee (so results from before precisions existed compare with new ones)."""
    return kernel if precision == "ieee" else f"{kernel}[{precision}]"


def check_candidate(c: Candidate, M: int, N: int, K: int, *, batch: int = 1,
                    layout: str = "NN", pad: int = 0) -> CheckResult:
    """beta = 0 on NaN-poisoned output, then alpha/beta on random C; the worse result."""
    first = check_gemm(c.gemm, M, N, K, batch=batch, layout=layout, pad=pad)
    if not first.ok:
        return first
    second = check_gemm(c.gemm, M, N, K, alpha=CHECK_ALPHA, beta=CHECK_BETA, batch=batch,
                        layout=layout, pad=pad)
    return second if not second.ok or second.error > first.error else first


def _record(c: Candidate, M: int, N: int, K: int, chk: CheckResult, *, batch: int = 1,
            layout: str = "NN", pad: int = 0) -> dict:
    p = Problem(M, N, K, batch, layout, pad)
    extra = dict(c.per_shape(p)) if c.per_shape else {}
    return {"kernel": c.kernel, "config": extra.pop("config", c.config), **p.fields(),
            "fp32": c.fp32, **chk.as_dict(), **c.info, **extra}


def _skipped(c: Candidate, p: Problem, why: str) -> dict:
    return {"kernel": c.kernel, "config": c.config, **p.fields(), "fp32": c.fp32,
            "status": "skipped", "skip_note": why, **c.info}


def operands(p: Problem):
    """A and B of problem `p` on the GPU, uniform in [-1, 1], stored in its layout and
    padded as it says."""
    def uniform(rows: int, cols: int, col_major: bool):
        return uniform_matrices(rows, cols, col_major=col_major, batch=p.batch, pad=p.pad)

    return uniform(p.M, p.K, p.trans_a), uniform(p.K, p.N, p.trans_b)


def output(p: Problem):
    """C of problem `p` (row-major, padded as it says), uninitialized."""
    import torch

    lead = (p.batch,) if p.batch > 1 else ()
    return torch.empty(*lead, p.M, p.N + p.pad, device="cuda")[..., :p.N]


def measure_shape(M: int, N: int, K: int, candidates: list[Candidate], method: Method,
                  flush: L2Flusher, peak_tflops: float | None = None,
                  progress=None, *, layout: str = "NN", batch: int = 1, pad: int = 0,
                  on_record: Callable[[dict], None] | None = None) -> list[dict]:
    """Records for cuBLAS and each candidate at one problem (see results.py for the fields).

    `layout` stores A and B row-major ('N') or column-major ('T'), `batch` > 1 makes it that
    many products in 3-D tensors, cuBLAS included, `pad` > 0 pads every matrix's rows in
    its storage (records then carry "layout", "batch" and "pad");
    `on_record` gets each candidate's record the moment it is complete (the tuner persists
    it, so an interrupted run resumes). With `method.grouped` every candidate is checked
    first, then all are timed in shared rounds (measure.grouped_rounds) and their records
    complete together."""

    p = Problem(M, N, K, batch, layout, pad)
    A, B = operands(p)
    C, Cb = output(p), output(p)
    cublas = cublas_fp32(A, B, Cb)

    base = Candidate("cublas", cublas_gemm, lambda a, b, c: cublas)
    cublas_rec = _record(base, M, N, K, check_gemm(cublas_gemm, M, N, K, batch=batch,
                                                   layout=layout, pad=pad),
                         batch=batch, layout=layout, pad=pad)
    cublas_rounds: list[list[float]] = []
    records = []
    timed: list[tuple[Candidate, dict, object]] = []  # (candidate, record, progress task)
    for cand in candidates:
        task = progress.add_task(f"{cand.kernel} {p}", total=method.rounds + 1) \
            if progress else None
        why = cand.refuses(p) if cand.refuses else None
        if why:
            rec = _skipped(cand, p, why)
        else:
            chk = check_candidate(cand, M, N, K, batch=batch, layout=layout, pad=pad)
            rec = _record(cand, M, N, K, chk, batch=batch, layout=layout, pad=pad)
            if not chk.ok and cand.fp32:
                rec["status"] = "failed"
        records.append(rec)
        if progress:
            progress.advance(task)
        if rec.get("status") in ("skipped", "failed"):  # never timed
            if progress:
                progress.update(task, completed=method.rounds + 1)
            if on_record:
                on_record(rec)
            continue
        if method.grouped:  # timed together once every candidate is checked
            timed.append((cand, rec, task))
            continue
        pr = paired(cand.bind(A, B, C), cublas, method, flush,
                    on_round=(lambda r: progress.advance(task)) if progress else None)
        _timed(rec, pr, M, N, K, batch, peak_tflops)
        cublas_rounds += pr.baseline_us
        if on_record:
            on_record(rec)
    if timed:
        tasks = [task for _, _, task in timed]

        def advance(r: int) -> None:
            for task in tasks:
                progress.advance(task)

        prs = grouped_rounds([cand.bind(A, B, C) for cand, _, _ in timed], cublas, method,
                             flush, on_round=advance if progress else None)
        for (_, rec, _), pr in zip(timed, prs):
            _timed(rec, pr, M, N, K, batch, peak_tflops)
            if on_record:
                on_record(rec)
        cublas_rounds = list(prs[0].baseline_us)
    if cublas_rounds:
        us = median([median(r) for r in cublas_rounds])
        cublas_rec.update(status="ok", median_us=us, tflops=tflops(M, N, K, us, batch),
                          vs_cublas=1.0, vs_cublas_min=1.0, vs_cublas_max=1.0,
                          rounds=len(cublas_rounds), times_us=cublas_rounds)
        if peak_tflops:
            cublas_rec["pct_of_peak"] = 100 * cublas_rec["tflops"] / peak_tflops
    else:
        cublas_rec["status"] = "not timed"
    return [cublas_rec, *records]


def _timed(rec: dict, pr, M: int, N: int, K: int, batch: int,
           peak_tflops: float | None) -> None:
    """Fill a candidate's record with its timing (a measure.Paired)."""
    us = pr.candidate_median_us
    rec.update(status="ok", median_us=us, tflops=tflops(M, N, K, us, batch), **pr.summary(),
               cublas_median_us=pr.baseline_median_us, times_us=pr.candidate_us,
               cublas_times_us=pr.baseline_us)
    if peak_tflops:
        rec["pct_of_peak"] = 100 * rec["tflops"] / peak_tflops


def _matrix(X) -> tuple[bool, int]:
    """(column-major, leading dimension) of the matrices of torch tensor X (its last two
    dimensions): row-major has a unit column stride; column-major a unit row stride, and a
    one-row matrix whose strides are both 1 is a transposed column, so column-major too."""
    rows, cols = X.shape[-2:]
    s_row, s_col = X.stride(-2), X.stride(-1)
    col_major = s_col != 1 or (s_row == 1 and rows == 1 and cols > 1)
    return col_major, s_col if col_major else s_row


def problem_of(A, B) -> Problem:
    """The problem torch operands pose: the shape, the batch (3-D), the layout (strides)
    and A's padding (its leading dimension past its row or column)."""
    M, K = A.shape[-2:]
    N = B.shape[-1]
    col_a, lda = _matrix(A)
    return Problem(M, N, K, A.shape[0] if A.dim() == 3 else 1,
                   layout_of(col_a, _matrix(B)[0]), max(0, lda - (M if col_a else K)))


def operands_aligned(p: Problem) -> bool:
    """Whether float4 accesses are legal on the harness's operands of `p` (fresh tensors,
    so 16-byte aligned bases): every leading dimension and batch stride a multiple of 4."""
    lda, ldb, ldc = p.lds()
    strides = [lda, ldb, ldc]
    if p.batch > 1:
        strides += [lda * (p.K if p.trans_a else p.M), ldb * (p.N if p.trans_b else p.K),
                    ldc * p.M]
    return strides_vec4_ok(strides)


def _stored(X, letter: str):
    """X stored column-major for 'T' (a copy unless it is already), as it is for 'N'."""
    if letter != "T" or _matrix(X)[0]:
        return X
    import torch

    return X.mT.clone(memory_format=torch.contiguous_format).mT


def _bind(launcher, A, B, C, alpha: float = 1.0, beta: float = 0.0):
    """launcher.bind on torch operands (2-D, or 3-D for a batch; A and B row- or
    column-major, C row-major), on torch's current stream. A batch on a rung without
    batches is one launch per product, as the API runs it."""
    import torch

    from ..runtime.arrays import stream_for

    stream = stream_for(int(torch.cuda.current_stream().cuda_stream), 0)
    M, K = A.shape[-2:]
    N = B.shape[-1]
    (ta, lda), (tb, ldb) = _matrix(A), _matrix(B)
    ldc = C.stride(-2)
    layouts = {"trans_a": ta, "trans_b": tb} if ta or tb else {}
    a, b, c = A.data_ptr(), B.data_ptr(), C.data_ptr()
    batch = C.shape[0] if C.dim() == 3 else 1
    if batch == 1:
        return launcher.bind(M, N, K, alpha, a, lda, b, ldb, beta, c, ldc, stream, **layouts)
    sa, sb, sc = (X.stride(0) if X.dim() == 3 else 0 for X in (A, B, C))
    if launcher.rung.supports("batched"):
        return launcher.bind(M, N, K, alpha, a, lda, b, ldb, beta, c, ldc, stream, batch=batch,
                             stride_a=sa, stride_b=sb, stride_c=sc, **layouts)
    each = [launcher.bind(M, N, K, alpha, a + 4 * i * sa, lda, b + 4 * i * sb, ldb, beta,
                          c + 4 * i * sc, ldc, stream, **layouts) for i in range(batch)]

    def launch() -> None:
        for fn in each:
            fn()

    return launch


def rung_candidate(rung, config: dict, layout: str = "NN") -> Candidate:
    """A rung of the ladder at `config`: checked through the public API when the operands
    are one product of row-major matrices, else through the launcher exactly as it is timed;
    timed through a launch bound once. `layout` (the table builder's, which measures at that
    layout too) stores the check's operands in that layout first; "NN" takes them as the
    problem stores them. The API is called at the rung's own precision (Rung.precision); a
    TF32 rung is not FP32, so its check never gates (fp32 False).

    A column-major operand needs the rung's "layouts" and the shape must be in its domain:
    otherwise the candidate refuses the problem, saying why. A batch on a rung without
    "batched" runs as one launch per product, and its record's note says so."""
    from ..api import sgemm
    from ..runtime.launch import Launcher

    launcher = Launcher(rung, config)
    precision = rung.precision

    def gemm(A, B, C, alpha, beta):
        a, b = _stored(A, layout[0]), _stored(B, layout[1])
        if C.dim() == 2 and not _matrix(a)[0] and not _matrix(b)[0]:
            sgemm(a, b, C, alpha=alpha, beta=beta, out=C, kernel=rung.label, config=config,
                  precision=precision)
            return
        _bind(launcher, a, b, C, alpha, beta)()

    def refuses(p: Problem) -> str | None:
        if (layout != "NN" or p.layout != "NN") and not rung.supports("layouts"):
            return (f"{rung.label} reads row-major operands only (a column-major A or B "
                    "needs a rung with layouts)")
        if not rung.serves(p.M, p.N, p.K):
            return f"{rung.label} computes only {rung.domain}"
        return None

    def per_shape(p: Problem) -> dict:
        if p.batch > 1 and not rung.supports("batched"):
            return {"note": f"one launch per product of the batch ({rung.label} has no "
                            "batches)"}
        return {}

    res = launcher.compiled().resources
    info = {"registers": res.registers, "spill_bytes": res.spill_stores + res.spill_loads,
            "smem_bytes": res.smem_bytes, "threads": rung.threads(config),
            **({"note": TF32_NOTE} if precision == "tf32" else {})}
    return Candidate(rung.label, gemm, lambda A, B, C: _bind(launcher, A, B, C),
                     dict(config), info, fp32=precision != "tf32", per_shape=per_shape,
                     refuses=refuses)


def auto_candidate(gpu, precision: str = "ieee") -> Candidate:
    """`--kernel auto`: at each problem, the rung and configuration the dispatcher chooses
    for this GPU (shape, batch, layout and `precision`), bound through the launcher like any
    rung; each record carries the choice (at a tensor-core precision, an FP32 rung where the
    tensor cores do not serve the shape: the choice's reason says so). A problem dispatch
    cannot serve is refused with its reason."""
    from .. import dispatch, registry

    def choice(p: Problem) -> dispatch.Choice:
        return dispatch.choose(p.M, p.N, p.K, gpu_name=gpu.name, sm_count=gpu.sm_count,
                               trans_a=p.trans_a, trans_b=p.trans_b, batch=p.batch,
                               aligned=operands_aligned(p), precision=precision,
                               arch=getattr(gpu, "arch", ""))

    cache: dict[tuple, Candidate] = {}

    def chosen(p: Problem) -> Candidate:
        c = choice(p)
        k = (c.rung, registry.config_key(c.config))
        if k not in cache:
            cache[k] = rung_candidate(registry.rung(c.rung), dict(c.config))
        return cache[k]

    def gemm(A, B, C, alpha, beta):
        chosen(problem_of(A, B)).gemm(A, B, C, alpha, beta)

    def bind(A, B, C):
        return chosen(problem_of(A, B)).bind(A, B, C)

    def per_shape(p: Problem) -> dict:
        c = choice(p)
        return {**chosen(p).info, "config": dict(c.config), "rung": c.rung,
                "dispatch": c.as_dict()}

    def refuses(p: Problem) -> str | None:
        try:
            choice(p)
        except (ValueError, OverflowError) as exc:  # DispatchError is a ValueError
            return str(exc)
        return None

    note = "the dispatcher's choice per shape (sgemmlab explain)"
    return Candidate(kernel_name("auto", precision), gemm, bind, None,
                     {"note": _noted(note, precision)}, fp32=precision != "tf32",
                     per_shape=per_shape, refuses=refuses)


def _noted(note: str, precision: str) -> str:
    return f"{note}; {TF32_NOTE}" if precision == "tf32" else note


def matmul_candidate(precision: str = "ieee") -> Candidate:
    """`--kernel matmul`: sgemmlab.matmul(A, B, out=C, precision=...) on every launch, so
    the host work of the API (operand checks, dispatch, binding) is inside the timing."""
    from ..api import matmul, sgemm

    def gemm(A, B, C, alpha, beta):
        if alpha == 1 and beta == 0:
            matmul(A, B, out=C, precision=precision)
        else:
            sgemm(A, B, C, alpha=alpha, beta=beta, out=C, precision=precision)

    def bind(A, B, C):
        return lambda: matmul(A, B, out=C, precision=precision)

    note = "sgemmlab.matmul per launch: host overhead included"
    return Candidate(kernel_name("matmul", precision), gemm, bind,
                     info={"note": _noted(note, precision)}, fp32=precision != "tf32")


def auto_vs_best(records: list[dict]) -> list[dict]:
    """Per problem where `auto` and at least one rung were timed: auto's paired ratio over
    the best rung's (1.0: dispatch picked as well as the best rung measured)."""
    by_problem: dict[Problem, list[dict]] = {}
    for r in records:
        if r.get("status") == "ok" and isinstance(r.get("vs_cublas"), (int, float)):
            by_problem.setdefault(key(r), []).append(r)
    out = []
    for p, recs in by_problem.items():
        auto = next((r for r in recs if r["kernel"] == "auto"), None)
        rungs = [r for r in recs if r["kernel"][:2].isdigit()]
        if auto is None or not rungs:
            continue
        top = max(rungs, key=lambda r: r["vs_cublas"])
        out.append({**p.fields(), "problem": p.label, "auto": auto.get("rung"),
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
            return (f"cuBLAS FP32 fails the FP32 bound at {key(rec).label}: "
                    f"error {rec['error']:.2e} > bound {rec['error_bound']:.2e} "
                    f"({rec.get('check_note') or 'is TF32 on?'})")
    if tf32_is_on():
        return "torch's TF32 flag was left on after the measurement: cuBLAS was not FP32"
    return None


def run(kind: str, tag: str, shapes: Iterable, candidates: list[Candidate], method: Method,
        notes: Sequence[str] = (), board=None, *,
        suites: Mapping[str, Sequence[Problem]] | None = None,
        precision: str = "ieee") -> tuple[dict, Path]:
    """Measure `candidates` at every problem of `shapes` (Problems, or (M, N, K) shapes) and
    write results/<gpu>/<kind>-<tag>-<time>.json.

    `suites` (name -> its problems) goes into the file, so reports can summarize each suite.
    `precision` (what `auto` and `matmul` were built for) goes into the file and into every
    record: a file without it measured exact FP32 ("ieee").
    `board` (tables.LiveBoard) draws progress and the records so far. Stops with a
    BaselineError, after writing what it has, the moment cuBLAS FP32 is not FP32.
    """
    from ..runtime.device import gpu_info

    gpu = gpu_info()
    flush = L2Flusher(gpu.l2_bytes)
    out = results.new_run(kind, gpu, {**method.as_dict(), "l2_flush_bytes": flush.nbytes})
    out["notes"] += list(notes)
    out["precision"] = precision
    if suites:
        out["suites"] = {name: [str(p) for p in ps] for name, ps in suites.items()}
    peak = out["ceilings"]["ffma_tflops"]
    name = f"{kind}-{tag}-{results.stamp()}"
    for p in map(Problem.of, shapes):
        recs = measure_shape(p.M, p.N, p.K, candidates, method, flush, peak,
                             board.progress if board else None, layout=p.layout,
                             batch=p.batch, pad=p.pad)
        for rec in recs:
            rec["precision"] = precision
        out["records"] += recs
        if board:
            board.show(out["records"])
        if problem := fp32_baseline_problem(recs):
            path = results.write(out, gpu.slug, name)
            raise BaselineError(f"{problem}. Nothing measured against it is valid "
                                f"(results so far: {path})")
    return out, results.write(out, gpu.slug, name)
