"""Per-shape dispatch: which rung, configuration and decomposition runs a given GEMM.

cuBLAS carries many kernels and picks one per shape; so does sgemmlab. `choose` answers, for
one request (GPU, M, N, K, layout, batch, whether the result must be bit-reproducible), with a
`Choice`: the rung, its configuration, the decomposition (data-parallel, split-K, Stream-K)
and the reason in words. The answer is cached per request, so a repeated call is one dict
lookup.

Where the answer comes from, in order:

0. **A memory-bound rung that serves the shape** (registry.MEMBOUND, `preferred`: a vector
   times a matrix, a few rows against a matrix, K <= 16), at this GPU's default, the first
   that serves it; the table overrules it only where it measured that rung around the
   request (the blend then compares it with the rest) or this very shape. Their bill is
   bytes, which the big-tile rungs move badly. A short batch of large products runs on one
   without batches, one product per launch (PER_ITEM_BATCH).
1. **The tuning table of this GPU** (`sgemmlab tune --grid` or `--table` writes it): for
   every measured shape, every candidate (rung, configuration) timed against cuBLAS with
   the harness's paired method. At a measured shape its fastest usable entry runs;
   elsewhere the candidates are scored over the measured shapes around the request
   (lookup.blend: a weighted geometric mean of their paired ratios, nearer shapes weighing
   more) and the best runs. Nearness is a distance in log-space, because GEMM behaviour
   changes with ratios, not differences:

       d = sqrt( ln(M/M')^2 + ln(N/N')^2 + ln(K/K')^2 + ln(batch/batch')^2 )
           + 0.5 if the layout differs  + 0.25 if the alignment class differs

   A request whose nearest measured shape is farther than MAX_DISTANCE = 1.25 (the shape
   grid's spacing, tune/grid.py: any shape is within 1.26 of a grid point) is not trusted
   to the table: the cost model decides instead (2).
   Tables are looked for in the user's cache directory first ($SGEMMLAB_CACHE_DIR or
   ~/.cache/sgemmlab, then tables/<gpu-slug>.json), then in the package
   (sgemmlab/data/tables/<gpu-slug>.json.gz). A table measured on a GPU with another SM count
   (a MIG slice, say) is not used.

2. **The cost model** (dispatch/model.py), for shapes the table is too far from and no
   memory-bound rung serves (one that does is taken, as on a GPU without a table): every
   candidate measured at 200 or more of the table's shapes has a fitted time, a launch cost
   plus k-iterations on the busiest block slot (waves of its tiles, or its split's) plus
   DRAM traffic; the candidate predicted fastest runs. It ships beside the table
   (<gpu-slug>.model.json, `sgemmlab tune --fit-model`).

3. **The heuristic**, for GPUs no table covers. It reasons about waves of tiles:

       tiles  = ceil(M / BM) * ceil(N / BN) * batch       (output tiles of the default config)
       slots  = SMs * blocks per SM                        (occupancy: threads, registers,
                                                            shared memory, block slots)
       waves  = tiles / slots,   tail fill = waves / ceil(waves)
       k-iterations = ceil(K / BK)

   * under half a wave, and C small (M N <= 2^16) or the product tiny (under 2^26 FLOP,
     about a microsecond of an H200: less than a launch costs) -> the small-tile rung
     (registry.SMALL, rung 18), K split to fill the GPU where its tiles are fewer than the
     slots (runtime/decompose.py);
   * the waves are at least 85 % full on average -> data-parallel tiles on the highest
     eligible rung that is not persistent (one block per tile, no workspace); from 8 waves
     on this always holds (8/9 > 85 %): an idle tail costs little;
   * a tiny product or K too shallow to split (fewer than 2 x 4 k-iterations) ->
     data-parallel anyway (a fix-up would cost more than the idle SMs);
   * less than one wave, and K deep (K >= 4 * max(M, N)) or too little work to stream
     (tiles x k-iterations < slots x 4) -> split-K into s parts, the largest s the
     Stream-K rung offers with s <= slots / tiles and at least 4 k-iterations per part;
   * otherwise (less than one wave, or a last wave mostly idle) -> Stream-K: full waves
     of whole tiles, the remaining tiles' K-iterations streamed evenly over every slot.

   Split tiles meet in a fix-up: atomic (faster, not bit-reproducible) unless the request
   asks for `deterministic=True`, then in a fixed order. Unaligned operands (a base not
   16-byte aligned, or a leading dimension not a multiple of 4) change no decision: the
   float4 paths of the kernel fall back to scalar accesses, and the reason says so.

With precision="tf32x3" or "tf32" the tensor-core rungs (registry.TENSOR) run where they
serve, an exact FP32 choice (the steps above) elsewhere: dispatch/tensor.py says when.

Only rungs whose `features` cover the request are eligible: "layouts" for a column-major
operand, "batched" for batch > 1; `deterministic=True` excludes configurations that are not
bit-reproducible (`Rung.deterministic`).

The package, top to bottom: this module chooses (and caches the choice); `lookup` finds the
nearest measured shape; `model` holds the cost model; `waves` the heuristic (its wave
rules); `table` the file format, reading and writing; `request` what a request and a
choice are; `cache` what is remembered and who is told when it is forgotten (`on_clear`).
"""

