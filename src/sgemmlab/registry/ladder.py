"""The classic ladder, rungs 1-14 (kernels/ladder/): one idea a rung, from one thread per
output to Stream-K."""

from __future__ import annotations

from .core import _F, Config, Rule, Rung, _block_tile, _register_rule


def _square(cfg: Config) -> tuple[int, int]:
    return cfg["BS"], cfg["BS"]


def _tiles_smem(cfg: Config) -> int:
    return (cfg["BM"] * cfg["BK"] + cfg["BK"] * cfg["BN"]) * _F


def _padded_smem(cfg: Config) -> int:
    return (cfg["BK"] * (cfg["BM"] + cfg["PAD"]) + cfg["BK"] * cfg["BN"]) * _F



def _thread_tile_rules() -> tuple[Rule, ...]:
    return (
        Rule("BM is a multiple of TM", lambda c: c["BM"] % c["TM"] == 0),
        Rule("BN is a multiple of TN", lambda c: c["BN"] % c["TN"] == 0),
        _register_rule(lambda c: c["TM"] * c["TN"] + c["TM"] + c["TN"] + 16,
                       "TM*TN accumulators, TM+TN fragment values and 16 for indices",
                       lambda c: _grid2d_block(c)[0]),
    )


def _vector_rules() -> tuple[Rule, ...]:
    return (
        Rule("BK is a multiple of 4 (float4 loads of A along k)", lambda c: c["BK"] % 4 == 0),
        Rule("BN is a multiple of 4 (float4 loads of B)", lambda c: c["BN"] % 4 == 0),
        Rule("TM and TN are multiples of 4 (float4 shared-memory reads)",
             lambda c: c["TM"] % 4 == 0 and c["TN"] % 4 == 0),
    )


