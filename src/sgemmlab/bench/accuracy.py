"""Accuracy over a fuzz set: each candidate's error against float64, beside cuBLAS SGEMM's
on the same inputs (issue 14; `sgemmlab accuracy`).

The correctness gate (check.py) asks whether a kernel is FP32 at all; this asks whether it is
as accurate as cuBLAS SGEMM, over inputs chosen to break a product that is only nearly so:

    normal     standard normal: cancellation, the usual case;
    uniform    uniform in [-1, 1], as the gate draws;
    positive   uniform in [0, 1]: no cancellation, so a biased rounding (a truncating split,
               say) adds up instead of averaging out;
    mixed      a standard normal times 2^e, e an integer uniform in [-16, 16] per element, in
               A and B alike: a wide dynamic range within every row of A and column of B,
               where dropping the low bits of a large term swamps the small ones.

And four that break schemes which scale a whole row or column to integers (Ozaki's,
sgemmlab/ozaki/): the full set has them, the quick one not (on subnormal outputs FP32
itself is far from its bound, which the quick set's GPU test holds every FP32 product to):

    span       as mixed, e uniform in [-30, 30]: every row and column spans 2^60;
    subnormal  a standard normal, with every other row of A times 2^-135 (below FP32's
               normal range: those rows are subnormal, and so are their outputs);
    spikes     a standard normal, one entry in 256 times 2^40: a few huge entries among
               small ones;
    outliers   a standard normal, every 512th column times 2^10: in A, the outlier features
               of a transformer's activations (a few columns far above the rest, so every
               row holds a few huge entries); in B, whole columns 2^10 larger, which no
               scaling minds.

K runs from 1 (one rounding, no sum) to 65536 (a long sum); a few ragged shapes (one row, one
column, no tile multiple) join them. The full set ends with every distribution at
2048×2048 and K 4096 and 16384 (`SERVED_MN`, `SERVED_K`): products large enough that
dispatch runs "fp32_emulated" and "tf32x3" on the tensor cores, where the small cases
above get exact FP32 under "fp32_emulated". The inputs are float32, drawn on the GPU from a
generator seeded per case; the reference is the float64 product of those same inputs.

The metric, componentwise (float64):

    err_ij = |C_ij - ref_ij| / (|A| @ |B|)_ij        (the absolute error where that is 0)

(|A| |B|)_ij is the scale of a dot product's rounding error whatever the cancellation (the
classic bound is K u (|A| |B|)_ij), so one number compares across distributions and K, and
a small output of large terms is not read as a large error. Reported: the max and the median
(torch.median: the lower middle value) over every element, and check.relative_error beside
them. A NaN or Inf in C makes every figure inf, and the record counts them.

The verdict, per case, for the candidates that claim FP32 (ieee, fp32_emulated, tf32x3,
tf32x3_rung, and ozaki7 and ozaki8 when named): max and median each at most cuBLAS SGEMM's
on the same inputs. TF32 candidates are reported
beside, never judged: they are NOT FP32. cublas_tf32 and tf32x3_torch (the composed anchor,
about 4x SGEMM's error) are there for scale.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Sequence

from ..errors import ConfigError, DispatchError
from .check import relative_error

DISTRIBUTIONS = ("normal", "uniform", "positive", "mixed", "span", "subnormal", "spikes",
                 "outliers")
#: The distributions that break row and column scaling (the module docstring)
SCALING = ("span", "subnormal", "spikes", "outliers")
SCALING_K = (17, 1000, 16384)
SPAN_EXPONENTS = (-30, 30)
SUBNORMAL_EXPONENT = -135
SPIKE_EXPONENT, SPIKE_EVERY = 40, 256
OUTLIER_EXPONENT, OUTLIER_EVERY = 10, 512
K_VALUES = (1, 2, 3, 8, 17, 64, 128, 255, 256, 512, 1000, 2048, 4096, 16384, 65536)
POSITIVE_K = (16, 256, 4096, 65536)
QUICK_K = (1, 17, 4096)
MIXED_EXPONENTS = (-16, 16)  # e of 2^e, inclusive
#: A C of this size for K <= 16384; 128 x 128 above, so the float64 reference stays cheap.
MN, MN_DEEP = (256, 192), (128, 128)
RAGGED = (("uniform", 257, 131, 1000), ("uniform", 1, 4096, 4096),
          ("uniform", 4096, 1, 4096), ("mixed", 257, 131, 1000))
#: Products large enough that dispatch serves the FP32-accurate tensor-core precisions on
#: the tensor cores (dispatch/tensor.py): every distribution at SERVED_MN and these K. The
#: cases above are small, so under "fp32_emulated" dispatch computes them in exact FP32.
SERVED_MN, SERVED_K = (2048, 2048), (4096, 16384)


@dataclass(frozen=True)
class Case:
    name: str  # e.g. "normal-256x192x4096": what records and tables call it
    distribution: str
    M: int
    N: int
    K: int


def case(distribution: str, M: int, N: int, K: int) -> Case:
    return Case(f"{distribution}-{M}x{N}x{K}", distribution, M, N, K)


def _square(distribution: str, K: int) -> Case:
    return case(distribution, *(MN if K <= 16384 else MN_DEEP), K)


def fuzz_set(quick: bool = False) -> list[Case]:
    """Every case, in a fixed order; `quick`: a few of each distribution (K 1, 17, 4096) and
    one ragged shape, for smoke runs."""
    ks = QUICK_K if quick else K_VALUES
    out = [_square(d, K) for d in ("normal", "uniform", "mixed") for K in ks]
    out += [_square("positive", K) for K in ((4096,) if quick else POSITIVE_K)]
    out += [case(*r) for r in (RAGGED[:1] if quick else RAGGED)]
    if not quick:
        out += [_square(d, K) for d in SCALING for K in SCALING_K]
        out += [case(d, *SERVED_MN, K) for d in DISTRIBUTIONS for K in SERVED_K]
    return out


def case_seed(c: Case, seed: int) -> int:
    """The case's own seed: from its name, so adding a case changes no other's inputs; 32
    bits, as torch's CPU generator (mt19937) keeps no more."""
    return zlib.crc32(f"{c.name} seed {seed}".encode())


