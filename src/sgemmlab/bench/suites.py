"""What `sgemmlab bench` measures: named suites of shapes, and which kernels and baselines.

Each suite asks one question of a kernel:
    square  the classic cubes, from launch-bound (1024) to compute-bound (8192);
    ragged  sizes no tile divides: edge handling must be correct and must not cost much;
    skinny  one dimension small or large: too few blocks to fill 132 SMs, or a long K;
    small   sizes where launch overhead and wave quantisation dominate;
    vector  a vector times a matrix (M = 1 or N = 1): the bill is the matrix's bytes;
    decode  a few rows against a weight matrix (M = 1 .. 64), as in LLM decoding: bytes;
    tinyk   outer products and K <= 16: the bill is C's bytes.
"""

from __future__ import annotations

from .. import registry

Shape = tuple[int, int, int]  # (M, N, K)


def _cubes(*sizes: int) -> list[Shape]:
    return [(s, s, s) for s in sizes]


SUITES: dict[str, list[Shape]] = {
    "square": _cubes(1024, 2048, 4096, 8192),
    "ragged": [(4092, 4092, 4092), (1000, 1000, 1000), (3001, 2000, 999), (4097, 1023, 515)],
    "skinny": [(1024, 1024, 8192), (8192, 8192, 512), (256, 4096, 4096), (4096, 4096, 256)],
    "small": _cubes(64, 128, 256, 512),
    "vector": [(1, n, n) for n in (4096, 8192, 16384)] + [(n, 1, n) for n in (4096, 8192, 16384)],
    "decode": [(m, n, k) for n, k in ((4096, 4096), (11008, 4096), (4096, 11008))
               for m in (1, 2, 4, 8, 16, 32, 64)],
    "tinyk": [(4096, 4096, k) for k in (1, 2, 4, 8, 16)],
}
DEFAULT_SUITE = "square"

#: Comparisons beyond cuBLAS FP32 (always measured: it is what every ratio is against).
BASELINES = ("triton", "tf32")
DEFAULT_BASELINES = BASELINES


def suite(name: str) -> list[Shape]:
    try:
        return list(SUITES[name])
    except KeyError:
        raise KeyError(f"unknown suite {name!r}; known suites: {', '.join(SUITES)}") from None


def shapes_for(suites: list[str], shapes: list[Shape]) -> list[Shape]:
    """The suites' shapes then the explicit ones, each once, in order; the default suite
    when neither is given."""
    todo = [s for name in suites for s in suite(name)] + list(shapes)
    return list(dict.fromkeys(todo)) or suite(DEFAULT_SUITE)


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


def baselines_for(names: list[str]) -> list[str]:
    """The extra baselines: default both; 'none' alone means cuBLAS FP32 only."""
    if not names:
        return list(DEFAULT_BASELINES)
    if "none" in names:
        if len(names) > 1:
            raise ValueError("--baseline none cannot be combined with other baselines")
        return []
    for n in names:
        if n not in BASELINES:
            raise ValueError(f"unknown baseline {n!r}; choose from "
                             f"{', '.join(BASELINES)} or none")
    return list(dict.fromkeys(names))


def kernels_for(kernels: list[str]) -> tuple[list[registry.Rung], list[str]]:
    """(rungs, special kernels) named on the command line: rungs as rungs_for takes them,
    'auto' and 'matmul' each once in the order given; 'best' when nothing is named.
    Raises KeyError (naming the rungs and the special kernels) for an unknown kernel."""
    names = list(kernels or ["best"])
    special = list(dict.fromkeys(k for k in names if k in SPECIAL_KERNELS))
    rest = [k for k in names if k not in SPECIAL_KERNELS]
    try:
        return (rungs_for(rest) if rest else []), special
    except KeyError as exc:
        raise KeyError(f"{exc.args[0]}; or {', '.join(SPECIAL_KERNELS)}, all, best") from None


def candidates(rungs: list[registry.Rung], special: list[str], baselines: list[str], gpu
               ) -> tuple[list, list[str]]:
    """What `sgemmlab bench` measures: each rung at this GPU's default configuration, then
    'auto' and 'matmul' if asked, then the extra baselines; and a note for each baseline
    that cannot run here. ValueError names a rung that cannot be built."""
    from ..errors import ConfigError
    from ..runtime.compiler import CompileError
    from .baselines import BaselineUnavailable, candidate
    from .runner import auto_candidate, matmul_candidate, rung_candidate

    out, notes = [], []
    for r in rungs:
        try:
            out.append(rung_candidate(r, r.default(gpu.name)))
        except (CompileError, ConfigError, OSError) as exc:
            raise ValueError(f"{r.label} cannot be built: {str(exc).splitlines()[0]}") from None
    for name in special:
        out.append(auto_candidate(gpu) if name == "auto" else matmul_candidate())
    for name in baselines:
        try:
            out.append(candidate(name))
        except BaselineUnavailable as exc:
            notes.append(str(exc))
    return out, notes
