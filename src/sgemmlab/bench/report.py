"""`sgemmlab report`: results files in, a Markdown report and its charts out.

Three questions, one chart each (PNG and SVG):
    how close is each kernel to cuBLAS FP32, over all shapes?   pct_of_cublas
    where does it win or lose, and how sure is that?            ratio_by_shape (min–max whiskers)
    what limits it: memory or arithmetic?                       roofline (bill.py's intensity)

Charts show FP32 kernels only: TF32 runs on tensor cores, off every scale here; the
tables list it, labelled. Kernels that failed their check, or that could not compute a
problem (skipped, with the reason), appear in the tables only.

Summaries: per kernel over every problem (`summarize`), per suite the results files name
(`suite_summary`), and for a random suite how dispatch generalizes off its grid
(`random_summary`: the median ratio, how many fall below 90 %, the worst ten and what was
chosen there). `sgemmlab bench` prints the last two at the end of a run.

At a tensor-core precision (`sgemmlab bench --precision tf32x3`), each kernel computing in it
(matmul[tf32x3], auto[tf32x3], rung 20) is also put against that precision's anchor, the best
torch alone gives there (tf32x3_torch; cublas_tf32 for tf32), measured in the same file
(`vs_anchor`); TF32 rows are labelled NOT FP32.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from .. import registry
from ..runtime.files import write_atomic
from . import plots, results
from .baselines import RECORD_NAMES
from .bill import block_tile_intensity, minimal_intensity
from .problems import Problem, key
from .suites import PRECISION_BASELINES, is_random_suite
from .tables import kernel_label, markdown, markdown_table

CHARTS = ("pct_of_cublas", "ratio_by_shape", "roofline")


def load_runs(paths: list[str | Path]) -> list[tuple[Path, dict]]:
    """(path, run) for each file; ValueError naming the file when one is not a results file."""
    out = []
    for p in map(Path, paths):
        try:
            out.append((p, results.load(p)))
        except OSError as exc:
            raise ValueError(f"{p}: cannot read it ({exc.strerror or exc})") from None
        except ValueError as exc:  # results.load names the file; json's errors do not
            msg = str(exc)
            raise ValueError(msg if msg.startswith(str(p)) else f"{p}: not JSON ({msg})") \
                from None
    return out


def gemm_records(runs: list[tuple[Path, dict]]) -> list[dict]:
    """Every GEMM measurement (ceilings records have no shape)."""
    return [r for _, run in runs for r in run["records"] if "M" in r]


def _timed(rec: dict) -> bool:
    return rec.get("status") == "ok" and isinstance(rec.get("vs_cublas"), (int, float))


def summarize(records: list[dict]) -> list[dict]:
    """Per kernel: geometric mean of its per-shape ratios to cuBLAS, lowest and highest."""
    out = []
    for kernel in dict.fromkeys(r["kernel"] for r in records):
        mine = [r for r in records if r["kernel"] == kernel and _timed(r)]
        if not mine:
            continue
        ratios = [r["vs_cublas"] for r in mine]
        out.append({"kernel": kernel, "shapes": len(mine), "fp32": mine[0].get("fp32", True),
                    "geomean": math.exp(sum(map(math.log, ratios)) / len(ratios)),
                    "lo": min(ratios), "hi": max(ratios)})
    return out


def _problems(items: Iterable) -> set[Problem]:
    return {Problem.parse(p) if isinstance(p, str) else Problem.of(p) for p in items}


def suite_summary(records: list[dict], suites: Mapping[str, Sequence]) -> list[dict]:
    """Per suite (name -> its problems, as texts or Problems) and kernel: `summarize` over
    the suite's problems, with the suite's name in each row."""
    out = []
    for name, items in suites.items():
        want = _problems(items)
        out += [{"suite": name, **s} for s in summarize([r for r in records if key(r) in want])]
    return out


#: A random suite's problems below this ratio to cuBLAS are counted.
RANDOM_THRESHOLD = 0.9
RANDOM_WORST = 10


def _chosen(rec: dict) -> dict:
    d = rec.get("dispatch") or {}
    return {"problem": key(rec).label, "vs_cublas": rec["vs_cublas"],
            "rung": rec.get("rung", rec["kernel"]), "config": rec.get("config"),
            "decomposition": d.get("decomposition"), "source": d.get("source")}


def random_summary(records: list[dict], problems: Iterable, *,
                   threshold: float = RANDOM_THRESHOLD, worst: int = RANDOM_WORST
                   ) -> list[dict]:
    """Per FP32 kernel at a random suite's `problems` (texts or Problems): how many it was
    timed at, failed or skipped; its median ratio to cuBLAS; how many ratios fall below
    `threshold`; and its `worst` lowest, each with its problem and what ran there (for
    `auto`, the rung, configuration and decomposition dispatch chose, and from where)."""
    want = _problems(problems)
    mine = [r for r in records if key(r) in want and r["kernel"] != "cublas"
            and r.get("fp32", True)]
    out = []
    for kernel in dict.fromkeys(r["kernel"] for r in mine):
        recs = [r for r in mine if r["kernel"] == kernel]
        timed = sorted((r for r in recs if _timed(r)), key=lambda r: r["vs_cublas"])
        status = [r.get("status") for r in recs]
        out.append({
            "kernel": kernel, "problems": len(timed), "failed": status.count("failed"),
            "skipped": status.count("skipped"),
            "median": statistics.median(r["vs_cublas"] for r in timed) if timed else None,
            "threshold": threshold,
            "below": sum(r["vs_cublas"] < threshold for r in timed),
            "worst": [_chosen(r) for r in timed[:worst]]})
    return out


def _what_ran(w: dict) -> str:
    if w["decomposition"] is None:
        return ""
    cfg = registry.config_key(w["config"]) if w.get("config") else "-"
    return f"{w['rung']} {cfg}, {w['decomposition']} ({w['source']})"


def _random_head(name: str, s: dict) -> str:
    if s["median"] is None:
        text = f"{name}, {s['kernel']}: timed at none of its shapes"
    else:
        text = (f"{name}, {s['kernel']}: median {100 * s['median']:.1f} % of cuBLAS over "
                f"{s['problems']} shapes, {s['below']} below {100 * s['threshold']:.0f} %")
    if s["failed"]:
        text += f", {s['failed']} FAILED their check"
    if s["skipped"]:
        text += f", {s['skipped']} skipped"
    return text


def random_lines(name: str, summary: list[dict]) -> list[str]:
    """`random_summary` as the terminal shows it: a line per kernel, then its worst."""
    lines = []
    for s in summary:
        lines.append(_random_head(name, s) + (f"; the worst {len(s['worst'])}:"
                                              if s["worst"] else ""))
        lines += [f"  {w['problem']:>24}  {100 * w['vs_cublas']:6.1f} %  {_what_ran(w)}"
                  .rstrip() for w in s["worst"]]
    return lines


def suite_lines(summary: list[dict]) -> list[str]:
    """`suite_summary` as the terminal shows it: one line per suite, FP32 kernels only."""
    lines = []
    for name in dict.fromkeys(s["suite"] for s in summary):
        parts = [f"{s['kernel']} {100 * s['geomean']:.1f} %" for s in summary
                 if s["suite"] == name and s["fp32"] and s["kernel"] != "cublas"]
        if parts:
            lines.append(f"{name}: " + ", ".join(parts))
    return lines


#: Precision -> the record name of its anchor (the first of the baselines it brings along).
ANCHORS = {p: RECORD_NAMES[own[0]] for p, own in PRECISION_BASELINES.items() if own}


def kernel_precision(kernel: str) -> str:
    """What a record's kernel computes in: the precision its name carries (matmul[tf32x3]),
    a rung's own (Rung.precision), else exact FP32 ("ieee")."""
    if kernel.endswith("]") and "[" in kernel:
        return kernel[kernel.index("[") + 1:-1]
    try:
        return registry.rung(kernel).precision
    except KeyError:
        return "ieee"


