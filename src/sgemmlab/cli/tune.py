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
    echo,
    extra_configs,
    fail,
    gpu_and_arch,
    parse_shape,
    require_gpu,
    require_torch,
    rungs_from,
    split,
)
from .measure import _suite_names

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
             "--suite", "-s", help=f"{_suite_names()} (batched and layouts: not for a search "
             "or --table, which take row-major single products; --table takes --layout); "
             "comma-separated or repeated (default: 4096³ for a search; square,ragged,skinny "
             "for --table when no --shape or --size is given)")] = None,
         table: Annotated[bool, typer.Option(
             "--table", help="build this GPU's dispatch table: each rung's default (and "
             "every Stream-K decomposition) checked and timed against cuBLAS at every "
             "shape")] = False,
         export: Annotated[Optional[Path], typer.Option(
             help="write the dispatch table (the one just built, else this GPU's current "
             "one) to PATH, e.g. src/sgemmlab/data/tables/nvidia-h200.json.gz")] = None,
         layout: Annotated[Optional[list[str]], typer.Option(
             help="with --table: operand layouts NN, TN, NT, TT; repeatable (default NN); with "
             "--grid: only these passes (NN with the batches, or the others)")] = None,
         config: Annotated[Optional[list[str]], typer.Option(
             help="with --table: one more candidate, RUNG:NAME=VALUE,...; repeatable")] = None,
         confirm: Annotated[bool, typer.Option(
             help="with --table: time every candidate as bench --confirm does (40 launches x "
             "15 rounds) instead of the quick method, where the winner's margin is a few "
             "points")] = False,
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
         quiet: Annotated[bool, typer.Option(help="no progress display")] = False,
         grid: Annotated[bool, typer.Option(
             "--grid", help="build this GPU's dispatch table over the shape grid "
             "(tune/grid.py: M, N, K log-spaced from 1 to 16384; column-major operands on a "
             "coarser grid): the grid's candidates at every grid shape")] = False,
         layers: Annotated[bool, typer.Option(
             "--layers", help="with --grid: only the products of linear layers "
             "(tune/grid.py's LAYER_WEIGHTS): the forward's NT at M 1-512, or with --layout "
             "NN / TN the backward's input and weight gradients")] = False,
         train_rows: Annotated[bool, typer.Option(
             "--train-rows", help="with --layers: every layout at the rows of prefill and "
             "training (tune/grid.py's TRAIN_ROWS, 128-8192 tokens)")] = False,
         mid: Annotated[bool, typer.Option(
             "--mid", help="with --grid: only the mid-size products (tune/grid.py's "
             "mid_range), every candidate, mid-size tiles included")] = False,
         validate: Annotated[bool, typer.Option(
             "--validate", help="leave each measured shape out of this GPU's table (or the "
             "shipped one) and predict it from the others; no GPU needed")] = False,
         fit_model: Annotated[bool, typer.Option(
             "--fit-model", help="fit dispatch's cost model (dispatch/model.py) to this "
             "GPU's table (or the shipped one) and write it beside the package's table; "
             "compiles each modelled candidate once for its registers, no GPU needed")
         ] = False):
    """Search each rung's legal configurations on this GPU (compile, check, time), build
    the per-shape dispatch table (--table, --grid), or check it (--validate). Interrupted
    runs resume."""
    from ..bench import suites

    if validate:
        _validate(export)
        return
    if fit_model:
        _fit_model()
        return

    try:
        names = split(suite)
        picked = [(s, s, s) for s in size or []] + [parse_shape(x) for x in shape or []]
        if any(s < 1 for s in size or []):
            raise typer.BadParameter("--size: sizes must be >= 1")
        todo = suites.plain_shapes(suites.shapes_for(
            names or (TUNE_TABLE_SUITES if table and not picked else []), picked)) \
            if names or picked or table else [(4096, 4096, 4096)]
        rungs = suites.rungs_for(split(kernel)) if kernel else None
        layouts = [x.upper() for x in split(layout)] or ["NN"]
        extra = extra_configs(config or [])
    except typer.BadParameter as exc:
        fail(exc.message)
    except (KeyError, ValueError) as exc:  # ValueError: a batched or transposed suite
        fail(exc.args[0])
    if (layers or mid) and not grid:
        fail("--layers and --mid apply to --grid")
    if train_rows and not layers:
        fail("--train-rows applies to --grid --layers")
    if not (table or grid) and layout or not table and (config or confirm):
        fail("--layout applies to --table and --grid, --config and --confirm to --table")
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
    if export is not None and not table and not grid:
        from ..tune.table import export_table

        try:
            path, t = export_table(gpu.name, export)
        except (FileNotFoundError, ValueError, OSError) as exc:
            fail(str(exc))
        typer.echo(f"exported the {t.where} table of {gpu.name} "
                   f"({len(t.entries)} entries) to {path}")
        return
    require_torch()
    if grid:
        _tune_grid(layouts if layout else None, jobs, resume, export, quiet, mid, layers,
                   train_rows)
        return
    if table:
        _tune_table(todo, rungs, layouts, extra, names, picked, jobs, resume, export, quiet,
                    confirm)
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


