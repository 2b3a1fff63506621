"""What `sgemmlab bench` measures: named suites of problems, and which kernels and baselines.

Each suite asks one question of a kernel (a problem is M×N×K, perhaps a batch B@ before it and
a layout :AB after it; problems.py says the form):
    square   the classic cubes, from launch-bound (1024) to compute-bound (8192);
    ragged   sizes no tile divides: edge handling must be correct and must not cost much;
    skinny   one dimension small or large: too few blocks to fill 132 SMs, or a long K;
    small    16 to 512, odd sizes among them: launch overhead, wave quantisation, edges;
    vector   a vector times a matrix (M = 1 or N = 1): the bill is the matrix's bytes;
    decode   a few rows against a weight matrix (M = 1 .. 64), as in LLM decoding: bytes;
    tinyk    outer products and K <= 16: the bill is C's bytes;
    batched  many independent products in one call: small ones (32@128³, 256@64³), flat ones
             (8@512×512×64), big ones (4@2048³);
    layouts  shapes of the suites above with A, B or both column-major (TN, NT, TT).

And one drawn at random (`random_shapes`, `sgemmlab bench --random COUNT --seed SEED`): shapes
off the grid the dispatch table was measured on, to see how well dispatch generalizes.
"""

from __future__ import annotations

import math
import random
from typing import Iterable, Sequence

from .. import registry
from .problems import Problem

Shape = tuple[int, int, int]  # (M, N, K)


def _cubes(*sizes: int) -> list[Problem]:
    return [Problem(s, s, s) for s in sizes]


def _shapes(*shapes: Shape) -> list[Problem]:
    return [Problem(*s) for s in shapes]


#: The shapes the layouts suite takes from the others (and 3000×5000×700: all three differ).
LAYOUT_SHAPES = ((4096, 4096, 4096), (1000, 1000, 1000), (4097, 1023, 515), (8192, 8192, 512),
                 (3000, 5000, 700), (1, 4096, 4096), (16, 4096, 4096))

SUITES: dict[str, list[Problem]] = {
    "square": _cubes(1024, 2048, 4096, 8192),
    "ragged": _shapes((4092, 4092, 4092), (1000, 1000, 1000), (3001, 2000, 999),
                      (4097, 1023, 515)),
    "skinny": _shapes((1024, 1024, 8192), (8192, 8192, 512), (256, 4096, 4096),
                      (4096, 4096, 256)),
    "small": _cubes(16, 17, 31, 64, 97, 127, 128, 129, 131, 255, 256, 257, 383, 511, 512)
    + _shapes((127, 129, 131), (97, 383, 255), (16, 512, 512), (512, 17, 511)),
    "vector": _shapes(*[(1, n, n) for n in (4096, 8192, 16384)],
                      *[(n, 1, n) for n in (4096, 8192, 16384)]),
    "decode": _shapes(*[(m, n, k) for n, k in ((4096, 4096), (11008, 4096), (4096, 11008))
                        for m in (1, 2, 4, 8, 16, 32, 64)]),
    "tinyk": _shapes(*[(4096, 4096, k) for k in (1, 2, 4, 8, 16)]),
    "batched": [Problem(128, 128, 128, 32), Problem(64, 64, 64, 256),
                Problem(512, 512, 64, 8), Problem(2048, 2048, 2048, 4)],
    "layouts": [Problem(*s, layout=lay) for s in LAYOUT_SHAPES for lay in ("TN", "NT", "TT")],
}
DEFAULT_SUITE = "square"

#: Comparisons beyond cuBLAS FP32 (always measured: it is what every ratio is against).
BASELINES = ("triton", "tf32", "tf32x3")
DEFAULT_BASELINES = ("triton", "tf32")  # tf32x3: asked for (--baseline), or with --precision tf32x3

