"""Tuning tables: the file format, reading, validating, merging and writing them.

The table file (schema "sgemmlab.table/1"; docs/dispatch.md has an example):

    {"schema": "sgemmlab.table/1", "gpu": "NVIDIA H200", "compute_capability": "9.0",
     "sm_count": 132, "created", "command", "method", "sources": [results files],
     "entries": [{"M", "N", "K", "layout": "NN", "batch": 1, "aligned": true,
                  "rung": "14_streamk", "config": {...}, "deterministic": false,
                  "median_us", "vs_cublas", "vs_cublas_min", "vs_cublas_max",
                  "source": "results/nvidia-h200/table/....json"}, ...],
     "winners": [{"M", "N", "K", "layout", "batch", "rung", "config", "median_us",
                  "vs_cublas"}, ...]}

`winners` (the fastest entry of each shape) is derived from `entries` and kept for readers;
dispatch re-derives it under each request's constraints.

The package ships the compact form of a table (schema "sgemmlab.table.compact/1",
`compact_table`): every entry, but only what dispatch, the blend and the cost model's fit read
of it, each (rung, configuration) and each shape written once and the entries as columns:

    {"schema": "sgemmlab.table.compact/1", "gpu", "compute_capability", "sm_count",
     "created", "command", "method", "sources",
     "candidates": [[rung, config], ...], "shapes": [[M, N, K, layout, batch, aligned], ...],
     "entries": {"shape": [index], "candidate": [index], "median_us": [...],
                 "vs_cublas": [...]}}

In a file each column may be packed (`write_table` packs them): {"dtype": "<i4" or "<f8",
"base64": the little-endian array}. The numbers then read back exactly without parsing
their decimals, which was most of the time a first product spent reading the table.

It leaves out what only a reader of the measurement needs (each entry's spread, source and
derived flags; the winners): those are in the results files named by `sources`, from which
`sgemmlab tune --export` rebuilds the whole table (tune/table.py). The entries keep the full
table's order, so every lookup, blend and fit reads the same entries in the same order: the
H200's is 0.3 MB gzipped (the full one 1 MB gzipped, 11 MB of JSON) and reads in a few
milliseconds, at the first product that needs it (never at import).

Tables are looked for in the user's cache directory first ($SGEMMLAB_CACHE_DIR or
~/.cache/sgemmlab, then tables/<gpu-slug>.json), then in the package
(sgemmlab/data/tables/<gpu-slug>.json.gz). A table decides which cubin runs, so the user's is
read only under the compile cache's rule (runtime/trust.py): the cache directory, its
tables/ and the file (a regular file, not a symlink) owned by you or root and not writable
by group or others; otherwise the package's table is used, with one warning saying why.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import warnings
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from ..errors import TableError
from ..runtime import trust
from ..runtime.compiler import cache_advice, cache_dir, cache_refusal, make_cache_subdir
from ..runtime.device import slug
from ..runtime.files import write_atomic
from . import cache
from .request import LAYOUTS

TABLE_SCHEMA = "sgemmlab.table/1"
COMPACT_SCHEMA = "sgemmlab.table.compact/1"
#: The columns of a compact table's entries, and the header both forms carry.
COLUMNS = ("shape", "candidate", "median_us", "vs_cublas")
#: How a file packs each column (little-endian int32 indices, float64 times and ratios).
PACKED = {"shape": "<i4", "candidate": "<i4", "median_us": "<f8", "vs_cublas": "<f8"}
HEADER = ("schema", "gpu", "compute_capability", "sm_count", "created", "command", "method",
          "sources")
PACKAGE_TABLE_DIR = Path(__file__).resolve().parent.parent / "data" / "tables"
#: The GPU whose table ships with the package (what `sgemmlab explain` assumes without one).
SHIPPED_GPU = "NVIDIA H200"


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


_NUMBER = (int, float)


def _plainly_good(e: dict) -> bool:
    """An entry that passes every check below, decided with few operations (a shipped
    table has over ten thousand entries, and the first call of a process reads it)."""
    M, N, K = e.get("M"), e.get("N"), e.get("K")
    us, vs, b = e.get("median_us"), e.get("vs_cublas"), e.get("batch", 1)
    return (type(M) is int and type(N) is int and type(K) is int and M >= 1 and N >= 1
            and K >= 1 and type(e.get("rung")) is str and type(e.get("config")) is dict
            and type(us) in _NUMBER and us > 0 and type(vs) in _NUMBER
            and type(b) is int and b >= 1 and e.get("layout", "NN") in LAYOUTS)


def validate(data: Any) -> list[str]:
    """What is wrong with a table (either form), in words; empty when it is a good one."""
    if not isinstance(data, dict):
        return ["not a JSON object"]
    if data.get("schema") == COMPACT_SCHEMA:
        return validate_compact(data)
    if data.get("schema") != TABLE_SCHEMA:
        return [f"schema is {data.get('schema')!r}, expected {TABLE_SCHEMA!r}"]
    problems = []
    if not isinstance(data.get("gpu"), str) or not data["gpu"]:
        problems.append("no gpu name")
    if not isinstance(data.get("entries"), list):
        return problems + ["entries is not a list"]
    for i, e in enumerate(data["entries"]):
        if type(e) is dict and _plainly_good(e):  # the common case, checked fast
            continue
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


def _types(column: Iterable) -> set:
    return set(map(type, column))


def _shapes_ok(shapes: Any) -> bool:
    """Whether `shapes` is a list of [M, N, K, layout, batch, aligned] (sizes integers >= 1),
    checked field by field across the rows (a thousand rows, read by a first product)."""
    if not isinstance(shapes, list) or not all(type(s) is list and len(s) == 6
                                               for s in shapes):
        return False
    if not shapes:
        return True
    M, N, K, layout, batch, aligned = zip(*shapes)
    sizes = M + N + K + batch
    return (_types(sizes) == {int} and min(sizes) >= 1 and _types(layout) == {str}
            and set(layout) <= set(LAYOUTS) and _types(aligned) == {bool})


def validate_compact(data: dict) -> list[str]:
    """What is wrong with a compact table, in words (checked column by column: the first
    product of a process reads it)."""
    problems = []
    if not isinstance(data.get("gpu"), str) or not data["gpu"]:
        problems.append("no gpu name")
    cands, shapes, cols = data.get("candidates"), data.get("shapes"), data.get("entries")
    if not isinstance(cands, list) or not all(
            type(c) is list and len(c) == 2 and type(c[0]) is str and type(c[1]) is dict
            and all(type(k) is str and type(v) is int for k, v in c[1].items())
            for c in cands):
        problems.append("candidates is not a list of [rung, configuration]")
    if not _shapes_ok(shapes):
        problems.append("shapes is not a list of [M, N, K, layout, batch, aligned]")
    if isinstance(cols, dict) and all(type(cols.get(c)) is dict for c in COLUMNS):
        return problems or _packed_problems(cols, len(shapes), len(cands))
    if not isinstance(cols, dict) or not all(type(cols.get(c)) is list for c in COLUMNS):
        return problems + [f"entries is not an object of the columns {', '.join(COLUMNS)}"]
    if problems:
        return problems
    if len({len(cols[c]) for c in COLUMNS}) != 1:
        problems.append("entries: the columns differ in length")
    for name, count in (("shape", len(shapes)), ("candidate", len(cands))):
        col = cols[name]
        if col and (_types(col) != {int} or min(col) < 0 or max(col) >= count):
            problems.append(f"entries: {name} is not an index into {name}s")
    for name in ("median_us", "vs_cublas"):
        col = cols[name]
        if col and (not _types(col) <= {int, float} or name == "median_us" and min(col) <= 0):
            problems.append(f"entries: {name} holds " + (
                "a value that is not > 0" if _types(col) <= {int, float} else "a non-number"))
    return problems


def _array(name: str, packed: Any) -> np.ndarray:
    """A packed column as its array; ValueError naming what is wrong."""
    if set(packed) != {"dtype", "base64"} or packed["dtype"] != PACKED[name] or \
            type(packed["base64"]) is not str:
        raise ValueError(f"entries: {name} is not packed as {{'dtype': {PACKED[name]!r}, "
                         "'base64': ...}")
    out = _decoded(PACKED[name], packed["base64"])
    if out is None:
        raise ValueError(f"entries: {name} is not base64 of whole {PACKED[name]} values")
    return out


@lru_cache(maxsize=len(COLUMNS))
def _decoded(dtype: str, text: str) -> np.ndarray | None:
    """The array `text` packs (read-only), decoded once for validation and reading both;
    None when it is not base64 of whole values."""
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error:
        return None
    return None if len(raw) % np.dtype(dtype).itemsize else np.frombuffer(raw, dtype)


def _packed_problems(cols: dict, shapes: int, cands: int) -> list[str]:
    try:
        arrays = {name: _array(name, cols[name]) for name in COLUMNS}
    except ValueError as exc:
        return [str(exc)]
    problems = []
    if len({len(a) for a in arrays.values()}) != 1:
        problems.append("entries: the columns differ in length")
    for name, count in (("shape", shapes), ("candidate", cands)):
        a = arrays[name]
        if len(a) and (a.min() < 0 or a.max() >= count):
            problems.append(f"entries: {name} is not an index into {name}s")
    us = arrays["median_us"]
    if len(us) and not (us > 0).all():
        problems.append("entries: median_us holds a value that is not > 0")
    return problems


def pack(data: Mapping[str, Any]) -> dict:
    """A compact table with its columns packed (as `write_table` writes it)."""
    cols = data["entries"]
    return {**data, "entries": {name: {"dtype": PACKED[name], "base64": base64.b64encode(
        np.asarray(cols[name], dtype=PACKED[name]).tobytes()).decode()} for name in COLUMNS}}


def unpack(data: dict) -> dict:
    """A compact table with packed columns as lists of numbers (what dispatch reads); a
    table whose columns are lists already is returned as it is. Validate it first."""
    cols = data.get("entries")
    if not (isinstance(cols, dict) and all(type(cols.get(c)) is dict for c in COLUMNS)):
        return data
    return {**data, "entries": {name: _array(name, cols[name]).tolist() for name in COLUMNS}}


def compact_table(data: Mapping[str, Any]) -> dict:
    """The compact form of a table (module docstring): its header and every entry, in its
    order, with what dispatch and the cost model read of them. Raises TableError for an
    invalid table."""
    if problems := validate(dict(data)):
        raise TableError("refusing to compact an invalid table: " + "; ".join(problems[:3]))
    if data["schema"] == COMPACT_SCHEMA:
        return dict(data)
    cands: dict[tuple, int] = {}  # (rung, sorted configuration) -> index
    configs: list[list] = []  # [rung, configuration] by index
    shapes: dict[tuple, int] = {}
    cols: dict[str, list] = {c: [] for c in COLUMNS}
    for e in data["entries"]:
        key = (e["rung"], tuple(sorted(e["config"].items())))
        if key not in cands:
            cands[key] = len(configs)
            configs.append([e["rung"], dict(e["config"])])
        s = shapes.setdefault((*shape_key(e), aligned_of(e)), len(shapes))
        for name, v in zip(COLUMNS, (s, cands[key], e["median_us"], e["vs_cublas"])):
            cols[name].append(v)
    return {**{k: data.get(k) for k in HEADER}, "schema": COMPACT_SCHEMA,
            "candidates": configs, "shapes": [list(s) for s in shapes], "entries": cols}


def expand(data: Mapping[str, Any], rows: Iterable[int] | None = None) -> list[dict]:
    """A compact table's entries (those at `rows`, else all) as the full form's (the fields
    dispatch reads); a candidate's configuration is one dict shared by its entries, to be
    read, not changed."""
    cands, shapes, cols = data["candidates"], data["shapes"], data["entries"]
    shape, cand, us, vs = cols["shape"], cols["candidate"], cols["median_us"], cols["vs_cublas"]
    out = []
    for row in range(len(shape)) if rows is None else rows:
        M, N, K, layout, batch, aligned = shapes[shape[row]]
        rung, config = cands[cand[row]]
        out.append({"M": M, "N": N, "K": K, "layout": layout, "batch": batch,
                    "aligned": aligned, "rung": rung, "config": config,
                    "median_us": us[row], "vs_cublas": vs[row]})
    return out


@dataclass(frozen=True)
class Table:
    """A tuning table as dispatch reads it, of either form (`compact`)."""

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
    def compact(self) -> bool:
        return self.data.get("schema") == COMPACT_SCHEMA

    @cached_property
    def entries(self) -> list[dict]:
        """Every entry, as dicts (a compact table's made once, on first use)."""
        return expand(self.data) if self.compact else self.data["entries"]

    def winners(self) -> list[dict]:
        """The fastest entry of each shape (`winners`), in the order shapes first appear."""
        return self.data["winners"] if not self.compact else winners(self.entries)

    def full(self) -> dict:
        """The table in the full form (a compact one's entries with what it keeps of them)."""
        if not self.compact:
            return dict(self.data)
        return {**{k: self.data.get(k) for k in HEADER}, "schema": TABLE_SCHEMA,
                "entries": self.entries, "winners": self.winners()}

    def shapes(self) -> dict[tuple, list[dict]]:
        """shape_key -> the shape's entries, in the order shapes first appear."""
        if self.compact:  # grouped by the shape each entry names
            keys = [tuple(s[:5]) for s in self.data["shapes"]]
            grouped: dict[tuple, list[dict]] = {k: [] for k in keys}
            for i, e in zip(self.data["entries"]["shape"], self.entries):
                grouped[keys[i]].append(e)
            return grouped
        out: dict[tuple, list[dict]] = {}
        for e in self.entries:
            out.setdefault(shape_key(e), []).append(e)
        return out

    def label(self) -> str:
        return f"{self.where}: {self.path}" if self.path else self.where


def read_table(path: str | Path, where: str | None = None, *, checked: bool = False
               ) -> Table:
    """A table file, checked; raises TableError naming the file and the problem. `checked`
    (the user's table in the cache): read only if it may be trusted, else trust.Untrusted."""
    path = Path(path)
    try:
        raw = trust.read_file(path) if checked else path.read_bytes()
        data = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
    except (OSError, ValueError) as exc:
        raise TableError(f"{path}: cannot read a tuning table ({exc})") from None
    if problems := validate(data):
        raise TableError(f"{path}: not a valid tuning table: " + "; ".join(problems[:3]))
    return Table(unpack(data), where or str(path), path)


def write_table(data: Mapping[str, Any], path: str | Path) -> Path:
    """Write a table (either form) atomically (readers see the old file or the whole new
    one), readable by all and writable by its owner alone, so the user's table stays
    trusted; the cache's tables/ directory is made private (0o700) like the rest of the
    cache. A path ending in .gz is written gzipped (the package's table); a compact table
    without indentation (it is for dispatch, not for reading)."""
    if problems := validate(data):
        raise TableError("refusing to write an invalid table: " + "; ".join(problems[:3]))
    path = Path(path)
    if path.parent == cache_dir() / "tables":
        make_cache_subdir("tables")
    compact = data.get("schema") == COMPACT_SCHEMA
    text = (json.dumps(pack(unpack(dict(data))), separators=(",", ":")) if compact
            else json.dumps(data, indent=1)) + "\n"
    write_atomic(path, gzip.compress(text.encode(), mtime=0) if path.suffix == ".gz" else text,
                 mode=0o644)
    cache.clear_cache()
    return path


def user_table_path(gpu_name: str) -> Path:
    return cache_dir() / "tables" / f"{slug(gpu_name)}.json"


def package_table_path(gpu_name: str) -> Path:
    return PACKAGE_TABLE_DIR / f"{slug(gpu_name)}.json.gz"


def load_table(gpu_name: str) -> Table | None:
    """This GPU's table: the user's cache directory first, then the package; None when
    neither has one. A broken file, or a user table that may not be trusted, is skipped
    with a warning, never fatal to a GEMM."""
    if gpu_name in cache.tables:
        return cache.tables[gpu_name]
    found = None
    for where, path in (("user cache", user_table_path(gpu_name)),
                        ("package", package_table_path(gpu_name))):
        if not path.is_file():
            continue
        mine = where == "user cache"
        try:
            if mine and (refused := cache_refusal("tables")):
                raise trust.Untrusted(*refused)
            table = read_table(path, where, checked=mine)
        except trust.Untrusted as exc:
            trust.warn_once(("tables", path.parent), f"the tuning table {path} is not used: "
                            f"{exc}, so someone else could have written it; dispatch uses "
                            f"the package's table instead ({cache_advice(exc.path)})",
                            stacklevel=2)
            continue
        except TableError as exc:
            warnings.warn(f"{exc}; ignored", stacklevel=2)
            continue
        if table.gpu != gpu_name:
            warnings.warn(f"{path}: a table for {table.gpu!r}, not {gpu_name!r}; ignored",
                          stacklevel=2)
            continue
        found = table
        break
    cache.tables[gpu_name] = found
    return found

