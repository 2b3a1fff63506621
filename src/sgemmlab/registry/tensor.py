"""The tensor-core rungs, 19-20 and 26 (kernels/hopper/)."""

from __future__ import annotations

from .core import _F, Config, Rule, Rung

#: The tensor rungs' row tile and k-tile (kernels/hopper/wgmma.cuh: a consumer warpgroup's
#: wgmma covers 64 rows, two of them 128; a k-tile is 32 floats, one 128-byte swizzle row).
TILE_M, TILE_K = 128, 32


def _tiles(c: Config) -> dict[str, int]:
    """The tiles as the kernels read them (hopper/wgmma.cuh: BM and BK)."""
    return {"TILE_M": TILE_M, "TILE_K": TILE_K}


def _hopper_smem(c: Config, b_arrays: int) -> int:
    """STAGES stages of A (TILE_M x TILE_K floats) and b_arrays of B (BN x TILE_K), a full
    and an empty mbarrier per stage, 1024 bytes to align the tiles to the swizzle's period.
    (Rung 26's tiles hold int8, 128 of them a row: the same 128 bytes as TILE_K floats.)"""
    return (c["STAGES"] * (TILE_M * TILE_K + b_arrays * c["BN"] * TILE_K) * _F
            + 16 * c["STAGES"] + 1024)


_HOPPER_SMEM_MAX = 227 * 1024  # dynamic shared memory a block may opt in to on Hopper


def ozaki_tile_rows(c: Config) -> int:
    """Rung 26's rows a work item: TILE_M, or with PINGPONG one warpgroup's (64 for BN 256,
    128 for BN 128: 128 INT32 accumulators a thread either way)."""
    return 64 * 256 // c["BN"] if c.get("PINGPONG") else TILE_M


def _ozaki_smem(c: Config) -> int:
    """Rung 26's ring: STAGES stages of A (its rows a work item x 128 bytes) and B (BN x 128
    bytes), the barriers, and 1024 bytes to align the tiles."""
    return c["STAGES"] * (ozaki_tile_rows(c) + c["BN"]) * TILE_K * _F + 16 * c["STAGES"] + 1024


def _hopper_rules(b_arrays: int) -> tuple[Rule, ...]:
    return (
        Rule("STAGES is 2 to 8", lambda c: 2 <= c["STAGES"] <= 8),
        Rule(f"the ring fits in {_HOPPER_SMEM_MAX} bytes of shared memory (STAGES x (A + "
             f"{b_arrays} x B tiles) + barriers + 1024)",
             lambda c: _hopper_smem(c, b_arrays) <= _HOPPER_SMEM_MAX),
    )


#: The tensor-core rungs (kernels/hopper/): Hopper only (sm_90a), not FP32 by the
#: ladder's rule, so neither in ALL nor chosen unless the caller asks for their precision
#: (matmul(precision="fp32_emulated" | "tf32x3" | "tf32")). Looked up like any rung.
#: Rung 26 is one launch of six (runtime/ozaki.py: the norms and exponents, the split into
#: residues, for A and for B; the INT8 products; the recombination); its configuration is
#: the products'.
TENSOR: tuple[Rung, ...] = (
    Rung(
        19, "tf32_wgmma", "TF32 on the tensor cores: TMA, mbarriers, wgmma (NOT FP32)",
        "hopper/19_tf32_wgmma.cu",
        space={"BN": (128, 256), "STAGES": (2, 3, 4, 5, 6), "GROUP_M": (4, 8, 16)},
        block=lambda c: (384, 1, 1), tile=lambda c: (TILE_M, c["BN"]),
        smem_bytes=lambda c: 0, seed={"BN": 256, "STAGES": 4, "GROUP_M": 8},
        rules=_hopper_rules(1), features=frozenset({"layouts", "tma", "source"}),
        precision="tf32", arch="sm_90a", needs_cc=(9, 0),
        dynamic_smem=lambda c: _hopper_smem(c, 1), derived=_tiles,
        domain="any M, N, K on a Hopper GPU (sm_90)",
    ),
    Rung(
        20, "3xtf32_wgmma", "3xTF32 on the tensor cores: FP32-accurate, three TF32 products",
        "hopper/20_3xtf32_wgmma.cu",
        space={"BN": (128,), "STAGES": (2, 3, 4), "GROUP_M": (4, 8, 16), "PROMOTE": (1, 2, 4),
               "INFLIGHT": (0, 1), "TAIL": (0, 1), "ORDER": (0, 1, 2)},
        block=lambda c: (384, 1, 1), tile=lambda c: (TILE_M, c["BN"]),
        smem_bytes=lambda c: 0,
        seed={"BN": 128, "STAGES": 4, "GROUP_M": 8, "PROMOTE": 1, "INFLIGHT": 1, "TAIL": 1,
              "ORDER": 0},
        rules=_hopper_rules(2), features=frozenset({"layouts", "tma", "source"}),
        precision="tf32x3", arch="sm_90a", needs_cc=(9, 0),
        dynamic_smem=lambda c: _hopper_smem(c, 2), derived=_tiles,
        domain="any M, N, K on a Hopper GPU (sm_90)",
    ),
    Rung(
        26, "ozaki_int8", "Ozaki scheme II: FP32-accurate from exact INT8 products",
        "hopper/26_ozaki_int8.cu",
        space={"BN": (128, 256), "STAGES": (2, 3, 4, 5, 6), "GROUP_M": (4, 8, 16, 32),
               "CLUSTER": (1, 2), "STORE16": (0, 1), "PINGPONG": (0, 1), "EXACT_DIV": (0, 1)},
        block=lambda c: (384, 1, 1), tile=lambda c: (ozaki_tile_rows(c), c["BN"]),
        smem_bytes=lambda c: 0,
        seed={"BN": 256, "STAGES": 4, "GROUP_M": 8, "CLUSTER": 1, "STORE16": 1,
              "PINGPONG": 0, "EXACT_DIV": 0},
        rules=(Rule("STAGES is 2 to 8", lambda c: 2 <= c["STAGES"] <= 8),
               Rule(f"the ring fits in {_HOPPER_SMEM_MAX} bytes of shared memory",
                    lambda c: _ozaki_smem(c) <= _HOPPER_SMEM_MAX),
               Rule("CLUSTER is 1 or 2", lambda c: c["CLUSTER"] in (1, 2)),
               Rule("PINGPONG with CLUSTER 1", lambda c: not c["PINGPONG"] or c["CLUSTER"] == 1)),
        features=frozenset({"layouts", "tma"}),
        precision="fp32_emulated", arch="sm_90a", needs_cc=(9, 0),
        dynamic_smem=_ozaki_smem, derived=_tiles,
        domain="any M, N and K < 131072 on a Hopper GPU (sm_90)",
        serves=lambda M, N, K: K < 2**17,
    ),
)