def _tune_table(todo, rungs, layouts, extra, names, picked, jobs, resume, export, quiet,
                confirm=False):
    from ..bench.measure import CONFIRM, QUICK
    from ..bench.runner import BaselineError
    from ..registry import config_key
    from ..tune import table as table_mod

    tag = "-".join([*names, *(f"{M}x{N}x{K}" for M, N, K in picked)])[:80] or "-".join(
        TUNE_TABLE_SUITES)
    try:
        done = table_mod.build_table(todo, rungs, layouts=layouts, extra=extra, jobs=jobs,
                                     resume=resume, tag=tag, export=export, live=not quiet,
                                     echo=typer.echo, method=CONFIRM if confirm else QUICK)
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


def _tune_grid(layouts, jobs, resume, export, quiet, mid=False, layers=False,
               train_rows=False):
    """--grid: the NN grid, then the coarser grid for the other layouts (or `layouts`);
    with `layers`, the linear layers' products alone (NT, or `layouts`), at
    TRAIN_ROWS with `train_rows`."""
    from ..bench.runner import BaselineError
    from ..runtime.device import gpu_info
    from ..tune import grid
    from ..tune import table as table_mod
    from ..tune.search import TUNE

    cands = grid.grid_candidates(gpu_info().name)
    worth = grid.useful
    passes = [(["NN"], grid.grid_shapes(), "grid", cands)]
    other = [x for x in (layouts or ["TN", "NT", "TT"]) if x != "NN"]
    if other:
        passes.append((other, grid.grid_shapes(grid.LAYOUT_SIDES), "grid-layouts", cands))
    if layers:  # one pass per layout, each with the shapes a layer sends in it
        rows = grid.TRAIN_ROWS if train_rows else None
        passes = [([lay], grid.layer_shapes(lay, rows),
                   "grid-layers" + ("-train" if train_rows else "")
                   + ("" if lay == "NT" else f"-{lay.lower()}"),
                   grid.layer_candidates(gpu_info().name, lay))
                  for lay in layouts or ["NT"]]
        worth = grid.layer_useful
    elif layouts and "NN" not in layouts:
        passes = passes[1:]
    else:  # batches of row-major products (the rungs that take a batch in one launch)
        passes.append((["NN"], grid.batch_problems(), "grid-batched", cands))
    if mid:  # the same passes at their mid-size products only
        passes = [(lays, [s for s in shapes if grid.mid_range(*s)], f"{tag}-mid", c)
                  for lays, shapes, tag, c in passes]
    for lays, shapes, tag, cands in passes:
        try:
            done = table_mod.build_table(shapes, layouts=lays, jobs=jobs, resume=resume,
                                         tag=tag, export=export, live=not quiet,
                                         echo=typer.echo, candidates=cands,
                                         worth=worth, method=TUNE)
        except BaselineError as exc:
            fail(str(exc), 4)
        except ValueError as exc:
            fail(str(exc))
        typer.echo(f"{tag}: {len(shapes)} shapes x {', '.join(lays)}; results: {done.results}")
        for path in done.written:
            typer.echo(f"table:   {path}")
    _validate(None)


