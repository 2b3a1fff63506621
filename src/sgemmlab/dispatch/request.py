"""A request (what the caller asks for) and a choice (what runs, and why).

Nothing here decides anything: `sgemmlab.dispatch.choose` does (see the package docstring).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from .. import registry
from ..registry import Config, Rung, config_key

LAYOUTS = ("NN", "TN", "NT", "TT")  # first letter: A, second: B; T = column-major


def layout_of(trans_a: bool, trans_b: bool) -> str:
    return ("T" if trans_a else "N") + ("T" if trans_b else "N")



def decomposition(rung: Rung, cfg: Config) -> str:
    """'data-parallel', 'Stream-K, atomic fix-up', 'split-K x4, fixed-order fix-up', ..."""
    if "SPLIT" not in cfg or not {"streamk", "splitk"} & rung.features:
        return "data-parallel"
    split = cfg["SPLIT"]
    if "splitk" in rung.features:  # rung 18: blockIdx.z parts, summed in a fixed order
        if split == 1:
            return "data-parallel"
        kind = "split-K, parts to fill the GPU" if split == 0 else f"split-K x{split}"
        return f"{kind}, fixed-order fix-up"
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
    source: str  # "table" | "model" | "heuristic" | "forced"
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

