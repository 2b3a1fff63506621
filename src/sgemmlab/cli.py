"""The `sgemmlab` command line (thin: every command calls into the library)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from . import registry

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="sgemmlab: FP32 GEMM on NVIDIA GPUs, and the ladder that explains it.")


def fail(message: str, code: int = 1) -> None:
    """One plain sentence on stderr and a non-zero exit: no traceback."""
    typer.secho(message, err=True, fg=typer.colors.RED)
    raise typer.Exit(code)


def parse_shape(text: str) -> tuple[int, int, int]:
    parts = [p for p in re.split(r"[,x×\s]+", text.strip()) if p]
    if len(parts) != 3 or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise typer.BadParameter(f"{text!r} is not a shape: expected M,N,K with each >= 1")
    return tuple(int(p) for p in parts)  # type: ignore[return-value]


def shapes_from(sizes: list[int] | None, shapes: list[str] | None,
                default: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    out = [(s, s, s) for s in sizes or []] + [parse_shape(s) for s in shapes or []]
    for s in sizes or []:
        if s < 1:
            raise typer.BadParameter(f"--size {s}: sizes must be >= 1")
    return out or default


def rungs_from(kernels: list[str] | None):
    """Rungs named on the command line (numbers, names, 'all', 'best'); all by default."""
    from .bench.suites import rungs_for

    try:
        return rungs_for(kernels or ["all"])
    except KeyError as exc:
        raise typer.BadParameter(exc.args[0]) from None


def require_torch() -> None:
    """Measuring needs torch (cuBLAS, CUDA events, the L2 flush): say so in one sentence."""
    try:
        import torch  # noqa: F401
    except ImportError:
        fail("this command needs torch (cuBLAS, CUDA events and the L2 flush go through "
             "it): pip install 'sgemmlab[torch]'")


def require_gpu():
    from .runtime.device import NoGPUError, gpu_info

    try:
        return gpu_info()
    except NoGPUError as exc:
        fail(str(exc))


SizeOpt = Annotated[Optional[list[int]], typer.Option("--size", help="square size N (N×N×N); repeatable")]
ShapeOpt = Annotated[Optional[list[str]], typer.Option("--shape", help="M,N,K; repeatable")]
KernelOpt = Annotated[Optional[list[str]], typer.Option("--kernel", "-k", help="rung number or name; repeatable (default: all)")]


@app.command()
def ladder(size: SizeOpt = None, shape: ShapeOpt = None, kernel: KernelOpt = None,
           confirm: Annotated[bool, typer.Option(help="40 launches x 15 rounds")] = False,
           plot: Annotated[bool, typer.Option(help="write a bar chart PNG")] = True,
           quiet: Annotated[bool, typer.Option(help="no progress display")] = False):
    """Check every rung against float64, then time it against cuBLAS (paired, same run)."""
    from .bench import ladder as ladder_mod
    from .bench.measure import CONFIRM, QUICK
    from .bench.plots import ladder_chart
    from .bench.runner import BaselineError
    from .bench.tables import print_scoreboard

    todo = shapes_from(size, shape, [(4096, 4096, 4096)])
    rungs = rungs_from(kernel)
    from .runtime.device import NoGPUError, gpu_info

    try:
        gpu = gpu_info()
    except NoGPUError as exc:
        _predicted_ladder(todo, str(exc))
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


def _predicted_ladder(shapes: list[tuple[int, int, int]], why: str) -> None:
    """No GPU: show the ladder `sgemmlab inspect --all` predicts for the H200 instead."""
    from .inspect import occupancy, report

    g = occupancy.gpu("h200")
    typer.echo(f"No GPU here ({why.rstrip('.')}); showing the ladder PREDICTED for the "
               f"{g.name}, not measured (no GPU here).\n")
    for M, N, K in shapes:
        items = report.ladder(g, (M, N, K), measured=report.find_measured(g, (M, N, K)))
        typer.echo(report.ladder_text(
            items, f"{g.name}, {M}x{N}x{K}: predicted, not measured (no GPU here)") + "\n")


def _split(values: list[str] | None) -> list[str]:
    """Repeated options and comma-separated lists alike: ['10,13', '14'] -> ['10', '13', '14']."""
    return [v.strip() for text in values or [] for v in text.split(",") if v.strip()]


def _extra_configs(texts: list[str]):
    """--config RUNG:NAME=V,... -> [(rung, config)] (typer.BadParameter when malformed)."""
    from . import registry

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


@app.command()
def tune(kernel: Annotated[Optional[list[str]], typer.Option(
             "--kernel", "-k", "--rungs", help="rung numbers or names, comma-separated or "
             "repeated (default: all for a search; rungs 10 and up for --table)")] = None,
         size: SizeOpt = None, shape: ShapeOpt = None,
         suite: Annotated[Optional[list[str]], typer.Option(
             "--suite", "-s", help="square, ragged, skinny or small; comma-separated or "
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
         write_defaults: Annotated[bool, typer.Option(help="store winners as this GPU's defaults")] = False,
         jobs: Annotated[Optional[int], typer.Option(help="parallel NVRTC compiles (default: one per core)")] = None,
         limit: Annotated[Optional[int], typer.Option(help="at most this many configurations per rung")] = None,
         where: Annotated[Optional[str], typer.Option(
             help="search only configurations with these values, NAME=VALUE,... "
             "(e.g. SPLIT=0,FIXUP=1)")] = None,
         quiet: Annotated[bool, typer.Option(help="no progress display")] = False):
    """Search each rung's legal configurations on this GPU (compile, check, time), or build
    the per-shape dispatch table (--table). Interrupted runs resume."""
    from .bench import suites

    try:
        names = _split(suite)
        picked = [(s, s, s) for s in size or []] + [parse_shape(x) for x in shape or []]
        if any(s < 1 for s in size or []):
            raise typer.BadParameter("--size: sizes must be >= 1")
        todo = suites.shapes_for(names or (TUNE_TABLE_SUITES if table else []), picked) \
            if names or picked or table else [(4096, 4096, 4096)]
        rungs = suites.rungs_for(_split(kernel)) if kernel else None
        layouts = [x.upper() for x in _split(layout)] or ["NN"]
        extra = _extra_configs(config or [])
    except typer.BadParameter as exc:
        fail(exc.message)
    except KeyError as exc:
        fail(exc.args[0])
    if not table and (layout or config):
        fail("--layout and --config apply to --table")
    if table and (write_defaults or limit is not None or where):
        fail("--write-defaults, --limit and --where apply to the configuration search, "
             "not --table")
    try:
        fixed = registry.parse_config(where) if where else None
    except ValueError as exc:
        fail(f"--where: {exc}")
    gpu = require_gpu()
    if export is not None and not table:
        from .tune.table import export_table

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
    from .tune import search

    for r in rungs or rungs_from(None):
        try:
            path, best = search.tune_rung(r, todo, jobs=jobs, limit=limit,
                                          write_defaults=write_defaults, resume=resume,
                                          where=fixed, echo=typer.echo)
        except ValueError as exc:
            fail(str(exc))
        typer.echo(f"{r.label}: best {best}  ->  {path}")


def _tune_table(todo, rungs, layouts, extra, names, picked, jobs, resume, export, quiet):
    from .bench.runner import BaselineError
    from .registry import config_key
    from .tune import table as table_mod

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


@app.command()
def explain(m: Annotated[int, typer.Argument(metavar="M", min=1)],
            n: Annotated[int, typer.Argument(metavar="N", min=1)],
            k: Annotated[int, typer.Argument(metavar="K", min=1)],
            ta: Annotated[bool, typer.Option("--ta", help="A is column-major")] = False,
            tb: Annotated[bool, typer.Option("--tb", help="B is column-major")] = False,
            batch: Annotated[int, typer.Option(min=1, help="products in one call")] = 1,
            deterministic: Annotated[bool, typer.Option(
                help="bit-reproducible results only (no atomic fix-up)")] = False,
            unaligned: Annotated[bool, typer.Option(
                help="operands not 16-byte aligned or leading dimensions not multiples "
                "of 4")] = False,
            gpu: Annotated[Optional[str], typer.Option(
                help="explain for this GPU (h200, 'NVIDIA H100 80GB HBM3', ...) instead of "
                "the one here")] = None,
            sms: Annotated[Optional[int], typer.Option(
                min=1, help="its SM count (known GPUs have theirs)")] = None,
            as_json: Annotated[bool, typer.Option("--json", help="the choice as JSON")] = False):
    """What `matmul` would run for an M×N×K product, and why: the tuning-table entry and its
    distance, or the heuristic's tiles, waves and occupancy. Needs no GPU."""
    import json

    from . import dispatch

    name, count, note = _explain_gpu(gpu, sms)
    try:
        choice = dispatch.choose(m, n, k, gpu_name=name, sm_count=count, trans_a=ta,
                                 trans_b=tb, batch=batch, deterministic=deterministic,
                                 aligned=not unaligned)
    except ValueError as exc:  # DispatchError too
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps({"gpu": name, "sm_count": count, "M": m, "N": n, "K": k,
                               "layout": dispatch.layout_of(ta, tb), "batch": batch,
                               **choice.as_dict()}, indent=1))
        return
    if note:
        typer.echo(f"note: {note}")
    req = dispatch.Request(m, n, k, name, count, ta, tb, batch, deterministic, not unaligned)
    typer.echo(f"{req.text()}{', bit-reproducible' if deterministic else ''}"
               f"{', unaligned' if unaligned else ''}")
    typer.echo(choice.text())


