"""The commands that need no GPU: explain, build, inspect, report, readme, info — and the
predicted ladder that `sgemmlab ladder` shows where there is no GPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import (
    KernelOpt,
    app,
    echo,
    fail,
    gpu_and_arch,
    parse_shape,
    python_rungs_from,
    require_numba,
    rungs_from,
)


def predicted_ladder(shapes: list[tuple[int, int, int]], why: str,
                     rungs: list | None = None, wide: bool = False) -> None:
    """No GPU: say so once, then show the ladder `sgemmlab inspect` predicts for the H200
    (the rungs asked for), beside the committed measurements where there are some."""
    from ..anatomy import report
    from ..bench import results
    from ..runtime import occupancy

    g = occupancy.gpu("h200")
    import textwrap

    typer.echo(textwrap.fill(f"{why.rstrip('.')}: nothing was measured. Below, the {g.name} "
                             "ladder as `sgemmlab inspect` PREDICTS it.", 100) + "\n")
    for M, N, K in shapes:
        meas = results.ladder_records(g.name, (M, N, K))
        items = report.ladder(g, (M, N, K), measured=meas, rungs=rungs)
        title = f"{g.name}, {M}x{N}x{K}"
        if wide:
            typer.echo(report.ladder_text(items, title) + "\n")
            continue
        cublas = meas[0].get("cublas", {}).get("median_us") if meas else None
        typer.echo(report.brief_text(items, title, cublas, meas[1] if meas else None) + "\n")


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
            precision: Annotated[str, typer.Option(
                help="ieee (exact FP32), fp32_emulated or tf32x3 (FP32-accurate tensor "
                "cores: Ozaki scheme II, 3xTF32) or tf32 (NOT FP32)")] = "ieee",
            as_json: Annotated[bool, typer.Option("--json", help="the choice as JSON")] = False):
    """What `matmul` would run for an M×N×K product, and why: the tuning-table entry and its
    distance, or the heuristic's tiles, waves and occupancy; with --precision
    fp32_emulated, tf32x3 or tf32, whether the tensor cores serve it. Needs no GPU."""
    from .. import dispatch
    from ..runtime import occupancy

    try:
        name, count, note = dispatch.target_gpu(gpu, sms)
    except ValueError as exc:
        fail(str(exc), 2)
    try:
        arch = occupancy.gpu(name).arch
    except KeyError:
        arch = ""
    from .. import registry
    from ..plan import Gemm, staged_choice
    from ..runtime.limits import check_int32

    # a packed plan (x @ W^T at many rows; misaligned operands of a large product), decided
    # as make_plan would decide a call on contiguous operands (plan.staged_choice)
    contiguous = Gemm(m, n, k, batch, ta, tb, m if ta else k, k if tb else n, n, 0, 0, 0,
                      False, (m, n))  # (a batch never packs: its strides do not matter)

    def choose(g, is_aligned):
        return dispatch.choose(m, n, k, gpu_name=name, sm_count=count, trans_a=g.trans_a,
                               trans_b=g.trans_b, batch=batch, deterministic=deterministic,
                               aligned=is_aligned, precision=precision, arch=arch)

    try:
        check_int32(M=m, N=n, K=k, batch=batch)  # what the API refuses, in its words
        st, choice = staged_choice(contiguous, not unaligned, precision, choose,
                                   lambda c: registry.rung(c.rung))
    except (ValueError, OverflowError) as exc:  # DispatchError too
        fail(str(exc), 2)
    notes = st.notes() if st else []
    pack = bool(st and any(cp.slot == 1 for cp in st.copies))
    if as_json:
        typer.echo(json.dumps({"gpu": name, "sm_count": count, "M": m, "N": n, "K": k,
                               "layout": dispatch.layout_of(ta, tb), "batch": batch,
                               "packs_b": pack, "packs": notes, **choice.as_dict()},
                              indent=1))
        return
    if note:
        echo(f"note: {note}")
    req = dispatch.Request(m, n, k, name, count, ta, tb, batch, deterministic, not unaligned)
    echo(f"{req.text()}{', bit-reproducible' if deterministic else ''}"
               f"{', unaligned' if unaligned else ''}")
    for line in notes:
        echo(f"packs:   {line}")
    if notes:
        layout = dispatch.layout_of(st.gemm.trans_a, st.gemm.trans_b)
        echo(f"         then the product ({layout}) on the copies, one pass over each copied "
             "operand first:")
    echo(choice.text())


@app.command()
def build(kernel: KernelOpt = None,
          every: Annotated[bool, typer.Option(
              "--all-configs", help="every legal configuration, not just the defaults")] = False,
          gpu: Annotated[Optional[str], typer.Option(
              help="the GPU whose defaults to build (h200, h100, ...; default: the one here, "
                   "else the H200 of the shipped table)")] = None,
          arch: Annotated[Optional[str], typer.Option(
              help="the target, e.g. sm_90 (default: the GPU's)")] = None,
          jobs: int = 2):
    """Compile rungs with NVRTC (no GPU needed) and print their resource report: each at
    the configuration every other command runs on that GPU (its tuned default)."""
    from ..registry import config_key
    from ..tune.search import compile_many

    rungs = rungs_from(kernel)
    name, arch, note = gpu_and_arch(gpu, arch)
    echo(f"{name} ({arch}){': ' + note if note else ''}")
    items = [(r, c) for r in rungs for c in (r.configs() if every else [r.default(name)])]
    bad = 0
    for (r, cfg), res in compile_many(items, arch, jobs):
        if isinstance(res, Exception):
            bad += 1
            echo(f"{r.label:16s} {config_key(cfg)}: FAILED {str(res).splitlines()[0]}")
            continue
        flag = "  SPILLS" if res.spills else ""
        bad += bool(res.spills)
        echo(f"{r.label:16s} {config_key(cfg):60s} regs={res.registers:3d} "
             f"smem={res.smem_bytes:6d}B stack={res.stack_bytes}{flag}")
    if bad:
        fail(f"{bad} configuration(s) failed to compile or spilled", 2)


@app.command()
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
    track: Annotated[str, typer.Option(
        help="cuda, or numba: each Python rung's machine code beside its CUDA twin's "
             "(RUNG then names Python rungs 1-7)")] = "cuda",
    wide: Annotated[bool, typer.Option(
        help="with --all: every column of the bill (wider than 100 columns), not the "
             "summary")] = False,
):
    """The bill, resources, occupancy, SASS mix and predicted bound of a rung (no GPU
    needed): computed from the registry, the kernel's index arithmetic and its cubin."""
    from .. import registry
    from ..anatomy import report
    from ..bench import results
    from ..runtime import occupancy

    try:
        g = occupancy.gpu(gpu)
    except KeyError as exc:
        raise typer.BadParameter(exc.args[0], param_hint="--gpu") from None
    M, N, K = parse_shape(shape)
    if not all_rungs and kernel is None:
        raise typer.BadParameter("give a RUNG or --all")
    if track == "numba":
        _inspect_track(None if all_rungs else kernel, g, (M, N, K), measured, as_json,
                       markdown)
        return
    if track != "cuda":
        fail(f"--track must be cuda or numba, not {track!r}", 2)
    try:
        meas = (results.records_from(measured, (M, N, K)) if measured
                else results.ladder_records(g.name, (M, N, K)))
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
    elif all_rungs and not wide:
        cublas = meas[0].get("cublas", {}).get("median_us") if meas else None
        typer.echo(report.brief_text(items, f"{g.name}, {M}x{N}x{K}: the ladder "
                                            f"({report.PREDICTED_LABEL})", cublas,
                                     meas[1] if meas else None))
    elif all_rungs:
        typer.echo(report.ladder_text(items, f"{g.name}, {M}x{N}x{K}: the ladder "
                                             f"({report.PREDICTED_LABEL})"))
    else:
        echo(report.rung_text(items[0]))
    if markdown is not None:
        from ..runtime.files import write_atomic

        if not all_rungs:
            fail("--markdown goes with --all", 2)
        seed_items = report.ladder(g, (M, N, K), True, None)
        cmd = (f"sgemmlab inspect --all --shape {M},{N},{K} --gpu {g.slug} "
               f"--markdown {markdown}")
        write_atomic(markdown, report.ladder_markdown(
            items, seed_items, f"sgemmlab inspect: {g.name}, {M}×{N}×{K}", cmd) + "\n")
        typer.echo(f"markdown: {markdown}")


