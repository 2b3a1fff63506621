"""`sgemmlab accuracy`: error against float64 over the fuzz set, beside cuBLAS SGEMM's on the
same inputs (bench/accuracy.py says what is drawn, measured and judged)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .common import app, fail, require_gpu, require_torch, split


@app.command()
def accuracy(
        quick: Annotated[bool, typer.Option(help="a few cases of each distribution (smoke "
                                                 "run)")] = False,
        seed: Annotated[int, typer.Option(min=0, help="the seed every case's inputs are "
                                                      "drawn from")] = 0,
        candidates: Annotated[Optional[list[str]], typer.Option(
            "--candidates", "-c", help="comma-separated or repeatable, of cublas_tf32, "
            "tf32x3_torch, ieee, fp32_emulated, tf32x3, tf32x3_rung, tf32, tf32_rung "
            "(default: all of these), and ozaki7, ozaki8 (rung 26 forced wherever K >= 256, "
            "7 or 8 moduli: only when named); cuBLAS SGEMM is always measured")] = None,
        strict: Annotated[bool, typer.Option(help="exit 3 when an FP32 candidate is less "
                                                  "accurate than cuBLAS anywhere")] = False,
        config: Annotated[Optional[list[str]], typer.Option(
            "--config", help="also a rung forced at a configuration, RUNG:KEY=V,KEY=V "
            "(repeatable; the keys given replace the rung's defaults), e.g. "
            "20:K8RUNS=1")] = None,
        distribution: Annotated[Optional[list[str]], typer.Option(
            "--distribution", "-d", help="only these distributions of the set "
            "(comma-separated or repeatable): normal, uniform, positive, mixed, span, "
            "subnormal, spikes")] = None):
    """Each candidate's error against float64 over a fuzz set (normal, uniform, positive
    and mixed-magnitude inputs, K 1 to 65536; the full set also rows spanning 2^60,
    subnormal rows and rare huge entries), beside cuBLAS SGEMM's on the same inputs; FP32
    candidates are judged (max and median <= cuBLAS's), TF32 ones only reported."""
    from ..bench import accuracy as acc

    only = split(distribution)
    if unknown := [d for d in only if d not in acc.DISTRIBUTIONS]:
        fail(f"--distribution: unknown {', '.join(unknown)}; known: "
             f"{', '.join(acc.DISTRIBUTIONS)}", 2)
    cases = [c for c in acc.fuzz_set(quick) if not only or c.distribution in only]
    if not cases:
        fail(f"--distribution: the {'quick ' if quick else ''}set has no case of "
             f"{', '.join(only)}", 2)

    try:
        entrants = acc.contenders(split(candidates))
    except KeyError as exc:
        fail(f"--candidates: {exc.args[0]}", 2)
    gpu = require_gpu()
    try:
        entrants += [acc.configured(spec, gpu.name) for spec in config or []]
    except ValueError as exc:
        fail(f"--config: {exc}", 2)
    require_torch()
    import torch

    if not torch.cuda.is_available():
        fail("this torch cannot reach the GPU (a CPU-only build?): the inputs and the "
             "float64 reference are drawn and computed on the GPU with torch")
    from rich.progress import Progress

    with Progress(transient=True) as progress:
        task = progress.add_task("accuracy", total=len(cases))
        run, path = acc.run(cases, entrants, seed,
                            on_case=lambda c: progress.advance(task))
    acc.print_tables(run)
    for s in run["summary"]:
        for why in s["unavailable"]:
            typer.echo(f"{s['candidate']} not available: {why}")
    typer.echo(f"results: {path}")
    if errors := [f"{s['candidate']} at {e}" for s in run["summary"] for e in s["errors"]]:
        fail(f"{len(errors)} calls raised (recorded in the results): {errors[0]}", 3)
    if strict and (worse := [s["candidate"] for s in run["summary"]
                             if s.get("all_passed") is False]):
        fail(f"less accurate than cuBLAS SGEMM on some case: {', '.join(worse)}", 3)