def vs_anchor(records: list[dict]) -> list[dict]:
    """Per problem of one results file's records, each timed kernel that computes in a
    tensor-core precision: its paired ratio to cuBLAS SGEMM (vs_cublas, as everywhere) and
    to that precision's anchor (ANCHORS): the anchor's median time over the kernel's, at
    the same problem of the same run (None where the anchor was not timed)."""
    by_problem: dict[Problem, list[dict]] = {}
    for r in records:
        if "M" in r:
            by_problem.setdefault(key(r), []).append(r)
    out = []
    for p, recs in by_problem.items():
        for r in recs:
            anchor = ANCHORS.get(kernel_precision(r["kernel"]))
            if anchor is None or not _timed(r):
                continue
            base = next((a for a in recs if a["kernel"] == anchor and _timed(a)), None)
            out.append({"problem": p.label, "kernel": r["kernel"], "label": kernel_label(r),
                        "vs_cublas": r["vs_cublas"], "anchor": anchor,
                        "vs_anchor": base["median_us"] / r["median_us"] if base else None})
    return out


def anchor_lines(rows: list[dict]) -> list[str]:
    """`vs_anchor` as the terminal and the README show it: a line per kernel and problem."""
    return [f"{r['label']} at {r['problem']}: {100 * r['vs_cublas']:.1f} % of cuBLAS SGEMM, "
            + (f"{100 * r['vs_anchor']:.1f} % of {r['anchor']}" if r["vs_anchor"] is not None
               else f"{r['anchor']} not timed") for r in rows]


