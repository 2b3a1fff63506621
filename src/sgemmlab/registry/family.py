"""The memory-bound and small family, rungs 15-18 (kernels/membound/, kernels/small/)."""

from __future__ import annotations

from .core import _F, Config, Rule, Rung, _block_tile, _register_rule

# Rungs 15 and 16 compile one of two structures by the streamed operand's layout (axpy.cuh:
# lanes own columns, K split over the block; dot.cuh: lanes along k, NC rows per warp), so a
# configuration must be legal for both; shared memory is the larger need (both declare it).


def _skinny(c: Config, small: str, long_: str) -> dict[str, int]:
    """Rungs 15-16's derived numbers as membound/axpy.cuh and dot.cuh compute them; `small`
    is the constant of the small side (RM or RN), `long_` the block's long side (BN or BM)."""
    r, span, unroll = c[small], c[long_], c["UNROLL"]
    cg = max(span // 4, 1)  # axpy: lanes across the columns, a float4 each
    kcw = max(32 // cg, 1) * unroll  # axpy: k per warp per chunk
    nc = max(span // c["WARPS"], 1)  # dot: rows of the streamed operand per warp
    du = max(unroll // nc, 1)  # dot: float4 per row per step
    kph = max(4096 // r, 128 * du)  # dot: k per phase of the small operand
    axpy = max(c["WARPS"] * kcw * (r + 4 if r >= 4 else r), c["WARPS"] * r * span)
    return {"smem": max(axpy, 2 * r * (kph + 4)) * _F,
            "live": max(5 * r + 4 * unroll + 24, r * nc + 4 * nc * du + 2 * nc + 28)}


#: Rungs 15, 16 and 18 cut K into SPLIT parts (runtime/decompose.py plans them).
_SPLIT_RULE = Rule("SPLIT is 0 (parts to fill the GPU) or 1-64 parts of K",
                   lambda c: 0 <= c["SPLIT"] <= 64, host=True)
#: Rungs 15-16 split K in whole quanta of 128 (kernels: KQ), so every part starts on a
#: 16-byte boundary of the streamed operand.
_SKINNY_K_UNIT = 128


def _skinny_rules(small: str, long_: str, what: str, side: str) -> tuple[Rule, ...]:
    return (
        Rule(f"{small} is 1, 2, 4, 8 or 16 ({what} of C per block)",
             lambda c: c[small] in (1, 2, 4, 8, 16)),
        Rule(f"{long_} is a multiple of 4 and {long_}/4 divides 32 (axpy: {long_}/4 lanes "
             f"span the {side})",
             lambda c: c[long_] % 4 == 0 and c[long_] // 4 > 0 and 32 % (c[long_] // 4) == 0),
        Rule(f"{long_} is a multiple of WARPS, at most 16 times it (dot: {long_}/WARPS "
             f"{side} per warp)",
             lambda c: c[long_] % c["WARPS"] == 0 and c[long_] <= 16 * c["WARPS"]),
        Rule("UNROLL is 1, 2, 4 or 8", lambda c: c["UNROLL"] in (1, 2, 4, 8)),
        _SPLIT_RULE,
        _register_rule(lambda c: _skinny(c, small, long_)["live"],
                       f"the larger variant's live values (axpy 5*{small} + 4*UNROLL + 24; dot "
                       f"{small}*NC + 4*NC*DU + 2*NC + 28)", lambda c: 32 * c["WARPS"]),
    )


def _tiny_k_threads(c: Config) -> int:
    return (c["BN"] // 4) * (c["BM"] // c["TM"])


def _small_threads(c: Config) -> int:
    return (c["BM"] // c["TM"]) * (c["BN"] // c["TN"])


#: Rung 18's row tiles (16 rows or more) lie along gridDim.y (65535 at most).
SMALL_MAX_M = 65535 * 16


#: Rung 17's column tiles are at least 128 wide and lie along gridDim.y (65535 at most).
TINY_K_MAX_N = 65535 * 128

#: Rungs outside the ladder's climb, each for a part of the shape space the ladder serves
#: badly: kernels/membound/ (15-17, products whose bill is bytes, not FLOPs; dispatch
#: prefers them where `preferred` says: rung 17 serves K <= 64 but claims only K <= 16) and
#: kernels/small/ (18, products too small for the
#: ladder's tiles to fill the GPU; chosen by the table or the heuristic). They are numbered
#: after the ladder and looked up like any rung; `sgemmlab ladder` (RUNGS) leaves them out.
MEMBOUND: tuple[Rung, ...] = (
    Rung(
        15, "skinny_m", "skinny M: B streamed once, K split inside the block",
        "membound/15_skinny_m.cu",
        space={"RM": (1, 2, 4, 8, 16), "BN": (16, 32, 64, 128), "WARPS": (4, 8, 16),
               "UNROLL": (1, 2, 4, 8), "SPLIT": (0, 1)},
        block=lambda c: (32 * c["WARPS"], 1, 1), tile=lambda c: (c["RM"], c["BN"]),
        smem_bytes=lambda c: _skinny(c, "RM", "BN")["smem"],
        seed={"RM": 8, "BN": 32, "WARPS": 16, "UNROLL": 4, "SPLIT": 0},
        rules=_skinny_rules("RM", "BN", "rows", "columns"), vectorized=True,
        features=frozenset({"layouts", "splitk", "source"}), host_only=frozenset({"SPLIT"}),
        k_unit=lambda c: _SKINNY_K_UNIT,
        domain="M <= 16 (any N and K, A and B in either layout)",
        serves=lambda M, N, K: M <= 16, preferred=lambda M, N, K: M <= 16,
    ),
    Rung(
        16, "skinny_n", "skinny N: A streamed once (rung 15 transposed)",
        "membound/16_skinny_n.cu",
        space={"RN": (1, 2, 4, 8, 16), "BM": (16, 32, 64, 128), "WARPS": (4, 8, 16),
               "UNROLL": (1, 2, 4, 8), "SPLIT": (0, 1)},
        block=lambda c: (32 * c["WARPS"], 1, 1), tile=lambda c: (c["BM"], c["RN"]),
        smem_bytes=lambda c: _skinny(c, "RN", "BM")["smem"],
        seed={"RN": 8, "BM": 32, "WARPS": 16, "UNROLL": 4, "SPLIT": 0},  # 15's, transposed
        rules=_skinny_rules("RN", "BM", "columns", "rows"), rows_on_x=True, vectorized=True,
        features=frozenset({"layouts", "splitk", "source"}), host_only=frozenset({"SPLIT"}),
        k_unit=lambda c: _SKINNY_K_UNIT,
        domain="N <= 16 (any M and K, A and B in either layout)",
        serves=lambda M, N, K: N <= 16, preferred=lambda M, N, K: N <= 16,
    ),
    Rung(
        17, "tiny_k", "tiny K: outer products, write-bound", "membound/17_tiny_k.cu",
        space={"BM": (64, 128, 256, 512), "BN": (128, 256), "TM": (4, 8, 16, 32)},
        block=lambda c: (_tiny_k_threads(c), 1, 1), tile=_block_tile,
        smem_bytes=lambda c: (c["BM"] + c["BN"]) * 16 * _F,
        seed={"BM": 256, "BN": 128, "TM": 32},
        rules=(
            Rule("BN is a multiple of 128 (a warp stores 128 consecutive columns of a row)",
                 lambda c: c["BN"] % 128 == 0),
            Rule("BM is a multiple of TM", lambda c: c["BM"] % c["TM"] == 0),
            Rule("TM is a multiple of 4 (a thread's rows go four at a time)",
                 lambda c: c["TM"] % 4 == 0),
            # K > 16 sums TP = 8 (or 4) of a thread's TM rows per pass, not all TM: the
            # short path's 4*16 values of B stay the larger need, so no TM is excluded
            _register_rule(lambda c: max(4 * 16 + 4 * 4 + 28, 4 * 8 + 4 * 4 + 4 + 28),
                           "the larger path's live values (K <= 16: 4*16 of B, 4*4 of C and "
                           "28 for the sums, pointers and indices; K > 16: 4*8 sums, 4*4 of B "
                           "or C, 4 of A and 28)", _tiny_k_threads),
        ),
        rows_on_x=True, vectorized=True, features=frozenset({"layouts", "source", "vec4_c"}),
        domain=f"K <= 64 and N <= {TINY_K_MAX_N} (any M, A and B in either layout)",
        serves=lambda M, N, K: K <= 64 and N <= TINY_K_MAX_N,
        preferred=lambda M, N, K: K <= 16 and N <= TINY_K_MAX_N,
    ),
)

SMALL: tuple[Rung, ...] = (
    Rung(
        18, "small_tiles", "small tiles, batches and split-K for small products",
        "small/18_small_tiles.cu",
        space={"BM": (16, 32, 64), "BN": (16, 32, 64, 128), "BK": (8, 16, 32),
               "TM": (1, 2, 4), "TN": (1, 2, 4), "SPLIT": (0, 1)},
        block=lambda c: (_small_threads(c), 1, 1), tile=_block_tile,
        # two buffers of As [BK][BM+1] and Bs [BK][BN+1]
        smem_bytes=lambda c: 2 * c["BK"] * (c["BM"] + c["BN"] + 2) * _F,
        seed={"BM": 32, "BN": 32, "BK": 16, "TM": 2, "TN": 4, "SPLIT": 0},
        rules=(
            Rule("BM is a multiple of TM and BN of TN",
                 lambda c: c["BM"] % c["TM"] == 0 and c["BN"] % c["TN"] == 0),
            Rule("the threads divide the A tile (BM*BK) and the B tile (BK*BN) evenly",
                 lambda c: (c["BM"] * c["BK"]) % _small_threads(c) == 0
                 and (c["BK"] * c["BN"]) % _small_threads(c) == 0),
            Rule("at most 512 threads (a small tile needs no more; at 1024 ptxas spills the "
                 "fix-up)", lambda c: _small_threads(c) <= 512),
            Rule("a thread holds at most 32 values of the next k-tile ((BM+BN)*BK/threads: "
                 "beyond it their addresses spill)",
                 lambda c: (c["BM"] + c["BN"]) * c["BK"] <= 32 * _small_threads(c)),
            _SPLIT_RULE,
            _register_rule(lambda c: c["TM"] * c["TN"] + c["TM"] + c["TN"]
                           + (c["BM"] + c["BN"]) * c["BK"] // _small_threads(c) + 24,
                           "TM*TN accumulators, TM+TN fragment values, the next k-tile's "
                           "share ((BM+BN)*BK/threads) and 24 for indices", _small_threads),
        ),
        features=frozenset({"layouts", "batched", "splitk", "source"}),
        host_only=frozenset({"SPLIT"}),
        domain=f"M <= {SMALL_MAX_M} (row tiles of 16 or more along gridDim.y), any N and K",
        serves=lambda M, N, K: M <= SMALL_MAX_M,
    ),
)

FAMILY: tuple[Rung, ...] = MEMBOUND + SMALL

