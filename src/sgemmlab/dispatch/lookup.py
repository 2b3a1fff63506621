"""The table lookup: the nearest measured shape, and the best entry there that can serve.

Nearness is a distance in log-space, because GEMM behaviour changes with ratios, not
differences:

    d = sqrt( ln(M/M')^2 + ln(N/N')^2 + ln(K/K')^2 + ln(batch/batch')^2 )
        + 0.5 if the layout differs  + 0.25 if the alignment class differs

A table shape farther than MAX_DISTANCE = 0.75 (one dimension off by a factor of ~2.1, or
all three by ~1.5) is not trusted: the heuristic decides instead.
"""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import Any, Mapping

from .. import registry
from ..registry import Rung
from .request import Choice, Request, _frozen, decomposition
from .table import Table, _rank, aligned_of, shape_key

MAX_DISTANCE = 0.75  # farther than this, a measured shape says little about the request
LAYOUT_PENALTY = 0.5
ALIGN_PENALTY = 0.25


def _known(e: Mapping[str, Any]) -> Rung | None:
    """The entry's rung while the entry still describes this package: the rung exists and
    the configuration is legal (a table can outlive a registry change)."""
    try:
        r = registry.rung(e["rung"])
    except KeyError:
        return None
    return r if r.is_legal(e["config"]) else None


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


def from_table(req: Request, table: Table, e: dict, d: float, overall: dict | None
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
        why = "not bit-reproducible" if req.deterministic and not registry.rung(
            overall["rung"]).deterministic(overall["config"]) else "lacks a needed feature"
        lines.append(f"the shape's overall winner {overall['rung']} "
                     f"({decomposition(registry.rung(overall['rung']), overall['config'])}, "
                     f"{100 * overall['vs_cublas']:.1f} %) is {why}")
    if not req.aligned and r.vectorized and aligned_of(e):
        lines.append("operands unaligned here: the float4 paths fall back to scalar "
                     "accesses (measured aligned, so expect it slower than the table says)")
    return Choice(r.label, _frozen(cfg), decomposition(r, cfg), "table", "\n".join(lines),
                  entry=MappingProxyType(dict(e)), distance=d, table=table.label())