from __future__ import annotations

import math
from dataclasses import replace

from .. import registry
from ..errors import DispatchError, NoGPUError, TableError
from ..registry import Rung, config_key
from ..runtime.limits import check_depth, check_int32
from . import cache
from .cache import clear_cache, on_clear
from .lookup import MAX_DISTANCE, Blend, blend, distance, from_table
from .request import LAYOUTS, Choice, Request, _frozen, decomposition, forced, layout_of
from .table import (
    COMPACT_SCHEMA,
    PACKAGE_TABLE_DIR,
    SHIPPED_GPU,
    TABLE_SCHEMA,
    Table,
    aligned_of,
    compact_table,
    load_table,
    merge_entries,
    new_table,
    package_table_path,
    read_table,
    shape_key,
    user_table_path,
    validate,
    winners,
    write_table,
)
from .tensor import check_precision, tensor_choice, tensor_rung, why_not, with_note

__all__ = ["choose", "check_precision", "tensor_rung", "eligible_rungs", "target_gpu",
           "clear_cache", "on_clear", "Choice", "Request",
           "DispatchError", "TableError", "forced", "decomposition", "layout_of", "LAYOUTS",
           "HEURISTIC_FIXUP", "Geometry", "geometry", "heuristic", "registers_of",
           "MAX_DISTANCE", "Blend", "blend", "distance", "from_table",
           "COMPACT_SCHEMA", "PACKAGE_TABLE_DIR", "SHIPPED_GPU", "TABLE_SCHEMA", "Table",
           "aligned_of", "compact_table", "load_table",
           "merge_entries", "new_table", "package_table_path", "read_table", "shape_key",
           "user_table_path", "validate", "winners", "write_table"]


#: Imported when first used (the cost model's path, the heuristic's): a first product that
#: the table answers loads neither (`__getattr__` gives their names as attributes).
_LATER = {"model": ("model", None), "waves": ("waves", None),
          **{name: ("waves", name) for name in ("HEURISTIC_FIXUP", "Geometry", "geometry",
                                                 "heuristic", "registers_of")}}


def __getattr__(name: str):
    where = _LATER.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    module = import_module(f".{where[0]}", __name__)
    value = module if where[1] is None else getattr(module, where[1])
    globals()[name] = value
    return value


def choose(M: int, N: int, K: int, *, gpu_name: str, sm_count: int, trans_a: bool = False,
           trans_b: bool = False, batch: int = 1, deterministic: bool = False,
           aligned: bool = True, precision: str = "ieee", arch: str = "") -> Choice:
    """The rung, configuration and decomposition for one GEMM request (cached).

    trans_a / trans_b: the operand is column-major. aligned: every base is 16-byte aligned
    and every leading dimension a multiple of 4 (float4 accesses possible). precision:
    "ieee" (exact FP32), or "tf32x3" / "tf32", which allow the tensor-core rungs on a GPU
    of architecture `arch` (dispatch/tensor.py: when they serve, and when an exact FP32
    rung does instead). Raises DispatchError when no rung has the features the request
    needs, ValueError for an unknown precision.
    """
    key = (M, N, K, gpu_name, sm_count, trans_a, trans_b, batch, deterministic, aligned,
           precision, arch)
    hit = cache.choices.get(key)
    if hit is None:
        req = Request(M, N, K, gpu_name, sm_count, bool(trans_a), bool(trans_b), batch,
                      bool(deterministic), bool(aligned))
        if check_precision(precision) == "ieee":
            hit = ordered(_decide(req), arch)
        else:
            _check(req)
            why = why_not(req, precision, arch)
            hit = tensor_choice(req, precision) if why is None else with_note(
                choose(M, N, K, gpu_name=gpu_name, sm_count=sm_count, trans_a=trans_a,
                       trans_b=trans_b, batch=batch, deterministic=deterministic,
                       aligned=aligned, arch=arch), why)
        cache.choices[key] = hit
    return hit


