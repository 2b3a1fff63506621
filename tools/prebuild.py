"""Build, on the CPU machine, the cubins a device run will load, and pack the compile cache
for the trip (the H200's compile cache starts empty; NVRTC there would spend minutes).

    python tools/prebuild.py [--since ISO-TIME [--until ISO-TIME]] [--out FILE.tar.xz]
    python tools/prebuild.py --compile-only --jobs 16   # on the GPU machine itself
    python tools/prebuild.py --tensor                    # only what fp32_emulated loads

Compiles every grid and layers candidate (tune/grid.py) and every rung's H200 default, in
every layout the rung takes and both alignment variants, the tensor rungs' defaults and
rung 26's variants (SCHEME_VARIANTS) with the scheme's passes, into the compile cache
($SGEMMLAB_CACHE_DIR or ~/.cache/sgemmlab), then packs those cubins and every other one
written since --since (the tests' builds, say) into one xz archive, which `tools/h200.sh
prebuilt` unpacks on the device. The cubins carry their source text, so the archive is
several times smaller. With --compile-only it packs nothing.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import tarfile
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sgemmlab import registry  # noqa: E402
from sgemmlab.runtime.compiler import cache_dir, cache_key, compile_kernel  # noqa: E402
from sgemmlab.runtime.launch import (  # noqa: E402
    NO_SOURCE,
    SOURCE_BIAS,
    SOURCE_MATRIX,
    float4_paths,
    variant_macros,
)
from sgemmlab.tune import grid  # noqa: E402

GPU = "NVIDIA H200"
ARCH = "sm_90"


def _one(item) -> str:
    source, macros, *arch = item  # (an arch of its own: the tensor rungs' sm_90a)
    try:
        compile_kernel(source, macros, arch[0] if arch else ARCH)
        return ""
    except Exception as exc:  # reported, not fatal: the device run reports it too
        return f"{source} {macros}: {str(exc).splitlines()[0]}"


def work() -> list[tuple[str, dict]]:
    pairs = list(grid.grid_candidates(GPU)) + list(grid.layer_candidates(GPU, "NT"))
    pairs += [(r, r.default(GPU)) for r in registry.ALL + registry.HISTORY]
    # deterministic=True with a rung named alone: its default with the fixed-order fix-up
    pairs += [(r, r.default(GPU) | {"FIXUP": 0}) for r in registry.ALL
              if r.supports("streamk")]
    # the sanitizer matrix's decompositions and the table builds it covers (--table-builds)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from sanitizer_matrix import cells, table_cells

    pairs += [(registry.rung(c["rung"]), c["config"]) for c in cells(None) + table_cells(None)
              if "illegal" not in c and registry.rung(c["rung"]).precision == "ieee"]
    # the twins (rungs 22-25) at every configuration of 14 or 13 above: the bench times them
    pairs += [(t, cfg) for r, cfg in list(pairs) for t in registry.ORDERED
              if registry.rung(t.base).label == r.label]
    out, seen = [], set()
    for r, cfg in pairs:
        layouts = list(itertools.product((False, True), repeat=2)) \
            if r.supports("layouts") else [(False, False)]
        if cfg.get("REG_TRANSPOSE") in (2, 3):  # one k-major operand of two: NT only
            layouts = [(False, True)]
        for (ta, tb), vec4 in itertools.product(layouts, (True, False) if r.vectorized
                                                else (False,)):
            for source in (NO_SOURCE, SOURCE_MATRIX, SOURCE_BIAS) \
                    if r.supports("source") and not ta else (NO_SOURCE,):
                macros = r.macros(cfg) | variant_macros(r, vec4, ta, tb, source)
                key = (r.source, tuple(sorted(macros.items())))
                if key not in seen:
                    seen.add(key)
                    out.append((r.source, macros))
    return out


#: Rung 26's configurations over its seed that the GPU tests, tools/ozaki_probe.py --gemm and
#: --set, and a run with ozaki.GEMM set take, besides the defaults.
SCHEME_VARIANTS = ({"CLUSTER": 2}, {"STORE16": 0}, {"CLUSTER": 2, "STORE16": 0},
                   {"PINGPONG": 1, "STORE16": 1},
                   {"PINGPONG": 1, "BN": 128, "STAGES": 6},
                   {"PINGPONG": 1, "BN": 128, "STORE16": 1, "STAGES": 6},
                   {"PINGPONG": 1, "STORE16": 1, "STAGES": 5}, {"GROUP_M": 16}, {"GROUP_M": 32},
                   {"EXACT_DIV": 1}, {"EXACT_DIV": 1, "GROUP_M": 16},
                   {"EXACT_DIV": 1, "GROUP_M": 32}, {"PINGPONG": 1, "STORE16": 1, "EXACT_DIV": 1},
                   {"PINGPONG": 1, "BN": 128, "STAGES": 6, "STORE16": 1, "EXACT_DIV": 1})


def tensor_work() -> list[tuple[str, dict, str]]:
    """The tensor rungs' GEMMs as runtime/hopper.py and runtime/ozaki.py compile them (the
    H200 default, with each beta source the rung takes; rung 26's variants too), the
    pre-pass and the scheme's passes (oz_scale at each SCALE_BLOCKS and rows a block the
    probe times), each with its arch."""
    from sgemmlab.runtime import hopper, ozaki

    out = [(hopper.PREP, {"PREP": 1}, ozaki.ARCH)]
    # the scheme's passes, and oz_scale at the launch bounds and rows a block that
    # tools/ozaki_probe.py --scale-blocks and --rows2 time
    out += [(ozaki.STEPS, ozaki.steps_macros(n, rows2), ozaki.ARCH)
            for n, rows2 in ((1, False), (3, False), (4, False), (1, True), (3, True))]
    for r in registry.TENSOR:
        cfgs = [r.default(GPU)]
        if r.number == ozaki.rung().number:
            cfgs += [{**r.seed, **v} for v in SCHEME_VARIANTS]
        for cfg in cfgs:
            for source in (0, 1, 2) if r.supports("source") else (0,):
                out.append((r.source, hopper.gemm_macros(r, cfg, source), r.arch))
    return out


def plan_work(problems, settings=((True, None),), gates_open: bool = False,
              transfers=(None,)) -> list[tuple[str, dict]]:
    """The (source, macros) the plans of `problems` (bench.problems.Problem) load on the
    H200, one plan per (plan.STAGE, keep) in `settings` (keep: None for the module's
    STAGE_KEEP_A and _B, else both set to it) and
    lookup.MODEL_TRANSFER in `transfers` (dispatch run here on the shipped table; the
    packing gate lowered to every size with `gates_open`, as tools/stage_pair.py does),
    with the pack kernel: a device run that needs nothing else (one experiment, one mixed
    set) carries these instead of every candidate's."""
    import types

    from sgemmlab import dispatch
    from sgemmlab import plan as plan_mod
    from sgemmlab.dispatch import lookup

    plan_mod.gpu_info = lambda dev: types.SimpleNamespace(name=GPU, sm_count=132, arch=ARCH)
    saved = {"STAGE_SHARE": plan_mod.STAGE_SHARE, "MODEL_TRANSFER": lookup.MODEL_TRANSFER,
             "keep": (plan_mod.STAGE_KEEP_A, plan_mod.STAGE_KEEP_B)}
    if gates_open:
        plan_mod.STAGE_SHARE = 1e30
    out = [("pack.cu", {})]
    for transfer in transfers:
        if transfer is not None:
            lookup.MODEL_TRANSFER = transfer
        dispatch.clear_cache()
        out += _plan_items(plan_mod, problems, settings)
    plan_mod.STAGE_SHARE = saved["STAGE_SHARE"]
    plan_mod.STAGE_KEEP_A, plan_mod.STAGE_KEEP_B = saved["keep"]
    lookup.MODEL_TRANSFER = saved["MODEL_TRANSFER"]
    dispatch.clear_cache()
    return list({(s, tuple(sorted(m.items()))): (s, m) for s, m in out}.values())


