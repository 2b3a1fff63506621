"""Dispatch within a tensor-core precision: when rung 19 (tf32), 20 (tf32x3) or 26
(fp32_emulated) runs, and when an exact FP32 rung serves the request instead.

A caller who asks for precision="fp32_emulated", "tf32x3" or "tf32" allows the tensor cores;
it never forces them. The tensor-core rung runs unless one of these holds, checked in this
order, and the reason says which:

* the GPU is not a Hopper (sm_90): wgmma and setmaxnreg exist nowhere else;
* one side of C is at most SKINNY (16): the bill is the bytes of the long operand, which the
  memory-bound rungs stream at HBM speed while a 128-row tensor tile would mostly compute
  padding;
* tf32x3 with K < TF32X3_MIN_K: the tensor core truncates as it accumulates (arXiv:2512.07004),
  and over a short K that costs more error than FP32's own rounding; the accuracy harness
  (`sgemmlab accuracy`, results/<gpu>/accuracy/*.json) measured where it stops doing so;
* fp32_emulated with K < EMULATED_MIN_K (ozaki/reference.MIN_K): over a short K exact FP32
  is more accurate than the scheme (the accuracy harness measured it), and as fast; with K
  past rung 26's INT32 sums (K >= 2^17);
* tf32 with K <= SKINNY: an outer-product shape, write-bound: rung 17 is as fast, and exact;
* a batch of products smaller than BATCH_MIN_FLOP each: rung 20 launches once per product
  (no batched tensor maps yet), which costs more than the batched FP32 rungs;
* fp32_emulated where `emulated_us`, the scheme's predicted time (its passes over the
  operands and C at a memory rate, and whole waves of INT8 tiles at the power-capped
  rate), is not below `fp32_us` (exact FP32's) by EMULATED_MARGIN: the scheme's passes
  cost a fixed time and bytes that a small product, or one of short K, does not repay.
  tools/emulated_pair.py measures both in one run where the rule turns.

The exact FP32 answer is always at least as accurate as the one asked for, so falling back
is never a loss of precision; `sgemmlab explain --precision tf32x3` prints the reason.
"""

from __future__ import annotations

from dataclasses import replace

from .. import registry
from ..registry import Rung
from .request import Choice, Request, _frozen, decomposition

SKINNY = 16
TF32X3_MIN_K = 256
BATCH_MIN_FLOP = 2 * 2**27  # per product: 2 M N K
HOPPER_ARCH = "sm_90"
EMULATED_MIN_K = 256  # ozaki/reference.MIN_K (a test holds them equal)
#: The cost model of fp32_emulated (rung 26 and its passes) against exact FP32, per product,
#: fitted by least squares to one paired run of both at 27 shapes (tools/emulated_pair.py,
#: results/nvidia-h200/pairs/emulated-20261204T2001Z.json: cubes 512-4096, K 256-2048 at
#: 4096^2 and 8192^2, models' layers): the scheme's model within -21 % to +11 % of what it
#: measured, exact FP32's within -7 % to +21 % but at 256^2 x 65536 (4x optimistic). With the
#: margin, the rule chose the scheme at 16 shapes, each of them faster than exact FP32
#: (1.22-2.93x), and at none of the 10 where it ran slower; the 27th, 256^2 x 65536, it left
#: to exact FP32, though the scheme ran 1.18x faster there. A second run at 13 shapes the
#: fit had not seen (…/emulated-20261204T2014Z.json) bore it out.
EMULATED_COUNT = 8  # the moduli: ozaki/reference.COUNT
EMULATED_PASS_US = 82.0  # the launches' fixed time, the host's included
EMULATED_PASS_BYTES_PER_US = 2.8e6  # the passes' bytes at 2.8 TB/s
EMULATED_WAVE_US = 4.5  # a wave of tiles' fixed time (the ring's fill, the epilogue)
EMULATED_TILE_OPS_PER_US = 13.0e6  # one SM's INT8 operations per µs at the 700 W clock
EMULATED_FP32_US = 36.0  # exact FP32's fixed time
EMULATED_FP32_FLOP_PER_US = 49e6  # ... and its rate: 49 TFLOP/s
EMULATED_MARGIN = 1.1  # the scheme must be predicted this much faster


