"""The cost model: where the table is too far from a request to trust, each broadly measured
candidate's time is predicted from how it would cover the request, and the fastest runs.

A table entry says how fast a candidate (a rung at a configuration) ran at one shape. The
rules of waves.py reason about one configuration, the rung's default, and at a skinny or
batched request far from every measured shape they can pick a 128 x 256 tile for a C that
is 4 columns wide. The model instead fits, for every candidate measured at MIN_SHAPES or
more of the table's shapes, the time it took there as

    t = a + b·X + c·X·[A column-major] + d·X·[B column-major] + e·X·[unaligned]
          + f·P + g·Y                                              (µs; a..g >= 0)

    X  k-iterations on the busiest block slot: the critical path of the decomposition
       (data-parallel: ceil(tiles / slots) waves of ceil(K / BK); split-K s: ceil(tiles·s /
       slots) of ceil(ceil(K / BK) / s); Stream-K: its whole waves plus the streamed share)
    P  partial-tile floats written and read by a fix-up, in millions
    Y  the DRAM traffic of reading A and B once and writing C, in MB
    a  what a call costs before any of that: launch, host work, a pipeline's fill

by least squares on the relative error (weights 1/t), coefficients held non-negative (a
negative one is dropped and the rest refitted). The fits are made once, by `sgemmlab tune
--fit-model` on the machine that builds the package (it needs each candidate's registers
from ptxas for its block slots), and ship beside the table as <gpu-slug>.model.json.

A fit is trusted only over the products it was fitted to (`Fitted.covers`: outputs M N
batch and depth K within a factor SPAN_MARGIN of the range its table entries span), and it
never predicts k-iterations faster than the best share of the SM's FP32 rate its candidate
reached in the table (`Fitted.rate`, `full_rate_us`): the mid-size tiles, measured only at
mid-size products where launches and memory dominate, were otherwise fitted an iteration
time no SM can keep up and chosen for the largest.

Where a memory-bound rung (15-17, registry.FAMILY) serves a request the table is too far
from, that rung runs, not the model's choice: the fits are of isolated calls, where a launch
hides the kernel, and the model's small tiles lost to the family's kernels back to back
(3×4×8 TT: 1.31 → 1.01 of cuBLAS) and its 128×256 tiles lost to rung 17 at K = 8
(6587×1084×8 TT: 1.05 → 0.42; bench/random-mix-300-s3401-20261203T133547Z against
…T134736Z).

`sgemmlab tune --validate` judges the model beside the table's blend: a tenth of the
table's shapes left out at a time, the candidates refitted on the rest, and the one
predicted fastest at a left-out shape compared with the best measured there
(tune/validate.py, `model_folds`). Between measured shapes it chooses about as well as the
blend (lookup.MODEL_TRANSFER lets the blend use it there), so alone it serves only past
MAX_DISTANCE, where the blend has no neighbours; unlike the rules it never gives a skinny
or batched product a tile many times its size.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from .. import registry
from ..registry import Config, Rung, config_key
from ..runtime import decompose
from ..runtime.device import slug
from . import cache
from .request import Request

MODEL_SCHEMA = "sgemmlab.model/1"
MIN_SHAPES = 200  # a candidate measured at fewer shapes is not modelled
TERMS = ("launch", "iterations", "iterations_ta", "iterations_tb", "iterations_unaligned",
         "fixup_mfloats", "traffic_mb")
SHOWN = 3  # candidates a reason names
SPAN_MARGIN = 2.0  # a fit serves products up to this factor past the range it was fitted to


def _k_step(rung: Rung, cfg: Config, K: int) -> int:
    """The K a rung's block covers per iteration: its k-tile, rungs 15-16's quantum of 128,
    or the whole of K (rung 17 keeps K in registers)."""
    if "BK" in cfg:
        return cfg["BK"]
    if "splitk" in rung.features:
        return 128
    return K


def _cover(rung: Rung, cfg: Config, M: int, N: int, K: int, batch: int, slots: int
           ) -> tuple[int, int, int]:
    """(k-iterations on the busiest block slot, partial-tile floats of the fix-up, blocks
    of work) for `rung` at `cfg` over one product (module docstring)."""
    rows, cols = rung.tile(cfg)
    tiles = -(-M // rows) * -(-N // cols) * batch
    kt = -(-K // _k_step(rung, cfg, K))
    split = cfg.get("SPLIT", 1)
    if "streamk" in rung.features and split >= 2:
        parts = min(split, kt)
        return (-(-tiles * parts // slots) * -(-kt // parts), tiles * parts * rows * cols,
                tiles * parts)
    if "streamk" in rung.features and split == 0:
        p = decompose.streamk(0, cfg.get("FIXUP", 0), rows, cols, cfg["BK"], M, N, K, batch, slots)
        x = p.dp_tiles // slots * kt + (-(-p.sk_tiles * kt // p.sk_blocks) if p.sk_tiles else 0)
        return x, 2 * p.sk_tiles * rows * cols, max(p.grid, 1)
    if "splitk" in rung.features:
        p = decompose.splitk(split, rows, cols, _k_step(rung, cfg, K), M, N, K, batch, slots,
                        rows_on_x=rung.rows_on_x)
        return (-(-tiles * p.parts // slots) * -(-kt // p.parts),
                tiles * p.parts * rows * cols if p.parts > 1 else 0, tiles * p.parts)
    return -(-tiles // slots) * kt, 0, tiles


def terms(rung: Rung, cfg: Config, M: int, N: int, K: int, batch: int, trans_a: bool,
          trans_b: bool, aligned: bool, slots: int) -> list[float]:
    """The model's terms (TERMS) for `rung` at `cfg` over one request (module docstring)."""
    x, partial, _ = _cover(rung, cfg, M, N, K, batch, slots)
    traffic = 4 * batch * (M * K + K * N + M * N)
    return [1.0, float(x), float(x * trans_a), float(x * trans_b), float(x * (not aligned)),
            partial / 1e6, traffic / 1e6]