#: Where the twins (registry.ORDERED) stand in for rungs 13 and 14: the machine code the
#: operand-order pass edits, and the register banks it orders for, are those measured on sm_90.
ORDERED_ARCHS = ("sm_90",)


def ordered(choice: Choice, arch: str) -> Choice:
    """The choice with rung 13 or 14 replaced by its twin (registry.TWIN_OF: rung 23 or
    22) on an architecture whose banks were measured: the same configuration and
    decomposition, the operand-order pass over the cubin (`sgemmlab bench -k 14 -k 22`
    measures both side by side)."""
    twin = registry.TWIN_OF.get(choice.rung)
    if twin is None or arch not in ORDERED_ARCHS:
        return choice
    title = registry.rung(twin).title
    return replace(choice, rung=twin, reason=f"{choice.reason}\nruns {twin}: {title}, "
                   f"at {choice.rung}'s configuration (its twin on {arch})")


def eligible_rungs(req: Request) -> list[Rung]:
    """Rungs that can serve the request, lowest number first."""
    return [r for r in registry.RUNGS if req.needs <= r.features
            and r.serves(req.M, req.N, req.K)]


def _check(req: Request) -> None:
    for name in ("M", "N", "K", "batch", "sm_count"):
        v = getattr(req, name)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1 (got {v!r})")
    # what the API refuses, dispatch refuses in the same words (runtime/limits.py)
    check_int32(M=req.M, N=req.N, K=req.K, batch=req.batch)
    check_depth(req.K)


def _decide(req: Request) -> Choice:
    _check(req)
    rungs = eligible_rungs(req)
    if not rungs:
        need = ", ".join(sorted(req.needs))
        raise DispatchError(f"no rung supports {req.text()}: it needs the feature(s) "
                            f"{need}, which no rung of the registry has")
    notes: list[str] = []
    table = load_table(req.gpu_name)
    if table is not None and table.sm_count not in (None, req.sm_count):
        notes.append(f"the {table.where} table of {table.gpu} was measured with "
                     f"{table.sm_count} SMs, this GPU has {req.sm_count}: not used")
        table = None
    if table is None:
        if not notes:
            notes.append(f"no tuning table for {req.gpu_name} "
                         f"(run `sgemmlab tune --table` on it)")
    family = family_rungs(req)
    if table is not None:
        hit = blend(table, req)
        # a family rung serves this shape: the table decides only where it measured that
        # rung around the request (or this very shape), so the two were compared
        compared = not family or family[0].label in hit.candidates if hit else False
        if hit is not None and (hit.distance == 0 or compared and hit.distance <= MAX_DISTANCE):
            return from_table(req, table, hit)
        if hit is None:
            notes.append(f"the {table.where} table has no entry that can serve "
                         f"{req.layout}{' batched' if req.batch > 1 else ''}"
                         f"{' deterministic' if req.deterministic else ''} requests")
        else:
            e, d = hit.entry, hit.distance
            why = (f"> {MAX_DISTANCE}: too far to trust" if compared else
                   f"(and {family[0].label} was not measured around it)")
            notes.append(f"nearest measured shape {e['M']}×{e['N']}×{e['K']} "
                         f"{e.get('layout', 'NN')} is at distance {d:.2f} {why}")
    if family:  # where a memory-bound rung serves, it stays the choice (dispatch/model.py)
        return from_family(req, family[0], notes)
    if table is not None:
        from . import model

        if best := model.ranked(req):
            return from_model(req, best, notes)
    from .waves import heuristic

    return heuristic(req, rungs, notes, small_rungs(req))


