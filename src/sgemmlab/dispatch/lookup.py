"""The table lookup: the measured shapes around a request, and the candidate that did best
over them.

Nearness is a distance in log-space, because GEMM behaviour changes with ratios, not
differences:

    d = sqrt( ln(M/M')^2 + ln(N/N')^2 + ln(K/K')^2 + ln(batch/batch')^2 )
        + 0.5 if the layout differs  + 0.25 if the alignment class differs

At a measured shape (d = 0) its fastest usable entry runs. Elsewhere the candidates (a rung
at a configuration) are scored over the NEIGHBOURS nearest measured shapes within
BLEND_RADIUS: a weighted mean of ln(paired ratio against cuBLAS), weight 1 / (d + 0.05)^2,
over the neighbours where the candidate was measured; a candidate measured at less than
SUPPORT of the neighbours' total weight is not scored (one far measurement says little).
The best score runs. One shape's winner can be another's loser by a split factor or a
tile; a candidate good all around the request is the safer bet, and leaving grid points out
and predicting them (tune/validate.py) measures how safe.

The table's shape grid (tune/grid.py) is log-spaced by about 4x per step: any shape of
[1, 16384]^3 lies within 1.22 of a grid point. A request whose nearest measured shape is
farther than MAX_DISTANCE = 1.25 is not trusted to the table: the heuristic decides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping

import numpy as np

from .. import registry
from ..registry import Rung, config_key
from . import cache
from .request import Choice, Request, _frozen, decomposition
from .table import Table, _rank, aligned_of, expand, shape_key

MAX_DISTANCE = 1.25  # farther than this, a measured shape says little about the request
LAYOUT_PENALTY = 0.5
ALIGN_PENALTY = 0.25
NEIGHBOURS = 8  # measured shapes a blended choice is scored over
BLEND_RADIUS = 2.0  # ... at most this far away
SUPPORT = 0.3  # a candidate needs measurements carrying this share of the weight
WEIGHT_POWER = 2  # a neighbour at distance d weighs 1 / (d + 0.05)^WEIGHT_POWER
#: How much of the cost model's predicted change from a neighbour to the request the blend
#: applies to the neighbour's ratio (0: none, the plain blend). A candidate's ratio at a
#: neighbour n is carried to the request as ln r_n + MODEL_TRANSFER * ln(t(n) / t(req)),
#: t the model's time for that candidate (dispatch/model.py, `fit_for`): a 128 x 256 tile
#: that won at 16384 x 251 then counts less at 6155 x 292, where it leaves SMs idle. In
#: leave-one-out over the H200 table 0.5 chose a little better than 0 (`sgemmlab tune
#: --validate` prints both); on a mixed random set in the bench it did not (isolated: 53
#: problems under 0.9 of cuBLAS at 0, 72 at 0.5; back to back 70 and 71;
#: bench/random-mix-300-s3404-20261203T162552Z to ...T162818Z), so it stays off.
MODEL_TRANSFER = 0.0


_LEGAL: dict[tuple, Rung | None] = {}  # (rung label, configuration items) -> _known's answer


def _known(e: Mapping[str, Any]) -> Rung | None:
    """The entry's rung while the entry still describes this package: the rung exists and
    the configuration is legal (a table can outlive a registry change). Decided once per
    distinct (rung, configuration): a table has thousands of entries and a few dozen."""
    key = (e["rung"], tuple(sorted(e["config"].items())))
    if key not in _LEGAL:
        try:
            r = registry.rung(e["rung"])
        except KeyError:
            r = None
        _LEGAL[key] = r if r is not None and r.is_legal(e["config"]) else None
    return _LEGAL[key]


def _known_shared(e: Mapping[str, Any], seen: dict) -> Rung | None:
    """`_known(e)`, looked up by the identity of e's configuration first: a compact table's
    entries share one configuration dict per candidate (table.py), and sorting each
    entry's to look it up costs more than the rest of the index (`seen` lives while the
    table's entries do)."""
    key = (e["rung"], id(e["config"]))
    if key not in seen:
        seen[key] = _known(e)
    return seen[key]


