"""What a rung is: the `Rung` record, its legality rules, configurations as text, and
the tuned defaults shipped in data/. Every track's module builds its rungs from these."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Callable, Iterable, Iterator, Mapping

Config = Mapping[str, int]

#: The macro that asks runtime/compiler.py for each post-compile pass (NVRTC sees it too,
#: and nothing in the source reads it: it puts the pass in the compile cache's key).
POST_MACROS = {"operand-order": "SGEMM_POST_ORDER"}

#: Hard limits of every NVIDIA GPU since Volta, which the rules below rely on.
MAX_THREADS_PER_BLOCK = 1024
MAX_STATIC_SMEM = 48 * 1024
MAX_REGISTERS_PER_THREAD = 255
MAX_REGISTERS_PER_BLOCK = 64 * 1024
MAY_BE_ZERO = frozenset({"PAD", "PREFETCH", "TRANSPOSE_A", "REGPF", "FIXUP", "SPLIT",
                         "REG_TRANSPOSE", "INFLIGHT", "TAIL", "ORDER", "STORE16", "PINGPONG",
                         "EXACT_DIV"})

#: What a rung can do beyond the contract of kernels/common.cuh (row-major, one product):
#:   "layouts"  A and/or B may be column-major (the launcher compiles SGEMM_TA / SGEMM_TB);
#:   "batched"  one launch computes a batch of products (batch strides, blockIdx.z or the
#:              tile stream), so the kernel takes three more arguments;
#:   "streamk"  a persistent grid walks a stream of (tile, k-range) work and needs a
#:              workspace for partial sums (runtime/decompose.py plans the launch);
#:   "splitk"   blockIdx.z carries the batch and a part of K; parts meet in a workspace
#:              (rungs 15, 16 and 18; runtime/decompose.py plans the launch), so the kernel
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
#: ones), "fp32_emulated" FP32-accurate on the tensor cores from exact INT8 products (Ozaki
#: scheme II, rung 26), "tf32x3" FP32-accurate on the tensor cores (three TF32 products),
#: "tf32" NOT FP32.
PRECISIONS = ("ieee", "fp32_emulated", "tf32x3", "tf32")


@dataclass(frozen=True)
class Rule:
    """One legality rule: `text` says it in words, `holds` decides it for a configuration.
    A `host` rule concerns a key only the host reads (rung 14's SPLIT): no kernel sees it,
    so no static_assert can mirror it. A `search` rule narrows what a search tries, not
    what the kernel can compile (rung 9 searches rung 8's kernel at 64 threads or more):
    the kernel has no static_assert of it either."""

    text: str
    holds: Callable[[Config], bool]
    host: bool = False
    search: bool = False


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
    #: run of FFMAs so it reads fewer registers per bank (rungs 22-25). "" for none.
    post: str = ""
    #: The rung whose kernel this one compiles and whose tuned defaults it takes (rungs 22-25:
    #: 14 and 13).
    base: int | None = None
    #: The base rung itself (rungs 22-25), for its tuned defaults.
    base_rung: Rung | None = field(default=None, repr=False, compare=False)
    #: Constants the rung itself sets for NVRTC, beside its configuration (rungs 24 and 25:
    #: STEADY=1, which takes postcompile/24_streamk_steady.cuh's walk of the k-tiles).
    defines: Mapping[str, int] = field(default_factory=dict)
    #: The file under kernels/ that holds the rung's header (what it is, the bill, the
    #: prediction, the measured block), where it is not `source`: a rung without code of
    #: its own (9, 22, 23, 25) has a page of its own.
    notes: str | None = None

    @property
    def label(self) -> str:
        return f"{self.number:02d}_{self.name}"

    @property
    def page(self) -> str:
        """The file under kernels/ with the rung's header and measured block."""
        return self.notes or self.source

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
        return {**kept, **self.derived(cfg), "THREADS": self.threads(cfg), **self.defines,
                **post}

    def supports(self, feature: str) -> bool:
        return feature in self.features

    @property
    def binder(self) -> str:
        """How the rung launches (runtime/launch.BINDERS): "tensor" (tensor maps and
        pre-passes, the "tma" rungs), "streamk" (a persistent grid and a fix-up workspace),
        "splitk" (parts of K along gridDim.z) or "grid" (one block per tile of C)."""
        for feature, binder in (("tma", "tensor"), ("streamk", "streamk"),
                                ("splitk", "splitk")):
            if feature in self.features:
                return binder
        return "grid"

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
        if tuned is None and self.base_rung is not None:
            return self.base_rung.default(gpu)  # a twin runs its base's tuned kernel
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


_F = 4  # bytes per float


def _block_tile(cfg: Config) -> tuple[int, int]:
    return cfg["BM"], cfg["BN"]


def _register_rule(live: Callable[[Config], int], what: str,
                   threads: Callable[[Config], int]) -> Rule:
    """The registers a thread keeps live fit the share __launch_bounds__(THREADS) gives it."""
    return Rule(
        f"{what} fit a thread's registers: min({MAX_REGISTERS_PER_THREAD}, "
        f"{MAX_REGISTERS_PER_BLOCK} / threads per block)",
        lambda c: live(c) <= min(MAX_REGISTERS_PER_THREAD,
                                 MAX_REGISTERS_PER_BLOCK // threads(c)),
    )

