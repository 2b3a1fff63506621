"""The shape grid a dispatch table is measured on, and the candidates measured there.

`sgemmlab tune --grid` measures every candidate at every grid shape (tune/table.py does the
measuring and writes the table); dispatch then chooses between grid points by blending the
neighbours' measurements (dispatch/lookup.py), and `sgemmlab tune --validate` checks that
choice by leaving each grid shape out and predicting it from the others (tune/validate.py).

The grid: M, N and K each on SIDES, log-spaced by about 4x (1, 4, 15, 64, 251, 1024, 4093,
16384: odd sizes and multiples of 4 alternate, so both alignment classes are measured),
every combination whose M N K is at most MAX_PRODUCT = 2^37 (the largest 2 MNK is 275
GFLOP, about 5 ms on the H200): 502 shapes. Any shape of [1, 16384]^3 lies within
sqrt(3) ln(4.27) / 2 = 1.26 of a grid point in dispatch's distance (at most 0.73 in one
dimension).
Column-major operands are measured on a coarser grid (LAYOUT_SIDES, every layout but NN),
batches on BATCH_SIDES x BATCHES.

The candidates (`grid_candidates`): rung 13 at its default; rung 14 at its default in
every decomposition its heuristic would take (Stream-K, data-parallel, split-K 2, 4 and 8,
atomic fix-up into C) and at 64 x 128 and 128 x 64 tiles (Stream-K and data-parallel); the
memory-bound rungs 15-17 at their defaults where they serve (15 and 16 with K split to
fill the GPU and without); rung 18 at SMALL_TILES with K split to fill the GPU. A
candidate is measured only where it can matter (`useful`).
"""

from __future__ import annotations

import itertools
from typing import Iterable

from .. import registry
from ..registry import Rung
from .table import useful as table_useful

SIDES = (1, 4, 15, 64, 251, 1024, 4093, 16384)
MAX_PRODUCT = 2**37
LAYOUT_SIDES = (1, 64, 1024, 4093)
BATCH_SIDES = (4, 64, 251)
BATCHES = (4, 32, 256)
MAX_BATCH_PRODUCT = 2**33

Shape = tuple[int, int, int]

#: Rung 18's tile shapes measured on the grid (the H200 tune of rung 18 picked among them:
#: results/nvidia-h200/tune/18_small_tiles-*).
SMALL_TILES = (
    {"BM": 64, "BN": 16, "BK": 32, "TM": 2, "TN": 2},  # the best geometric mean (its default)
    {"BM": 16, "BN": 64, "BK": 32, "TM": 2, "TN": 2},  # the same, wide
    {"BM": 32, "BN": 16, "BK": 16, "TM": 2, "TN": 2},  # the smallest of the best (256^3)
    {"BM": 32, "BN": 64, "BK": 16, "TM": 4, "TN": 4},  # the best at 32 x 4096 x 4096
)
#: Rung 14's smaller tiles: 64 x 128 (more tiles for mid-sized products, and M 17..64) and
#: 128 x 64 (N 17..64: a skinny C the default's 128 columns would half waste).
STREAMK_64 = {"BM": 64, "BN": 128, "BK": 16, "WM": 32, "WN": 64, "TM": 8, "TN": 8,
              "STAGES": 3, "PAD": 4, "REG_TRANSPOSE": 1}
STREAMK_64N = {**STREAMK_64, "BM": 128, "BN": 64, "WM": 64, "WN": 32}
#: Rung 14's mid-size tiles, the shapes cuBLAS runs at mid-size products (its kernel names
#: at the worst shapes of the mixed random runs: 64x64, 128x32 and 32x128 tiles of 128
#: threads, several blocks an SM; results/nvidia-h200/bench/worst-*): 4 warps of 32 x 32,
#: 4 x 8 a lane, 126-128 registers, four blocks an SM. Measured only at mid-size products
#: (`mid_range`), Stream-K and data-parallel.
MID_TILES = tuple({"BM": bm, "BN": bn, "BK": 16, "WM": 32, "WN": 32, "TM": 4, "TN": 8,
                   "STAGES": 3, "PAD": 4, "REG_TRANSPOSE": 1}
                  for bm, bn in ((64, 64), (128, 32), (32, 128)))
MID_MIN_C, MID_MAX_C = 2**12, 2**25  # outputs (M N batch) of a mid-size product
MID_SHAPES = {(t["BM"], t["BN"], t["TM"]) for t in MID_TILES}  # how `useful` knows them