def _usable(e: Mapping[str, Any], req: Request) -> bool:
    """The entry can serve the request: a known rung that computes this shape, with the
    features the request needs, bit-reproducible if asked."""
    r = _known(e)
    if r is None or not req.needs <= r.features or not r.serves(req.M, req.N, req.K):
        return False
    return not req.deterministic or r.deterministic(e["config"])


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


@dataclass(frozen=True)
class Blend:
    """A table's answer to a request: the entry to run (the chosen candidate's measurement
    at the nearest shape where it was measured), the distance of the nearest measured shape,
    the overall winner there when the request's constraints excluded it, and how the choice
    was scored (1 shape: an exact hit or a lone neighbour)."""

    entry: dict
    distance: float
    overall: dict | None
    shapes: int  # neighbours scored over
    score: float  # the chosen candidate's weighted geometric-mean ratio
    runner_up: tuple[str, float] | None = None  # (candidate, score) next best
    candidates: frozenset = frozenset()  # rung labels measured around the request


def _key(e: Mapping[str, Any]) -> tuple[str, str]:
    return e["rung"], config_key(e["config"])


def _grouped(shapes: list[list], column: list[int]
             ) -> tuple[list[tuple], list[bool], tuple[np.ndarray, list[int]]]:
    """A compact table's entries grouped by shape_key: (the keys in order of first use, each
    one's alignment class (its first entry's), (rows, starts): group i's entries are
    rows[starts[i]:starts[i + 1]], in table order). Two shape rows may differ in alignment
    alone and share a key."""
    col = np.asarray(column, dtype=np.int64)
    # the common case: a table keeps a shape's entries together, each run of one shape row
    # a group of its own, its entries a range of rows
    starts = [0, *(np.flatnonzero(col[1:] != col[:-1]) + 1).tolist()] if len(col) else []
    keys: dict[tuple, int] = {}
    aligned: list[bool] = []
    for r in col[starts].tolist():
        key = tuple(shapes[r][:5])
        if key in keys:
            break  # a shape met again after others: sorted below
        keys[key] = len(keys)
        aligned.append(bool(shapes[r][5]))
    else:
        return list(keys), aligned, (np.arange(len(col)), starts + [len(col)])
    keys, aligned = {}, []
    place = np.full(len(shapes), -1)  # a row of `shapes` -> its group
    rows, first = np.unique(col, return_index=True)
    for r in rows[np.argsort(first)].tolist():  # shape rows in the order entries use them
        key = tuple(shapes[r][:5])
        if key not in keys:
            keys[key] = len(keys)
            aligned.append(bool(shapes[r][5]))
        place[r] = keys[key]
    of = place[col]
    ends = np.cumsum(np.bincount(of, minlength=len(keys))).tolist()
    return list(keys), aligned, (np.argsort(of, kind="stable"), [0] + ends)