def _inspect_track(kernel: str | None, g, shape, measured: Path | None, as_json: bool,
                   markdown: Path | None) -> None:
    """`inspect --track numba`: Python rungs beside their twins (all, or the one named)."""
    from ..anatomy import pytrack as track_mod
    from ..bench import results
    from ..runtime.files import write_atomic

    require_numba()
    pys = python_rungs_from([kernel] if kernel else None)
    try:
        meas = results.track_records(g.name, shape, measured)
    except (OSError, ValueError) as exc:
        fail(f"--measured: {exc}")
    try:
        items = track_mod.track(g, meas, pys)
    except ValueError as exc:
        fail(str(exc), 2)
    except RuntimeError as exc:  # pytrack.build.NoToolchain: no NVVM or nvJitLink here
        fail(str(exc))
    M, N, K = shape
    title = f"{g.name}, {M}x{N}x{K}: the Python track beside its CUDA twins"
    if as_json:
        typer.echo(json.dumps(items if kernel is None else items[0], indent=1))
    else:
        typer.echo(track_mod.text(items, title))
    if markdown is not None:
        cmd = (f"sgemmlab inspect --track numba --all --shape {M},{N},{K} --gpu {g.slug} "
               f"--markdown {markdown}")
        write_atomic(markdown, track_mod.markdown(items, f"sgemmlab inspect --track numba: "
                                                         f"{g.name}, {M}×{N}×{K}", cmd))
        typer.echo(f"markdown: {markdown}")


