"""The heuristic, for shapes and GPUs no table covers: waves of tiles over the SMs.

    tiles  = ceil(M / BM) * ceil(N / BN) * batch       (output tiles of the default config)
    slots  = SMs * blocks per SM                        (occupancy: threads, registers,
                                                         shared memory, block slots)
    waves  = tiles / slots,   tail fill = waves / ceil(waves)
    k-iterations = ceil(K / BK)

The rules, in order, are in the package docstring (`sgemmlab.dispatch`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Iterable

from .. import registry
from ..registry import Config, Rung, config_key
from ..runtime import occupancy as occ
from . import cache
from .request import Choice, Request, _frozen, decomposition

GOOD_TAIL = 0.85  # waves at least this full on average: data-parallel loses little
MIN_K_ITERS = 4  # k-iterations a block should own when K is split
DEEP_K = 4  # K >= DEEP_K * max(M, N): "deep K"
TINY_FLOP = 2**26  # 2MNK below this: launch-bound, splitting buys nothing
SMALL_C = 2**16  # outputs (M x N) at most this (or a tiny product) under half a wave of the
#                 ladder's tiles: the small-tile rung


def gpu_limits(gpu_name: str, sm_count: int):
    """(runtime.occupancy.GPU with this SM count, note). An unknown GPU gets the H200's
    per-SM limits, and the note says so."""
    try:
        g = occ.gpu(gpu_name)
        note = ""
    except KeyError:
        g = occ.GPUS["h200"]
        note = f"{gpu_name} is not in sgemmlab's GPU list: per-SM limits of the H200 assumed"
    if g.sms != sm_count:
        g = dataclasses.replace(g, sms=sm_count)
    return g, note



def registers_of(rung: Rung, cfg: Config, arch: str) -> int | None:
    """Registers per thread from ptxas (through the disk cache of compiled cubins: the
    launch compiles the same kernel anyway); None when it cannot compile here."""
    key = (rung.label, config_key(cfg), arch)
    if key not in cache.registers:
        try:
            from ..runtime.compiler import compile_kernel
            from ..runtime.launch import variant_macros

            macros = rung.macros(cfg) | variant_macros(rung, vec4=True)
            regs = compile_kernel(rung.source, macros, arch).resources.registers
            cache.registers[key] = regs if regs >= 0 else None
        except Exception:  # no NVRTC, a compile error: fall back to the budget
            cache.registers[key] = None
    return cache.registers[key]


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
#: (results/nvidia-h200/probe/fixup-1024-1000-2048-4096-20261129T1506Z.json).
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


def heuristic(req: Request, rungs: list[Rung], notes: Iterable[str] = (),
              small: Iterable[Rung] = ()) -> Choice:
    """The documented rules (package docstring) over the eligible ladder `rungs` and the
    eligible small-tile rungs `small` (registry.SMALL)."""
    g, gnote = gpu_limits(req.gpu_name, req.sm_count)
    lines = list(notes) + ([gnote] if gnote else [])
    streamk = [r for r in rungs if "streamk" in r.features and "SPLIT" in r.space]
    plain = [r for r in rungs if "streamk" not in r.features]
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
        if not req.aligned and r.vectorized:
            lines.append("operands unaligned: the float4 paths fall back to scalar accesses "
                         "(same decision, slower copies)")
        if req.deterministic and cfg.get("SPLIT", 1) != 1 and "streamk" in r.features:
            lines.append("bit-reproducible results asked for: fixed-order fix-up")
        return Choice(r.label, _frozen(cfg), decomposition(r, cfg), "heuristic",
                      "\n".join(lines), details={**details, "chosen": gm.as_dict()})

    small = list(small)
    flop = 2 * req.M * req.N * req.K * req.batch
    if small and geo.tiles * 2 < geo.slots and (req.M * req.N <= SMALL_C
                                                or flop < TINY_FLOP):
        r = small[0]
        cfg = r.default(req.gpu_name)
        sgeo = geometry(r, cfg, req, g)
        details["small"] = {"rung": r.label, **sgeo.as_dict()}
        size = (f"C has {req.M * req.N} <= 2^16 outputs" if req.M * req.N <= SMALL_C else
                f"the product is {flop / 1e6:.1f} MFLOP (< 2^26)")
        return done(r, cfg, f"under half a wave of {dp.label}'s tiles ({geo.tiles} of "
                    f"{geo.slots} slots) and {size}: "
                    f"{r.label}, {sgeo.tiles} tiles of {sgeo.tile[0]}×{sgeo.tile[1]}, K "
                    "split to fill the GPU where they are fewer than its slots", sgeo)
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