def run_suites(runs: Iterable[dict]) -> dict[str, list[str]]:
    """Every suite the runs name (results files before suites were recorded name none)."""
    out: dict[str, list[str]] = {}
    for run in runs:
        for name, items in (run.get("suites") or {}).items():
            out[name] = list(dict.fromkeys([*out.get(name, []), *items]))
    return out


def intensity(rec: dict) -> float:
    """FLOP/byte for the roofline: a rung's block-tile bill, else the shape's minimum
    traffic (cuBLAS and Triton choose their tiles themselves)."""
    try:
        rung = registry.rung(rec["kernel"])
    except KeyError:
        rung = None
    if rung is not None and rec.get("config"):
        return block_tile_intensity(rung, rec["config"])
    return minimal_intensity(rec["M"], rec["N"], rec["K"])


MEMORY_BOUND_SUITES = ("vector", "decode", "tinyk")


def floors_us(rec: dict, ceil: dict) -> tuple[float, float]:
    """(bytes floor, FLOP floor) of a record's problem in microseconds: A, B and C moved
    once (C written, beta = 0 as the harness times it) at the copy bandwidth, and 2MNK at
    the FFMA peak, for the whole batch."""
    batch = rec.get("batch", 1)
    M, N, K = rec["M"], rec["N"], rec["K"]
    nbytes = 4 * batch * (M * K + K * N + M * N)
    return (nbytes / (ceil["copy_tbps"] * 1e12) * 1e6,
            2 * batch * M * N * K / (ceil["ffma_tflops"] * 1e12) * 1e6)


def floor_table(records: list[dict], ceil: dict) -> str:
    """Per timed record: its time against the bytes floor and against the roofline (the
    larger of the two floors)."""
    rows = ["| problem | kernel | µs | bytes floor µs | % of bytes floor | FLOP floor µs | "
            "% of roofline |", "|---|---|---|---|---|---|---|"]
    for r in records:
        b, f = floors_us(r, ceil)
        us = r["median_us"]
        rows.append(f"| {key(r).label} | {r['kernel']} | {us:.1f} | {b:.1f} | "
                    f"{100 * b / us:.1f} | {f:.1f} | {100 * max(b, f) / us:.1f} |")
    return "\n".join(rows) + "\n"


def report_ceilings(runs: list[tuple[Path, dict]]) -> dict:
    """The roofs: a ceilings file given on the command line, else the newest one beside the
    first results file, else what the first run recorded, else the H200's documented ones."""
    given = [(run["created"], {**run["ceilings"], "source": str(p)}) for p, run in runs
             if run.get("kind") == "ceilings"]
    if given:
        return max(given, key=lambda g: g[0])[1]
    if runs and (found := results.latest_ceilings(runs[0][0].parent)):
        return found
    for _, run in runs:
        if run.get("ceilings"):
            return run["ceilings"]
    return dict(results.H200_CEILINGS)


def _source_line(path: Path, run: dict) -> str:
    m, env = run.get("method", {}), run.get("environment", {})
    fixed = run.get("corrected") or {}  # provenance corrected by hand, with its reason
    state = {**env, **{k: fixed[k] for k in ("git_commit", "git_dirty") if k in fixed}}
    commit = (state.get("git_commit") or "unknown")[:10] + (" (dirty)" if state.get(
        "git_dirty") else "") + (" (corrected: the file's `corrected` says why)" if fixed
                                 else "")
    return (f"- `{path}`: `{run.get('command', '?')}` on {env.get('gpu', '?')}, "
            f"{run.get('created', '?')}; {m.get('launches_per_round', '?')} launches × "
            f"{m.get('rounds', '?')} rounds; commit {commit}")


