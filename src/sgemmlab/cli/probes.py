"""The commands that put one thing under a tool or probe the GPU and the library: run (one
rung once, for ncu, compute-sanitizer or a debugger; the Python track in Numba's simulator),
profile (Nsight Compute), ceilings, operands, overhead, firstcall and fuzz. All but
`run --simulate` and `operands --build/--table` need a GPU.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import (
    ShapeOpt,
    SizeOpt,
    app,
    echo,
    fail,
    require_gpu,
    require_torch,
    rungs_from,
    shapes_from,
)


@app.command()
def run(kernel: Annotated[str, typer.Option(
            "--kernel", "-k", help="rung number or name")] = "warptiling",
        size: SizeOpt = None, shape: ShapeOpt = None,
        config: Annotated[Optional[str], typer.Option(
            help="e.g. 'BM=128,BN=128,...' (default: tuned)")] = None,
        alpha: float = 1.0, beta: float = 0.0,
        repeat: Annotated[int, typer.Option(help="launches after the checked one")] = 0,
        track: Annotated[str, typer.Option(
            help="cuda (the ladder's CUDA C++ rungs) or numba (the Python track, rungs "
                 "1-7)")] = "cuda",
        simulate: Annotated[bool, typer.Option(
            help="numba track: run in Numba's CUDA simulator, on the CPU (small shapes: "
                 "every thread is a Python thread)")] = False,
        long: Annotated[bool, typer.Option(
            "--long", help="with --simulate: run even where the estimate is over "
                           "15 minutes")] = False):
    """Run one rung once and check it against float64: the thing to put under ncu or
    compute-sanitizer (e.g. `ncu -k sgemm sgemmlab run -k 6 --size 4096`), or, with
    `--track numba --simulate`, to step through in a debugger on a machine without a GPU."""
    from .. import registry
    from ..bench.probes.once import run_once

    if track not in ("cuda", "numba"):
        fail(f"--track must be cuda or numba, not {track!r}", 2)
    if track == "numba":
        _run_numba(kernel, size, shape, config, alpha, beta, simulate, long)
        return
    if simulate:
        fail("--simulate runs the Python track: add --track numba", 2)

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


def _run_numba(kernel: str, size, shape, config, alpha: float, beta: float,
               simulate: bool, long: bool = False) -> None:
    """`sgemmlab run --track numba`: one Python rung on fresh inputs, checked against
    float64 (numpy), on the GPU or in Numba's simulator (which must be switched on before
    numba.cuda is first imported: this sets NUMBA_ENABLE_CUDASIM first). In the simulator
    a launch is estimated first: one that takes long is announced and watched, one over
    the limit refused unless `long`."""
    import os

    import numpy as np

    from .. import registry
    from ..bench.check import error_bound, relative_error

    if simulate:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    else:
        require_gpu()
    try:
        from .. import pytrack
    except ImportError as exc:
        fail(str(exc))
    try:
        mod = pytrack.rung(int(kernel))
    except (ValueError, KeyError, IndexError):
        fail(f"--kernel: the Python track has rungs 1-{len(pytrack.RUNGS)}, not {kernel!r}", 2)
    try:
        cfg = registry.parse_config(config) if config else (mod.SIM_CONFIG if simulate
                                                            else None)
    except ValueError as exc:
        fail(f"--config: {exc}", 2)
    rng = np.random.default_rng(0)
    default = (31, 33, 37) if simulate else (1024, 1024, 1024)
    watch = contextlib.nullcontext
    for M, N, K in shapes_from(size, shape, [default]):
        if simulate:
            watch = _simulation(int(kernel), mod, cfg, (M, N, K), long)
        A = rng.uniform(-1, 1, (M, K)).astype(np.float32)
        B = rng.uniform(-1, 1, (K, N)).astype(np.float32)
        C0 = rng.uniform(-1, 1, (M, N)).astype(np.float32)
        C = C0.copy() if beta != 0 else np.full((M, N), np.nan, np.float32)
        try:
            with watch():
                mod.launch(A, B, C, alpha, beta, cfg)
        except ValueError as exc:
            fail(str(exc), 2)
        ab = alpha * (A.astype(np.float64) @ B.astype(np.float64))
        ref = ab + beta * C0.astype(np.float64) if beta != 0 else ab
        err = relative_error(C, ref, alpha_ab=ab, beta_c=beta * C0 if beta != 0 else None)
        ok = err <= error_bound(K)
        where = "simulator" if simulate else "GPU"
        typer.echo(f"numba rung {mod.NAME} (CUDA twin {mod.TWIN}) {M}x{N}x{K} on the {where}: "
                   f"error {err:.2e} (bound {error_bound(K):.1e}) {'ok' if ok else 'FAILED'}")
        if not ok:
            raise typer.Exit(3)


def _simulation(number: int, mod, cfg, shape, long: bool):
    """The simulator's estimate for one launch: refused over the limit (unless `long`),
    announced over the warning threshold; what to run the launch under (its progress
    lines, or nothing for a quick one)."""
    from ..pytrack import simulator
    from ..pytrack.common import checked

    try:
        est = simulator.estimate(number, mod.RUNG, checked(mod.RUNG, cfg), shape)
    except ValueError as exc:
        fail(str(exc), 2)
    if est.refused() and not long:
        fail(f"{est.text()}: refused above {simulator.LIMIT_S / 60:.0f} min; pass --long to "
             "run it anyway", 2)
    if not est.warns():
        return contextlib.nullcontext
    echo(f"note: {est.text()}; progress every {simulator.EVERY_S:.0f} s (Ctrl-C stops it)")
    return lambda: simulator.progress(est.blocks, echo)


@app.command()
def profile(kernel: Annotated[str, typer.Option("--kernel", "-k", help="rung number or name")]
            = "14",
            size: Annotated[int, typer.Option(min=1, help="square size N (N×N×N)")] = 4096,
            config: Annotated[Optional[str], typer.Option(
                help="e.g. 'BM=128,...' (default: the GPU's tuned one)")] = None):
    """Nsight Compute on a rung and on cuBLAS at the same shape: issue, FMA pipe, warps per
    scheduler, stall reasons (and where the rung's warps stall), bank conflicts, side by
    side. Needs ncu; writes results/<gpu>/profile/*.json and the digest beside it."""
    from ..bench import results
    from ..bench.probes import profile as prof

    r = rungs_from([kernel])[0]
    try:
        prof.find_ncu()
    except prof.NoProfiler as exc:
        fail(str(exc))
    gpu = require_gpu()
    stamp = results.stamp()
    name = f"profile-{r.label}-{size}x{size}x{size}-{stamp}"
    digest = results.place(gpu.slug, f"{name}.txt")
    try:
        mine, theirs = prof.profile(r.label, (size, size, size),
                                    results.sibling(digest, "-reports"),
                                    config)
    except RuntimeError as exc:
        fail(str(exc), 3)
    text = prof.digest(mine, theirs)
    run = results.new_run("profile", gpu, {"tool": "ncu", "clock_control": "none"})
    run["records"] = [mine.to_dict(), theirs.to_dict()]
    run["shape"] = [size, size, size]
    path = results.write(run, gpu.slug, name)
    digest.write_text(f"{gpu.name}, {size}³: {r.label} vs cuBLAS (ncu)\n\n"
                                     + text + "\n")
    typer.echo(text)
    typer.echo(f"results: {path}")


@app.command()
def firstcall(limit: Annotated[Optional[int], typer.Option(
                  min=1, help="only the table's first LIMIT problems")] = None):
    """The first call's time at every problem of this GPU's shipped table, in a fresh
    process with an empty compile cache (only the package's prebuilt cubins): target under
    50 ms each. Writes results/<gpu>/host/firstcall-*.json."""
    from ..bench import firstcall as fc
    from ..bench import results

    gpu = require_gpu()
    require_torch()
    try:
        todo = fc.problems(gpu.name, limit)
        got = fc.measure(todo)
    except (ValueError, RuntimeError) as exc:
        fail(str(exc), 3)
    recs = got["records"]
    run = results.new_run("firstcall", gpu, {"fresh_process": True, "empty_cache": True,
                                             "out_preallocated": True})
    run["records"] = recs
    run["summary"] = s = fc.summary(recs)
    s["torch_first_ms"] = got["torch_first_ms"]
    s["import_after_torch_ms"] = got.get("import_after_torch_ms")
    imports = fc.import_times()
    s["import_ms"] = {"runs": imports, "median": sorted(imports)[len(imports) // 2],
                      "target": fc.IMPORT_TARGET_MS}
    s["libraries_ms"] = fc.library_imports()
    s["sgemmlab_first"] = got["sgemmlab_first"]
    from ..runtime.compiler import bundle_dir

    bundle = bundle_dir()
    s["bundle"] = bool(bundle and bundle.is_dir() and any(bundle.iterdir()))
    path = results.write(run, gpu.slug, f"firstcall-{results.stamp()}")
    w = s["worst"]
    typer.echo(f"{s['problems']} problems, first call median {s['median_first_ms']:.2f} ms, "
               f"max {s['max_first_ms']:.2f} ms ({w['M']}x{w['N']}x{w['K']} {w['layout']} "
               f"batch {w['batch']}); {s['compiled']} compiled; {s['over_target']} at or "
               f"over {s['target_ms']:.0f} ms; torch.matmul's first call "
               f"{s['torch_first_ms']:.1f} ms; garbage collection inside first calls "
               f"{s['gc_ms_in_first_calls']:.1f} ms (max without it "
               f"{s['max_first_ms_without_gc']:.2f} ms)")
    typer.echo(f"import sgemmlab: median {s['import_ms']['median']:.1f} ms in a fresh process "
               f"(target {fc.IMPORT_TARGET_MS:.0f} ms); after torch "
               f"{s['import_after_torch_ms'] or float('nan'):.1f} ms; the process's first "
               f"product {recs[0]['first_ms']:.1f} ms after it, loading "
               f"{', '.join(s['first_product_loaded']) or 'none'} of "
               f"{', '.join(fc.LIBRARIES)}")
    early = s["sgemmlab_first"]
    typer.echo(f"imported before torch: import {early['import_ms']:.1f} ms, the first product "
               f"{early['first_ms']:.1f} ms after it")
    typer.echo("those libraries' imports after torch: " + ", ".join(
        f"{k} {v:.1f} ms" for k, v in s["libraries_ms"].items())
        + ("" if s["bundle"] else "; no bundle of prebuilt cubins in the package"))
    typer.echo(f"results: {path}")
    slow = s["over_target"] + (early["first_ms"] >= fc.TARGET_MS)
    if slow:
        fail(f"{slow} first call(s) took {s['target_ms']:.0f} ms or more", 3)


@app.command()
def fuzz(count: Annotated[int, typer.Option(min=1, help="generated products to check")]
         = 10000,
         seed: Annotated[int, typer.Option(help="the draw's seed: the same seed, the same "
                                                "products")] = 0,
         regressions: Annotated[Optional[Path], typer.Option(
             help="the JSON list a minimal failure is appended to (default: "
                  "tests/data/fuzz_regressions.json under the current directory, in the "
                  "checkout the file the GPU tests replay)")] = None):
    """Products drawn by hypothesis (shapes 1-4096 and K to 65536, layouts, padded and
    misaligned operands, batches and broadcasts, alpha/beta from 0, 1, negative, subnormal,
    NaN and Inf, precisions, named kernels), each checked against float64; the first
    failure is shrunk to a minimal case. Writes results/<gpu>/accuracy/fuzz-*.json."""
    from ..bench import fuzz as fz
    from ..bench import results

    gpu = require_gpu()
    require_torch()
    try:
        import hypothesis  # noqa: F401
    except ImportError:
        fail("the fuzz campaign needs hypothesis: pip install -e '.[test]'")
    records, failure = fz.campaign(count, seed)
    run = results.new_run("fuzz", gpu, {"count": count, "seed": seed,
                                        "max_work": fz.MAX_WORK})
    run["records"] = records
    run["summary"] = s = fz.summary(records, failure)
    path = results.write(run, gpu.slug, f"fuzz-{count}-s{seed}-{results.stamp()}")
    typer.echo(f"{s['cases']} cases: {s['checked']} checked against float64, {s['ok']} ok, "
               f"{s['failed']} failed, {s['refused']} refused by the API; worst error "
               f"{s['worst_error']:.2e} ({s['flushed_subnormals']} subnormal results flushed "
               f"by atomic fix-up, allowed without deterministic); kernels "
               f"{len(s['kernels'])}")
    typer.echo(f"results: {path}")
    if failure:
        keep = fz.keep_failure(failure, regressions or fz.REGRESSIONS)
        fail(f"minimal failing case: {failure} (kept in {keep})", 3)


@app.command()
def operands(build: Annotated[Optional[Path], typer.Option(
                 help="only build: write the patched cubins and their manifest here (CPU: "
                      "needs NVRTC, nvdisasm, pyelftools)")] = None,
             source: Annotated[Optional[Path], typer.Option(
                 "--from", help="run the cubins a --build wrote (GPU only)")] = None,
             only: Annotated[Optional[str], typer.Option(
                 help="comma-separated variant names (default: all)")] = None,
             iters: Annotated[int, typer.Option(min=1, help="loop trips a launch")] = 4000,
             slots: Annotated[bool, typer.Option(
                 help="blocks of 16 warps with only some running (operands.SLOTS), instead "
                      "of 1, 2, 4 warps per scheduler")] = False,
             table: Annotated[Optional[list[Path]], typer.Option(
                 help="write the --out markdown from these results files (no GPU)")]
             = None,
             out: Annotated[Path, typer.Option(
                 help="with --table: the markdown to write (relative paths from the current "
                      "directory)")] = Path("docs/operands-h200.md")):
    """How Hopper feeds FFMA its operands: 256-FFMA bodies whose registers,
    banks, reuse flags, accumulator distance and stall counts are patched into the cubin,
    timed with the SM clock at 1, 2 and 4 warps per scheduler. Writes
    results/<gpu>/probe/operands-*.json."""
    from ..bench import results
    from ..bench.probes import operands as ops

    if table:
        import json as _json

        from ..runtime.files import write_atomic

        runs = [(str(p), _json.loads(p.read_text())) for p in table]
        typer.echo(f"wrote {write_atomic(out.absolute(), ops.markdown(runs))}")
        return
    if build is not None:
        made = ops.build(build)
        typer.echo(f"{len(made)} variants, {sum(v.checked for v in made)} FFMAs read back "
                   f"through nvdisasm: {build}")
        return
    gpu = require_gpu()
    require_torch()
    if source is not None:
        bodies, items = ops.load(source)
    else:
        made = ops.build(None)
        bodies = {str(k): ops._body_meta(ops.compile_body(k)) for k in (0, 1)}
        items = [(ops._meta(v), v.cubin) for v in made]
    if only:
        keep = set(only.split(","))
        items = [(m, c) for m, c in items if m["name"] in keep]
    run = results.new_run("operands", gpu, {"warps_per_scheduler": list(ops.WARPS),
                                            "iters": iters, "repeats": ops.REPEATS,
                                            "shape": ops.SHAPE, "bodies": bodies})
    run["records"] = ops.measure(gpu, bodies, items, iters, slots=slots)
    if slots:
        run["method"]["slots"] = ops.SLOTS
        for r in run["records"]:
            typer.echo(f"{r['variant']:<24} {r['slots']:<18} {r['cycles_per_ffma']:6.2f} "
                       f"cycles per FFMA per running warp")
        path = results.write(run, gpu.slug, f"operands-slots-{results.stamp()}")
        typer.echo(f"results: {path}")
        return
    run["summary"] = rows = ops.summary(run["records"])
    path = results.write(run, gpu.slug, f"operands-{results.stamp()}")
    typer.echo("cycles per FFMA per warp (1.00 at W=1, W at W warps: the full rate)")
    typer.echo(ops.table(rows))
    typer.echo(f"results: {path}")


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
    from ..bench.probes import overhead as oh

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