def draw(distribution: str, rows: int, cols: int, generator, device="cuda"):
    """A rows x cols float32 matrix of `distribution` (the module docstring says each)."""
    import torch

    kw = {"generator": generator, "device": device}
    if distribution == "normal":
        return torch.randn(rows, cols, **kw)
    if distribution == "uniform":
        return torch.rand(rows, cols, **kw) * 2 - 1
    if distribution == "positive":
        return torch.rand(rows, cols, **kw)
    if distribution in ("mixed", "span"):
        lo, hi = MIXED_EXPONENTS if distribution == "mixed" else SPAN_EXPONENTS
        # exact powers of two, indexed: no pow or exp2 rounding can creep in
        powers = torch.tensor([2.0**e for e in range(lo, hi + 1)], device=device)
        e = torch.randint(0, hi - lo + 1, (rows, cols), **kw)
        return torch.randn(rows, cols, **kw) * powers[e]
    if distribution == "subnormal":  # (B's rows: every other one too; B's tiny rows meet
        # A's tiny columns only where both are, so most outputs stay in range)
        x = torch.randn(rows, cols, **kw)
        x[1::2] *= 2.0**SUBNORMAL_EXPONENT  # one rounding, into the subnormal range
        return x
    if distribution == "spikes":
        x = torch.randn(rows, cols, **kw)
        spike = torch.randint(0, SPIKE_EVERY, (rows, cols), **kw) == 0
        return torch.where(spike, x * 2.0**SPIKE_EXPONENT, x)
    if distribution == "outliers":
        x = torch.randn(rows, cols, **kw)
        x[:, ::OUTLIER_EVERY] *= 2.0**OUTLIER_EXPONENT  # exact: a power of two
        return x
    raise ValueError(f"unknown distribution {distribution!r}; known: {', '.join(DISTRIBUTIONS)}")


def operands(c: Case, seed: int = 0, device="cuda"):
    """(A, B) of the case: float32, row-major, the same for the same seed and device."""
    import torch

    g = torch.Generator(device=device).manual_seed(case_seed(c, seed))
    A = draw(c.distribution, c.M, c.K, g, device)
    return A, draw(c.distribution, c.K, c.N, g, device)


def reference(A, B):
    """(A @ B, |A| @ |B|) in float64, from the float32 inputs themselves."""
    a, b = A.double(), B.double()
    return a @ b, a.abs() @ b.abs()


@dataclass(frozen=True)
class Error:
    max: float  # of err_ij (module docstring)
    median: float
    relative: float  # check.relative_error, for reference
    nonfinite: int = 0  # NaN or Inf outputs: then every figure is inf