def _plan_items(plan_mod, problems, settings):
    out, defaults = [], (plan_mod.STAGE_KEEP_A, plan_mod.STAGE_KEEP_B)
    for p in problems:
        lda, ldb, ldc = p.lds()
        sa, sb = lda * (p.K if p.trans_a else p.M), ldb * (p.N if p.trans_b else p.K)
        g = plan_mod.Gemm(p.M, p.N, p.K, p.batch, p.trans_a, p.trans_b, lda, ldb, ldc,
                          sa if p.batch > 1 else 0, sb if p.batch > 1 else 0,
                          ldc * p.M if p.batch > 1 else 0, False, (p.M, p.N))
        for stage, keep in settings:
            plan_mod.STAGE = stage
            plan_mod.STAGE_KEEP_A, plan_mod.STAGE_KEEP_B = defaults if keep is None else (
                keep, keep)
            pl = plan_mod.make_plan(g, 0, None, None, False, True)
            if pl.rung is None or pl.rung.supports("tma"):
                continue
            gm, st = pl.gemm, pl.staging  # fresh operands: 16-byte aligned pointers
            vec4, store4 = float4_paths(pl.rung, gm.M, gm.N, gm.K, gm.trans_a, gm.trans_b,
                                        (0, 0, 0, 0), (gm.lda, gm.ldb, gm.ldc, gm.ldc),
                                        (gm.stride_a, gm.stride_b, gm.stride_c),
                                        st is not None, st is None or st.store4)
            for s4 in {store4, True}:  # True: the aligned side of tools/stage_pair.py
                out.append((pl.rung.source, pl.rung.macros(pl.config) | variant_macros(
                    pl.rung, vec4, gm.trans_a, gm.trans_b, NO_SOURCE, s4)))
    plan_mod.STAGE = True
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--since", help="also pack every cubin written since this ISO time")
    ap.add_argument("--until", help="... and before this ISO time")
    ap.add_argument("--out", default=".cache/prebuilt.tar.xz")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--compile-only", action="store_true",
                    help="fill the compile cache and pack nothing (on the GPU machine)")
    ap.add_argument("--mix", type=int, action="append", metavar="SEED",
                    help="only the plans of this seed's mixed set (300 problems)")
    ap.add_argument("--transfer", type=float, action="append",
                    help="--mix: with lookup.MODEL_TRANSFER at each of these values")
    ap.add_argument("--stage-pair", type=int, action="append", metavar="SEED",
                    help="only the plans tools/stage_pair.py --seed SEED makes")
    ap.add_argument("--tensor", action="store_true",
                    help="only the tensor rungs, rung 26's variants and the scheme's passes "
                         "(what precision='fp32_emulated' and its tests, probe and bench "
                         "load): some thirty builds, under a minute on two cores")
    args = ap.parse_args()
    # the device has no bundle (sgemmlab/data/cubins is built at packaging time, not carried):
    # a kernel the bundle here holds must still land in the cache that is packed
    os.environ["SGEMMLAB_BUNDLE_DIR"] = ""
    if args.mix or args.stage_pair:
        from stage_pair import mix_problems

        from sgemmlab.bench import problems as problems_mod
        from sgemmlab.bench import suites

        todo = [p for seed in args.mix or () for p in suites.random_mix(300, seed)]
        items = plan_work(todo, transfers=args.transfer or (None,))
        if args.stage_pair:
            todo = [problems_mod.Problem(M, N, K, 1, layout, pad)
                    for M, N, K, layout, pad in mix_problems(args.stage_pair, 1)]
            items += plan_work(todo, ((False, True), (True, False), (True, True)), True)
    else:
        items = (work() if not args.tensor else []) + tensor_work()
    t0 = time.time()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        problems = [p for p in pool.map(_one, items) if p]
    print(f"{len(items)} variants compiled or found in the cache in {time.time() - t0:.0f} s")
    for p in problems:
        print("  failed:", p)
    if args.compile_only:
        return
    since = datetime.fromisoformat(args.since).timestamp() if args.since else 0.0
    root = cache_dir()
    needed = {root / "cubins" / f"{cache_key(src, macros, (arch or [ARCH])[0])}.bin"
              for src, macros, *arch in items}
    until = datetime.fromisoformat(args.until).timestamp() if args.until else float("inf")
    recent = {f for f in (root / "cubins").glob("*.bin")
              if since and since <= f.stat().st_mtime < until}
    files = sorted(f for f in needed | recent if f.is_file())
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w:xz", preset=6) as tar:
        for f in files:
            tar.add(f, arcname=f"cubins/{f.name}")
    print(f"{len(files)} cubins packed into {out} ({out.stat().st_size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