def _explain_gpu(name: str | None, sms: int | None) -> tuple[str, int, str]:
    """(GPU name, SM count, note) for `explain`: --gpu, else the GPU here, else the GPU of
    the shipped table."""
    from . import dispatch
    from .inspect import occupancy
    from .runtime.device import NoGPUError, gpu_info

    note = ""
    if name is None:
        try:
            g = gpu_info()
            return g.name, sms or g.sm_count, ""
        except NoGPUError:
            name = dispatch.SHIPPED_GPU
            note = (f"no GPU here: explaining for the {name}, the GPU of the shipped table "
                    "(--gpu NAME for another)")
    try:
        known = occupancy.gpu(name)
        return known.name, sms or known.sms, note
    except KeyError:
        pass
    if sms is None:
        table = dispatch.load_table(name)
        if table is None or not table.sm_count:
            fail(f"unknown GPU {name!r} and no tuning table for it: give its SM count with "
                 f"--sms (known GPUs: {', '.join(occupancy.GPUS)})")
        sms = table.sm_count
    return name, sms, note


@app.command()
def build(kernel: KernelOpt = None,
          every: Annotated[bool, typer.Option("--all-configs", help="every legal configuration, not just the defaults")] = False,
          arch: str = "sm_90", jobs: int = 2):
    """Compile rungs with NVRTC (no GPU needed) and print their resource report."""
    from .tune.search import compile_many

    rungs = rungs_from(kernel)
    items = [(r, c) for r in rungs for c in (r.configs() if every else [r.default()])]
    bad = 0
    for (r, cfg), res in compile_many(items, arch, jobs):
        from .registry import config_key

        if isinstance(res, Exception):
            bad += 1
            typer.echo(f"{r.label:16s} {config_key(cfg)}: FAILED {str(res).splitlines()[0]}")
            continue
        flag = "  SPILLS" if res.spills else ""
        bad += bool(res.spills)
        typer.echo(f"{r.label:16s} {config_key(cfg):60s} regs={res.registers:3d} "
                   f"smem={res.smem_bytes:6d}B stack={res.stack_bytes}{flag}")
    if bad:
        fail(f"{bad} configuration(s) failed to compile or spilled", 2)