def _validate(path):
    """--validate: leave-one-out over this GPU's table (a path with --export)."""
    import json

    from .. import dispatch
    from ..bench import results
    from ..runtime.device import slug
    from ..runtime.files import write_atomic
    from ..tune import validate

    try:
        name, _, _ = dispatch.target_gpu()
        table = dispatch.read_table(path) if path else dispatch.load_table(name)
    except (ValueError, dispatch.TableError) as exc:
        fail(str(exc))
    if table is None:
        fail(f"no tuning table for {name}: build one with `sgemmlab tune --grid`")
    s = validate.summary(validate.leave_one_out(table))
    if not s["shapes"]:
        fail(f"the {table.where} table has no shape to leave out")
    echo(f"{table.label()}: {s['shapes']} shapes left out one at a time and predicted "
               f"from the others")
    echo(f"  loss (chosen / best measured there): median {s['median_loss']:.3f}, "
               f"geometric mean {s['geomean_loss']:.3f}, worst {s['worst_loss']:.3f}; "
               f"{100 * s['within_97']:.0f} % within 3 %, {100 * s['within_90']:.0f} % "
               f"within 10 %; {s['unmeasured']} chose a candidate not measured there")
    for w in s["worst"]:
        echo(f"  {w['M']}×{w['N']}×{w['K']} {w['layout']}"
                   f"{' batch ' + str(w['batch']) if w['batch'] > 1 else ''}: chose "
                   f"{w['chosen']} ({w['loss']:.3f} of the best, {w['best']})")
    from ..dispatch import lookup, model

    shipped = model.load_model(table.gpu)
    m = validate.summary(validate.model_folds(table, shipped[1])) if shipped else {}
    tried = validate.TRANSFER_TRIED
    t = validate.summary(validate.leave_one_out(table, transfer=tried)) \
        if shipped and tried != lookup.MODEL_TRANSFER else {}
    if t.get("shapes"):
        echo(f"the blend with MODEL_TRANSFER = {tried} (now {lookup.MODEL_TRANSFER}): median "
             f"{t['median_loss']:.3f}, {100 * t['within_97']:.0f} % within 3 %, "
             f"{100 * t['within_90']:.0f} % within 10 %; {t['unmeasured']} unmeasured")
    if m.get("shapes"):
        echo(f"the cost model, {validate.MODEL_FOLDS}-fold (a tenth of the shapes left out at "
             f"a time, the rest refitted), against the best modelled candidate measured: "
             f"median {m['median_loss']:.3f}, {100 * m['within_97']:.0f} % within 3 %, "
             f"{100 * m['within_90']:.0f} % within 10 % over {m['shapes']} shapes")
    out = results.place(slug(table.gpu), f"validate-{results.stamp()}.json")
    write_atomic(out, json.dumps({"kind": "validate", "table": table.label(),
                                  "sources": table.data.get("sources", []),
                                  "command": results.command_line(), **s, "model": m,
                                  "transfer": {"tried": tried, **t} if t else {}},
                                 indent=1) + "\n")
    typer.echo(f"results: {out}")


def _fit_model():
    """--fit-model: dispatch/model.py's fits over this GPU's table, written beside the
    package's table."""
    import math

    from .. import dispatch
    from ..dispatch import model
    from ..registry import config_key

    name, sms, _ = dispatch.target_gpu()
    table = dispatch.load_table(name)
    if table is None:
        fail(f"no tuning table for {name}: build one with `sgemmlab tune --grid`")

    def slots_of(rung, cfg):
        return dispatch.geometry(rung, cfg, dispatch.Request(1024, 1024, 1024, name, sms)).slots

    fitted = model.fit_entries(table.entries, slots_of, name, table.sm_count or sms)
    path = model.write_model(name, table.sm_count or sms, fitted,
                             list(table.data.get("sources", [])))
    for f in fitted:
        echo(f"  {f.rung} {config_key(f.config)}: {f.shapes} shapes, median error "
             f"{100 * (math.exp(f.error) - 1):.0f} %, {f.slots} slots, at most "
             f"{100 * f.rate:.0f} % of the FP32 rate")
    typer.echo(f"model: {path} ({len(fitted)} candidates)")


@app.command()
def warmup(gpu: Annotated[Optional[str], typer.Option(
               help="the GPU to compile for (default: the one here): h200, h100, ...")] = None,
           arch: Annotated[Optional[str], typer.Option(
               help="its architecture, e.g. sm_90 (default: the GPU's)")] = None,
           jobs: Annotated[Optional[int], typer.Option(
               min=1, help="parallel NVRTC compiles (default: one per core)")] = None,
           bundle: Annotated[Optional[Path], typer.Option(
               help="also write the results into this folder as a bundle of prebuilt "
                    "cubins (packaging: src/sgemmlab/data/cubins)")] = None):
    """Compile every kernel variant dispatch can choose on a GPU (its table's entries, the
    defaults, the grid's candidates, the tensor rungs) into the cache ahead of the first
    calls, in parallel; no GPU needed."""
    import os
    import time

    from ..tune import bundle as bundle_mod

    name, arch, _ = gpu_and_arch(gpu, arch)
    todo = bundle_mod.variants(name, arch)
    t0 = time.time()
    done = bundle_mod.compile_all(todo, jobs or os.cpu_count() or 2)
    bad = [(v, r) for v, r in done if isinstance(r, Exception)]
    fresh = sum(1 for _, r in done if not isinstance(r, Exception) and not r.cached)
    typer.echo(f"{name} ({arch}): {len(done)} kernel variants, {fresh} compiled now, "
               f"{len(done) - fresh - len(bad)} already built, in {time.time() - t0:.0f} s")
    for (source, macros, _), exc in bad:
        typer.echo(f"  failed: {source} {registry.config_key(macros)}: "
                   f"{str(exc).splitlines()[0]}")
    if bad:
        fail(f"{len(bad)} variant(s) did not compile", 3)
    if bundle is not None:
        paths = bundle_mod.write_bundle(bundle, done)
        size = sum(p.stat().st_size for p in paths)
        typer.echo(f"bundle: {len(paths)} entries, {size / 2**20:.1f} MiB in {bundle}")
