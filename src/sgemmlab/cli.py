"""The `sgemmlab` command line (thin: every command calls into the library)."""

from __future__ import annotations

import re
import sys
from typing import Annotated, Optional

import typer

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


@app.command()
def tune(kernel: KernelOpt = None, size: SizeOpt = None, shape: ShapeOpt = None,
         write_defaults: Annotated[bool, typer.Option(help="store winners as this GPU's defaults")] = False,
         jobs: Annotated[int, typer.Option(help="parallel NVRTC compiles")] = 8,
         limit: Annotated[Optional[int], typer.Option(help="at most this many configurations per rung")] = None):
    """Search each rung's legal configurations on this GPU: compile, check, time."""
    from .tune import search

    todo = shapes_from(size, shape, [(4096, 4096, 4096)])
    rungs = rungs_from(kernel)
    require_gpu()
    require_torch()
    for r in rungs:
        path, best = search.tune_rung(r, todo, jobs=jobs, limit=limit,
                                      write_defaults=write_defaults)
        typer.echo(f"{r.label}: best {best}  ->  {path}")


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