class _Index:
    """A table made ready for lookups, once per loaded table: its measured shapes and their
    log sizes as one array, so a request's distances to all of them are one numpy
    expression. A shape's entries (and each one's rung, checked against the registry once
    per distinct configuration) are made when a request first looks at that shape: a
    request reads a few shapes of a thousand, and the first product of a program pays for
    what it reads (a compact table's columns are grouped by shape in one pass)."""

    def __init__(self, table: Table):
        self._known: dict[tuple[str, int], Rung | None] = {}  # (rung, id(config)) -> _known
        if table.compact:
            d = table.data
            self.keys, aligned, self._members = _grouped(d["shapes"], d["entries"]["shape"])
            self._data = d
            self._entries: list[list[dict] | None] = [None] * len(self.keys)
        else:
            grouped = table.shapes()
            self.keys, self._entries = list(grouped), list(grouped.values())
            aligned = [aligned_of(es[0]) for es in self._entries]
        self._rungs: list[list[Rung | None] | None] = [None] * len(self.keys)
        self.logs = np.log(np.array([[M, N, K, b] for M, N, K, _, b in self.keys] or
                                    np.zeros((0, 4)), dtype=np.float64).reshape(-1, 4))
        self.layouts = np.array([k[3] for k in self.keys], dtype=object)
        self.aligned = np.array(aligned, dtype=bool)

    def entries(self, i: int) -> list[dict]:
        """Shape i's entries, as the full form's dicts."""
        out = self._entries[i]
        if out is None:
            rows, starts = self._members
            out = self._entries[i] = expand(self._data, rows[starts[i]:starts[i + 1]].tolist())
        return out

    def rungs(self, i: int) -> list[Rung | None]:
        out = self._rungs[i]
        if out is None:
            out = self._rungs[i] = [_known_shared(e, self._known) for e in self.entries(i)]
        return out

    def distances(self, req: Request) -> np.ndarray:
        """`distance(req, shape)` for every shape (the module docstring's formula)."""
        q = np.log(np.array([req.M, req.N, req.K, req.batch], dtype=np.float64))
        d = np.sqrt(((self.logs - q) ** 2).sum(axis=1))
        return (d + LAYOUT_PENALTY * (self.layouts != req.layout)
                + ALIGN_PENALTY * (self.aligned != req.aligned))

    def usable(self, i: int, req: Request) -> list[dict]:
        """The entries of shape i that can serve the request (as `_usable` decides)."""
        return [e for e, r in zip(self.entries(i), self.rungs(i)) if r is not None
                and req.needs <= r.features and r.serves(req.M, req.N, req.K)
                and (not req.deterministic or r.deterministic(e["config"]))]

    def known(self, i: int) -> list[dict]:
        return [e for e, r in zip(self.entries(i), self.rungs(i)) if r is not None]


_INDEXES: dict[int, tuple[Table, _Index]] = {}  # id(table) -> (the table, its index)
cache.on_clear(_INDEXES.clear)
cache.on_clear(_LEGAL.clear)


def _index(table: Table) -> _Index:
    hit = _INDEXES.get(id(table))
    if hit is None or hit[0] is not table:
        hit = _INDEXES[id(table)] = (table, _Index(table))
    return hit[1]


def _transfer(table: Table, req: Request, key: tuple, usable: list[dict], share: float):
    """entry -> ln(model time at the neighbour `key` / model time at the request) times
    `share`, for the usable entries of that neighbour (0 where no fit stands for one)."""
    from . import model

    M, N, K, layout, batch = key
    there = Request(M, N, K, req.gpu_name, req.sm_count, layout[0] == "T", layout[1] == "T",
                    batch, req.deterministic, aligned_of(usable[0]))
    out = {}
    for e in usable:
        f = model.fit_for(table.gpu, e["rung"], e["config"])
        try:
            a, b = (f.predict(there), f.predict(req)) if f else (0.0, 0.0)
        except (OverflowError, ValueError):  # a grid the candidate cannot launch
            a = b = 0.0
        out[id(e)] = share * math.log(a / b) if a > 0 and b > 0 else 0.0
    return out


