"""`sgemmlab report`: results files in, a Markdown report and its charts out.

Three questions, one chart each (PNG and SVG):
    how close is each kernel to cuBLAS FP32, over all shapes?   pct_of_cublas
    where does it win or lose, and how sure is that?            ratio_by_shape (min–max whiskers)
    what limits it: memory or arithmetic?                       roofline (bill.py's intensity)

Charts show FP32 kernels only: TF32 runs on tensor cores, off every scale here; the
tables list it, labelled. Kernels that failed their check appear in the tables only.
"""

from __future__ import annotations

import math
from pathlib import Path

from .. import registry
from . import plots, results
from .bill import block_tile_intensity, minimal_intensity
from .tables import markdown, markdown_table

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
    commit = (env.get("git_commit") or "unknown")[:10] + (" (dirty)" if env.get("git_dirty")
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
            f"{r['M']}×{r['N']}×{r['K']} (error {r['error']:.1e} > {r['error_bound']:.1e})"
            for r in bad) + ": TF32 was on, and the ratios in this report are not valid.**"
    worst = max(mine, key=lambda r: r["error"] / r["error_bound"])
    return (f"cuBLAS FP32 passed the FP32 bound at all {len(mine)} shapes (max relative "
            f"error {max(r['error'] for r in mine):.1e}; closest to its bound at "
            f"{worst['M']}×{worst['N']}×{worst['K']}: {worst['error']:.1e} of "
            f"{worst['error_bound']:.1e}), so TF32 was off.")


METHOD_TEXT = (
    "Every kernel is checked against a float64 reference before it is timed; each launch "
    "starts on a flushed L2 and is timed with CUDA events; each round takes the median of "
    "its launches, and rounds alternate the kernel with cuBLAS FP32 (TF32 off). *% of "
    "cuBLAS* is cuBLAS's time over the kernel's (above 100: faster), the median over "
    "rounds; *min–max* is its spread over the rounds.")


def _header(runs: list[tuple[Path, dict]], gpu: str, ceil: dict) -> list[str]:
    notes = [n for _, run in runs for n in run.get("notes", [])]
    return [f"# sgemmlab report: {gpu}", "", "Sources:",
            *(_source_line(p, r) for p, r in runs), "",
            METHOD_TEXT, "",
            (f"Ceilings: FFMA peak {ceil['ffma_tflops']:.1f} TFLOP/s, copy bandwidth "
             f"{ceil['copy_tbps']:.2f} TB/s (from {ceil.get('source', '?')})."), "",
            *(f"Note: {n}" for n in notes), *([""] if notes else [])]


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
    out = Path(out_dir) if out_dir else first.parent / f"{first.stem}-report"
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
    for M, N, K in dict.fromkeys((r["M"], r["N"], r["K"]) for r in records):
        md += [f"### {M}×{N}×{K}", "",
               markdown([r for r in records if (r["M"], r["N"], r["K"]) == (M, N, K)])]
    if charted:
        points = [(r["kernel"], intensity(r), r["tflops"]) for r in charted]
        written += plots.roofline_chart(points, ceil["ffma_tflops"], ceil["copy_tbps"],
                                        out / CHARTS[2], f"{gpu}: roofline")
        md += ["## Roofline", "", f"![roofline]({CHARTS[2]}.svg)", "", ROOFLINE_TEXT, ""]

    text = "\n".join(md)
    (out / "report.md").write_text(text)
    return text, [out / "report.md", *written]