def _cublas_check(records: list[dict]) -> str:
    """One sentence on cuBLAS FP32's own error against float64: the proof TF32 was off."""
    mine = [r for r in records if r["kernel"] == "cublas" and "correct" in r]
    if not mine:
        return "cuBLAS FP32 was not checked in these files."
    bad = [r for r in mine if not r["correct"]]
    if bad:
        return "**cuBLAS FP32 FAILED the FP32 bound at " + ", ".join(
            f"{key(r).label} (error {r['error']:.1e} > {r['error_bound']:.1e})"
            for r in bad) + ": TF32 was on, and the ratios in this report are not valid.**"
    worst = max(mine, key=lambda r: r["error"] / r["error_bound"])
    return (f"cuBLAS FP32 passed the FP32 bound at all {len(mine)} shapes (max relative "
            f"error {max(r['error'] for r in mine):.1e}; closest to its bound at "
            f"{key(worst).label}: {worst['error']:.1e} of "
            f"{worst['error_bound']:.1e}), so TF32 was off.")


METHOD_TEXT = (
    "Every kernel is checked against a float64 reference before it is timed; each launch "
    "starts on a flushed L2 and is timed with CUDA events; each round takes the median of "
    "its launches, and rounds alternate the kernel with cuBLAS FP32 (TF32 off). *% of "
    "cuBLAS* is cuBLAS's time over the kernel's (above 100: faster), the median over "
    "rounds; *min–max* is its spread over the rounds. A problem written 32@128×128×128:TN "
    "is a batch of 32 products 128×128×128 with A stored column-major (T) and B row-major "
    "(N); without them, one product of row-major operands.")


def _header(runs: list[tuple[Path, dict]], gpu: str, ceil: dict) -> list[str]:
    notes = [n for _, run in runs for n in run.get("notes", [])]
    return [f"# sgemmlab report: {gpu}", "", "Sources:",
            *(_source_line(p, r) for p, r in runs), "",
            METHOD_TEXT, "",
            (f"Ceilings: FFMA peak {ceil['ffma_tflops']:.1f} TFLOP/s, copy bandwidth "
             f"{ceil['copy_tbps']:.2f} TB/s (from {ceil.get('source', '?')})."), "",
            *(f"Note: {n}" for n in notes), *([""] if notes else [])]


def _suite_table(summary: list[dict]) -> str:
    return markdown_table(
        ["suite", "kernel", "problems", "% of cuBLAS (geometric mean)", "lowest", "highest"],
        [[s["suite"], s["kernel"] + ("" if s["fp32"] else " (TF32: NOT FP32)"),
          str(s["shapes"]), f"{100 * s['geomean']:.1f}", f"{100 * s['lo']:.1f}",
          f"{100 * s['hi']:.1f}"] for s in summary if s["kernel"] != "cublas"])


def _random_section(name: str, summary: list[dict]) -> list[str]:
    md = [f"## Random shapes: {name}", ""]
    for s in summary:
        md += [_random_head(name, s) + ".", ""]
        if s["worst"]:
            md += [markdown_table(["problem", "% of cuBLAS", "what ran (rung, config, "
                                   "decomposition, source)"],
                                  [[w["problem"], f"{100 * w['vs_cublas']:.1f}",
                                    _what_ran(w) or w["rung"]] for w in s["worst"]])]
    return md


ANCHOR_TEXT = (
    "Kernels that compute on the tensor cores, against cuBLAS SGEMM (*% of cuBLAS*, paired "
    "as everywhere) and against their precision's anchor, the best torch alone gives at it "
    "(*% of anchor*: the anchor's median time over the kernel's, the same problem of the "
    "same run; above 100: faster). tf32x3_torch is three cuBLAS TF32 products of a "
    "truncating split; cublas_tf32 is cuBLAS on TF32 tensor cores.")


def _anchor_table(rows: list[dict]) -> str:
    return markdown_table(
        ["problem", "kernel", "% of cuBLAS SGEMM", "anchor", "% of anchor"],
        [[r["problem"], r["label"], f"{100 * r['vs_cublas']:.1f}", r["anchor"],
          "-" if r["vs_anchor"] is None else f"{100 * r['vs_anchor']:.1f}"] for r in rows])


def _summary_table(summary: list[dict]) -> str:
    return markdown_table(
        ["kernel", "shapes", "% of cuBLAS (geometric mean)", "lowest", "highest"],
        [[s["kernel"] + ("" if s["fp32"] else " (TF32: NOT FP32)"), str(s["shapes"]),
          f"{100 * s['geomean']:.1f}", f"{100 * s['lo']:.1f}", f"{100 * s['hi']:.1f}"]
         for s in summary])