def componentwise_error(C, ref, scale) -> Error:
    """The harness's metric of C against `ref`, normalised by `scale` = |A| @ |B|."""
    import torch

    C = C.double()
    if bad := int((~torch.isfinite(C)).sum()):
        return Error(math.inf, math.inf, math.inf, bad)
    diff = (C - ref).abs()
    err = (diff / torch.where(scale > 0, scale, 1.0)).flatten()
    return Error(float(err.max()), float(err.median()), relative_error(C, ref))


def ratio(x: float, base: float) -> float | None:
    """x / base: 1.0 when both are 0, inf when only base is; None when base is not finite."""
    if not math.isfinite(base):
        return None
    if base == 0:
        return 1.0 if x == 0 else math.inf
    return x / base


def passes(err: Error, base: Error) -> bool:
    """The verdict: max and median each at most the baseline's (cuBLAS SGEMM's)."""
    return err.max <= base.max and err.median <= base.median


# -- candidates -----------------------------------------------------------------------------

BASELINE = "cublas"
#: What a candidate may raise to say "not here" (a forced tensor-core rung off Hopper, a
#: precision dispatch cannot serve): recorded as unavailable, never a crash.
UNAVAILABLE = (ConfigError, DispatchError)


@dataclass(frozen=True)
class Contender:
    """A GEMM under a name: fn(A, B, C) writes C = A @ B in place (no launch to bind, no
    alpha or beta: less than candidates.Candidate, which the timing harness needs)."""

    name: str
    fn: Callable[[Any, Any, Any], None]
    fp32: bool  # judged against cuBLAS; False: reported as NOT FP32
    note: str = ""
    precision: str | None = None  # sgemmlab.matmul's precision, for the dispatch record
    kernel: int | None = None  # a forced rung (else dispatch chooses)
    config: dict | None = None  # ... at this configuration (else its default)


def _sgemmlab(precision: str, kernel: int | None = None,
              config: dict | None = None) -> Callable[[Any, Any, Any], None]:
    def fn(A, B, C) -> None:
        from .. import api

        api.matmul(A, B, out=C, kernel=kernel, config=config, precision=precision)

    return fn


def configured(spec: str, gpu_name: str | None = None) -> Contender:
    """A forced rung at a configuration, from 'RUNG:KEY=V,KEY=V' (the keys given replace the
    rung's defaults on `gpu_name`): named '<label>[KEY=V,...]', judged as FP32 unless the
    rung is TF32. ValueError naming what is wrong with the spec."""
    from ..registry import config_key, parse_config, rung

    number, sep, text = spec.partition(":")
    try:
        r = rung(number.strip())
    except KeyError as exc:
        raise ValueError(exc.args[0]) from None
    given = parse_config(text) if sep else {}
    cfg = {**r.default(gpu_name), **given}
    if problems := r.violations(cfg):
        raise ValueError(f"{spec}: " + "; ".join(problems))
    return Contender(f"{r.label}[{config_key(given)}]", _sgemmlab(r.precision, r.number, cfg),
                     r.precision != "tf32", f"rung {r.label} forced at {config_key(cfg)}",
                     precision=r.precision, kernel=r.number, config=cfg)


def _cublas(tf32: bool) -> Callable[[Any, Any, Any], None]:
    def fn(A, B, C) -> None:
        from .baselines import cublas_gemm

        cublas_gemm(A, B, C, 1.0, 0.0, tf32=tf32)

    return fn


def _ozaki(count: int) -> Callable[[Any, Any, Any], None]:
    """Ozaki scheme II with `count` moduli (runtime/ozaki.py: rung 26 and its steps), straight
    on the arrays (it is not behind sgemmlab.matmul yet), as it serves a product: K below
    reference.MIN_K goes to exact FP32 (sgemmlab.matmul), and rows the flatness rule refuses
    are FP64-summed dot products."""
    def fn(A, B, C) -> None:
        import torch

        from .. import api
        from ..ozaki.reference import MIN_K
        from ..runtime import ozaki
        from ..runtime.arrays import stream_for

        if A.shape[1] < MIN_K:
            api.matmul(A, B, out=C)
            return

        def lay(x) -> tuple[bool, int]:  # (column-major, leading dimension)
            if x.stride(1) == 1:
                return False, max(x.stride(0), x.shape[1])
            if x.stride(0) == 1:
                return True, max(x.stride(1), x.shape[0])
            raise ConfigError("the scheme's contender takes row- or column-major operands")

        if not C.is_contiguous():
            raise ConfigError("the scheme's contender writes a contiguous C")
        (ta, lda), (tb, ldb) = lay(A), lay(B)
        M, K = A.shape
        stream = stream_for(torch.cuda.current_stream(A.device).cuda_stream, A.get_device())
        ozaki.bind(A.get_device(), M, B.shape[1], K, 1.0, A.data_ptr(), lda, B.data_ptr(), ldb,
                   0.0, C.data_ptr(), C.stride(0), stream, trans_a=ta, trans_b=tb,
                   count=count)()

    return fn


