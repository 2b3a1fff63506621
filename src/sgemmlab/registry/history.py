"""The history track, rung 21 (kernels/history/)."""

from __future__ import annotations

from .core import _F, Rule, Rung, _register_rule

#: Rungs that retell the field's history (kernels/history/): written the way a paper wrote
#: them for the hardware of its day, numbered after the others and looked up like any rung,
#: but neither in ALL nor chosen by dispatch or the tables; `sgemmlab ladder` leaves them
#: out. Rung 21 is Volkov and Demmel's SGEMM (SC'08), mapped onto row-major operands.
HISTORY: tuple[Rung, ...] = (
    Rung(
        21, "volkov2008", "Volkov & Demmel 2008: C in registers, B from global, A in shared",
        "history/21_volkov2008.cu",
        space={"BN": (32, 64, 128, 256), "TM": (8, 16, 32), "BK": (8, 16, 32)},
        block=lambda c: (c["BN"], 1, 1), tile=lambda c: (c["TM"], c["BN"]),
        smem_bytes=lambda c: c["BK"] * c["TM"] * _F,  # As [BK][TM]
        seed={"BN": 64, "TM": 16, "BK": 16},  # the paper's: 64 threads, a 16 x 64 tile of C
        rules=(
            Rule("TM is a multiple of 4 (float4 reads of the A tile)",
                 lambda c: c["TM"] % 4 == 0),
            Rule("BK is a multiple of 4 (B four k at a time, float4 copies of A)",
                 lambda c: c["BK"] % 4 == 0),
            _register_rule(lambda c: 2 * c["TM"] + 8 + 24,
                           "TM accumulators, TM values of A, 8 of B (four and the next four) "
                           "and 24 for indices", lambda c: c["BN"]),
        ),
        vectorized=True,
    ),
)


