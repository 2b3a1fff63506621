"""The compiles a GPU's first calls need, made ahead of time: `sgemmlab warmup` and the
package's bundle of prebuilt cubins.

What dispatch can choose on a GPU is finite: each (rung, configuration) of the shipped
table's entries, every rung's default for that GPU, the grid's candidates (tune/grid.py) and
the tensor-core rungs' defaults with their pre-pass, and on sm_90 the ordered twins (22, 23)
of every rung 14 and 13 among them; each in every layout variant the rung
reads (column-major A and/or B) and, for the float4 rungs, with and without float4 accesses
(and with float4 reads of A and B but C written element by element, where C is unaligned);
and the rungs with the epilogue's source (a bias read in the product's own launch) with it,
where A is row-major (x @ W and x @ W^T: the products a linear layer's bias meets) and the
float4 paths hold (other source variants compile on first use); and the helper kernels a
product may launch beside its rung (HELPERS).
`variants` lists those compiles; `compile_all` runs them in parallel (NVRTC needs no GPU);
`write_bundle` copies the results into a directory that ships in the wheel
(sgemmlab/data/cubins: runtime/compiler.py reads it before the user's cache).
"""

from __future__ import annotations

import itertools
import json
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Iterable

from .. import registry
from ..dispatch import ORDERED_ARCHS
from ..dispatch import table as table_mod
from ..runtime.compiler import (
    MANIFEST,
    _bundle_nvrtc,
    _read_entry,
    compile_kernel,
    write_bundle_entry,
)
from ..runtime.files import write_atomic
from ..runtime.variants import SOURCE_BIAS, variant_macros

#: One compile: (kernel source, NVRTC constants, architecture).
Variant = tuple[str, dict[str, int], str]
#: The kernels beside the rungs a product may launch: a packed plan's copy of an unaligned
#: operand (runtime/launch.py) and the drop-in switch's broadcast of a bias (dropin/fill.py).
HELPERS = ("pack.cu", "broadcast.cu")


def chosen_configs(gpu_name: str) -> list[tuple[registry.Rung, dict]]:
    """Every (rung, configuration) dispatch (or a plain `kernel=` call) can choose on
    `gpu_name`: the package table's entries, every rung's default and seed, the grid's
    candidates; the tensor rungs' too."""
    from .grid import grid_candidates

    pairs: list[tuple[registry.Rung, dict]] = []
    path = table_mod.package_table_path(gpu_name)
    for e in table_mod.read_table(path).entries if path.is_file() else []:
        pairs.append((registry.rung(e["rung"]), dict(e["config"])))
    every = registry.ALL + registry.TENSOR + registry.HISTORY
    pairs += [(r, r.default(gpu_name)) for r in every] + [(r, dict(r.seed)) for r in every]
    pairs += grid_candidates(gpu_name)
    return pairs


def variants(gpu_name: str, arch: str) -> list[Variant]:
    """The distinct compiles behind chosen_configs(gpu_name) for `arch` (the FMA rungs'; the
    tensor rungs compile for their own, sm_90a, and only for a Hopper arch)."""
    from ..runtime import hopper

    out: list[Variant] = []
    seen: set = set()

    def add(source: str, macros: dict, target: str) -> None:
        k = (source, tuple(sorted(macros.items())), target)
        if k not in seen:
            seen.add(k)
            out.append((source, macros, target))

    for source in HELPERS:  # a packed plan's copies (pack.cu), the switch's fill
        add(source, {}, arch)
    pairs = chosen_configs(gpu_name)
    if arch in ORDERED_ARCHS:  # dispatch runs 14 and 13 as their ordered twins there
        pairs += [(registry.rung(registry.TWIN_OF[r.label]), cfg) for r, cfg in pairs
                  if r.label in registry.TWIN_OF]
    for r, cfg in pairs:
        if r.supports("tma"):
            if arch.startswith("sm_90"):
                for source in (0, SOURCE_BIAS):  # F.linear's bias in the epilogue
                    add(r.source, hopper.gemm_macros(r, cfg, source), r.arch)
                add(hopper.PREP, {"PREP": 1}, r.arch)
            continue
        layouts = itertools.product((False, True), repeat=2) if r.supports("layouts") \
            else [(False, False)]
        for (ta, tb), vec4 in itertools.product(list(layouts), (True, False) if r.vectorized
                                                else (False,)):
            add(r.source, r.macros(cfg) | variant_macros(r, vec4, ta, tb), arch)
            if vec4 and r.supports("store4"):  # A and B by float4, an unaligned C not
                add(r.source, r.macros(cfg) | variant_macros(r, vec4, ta, tb, store4=False),
                    arch)
            if r.supports("source") and not ta and (vec4 or not r.vectorized):
                # a bias: x @ W and x @ W^T, aligned (the rest compile on first use)
                add(r.source, r.macros(cfg) | variant_macros(r, vec4, ta, tb, SOURCE_BIAS),
                    arch)
    return out


def _compile(v: Variant):
    source, macros, arch = v
    try:
        return compile_kernel(source, macros, arch)
    except Exception as exc:  # reported per variant by the caller
        return exc


def compile_all(todo: Iterable[Variant], jobs: int = 2):
    """[(variant, Compiled or the exception)] for every variant, `jobs` NVRTCs at a time
    (each writes the user's compile cache, so a later call loads instead of compiling)."""
    todo = list(todo)
    if jobs <= 1:
        return [(v, _compile(v)) for v in todo]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(zip(todo, pool.map(_compile, todo)))


def _previous_entries(directory: Path) -> list[Path]:
    """The entries the last build wrote into `directory`: those its manifest names. A
    manifest from before manifests named them: the *.bin that are bundle entries (intact,
    and recording their own name as their key), never a file that merely ends in .bin."""
    try:
        named = json.loads((directory / MANIFEST).read_text()).get("entries")
    except (OSError, ValueError, AttributeError):
        return []
    if isinstance(named, list):
        return [directory / Path(n).name for n in named
                if isinstance(n, str) and n.endswith(".bin")]
    return [p for p in directory.glob("*.bin")
            if (entry := _read_entry(p)) and entry[0].get("key") == p.stem]


def write_bundle(directory: Path, done) -> list[Path]:
    """Write each compiled variant of `done` (compile_all's result) into `directory`, after
    removing the previous build's entries (a bundle holds exactly one build's variants).
    Only what the previous manifest names is removed: `directory` is whatever --bundle
    names, and a *.bin of someone else's there is not ours to delete. The manifest, written
    last, names this build's entries for the next one."""
    manifest = directory / MANIFEST
    for old in [*_previous_entries(directory), manifest]:
        old.unlink(missing_ok=True)
    paths = []
    for (source, macros, arch), res in done:
        if isinstance(res, Exception):
            raise RuntimeError(f"{source} {macros} ({arch}) did not compile: "
                               f"{str(res).splitlines()[0]}")
        paths.append(write_bundle_entry(directory, res, source, macros, arch))
    meta = json.loads(manifest.read_text()) if manifest.is_file() else {}
    write_atomic(manifest, json.dumps({**meta, "entries": sorted(p.name for p in paths)})
                 + "\n")
    _bundle_nvrtc.cache_clear()
    return paths
