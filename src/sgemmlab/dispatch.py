"""Per-shape dispatch: which rung, configuration and decomposition runs a given GEMM.

cuBLAS carries many kernels and picks one per shape; so does sgemmlab. `choose` answers, for
one request (GPU, M, N, K, layout, batch, whether the result must be bit-reproducible), with a
`Choice`: the rung, its configuration, the decomposition (data-parallel, split-K, Stream-K)
and the reason in words. The answer is cached per request, so a repeated call is one dict
lookup.

Where the answer comes from, in order:

1. **The tuning table of this GPU** (`sgemmlab tune --table` writes it): for every measured
   shape, every candidate (rung, configuration) timed against cuBLAS with the harness's
   paired method. A request takes the *nearest measured shape* and, of the entries measured
   there that can serve it, the fastest (highest paired ratio against cuBLAS). Nearness is
   a distance in log-space, because GEMM behaviour changes with ratios, not differences:

       d = sqrt( ln(M/M')^2 + ln(N/N')^2 + ln(K/K')^2 + ln(batch/batch')^2 )
           + 0.5 if the layout differs  + 0.25 if the alignment class differs

   A table shape farther than MAX_DISTANCE = 0.75 (one dimension off by a factor of ~2.1,
   or all three by ~1.5) is not trusted: the heuristic decides instead.
   Tables are looked for in the user's cache directory first ($SGEMMLAB_CACHE_DIR or
   ~/.cache/sgemmlab, then tables/<gpu-slug>.json), then in the package
   (sgemmlab/data/tables/<gpu-slug>.json). A table measured on a GPU with another SM count
   (a MIG slice, say) is not used.

2. **The heuristic**, for shapes and GPUs no table covers. It reasons about waves of tiles:

       tiles  = ceil(M / BM) * ceil(N / BN) * batch       (output tiles of the default config)
       slots  = SMs * blocks per SM                        (occupancy: threads, registers,
                                                            shared memory, block slots)
       waves  = tiles / slots,   tail fill = waves / ceil(waves)
       k-iterations = ceil(K / BK)

   * the waves are at least 85 % full on average -> data-parallel tiles on the highest
     eligible rung that is not persistent (one block per tile, no workspace); from 8 waves
     on this always holds (8/9 > 85 %): an idle tail costs little;
   * a tiny product (under 2^26 FLOP, about a microsecond of an H200: less than a launch
     costs) or K too shallow to split (fewer than 2 x 4 k-iterations) -> data-parallel
     anyway (a fix-up would cost more than the idle SMs);
   * less than one wave, and K deep (K >= 4 * max(M, N)) or too little work to stream
     (tiles x k-iterations < slots x 4) -> split-K into s parts, the largest s the
     Stream-K rung offers with s <= slots / tiles and at least 4 k-iterations per part;
   * otherwise (less than one wave, or a last wave mostly idle) -> Stream-K: full waves
     of whole tiles, the remaining tiles' K-iterations streamed evenly over every slot.

   Split tiles meet in a fix-up: atomic (faster, not bit-reproducible) unless the request
   asks for `deterministic=True`, then in a fixed order. Unaligned operands (a base not
   16-byte aligned, or a leading dimension not a multiple of 4) change no decision: the
   float4 paths of the kernel fall back to scalar accesses, and the reason says so.

Only rungs whose `features` cover the request are eligible: "layouts" for a column-major
operand, "batched" for batch > 1; `deterministic=True` excludes configurations that are not
bit-reproducible (`Rung.deterministic`).

The table file (schema "sgemmlab.table/1"; docs/dispatch.md has an example):

    {"schema": "sgemmlab.table/1", "gpu": "NVIDIA H200", "compute_capability": "9.0",
     "sm_count": 132, "created", "command", "method", "sources": [results files],
     "entries": [{"M", "N", "K", "layout": "NN", "batch": 1, "aligned": true,
                  "rung": "14_streamk", "config": {...}, "deterministic": false,
                  "median_us", "vs_cublas", "vs_cublas_min", "vs_cublas_max",
                  "source": "results/nvidia-h200/table-....json"}, ...],
     "winners": [{"M", "N", "K", "layout", "batch", "rung", "config", "median_us",
                  "vs_cublas"}, ...]}

`winners` (the fastest entry of each shape) is derived from `entries` and kept for readers;
dispatch re-derives it under each request's constraints.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from . import registry
from .registry import Config, Rung, config_key

TABLE_SCHEMA = "sgemmlab.table/1"
PACKAGE_TABLE_DIR = Path(__file__).resolve().parent / "data" / "tables"
#: The GPU whose table ships with the package (what `sgemmlab explain` assumes without one).
SHIPPED_GPU = "NVIDIA H200"

# -- the table lookup ---------------------------------------------------------------------
MAX_DISTANCE = 0.75  # farther than this, a measured shape says little about the request
LAYOUT_PENALTY = 0.5
ALIGN_PENALTY = 0.25

# -- the heuristic ------------------------------------------------------------------------
GOOD_TAIL = 0.85  # waves at least this full on average: data-parallel loses little
MIN_K_ITERS = 4  # k-iterations a block should own when K is split
DEEP_K = 4  # K >= DEEP_K * max(M, N): "deep K"
TINY_FLOP = 2**26  # 2MNK below this: launch-bound, splitting buys nothing

LAYOUTS = ("NN", "TN", "NT", "TT")  # first letter: A, second: B; T = column-major


class DispatchError(ValueError):
    """No rung can serve the request (the message says which feature is missing)."""


class TableError(ValueError):
    """A tuning table file that is not one, or is malformed; the message names the file."""


# ---------------------------------------------------------------------------------------
# Requests and choices
# ---------------------------------------------------------------------------------------
def slug(gpu_name: str) -> str:
    """File-system name of a GPU, as results/ and the tables use it: 'nvidia-h200'."""
    return re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-")


def layout_of(trans_a: bool, trans_b: bool) -> str:
    return ("T" if trans_a else "N") + ("T" if trans_b else "N")


def features(rung: Rung) -> frozenset[str]:
    return rung.features


def is_deterministic(rung: Rung, cfg: Config) -> bool:
    """Bit-reproducible run to run (the registry's rule)."""
    return rung.deterministic(cfg)


def uses_vec4(rung: Rung) -> bool:
    return rung.vectorized


def decomposition(rung: Rung, cfg: Config) -> str:
    """'data-parallel', 'Stream-K, atomic fix-up', 'split-K x4, fixed-order fix-up', ..."""
    if "streamk" not in features(rung) or "SPLIT" not in cfg:
        return "data-parallel"
    split = cfg["SPLIT"]
    if split == 1:
        return "data-parallel (persistent)"
    kind = "Stream-K" if split == 0 else f"split-K x{split}"
    fix = {1: "atomic fix-up", 2: "atomic fix-up into C"}.get(cfg.get("FIXUP", 0),
                                                              "fixed-order fix-up")
    return f"{kind}, {fix}"


@dataclass(frozen=True)
class Request:
    M: int
    N: int
    K: int
    gpu_name: str
    sm_count: int
    trans_a: bool = False
    trans_b: bool = False
    batch: int = 1
    deterministic: bool = False
    aligned: bool = True

    @property
    def layout(self) -> str:
        return layout_of(self.trans_a, self.trans_b)

    @property
    def needs(self) -> frozenset[str]:
        """The rung features this request needs."""
        need = set()
        if self.trans_a or self.trans_b:
            need.add("layouts")
        if self.batch > 1:
            need.add("batched")
        return frozenset(need)

    def text(self) -> str:
        batch = f", batch {self.batch}" if self.batch > 1 else ""
        return (f"{self.M}×{self.N}×{self.K} {self.layout}{batch} on {self.gpu_name} "
                f"({self.sm_count} SMs)")


@dataclass(frozen=True)
class Choice:
    """What runs for one request, and why."""

    rung: str  # the rung's label, e.g. "14_streamk"
    config: Mapping[str, int]  # read-only: the choice is shared by every cached caller
    decomposition: str
    source: str  # "table" | "heuristic" | "forced"
    reason: str  # one line per step of the argument
    entry: Mapping[str, Any] | None = None  # the table entry used
    distance: float | None = None  # from the request to that entry's shape
    table: str | None = None  # where the table was read from
    details: Mapping[str, Any] = field(default_factory=dict)  # tiles, waves, occupancy...

    def as_dict(self) -> dict:
        """JSON-ready: what results records and `explain --json` carry."""
        return {"rung": self.rung, "config": dict(self.config),
                "decomposition": self.decomposition, "source": self.source,
                "reason": self.reason, "distance": self.distance, "table": self.table,
                "entry": dict(self.entry) if self.entry is not None else None,
                "details": dict(self.details)}

    def text(self) -> str:
        """The answer of `sgemmlab explain`, a few lines."""
        lines = [f"runs:    {self.rung}  {config_key(self.config)}",
                 f"split:   {self.decomposition}",
                 f"source:  {self.source}" + (f" ({self.table})" if self.table else "")]
        if self.entry is not None:
            e = self.entry
            lines.append(f"entry:   {e['M']}×{e['N']}×{e['K']} {e.get('layout', 'NN')}"
                         f" batch {e.get('batch', 1)}: {e['median_us']:.1f} µs, "
                         f"{100 * e['vs_cublas']:.1f} % of cuBLAS; distance "
                         f"{self.distance:.3f}")
        why = self.reason.splitlines()
        lines.append(f"why:     {why[0]}" if why else "why:")
        lines += [f"         {w}" for w in why[1:]]
        return "\n".join(lines)


def _frozen(cfg: Mapping[str, int]) -> Mapping[str, int]:
    return MappingProxyType(dict(cfg))


def forced(kernel: str | int, config: Config | None = None,
           gpu_name: str | None = None) -> Choice:
    """The Choice for a rung the caller named (kernel=... in the API): no dispatch."""
    rung = registry.rung(kernel)
    cfg = dict(config) if config is not None else rung.default(gpu_name)
    return Choice(rung.label, _frozen(cfg), decomposition(rung, cfg), "forced",
                  "named by the caller")


# ---------------------------------------------------------------------------------------
# Tables: read, write, merge
# ---------------------------------------------------------------------------------------
def shape_key(e: Mapping[str, Any]) -> tuple[int, int, int, str, int]:
    """The shape class of an entry: (M, N, K, layout, batch)."""
    return (int(e["M"]), int(e["N"]), int(e["K"]), e.get("layout", "NN"),
            int(e.get("batch", 1)))


def aligned_of(e: Mapping[str, Any]) -> bool:
    """Whether an entry was measured on operands the float4 paths take (16-byte aligned
    bases from the allocator; every leading dimension a multiple of 4)."""
    if "aligned" in e:
        return bool(e["aligned"])
    M, N, K, layout, _ = shape_key(e)
    lda = M if layout[0] == "T" else K
    ldb = K if layout[1] == "T" else N
    return lda % 4 == 0 and ldb % 4 == 0 and N % 4 == 0


def _rank(e: Mapping[str, Any]) -> tuple[float, float]:
    """Sort key, best first: the paired ratio against cuBLAS (clock drift cancels in it),
    then the time."""
    return (-float(e["vs_cublas"]), float(e["median_us"]))


def winners(entries: Iterable[Mapping[str, Any]]) -> list[dict]:
    """The fastest entry of each shape, in the order shapes first appear."""
    best: dict[tuple, Mapping[str, Any]] = {}
    for e in entries:
        k = shape_key(e)
        if k not in best or _rank(e) < _rank(best[k]):
            best[k] = e
    return [{"M": e["M"], "N": e["N"], "K": e["K"], "layout": e.get("layout", "NN"),
             "batch": e.get("batch", 1), "rung": e["rung"], "config": dict(e["config"]),
             "median_us": e["median_us"], "vs_cublas": e["vs_cublas"]}
            for e in best.values()]


def merge_entries(old: Iterable[Mapping[str, Any]], new: Iterable[Mapping[str, Any]]
                  ) -> list[dict]:
    """`new` replaces every old entry of a shape it measured (a shape's entries always come
    from one run, so they were timed against the same cuBLAS); other old shapes stay."""
    new = [dict(e) for e in new]
    measured = {shape_key(e) for e in new}
    return [dict(e) for e in old if shape_key(e) not in measured] + new


def new_table(gpu_name: str, compute_capability: str, sm_count: int,
              entries: Iterable[Mapping[str, Any]], *, command: str = "",
              created: str = "", method: Mapping | None = None,
              sources: Iterable[str] = ()) -> dict:
    entries = sorted((dict(e) for e in entries),
                     key=lambda e: (shape_key(e), _rank(e)))
    return {"schema": TABLE_SCHEMA, "gpu": gpu_name, "compute_capability": compute_capability,
            "sm_count": sm_count, "created": created, "command": command,
            "method": dict(method or {}), "sources": sorted(set(sources)),
            "entries": entries, "winners": winners(entries)}


_ENTRY_FIELDS = {"M": int, "N": int, "K": int, "rung": str, "config": dict,
                 "median_us": (int, float), "vs_cublas": (int, float)}


def validate(data: Any) -> list[str]:
    """What is wrong with a table, in words; empty when it is a good one."""
    if not isinstance(data, dict):
        return ["not a JSON object"]
    if data.get("schema") != TABLE_SCHEMA:
        return [f"schema is {data.get('schema')!r}, expected {TABLE_SCHEMA!r}"]
    problems = []
    if not isinstance(data.get("gpu"), str) or not data["gpu"]:
        problems.append("no gpu name")
    if not isinstance(data.get("entries"), list):
        return problems + ["entries is not a list"]
    for i, e in enumerate(data["entries"]):
        if not isinstance(e, dict):
            problems.append(f"entry {i} is not an object")
            continue
        for name, kind in _ENTRY_FIELDS.items():
            if not isinstance(e.get(name), kind) or isinstance(e.get(name), bool):
                what = kind.__name__ if isinstance(kind, type) else "a number"
                problems.append(f"entry {i}: {name} missing or not {what}")
        if all(isinstance(e.get(d), int) for d in "MNK") and min(e["M"], e["N"], e["K"]) < 1:
            problems.append(f"entry {i}: M, N, K must be >= 1")
        if e.get("layout", "NN") not in LAYOUTS:
            problems.append(f"entry {i}: layout {e.get('layout')!r} is not one of {LAYOUTS}")
        if not isinstance(e.get("batch", 1), int) or e.get("batch", 1) < 1:
            problems.append(f"entry {i}: batch must be an integer >= 1")
        if isinstance(e.get("median_us"), (int, float)) and not e["median_us"] > 0:
            problems.append(f"entry {i}: median_us must be > 0")
    return problems


@dataclass(frozen=True)
class Table:
    """A tuning table as dispatch reads it."""

    data: Mapping[str, Any]
    where: str  # "user cache" | "package" | a path
    path: Path | None = None

    @property
    def gpu(self) -> str:
        return self.data["gpu"]

    @property
    def sm_count(self) -> int | None:
        return self.data.get("sm_count")

    @property
    def entries(self) -> list[dict]:
        return self.data["entries"]

    def shapes(self) -> dict[tuple, list[dict]]:
        out: dict[tuple, list[dict]] = {}
        for e in self.entries:
            out.setdefault(shape_key(e), []).append(e)
        return out

    def label(self) -> str:
        return f"{self.where}: {self.path}" if self.path else self.where


def read_table(path: str | Path, where: str | None = None) -> Table:
    """A table file, checked; raises TableError naming the file and the problem."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise TableError(f"{path}: cannot read a tuning table ({exc})") from None
    if problems := validate(data):
        raise TableError(f"{path}: not a valid tuning table: " + "; ".join(problems[:3]))
    return Table(data, where or str(path), path)


def write_table(data: Mapping[str, Any], path: str | Path) -> Path:
    """Write a table atomically (readers see the old file or the whole new one)."""
    if problems := validate(data):
        raise TableError("refusing to write an invalid table: " + "; ".join(problems[:3]))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(data, indent=1) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    clear_cache()
    return path


def user_table_path(gpu_name: str) -> Path:
    from .runtime.compiler import cache_dir

    return cache_dir() / "tables" / f"{slug(gpu_name)}.json"


def package_table_path(gpu_name: str) -> Path:
    return PACKAGE_TABLE_DIR / f"{slug(gpu_name)}.json"


_tables: dict[str, Table | None] = {}


def load_table(gpu_name: str) -> Table | None:
    """This GPU's table: the user's cache directory first, then the package; None when
    neither has one. A broken file is skipped with a warning, never fatal to a GEMM."""
    if gpu_name in _tables:
        return _tables[gpu_name]
    found = None
    for where, path in (("user cache", user_table_path(gpu_name)),
                        ("package", package_table_path(gpu_name))):
        if not path.is_file():
            continue
        try:
            table = read_table(path, where)
        except TableError as exc:
            warnings.warn(f"{exc}; ignored", stacklevel=2)
            continue
        if table.gpu != gpu_name:
            warnings.warn(f"{path}: a table for {table.gpu!r}, not {gpu_name!r}; ignored",
                          stacklevel=2)
            continue
        found = table
        break
    _tables[gpu_name] = found
    return found


_choices: dict[tuple, Choice] = {}


def clear_cache() -> None:
    """Forget loaded tables and cached choices (after a table is written), and the API's
    plans, which hold choices made from the old table."""
    _tables.clear()
    _choices.clear()
    _registers.clear()
    import sys

    api = sys.modules.get("sgemmlab.api")  # only if loaded: dispatch must not import it
    if api is not None:
        api.clear_caches()


# ---------------------------------------------------------------------------------------
# Choosing
# ---------------------------------------------------------------------------------------
def choose(M: int, N: int, K: int, *, gpu_name: str, sm_count: int, trans_a: bool = False,
           trans_b: bool = False, batch: int = 1, deterministic: bool = False,
           aligned: bool = True) -> Choice:
    """The rung, configuration and decomposition for one GEMM request (cached).

    trans_a / trans_b: the operand is column-major. aligned: every base is 16-byte aligned
    and every leading dimension a multiple of 4 (float4 accesses possible). Raises
    DispatchError when no rung has the features the request needs.
    """
    key = (M, N, K, gpu_name, sm_count, trans_a, trans_b, batch, deterministic, aligned)
    hit = _choices.get(key)
    if hit is None:
        hit = _decide(Request(M, N, K, gpu_name, sm_count, bool(trans_a), bool(trans_b),
                              batch, bool(deterministic), bool(aligned)))
        _choices[key] = hit
    return hit


def eligible_rungs(req: Request) -> list[Rung]:
    """Rungs that can serve the request, lowest number first."""
    return [r for r in registry.RUNGS if req.needs <= features(r)]


def _check(req: Request) -> None:
    for name in ("M", "N", "K", "batch", "sm_count"):
        v = getattr(req, name)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1 (got {v!r})")


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
    else:
        hit = nearest(table, req)
        if hit is not None and hit[1] <= MAX_DISTANCE:
            return _from_table(req, table, *hit)
        if hit is None:
            notes.append(f"the {table.where} table has no entry that can serve "
                         f"{req.layout}{' batched' if req.batch > 1 else ''}"
                         f"{' deterministic' if req.deterministic else ''} requests")
        else:
            e, d, _ = hit
            notes.append(f"nearest measured shape {e['M']}×{e['N']}×{e['K']} "
                         f"{e.get('layout', 'NN')} is at distance {d:.2f} > {MAX_DISTANCE}: "
                         "too far to trust")
    return heuristic(req, rungs, notes)


def _known(e: Mapping[str, Any]) -> Rung | None:
    """The entry's rung while the entry still describes this package: the rung exists and
    the configuration is legal (a table can outlive a registry change)."""
    try:
        r = registry.rung(e["rung"])
    except KeyError:
        return None
    return r if r.is_legal(e["config"]) else None


def _usable(e: Mapping[str, Any], req: Request) -> bool:
    """The entry can serve the request: a known rung with the features the request needs,
    bit-reproducible if asked."""
    r = _known(e)
    if r is None or not req.needs <= features(r):
        return False
    return not req.deterministic or is_deterministic(r, e["config"])


def distance(req: Request, e: Mapping[str, Any]) -> float:
    """How far a measured shape is from the request (see the module docstring)."""
    M, N, K, layout, batch = shape_key(e)
    d = math.sqrt(math.log(req.M / M) ** 2 + math.log(req.N / N) ** 2
                  + math.log(req.K / K) ** 2 + math.log(req.batch / batch) ** 2)
    if layout != req.layout:
        d += LAYOUT_PENALTY
    if aligned_of(e) != req.aligned:
        d += ALIGN_PENALTY
    return d


def nearest(table: Table, req: Request) -> tuple[dict, float, dict | None] | None:
    """(the entry to use, its distance, the shape's overall winner) or None.

    The nearest shape with at least one usable entry; of its usable entries the best. The
    overall winner of that shape is returned too when the request's constraints (features,
    determinism) excluded it, so the reason can say what was given up."""
    best = None
    for entries in table.shapes().values():
        usable = [e for e in entries if _usable(e, req)]
        if not usable:
            continue
        d = distance(req, usable[0])
        if best is None or d < best[1]:
            top = min(usable, key=_rank)
            overall = min((e for e in entries if _known(e)), key=_rank)
            best = (top, d, overall if overall is not top else None)
    return best


def _from_table(req: Request, table: Table, e: dict, d: float, overall: dict | None
                ) -> Choice:
    r = registry.rung(e["rung"])
    cfg = dict(e["config"])
    shape = f"{e['M']}×{e['N']}×{e['K']} {e.get('layout', 'NN')}"
    if e.get("batch", 1) > 1:
        shape += f" batch {e['batch']}"
    exact = d == 0
    lines = [(f"measured fastest at this very shape ({shape})" if exact else
              f"measured fastest at the nearest shape {shape} (distance {d:.3f} <= "
              f"{MAX_DISTANCE})") + f": {e['median_us']:.1f} µs, "
             f"{100 * e['vs_cublas']:.1f} % of cuBLAS FP32 (paired)"]
    if overall is not None:
        why = "not bit-reproducible" if req.deterministic and not is_deterministic(
            registry.rung(overall["rung"]), overall["config"]) else "lacks a needed feature"
        lines.append(f"the shape's overall winner {overall['rung']} "
                     f"({decomposition(registry.rung(overall['rung']), overall['config'])}, "
                     f"{100 * overall['vs_cublas']:.1f} %) is {why}")
    if not req.aligned and uses_vec4(r) and aligned_of(e):
        lines.append("operands unaligned here: the float4 paths fall back to scalar "
                     "accesses (measured aligned, so expect it slower than the table says)")
    return Choice(r.label, _frozen(cfg), decomposition(r, cfg), "table", "\n".join(lines),
                  entry=MappingProxyType(dict(e)), distance=d, table=table.label())


# ---------------------------------------------------------------------------------------
# The heuristic
# ---------------------------------------------------------------------------------------
def gpu_limits(gpu_name: str, sm_count: int):
    """(inspect.occupancy.GPU with this SM count, note). An unknown GPU gets the H200's
    per-SM limits, and the note says so."""
    from .inspect import occupancy as occ

    try:
        g = occ.gpu(gpu_name)
        note = ""
    except KeyError:
        g = occ.GPUS["h200"]
        note = f"{gpu_name} is not in sgemmlab's GPU list: per-SM limits of the H200 assumed"
    if g.sms != sm_count:
        g = dataclasses.replace(g, sms=sm_count)
    return g, note


_registers: dict[tuple, int | None] = {}


def registers_of(rung: Rung, cfg: Config, arch: str) -> int | None:
    """Registers per thread from ptxas (through the disk cache of compiled cubins: the
    launch compiles the same kernel anyway); None when it cannot compile here."""
    key = (rung.label, config_key(cfg), arch)
    if key not in _registers:
        try:
            from .runtime.compiler import compile_kernel

            macros = rung.macros(cfg) | ({"SGEMM_VEC4": 1} if uses_vec4(rung) else {})
            regs = compile_kernel(rung.source, macros, arch).resources.registers
            _registers[key] = regs if regs >= 0 else None
        except Exception:  # no NVRTC, a compile error: fall back to the budget
            _registers[key] = None
    return _registers[key]


@dataclass(frozen=True)
class Geometry:
    """How one configuration covers one request on one GPU."""

    tile: tuple[int, int]
    tiles: int
    k_iters: int
    threads: int
    registers: int | None  # None: unknown, the __launch_bounds__ budget was assumed
    blocks_per_sm: int
    limits: tuple[str, ...]
    slots: int

    @property
    def waves(self) -> float:
        return self.tiles / self.slots

    @property
    def tail_fill(self) -> float:
        """Average fullness of the waves: 1.0 when tiles fill whole waves."""
        return self.waves / math.ceil(self.waves)

    def text(self) -> str:
        regs = f"{self.registers} registers" if self.registers is not None else \
            "registers unknown (budget assumed)"
        return (f"tile {self.tile[0]}×{self.tile[1]}: {self.tiles} tiles, "
                f"{self.k_iters} k-iterations each; {self.threads} threads, {regs}: "
                f"{self.blocks_per_sm} blocks/SM (limit: {', '.join(self.limits)}), "
                f"{self.slots} slots; {self.waves:.2f} waves, {100 * self.tail_fill:.0f} % "
                "full on average")

    def as_dict(self) -> dict:
        return {**dataclasses.asdict(self), "waves": self.waves, "tail_fill": self.tail_fill}


def geometry(rung: Rung, cfg: Config, req: Request, g=None) -> Geometry:
    """Tiles, k-iterations, occupancy and waves of `rung` at `cfg` for the request."""
    from .inspect import occupancy as occ

    g = g or gpu_limits(req.gpu_name, req.sm_count)[0]
    rows, cols = rung.tile(cfg)
    tiles = -(-req.M // rows) * -(-req.N // cols) * req.batch
    bk = cfg.get("BK") or cfg.get("BS") or 1
    threads = rung.threads(cfg)
    regs = registers_of(rung, cfg, g.arch)
    budget = min(registry.MAX_REGISTERS_PER_THREAD, registry.MAX_REGISTERS_PER_BLOCK // threads)
    o = occ.occupancy(g, threads, regs if regs is not None else budget, rung.smem_bytes(cfg))
    blocks = max(o.blocks, 1)
    return Geometry((rows, cols), tiles, -(-req.K // bk), threads, regs, blocks, o.limits,
                    blocks * g.sms)


#: The heuristic's fix-up when bit-reproducibility is not asked for: atomic adds into C,
#: 5-8 points faster than the other two at 1024^3 and never slower at 2048^3 or 4096^3
#: (results/nvidia-h200/probe-fixup-1024-1000-2048-4096-20261129T1506Z.json).
HEURISTIC_FIXUP = 2


def _streamk_config(rung: Rung, base: Config, split: int, deterministic: bool
                    ) -> dict | None:
    cfg = {**base, "SPLIT": split}
    if "FIXUP" in rung.space:
        cfg["FIXUP"] = 0 if deterministic else HEURISTIC_FIXUP
    if rung.is_legal(cfg):
        return cfg
    if cfg.get("FIXUP") and rung.is_legal({**cfg, "FIXUP": 0}):
        return {**cfg, "FIXUP": 0}
    return None


def heuristic(req: Request, rungs: list[Rung], notes: Iterable[str] = ()) -> Choice:
    """The documented rules (module docstring) over the eligible `rungs`."""
    g, gnote = gpu_limits(req.gpu_name, req.sm_count)
    lines = list(notes) + ([gnote] if gnote else [])
    streamk = [r for r in rungs if "streamk" in features(r) and "SPLIT" in r.space]
    plain = [r for r in rungs if "streamk" not in features(r)]
    sk = max(streamk, key=lambda r: r.number) if streamk else None
    sk_base = sk.default(req.gpu_name) if sk else None

    if plain:
        dp = max(plain, key=lambda r: r.number)
        dp_cfg = dp.default(req.gpu_name)
    else:  # only the persistent rung can serve: its data-parallel mode
        dp = sk
        dp_cfg = _streamk_config(sk, sk_base, 1, req.deterministic) or sk_base
    geo = geometry(dp, dp_cfg, req, g)
    details = {"data_parallel": {"rung": dp.label, **geo.as_dict()}}
    lines.append(f"{dp.label}: {geo.text()}")

    def done(r: Rung, cfg: dict, why: str, gm: Geometry) -> Choice:
        lines.append(why)
        if not req.aligned and uses_vec4(r):
            lines.append("operands unaligned: the float4 paths fall back to scalar accesses "
                         "(same decision, slower copies)")
        if req.deterministic and cfg.get("SPLIT", 1) != 1:
            lines.append("bit-reproducible results asked for: fixed-order fix-up")
        return Choice(r.label, _frozen(cfg), decomposition(r, cfg), "heuristic",
                      "\n".join(lines), details={**details, "chosen": gm.as_dict()})

    if geo.tail_fill >= GOOD_TAIL:
        return done(dp, dp_cfg, f"the waves are full enough ({geo.waves:.2f} "
                    f"waves, {100 * geo.tail_fill:.0f} % full on average): data-parallel, one "
                    "block per tile",
                    geo)
    short = "less than one wave" if geo.tiles < geo.slots else \
        f"the last wave is mostly idle ({100 * geo.tail_fill:.0f} % full on average)"
    if sk is None:
        return done(dp, dp_cfg, f"{short}, but no eligible rung can split K "
                    "(none has the 'streamk' feature): data-parallel", geo)
    flop = 2 * req.M * req.N * req.K * req.batch
    if flop < TINY_FLOP:
        return done(dp, dp_cfg, f"{short}, but the whole product is {flop / 1e6:.1f} MFLOP "
                    f"(< 2^26: launch-bound): data-parallel, nothing to gain from a split",
                    geo)
    if geo.k_iters < 2 * MIN_K_ITERS:
        return done(dp, dp_cfg, f"{short}, but K has only {geo.k_iters} k-iterations: "
                    f"splitting it (< 2 x {MIN_K_ITERS}) costs more in fix-up than the "
                    "idle SMs: data-parallel", geo)

    sgeo = geometry(sk, sk_base, req, g)
    details["streamk"] = {"rung": sk.label, **sgeo.as_dict()}
    if sk is not dp:
        lines.append(f"{sk.label}: {sgeo.text()}")
    deep = req.K >= DEEP_K * max(req.M, req.N)
    thin = sgeo.tiles * sgeo.k_iters < sgeo.slots * MIN_K_ITERS
    if sgeo.tiles < sgeo.slots and (deep or thin):
        most = min(sgeo.slots // sgeo.tiles, sgeo.k_iters // MIN_K_ITERS)
        splits = [s for s in sk.space["SPLIT"] if 2 <= s <= most]
        cfg = _streamk_config(sk, sk_base, max(splits), req.deterministic) if splits else None
        if cfg is not None:
            what = (f"K is deep (K >= {DEEP_K} x max(M, N))" if deep else
                    f"too little work to stream ({sgeo.tiles} tiles x {sgeo.k_iters} "
                    f"k-iterations < {sgeo.slots} slots x {MIN_K_ITERS})")
            return done(sk, cfg, f"{short} and {what}: split-K into {cfg['SPLIT']} parts "
                        f"({sgeo.tiles * cfg['SPLIT']} blocks of about "
                        f"{sgeo.k_iters // cfg['SPLIT']} k-iterations)", sgeo)
    cfg = _streamk_config(sk, sk_base, 0, req.deterministic)
    if cfg is None:
        return done(dp, dp_cfg, f"{short}, but {sk.label} has no legal Stream-K "
                    "configuration: data-parallel", geo)
    full = sgeo.tiles // sgeo.slots
    return done(sk, cfg, f"{short}: Stream-K ({full} full wave(s) of whole tiles, the "
                f"other {sgeo.tiles - full * sgeo.slots} tiles' k-iterations streamed "
                f"evenly over all {sgeo.slots} slots)", sgeo)