def _anchor(A, B, C) -> None:
    from .baselines import tf32x3_torch_gemm

    tf32x3_torch_gemm(A, B, C)


#: Every candidate, by name, in the order tables show them.
CONTENDERS: dict[str, Contender] = {c.name: c for c in (
    Contender(BASELINE, _cublas(False), False, "cuBLAS SGEMM (torch, TF32 off): the baseline"),
    Contender("cublas_tf32", _cublas(True), False, "cuBLAS on TF32 tensor cores: NOT FP32"),
    Contender("tf32x3_torch", _anchor, False,
              "the composed anchor: three cuBLAS TF32 products of a truncating split"),
    Contender("ieee", _sgemmlab("ieee"), True, "sgemmlab.matmul, FP32 on FMA units",
              precision="ieee"),
    Contender("fp32_emulated", _sgemmlab("fp32_emulated"), True,
              "sgemmlab.matmul precision='fp32_emulated' (Ozaki scheme II where dispatch "
              "runs it), through dispatch", precision="fp32_emulated"),
    Contender("tf32x3", _sgemmlab("tf32x3"), True,
              "sgemmlab.matmul precision='tf32x3', through dispatch", precision="tf32x3"),
    Contender("tf32x3_rung", _sgemmlab("tf32x3", 20), True,
              "rung 20 (3xTF32 on tensor cores) forced at every K", precision="tf32x3",
              kernel=20),
    Contender("tf32", _sgemmlab("tf32"), False, "sgemmlab.matmul precision='tf32': NOT FP32",
              precision="tf32"),
    Contender("tf32_rung", _sgemmlab("tf32", 19), False, "rung 19 (TF32) forced: NOT FP32",
              precision="tf32", kernel=19),
)}

#: Candidates run only when named: Ozaki scheme II straight through runtime/ozaki.py at every
#: shape with K >= MIN_K (fp32_emulated runs it only where dispatch finds it faster than
#: exact FP32), with 7 and with 8 moduli (the count fp32_emulated serves).
ON_REQUEST: dict[str, Contender] = {c.name: c for c in (
    Contender("ozaki7", _ozaki(7), True, "Ozaki scheme II on INT8 tensor cores, 7 moduli "
              "(rung 26, runtime/ozaki.py)", kernel=26),
    Contender("ozaki8", _ozaki(8), True, "Ozaki scheme II on INT8 tensor cores, 8 moduli "
              "(rung 26, runtime/ozaki.py)", kernel=26),
)}


def contenders(names: Iterable[str] = ()) -> list[Contender]:
    """The named candidates (all of CONTENDERS when none are named; ON_REQUEST's only by
    name), cuBLAS first always: every verdict and ratio is against it. KeyError naming an
    unknown one."""
    names = list(names) or list(CONTENDERS)
    known = CONTENDERS | ON_REQUEST
    if unknown := [n for n in names if n not in known]:
        raise KeyError(f"unknown candidate {unknown[0]!r}; known: {', '.join(known)}")
    return [CONTENDERS[BASELINE]] + [known[n] for n in dict.fromkeys(names) if n != BASELINE]


def kind_of(c: Contender) -> str:
    return "baseline" if c.name == BASELINE else "FP32" if c.fp32 else "NOT FP32"


# -- the harness ----------------------------------------------------------------------------

