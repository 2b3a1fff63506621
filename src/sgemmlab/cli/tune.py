"""`sgemmlab tune`: search a rung's configurations, or build this GPU's dispatch table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .. import registry
from .common import (
    ShapeOpt,
    SizeOpt,
    app,
    fail,
    parse_shape,
    require_gpu,
    require_torch,
    rungs_from,
    split,
)


def _extra_configs(texts: list[str]):
    """--config RUNG:NAME=V,... -> [(rung, config)] (typer.BadParameter when malformed)."""
    out = []
    for text in texts:
        key, sep, body = text.partition(":")
        if not sep:
            raise typer.BadParameter(f"--config {text!r}: expected RUNG:NAME=VALUE,...")
        try:
            out.append((registry.rung(key.strip()), registry.parse_config(body)))
        except (KeyError, ValueError) as exc:
            raise typer.BadParameter(f"--config {text!r}: {exc.args[0]}") from None
    return out


TUNE_TABLE_SUITES = ["square", "ragged", "skinny"]


def search_lists(path: Path) -> dict[str, list[dict]]:
    """rung label -> configurations, from a JSON-lines file of {"rung", "config"} (each
    configuration once, in the file's order)."""
    import json

    out: dict[str, list[dict]] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        item = json.loads(line)
        label = registry.rung(item["rung"]).label
        cfg = {k: int(v) for k, v in item["config"].items()}
        if cfg not in out.setdefault(label, []):
            out[label].append(cfg)
    return out


@app.command()
def tune(kernel: Annotated[Optional[list[str]], typer.Option(
             "--kernel", "-k", "--rungs", help="rung numbers or names, comma-separated or "
             "repeated (default: all for a search; rungs 10 and up for --table)")] = None,
         size: SizeOpt = None, shape: ShapeOpt = None,
         suite: Annotated[Optional[list[str]], typer.Option(
             "--suite", "-s", help="square, ragged, skinny, small, vector, decode or tinyk; "
             "comma-separated or "
             "repeated (default: 4096³ for a search; square,ragged,skinny for --table)")] = None,
         table: Annotated[bool, typer.Option(
             "--table", help="build this GPU's dispatch table: each rung's default (and "
             "every Stream-K decomposition) checked and timed against cuBLAS at every "
             "shape")] = False,
         export: Annotated[Optional[Path], typer.Option(
             help="write the dispatch table (the one just built, else this GPU's current "
             "one) to PATH, e.g. src/sgemmlab/data/tables/nvidia-h200.json")] = None,
         layout: Annotated[Optional[list[str]], typer.Option(
             help="with --table: operand layouts NN, TN, NT, TT; repeatable (default NN)")] = None,
         config: Annotated[Optional[list[str]], typer.Option(
             help="with --table: one more candidate, RUNG:NAME=VALUE,...; repeatable")] = None,
         resume: Annotated[bool, typer.Option(
             help="pick an interrupted tune up where it stopped")] = True,
         write_defaults: Annotated[bool, typer.Option(
             help="store winners as this GPU's defaults")] = False,
         jobs: Annotated[Optional[int], typer.Option(
             help="parallel NVRTC compiles (default: one per core)")] = None,
         limit: Annotated[Optional[int], typer.Option(
             help="at most this many configurations per rung")] = None,
         candidates: Annotated[Optional[Path], typer.Option(
             help="measure only the configurations listed in this JSON-lines file, one "
             '{"rung": ..., "config": {...}} a line, for the rungs it names (e.g. to '
             "re-derive defaults from a short list)")] = None,
         where: Annotated[Optional[str], typer.Option(
             help="search only configurations with these values, NAME=VALUE,... "
             "(e.g. SPLIT=0,FIXUP=1)")] = None,
         quiet: Annotated[bool, typer.Option(help="no progress display")] = False):
    """Search each rung's legal configurations on this GPU (compile, check, time), or build
    the per-shape dispatch table (--table). Interrupted runs resume."""
    from ..bench import suites

    try:
        names = split(suite)
        picked = [(s, s, s) for s in size or []] + [parse_shape(x) for x in shape or []]
        if any(s < 1 for s in size or []):
            raise typer.BadParameter("--size: sizes must be >= 1")
        todo = suites.shapes_for(names or (TUNE_TABLE_SUITES if table else []), picked) \
            if names or picked or table else [(4096, 4096, 4096)]
        rungs = suites.rungs_for(split(kernel)) if kernel else None
        layouts = [x.upper() for x in split(layout)] or ["NN"]
        extra = _extra_configs(config or [])
    except typer.BadParameter as exc:
        fail(exc.message)
    except KeyError as exc:
        fail(exc.args[0])
    if not table and (layout or config):
        fail("--layout and --config apply to --table")
    if table and (write_defaults or limit is not None or where or candidates):
        fail("--write-defaults, --limit, --where and --candidates apply to the configuration "
             "search, not --table", 2)
    try:
        listed = search_lists(candidates) if candidates else None
    except (OSError, ValueError, KeyError) as exc:
        fail(f"--candidates: {exc}", 2)
    try:
        fixed = registry.parse_config(where) if where else None
    except ValueError as exc:
        fail(f"--where: {exc}")
    gpu = require_gpu()
    if export is not None and not table:
        from ..tune.table import export_table

        try:
            path, t = export_table(gpu.name, export)
        except (FileNotFoundError, ValueError, OSError) as exc:
            fail(str(exc))
        typer.echo(f"exported the {t.where} table of {gpu.name} "
                   f"({len(t.entries)} entries) to {path}")
        return
    require_torch()
    if table:
        _tune_table(todo, rungs, layouts, extra, names, picked, jobs, resume, export, quiet)
        return
    from ..tune import search

    if listed is not None and rungs is None:
        rungs = [registry.rung(label) for label in listed]
    for r in rungs or rungs_from(None):
        try:
            path, best = search.tune_rung(
                r, todo, configs=None if listed is None else listed.get(r.label, []),
                jobs=jobs, limit=limit, write_defaults=write_defaults, resume=resume,
                where=fixed, echo=typer.echo)
        except ValueError as exc:
            fail(str(exc))
        typer.echo(f"{r.label}: best {best}  ->  {path}")


def _tune_table(todo, rungs, layouts, extra, names, picked, jobs, resume, export, quiet):
    from ..bench.runner import BaselineError
    from ..registry import config_key
    from ..tune import table as table_mod

    tag = "-".join([*names, *(f"{M}x{N}x{K}" for M, N, K in picked)])[:80] or "-".join(
        TUNE_TABLE_SUITES)
    try:
        done = table_mod.build_table(todo, rungs, layouts=layouts, extra=extra, jobs=jobs,
                                     resume=resume, tag=tag, export=export, live=not quiet,
                                     echo=typer.echo)
    except BaselineError as exc:
        fail(str(exc), 4)
    except ValueError as exc:
        fail(str(exc))
    for w in done.table["winners"]:
        shape = f"{w['M']}×{w['N']}×{w['K']} {w['layout']}"
        typer.echo(f"{shape:24s} {w['rung']:14s} {100 * w['vs_cublas']:6.1f} % of cuBLAS  "
                   f"{config_key(w['config'])}")
    typer.echo(f"results: {done.results}")
    for path in done.written:
        typer.echo(f"table:   {path}")