def full_rate_us(rung: Rung, cfg: Config, M: int, N: int, K: int, batch: int, slots: int,
                 gpu_name: str, sm_count: int) -> float:
    """The time (µs) the busiest slot's k-iterations would take at the SM's whole FP32 rate,
    shared by the blocks resident beside it (as many as the work fills the SMs with, at
    most the occupancy's); 0 for a configuration without a block tile and k-tile (rungs
    15-17)."""
    from .waves import gpu_limits

    if not {"BM", "BN", "BK"} <= set(cfg):
        return 0.0
    g = gpu_limits(gpu_name, sm_count)[0]
    x, _, blocks = _cover(rung, cfg, M, N, K, batch, slots)
    share = max(1, min(slots // g.sms, -(-min(blocks, slots) // g.sms)))
    return x * cfg["BM"] * cfg["BN"] * cfg["BK"] * share / (g.ffma_lanes * g.clock_ghz * 1e3)


def fit(rows: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Non-negative coefficients minimising the relative error of rows @ coef against times
    (a negative coefficient's term is dropped and the rest refitted)."""
    weight = 1.0 / times
    keep = list(range(rows.shape[1]))
    while True:
        coef, *_ = np.linalg.lstsq(rows[:, keep] * weight[:, None], np.ones_like(times),
                                   rcond=None)
        if (coef >= 0).all() or len(keep) == 1:
            break
        keep.pop(int(np.argmin(coef)))
    out = np.zeros(rows.shape[1])
    out[keep] = np.maximum(coef, 0.0)
    return out


@dataclass(frozen=True)
class Fitted:
    rung: str
    config: Mapping[str, int]
    slots: int  # block slots on the GPU (SMs x resident blocks)
    coef: tuple[float, ...]
    shapes: int  # table entries fitted
    error: float  # median |ln(predicted / measured)| over them
    #: (least, most) outputs M N batch and (least, most) K of the entries fitted
    span: tuple[int, int, int, int] = (1, 2**62, 1, 2**62)
    #: the share of the SM's FP32 rate its k-iterations reached (`_best_rate`)
    rate: float = 1.0

    def covers(self, req: Request) -> bool:
        """The request's outputs and depth lie within SPAN_MARGIN of the fitted range."""
        c_lo, c_hi, k_lo, k_hi = self.span
        c = req.M * req.N * req.batch
        return (c_lo / SPAN_MARGIN <= c <= c_hi * SPAN_MARGIN
                and k_lo / SPAN_MARGIN <= req.K <= k_hi * SPAN_MARGIN)

    def predict(self, req: Request) -> float:
        """The fitted time, and never less than the launch cost plus the k-iterations at
        the best share of the SM's FP32 rate the candidate was measured to reach (`rate`,
        `full_rate_us`): a fit made mostly of small products, where launches and memory
        dominate, can promise a large one more than an SM does."""
        r = registry.rung(self.rung)
        t = terms(r, dict(self.config), req.M, req.N, req.K, req.batch, req.trans_a,
                  req.trans_b, req.aligned, self.slots)
        full = full_rate_us(r, dict(self.config), req.M, req.N, req.K, req.batch, self.slots,
                            req.gpu_name, req.sm_count)
        return max(float(np.dot(t, self.coef)), self.coef[0] + full / self.rate)

    def as_dict(self) -> dict:
        return {"rung": self.rung, "config": dict(self.config), "slots": self.slots,
                "coef": list(self.coef), "shapes": self.shapes, "error": self.error,
                "span": list(self.span), "rate": self.rate}


def fit_entries(entries: Iterable[Mapping[str, Any]], slots_of,
                gpu_name: str = "NVIDIA H200", sm_count: int = 132) -> list[Fitted]:
    """A Fitted per candidate measured at MIN_SHAPES or more of `entries` (table entries)
    on `gpu_name`; `slots_of(rung, config)` gives a candidate's block slots there (None:
    not modelled)."""
    groups: dict[tuple[str, str], list] = {}
    for e in entries:
        try:
            r = registry.rung(e["rung"])
        except KeyError:
            continue
        if r.is_legal(e["config"]):
            groups.setdefault((r.label, config_key(e["config"])), []).append(e)
    out = []
    for (label, _), group in sorted(groups.items()):
        if len(group) < MIN_SHAPES:
            continue
        r = registry.rung(label)
        cfg = dict(group[0]["config"])
        slots = slots_of(r, cfg)
        if not slots:  # unknown here (a candidate the slots were not given for)
            continue
        rows = np.array([terms(r, cfg, e["M"], e["N"], e["K"], e.get("batch", 1),
                               e.get("layout", "NN")[0] == "T",
                               e.get("layout", "NN")[1] == "T", e.get("aligned", True), slots)
                         for e in group])
        times = np.array([float(e["median_us"]) for e in group])
        coef = fit(rows, times)
        error = float(np.median(np.abs(np.log(np.maximum(rows @ coef, 1e-9) / times))))
        outputs = [e["M"] * e["N"] * e.get("batch", 1) for e in group]
        depths = [e["K"] for e in group]
        full = np.array([full_rate_us(r, cfg, e["M"], e["N"], e["K"], e.get("batch", 1), slots,
                                      gpu_name, sm_count) for e in group])
        rate = _best_rate(full, times - coef[0]) if full.any() else 1.0
        out.append(Fitted(label, cfg, slots, tuple(round(float(c), 9) for c in coef),
                          len(group), round(error, 4),
                          (min(outputs), max(outputs), min(depths), max(depths)), rate))
    return out


RATE_FROM_US = 100.0  # the rate is read off entries that spent this long past the launch
RATE_QUANTILE = 0.95  # ... as this quantile of them (one lucky timing does not set it)


def _best_rate(peak_us: np.ndarray, busy_us: np.ndarray) -> float:
    """The share of the FP32 rate a candidate's k-iterations reached: over the entries that
    spent RATE_FROM_US or more past the launch cost, the RATE_QUANTILE of (their
    k-iterations at the full rate / that time); 1 where none did (no claim to cap)."""
    long = busy_us >= RATE_FROM_US
    if not long.any():
        return 1.0
    return round(float(np.clip(np.quantile(peak_us[long] / busy_us[long], RATE_QUANTILE),
                               0.05, 1.0)), 4)


def model_path(gpu_name: str) -> Path:
    from .table import PACKAGE_TABLE_DIR

    return PACKAGE_TABLE_DIR / f"{slug(gpu_name)}.model.json"


def write_model(gpu_name: str, sm_count: int, fitted: list[Fitted], sources: list[str],
                path: Path | None = None) -> Path:
    path = path or model_path(gpu_name)
    path.write_text(json.dumps({"schema": MODEL_SCHEMA, "gpu": gpu_name,
                                "sm_count": sm_count, "terms": list(TERMS),
                                "min_shapes": MIN_SHAPES, "sources": sources,
                                "candidates": [f.as_dict() for f in fitted]}, indent=1) + "\n")
    return path


_MODELS: dict[str, tuple[int, list[Fitted]] | None] = {}


def load_model(gpu_name: str) -> tuple[int, list[Fitted]] | None:
    """(SM count, fitted candidates) shipped for this GPU, or None. A file that does not
    read as this schema is skipped with a warning (the rules decide then), never fatal to
    a GEMM, as a broken table is."""
    if gpu_name not in _MODELS:
        path = model_path(gpu_name)
        found = None
        if path.is_file():
            try:
                d = json.loads(path.read_text())
                if d.get("schema") == MODEL_SCHEMA and d.get("terms") == list(TERMS):
                    found = (int(d["sm_count"]), [
                        Fitted(c["rung"], dict(c["config"]), int(c["slots"]),
                               tuple(float(x) for x in c["coef"]), int(c["shapes"]),
                               float(c["error"]), tuple(c["span"]), float(c["rate"]))
                        for c in d["candidates"]])
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                warnings.warn(f"{path}: not a cost model sgemmlab can read ({exc!r}); "
                              "ignored", stacklevel=2)
        _MODELS[gpu_name] = found
    return _MODELS[gpu_name]


cache.on_clear(_MODELS.clear)


PROXY_KEYS = ("BM", "BN", "SPLIT", "RM", "RN", "WARPS")  # what a stand-in fit must share


def fit_for(gpu_name: str, rung: str, config: Mapping[str, int]) -> Fitted | None:
    """The fit that stands for a candidate: its own, else the one of its rung (or of the
    rung it derives from: 22-25 from 14 and 13) sharing most of PROXY_KEYS with it (the
    tile, the split); None without a model."""
    got = load_model(gpu_name)
    if got is None:
        return None
    key = config_key(config)
    exact = [f for f in got[1] if f.rung == rung and config_key(f.config) == key]
    if exact:
        return exact[0]
    r = registry.rung(rung)
    base = registry.rung(r.base).label if r.base is not None else rung
    same = [f for f in got[1] if f.rung == base]
    if not same:
        return None
    return max(same, key=lambda f: sum(f.config.get(k) == config.get(k) for k in PROXY_KEYS))


def ranked(req: Request) -> list[tuple[float, Fitted]]:
    """The modelled candidates that can serve `req`, fastest predicted first (empty without
    a model for this GPU and SM count)."""
    got = load_model(req.gpu_name)
    if got is None or got[0] != req.sm_count:
        return []
    out = []
    for f in got[1]:
        r = registry.rung(f.rung)
        if not req.needs <= r.features or not r.serves(req.M, req.N, req.K):
            continue
        if req.deterministic and not r.deterministic(f.config) or not f.covers(req):
            continue
        try:
            us = f.predict(req)
        except (OverflowError, ValueError):  # a grid this candidate cannot launch
            continue
        if math.isfinite(us):
            out.append((us, f))
    out.sort(key=lambda p: p[0])
    return out