@app.command()
def report(files: Annotated[list[Path], typer.Argument(
               metavar="RESULTS...", help="results JSON files (bench, ladder, ceilings)")],
           out: Annotated[Optional[Path], typer.Option(
               help="folder for report.md and the charts (default: beside the first file)")]
           = None):
    """Markdown tables and charts (PNG, SVG) from results files."""
    from ..bench import report as report_mod

    try:
        text, written = report_mod.build(files, out)
    except ValueError as exc:
        fail(str(exc))
    typer.echo(text)
    typer.echo(f"report: {written[0]}  ({len(written) - 1} charts beside it)")


@app.command()
def readme(paths: Annotated[list[str], typer.Argument(help="ladder results JSON files")],
           file: Annotated[Optional[list[str]], typer.Option(
               help="the Markdown files whose generated blocks to update (repeatable; "
               "default README.md, docs/results.md and docs/lab.md)")] = None,
           headers: Annotated[bool, typer.Option(
               help="also fill each rung header's <measured> block")] = True,
           only_headers: Annotated[bool, typer.Option(
               "--only-headers", help="fill the rung headers and leave the Markdown file "
               "alone (from a bench file, say)")] = False,
           shape: Annotated[Optional[list[str]], typer.Option(
               help="M,N,K: the headers quote only these shapes (repeatable; default all)")]
           = None):
    """Regenerate the generated blocks of README.md and docs/results.md (and the rung
    headers) from results."""
    from ..bench.readme import DOCUMENTS, update, update_headers

    files = [Path(p) for p in paths]
    try:
        shapes = {parse_shape(s) for s in shape or []} or None
    except ValueError as exc:
        fail(f"--shape: {exc}", 2)
    try:
        documents = [Path(f) for f in file] if file else list(DOCUMENTS)
        if not only_headers:
            update(documents, files)
        if headers or only_headers:
            done = update_headers(files, shapes)
            typer.echo(f"rung headers updated: {', '.join(done) or 'none'}")
    except (OSError, ValueError, KeyError) as exc:
        fail(str(exc))
    if not only_headers:
        typer.echo(f"updated {', '.join(map(str, documents))}")