def _grid2d_block(cfg: Config) -> tuple[int, int, int]:
    return ((cfg["BM"] // cfg["TM"]) * (cfg["BN"] // cfg["TN"]), 1, 1)


_SMALL_BS = {"BS": (8, 16, 32)}
_TILES_2D = {"BM": (64, 128), "BN": (64, 128), "BK": (8, 16), "TM": (4, 8), "TN": (4, 8)}
_SEED_2D = {"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8}


def _warp_derived(c: Config) -> dict[str, int]:
    wmiter = (c["WM"] * c["WN"]) // (32 * c["TM"] * c["TN"] * c["WNITER"])
    return {"WMITER": max(wmiter, 1)}


def _warp_rules(copy: str = "float4 copies") -> tuple[Rule, ...]:
    """Rungs 10-12: the warp tile, its sub-tiles and the lanes' TM x TN pieces."""
    def wmiter(c: Config) -> int:
        return _warp_derived(c)["WMITER"]

    return (
        Rule("BM is a multiple of WM and BN of WN",
             lambda c: c["BM"] % c["WM"] == 0 and c["BN"] % c["WN"] == 0),
        Rule("a warp's 32 lanes times TM x TN times WNITER divides the warp tile WM x WN "
             "(WMITER = WM*WN / (32*TM*TN*WNITER) is a whole number >= 1)",
             lambda c: (c["WM"] * c["WN"]) % (32 * c["TM"] * c["TN"] * c["WNITER"]) == 0
             and c["WM"] * c["WN"] >= 32 * c["TM"] * c["TN"] * c["WNITER"]),
        Rule("WM is a multiple of WMITER and WN of WNITER",
             lambda c: c["WM"] % wmiter(c) == 0 and c["WN"] % c["WNITER"] == 0),
        Rule("the warp sub-tile (WM/WMITER) x (WN/WNITER) is 32 lanes of TM x TN",
             lambda c: (c["WM"] // wmiter(c)) % c["TM"] == 0
             and (c["WN"] // c["WNITER"]) % c["TN"] == 0
             and ((c["WM"] // wmiter(c)) // c["TM"]) * ((c["WN"] // c["WNITER"]) // c["TN"])
             == 32),
        Rule(f"BK is a multiple of 4 and BN, BM of 4 ({copy})",
             lambda c: c["BK"] % 4 == 0 and c["BN"] % 4 == 0 and c["BM"] % 4 == 0),
        Rule("TM and TN are multiples of 4 (float4 shared-memory reads)",
             lambda c: c["TM"] % 4 == 0 and c["TN"] % 4 == 0),
        Rule("4 or 8 warps per block (128 or 256 threads)",
             lambda c: (c["BM"] // c["WM"]) * (c["BN"] // c["WN"]) in (4, 8)),
    )


def _accumulators(c: Config) -> int:
    return c["BM"] * c["BN"] // ((c["BM"] // c["WM"]) * (c["BN"] // c["WN"]) * 32)


def _warp_rules_10() -> tuple[Rule, ...]:
    return _warp_rules() + (
        Rule("PAD is a multiple of 4 (keeps float4 reads of the A tile aligned)",
             lambda c: c["PAD"] % 4 == 0),
        Rule("PREFETCH is 0 or 1", lambda c: c["PREFETCH"] in (0, 1)),
        Rule("at most 64 accumulators per thread (register budget: with the copy registers,"
             " 128 outputs spill past 255 registers)", lambda c: _accumulators(c) <= 64),
    )


def _pipeline_smem(c: Config) -> int:
    """Rungs 11-12: STAGES x (the A stage + the B stage); A is [BM][BK+PAD] or, transposed,
    [BK][BM+PAD]."""
    a = (c["BK"] * (c["BM"] + c["PAD"]) if c.get("TRANSPOSE_A", 0)
         else c["BM"] * (c["BK"] + c["PAD"]))
    return c["STAGES"] * (a + c["BK"] * c["BN"]) * _F


def _pipeline_rules() -> tuple[Rule, ...]:
    return _warp_rules("16-byte copies") + (
        Rule("PAD is a multiple of 4 (keeps 16-byte copies and reads aligned)",
             lambda c: c["PAD"] % 4 == 0),
        Rule("2 to 8 stages", lambda c: 2 <= c["STAGES"] <= 8),
        Rule("TRANSPOSE_A and REGPF are 0 or 1",
             lambda c: c.get("TRANSPOSE_A", 0) in (0, 1) and c.get("REGPF", 0) in (0, 1)),
        Rule("at most 64 accumulators per thread (rung 13 takes 128, with hoisted addressing)",
             lambda c: _accumulators(c) <= 64),
    )


def _patch_smem(c: Config) -> int:
    """Rungs 13-14: STAGES x (As [BK][BM+PAD] + Bs [BK][BN+PAD])."""
    return c["STAGES"] * c["BK"] * (c["BM"] + c["BN"] + 2 * c["PAD"]) * _F


def _patch_threads(c: Config) -> int:
    return (c["BM"] // c["WM"]) * (c["BN"] // c["WN"]) * 32


def _patch_rules() -> tuple[Rule, ...]:
    """Rungs 13-14: a lane owns a TM x TN patch made of (TM/4) x (TN/4) pieces of 4 x 4."""
    return (
        Rule("BM is a multiple of WM and BN of WN",
             lambda c: c["BM"] % c["WM"] == 0 and c["BN"] % c["WN"] == 0),
        Rule("TM and TN are multiples of 4 (pieces of 4 x 4, float4 shared-memory reads)",
             lambda c: c["TM"] % 4 == 0 and c["TN"] % 4 == 0),
        Rule("the warp tile is 32 lanes of TM x TN: (WM/TM) x (WN/TN) == 32",
             lambda c: c["WM"] % c["TM"] == 0 and c["WN"] % c["TN"] == 0
             and (c["WM"] // c["TM"]) * (c["WN"] // c["TN"]) == 32),
        Rule("at most 128 accumulators per thread (TM * TN <= 128)",
             lambda c: c["TM"] * c["TN"] <= 128),
        Rule("BK is a multiple of 4 and at most 32, BM and BN multiples of 4",
             lambda c: c["BK"] % 4 == 0 and c["BK"] <= 32 and c["BM"] % 4 == 0
             and c["BN"] % 4 == 0),
        Rule("4 or 8 warps per block (128 or 256 threads)",
             lambda c: (c["BM"] // c["WM"]) * (c["BN"] // c["WN"]) in (4, 8)),
        Rule("PAD is a multiple of 4 (keeps 16-byte copies and reads aligned)",
             lambda c: c["PAD"] % 4 == 0),
        Rule("2 to 8 stages", lambda c: 2 <= c["STAGES"] <= 8),
        Rule("REG_TRANSPOSE is 0 (no operand), 1 (every k-major one), 2 (A) or 3 (B)",
             lambda c: c["REG_TRANSPOSE"] in (0, 1, 2, 3)),
        _register_rule(lambda c: c["TM"] * c["TN"] + 2 * (c["TM"] + c["TN"]) + 32,
                       "TM*TN accumulators, two sets of TM+TN fragment values and 32 for "
                       "pointers and indices", _patch_threads),
    )


def _streamk_rules() -> tuple[Rule, ...]:
    return _patch_rules() + (
        Rule("FIXUP is 0 (fixed order), 1 (atomic) or 2 (into C)",
             lambda c: c["FIXUP"] in (0, 1, 2)),
        Rule("SPLIT is 0 (Stream-K), 1 (data-parallel) or a split-K factor 2-16",
             lambda c: 0 <= c["SPLIT"] <= 16, host=True),
    )


_PIPELINE_SPACE = {"BM": (64, 128), "BN": (64, 128, 256), "BK": (8, 16), "WM": (32, 64),
                   "WN": (32, 64), "WNITER": (1, 2), "TM": (4, 8), "TN": (4,), "PAD": (4,),
                   "STAGES": (2, 3, 4)}
_PATCH_SPACE = {"BM": (64, 128, 256), "BN": (64, 128, 256), "BK": (8, 16), "WM": (32, 64, 128),
                "WN": (32, 64, 128), "TM": (8, 16), "TN": (8, 16), "PAD": (4,),
                "STAGES": (2, 3, 4), "REG_TRANSPOSE": (0, 1)}
_PATCH_SEED = {"BM": 128, "BN": 128, "BK": 8, "WM": 64, "WN": 64, "TM": 16, "TN": 8, "PAD": 4,
               "STAGES": 3, "REG_TRANSPOSE": 1}


RUNGS: tuple[Rung, ...] = (
    Rung(
        1, "naive", "naive: one thread per output, rows on threadIdx.x", "ladder/01_naive.cu",
        space=_SMALL_BS, block=lambda c: (c["BS"], c["BS"], 1), tile=_square,
        smem_bytes=lambda c: 0, seed={"BS": 32}, rows_on_x=True,
    ),
    Rung(
        2, "coalesced", "global-memory coalescing", "ladder/02_coalesced.cu",
        space=_SMALL_BS, block=lambda c: (c["BS"], c["BS"], 1), tile=_square,
        smem_bytes=lambda c: 0, seed={"BS": 32},
    ),
    Rung(
        3, "smem", "shared-memory cache blocking", "ladder/03_smem_tiling.cu",
        space=_SMALL_BS, block=lambda c: (c["BS"], c["BS"], 1), tile=_square,
        smem_bytes=lambda c: 2 * c["BS"] * c["BS"] * _F, seed={"BS": 32},
    ),
    Rung(
        4, "blocktile1d", "1D blocktiling: TM outputs per thread", "ladder/04_blocktile_1d.cu",
        space={"BM": (32, 64, 128), "BN": (32, 64, 128), "BK": (4, 8, 16), "TM": (4, 8, 16)},
        block=lambda c: (c["BM"] // c["TM"] * c["BN"], 1, 1), tile=_block_tile,
        smem_bytes=_tiles_smem, seed={"BM": 64, "BN": 64, "BK": 8, "TM": 8},
        rules=(Rule("BM is a multiple of TM", lambda c: c["BM"] % c["TM"] == 0),
               _register_rule(lambda c: 5 * c["TM"] + 16,
                              "TM accumulators, 4*TM values of A (read four k at a time) "
                              "and 16 for indices", lambda c: c["BM"] // c["TM"] * c["BN"])),
    ),
    Rung(
        5, "blocktile2d", "2D blocktiling: TM x TN outputs per thread", "ladder/05_blocktile_2d.cu",
        space=_TILES_2D, block=_grid2d_block, tile=_block_tile, smem_bytes=_tiles_smem,
        seed=_SEED_2D, rules=_thread_tile_rules(),
    ),
    Rung(
        6, "vectorized", "float4 global loads, A transposed in shared memory",
        "ladder/06_vectorized.cu",
        space={**_TILES_2D, "BK": (8, 16, 32)}, block=_grid2d_block, tile=_block_tile,
        smem_bytes=_tiles_smem, seed=_SEED_2D,
        rules=_thread_tile_rules() + _vector_rules(), vectorized=True,
    ),
    Rung(
        7, "bankfree_b", "conflict-free B fragment reads (split thread columns)",
        "ladder/07_bankfree_b.cu",
        space={**_TILES_2D, "BK": (8, 16, 32)}, block=_grid2d_block, tile=_block_tile,
        smem_bytes=_tiles_smem, seed=_SEED_2D,
        rules=_thread_tile_rules() + _vector_rules(), vectorized=True,
    ),
    Rung(
        8, "bankfree_a", "padded transposed A tile (conflict-free transposing stores)",
        "ladder/08_bankfree_a.cu",
        space={**_TILES_2D, "BK": (8, 16, 32), "PAD": (0, 4)}, block=_grid2d_block,
        tile=_block_tile, smem_bytes=_padded_smem, seed={**_SEED_2D, "PAD": 4},
        rules=_thread_tile_rules() + _vector_rules()
        + (Rule("PAD is a multiple of 4 (keeps float4 reads of the A tile aligned)",
                lambda c: c["PAD"] % 4 == 0),),
        vectorized=True,
    ),
    Rung(
        9, "autotuned", "rung 8 searched over a wide space on this GPU",
        "ladder/08_bankfree_a.cu", notes="ladder/09_autotuned.md",
        space={"BM": (64, 128, 256), "BN": (64, 128, 256), "BK": (8, 16, 32), "TM": (4, 8),
               "TN": (4, 8), "PAD": (4,)},
        block=_grid2d_block, tile=_block_tile, smem_bytes=_padded_smem,
        seed={"BM": 128, "BN": 128, "BK": 16, "TM": 8, "TN": 8, "PAD": 4},
        rules=_thread_tile_rules() + _vector_rules()
        + (Rule("at least 64 threads per block", lambda c: (c["BM"] // c["TM"])
                * (c["BN"] // c["TN"]) >= 64, search=True),),
        vectorized=True,
    ),
    Rung(
        10, "warptiling", "warptiling: block, warp and thread tiles", "ladder/10_warptiling.cu",
        # The H200 search over the first space (BK 8/16, warp tiles up to 128) found the
        # 128-wide warp tiles and BK = 8 always slower (results/nvidia-h200/tune/10_*), and
        # the copy latency exposed: PREFETCH (fetch the next tile before the math) joined.
        space={"BM": (64, 128, 256), "BN": (64, 128, 256), "BK": (16, 32), "WM": (32, 64),
               "WN": (32, 64), "WNITER": (1, 2, 4), "TM": (4, 8), "TN": (4,),
               "PAD": (4,), "PREFETCH": (0, 1)},
        block=lambda c: ((c["BM"] // c["WM"]) * (c["BN"] // c["WN"]) * 32, 1, 1),
        tile=_block_tile, smem_bytes=_padded_smem,
        # the original's A6000 configuration (WM = WN = 64, 128 threads, 128 outputs per
        # thread) is outside this space; this is its 256-thread, 64-output neighbour
        seed={"BM": 128, "BN": 128, "BK": 16, "WM": 64, "WN": 32, "WNITER": 2, "TM": 8,
              "TN": 4, "PAD": 4, "PREFETCH": 0},
        rules=_warp_rules_10(), vectorized=True, derived=_warp_derived,
    ),
    Rung(
        11, "cp_async", "cp.async multistage pipeline", "ladder/11_cp_async.cu",
        space=_PIPELINE_SPACE, block=lambda c: (_patch_threads(c), 1, 1), tile=_block_tile,
        smem_bytes=_pipeline_smem,
        seed={"BM": 128, "BN": 64, "BK": 16, "WM": 64, "WN": 32, "WNITER": 1, "TM": 8,
              "TN": 4, "PAD": 4, "STAGES": 3},
        rules=_pipeline_rules(), vectorized=True,
        derived=_warp_derived,
    ),
    Rung(
        12, "regprefetch", "register prefetch with A transposed in shared memory",
        "ladder/12_regprefetch.cu",
        space={**_PIPELINE_SPACE, "TRANSPOSE_A": (0, 1), "REGPF": (0, 1)},
        block=lambda c: (_patch_threads(c), 1, 1), tile=_block_tile,
        smem_bytes=_pipeline_smem,
        seed={"BM": 128, "BN": 64, "BK": 16, "WM": 64, "WN": 32, "WNITER": 1, "TM": 8,
              "TN": 4, "PAD": 4, "STAGES": 3, "TRANSPOSE_A": 1, "REGPF": 1},
        rules=_pipeline_rules(), vectorized=True, derived=_warp_derived,
    ),
    Rung(
        13, "hoisted", "16x8 patches, hoisted addressing, any layout, batches",
        "ladder/13_hoisted.cu",
        space=_PATCH_SPACE, block=lambda c: (_patch_threads(c), 1, 1), tile=_block_tile,
        smem_bytes=_patch_smem, seed=_PATCH_SEED, rules=_patch_rules(), vectorized=True,
        features=frozenset({"layouts", "batched", "source", "store4"}),
    ),
    Rung(
        14, "streamk", "Stream-K: a persistent grid over (tile, k-range) work",
        "ladder/14_streamk.cu",
        space={**_PATCH_SPACE, "FIXUP": (0, 1, 2), "SPLIT": (0, 1, 2, 4)},
        block=lambda c: (_patch_threads(c), 1, 1), tile=_block_tile,
        smem_bytes=lambda c: _patch_smem(c) + 4,  # + the int that tells a block it is last
        seed={**_PATCH_SEED, "FIXUP": 0, "SPLIT": 0}, rules=_streamk_rules(),
        vectorized=True,
        features=frozenset({"layouts", "batched", "streamk", "source", "store4"}),
        host_only=frozenset({"SPLIT"}),
    ),
)