#: What `--precision` takes: the arithmetic `matmul` and `auto` are measured at (api.py):
#:   ieee    exact FP32, the default;
#:   fp32_emulated  Ozaki scheme II on INT8 tensor cores: FP32-accurate, gated like FP32;
#:   tf32x3  3xTF32 on tensor cores: FP32-accurate, so gated by the FP32 bound like FP32;
#:   tf32    TF32 tensor cores: NOT FP32 (10-bit mantissa), its check reported, never gated.
PRECISIONS = registry.PRECISIONS
#: The baselines a precision brings along (unless --baseline none), its anchor first: what a
#: user gets from torch at that precision, the report's second ratio (report.vs_anchor).
PRECISION_BASELINES = {"ieee": (), "fp32_emulated": ("tf32x3",),
                       "tf32x3": ("tf32x3", "tf32"), "tf32": ("tf32",)}


def suite(name: str) -> list[Problem]:
    try:
        return list(SUITES[name])
    except KeyError:
        raise KeyError(f"unknown suite {name!r}; known suites: {', '.join(SUITES)}") from None


def shapes_for(suites: Sequence[str], shapes: Iterable) -> list[Problem]:
    """The suites' problems then the explicit ones (Problems or (M, N, K) shapes), each once,
    in order; the default suite when neither is given."""
    todo = [p for name in suites for p in suite(name)] + [Problem.of(s) for s in shapes]
    return list(dict.fromkeys(todo)) or suite(DEFAULT_SUITE)


def plain_shapes(problems: Iterable[Problem]) -> list[Shape]:
    """(M, N, K) of problems that are one row-major product each (what the tuner measures:
    it takes layouts as an option of its own); ValueError naming one that is not."""
    out = []
    for p in problems:
        if not p.plain:
            raise ValueError(f"{p} is a batch, has a column-major operand or padded rows: "
                             "the tuner measures one row-major product per shape (--layout "
                             "for layouts)")
        out.append(p.shape)
    return out


# -- a random suite -------------------------------------------------------------------------
RANDOM_MAX_DIM = 16384
RANDOM_MAX_PRODUCT = 2**37  # M·N·K: 2.7e11 FLOP, about 5 ms at 50 TFLOP/s
RANDOM_PREFIX = "random-"


RANDOM_MAX_BATCH_PRODUCT = 2**33  # batch·M·N·K of a drawn batch (the batched grid's bound)
RANDOM_MAX_BATCH = 64
#: random_mix's batched problems: those whose index modulo 12 is one of these (5 falls on a
#: misaligned third, 10 on an aligned one)
BATCHED_AT = (5, 10)
RANDOM_PADS = (1, 3, 4, 16)  # random_mix's leading dimensions past the row: odd and aligned


def random_suite_name(count: int, seed: int, mix: bool = False) -> str:
    """The name a random suite goes by in results (tags, "suites"): random-200-s2026, or
    random-mix-300-s7 for `random_mix`'s draw."""
    return f"{RANDOM_PREFIX}{'mix-' if mix else ''}{count}-s{seed}"


def is_random_suite(name: str) -> bool:
    return name.startswith(RANDOM_PREFIX)


def _draw(count: int, exclude: Iterable, one) -> list[Problem]:
    """`count` distinct problems, each `one(i)` (i: how many are drawn so far; None or a
    problem already drawn or in `exclude` is drawn again, within a bound, so no `exclude`
    can make it loop forever)."""
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise ValueError(f"count must be an integer >= 0 (got {count!r})")
    seen = {Problem.of(s) for s in exclude}
    out: list[Problem] = []
    for _ in range(1000 + 100 * count):
        if len(out) == count:
            break
        p = one(len(out))
        if p is not None and p not in seen:
            seen.add(p)
            out.append(p)
    if len(out) < count:
        raise ValueError(f"drew only {len(out)} distinct problems of the {count} asked for")
    return out


def _log_uniform(rng: random.Random) -> int:
    return round(math.exp(rng.uniform(0.0, math.log(RANDOM_MAX_DIM))))


