"""The commands that time rungs against cuBLAS on the GPU: ladder (every rung, paired) and
bench (kernels and baselines over suites of problems, or whole torch workloads).

Each reads its options, turns every user mistake into one plain sentence, calls one
function of the lab, and prints what came back. Without a GPU, `ladder` shows the ladder
`sgemmlab inspect` predicts (look.predicted_ladder).
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Optional

import typer

from ..bench.problems import FORM, Problem, key
from .common import (
    KernelOpt,
    ShapeOpt,
    SizeOpt,
    app,
    extra_configs,
    fail,
    python_rungs_from,
    require_gpu,
    require_numba,
    require_torch,
    rungs_from,
    shapes_from,
)


@app.command()
def ladder(size: SizeOpt = None, shape: ShapeOpt = None, kernel: KernelOpt = None,
           confirm: Annotated[bool, typer.Option(help="40 launches x 15 rounds")] = False,
           plot: Annotated[bool, typer.Option(help="write a bar chart PNG")] = True,
           quiet: Annotated[bool, typer.Option(help="no progress display")] = False,
           track: Annotated[str, typer.Option(
               help="cuda (the ladder's CUDA C++ rungs) or numba (the Python track: each "
                    "Python rung beside its CUDA twin; -k then names Python rungs 1-7)")]
           = "cuda",
           wide: Annotated[bool, typer.Option(
               help="without a GPU: the whole predicted bill, not the 100-column "
                    "summary")] = False):
    """Check every rung against float64, then time it against cuBLAS (paired, same run)."""
    from ..bench import ladder as ladder_mod
    from ..bench import results
    from ..bench.measure import CONFIRM, QUICK
    from ..bench.plots import ladder_chart
    from ..bench.runner import BaselineError
    from ..bench.tables import print_scoreboard
    from ..errors import NoGPUError
    from ..runtime.device import gpu_info

    todo = shapes_from(size, shape, [(4096, 4096, 4096)])
    if track not in ladder_mod.TRACKS:
        fail(f"--track must be {' or '.join(ladder_mod.TRACKS)}, not {track!r}", 2)
    pys = python_rungs_from(kernel) if track == "numba" else None
    rungs = rungs_from(kernel) if track == "cuda" and kernel else None  # None: 1-14, 21
    try:
        gpu = gpu_info()
    except NoGPUError as exc:
        if track == "numba":
            fail(f"{exc}: the Python track's ladder measures on a GPU (`sgemmlab run "
                 "--track numba --simulate` runs a Python rung on the CPU)", 1)
        from .look import predicted_ladder

        predicted_ladder(todo, str(exc), rungs, wide)
        return
    require_torch()
    if track == "numba":
        require_numba()
    try:
        run, path = ladder_mod.run(todo, rungs, CONFIRM if confirm else QUICK, not quiet,
                                   track=track, pys=pys)
    except BaselineError as exc:
        fail(str(exc), 4)
    if quiet:
        for p in map(Problem.of, todo):
            recs = [r for r in run["records"] if key(r) == p]
            print_scoreboard(recs, f"{gpu.name}  {p.label}  (cuBLAS FP32, TF32 off)")
    typer.echo(f"results: {path}")
    if plot:
        typer.echo(f"chart:   {ladder_chart(run, results.sibling(path, '.png'))}")
    if any(r.get("status") == "failed" for r in run["records"]):
        fail("some rungs failed their correctness check (see the table)", 3)


def _suite_names() -> str:
    from ..bench.suites import SUITES

    names = list(SUITES)
    return ", ".join(names[:-1]) + " or " + names[-1]


SuiteOpt = Annotated[Optional[list[str]], typer.Option(
    "--suite", "-s", help=f"{_suite_names()}; repeatable (default: square, unless --shape or "
    "--random is given)")]
ProblemOpt = Annotated[Optional[list[str]], typer.Option(
    "--shape", help=f"a problem: {FORM} (NN, TN, NT, TT: A's then B's storage, T "
    "column-major), e.g. 4096x4096x4096, 32@128x128x128 (a batch of 32) or "
    "1000x1000x1000:TN; repeatable")]
RandomOpt = Annotated[Optional[int], typer.Option(
    "--random", min=1, metavar="COUNT", help="also COUNT shapes drawn at random: each of M, "
    "N, K log-uniform in [1, 16384], M·N·K <= 2^37, none of this GPU's dispatch-table "
    "shapes; summarized at the end (median, how many below 90 %, the worst ten)")]
SeedOpt = Annotated[Optional[int], typer.Option(
    "--seed", help="the seed of --random (default 0): the same seed, the same shapes")]
MixOpt = Annotated[bool, typer.Option(
    "--mix", help="with --random: every kind of problem — each operand row- or column-major "
    "at random, a third with K or N not a multiple of 4, a sixth batches of 2-64 (aligned "
    "and not), a fifth stored in wider matrices (bench/suites.random_mix)")]
BenchKernelOpt = Annotated[Optional[list[str]], typer.Option(
    "--kernel", "-k", help="rung number or name, 'all', 'best', 'auto' (the dispatcher's "
    "choice per shape), 'matmul' (sgemmlab.matmul per launch, host overhead included) or a "
    "Python rung (py1-py7, Numba: pip install -e '.[numba]'); repeatable (default: best)")]
BaselineOpt = Annotated[Optional[list[str]], typer.Option(
    "--baseline", "-b", help="triton, tf32, tf32x3 (the composed 3xTF32 anchor) or none; "
    "repeatable (default: triton and tf32, and a precision's own); cuBLAS FP32 is always "
    "measured")]
PrecisionOpt = Annotated[str, typer.Option(
    "--precision", "-p", help="what auto and matmul compute in: ieee (exact FP32), "
    "fp32_emulated (Ozaki scheme II on INT8 tensor cores, FP32-accurate, gated like FP32; "
    "adds the tf32x3 baseline), tf32x3 (3xTF32 tensor cores, FP32-accurate, gated like FP32; "
    "adds the tf32x3 and tf32 baselines) or tf32 (NOT FP32, never gated; adds tf32); their "
    "records are then named matmul[tf32x3], auto[tf32x3]")]
ModelOpt = Annotated[Optional[list[str]], typer.Option(
    "--model", help="time whole torch workloads with and without sgemmlab.torch_mode, "
    "paired in one run, instead of kernels: overhead, linear, encoder-small, encoder, "
    "encoder-wide, llama, llama-wide, llama-graphs, llama-wide-graphs or all; repeatable "
    "(the Llama ones need transformers: the models extra); --precision tf32x3 or "
    "fp32_emulated runs the switch on 3xTF32 or Ozaki scheme II, the baseline staying "
    "torch's exact FP32")]


@app.command()
def bench(suite: SuiteOpt = None, shape: ProblemOpt = None, random: RandomOpt = None,
          seed: SeedOpt = None, mix: MixOpt = False, kernel: BenchKernelOpt = None,
          baseline: BaselineOpt = None, precision: PrecisionOpt = "ieee",
          confirm: Annotated[bool, typer.Option(help="40 launches x 15 rounds")] = False,
          grouped: Annotated[bool, typer.Option(
              help="time every kernel of a problem in shared rounds (cuBLAS once a round, "
              "then each kernel, the order rotated), so their ratios share one baseline "
              "and rank as their times do; default: each kernel paired with cuBLAS "
              "alone")] = False,
          mode: Annotated[str, typer.Option(
              help="isolated: each call timed alone on a flushed L2, host work included; "
              "throughput: calls back to back")] = "isolated",
          quiet: Annotated[bool, typer.Option(help="no live display")] = False,
          config: Annotated[Optional[list[str]], typer.Option(
              help="one more candidate: RUNG:NAME=VALUE,..., the rung at its default with "
              "these values changed (e.g. 24:REG_TRANSPOSE=0); repeatable")] = None,
          model: ModelOpt = None):
    """Check kernels and baselines, then time each against cuBLAS FP32 over suites of
    problems (shapes, batches, layouts); or, with --model, whole torch workloads with and
    without the drop-in switch."""
    if model:
        given = [name for name, value in (
            ("--suite", suite), ("--shape", shape), ("--random", random), ("--seed", seed),
            ("--mix", mix), ("--kernel", kernel), ("--baseline", baseline), ("--config", config),
            ("--confirm", confirm), ("--grouped", grouped), ("--mode", mode != "isolated"))
            if value]
        if given:
            fail(f"--model times whole workloads: it does not combine with "
                 f"{', '.join(given)}", 2)
        _bench_models(model, precision, quiet)
        return
    from ..bench import report, runner, suites
    from ..bench.measure import CONFIRM, QUICK
    from ..bench.tables import LiveBoard, print_scoreboard

    try:
        explicit = [Problem.parse(s) for s in shape or []]
    except ValueError as exc:
        fail(f"--shape: {exc}", 2)
    if seed is not None and random is None:
        fail("--seed applies to --random (the seed of its draw)", 2)
    if mix and random is None:
        fail("--mix applies to --random (what its draw holds)", 2)
    names = list(suite or []) or ([] if explicit or random else [suites.DEFAULT_SUITE])
    try:
        groups = {name: suites.suite(name) for name in names}
        rungs, special = suites.kernels_for(kernel or [])
        precision = suites.precision_of(precision)
        extra = suites.baselines_for(baseline or [], precision)
    except (KeyError, ValueError) as exc:
        fail(exc.args[0], 2)
    changed = extra_configs(config or [])
    gpu = require_gpu()
    require_torch()
    try:
        candidates, notes = suites.candidates(rungs, special, extra, gpu, precision,
                                              changed)
    except ValueError as exc:
        fail(str(exc), 2)
    for note in notes:
        typer.echo(f"note: {note}")
    try:
        method = dataclasses.replace(CONFIRM if confirm else QUICK, mode=mode,
                                     grouped=grouped)
    except ValueError as exc:
        fail(f"--mode: {exc}", 2)
    drawn: list[Problem] = []
    rname = suites.random_suite_name(random, seed or 0, mix) if random else None
    if rname:
        grid = suites.dispatch_grid(gpu.name)
        draw = suites.random_mix if mix else suites.random_shapes
        drawn = groups[rname] = draw(random, seed or 0, exclude=grid)
        notes.append(f"{rname}: {random} shapes drawn with seed {seed or 0}, each of M, N, K "
                     f"log-uniform in [1, {suites.RANDOM_MAX_DIM}], M·N·K <= 2^37, the "
                     f"{len(grid)} problems of this GPU's dispatch table left out"
                     + ("; layouts at random, a third with K or N not a multiple of 4, a "
                        "sixth batches of 2-64 (batch·M·N·K <= 2^33)" if mix else ""))
    todo = suites.shapes_for(names, [*drawn, *explicit])
    tag = "-".join([*names, *([rname] if rname else []), *(p.tag for p in explicit)])[:80]
    title = (f"{gpu.name}: vs cuBLAS FP32 (TF32 off), {method.launches} launches × "
             f"{method.rounds} rounds" + ("" if precision == "ieee" else
                                          f"; auto and matmul at {precision}"))
    try:
        if quiet:
            run, path = runner.run("bench", tag, todo, candidates, method, notes,
                                   suites=groups, precision=precision)
            print_scoreboard(run["records"], title)
        else:
            with LiveBoard(title, runner.new_progress()) as board:
                run, path = runner.run("bench", tag, todo, candidates, method, notes, board,
                                       suites=groups, precision=precision)
    except runner.BaselineError as exc:
        fail(str(exc), 4)
    for row in runner.auto_vs_best(run["records"]):
        typer.echo(f"auto at {row['problem']}: {row['auto']} "
                   f"reaches {100 * row['ratio']:.1f} % of the best rung measured "
                   f"({row['best']})")
    for line in report.anchor_lines(report.vs_anchor(run["records"])):
        typer.echo(line)
    _echo_skipped(run["records"])
    if lines := report.suite_lines(report.suite_summary(run["records"], groups)):
        typer.echo("% of cuBLAS FP32 per suite (geometric mean):")
        for line in lines:
            typer.echo(f"  {line}")
    if rname:
        for line in report.random_lines(rname, report.random_summary(run["records"], drawn)):
            typer.echo(line)
    typer.echo(f"results: {path}\nreport:  sgemmlab report {path}")
    failed = sorted({r["kernel"] for r in run["records"] if r.get("status") == "failed"})
    if failed:
        fail(f"failed their correctness check (not timed): {', '.join(failed)}", 3)


def _bench_models(names: list[str], precision: str, quiet: bool) -> None:
    """`bench --model`: the workloads of bench/models.py, a line per pair as it is
    measured, then the table and the summary."""
    from rich.console import Console

    from ..bench import models

    try:
        todo = models.workloads_for(names)
        precision = models.precision_of(precision)
    except (KeyError, ValueError) as exc:
        fail(exc.args[0], 2)
    gpu = require_gpu()
    require_torch()
    on_record = None if quiet else (lambda rec: typer.echo(models.progress_line(rec)))
    run, path = models.run(todo, precision, on_record)
    title = (f"{gpu.name}: torch without / with sgemmlab.torch_mode(precision="
             f"{precision!r}); baseline {models.BASELINE}")
    Console(width=max(Console().width, 100)).print(models.table(run["records"], title))
    for line in models.summary_lines(run["summary"]):
        typer.echo(line)
    typer.echo(f"results: {path}")
    bad = len(run["summary"]["failed_checks"]) + len(run["summary"]["errors"])
    if bad:
        fail(f"{bad} workload case(s) failed their check or raised (see above)", 3)


def _echo_skipped(records: list[dict]) -> None:
    """One line per kernel and reason: what could not be measured, and at how many problems."""
    counts: dict[tuple[str, str], list[str]] = {}
    for r in records:
        if r.get("status") == "skipped":
            counts.setdefault((r["kernel"], r.get("skip_note", "?")), []).append(
                key(r).label)
    for (kernel, why), where in counts.items():
        at = where[0] if len(where) == 1 else f"{len(where)} problems"
        typer.echo(f"skipped {kernel} at {at}: {why}")
