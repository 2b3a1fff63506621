"""How good dispatch's choice is between measured shapes: leave each shape out of the table,
let dispatch choose there from the others (dispatch.lookup.blend), and compare what it chose
with the best candidate measured at that shape.

For each left-out shape S:
    predicted = the candidate blend() picks from every other shape's entries
    loss      = predicted's paired ratio at S / the best ratio measured at S   (<= 1)
A candidate not measured at S (it was not useful there, tune/grid.py) cannot be judged and
counts as a miss. This is harsher than real use: the nearest other grid point is a whole
grid step away (about 4x in one dimension), where a real request is at most half a step
from one.

`sgemmlab tune --validate` prints the summary (median and worst loss, how many shapes within
90 % and 97 % of their best) and the worst shapes, and writes them into a results file.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..dispatch import Request, Table, shape_key
from ..dispatch.lookup import _key, _usable, blend


@dataclass(frozen=True)
class Miss:
    shape: tuple  # (M, N, K, layout, batch)
    best: str  # the best candidate measured there
    best_ratio: float
    chosen: str  # what dispatch chose from the other shapes
    chosen_ratio: float | None  # its ratio there (None: not measured there)

    @property
    def loss(self) -> float:
        return (self.chosen_ratio or 0.0) / self.best_ratio

    def as_dict(self) -> dict:
        M, N, K, layout, batch = self.shape
        return {"M": M, "N": N, "K": K, "layout": layout, "batch": batch, "best": self.best,
                "best_vs_cublas": self.best_ratio, "chosen": self.chosen,
                "chosen_vs_cublas": self.chosen_ratio, "loss": self.loss}


def _label(e: dict) -> str:
    return " ".join(_key(e))


def leave_one_out(table: Table, gpu_name: str | None = None, sm_count: int | None = None,
                  transfer: float | None = None) -> list[Miss]:
    """One Miss per measured shape of the table (see the module docstring); `transfer`:
    the blend's lookup.MODEL_TRANSFER for this run."""
    gpu_name = gpu_name or table.gpu
    sm_count = sm_count or table.sm_count or 132
    out = []
    for shape, entries in table.shapes().items():
        M, N, K, layout, batch = shape
        req = Request(M, N, K, gpu_name, sm_count, layout[0] == "T", layout[1] == "T", batch,
                      False, bool(entries[0].get("aligned", True)))
        usable = [e for e in entries if _usable(e, req)]
        if not usable:
            continue
        best = max(usable, key=lambda e: e["vs_cublas"])
        hit = blend(table, req, skip=lambda s, me=shape: s == me, transfer=transfer)
        if hit is None:
            continue
        mine = {_key(e): e for e in usable}
        chosen = mine.get(_key(hit.entry))
        out.append(Miss(shape, _label(best), float(best["vs_cublas"]), _label(hit.entry),
                        float(chosen["vs_cublas"]) if chosen else None))
    return out


def summary(misses: list[Miss], worst: int = 10) -> dict:
    """Median and worst loss, shares within 90 % and 97 %, and the worst shapes."""
    if not misses:
        return {"shapes": 0}
    losses = [m.loss for m in misses]
    ranked = sorted(misses, key=lambda m: m.loss)
    return {"shapes": len(misses), "median_loss": statistics.median(losses),
            "geomean_loss": statistics.geometric_mean([max(x, 1e-9) for x in losses]),
            "worst_loss": ranked[0].loss,
            "within_90": sum(x >= 0.9 for x in losses) / len(losses),
            "within_97": sum(x >= 0.97 for x in losses) / len(losses),
            "unmeasured": sum(m.chosen_ratio is None for m in misses),
            "worst": [m.as_dict() for m in ranked[:worst]]}


#: the blend's MODEL_TRANSFER that --validate tries beside the one in force
TRANSFER_TRIED = 0.5
#: the model's cross-validation: shapes left out a tenth at a time (drawn by this seed)
MODEL_FOLDS, MODEL_SEED = 10, 1


def model_folds(table: Table, fitted, folds: int = MODEL_FOLDS) -> list[Miss]:
    """How well the cost model (dispatch/model.py) chooses where it has no measurement:
    the table's shapes split into `folds` parts at random; each part's shapes left out,
    every modelled candidate refitted on the rest (with `fitted`'s block slots), and the
    candidate predicted fastest at a left-out shape compared with the best modelled one
    measured there. One Miss per shape where a modelled candidate was measured."""
    import random

    from ..dispatch import model
    from ..registry import config_key

    slots = {(f.rung, config_key(f.config)): f.slots for f in fitted}
    by_shape = table.shapes()
    shapes = sorted(by_shape)
    rng = random.Random(MODEL_SEED)
    part = {s: rng.randrange(folds) for s in shapes}
    out = []
    for f in range(folds):
        kept = [e for e in table.entries if part[shape_key(e)] != f]
        refit = model.fit_entries(kept, lambda r, cfg: slots.get((r.label, config_key(cfg))),
                                  table.gpu, table.sm_count or 132)
        for shape in (s for s in shapes if part[s] == f):
            M, N, K, layout, batch = shape
            entries = by_shape[shape]
            measured = {(e["rung"], config_key(e["config"])): e for e in entries}
            req = Request(M, N, K, table.gpu, table.sm_count or 132, layout[0] == "T",
                          layout[1] == "T", batch, False, bool(entries[0].get("aligned", True)))
            scored = []
            for g in refit:
                e = measured.get((g.rung, config_key(g.config)))
                if e is not None and _usable(e, req) and g.covers(req):
                    scored.append((g.predict(req), e))
            if not scored:
                continue
            best = max((e for _, e in scored), key=lambda e: e["vs_cublas"])
            chosen = min(scored, key=lambda p: p[0])[1]
            out.append(Miss(shape, _label(best), float(best["vs_cublas"]), _label(chosen),
                            float(chosen["vs_cublas"])))
    return out
