"""The ladder's single source of truth: what every rung is and which configurations are legal.

Each rung is described once, here: its source file, its configuration space (the compile-time
constants it takes, with the values worth searching), the rules that make a configuration
legal, and its launch geometry. The runner, the tests, the tuner and the CLI read this module;
nothing else hard-codes a tile size.

Glossary (used the same way in every kernel and every docstring):
    M, N, K     C is M x N, the reduction runs over K.
    BS          rungs 1-3: side of the square thread block / tile.
    BM, BN, BK  the block tile: a thread block computes a BM x BN tile of C, walking K in
                steps of BK.
    TM, TN      the thread tile: each thread accumulates TM x TN outputs in registers
                (rung 21: TM rows of one column, so its block tile is TM x BN).
    WM, WN      the warp tile: each warp owns a WM x WN piece of the block tile (rung 10),
                computed in WMITER x WNITER sub-tiles.
    PAD         extra floats at the end of every row of the transposed A tile in shared memory.
    STAGES      rungs 11-14: shared-memory buffers in the cp.async ring.
    TRANSPOSE_A, REGPF  rung 12's switches: A stored [k][m] in shared memory; fragments
                double-buffered in registers.
    SPLIT, FIXUP  rung 14: the decomposition (0 Stream-K, 1 data-parallel, s >= 2 split-K in
                s parts) and how partial sums meet (0 fixed order, 1 atomic into a
                workspace tile, 2 atomic into C itself). Rungs 15, 16, 18: K in SPLIT
                parts, 0 meaning "as many as fill the GPU" (runtime/splitk.py),
                fixed-order fix-up.
    RM, RN, WARPS, UNROLL  rungs 15-16: rows (columns) of C per block, warps per block,
                float4 per lane in flight.
    GROUP_M     rungs 19-20: row-tiles walked together by the persistent grid (L2 reuse);
                STAGES there is the depth of the TMA ring.
    PROMOTE, INFLIGHT, TAIL, ORDER  rung 20: k-tiles in a run of the tensor core's sum
                before it is added into FP32 registers; a k-tile's products left in flight
                while the next is split; the last wave (and few tiles) split along K; which
                products the tensor core adds first (kernels/hopper/20_3xtf32_wgmma.cu).

Legality is decided here, in Python, before anything compiles. The kernels repeat the
structural rules as static_asserts, and the tests check both directions: every illegal
configuration is refused by the compiler, and legal ones compile. What is guaranteed of
the legal ones, exactly: tools/compile_sweep.py compiles every distinct legal build (both
alignment variants) and results/compile/ keeps what ptxas said of each; every build of
every rung compiles, and none spills or has a stack frame but those data/spills.json lists
(`known_spills`: where the register rule is an estimate, rungs 13, 14 and 16; the seeds and
tuned defaults are never among them). tests/test_compile.py holds the newest sweep to this
registry, these sources and that list, and compiles a covering sample of every space (both
variants, every layout) in each CI run.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Callable, Iterable, Iterator, Mapping

Config = Mapping[str, int]

#: Hard limits of every NVIDIA GPU since Volta, which the rules below rely on.
MAX_THREADS_PER_BLOCK = 1024
MAX_STATIC_SMEM = 48 * 1024
MAX_REGISTERS_PER_THREAD = 255
MAX_REGISTERS_PER_BLOCK = 64 * 1024
MAY_BE_ZERO = frozenset({"PAD", "PREFETCH", "TRANSPOSE_A", "REGPF", "FIXUP", "SPLIT",
                         "REG_TRANSPOSE", "INFLIGHT", "TAIL", "ORDER"})

#: What a rung can do beyond the contract of kernels/common.cuh (row-major, one product):
#:   "layouts"  A and/or B may be column-major (the launcher compiles SGEMM_TA / SGEMM_TB);
#:   "batched"  one launch computes a batch of products (batch strides, blockIdx.z or the
#:              tile stream), so the kernel takes three more arguments;
#:   "streamk"  a persistent grid walks a stream of (tile, k-range) work and needs a
#:              workspace for partial sums (runtime/streamk.py plans the launch);
#:   "splitk"   blockIdx.z carries the batch and a part of K; parts meet in a workspace
#:              (rungs 15, 16 and 18; runtime/splitk.py plans the launch), so the kernel
#:              takes three more arguments (parts, partial sums, counters).
#:   "tma"      a Hopper rung (kernels/hopper/): tensor maps passed by value, operands
#:              brought K-major by a pre-pass where needed (runtime/hopper.py launches it);
#:   "source"   compiled with SGEMM_SOURCE, beta's term is read from a matrix X of its own
#:              (X(r, c) = X[r * ldx + c], ldx 0 for one row: a bias) instead of C, so C =
#:              alpha A B + beta X in one launch; X and ldx follow ldc among the arguments
#:              (kernels/epilogue.cuh's Source);
#:   "store4"   SGEMM_STORE4=0 (with SGEMM_VEC4) writes C element by element while A and B
#:              are still read by float4: a packed plan's aligned copies into a C whose rows
#:              are not 16-byte aligned (plan.staging);
#:   "vec4_c"   SGEMM_VEC4 governs C's accesses alone (A and B are staged element by
#:              element whatever their alignment): the float4 variant runs wherever the
#:              pointers and C's rows allow, whatever A's and B's leading dimensions.
FEATURES = frozenset({"layouts", "batched", "streamk", "splitk", "tma", "source", "store4",
                      "vec4_c"})

#: What a rung computes in: "ieee" exact FP32 on the FMA units (every rung but the tensor
#: ones), "tf32x3" FP32-accurate on the tensor cores (three TF32 products), "tf32" NOT FP32.
PRECISIONS = ("ieee", "tf32x3", "tf32")


@dataclass(frozen=True)
class Rule:
    """One legality rule: `text` says it in words, `holds` decides it for a configuration.
    A `host` rule concerns a key only the host reads (rung 14's SPLIT): no kernel sees it,
    so no static_assert can mirror it."""

    text: str
    holds: Callable[[Config], bool]
    host: bool = False


@dataclass(frozen=True)
class Rung:
    number: int
    name: str  # short slug used on the command line: "naive", "warptiling", ...
    title: str
    source: str  # file name under sgemmlab/kernels/
    space: Mapping[str, tuple[int, ...]]  # constant name -> values worth searching
    block: Callable[[Config], tuple[int, int, int]]  # thread-block dimensions
    tile: Callable[[Config], tuple[int, int]]  # (rows, cols) of C one block computes
    smem_bytes: Callable[[Config], int]  # static shared memory per block
    seed: Config  # the configuration the original worklog used on its A6000
    rules: tuple[Rule, ...] = ()
    rows_on_x: bool = False  # rung 1 puts rows of C on blockIdx.x (that is its flaw)
    vectorized: bool = False  # uses float4 global accesses when alignment allows
    derived: Callable[[Config], Mapping[str, int]] = field(default=lambda cfg: {})
    features: frozenset[str] = frozenset()  # see FEATURES
    host_only: frozenset[str] = frozenset()  # configuration keys the host reads, not NVRTC
    #: The products this rung computes: every shape for the ladder; a family rung (the
    #: memory-bound ones) says which, in words (`domain`) and as a test (`serves`).
    domain: str = "any M, N, K"
    serves: Callable[[int, int, int], bool] = field(default=lambda M, N, K: True)
    #: The shapes dispatch takes this rung for without a table, unless a measurement around
    #: them says otherwise (rungs 15-17: where the big-tile rungs move bytes badly; a part
    #: of what they serve). Never true: chosen only by a table or the heuristic (rung 18).
    preferred: Callable[[int, int, int], bool] = field(default=lambda M, N, K: False)
    #: Rungs with split-K ("splitk"): K is cut into parts of whole units of this many k
    #: (rung 18's k-tile; rungs 15-16 a quantum that keeps float4 loads aligned).
    k_unit: Callable[[Config], int] = field(default=lambda cfg: cfg["BK"])
    precision: str = "ieee"  # PRECISIONS
    #: The NVRTC target when it is not the GPU's own (sm_90a: wgmma and setmaxnreg exist
    #: only for the arch-specific target), and the compute capability it needs.
    arch: str | None = None
    needs_cc: tuple[int, int] | None = None
    #: Dynamic shared memory of a launch ("tma" rungs; the kernels check the formula).
    dynamic_smem: Callable[[Config], int] = field(default=lambda cfg: 0)
    #: A pass over the compiled cubin (runtime/sassedit.py): "operand-order" reorders each
    #: run of FFMAs so it reads fewer registers per bank (rungs 22 and 23). "" for none.
    post: str = ""
    #: The rung whose kernel this one compiles and whose tuned defaults it takes (rungs 22
    #: and 23: 14 and 13, ptxas's order, with the pass after it).
    base: int | None = None

    @property
    def label(self) -> str:
        return f"{self.number:02d}_{self.name}"

    # -- configurations ---------------------------------------------------------------
    def threads(self, cfg: Config) -> int:
        return math.prod(self.block(cfg))

    def all_rules(self) -> tuple[Rule, ...]:
        """The rung's own rules plus the ones every kernel shares."""
        return (
            Rule("every constant is positive (PAD and PREFETCH may be 0)",
                 lambda c: all(v >= 0 if k in MAY_BE_ZERO else v > 0 for k, v in c.items())),
        ) + self.rules + (
            Rule(
                f"threads per block <= {MAX_THREADS_PER_BLOCK}",
                lambda c: self.threads(c) <= MAX_THREADS_PER_BLOCK,
            ),
            Rule("threads per block is a multiple of 32 (whole warps)",
                 lambda c: self.threads(c) % 32 == 0),
            Rule(
                f"static shared memory <= {MAX_STATIC_SMEM} bytes",
                lambda c: self.smem_bytes(c) <= MAX_STATIC_SMEM,
            ),
        )

    def violations(self, cfg: Config) -> list[str]:
        """The rules `cfg` breaks, in words; empty when it is legal."""
        missing = set(self.space) - set(cfg)
        extra = set(cfg) - set(self.space)
        if missing or extra:
            return [f"configuration must set exactly {sorted(self.space)}"
                    f" (missing {sorted(missing)}, unknown {sorted(extra)})"]
        return [r.text for r in self.all_rules() if not _holds(r, cfg)]

    def is_legal(self, cfg: Config) -> bool:
        return not self.violations(cfg)

    def configs(self, legal: bool | None = True) -> Iterator[dict[str, int]]:
        """Every configuration of the space (legal ones only by default; None: all)."""
        names = list(self.space)
        for values in itertools.product(*(self.space[n] for n in names)):
            cfg = dict(zip(names, values))
            if legal is None or self.is_legal(cfg) == legal:
                yield cfg

    def macros(self, cfg: Config) -> dict[str, int]:
        """Compile-time constants handed to NVRTC: the configuration plus derived values
        (host-only keys, such as rung 14's SPLIT, stay out: they change no instruction)."""
        kept = {k: v for k, v in cfg.items() if k not in self.host_only}
        post = {POST_MACROS[self.post]: 1} if self.post else {}
        return {**kept, **self.derived(cfg), "THREADS": self.threads(cfg), **post}

    def supports(self, feature: str) -> bool:
        return feature in self.features

    def deterministic(self, cfg: Config) -> bool:
        """Bit-identical results run to run: every rung but rung 14 with atomic fix-up of
        split tiles (atomics add in whatever order they arrive)."""
        return not ("streamk" in self.features and cfg.get("FIXUP", 0) in (1, 2)
                    and cfg.get("SPLIT", 0) != 1)

    def grid(self, cfg: Config, M: int, N: int) -> tuple[int, int, int]:
        rows, cols = self.tile(cfg)
        gm, gn = -(-M // rows), -(-N // cols)
        return (gm, gn, 1) if self.rows_on_x else (gn, gm, 1)

    def default(self, gpu: str | None = None) -> dict[str, int]:
        """The tuned configuration for `gpu` when one was measured, else the seed's."""
        tuned = tuned_defaults().get(gpu or "", {}).get(self.label)
        if tuned is None and self.base is not None:
            return rung(self.base).default(gpu)  # a twin runs its base's tuned kernel
        # a constant added to the space after the tuning keeps its seed value
        return {**self.seed, **tuned} if tuned is not None else dict(self.seed)


def _holds(rule: Rule, cfg: Config) -> bool:
    """A rule whose arithmetic breaks (a zero tile count, say) is a broken rule."""
    try:
        return bool(rule.holds(cfg))
    except ArithmeticError:
        return False


def config_key(cfg: Config) -> str:
    """Canonical text form, e.g. 'BK=8,BM=128,BN=128,TM=8,TN=8'."""
    return ",".join(f"{k}={cfg[k]}" for k in sorted(cfg, key=str))


def parse_config(text: str) -> dict[str, int]:
    """Inverse of config_key; accepts 'BM=64, BN=64' with any spacing and order."""
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep or not name.strip() or not value.strip().lstrip("-").isdigit():
            raise ValueError(f"malformed configuration item {part!r}: expected NAME=INTEGER")
        out[name.strip().upper()] = int(value)
    return out


def covering_sample(configs: list[dict], k: int, first: Iterable[Config] = ()) -> list[dict]:
    """At most k of `configs` (all of them when there are no more than k): `first` (those
    among them), then configurations that together take every value of every constant at
    least once, then evenly spread ones. Deterministic: tests sample big spaces with it."""
    if len(configs) <= k:
        return list(configs)
    keys = {config_key(c) for c in configs}
    picked: list[dict] = []
    for cfg in first:
        if config_key(cfg) in keys and all(config_key(cfg) != config_key(p) for p in picked):
            picked.append(dict(cfg))
    seen = {item for cfg in picked for item in cfg.items()}
    while len(picked) < k:
        best = max(configs, key=lambda c: len(set(c.items()) - seen))
        if not set(best.items()) - seen:
            break
        picked.append(best)
        seen |= set(best.items())
    spread = [configs[i * (len(configs) - 1) // max(k - 1, 1)] for i in range(k)]
    picked += [c for c in spread if c not in picked]
    return picked[:k]


@cache
def tuned_defaults() -> dict[str, dict[str, dict[str, int]]]:
    """GPU name -> rung label -> configuration, from the search results shipped in data/."""
    path = resources.files("sgemmlab").joinpath("data", "defaults.json")
    if not path.is_file():
        return {}
    return json.loads(path.read_text())["gpus"]


@cache
def tuned_defaults_why() -> dict[str, dict[str, str]]:
    """GPU name -> rung label -> why its default was chosen, where not simply for speed."""
    path = resources.files("sgemmlab").joinpath("data", "defaults.json")
    if not path.is_file():
        return {}
    return json.loads(path.read_text()).get("why", {})


@cache
def known_spills() -> dict[str, list[dict[str, int]]]:
    """Rung label -> the legal configurations the full compile sweep found spilling
    (data/spills.json, written by tools/compile_sweep.py from results/compile/): where a
    rung's register rule is an estimate, these few cost local memory. `sgemmlab tune`
    drops them by the ptxas report as it would any spill."""
    path = resources.files("sgemmlab").joinpath("data", "spills.json")
    if not path.is_file():
        return {}
    return json.loads(path.read_text())["rungs"]


# ---------------------------------------------------------------------------------------
# The rungs. Shared-memory sizes below mirror the __shared__ arrays in each file.
# ---------------------------------------------------------------------------------------
_F = 4  # bytes per float


def _square(cfg: Config) -> tuple[int, int]:
    return cfg["BS"], cfg["BS"]


def _block_tile(cfg: Config) -> tuple[int, int]:
    return cfg["BM"], cfg["BN"]


def _tiles_smem(cfg: Config) -> int:
    return (cfg["BM"] * cfg["BK"] + cfg["BK"] * cfg["BN"]) * _F


def _padded_smem(cfg: Config) -> int:
    return (cfg["BK"] * (cfg["BM"] + cfg["PAD"]) + cfg["BK"] * cfg["BN"]) * _F


def _register_rule(live: Callable[[Config], int], what: str,
                   threads: Callable[[Config], int]) -> Rule:
    """The registers a thread keeps live fit the share __launch_bounds__(THREADS) gives it."""
    return Rule(
        f"{what} fit a thread's registers: min({MAX_REGISTERS_PER_THREAD}, "
        f"{MAX_REGISTERS_PER_BLOCK} / threads per block)",
        lambda c: live(c) <= min(MAX_REGISTERS_PER_THREAD,
                                 MAX_REGISTERS_PER_BLOCK // threads(c)),
    )


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
        1, "naive", "naive: one thread per output, rows on threadIdx.x", "01_naive.cu",
        space=_SMALL_BS, block=lambda c: (c["BS"], c["BS"], 1), tile=_square,
        smem_bytes=lambda c: 0, seed={"BS": 32}, rows_on_x=True,
    ),
    Rung(
        2, "coalesced", "global-memory coalescing", "02_coalesced.cu",
        space=_SMALL_BS, block=lambda c: (c["BS"], c["BS"], 1), tile=_square,
        smem_bytes=lambda c: 0, seed={"BS": 32},
    ),
    Rung(
        3, "smem", "shared-memory cache blocking", "03_smem_tiling.cu",
        space=_SMALL_BS, block=lambda c: (c["BS"], c["BS"], 1), tile=_square,
        smem_bytes=lambda c: 2 * c["BS"] * c["BS"] * _F, seed={"BS": 32},
    ),
    Rung(
        4, "blocktile1d", "1D blocktiling: TM outputs per thread", "04_blocktile_1d.cu",
        space={"BM": (32, 64, 128), "BN": (32, 64, 128), "BK": (4, 8, 16), "TM": (4, 8, 16)},
        block=lambda c: (c["BM"] // c["TM"] * c["BN"], 1, 1), tile=_block_tile,
        smem_bytes=_tiles_smem, seed={"BM": 64, "BN": 64, "BK": 8, "TM": 8},
        rules=(Rule("BM is a multiple of TM", lambda c: c["BM"] % c["TM"] == 0),
               _register_rule(lambda c: 5 * c["TM"] + 16,
                              "TM accumulators, 4*TM values of A (read four k at a time) "
                              "and 16 for indices", lambda c: c["BM"] // c["TM"] * c["BN"])),
    ),
    Rung(
        5, "blocktile2d", "2D blocktiling: TM x TN outputs per thread", "05_blocktile_2d.cu",
        space=_TILES_2D, block=_grid2d_block, tile=_block_tile, smem_bytes=_tiles_smem,
        seed=_SEED_2D, rules=_thread_tile_rules(),
    ),
    Rung(
        6, "vectorized", "float4 global loads, A transposed in shared memory",
        "06_vectorized.cu",
        space={**_TILES_2D, "BK": (8, 16, 32)}, block=_grid2d_block, tile=_block_tile,
        smem_bytes=_tiles_smem, seed=_SEED_2D,
        rules=_thread_tile_rules() + _vector_rules(), vectorized=True,
    ),
    Rung(
        7, "bankfree_b", "conflict-free B fragment reads (split thread columns)",
        "07_bankfree_b.cu",
        space={**_TILES_2D, "BK": (8, 16, 32)}, block=_grid2d_block, tile=_block_tile,
        smem_bytes=_tiles_smem, seed=_SEED_2D,
        rules=_thread_tile_rules() + _vector_rules(), vectorized=True,
    ),
    Rung(
        8, "bankfree_a", "padded transposed A tile (conflict-free transposing stores)",
        "08_bankfree_a.cu",
        space={**_TILES_2D, "BK": (8, 16, 32), "PAD": (0, 4)}, block=_grid2d_block,
        tile=_block_tile, smem_bytes=_padded_smem, seed={**_SEED_2D, "PAD": 4},
        rules=_thread_tile_rules() + _vector_rules()
        + (Rule("PAD is a multiple of 4 (keeps float4 reads of the A tile aligned)",
                lambda c: c["PAD"] % 4 == 0),),
        vectorized=True,
    ),
    Rung(
        9, "autotuned", "rung 8 searched over a wide space on this GPU", "09_autotuned.cu",
        space={"BM": (64, 128, 256), "BN": (64, 128, 256), "BK": (8, 16, 32), "TM": (4, 8),
               "TN": (4, 8), "PAD": (4,)},
        block=_grid2d_block, tile=_block_tile, smem_bytes=_padded_smem,
        seed={"BM": 128, "BN": 128, "BK": 16, "TM": 8, "TN": 8, "PAD": 4},
        rules=_thread_tile_rules() + _vector_rules()
        + (Rule("at least 64 threads per block", lambda c: (c["BM"] // c["TM"])
                * (c["BN"] // c["TN"]) >= 64),),
        vectorized=True,
    ),
    Rung(
        10, "warptiling", "warptiling: block, warp and thread tiles", "10_warptiling.cu",
        # The H200 search over the first space (BK 8/16, warp tiles up to 128) found the
        # 128-wide warp tiles and BK = 8 always slower (results/nvidia-h200/tune-10_*), and
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
        11, "cp_async", "cp.async multistage pipeline", "11_cp_async.cu",
        space=_PIPELINE_SPACE, block=lambda c: (_patch_threads(c), 1, 1), tile=_block_tile,
        smem_bytes=_pipeline_smem,
        seed={"BM": 128, "BN": 64, "BK": 16, "WM": 64, "WN": 32, "WNITER": 1, "TM": 8,
              "TN": 4, "PAD": 4, "STAGES": 3},
        rules=_pipeline_rules(), vectorized=True,
        derived=lambda c: {**_warp_derived(c), "TRANSPOSE_A": 0, "REGPF": 0},
    ),
    Rung(
        12, "regprefetch", "register prefetch with A transposed in shared memory",
        "12_regprefetch.cu",
        space={**_PIPELINE_SPACE, "TRANSPOSE_A": (0, 1), "REGPF": (0, 1)},
        block=lambda c: (_patch_threads(c), 1, 1), tile=_block_tile,
        smem_bytes=_pipeline_smem,
        seed={"BM": 128, "BN": 64, "BK": 16, "WM": 64, "WN": 32, "WNITER": 1, "TM": 8,
              "TN": 4, "PAD": 4, "STAGES": 3, "TRANSPOSE_A": 1, "REGPF": 1},
        rules=_pipeline_rules(), vectorized=True, derived=_warp_derived,
    ),
    Rung(
        13, "hoisted", "16x8 patches, hoisted addressing, any layout, batches",
        "13_hoisted.cu",
        space=_PATCH_SPACE, block=lambda c: (_patch_threads(c), 1, 1), tile=_block_tile,
        smem_bytes=_patch_smem, seed=_PATCH_SEED, rules=_patch_rules(), vectorized=True,
        features=frozenset({"layouts", "batched", "source", "store4"}),
    ),
    Rung(
        14, "streamk", "Stream-K: a persistent grid over (tile, k-range) work",
        "14_streamk.cu",
        space={**_PATCH_SPACE, "FIXUP": (0, 1, 2), "SPLIT": (0, 1, 2, 4)},
        block=lambda c: (_patch_threads(c), 1, 1), tile=_block_tile,
        smem_bytes=lambda c: _patch_smem(c) + 4,  # + the int that tells a block it is last
        seed={**_PATCH_SEED, "FIXUP": 0, "SPLIT": 0}, rules=_streamk_rules(),
        vectorized=True,
        features=frozenset({"layouts", "batched", "streamk", "source", "store4"}),
        host_only=frozenset({"SPLIT"}),
    ),
)

# -- the memory-bound family (kernels/membound/) ------------------------------------------
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


#: Rungs 15, 16 and 18 cut K into SPLIT parts (runtime/splitk.py plans them).
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
_SMALL_MAX_M = 65535 * 16


#: Rung 17's column tiles are at least 128 wide and lie along gridDim.y (65535 at most).
_TINY_K_MAX_N = 65535 * 128

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
        domain=f"K <= 64 and N <= {_TINY_K_MAX_N} (any M, A and B in either layout)",
        serves=lambda M, N, K: K <= 64 and N <= _TINY_K_MAX_N,
        preferred=lambda M, N, K: K <= 16 and N <= _TINY_K_MAX_N,
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
        domain=f"M <= {_SMALL_MAX_M} (row tiles of 16 or more along gridDim.y), any N and K",
        serves=lambda M, N, K: M <= _SMALL_MAX_M,
    ),
)

FAMILY: tuple[Rung, ...] = MEMBOUND + SMALL
ALL: tuple[Rung, ...] = RUNGS + FAMILY


def _hopper_smem(c: Config, b_arrays: int) -> int:
    """STAGES stages of A (128 x 32 floats) and b_arrays of B (BN x 32), a full and an empty
    mbarrier per stage, 1024 bytes to align the tiles to the swizzle's period."""
    return c["STAGES"] * (128 * 32 + b_arrays * c["BN"] * 32) * _F + 16 * c["STAGES"] + 1024


_HOPPER_SMEM_MAX = 227 * 1024  # dynamic shared memory a block may opt in to on Hopper


def _hopper_rules(b_arrays: int) -> tuple[Rule, ...]:
    return (
        Rule("STAGES is 2 to 8", lambda c: 2 <= c["STAGES"] <= 8),
        Rule(f"the ring fits in {_HOPPER_SMEM_MAX} bytes of shared memory (STAGES x (A + "
             f"{b_arrays} x B tiles) + barriers + 1024)",
             lambda c: _hopper_smem(c, b_arrays) <= _HOPPER_SMEM_MAX),
    )


#: The tensor-core rungs (kernels/hopper/, issue 14): Hopper only (sm_90a), not FP32 by the
#: ladder's rule, so neither in ALL nor chosen unless the caller asks for their precision
#: (matmul(precision="tf32x3" | "tf32")). Looked up like any rung.
TENSOR: tuple[Rung, ...] = (
    Rung(
        19, "tf32_wgmma", "TF32 on the tensor cores: TMA, mbarriers, wgmma (NOT FP32)",
        "hopper/19_tf32_wgmma.cu",
        space={"BN": (128, 256), "STAGES": (2, 3, 4, 5, 6), "GROUP_M": (4, 8, 16)},
        block=lambda c: (384, 1, 1), tile=lambda c: (128, c["BN"]),
        smem_bytes=lambda c: 0, seed={"BN": 256, "STAGES": 4, "GROUP_M": 8},
        rules=_hopper_rules(1), features=frozenset({"layouts", "tma", "source"}),
        precision="tf32", arch="sm_90a", needs_cc=(9, 0),
        dynamic_smem=lambda c: _hopper_smem(c, 1),
        domain="any M, N, K on a Hopper GPU (sm_90)",
    ),
    Rung(
        20, "3xtf32_wgmma", "3xTF32 on the tensor cores: FP32-accurate, three TF32 products",
        "hopper/20_3xtf32_wgmma.cu",
        space={"BN": (128,), "STAGES": (2, 3, 4), "GROUP_M": (4, 8, 16), "PROMOTE": (1, 2, 4),
               "INFLIGHT": (0, 1), "TAIL": (0, 1), "ORDER": (0, 1, 2)},
        block=lambda c: (384, 1, 1), tile=lambda c: (128, c["BN"]),
        smem_bytes=lambda c: 0,
        seed={"BN": 128, "STAGES": 4, "GROUP_M": 8, "PROMOTE": 1, "INFLIGHT": 1, "TAIL": 1,
              "ORDER": 0},
        rules=_hopper_rules(2), features=frozenset({"layouts", "tma", "source"}),
        precision="tf32x3", arch="sm_90a", needs_cc=(9, 0),
        dynamic_smem=lambda c: _hopper_smem(c, 2),
        domain="any M, N, K on a Hopper GPU (sm_90)",
    ),
)


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


#: The macro that asks runtime/compiler.py for each post-compile pass (NVRTC sees it too,
#: and nothing in the source reads it: it puts the pass in the compile cache's key).
POST_MACROS = {"operand-order": "SGEMM_POST_ORDER"}


def _ordered_twin(base: Rung, number: int, source: str, title: str,
                  name: str = "ordered") -> Rung:
    """Rung `base` as ptxas compiles it (its source, or `source` that includes it with a
    switch set), then the operand-order pass (issue 19): the same space, rules, seed and
    launch, so any configuration of one is one of the other."""
    from dataclasses import replace

    return replace(base, number=number, name=f"{base.name}_{name}", title=title,
                   source=source, post="operand-order", base=base.number)


#: Rungs 14 and 13 with their FFMAs put in an order the register file can feed
#: (kernels/22_streamk_ordered.cu tells the story; docs/operands-h200.md holds the table it
#: rests on). Looked up like any rung; dispatch runs them in place of their bases on sm_90
#: (dispatch.choose: the table keeps naming 13 and 14, whose configurations they take).
#: Neither in ALL nor in the compile sweep: the pass moves instructions and flags, never a
#: register or a byte of frame, so what registry guarantees of the base holds for the twin
#: (tests/test_sassedit.py checks the resources are equal).
_LADDER = {r.number: r for r in RUNGS}
ORDERED: tuple[Rung, ...] = (
    _ordered_twin(_LADDER[14], 22, "22_streamk_ordered.cu",
                  "Stream-K with its FFMAs reordered for the register banks"),
    _ordered_twin(_LADDER[13], 23, "23_hoisted_ordered.cu",
                  "rung 13 with its FFMAs reordered for the register banks"),
    # kernels/24_streamk_steady.cu: and the k-loop's steady state split off, branch-free
    _ordered_twin(_LADDER[14], 24, "24_streamk_steady.cu",
                  "Stream-K with a branch-free steady-state k-loop", "steady"),
    _ordered_twin(_LADDER[13], 25, "25_hoisted_steady.cu",
                  "rung 13 with a branch-free steady-state k-loop", "steady"),
)


def best() -> Rung:
    """The rung `--kernel best` means, and `matmul(config=...)` without `kernel`: the
    highest-numbered rung of the ladder. (`matmul` with neither asks the dispatcher.)"""
    return max(RUNGS, key=lambda r: r.number)


_LOOKED_UP = ALL + TENSOR + HISTORY + ORDERED  # every rung `rung()` finds, in number order
_BY_NAME = {r.name: r for r in _LOOKED_UP} | {r.label: r for r in _LOOKED_UP} | {
    str(r.number): r for r in _LOOKED_UP}


#: base label -> the twin dispatch runs in its place on sm_90, at the table's configuration
#: of the base: rungs 22 and 23. Rungs 24 and 25 want other settings than their bases'
#: (rung 24: A by cp.async, REG_TRANSPOSE=0; at rung 14's REG_TRANSPOSE=1 it is slower than
#: 22), so dispatch reaches them through table entries that name them.
STAND_INS = (22, 23)
TWIN_OF = {_BY_NAME[str(t.base)].label: t.label for t in ORDERED if t.number in STAND_INS}


def rung(key: str | int) -> Rung:
    """Look a rung up by number (10), slug ('warptiling') or label ('10_warptiling')."""
    try:
        return _BY_NAME[str(key)]
    except KeyError:
        names = ", ".join(f"{r.number} ({r.name})" for r in _LOOKED_UP)
        raise KeyError(f"unknown kernel {key!r}; known rungs: {names}") from None


# -- the Python track ----------------------------------------------------------------------
@dataclass(frozen=True)
class PyRung:
    """A rung of the Python track (sgemmlab/pytrack/, issue 16): a kernel written in Python
    and compiled by Numba, mirroring CUDA rung `twin`, whose configuration space, rules, seed
    and launch geometry it takes (nothing of them is repeated here or in its module)."""

    number: int  # its place in the track, 1-7
    name: str
    twin: int  # the CUDA rung it mirrors
    module_name: str  # sgemmlab.pytrack.<module_name> (pytrack.module(py) imports it)

    @property
    def label(self) -> str:
        return f"py{self.number:02d}_{self.name}"

    @property
    def rung(self) -> Rung:
        return rung(self.twin)


#: The course's seven Python kernels, re-created: naive, coalesced, shared-memory tiles, 1D
#: and 2D blocktiling, four-float copies with A transposed, warptiling (CUDA rung 10) with
#: the small autotuning search of the course's kernel 7.
PYTHON: tuple[PyRung, ...] = (
    PyRung(1, "naive", 1, "r01_naive"),
    PyRung(2, "coalesced", 2, "r02_coalesced"),
    PyRung(3, "smem", 3, "r03_smem"),
    PyRung(4, "blocktile1d", 4, "r04_blocktile_1d"),
    PyRung(5, "blocktile2d", 5, "r05_blocktile_2d"),
    PyRung(6, "vectorized", 6, "r06_vectorized"),
    PyRung(7, "warptiling", 10, "r07_warptiling"),
)


def python_rung(key: str | int) -> PyRung:
    """A Python rung by number (3, '3', 'py3'), label ('py03_smem') or 'py' + name."""
    text = str(key).strip()
    for p in PYTHON:
        if text in (str(p.number), f"py{p.number}", p.label, f"py{p.number:02d}",
                    f"py_{p.name}", p.name):
            return p
    names = ", ".join(f"{p.number} ({p.label})" for p in PYTHON)
    raise KeyError(f"unknown Python rung {key!r}; the Python track has: {names}")