def from_model(req: Request, best: list, notes: list[str]) -> Choice:
    """The modelled candidate predicted fastest (dispatch/model.py), with the runners-up in
    the reason."""
    us, f = best[0]
    lines = notes + [f"the cost model (fitted to the table; median error "
                     f"{100 * (math.exp(f.error) - 1):.0f} % for this candidate) predicts "
                     f"{us:.1f} µs for {f.rung} {config_key(f.config)}"]
    from .model import SHOWN

    lines += [f"  next: {g.rung} {config_key(g.config)} {u:.1f} µs"
              for u, g in best[1:SHOWN]]
    cfg = dict(f.config)
    return Choice(f.rung, _frozen(cfg), decomposition(registry.rung(f.rung), cfg), "model",
                  "\n".join(lines), details={"model": [
                      {"rung": g.rung, "config": dict(g.config), "predicted_us": u}
                      for u, g in best[:SHOWN]]})


def small_rungs(req: Request) -> list[Rung]:
    """Rungs of registry.SMALL (small tiles, batches, split-K) that can serve the request."""
    return [r for r in registry.SMALL if req.needs <= r.features
            and r.serves(req.M, req.N, req.K)
            and (not req.deterministic or r.deterministic(r.default(req.gpu_name)))]


#: A short batch of products a family rung claims runs on it one product per launch
#: (plan.Plan's per_item) where the rung has no batches and each product writes at least
#: PER_ITEM_OUTPUTS floats, so that a launch's cost hides behind its stores: the big-tile
#: rungs' k-tiles are mostly padding at such K (a mixed random set ran 9 x 815x11900x4 TN at
#: 0.29-0.33 of cuBLAS on 128x256 tiles of BK = 8:
#: results/nvidia-h200/bench/random-mix-300-s3404-20261203T162552Z and ...162730Z).
PER_ITEM_BATCH = 16
PER_ITEM_OUTPUTS = 2**22


def per_item(req: Request, r: Rung) -> bool:
    """Whether `r` serves the batch `req` one product per launch (PER_ITEM_BATCH)."""
    return req.batch > 1 and "batched" not in r.features and req.batch <= PER_ITEM_BATCH \
        and req.M * req.N >= PER_ITEM_OUTPUTS


def family_rungs(req: Request) -> list[Rung]:
    """Rungs of registry.FAMILY that claim the request (`preferred`: the memory-bound ones)
    and serve it, in the registry's order (the first is the one chosen); a short batch of
    large products also on one without batches (`per_item`)."""
    return [r for r in registry.FAMILY
            if (req.needs <= r.features or per_item(req, r)
                and req.needs - {"batched"} <= r.features)
            and r.preferred(req.M, req.N, req.K) and r.serves(req.M, req.N, req.K)
            and (not req.deterministic or r.deterministic(r.default(req.gpu_name)))]


def from_family(req: Request, r: Rung, notes: list[str]) -> Choice:
    """The family rung for a shape it serves, at this GPU's default configuration."""
    cfg = r.default(req.gpu_name)
    lines = [*notes, f"{req.M}×{req.N}×{req.K} is a shape {r.label} serves ({r.domain}): "
             "its bill is bytes, which a rung built for FLOPs moves badly here"]
    if per_item(req, r):
        lines.append(f"a batch of {req.batch}: one launch per product ({r.label} has no "
                     "batches)")
    if not req.aligned and r.vectorized:
        lines.append("operands unaligned: the float4 paths fall back to scalar accesses")
    return Choice(r.label, _frozen(cfg), decomposition(r, cfg), "heuristic",
                  "\n".join(lines))



def target_gpu(name: str | None = None, sms: int | None = None) -> tuple[str, int, str]:
    """(GPU name, SM count, note) to choose for: `name` if given (a known GPU, or one whose
    tuning table records its SM count, or any with `sms`), else the GPU here, else the GPU
    of the shipped table (the note says so). ValueError when the SM count cannot be known."""
    from ..runtime import occupancy
    from ..runtime.device import gpu_info

    note = ""
    if name is None:
        try:
            g = gpu_info()
            return g.name, sms or g.sm_count, ""
        except NoGPUError:
            name = SHIPPED_GPU
            note = (f"no GPU here: answering for the {name}, the GPU of the shipped table "
                    "(--gpu NAME for another)")
    try:
        known = occupancy.gpu(name)
        return known.name, sms or known.sms, note
    except KeyError:
        pass
    if sms is None:
        table = load_table(name)
        if table is None or not table.sm_count:
            raise ValueError(f"unknown GPU {name!r} and no tuning table for it: give its SM "
                             f"count with --sms (known GPUs: {', '.join(occupancy.GPUS)})")
        sms = table.sm_count
    return name, sms, note