def measure_case(c: Case, entrants: Sequence[Contender], seed: int = 0, device="cuda",
                 choice: Callable[[Case, Contender], dict | None] | None = None) -> list[dict]:
    """One record per candidate on the case's inputs: its error, its ratios to cuBLAS's, and
    (judged candidates) the verdict. Each output is NaN-poisoned before the call, so an
    element left unwritten counts as wrong. `choice(case, candidate)`: what dispatch ran."""
    import torch

    A, B = operands(c, seed, device)
    ref, scale = reference(A, B)
    errors: dict[str, Error] = {}
    records = []
    for e in entrants:
        rec: dict[str, Any] = {"case": c.name, "distribution": c.distribution, "M": c.M,
                               "N": c.N, "K": c.K, "candidate": e.name, "kind": kind_of(e)}
        C = torch.full((c.M, c.N), math.nan, device=device)
        try:
            e.fn(A, B, C)
            if C.is_cuda:
                torch.cuda.synchronize()
        except UNAVAILABLE as exc:
            records.append({**rec, "status": "unavailable", "note": str(exc)})
            continue
        except Exception as exc:  # recorded, and the command fails at the end
            records.append({**rec, "status": "error", "note": f"{type(exc).__name__}: {exc}"})
            continue
        err = errors[e.name] = componentwise_error(C, ref, scale)
        rec.update(status="ok", max=err.max, median=err.median, relative_error=err.relative,
                   nonfinite=err.nonfinite)
        if err.nonfinite:
            rec["note"] = f"{err.nonfinite} of {C.numel()} outputs are NaN/Inf"
        if choice is not None and e.precision is not None:
            rec["dispatch"] = choice(c, e)
        records.append(rec)
    base = errors.get(BASELINE)
    for rec in records:
        err = errors.get(rec["candidate"])
        if err is None or base is None:
            continue
        rec["vs_cublas_max"] = ratio(err.max, base.max)
        rec["vs_cublas_median"] = ratio(err.median, base.median)
        if rec["kind"] == "FP32":
            rec["passed"] = passes(err, base)
    return records


def _worst(recs: list[dict], field: str) -> tuple[float | None, str | None]:
    found = [(r[field], r["case"]) for r in recs if r.get(field) is not None]
    return max(found) if found else (None, None)


def summarize(records: Sequence[dict], entrants: Sequence[Contender]) -> list[dict]:
    """Per candidate: cases passed of those judged, which failed, which could not run, and
    the worst ratios to cuBLAS (with their cases). `all_passed`, the issue's criterion:
    every case measured and passed (one not available here is not a pass)."""
    out = []
    for e in entrants:
        recs = [r for r in records if r["candidate"] == e.name]
        ok = [r for r in recs if r["status"] == "ok"]
        wmax, wmax_case = _worst(ok, "vs_cublas_max")
        wmed, wmed_case = _worst(ok, "vs_cublas_median")
        s = {"candidate": e.name, "kind": kind_of(e), "note": e.note, "cases": len(recs),
             "measured": len(ok), "worst_max_ratio": wmax, "worst_max_case": wmax_case,
             "worst_median_ratio": wmed, "worst_median_case": wmed_case,
             "unavailable": sorted({r["note"] for r in recs if r["status"] == "unavailable"}),
             "errors": [f"{r['case']}: {r['note']}" for r in recs if r["status"] == "error"]}
        if kind_of(e) == "FP32":
            passed = [r for r in ok if r.get("passed")]
            s.update(passed=len(passed),
                     failed=[r["case"] for r in recs if r["status"] == "error"
                             or r.get("passed") is False],
                     all_passed=bool(recs) and len(passed) == len(recs))
        out.append(s)
    return out


def run_cases(cases: Sequence[Case], entrants: Sequence[Contender], seed: int = 0,
              device="cuda", choice=None, on_case: Callable[[Case], None] | None = None
              ) -> tuple[list[dict], list[dict]]:
    """(records, summary) of every candidate over `cases`; `on_case` after each case."""
    records: list[dict] = []
    for c in cases:
        records += measure_case(c, entrants, seed, device, choice)
        if on_case is not None:
            on_case(c)
    return records, summarize(records, entrants)


def dispatch_choice(gpu) -> Callable[[Case, Contender], dict | None]:
    """What sgemmlab ran for a candidate at a case: the forced rung, or dispatch's choice
    for the precision on this GPU's architecture (None where this dispatch knows only exact
    FP32)."""
    import inspect

    from ..dispatch import choose

    takes = inspect.signature(choose).parameters

    def choice(c: Case, e: Contender) -> dict | None:
        if e.kernel is not None:
            return {"source": "forced", "rung": e.kernel}
        if "precision" not in takes and e.precision != "ieee":
            return None
        kw = {"precision": e.precision} if "precision" in takes else {}
        if "arch" in takes:
            kw["arch"] = gpu.arch
        try:
            ch = choose(c.M, c.N, c.K, gpu_name=gpu.name, sm_count=gpu.sm_count, **kw)
        except Exception as exc:  # the errors stand on their own
            return {"error": str(exc)}
        return {"rung": ch.rung, "config": dict(ch.config), "decomposition": ch.decomposition,
                "source": ch.source}

    return choice