#: The products of the models people run, at the batch sizes of decoding and small batches:
#: (N, K) of a linear layer's weight (out, in features) — LLaMA-7B/8B's 4096 / 11008 / 14336,
#: a 1.1B LLaMA's 2048 / 5632, BERT's 768 / 3072, the 1024 and 512 Transformers, the output
#: heads of a 32000-token vocabulary — and M the rows (tokens) of a call.
LAYER_WEIGHTS = ((4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (1024, 1024),
                 (3072, 768), (2048, 2048), (5632, 2048), (2048, 5632), (32000, 2048),
                 (1536, 512), (512, 512), (2048, 512), (512, 2048))
LAYER_ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
#: The rows (tokens) of a training step's backward products: a small batch to a large one.
TRAIN_ROWS = (128, 512, 2048, 8192)


def layer_shapes(layout: str = "NT", rows: Iterable[int] | None = None) -> list[Shape]:
    """The products of a linear layer y = x W^T (W is N x K, stored as torch stores it), in
    the layout torch sends each, at `rows` tokens:

    NT  the forward x @ W^T: (M, N, K), W read column-major (by default LAYER_ROWS:
        decoding, small batches; TRAIN_ROWS: prefill and a training step's forward);
    NN  the input gradient G @ W: (M, K, N) (by default TRAIN_ROWS);
    TN  the weight gradient, which torch computes as (G^T @ x)^T to give it W^T's layout:
        (N, K, M), G^T read column-major (by default TRAIN_ROWS).

    Measured by `sgemmlab tune --grid --layers [--layout ...] [--train-rows]` so dispatch
    knows the exact products a model sends instead of blending the coarse layout grid's;
    every shape keeps to MAX_PRODUCT, as the grid does."""
    if layout == "NT":
        rows = LAYER_ROWS if rows is None else tuple(rows)
        shapes = [(M, N, K) for N, K in LAYER_WEIGHTS for M in rows]
    elif layout in ("NN", "TN"):
        rows = TRAIN_ROWS if rows is None else tuple(rows)
        shapes = [(M, K, N) if layout == "NN" else (N, K, M)
                  for N, K in LAYER_WEIGHTS for M in rows]
    else:
        raise ValueError(f"a linear layer sends NT, NN and TN products, not {layout!r}")
    return [s for s in shapes if s[0] * s[1] * s[2] <= MAX_PRODUCT]


#: Rung 15's shapes tried at the layers' decode rows (M <= 16): the rows a block covers
#: (RM, matched to M: `layer_useful`), the columns per block and its warps, the unroll, with
#: K split to fill the GPU and not.
SKINNY_ROWS = ((32, 8), (32, 16), (64, 8), (64, 16))  # (BN, WARPS)
SKINNY_UNROLLS = (4, 8)


#: The large products of prefill and training (M N >= LARGE_C): the 128 x 256 tiles' other
#: variants besides the grid's rung 13 and 14 defaults: rungs 24 and 25 (the steady k-loop)
#: with the k-major operands through registers or by cp.async (which of the two is faster
#: depends on how many operands are k-major: NT has two, NN one, TN none), and rung 25 at
#: the patch shape that won 4096^3 NN. Where both operands are k-major (NT), also each one
#: alone through registers (LARGE_NT_VARIANTS: REG_TRANSPOSE 2 moves A, 3 moves B; in the
#: other layouts they compile to 1's or 0's kernel).
LARGE_C = 2**21
LARGE_VARIANTS = ({}, {"REG_TRANSPOSE": 0}, {"REG_TRANSPOSE": 1})
LARGE_NT_VARIANTS = ({"REG_TRANSPOSE": 2}, {"REG_TRANSPOSE": 3})
LARGE_PATCH = {"WM": 128, "WN": 32, "TM": 16, "TN": 8}


def large_candidates(gpu_name: str | None, layout: str = "NN") -> list[tuple[Rung, dict]]:
    """Rungs 24 (Stream-K and data-parallel) and 25 at LARGE_VARIANTS (and, in `layout`
    NT, LARGE_NT_VARIANTS), and 25 at LARGE_PATCH: the candidates `layer_useful` adds at
    products of LARGE_C outputs or more."""
    r24, r25 = registry.rung(24), registry.rung(25)
    out: list[tuple[Rung, dict]] = []
    for change in LARGE_VARIANTS + (LARGE_NT_VARIANTS if layout == "NT" else ()):
        for r, cfg in ((r24, r24.default(gpu_name)), (r24, {**r24.default(gpu_name),
                                                             "SPLIT": 1}),
                       (r25, r25.default(gpu_name)),
                       (r25, {**r25.default(gpu_name), **LARGE_PATCH})):
            cfg = {**cfg, **change}
            if r.is_legal(cfg) and (r, cfg) not in out:
                out.append((r, cfg))
    return out


def layer_candidates(gpu_name: str | None, layout: str = "NN") -> list[tuple[Rung, dict]]:
    """The grid's candidates, rung 15 at every SKINNY_ROWS x SKINNY_UNROLLS x RM shape (a
    decode step's products are where a layer's time is its weight's bytes), and the large
    products' `large_candidates` in `layout`."""
    out = grid_candidates(gpu_name)
    r15 = registry.rung(15)
    base = r15.default(gpu_name)
    for rm, (bn, warps), unroll, split in itertools.product(
            (1, 2, 4, 8, 16), SKINNY_ROWS, SKINNY_UNROLLS, (0, 1)):
        cfg = {**base, "RM": rm, "BN": bn, "WARPS": warps, "UNROLL": unroll, "SPLIT": split}
        if r15.is_legal(cfg) and (r15, cfg) not in out:
            out.append((r15, cfg))
    out += [c for c in large_candidates(gpu_name, layout) if c not in out]
    return out


def layer_useful(rung: Rung, cfg: dict, M: int, N: int, K: int, batch: int = 1) -> bool:
    """`useful`; rung 15 only with RM at its default or the rows M rounds up to; rungs 24
    and 25 only at M N batch >= LARGE_C."""
    if rung.label == registry.rung(15).label and cfg.get("RM") not in (
            rung.default(None)["RM"], min(16, 1 << max(0, M - 1).bit_length())):
        return False
    if rung.label in (registry.rung(24).label, registry.rung(25).label) \
            and M * N * batch < LARGE_C:
        return False
    return useful(rung, cfg, M, N, K, batch)


def grid_shapes(sides: Iterable[int] = SIDES, limit: int = MAX_PRODUCT) -> list[Shape]:
    """Every (M, N, K) of sides^3 with M N K <= limit."""
    sides = tuple(sides)
    return [(M, N, K) for M, N, K in itertools.product(sides, repeat=3) if M * N * K <= limit]


def batch_problems() -> list[tuple[int, int, int, int]]:
    """(M, N, K, batch) of the batched grid: batch x M x N x K <= MAX_BATCH_PRODUCT."""
    return [(M, N, K, b) for b in BATCHES for M, N, K in itertools.product(BATCH_SIDES, repeat=3)
            if b * M * N * K <= MAX_BATCH_PRODUCT]


def grid_candidates(gpu_name: str | None) -> list[tuple[Rung, dict]]:
    """(rung, configuration) pairs measured at each grid shape, each legal."""
    out: list[tuple[Rung, dict]] = []
    r13, r14, r18 = (registry.rung(n) for n in (13, 14, 18))
    out.append((r13, r13.default(gpu_name)))
    base = r14.default(gpu_name)
    for split in (0, 1, 2, 4, 8):
        out.append((r14, {**base, "SPLIT": split, "FIXUP": 2}))
    for tile in (STREAMK_64, STREAMK_64N) + MID_TILES:
        for split in (0, 1):
            out.append((r14, {**base, **tile, "SPLIT": split, "FIXUP": 2}))
    for r in registry.MEMBOUND:
        cfg = r.default(gpu_name)
        out.append((r, cfg))
        if "splitk" in r.features:  # parts to fill the GPU (the default), and none
            out.append((r, {**cfg, "SPLIT": 1 if cfg["SPLIT"] != 1 else 0}))
    for tile in SMALL_TILES:
        out.append((r18, {**r18.default(gpu_name), **tile, "SPLIT": 0}))
    for r, cfg in out:
        if problems := r.violations(cfg):
            raise ValueError(f"grid candidate {r.label} {registry.config_key(cfg)} is "
                             "illegal: " + "; ".join(problems))
    return out


def useful(rung: Rung, cfg: dict, M: int, N: int, K: int, batch: int = 1) -> bool:
    """Whether measuring the candidate at this shape can tell dispatch anything: rung 18
    only where C is small enough that the ladder's tiles leave SMs idle (M N batch <=
    2^22, a 2048^2 C); split-K only where its parts get 2 k-iterations or more."""
    if rung in registry.SMALL:
        return rung.serves(M, N, K) and M * N * batch <= 2**22
    if (cfg.get("BM"), cfg.get("BN"), cfg.get("TM")) in MID_SHAPES \
            and not mid_range(M, N, K, batch):
        return False
    return table_useful(rung, cfg, M, N, K, batch)



def mid_range(M: int, N: int, K: int, batch: int = 1) -> bool:
    """A mid-size product, where MID_TILES are measured: MID_MIN_C <= M N batch <=
    MID_MAX_C, min(M, N) >= 15 and K >= 16."""
    return MID_MIN_C <= M * N * batch <= MID_MAX_C and min(M, N) >= 15 and K >= 16
