"""The post-compile track, rungs 22-25 (kernels/postcompile/): rungs 14 and 13 with two
ideas that come after the ladder's: the operand-order pass over the cubin
(runtime/sassedit.py; its story in postcompile/22_streamk_ordered.md, the table it rests on
in docs/operands-h200.md) and the branch-free walk of the k-tiles
(postcompile/24_streamk_steady.cuh). Each rung has the space, rules, seed and launch of its
base, so any configuration of one is one of the other."""

from __future__ import annotations

from dataclasses import replace

from .core import POST_MACROS, Rung
from .ladder import RUNGS

__all__ = ["ORDERED", "POST_ARCHS", "POST_MACROS", "STAND_INS"]

#: The architectures the post-compile rungs were measured on: the machine code the
#: operand-order pass edits, and the register banks it orders for, are sm_90's. Elsewhere
#: dispatch runs the bases.
POST_ARCHS = ("sm_90",)


def _twin(base: Rung, number: int, name: str, title: str, notes: str,
          steady: bool = False) -> Rung:
    """Rung `base` compiled as it is (with the steady walk when `steady`), then the
    operand-order pass."""
    return replace(base, number=number, name=f"{base.name}_{name}", title=title,
                   post="operand-order", base=base.number, base_rung=base,
                   notes=f"postcompile/{notes}",
                   defines={"STEADY": 1} if steady else {})


#: Looked up like any rung; dispatch runs 22 and 23 in place of their bases on POST_ARCHS
#: (the table keeps naming 13 and 14, whose configurations they take) and 24 and 25 where
#: table entries name them. Neither in ALL nor in the compile sweep: the pass moves
#: instructions and flags, never a register or a byte of frame, so what the registry
#: guarantees of the base holds for the twin (tests/test_sassedit.py checks the resources
#: are equal); the steady walk is checked by the GPU tests like any rung.
_LADDER = {r.number: r for r in RUNGS}
ORDERED: tuple[Rung, ...] = (
    _twin(_LADDER[14], 22, "ordered", "Stream-K with its FFMAs reordered for the register "
          "banks", "22_streamk_ordered.md"),
    _twin(_LADDER[13], 23, "ordered", "rung 13 with its FFMAs reordered for the register "
          "banks", "23_hoisted_ordered.md"),
    _twin(_LADDER[14], 24, "steady", "Stream-K with a branch-free steady-state k-loop",
          "24_streamk_steady.cuh", steady=True),
    _twin(_LADDER[13], 25, "steady", "rung 13 with a branch-free steady-state k-loop",
          "25_hoisted_steady.md", steady=True),
)

#: The twins dispatch runs in place of their bases, at the table's configuration of the
#: base: rungs 22 and 23. Rungs 24 and 25 want other settings than their bases' (rung 24: A
#: by cp.async, REG_TRANSPOSE=0; at rung 14's REG_TRANSPOSE=1 it is slower than 22), so
#: dispatch reaches them through table entries that name them.
STAND_INS = (22, 23)