def blend(table: Table, req: Request, skip: Callable[[tuple], bool] = lambda k: False,
          transfer: float | None = None) -> Blend | None:
    """The table's choice for the request (module docstring), or None when no measured shape
    has a usable entry. `skip(shape_key)` leaves shapes out (leave-one-out validation);
    `transfer` overrides MODEL_TRANSFER."""
    share = MODEL_TRANSFER if transfer is None else transfer
    idx = _index(table)
    dist = idx.distances(req)
    around = []  # (distance, usable entries, all entries, shape): the nearest usable shapes
    for i in np.argsort(dist, kind="stable"):
        d = float(dist[i])
        if around and (len(around) >= NEIGHBOURS or d > BLEND_RADIUS):
            break
        if skip(idx.keys[i]):
            continue
        if usable := idx.usable(i, req):
            around.append((d, usable, idx.known(i), idx.keys[i]))
    if not around:
        return None
    d0, usable0, known0, _ = around[0]
    overall0 = min(known0, key=_rank)
    if d0 == 0 or len(around) == 1:  # this very shape, or the only one within reach
        top = min(usable0, key=_rank)
        return Blend(top, d0, overall0 if overall0 is not top else None, 1,
                     float(top["vs_cublas"]), candidates=frozenset(e["rung"] for e in usable0))
    near = around
    weights = [1.0 / (d + 0.05) ** WEIGHT_POWER for d, _, _, _ in near]
    total = sum(weights)
    sums: dict[tuple, list] = {}  # candidate -> [sum w ln r, sum w, nearest entry]
    for (d, usable, _, key), w in zip(near, weights):
        moved = _transfer(table, req, key, usable, share) if share else {}
        for e in usable:
            acc = sums.setdefault(_key(e), [0.0, 0.0, e])
            acc[0] += w * (math.log(max(float(e["vs_cublas"]), 1e-9)) + moved.get(id(e), 0.0))
            acc[1] += w
    scored = sorted(((acc[0] / acc[1], k, acc[2]) for k, acc in sums.items()
                     if acc[1] >= SUPPORT * total), key=lambda x: (-x[0], x[1]))
    if not scored:  # nothing measured widely enough: the nearest shape's best
        top = min(usable0, key=_rank)
        return Blend(top, d0, overall0 if overall0 is not top else None, 1,
                     float(top["vs_cublas"]))
    score, _, e = scored[0]
    runner = (f"{scored[1][1][0]} {scored[1][1][1]}", math.exp(scored[1][0])) \
        if len(scored) > 1 else None
    excluded = overall0 if all(overall0 is not u for u in usable0) else None
    return Blend(e, d0, excluded, len(near), math.exp(score), runner,
                 frozenset(k[0] for k in sums))


def from_table(req: Request, table: Table, hit: Blend) -> Choice:
    e, d, overall = hit.entry, hit.distance, hit.overall
    r = registry.rung(e["rung"])
    cfg = dict(e["config"])
    shape = f"{e['M']}×{e['N']}×{e['K']} {e.get('layout', 'NN')}"
    if e.get("batch", 1) > 1:
        shape += f" batch {e['batch']}"
    exact = d == 0
    if hit.shapes > 1:
        lines = [f"best over the {hit.shapes} measured shapes around it (the nearest at "
                 f"distance {d:.3f} <= {MAX_DISTANCE}): {100 * hit.score:.1f} % of cuBLAS FP32 "
                 f"(paired), weighted geometric mean; measured {e['median_us']:.1f} µs, "
                 f"{100 * e['vs_cublas']:.1f} % at {shape}"]
        if hit.runner_up is not None:
            lines.append(f"next best: {hit.runner_up[0]} ({100 * hit.runner_up[1]:.1f} %)")
    else:
        lines = [(f"measured fastest at this very shape ({shape})" if exact else
                  f"measured fastest at the nearest shape {shape} (distance {d:.3f} <= "
                  f"{MAX_DISTANCE})") + f": {e['median_us']:.1f} µs, "
                 f"{100 * e['vs_cublas']:.1f} % of cuBLAS FP32 (paired)"]
    if overall is not None:
        winner = registry.rung(overall["rung"])
        if req.deterministic and not winner.deterministic(overall["config"]):
            why = "it is not bit-reproducible"
        elif not winner.serves(req.M, req.N, req.K):
            why = f"it computes {winner.domain} only"
        else:
            why = "it lacks a feature this call needs"
        lines.append(f"the measured shape's overall winner {overall['rung']} "
                     f"({decomposition(winner, overall['config'])}, "
                     f"{100 * overall['vs_cublas']:.1f} %) is not taken: {why}")
    if not req.aligned and r.vectorized and aligned_of(e):
        lines.append("operands unaligned here: the float4 paths fall back to scalar "
                     "accesses (measured aligned, so expect it slower than the table says)")
    return Choice(r.label, _frozen(cfg), decomposition(r, cfg), "table", "\n".join(lines),
                  entry=MappingProxyType(dict(e)), distance=d, table=table.label())