METHOD = {
    "metric": "componentwise |C - ref| / (|A| @ |B|) in float64 (absolute where 0); max and "
              "median over all elements; relative_error (check.py) beside",
    "reference": "torch float64 matmul on the GPU of the same float32 inputs",
    "verdict": "FP32 candidates: max <= cuBLAS SGEMM's and median <= cuBLAS SGEMM's, per case",
    "output": "NaN-poisoned before each call",
}


def run(cases: Sequence[Case], entrants: Sequence[Contender], seed: int = 0,
        on_case: Callable[[Case], None] | None = None, *, device="cuda", gpu=None):
    """The harness (`entrants`: cuBLAS among them, as `contenders` gives them), written to
    results/<gpu>/accuracy/<stamp>.json with the environment of every results file:
    (run, path). `gpu`: the GPUInfo to record (default: GPU 0's)."""
    from . import results

    if gpu is None:
        from ..runtime.device import gpu_info

        gpu = gpu_info()
    out = results.new_run("accuracy", gpu, {**METHOD, "seed": seed})
    out["cases"] = [asdict(c) for c in cases]
    out["candidates"] = {e.name: {"kind": kind_of(e), "note": e.note} for e in entrants}
    out["records"], out["summary"] = run_cases(cases, entrants, seed, device,
                                               dispatch_choice(gpu), on_case)
    return out, results.write(out, gpu.slug, f"accuracy-{results.stamp()}")


# -- tables ---------------------------------------------------------------------------------

def _cell(rec: dict | None) -> str:
    if rec is None:
        return ""
    if rec["status"] != "ok":
        return "n/a" if rec["status"] == "unavailable" else "ERROR"
    if rec["nonfinite"]:
        return "NaN/Inf"
    rmax, rmed = rec.get("vs_cublas_max"), rec.get("vs_cublas_median")
    if rec["kind"] == "baseline" or rmax is None or rmed is None:
        return f"{rec['max']:.1e}/{rec['median']:.1e}"
    return f"{rmax:.2f}/{rmed:.2f}" + (" ✗" if rec.get("passed") is False else "")


def tables(run_: dict) -> list:
    """Two rich Tables: per case, cuBLAS's error and each candidate's ratios to it (✗: a
    judged candidate above cuBLAS); per candidate, the summary."""
    from rich.table import Table

    names = list(run_["candidates"])
    by = {(r["case"], r["candidate"]): r for r in run_["records"]}
    per_case = Table(title="error max/median (|C - ref| / |A||B|): cuBLAS SGEMM's, the "
                           "others' as ratios to it",
                     caption="†: NOT FP32, reported, never judged.  ✗: an FP32 candidate "
                             "above cuBLAS.  n/a: not available here (why: below)")
    per_case.add_column("case")
    for n in names:
        not_fp32 = run_["candidates"][n]["kind"] == "NOT FP32"
        per_case.add_column(n + (" †" if not_fp32 else ""), justify="right")
    for c in run_["cases"]:
        per_case.add_row(c["name"], *(_cell(by.get((c["name"], n))) for n in names))
    summary = Table(title="per candidate: FP32 ones judged against cuBLAS SGEMM (max and "
                          "median <= cuBLAS's, per case)")
    for h in ("candidate", "kind", "passed", "worst max ratio", "worst median ratio",
              "not run"):
        summary.add_column(h, justify="left" if h in ("candidate", "kind") else "right")
    for s in run_["summary"]:
        if s["kind"] == "baseline":
            continue
        passed = (f"{s['passed']}/{s['cases']}" if "passed" in s else "not judged")
        worst = [f"{s[k]:.2f} ({s[k.replace('ratio', 'case')]})"
                 if s[k] is not None else "" for k in ("worst_max_ratio", "worst_median_ratio")]
        summary.add_row(s["candidate"], s["kind"], passed, *worst,
                        str(s["cases"] - s["measured"]) if s["cases"] != s["measured"] else "")
    return [per_case, summary]


def print_tables(run_: dict) -> None:
    from rich.console import Console

    console = Console()
    for t in tables(run_):
        console.print(t)