ROOFLINE_TEXT = (
    "Intensity comes from each rung's block tile (bench/bill.py: 2·BM·BN·BK / ((BM+BN)·BK·4) "
    "FLOP/byte, 0.25 for the untiled rungs 1–2); cuBLAS and Triton, whose tiles are their "
    "own, sit at the shape's minimal traffic 2MNK / (4(MK+KN+MN)). A point far right of "
    "the ridge is limited by issue, not by DRAM.")


def build(paths: list[str | Path], out_dir: str | Path | None = None) -> tuple[str, list[Path]]:
    """Write report.md and the charts into `out_dir` (default: a folder beside the first
    results file); return the Markdown and every path written."""
    runs = load_runs(paths)
    first = runs[0][0]
    out = Path(out_dir) if out_dir else results.sibling(first, "-report")
    out.mkdir(parents=True, exist_ok=True)
    gpu = runs[0][1].get("environment", {}).get("gpu", "unknown GPU")
    ceil = report_ceilings(runs)
    # % of peak against the roofs this report states, whatever the run knew then
    records = [{**r, "pct_of_peak": 100 * r["tflops"] / ceil["ffma_tflops"]}
               if isinstance(r.get("tflops"), (int, float)) else r for r in gemm_records(runs)]
    charted = [r for r in records if _timed(r) and r.get("fp32", True)]
    versus = [r for r in charted if r["kernel"] != "cublas"]  # cuBLAS: the 100 % line
    summary = summarize(records)
    written: list[Path] = []

    md = _header(runs, gpu, ceil)
    md += ["## Correctness of the baseline", "", _cublas_check(records), ""]
    if summary:
        md += ["## % of cuBLAS FP32 per kernel", "", _summary_table(summary)]
    named = run_suites(run for _, run in runs)
    if per_suite := suite_summary(records, named):
        md += ["## % of cuBLAS FP32 per suite", "", _suite_table(per_suite)]
    if anchored := [row for _, run in runs for row in vs_anchor(run["records"])]:
        md += ["## Tensor cores: against cuBLAS SGEMM and the anchor", "", ANCHOR_TEXT, "",
               _anchor_table(anchored)]
    for name, items in named.items():
        if is_random_suite(name) and (rand := random_summary(records, items)):
            md += _random_section(name, rand)
    bound = _problems(x for name in MEMORY_BOUND_SUITES for x in named.get(name, []))
    if mem := [r for r in records if _timed(r) and key(r) in bound]:
        md += ["## The memory-bound suites against their floors", "",
               f"The bytes floor moves A, B and C once at {ceil['copy_tbps']} TB/s; the FLOP "
               f"floor runs 2MNK at {ceil['ffma_tflops']} TFLOP/s; the roofline is the larger "
               "of the two.", "", floor_table(mem, ceil)]
    if versus:
        title = f"{gpu}: % of cuBLAS FP32"
        written += plots.pct_of_cublas_chart(
            [s for s in summary if s["fp32"] and s["kernel"] != "cublas"], out / CHARTS[0],
            title)
        written += plots.ratio_by_shape_chart(versus, out / CHARTS[1], f"{title} per shape")
        md += [f"![% of cuBLAS per kernel]({CHARTS[0]}.svg)", ""]
    if records:
        md += ["## Per shape", ""]
        md += [f"![% of cuBLAS per shape]({CHARTS[1]}.svg)", ""] if versus else []
    for p in dict.fromkeys(key(r) for r in records):
        mine = [r for r in records if key(r) == p]
        skipped = [f"- `{r['kernel']}` skipped: {r.get('skip_note', '?')}" for r in mine
                   if r.get("status") == "skipped"]
        md += [f"### {p.label}", "", markdown(mine), *skipped, *([""] if skipped else [])]
    if charted:
        points = [(r["kernel"], intensity(r), r["tflops"]) for r in charted]
        written += plots.roofline_chart(points, ceil["ffma_tflops"], ceil["copy_tbps"],
                                        out / CHARTS[2], f"{gpu}: roofline")
        md += ["## Roofline", "", f"![roofline]({CHARTS[2]}.svg)", "", ROOFLINE_TEXT, ""]

    text = "\n".join(md)
    # atomic: a stopped rebuild leaves the previous report whole (the README links them)
    return text, [write_atomic(out / "report.md", text), *written]