def emulated_us(M: int, N: int, K: int, sms: int, count: int = EMULATED_COUNT) -> float:
    """Predicted time of one fp32_emulated product (runtime/ozaki.py), in µs: the passes'
    bytes (A and B read twice and their residues written; the products' residues written
    and read back; C written, and read for beta) and whole waves of rung 26's 128 x 256
    tiles, one per (modulus, tile)."""
    kpad = -(-K // 16) * 16
    passes = (8 + count) * (M + N) * K + 2 * count * M * N + 8 * M * N
    work = -(-M // 128) * -(-N // 256) * count
    waves = -(-work // max(sms, 1))
    tile = 2 * 128 * 256 * kpad / EMULATED_TILE_OPS_PER_US
    return (EMULATED_PASS_US + passes / EMULATED_PASS_BYTES_PER_US
            + waves * (EMULATED_WAVE_US + tile))


def fp32_us(M: int, N: int, K: int) -> float:
    """Exact FP32's predicted time, in µs: a fixed time and a rate (fitted with the
    scheme's, above)."""
    return EMULATED_FP32_US + 2 * M * N * K / EMULATED_FP32_FLOP_PER_US


def tensor_rung(precision: str) -> Rung:
    """The tensor-core rung of a precision ("tf32" -> 19, "tf32x3" -> 20, "fp32_emulated"
    -> 26)."""
    return next(r for r in registry.TENSOR if r.precision == precision)


def check_precision(precision: str) -> str:
    """The precision, or ValueError naming the ones there are."""
    if precision not in registry.PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(map(repr, registry.PRECISIONS))}"
                         f" (got {precision!r})")
    return precision


def why_not(req: Request, precision: str, arch: str) -> str | None:
    """Why the tensor-core rung does not serve this request, or None when it does."""
    asked = f"precision={precision!r} asked"
    if arch != HOPPER_ARCH:
        where = f"this GPU is {arch}" if arch else "the GPU's architecture is not known"
        return (f"{asked}, but the tensor-core rungs run on Hopper (sm_90) only and {where}: "
                "exact FP32 instead")
    if min(req.M, req.N) <= SKINNY:
        return (f"{asked}; C is {req.M}×{req.N}, a side of at most {SKINNY}: the bill is bytes, "
                "which an exact FP32 memory-bound rung streams faster than a 128-row tensor "
                "tile")
    if precision == "fp32_emulated":
        return _emulated_why_not(req, asked)
    if precision == "tf32x3" and req.K < TF32X3_MIN_K:
        return (f"{asked}; K = {req.K} < {TF32X3_MIN_K}: over so short a K the tensor core's "
                "truncating accumulation costs more error than FP32's rounding (sgemmlab "
                "accuracy), so exact FP32 instead")
    if req.K <= SKINNY:
        return (f"{asked}; K = {req.K} <= {SKINNY}: outer products, bound by writing C: an "
                "exact FP32 rung is as fast")
    if req.batch > 1 and 2 * req.M * req.N * req.K < BATCH_MIN_FLOP:
        return (f"{asked}; a batch of {req.batch} small products: the tensor-core rung "
                "launches once per product, the batched FP32 rungs once for all")
    return None


def _emulated_why_not(req: Request, asked: str) -> str | None:
    """fp32_emulated past the checks every precision shares: K's range, then the cost
    model."""
    if req.K < EMULATED_MIN_K:
        return (f"{asked}; K = {req.K} < {EMULATED_MIN_K}: over so short a K exact FP32 is "
                "more accurate than the scheme's scaling (sgemmlab accuracy), and as fast")
    r = tensor_rung("fp32_emulated")
    if not r.serves(req.M, req.N, req.K):
        return (f"{asked}; K = {req.K}: rung {r.label} computes {r.domain} (past that its "
                "INT32 sums would overflow), so exact FP32 instead")
    mine, fp32 = emulated_us(req.M, req.N, req.K, req.sm_count), fp32_us(req.M, req.N, req.K)
    if mine * EMULATED_MARGIN >= fp32:
        return (f"{asked}; predicted {mine:.0f} µs for the scheme's passes and INT8 products "
                f"against {fp32:.0f} µs for exact FP32: the passes cost more than the INT8 "
                "products save (a small product, or a short K), so exact FP32 instead")
    return None


def tensor_choice(req: Request, precision: str) -> Choice:
    """The tensor-core rung at this GPU's default, for a request it serves."""
    r = tensor_rung(precision)
    cfg = r.default(req.gpu_name)
    if precision == "fp32_emulated":
        mine = emulated_us(req.M, req.N, req.K, req.sm_count)
        lines = [f"precision={precision!r} asked: {r.label} on the tensor cores, Ozaki scheme "
                 f"II: FP32-accurate from {EMULATED_COUNT} exact INT8 products (one per "
                 "modulus), recombined in FP64",
                 "A's rows and B's columns scaled by powers of two and split into residues "
                 "where they lie; rows or columns too uneven for the scaling get FP64 dot "
                 "products instead (runtime/ozaki.py)",
                 f"predicted {mine:.0f} µs against {fp32_us(req.M, req.N, req.K):.0f} µs "
                 "for exact FP32"]
        return Choice(r.label, _frozen(cfg), "persistent, a (modulus, tile) per step",
                      "precision", "\n".join(lines))
    kind = ("3xTF32: FP32-accurate (three TF32 products, promoted to an FP32 sum every "
            f"{cfg.get('PROMOTE', 1)} k-tile(s))" if precision == "tf32x3"
            else "TF32: NOT FP32 (10-bit mantissa), as asked")
    lines = [f"precision={precision!r} asked: {r.label} on the tensor cores, {kind}",
             "operands handed over as they lie where the copy engine can read them, else "
             "copied K-major first (runtime/hopper.py)"]
    split = ("persistent, the last partial wave split along K, fixed-order fix-up"
             if cfg.get("TAIL") else "persistent")
    return Choice(r.label, _frozen(cfg), split if r.supports("tma") else decomposition(r, cfg),
                  "precision", "\n".join(lines))


def with_note(choice: Choice, note: str) -> Choice:
    """The FP32 choice with the reason it serves a tensor-core request first."""
    return replace(choice, reason=f"{note}\n{choice.reason}")