def random_shapes(count: int, seed: int, exclude: Iterable = ()) -> list[Problem]:
    """`count` distinct shapes M×N×K, each dimension drawn log-uniformly in [1, 16384] and
    rounded to an integer, with M·N·K <= 2^37 (a draw above it is drawn again), none of
    them in `exclude` (Problems or (M, N, K) shapes: the dispatch table's grid, say).
    The same `count`, `seed` and `exclude` always give the same list, in the same order."""
    rng = random.Random(seed)

    def one(i: int) -> Problem | None:
        M, N, K = (_log_uniform(rng) for _ in range(3))
        return Problem(M, N, K) if M * N * K <= RANDOM_MAX_PRODUCT else None

    return _draw(count, exclude, one)


def random_mix(count: int, seed: int, exclude: Iterable = ()) -> list[Problem]:
    """`count` distinct problems of every kind a user sends, drawn from `seed`: A's and B's
    layouts each row- or column-major at random; every third problem with K or N not a
    multiple of 4 (the float4 paths cannot hold), the others with both multiples of 4; every
    sixth a batch of 2 to 64 products (log-uniform) with batch·M·N·K <= 2^33, half of them
    aligned and half not (BATCHED_AT); every fifth
    stored in wider matrices (`Problem.pad`: 1, 3, 4 or 16 floats past each row). Dimensions
    log-uniform in [1, 16384] as in `random_shapes`, M·N·K <= 2^37; none in `exclude`. The
    same arguments always give the same list (the pads come from a generator of their own,
    so a seed's shapes are the ones it drew before pads existed)."""
    rng = random.Random(seed)
    pads = random.Random(f"pad-{seed}")

    def one(i: int) -> Problem | None:
        batch = round(math.exp(rng.uniform(math.log(2), math.log(RANDOM_MAX_BATCH)))) \
            if i % 12 in BATCHED_AT else 1
        layout = rng.choice(("NN", "NT", "TN", "TT"))
        M, N, K = (_log_uniform(rng) for _ in range(3))
        if i % 3 == 2:  # misaligned: K or N (or both) off a multiple of 4
            if K % 4 == 0 and N % 4 == 0:
                K = K + 1 if K < RANDOM_MAX_DIM else K - 1
        else:  # aligned: both rounded to a multiple of 4
            K, N = max(4, K // 4 * 4), max(4, N // 4 * 4)
        limit = RANDOM_MAX_PRODUCT if batch == 1 else RANDOM_MAX_BATCH_PRODUCT
        pad = pads.choice(RANDOM_PADS) if i % 5 == 4 else 0
        return Problem(M, N, K, batch, layout, pad) if batch * M * N * K <= limit else None

    return _draw(count, exclude, one)


def dispatch_grid(gpu_name: str) -> set[Problem]:
    """The problems this GPU's dispatch table was measured at (none without a table)."""
    from .. import dispatch

    table = dispatch.load_table(gpu_name)
    if table is None:
        return set()
    return {Problem(M, N, K, batch, layout) for M, N, K, layout, batch in table.shapes()}


#: Kernels `sgemmlab bench --kernel` takes besides the rungs:
#:   auto    at each shape, the rung and configuration the dispatcher chooses (dispatch.py);
#:   matmul  sgemmlab.matmul called on every launch: the API's host overhead included.
SPECIAL_KERNELS = ("auto", "matmul")


def best_rung() -> registry.Rung:
    """The rung `--kernel best` means (registry.best)."""
    return registry.best()


def rungs_for(kernels: list[str]) -> list[registry.Rung]:
    """Rungs named by number, slug, label, 'all' or 'best', each once; 'best' by default.
    Raises KeyError (with the known names) for an unknown kernel."""
    out: list[registry.Rung] = []
    for k in kernels or ["best"]:
        if k == "all":
            out += registry.RUNGS
        elif k == "best":
            out.append(best_rung())
        else:
            out.append(registry.rung(k))
    return list({r.number: r for r in out}.values())  # Rung is not hashable (dict fields)


def baselines_for(names: list[str], precision: str = "ieee") -> list[str]:
    """The extra baselines: the default ones, or those named, then the precision's own
    (PRECISION_BASELINES), each once; 'none' alone means cuBLAS FP32 only."""
    if not names:
        names = list(DEFAULT_BASELINES)
    if "none" in names:
        if len(names) > 1:
            raise ValueError("--baseline none cannot be combined with other baselines")
        return []
    for n in names:
        if n not in BASELINES:
            raise ValueError(f"unknown baseline {n!r}; choose from "
                             f"{', '.join(BASELINES)} or none")
    return list(dict.fromkeys([*names, *PRECISION_BASELINES[precision_of(precision)]]))


def precision_of(name: str) -> str:
    """`name` if it is one of PRECISIONS; ValueError naming them if not."""
    if name not in PRECISIONS:
        raise ValueError(f"unknown precision {name!r}; choose from {', '.join(PRECISIONS)}")
    return name


def kernels_for(kernels: list[str]) -> tuple[list[registry.Rung], list[str]]:
    """(rungs, special kernels) named on the command line: rungs as rungs_for takes them,
    'auto' and 'matmul' each once in the order given, then the Python rungs (py3, py03_smem:
    their labels, registry.PYTHON); 'best' when nothing is named.
    Raises KeyError (naming the rungs and the special kernels) for an unknown kernel."""
    names = list(kernels or ["best"])
    python = [k for k in names if k.startswith("py")]
    for k in python:
        registry.python_rung(k)  # KeyError names the Python track's rungs
    special = list(dict.fromkeys(k for k in names if k in SPECIAL_KERNELS))
    special += list(dict.fromkeys(registry.python_rung(k).label for k in python))
    rest = [k for k in names if k not in SPECIAL_KERNELS and k not in python]
    try:
        return (rungs_for(rest) if rest else []), special
    except KeyError as exc:
        raise KeyError(f"{exc.args[0]}; or {', '.join(SPECIAL_KERNELS)}, all, best, or a "
                       "Python rung (py1-py7)") from None


def candidates(rungs: list[registry.Rung], special: list[str], baselines: list[str], gpu,
               precision: str = "ieee", changed: list[tuple[registry.Rung, dict]] = ()
               ) -> tuple[list, list[str]]:
    """What `sgemmlab bench` measures: each rung at this GPU's default configuration (and
    at its own precision), then each of `changed` (a rung and the values its default takes
    instead: `--config`), then 'auto' and 'matmul' if asked, at `precision`, then the extra
    baselines; and a note for each baseline that cannot run here. ValueError names a rung
    that cannot be built, or a changed configuration that is not one of the rung's."""
    from ..errors import ConfigError
    from ..runtime.compiler import CompileError
    from .baselines import BaselineUnavailable, candidate
    from .runner import auto_candidate, matmul_candidate, rung_candidate

    out, notes = [], []
    for r, cfg in [(r, r.default(gpu.name)) for r in rungs] + [
            (r, r.default(gpu.name) | values) for r, values in changed]:
        if problems := r.violations(cfg):
            raise ValueError(f"{r.label} at {registry.config_key(cfg)}: " + "; ".join(problems))
        try:
            out.append(rung_candidate(r, cfg))
        except (CompileError, ConfigError, OSError) as exc:
            raise ValueError(f"{r.label} cannot be built: {str(exc).splitlines()[0]}") from None
    for name in special:
        if name.startswith("py"):  # a Python rung at its twin's configuration on this GPU
            from .pytrack import python_candidate

            py = registry.python_rung(name)
            out.append(python_candidate(py, py.rung.default(gpu.name)))
            continue
        out.append(auto_candidate(gpu, precision) if name == "auto"
                   else matmul_candidate(precision))
    for name in baselines:
        try:
            out.append(candidate(name))
        except BaselineUnavailable as exc:
            notes.append(str(exc))
    return out, notes
