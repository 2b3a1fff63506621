"""Dispatch within a tensor-core precision: when rung 19 (tf32) or 20 (tf32x3) runs, and when
an exact FP32 rung serves the request instead.

A caller who asks for precision="tf32x3" or "tf32" allows the tensor cores; it never forces
them. The tensor-core rung runs unless one of these holds, checked in this order, and the
reason says which:

* the GPU is not a Hopper (sm_90): wgmma and setmaxnreg exist nowhere else;
* one side of C is at most SKINNY (16): the bill is the bytes of the long operand, which the
  memory-bound rungs stream at HBM speed while a 128-row tensor tile would mostly compute
  padding;
* tf32x3 with K < TF32X3_MIN_K: the tensor core truncates as it accumulates (arXiv:2512.07004),
  and over a short K that costs more error than FP32's own rounding; the accuracy harness
  (`sgemmlab accuracy`, results/<gpu>/accuracy/*.json) measured where it stops doing so;
* tf32 with K <= SKINNY: an outer-product shape, write-bound: rung 17 is as fast, and exact;
* a batch of products smaller than BATCH_MIN_FLOP each: rung 20 launches once per product
  (no batched tensor maps yet), which costs more than the batched FP32 rungs.

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


def tensor_rung(precision: str) -> Rung:
    """The tensor-core rung of a precision ("tf32" -> 19, "tf32x3" -> 20)."""
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


def tensor_choice(req: Request, precision: str) -> Choice:
    """The tensor-core rung at this GPU's default, for a request it serves."""
    r = tensor_rung(precision)
    cfg = r.default(req.gpu_name)
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