@app.command()
def visualize(
        kernels: Annotated[Optional[list[str]], typer.Argument(
            metavar="[RUNG...]", help="rungs to draw (default: the ladder, 1-14)")] = None,
        out: Annotated[Path, typer.Option(help="the folder the site is written to")] = Path(
            "sgemmlab-visualizer"),
        shape: Annotated[Optional[list[str]], typer.Option(
            help="M,N,K: one more shape for rung 14's Stream-K view (repeatable)")] = None,
        open_: Annotated[bool, typer.Option("--open", help="open the page in a browser")] = False):
    """Write the visualizer, a static site (HTML, JS and the data it draws: no network, no
    server; it opens from file://): each rung's threads, memory sectors, shared-memory banks
    and registers, replayed from the kernel's own index arithmetic, beside the H200's
    measurements. Needs no GPU."""
    import webbrowser

    from .. import registry
    from ..anatomy import visual
    from ..bench.results import visualizer_measurements

    ladder = {r.label for r in registry.RUNGS}
    rungs = rungs_from(kernels) if kernels else list(registry.RUNGS)
    if bad := [r.label for r in rungs if r.label not in ladder]:
        fail(f"{', '.join(bad)}: no per-thread replay yet (the visualizer draws rungs 1-14); "
             "their bills are in their headers", 2)
    extra = tuple(parse_shape(s) for s in shape or [])
    page = visual.write_site(out, rungs, visualizer_measurements("nvidia-h200"),
                             streamk_shapes=visual.STREAMK_SHAPES + extra)
    typer.echo(f"wrote {page} ({len(rungs)} rungs)")
    if open_:
        webbrowser.open(page.resolve().as_uri())


def rung_tracks():
    """Every rung the library runs, by track, with what picks it: (heading, rungs). The
    same lookup `rung()` serves (a test holds the two equal), so what `explain` chooses and
    `-k` accepts is listed here."""
    from .. import registry

    post = ", ".join(registry.POST_ARCHS)
    stand_in = ", ".join(str(n) for n in registry.STAND_INS)
    return [
        ("the ladder (FP32; dispatch picks among these and the family)", registry.RUNGS),
        ("the family: memory-bound and small products (FP32)", registry.FAMILY),
        ("the tensor cores (Hopper; --precision fp32_emulated, tf32x3 or tf32 only; TF32 is "
         "not FP32)",
         registry.TENSOR),
        ("history (run by name with -k; dispatch never picks it)", registry.HISTORY),
        (f"post-compile: 14 and 13 after a pass over the cubin (FP32, {post} only; dispatch "
         f"runs {stand_in} for 14 and 13, the others where its table names them)",
         registry.ORDERED),
    ]


@app.command()
def index():
    """Rewrite results/index.json: every results file with its kind, stamp, date, commit,
    GPU and what it measured (run it before committing new results; a test checks it)."""
    from ..bench import index as index_mod
    from ..bench.results import results_root

    root = results_root()
    path = index_mod.write(root)
    typer.echo(f"{path}: {len(index_mod.read(root)['files'])} files")


@app.command()
def info():
    """What sgemmlab sees: the GPU (if any), the compiler, the cache, the rungs."""
    import textwrap

    from .. import registry
    from ..errors import NoGPUError
    from ..runtime.compiler import bundle_dir, cache_dir, cache_refusal, nvrtc_version
    from ..runtime.device import gpu_info

    try:
        g = gpu_info()
        typer.echo(f"GPU: {g.name} (sm_{g.compute_capability[0]}{g.compute_capability[1]}, "
                   f"{g.sm_count} SMs, L2 {g.l2_bytes >> 20} MiB)")
    except NoGPUError as exc:
        typer.echo(textwrap.fill(f"GPU: none ({exc})", 100))

    where = bundle_dir()
    shipped = len(list(where.glob("*.bin"))) if where and where.is_dir() else 0
    refused = cache_refusal()
    unused = f" (not used: {refused[0]} {refused[1]})" if refused else ""
    typer.echo(f"NVRTC {nvrtc_version()}; cubin cache: {cache_dir()}{unused}; prebuilt cubins "
               f"in the package: {shipped}")
    for title, rungs in rung_tracks():
        echo(f"{title}:")
        for r in rungs:
            n = sum(1 for _ in r.configs())
            typer.echo(f"  {r.number:2d} {r.name:16s}{n:5d} configs  "
                       f"{textwrap.shorten(r.title, 64, placeholder='...')}")
    typer.echo("the Python track (Numba, extra [numba]; run with --track numba):")
    for p in registry.PYTHON:
        typer.echo(f"  py{p.number} {p.label:18s} mirrors {p.rung.label}")
