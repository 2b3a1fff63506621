"""The commands that measure on the GPU: ladder, run, bench, ceilings, overhead.

Each reads its options, turns every user mistake into one plain sentence, calls one
function of the lab, and prints what came back.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Optional

import typer

from .common import (
    KernelOpt,
    ShapeOpt,
    SizeOpt,
    app,
    fail,
    parse_shape,
    require_gpu,
    require_torch,
    rungs_from,
    shapes_from,
)


@app.command()
def ladder(size: SizeOpt = None, shape: ShapeOpt = None, kernel: KernelOpt = None,
           confirm: Annotated[bool, typer.Option(help="40 launches x 15 rounds")] = False,
           plot: Annotated[bool, typer.Option(help="write a bar chart PNG")] = True,
           quiet: Annotated[bool, typer.Option(help="no progress display")] = False):
    """Check every rung against float64, then time it against cuBLAS (paired, same run)."""
    from ..bench import ladder as ladder_mod
    from ..bench.measure import CONFIRM, QUICK
    from ..bench.plots import ladder_chart
    from ..bench.runner import BaselineError
    from ..bench.tables import print_scoreboard
    from ..errors import NoGPUError
    from ..runtime.device import gpu_info

    todo = shapes_from(size, shape, [(4096, 4096, 4096)])
    rungs = rungs_from(kernel)
    try:
        gpu = gpu_info()
    except NoGPUError as exc:
        from .look import predicted_ladder

        predicted_ladder(todo, str(exc))
        return
    require_torch()
    try:
        run, path = ladder_mod.run(todo, rungs, CONFIRM if confirm else QUICK, not quiet)
    except BaselineError as exc:
        fail(str(exc), 4)
    if quiet:
        for M, N, K in todo:
            recs = [r for r in run["records"] if (r["M"], r["N"], r["K"]) == (M, N, K)]
            print_scoreboard(recs, f"{gpu.name}  {M}×{N}×{K}  (cuBLAS FP32, TF32 off)")
    typer.echo(f"results: {path}")
    if plot:
        typer.echo(f"chart:   {ladder_chart(run, path.with_suffix('.png'))}")
    if any(r.get("status") == "failed" for r in run["records"]):
        fail("some rungs failed their correctness check (see the table)", 3)


@app.command()
def run(kernel: Annotated[str, typer.Option(
            "--kernel", "-k", help="rung number or name")] = "warptiling",
        size: SizeOpt = None, shape: ShapeOpt = None,
        config: Annotated[Optional[str], typer.Option(
            help="e.g. 'BM=128,BN=128,...' (default: tuned)")] = None,
        alpha: float = 1.0, beta: float = 0.0,
        repeat: Annotated[int, typer.Option(help="launches after the checked one")] = 0):
    """Run one rung once and check it against float64: the thing to put under ncu or
    compute-sanitizer (e.g. `ncu -k sgemm sgemmlab run -k 6 --size 4096`)."""
    from .. import registry
    from ..bench.once import run_once

    r = rungs_from([kernel])[0]
    gpu = require_gpu()
    require_torch()
    try:
        cfg = registry.parse_config(config) if config else r.default(gpu.name)
    except ValueError as exc:
        fail(f"--config: {exc}", 2)
    if problems := r.violations(cfg):
        fail(f"illegal configuration for {r.label}: " + "; ".join(problems), 2)
    for M, N, K in shapes_from(size, shape, [(1024, 1024, 1024)]):
        try:
            typer.echo(run_once(r, cfg, (M, N, K), alpha, beta, repeat))
        except RuntimeError as exc:
            fail(str(exc), 3)


SuiteOpt = Annotated[Optional[list[str]], typer.Option(
    "--suite", "-s", help="square, ragged, skinny, small, vector, decode or tinyk; repeatable "
    "(default: square)")]
BenchKernelOpt = Annotated[Optional[list[str]], typer.Option(
    "--kernel", "-k", help="rung number or name, 'all', 'best', 'auto' (the dispatcher's "
    "choice per shape) or 'matmul' (sgemmlab.matmul per launch, host overhead included); "
    "repeatable (default: best)")]
BaselineOpt = Annotated[Optional[list[str]], typer.Option(
    "--baseline", "-b", help="triton, tf32 or none; repeatable (default: triton and tf32); "
    "cuBLAS FP32 is always measured")]


@app.command()
def bench(suite: SuiteOpt = None, shape: ShapeOpt = None, kernel: BenchKernelOpt = None,
          baseline: BaselineOpt = None,
          confirm: Annotated[bool, typer.Option(help="40 launches x 15 rounds")] = False,
          mode: Annotated[str, typer.Option(
              help="isolated: each call timed alone on a flushed L2, host work included; "
              "throughput: calls back to back")] = "isolated",
          quiet: Annotated[bool, typer.Option(help="no live display")] = False):
    """Check kernels and baselines, then time each against cuBLAS FP32 over suites of shapes."""
    from ..bench import runner, suites
    from ..bench.measure import CONFIRM, QUICK
    from ..bench.tables import LiveBoard, print_scoreboard

    try:
        explicit = [parse_shape(s) for s in shape or []]
        todo = suites.shapes_for(suite or [], explicit)
        rungs, special = suites.kernels_for(kernel or [])
        extra = suites.baselines_for(baseline or [])
    except typer.BadParameter as exc:
        fail(f"--shape: {exc.message}", 2)
    except (KeyError, ValueError) as exc:
        fail(exc.args[0], 2)
    gpu = require_gpu()
    require_torch()
    try:
        candidates, notes = suites.candidates(rungs, special, extra, gpu)
    except ValueError as exc:
        fail(str(exc), 2)
    for note in notes:
        typer.echo(f"note: {note}")
    try:
        method = dataclasses.replace(CONFIRM if confirm else QUICK, mode=mode)
    except ValueError as exc:
        fail(f"--mode: {exc}", 2)
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
                run, path = runner.run("bench", tag, todo, candidates, method, notes, board)
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


@app.command()
def ceilings(launches: Annotated[int, typer.Option(help="timed launches of each")] = 20):
    """Measure this GPU's roofs: FP32 FFMA peak and device-to-device copy bandwidth."""
    from ..bench import ceilings as ceilings_mod

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


@app.command()
def overhead(size: Annotated[int, typer.Option(min=1, help="square size N (N×N×N)")] = 256,
             calls: Annotated[int, typer.Option(min=1, help="calls per timed loop")] = 200,
             repeats: Annotated[int, typer.Option(min=1, help="timed loops per path")] = 15):
    """Host time per call of sgemmlab.matmul against torch.matmul (budget: 1.5x at 256³)."""
    from ..bench import overhead as oh

    require_gpu()
    require_torch()
    run_, path = oh.run(size=size, calls=calls, repeats=repeats)
    for r in run_["records"]:
        typer.echo(f"{r['path']:28s} {r['median_us']:8.2f} µs/call  "
                   f"(min {r['min_us']:.2f}, max {r['max_us']:.2f})")
    s = run_["summary"]
    typer.echo(f"sgemmlab.matmul / torch.matmul = {s['ratio']:.2f} (budget {s['budget']}); "
               f"dispatch: {s['choice']}")
    typer.echo(f"results: {path}")
    if not s["within_budget"]:
        fail(f"host overhead {s['ratio']:.2f}x torch.matmul exceeds the {s['budget']}x budget",
             3)
