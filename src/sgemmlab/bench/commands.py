"""The `bench`, `ceilings` and `report` commands; cli.py registers them on its app.

Thin, like the rest of the CLI: read the options, turn every user mistake into one plain
sentence, call the library, print. (cli.py's helpers are imported inside the functions:
cli.py imports this module while it is still being built.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

SuiteOpt = Annotated[Optional[list[str]], typer.Option(
    "--suite", "-s", help="square, ragged, skinny or small; repeatable (default: square)")]
ShapeOpt = Annotated[Optional[list[str]], typer.Option("--shape", help="M,N,K; repeatable")]
KernelOpt = Annotated[Optional[list[str]], typer.Option(
    "--kernel", "-k", help="rung number or name, 'all', 'best', 'auto' (the dispatcher's "
    "choice per shape) or 'matmul' (sgemmlab.matmul per launch, host overhead included); "
    "repeatable (default: best)")]
BaselineOpt = Annotated[Optional[list[str]], typer.Option(
    "--baseline", "-b", help="triton, tf32 or none; repeatable (default: triton and tf32); "
    "cuBLAS FP32 is always measured")]


def register(app: typer.Typer) -> None:
    app.command()(bench)
    app.command()(ceilings)
    app.command()(report)


def _candidates(rungs, baselines: list[str], gpu, special: list[str] = ()
                ) -> tuple[list, list[str]]:
    """Each rung at this GPU's default configuration, then 'auto' and 'matmul' if asked,
    then the extra baselines; and notes for the baselines that cannot run here."""
    from ..cli import fail
    from ..runtime.compiler import CompileError
    from ..runtime.launch import ConfigError
    from .baselines import BaselineUnavailable, candidate
    from .runner import auto_candidate, matmul_candidate, rung_candidate

    out, notes = [], []
    for r in rungs:
        try:
            out.append(rung_candidate(r, r.default(gpu.name)))
        except (CompileError, ConfigError, OSError) as exc:
            fail(f"{r.label} cannot be built: {str(exc).splitlines()[0]}", 2)
    for name in special:
        out.append(auto_candidate(gpu) if name == "auto" else matmul_candidate())
    for name in baselines:
        try:
            out.append(candidate(name))
        except BaselineUnavailable as exc:
            notes.append(str(exc))
            typer.echo(f"note: {exc}")
    return out, notes


def bench(suite: SuiteOpt = None, shape: ShapeOpt = None, kernel: KernelOpt = None,
          baseline: BaselineOpt = None,
          confirm: Annotated[bool, typer.Option(help="40 launches x 15 rounds")] = False,
          quiet: Annotated[bool, typer.Option(help="no live display")] = False):
    """Check kernels and baselines, then time each against cuBLAS FP32 over suites of shapes."""
    from ..cli import fail, parse_shape, require_gpu, require_torch
    from . import runner, suites
    from .measure import CONFIRM, QUICK
    from .tables import LiveBoard, print_scoreboard

    try:
        explicit = [parse_shape(s) for s in shape or []]
        todo = suites.shapes_for(suite or [], explicit)
        rungs, special = suites.kernels_for(kernel or [])
        extra = suites.baselines_for(baseline or [])
    except typer.BadParameter as exc:
        fail(f"--shape: {exc.message}")
    except (KeyError, ValueError) as exc:
        fail(exc.args[0])
    gpu = require_gpu()
    require_torch()
    candidates, notes = _candidates(rungs, extra, gpu, special)
    method = CONFIRM if confirm else QUICK
    tag = "-".join([*(suite or []), *(f"{M}x{N}x{K}" for M, N, K in explicit)])[:80] \
        or suites.DEFAULT_SUITE
    title = (f"{gpu.name}: vs cuBLAS FP32 (TF32 off), {method.launches} launches × "
             f"{method.rounds} rounds")
    try:
        if quiet:
            run, path = runner.run("bench", tag, todo, candidates, method, notes)
            print_scoreboard(run["records"], title)
        else:
            with LiveBoard(title, runner.new_progress()) as board:
                run, path = runner.run("bench", tag, todo, candidates, method,
                                       notes, board)
    except runner.BaselineError as exc:
        fail(str(exc), 4)
    for row in runner.auto_vs_best(run["records"]):
        typer.echo(f"auto at {row['M']}×{row['N']}×{row['K']}: {row['auto']} "
                   f"reaches {100 * row['ratio']:.1f} % of the best rung measured "
                   f"({row['best']})")
    typer.echo(f"results: {path}\nreport:  sgemmlab report {path}")
    failed = sorted({r["kernel"] for r in run["records"] if r.get("status") == "failed"})
    if failed:
        fail(f"failed their correctness check (not timed): {', '.join(failed)}", 3)


def ceilings(launches: Annotated[int, typer.Option(help="timed launches of each")] = 20):
    """Measure this GPU's roofs: FP32 FFMA peak and device-to-device copy bandwidth."""
    from ..cli import fail, require_gpu, require_torch
    from . import ceilings as ceilings_mod

    gpu = require_gpu()
    require_torch()
    try:
        run, path = ceilings_mod.run(launches)
    except ceilings_mod.CeilingError as exc:
        fail(str(exc), 4)
    ffma, copy = run["records"]
    sass = ffma["sass_ffma"]
    typer.echo(f"{gpu.name}\n"
               f"  FFMA peak   {ffma['tflops']:6.1f} TFLOP/s  ({ffma['config']['BLOCKS']} "
               f"blocks x {ffma['config']['THREADS']} threads, {ffma['registers']} registers, "
               f"{'SASS not checked' if sass is None else f'{sass} FFMA in SASS'})\n"
               f"  copy        {copy['tbps']:6.2f} TB/s     "
               f"({copy['config']['BYTES'] >> 20} MiB, bytes read + written)\n"
               f"results: {path}")


def report(files: Annotated[list[Path], typer.Argument(
               metavar="RESULTS...", help="results JSON files (bench, ladder, ceilings)")],
           out: Annotated[Optional[Path], typer.Option(
               help="folder for report.md and the charts (default: beside the first file)")]
           = None):
    """Markdown tables and charts (PNG, SVG) from results files."""
    from ..cli import fail
    from . import report as report_mod

    try:
        text, written = report_mod.build(files, out)
    except ValueError as exc:
        fail(str(exc))
    typer.echo(text)
    typer.echo(f"report: {written[0]}  ({len(written) - 1} charts beside it)")
