"""The `inspect` command; cli.py registers it on its app. Runs without a GPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer


def register(app: typer.Typer) -> None:
    app.command()(inspect)


def inspect(
    kernel: Annotated[Optional[str], typer.Argument(
        metavar="RUNG", help="rung number or name (omit with --all)")] = None,
    all_rungs: Annotated[bool, typer.Option("--all", help="the whole ladder as one table")]
    = False,
    config: Annotated[Optional[str], typer.Option(
        help="e.g. 'BM=128,BN=128,...' (default: the GPU's tuned one)")] = None,
    seed: Annotated[bool, typer.Option(
        "--seed", help="the articles' (seed) configurations instead of the tuned ones")]
    = False,
    shape: Annotated[str, typer.Option(help="M,N,K")] = "4096,4096,4096",
    gpu: Annotated[str, typer.Option(help="h200, h100, a100, a6000 or rtx4090")] = "h200",
    measured: Annotated[Optional[Path], typer.Option(
        help="ladder results file (default: the newest for this GPU and shape)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout")] = False,
    markdown: Annotated[Optional[Path], typer.Option(
        help="with --all: write the Markdown report here")] = None,
):
    """The bill, resources, occupancy, SASS mix and predicted bound of a rung (no GPU
    needed): computed from the registry, the kernel's index arithmetic and its cubin."""
    from .. import registry
    from ..cli import fail, parse_shape, rungs_from
    from . import occupancy, report

    try:
        g = occupancy.gpu(gpu)
    except KeyError as exc:
        raise typer.BadParameter(exc.args[0], param_hint="--gpu") from None
    M, N, K = parse_shape(shape)
    if not all_rungs and kernel is None:
        raise typer.BadParameter("give a RUNG or --all")
    try:
        meas = (report.measured_from(measured, (M, N, K)) if measured
                else report.find_measured(g, (M, N, K)))
    except (OSError, ValueError) as exc:
        fail(f"--measured: {exc}")
    try:
        if all_rungs:
            items = report.ladder(g, (M, N, K), seed, meas)
        else:
            r = rungs_from([kernel])[0]
            cfg = (registry.parse_config(config) if config
                   else dict(r.seed) if seed else r.default(g.name))
            items = [report.inspect_rung(r, cfg, (M, N, K), g, meas,
                                         list(occupancy.GPUS.values()))]
    except ValueError as exc:
        fail(str(exc), 2)
    if as_json:
        typer.echo(json.dumps(items if all_rungs else items[0], indent=1))
    elif all_rungs:
        typer.echo(report.ladder_text(items, f"{g.name}, {M}x{N}x{K}: the ladder "
                                             f"({report.PREDICTED_LABEL})"))
    else:
        typer.echo(report.rung_text(items[0]))
    if markdown is not None:
        if not all_rungs:
            fail("--markdown goes with --all", 2)
        seed_items = report.ladder(g, (M, N, K), True, None)
        cmd = (f"sgemmlab inspect --all --shape {M},{N},{K} --gpu {g.slug} "
               f"--markdown {markdown}")
        markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown.write_text(report.ladder_markdown(
            items, seed_items, f"sgemmlab inspect: {g.name}, {M}×{N}×{K}", cmd) + "\n")
        typer.echo(f"markdown: {markdown}")