@app.command()
def run(kernel: Annotated[str, typer.Option("--kernel", "-k", help="rung number or name")] = "warptiling",
        size: SizeOpt = None, shape: ShapeOpt = None,
        config: Annotated[Optional[str], typer.Option(help="e.g. 'BM=128,BN=128,...' (default: tuned)")] = None,
        alpha: float = 1.0, beta: float = 0.0,
        repeat: Annotated[int, typer.Option(help="launches after the checked one")] = 0):
    """Run one rung once and check it against float64: the thing to put under ncu or
    compute-sanitizer (e.g. `ncu -k sgemm sgemmlab run -k 6 --size 4096`)."""
    from . import api, registry
    from .bench.check import check_gemm

    r = rungs_from([kernel])[0]
    gpu = require_gpu()
    require_torch()
    try:
        cfg = registry.parse_config(config) if config else r.default(gpu.name)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if problems := r.violations(cfg):
        fail(f"illegal configuration for {r.label}: " + "; ".join(problems), 2)

    def gemm(A, B, C, a, b):
        for _ in range(1 + repeat):
            api.sgemm(A, B, C, alpha=a, beta=b, out=C, kernel=r.label, config=cfg)

    for M, N, K in shapes_from(size, shape, [(1024, 1024, 1024)]):
        res = check_gemm(gemm, M, N, K, alpha=alpha, beta=beta) if repeat == 0 else None
        if res is None:  # repeated in-place updates with beta != 0 change C: just run
            import torch

            A, B = torch.rand(M, K, device="cuda"), torch.rand(K, N, device="cuda")
            C = torch.rand(M, N, device="cuda")
            gemm(A, B, C, alpha, beta)
            torch.cuda.synchronize()
            typer.echo(f"{r.label} {registry.config_key(cfg)} {M}x{N}x{K}: ran {1 + repeat}x")
            continue
        verdict = "ok" if res.ok else f"FAILED: {res.reason}"
        typer.echo(f"{r.label} {registry.config_key(cfg)} {M}x{N}x{K}: error {res.error:.2e} "
                   f"(bound {res.bound:.1e}) {verdict}")
        if not res.ok:
            raise typer.Exit(3)


@app.command()
def readme(paths: Annotated[list[str], typer.Argument(help="ladder results JSON files")],
           file: Annotated[str, typer.Option(help="the Markdown file to update")] = "README.md",
           headers: Annotated[bool, typer.Option(help="also fill each rung header's <measured> block")] = True):
    """Regenerate the scoreboard block of README.md (and the rung headers) from results."""
    from pathlib import Path

    from .bench.readme import update, update_headers

    files = [Path(p) for p in paths]
    try:
        update(Path(file), files)
        if headers:
            typer.echo(f"rung headers updated: {', '.join(update_headers(files)) or 'none'}")
    except (OSError, ValueError, KeyError) as exc:
        fail(str(exc))
    typer.echo(f"updated {file}")


@app.command()
def overhead(size: Annotated[int, typer.Option(min=1, help="square size N (N×N×N)")] = 256,
             calls: Annotated[int, typer.Option(min=1, help="calls per timed loop")] = 200,
             repeats: Annotated[int, typer.Option(min=1, help="timed loops per path")] = 15):
    """Host time per call of sgemmlab.matmul against torch.matmul (budget: 1.5x at 256³)."""
    from . import overhead as oh

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


@app.command()
def info():
    """What sgemmlab sees: the GPU (if any), the compiler, the cache, the rungs."""
    from . import registry
    from .runtime.compiler import cache_dir, nvrtc_version
    from .runtime.device import NoGPUError, gpu_info

    try:
        g = gpu_info()
        typer.echo(f"GPU: {g.name} (sm_{g.compute_capability[0]}{g.compute_capability[1]}, "
                   f"{g.sm_count} SMs, L2 {g.l2_bytes >> 20} MiB)")
    except NoGPUError as exc:
        typer.echo(f"GPU: none ({exc})")
    typer.echo(f"NVRTC {nvrtc_version()}; cubin cache: {cache_dir()}")
    for r in registry.RUNGS:
        typer.echo(f"  {r.number:2d} {r.name:12s} {r.title}  "
                   f"[{sum(1 for _ in r.configs())} legal configurations]")


def _register_more() -> None:
    """Commands that live beside the code they drive (bench, ceilings, report, inspect)."""
    from .bench.commands import register
    from .inspect.commands import register as register_inspect

    register(app)
    register_inspect(app)


_register_more()


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
