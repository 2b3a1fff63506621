"""`sgemmlab inspect --track numba`: each Python rung's machine code beside its CUDA twin's.

Both are compiled here, with no GPU: the twin by NVRTC as the launcher builds it for
aligned operands (compile_for), the Python rung by Numba and nvJitLink (pytrack/build.py)
for the signature its launches have. Both cubins are read by the same SASS code (sass.py):
registers, spills and shared memory from the cubin, blocks per SM from the occupancy model,
and the hot loop's mix — FFMA share, instructions per FFMA, load widths (LDS.128 is four
floats in one instruction), and the integer work that carries 64-bit indices (Numba's
indices are Python ints: int64, so every address is built with carries, where the CUDA
rungs index with int).

What a learner reads off it: the same algorithm, compiled by a different front end, costs
what its loop's instructions cost. Measured times (the CLI passes the newest
`ladder --track numba` file's records) stand beside them.
"""

from __future__ import annotations

from .. import registry
from ..runtime import occupancy as occ_mod
from ..runtime.compiler import resources_from_cubin
from . import sass as sass_mod
from .report import _table_md, _table_text, compile_for


def int64_ops(opcodes: dict[str, int]) -> int:
    """Instructions of a loop that exist for 64-bit integers: the high half of an add or
    shift (.X, .HI), a widening multiply (.WIDE), a 64-bit compare (.EX)."""
    marks = (".X", ".HI", ".WIDE", ".EX")
    return sum(n for op, n in opcodes.items()
               if sass_mod.category(op) == "integer/address" and any(m in op for m in marks))


def _side(cubin: bytes, entry: str, threads: int, g: occ_mod.GPU) -> dict:
    res = resources_from_cubin(cubin, entry)
    occ = occ_mod.occupancy(g, threads, res.registers, res.smem_bytes).to_dict()
    out = {"registers": res.registers, "spill_bytes": res.spill_stores + res.spill_loads,
           "smem_bytes": res.smem_bytes, "blocks_per_sm": occ["blocks"],
           "limits": occ["limits"]}
    try:
        loop, whole = sass_mod.analyse(cubin)
    except sass_mod.NoDisassembler as exc:
        return {**out, "sass": {"skipped": str(exc)}}
    if loop is None:
        return {**out, "sass": {"skipped": "no loop with FFMAs found"}}
    mix = loop.to_dict()
    mix["instructions_per_ffma"] = loop.instructions_per_ffma
    mix["int64_ops"] = int64_ops(mix["opcodes"])
    mix["local_memory_instructions"] = whole["local"]
    return {**out, "sass": mix}


def compare(py: registry.PyRung, cfg: registry.Config, g: occ_mod.GPU,
            measured: dict[str, dict] | None = None) -> dict:
    """One Python rung and its twin at `cfg` on GPU `g`: both sides' resources, occupancy and
    hot-loop mix, and, from `measured` (label -> record of one ladder-numba file at one
    shape), both times and their ratio."""
    from ..pytrack import build, module
    from ..runtime.compiler import ENTRY

    twin = py.rung
    if problems := twin.violations(cfg):
        raise ValueError(f"illegal configuration for {py.label} (twin {twin.label}): "
                         + "; ".join(problems))
    threads = twin.threads(cfg)
    built = build.build(module(py), cfg, g.arch)
    out = {"rung": py.label, "twin": twin.label, "gpu": g.slug, "arch": g.arch,
           "config": dict(cfg),
           "python": _side(built.cubin, built.entry, threads, g),
           "cuda": _side(compile_for(twin, cfg, g.arch).cubin, ENTRY, threads, g),
           "measured": None}
    if measured:
        p = _at(measured.get(py.label), cfg)
        c = _at(measured.get(twin.label), cfg)
        if p and c:
            out["measured"] = {"python_us": p["median_us"], "cuda_us": c["median_us"],
                               "python_vs_cublas": p["vs_cublas"],
                               "cuda_vs_cublas": c["vs_cublas"],
                               "python_over_cuda": p["median_us"] / c["median_us"],
                               "source": p.get("source")}
    return out


def _at(recs, cfg) -> dict | None:
    """The record of `recs` (one record or a list) timed at `cfg`."""
    for r in recs if isinstance(recs, list) else [recs] if recs else []:
        if r.get("status") == "ok" and r.get("config") == dict(cfg):
            return r
    return None


def track(g: occ_mod.GPU, measured: dict[str, dict] | None = None,
          pys: list[registry.PyRung] | None = None) -> list[dict]:
    """Every Python rung (or `pys`) beside its twin at the twin's default for `g`."""
    return [compare(py, py.rung.default(g.name), g, measured) for py in pys or registry.PYTHON]


def _pair(it: dict, fn, sep: str = " / ") -> str:
    a, b = (fn(it[k]) for k in ("python", "cuda"))
    return f"{a}{sep}{b}"


def _mix(side: dict, key: str, fmt: str = "{}") -> str:
    s = side["sass"]
    return fmt.format(s[key]) if key in s else "—"


def _widths(side: dict, key: str) -> str:
    w = side["sass"].get(key)
    return "+".join(f"{n}x{bits}" for bits, n in sorted(w.items())) if w else "—"


def _wide_share(side: dict, key: str) -> str:
    """The share of a loop's loads of this kind that move 128 bits (four floats) at once."""
    w = side["sass"].get(key)
    return f"{w.get('128', 0) / sum(w.values()):.0%}" if w else "—"


def rows(items: list[dict], compact: bool = False) -> tuple[list[str], list[list[str]]]:
    """The side-by-side table; `compact` (the terminal's): short names and no spaces
    around the slashes, so it fits 100 columns."""
    sep = "/" if compact else " / "
    head = ["rung (twin)", "regs", "blocks/SM", "FFMA share", "instr/FFMA", "LDS (n x bits)",
            "LDG (n x bits)", "int64 ops", "time (ms)", "Python/CUDA"]
    if compact:
        head = ["py/twin", "regs", "blk/SM", "FFMA %", "ins/FFMA", "LDS.128 %",
                "LDG.128 %", "int64", "ms", "py/cu"]
    out = []
    for it in items:
        m = it["measured"]
        name = (f"{it['rung'][:4]}/{it['twin'][:2]}" if compact
                else f"{it['rung']} ({it['twin']})")
        out.append([
            name,
            _pair(it, lambda s: str(s["registers"]), sep),
            _pair(it, lambda s: str(s["blocks_per_sm"]), sep),
            _pair(it, lambda s: _mix(s, "ffma_share", "{:.0%}"), sep),
            _pair(it, lambda s: _mix(s, "instructions_per_ffma",
                                     "{:.1f}" if compact else "{:.2f}"), sep),
            _pair(it, lambda s: (_wide_share if compact else _widths)(s, "lds_widths"), sep),
            _pair(it, lambda s: (_wide_share if compact else _widths)(s, "ldg_widths"), sep),
            _pair(it, lambda s: _mix(s, "int64_ops"), sep),
            "—" if not m else (f"{m['python_us'] / 1000:.1f}/{m['cuda_us'] / 1000:.1f}"
                               if compact else
                               f"{m['python_us'] / 1000:.2f}{sep}{m['cuda_us'] / 1000:.2f}"),
            "—" if not m else f"{m['python_over_cuda']:.2f}x"])
    return head, out


_LEGEND = ("each cell: Python (Numba) / CUDA C++ (NVRTC), at the twin's configuration; the "
           "hot loop's\ninstructions, as inspect reads them from each cubin")


def text(items: list[dict], title: str) -> str:
    head, body = rows(items, compact=True)
    src = next((i["measured"]["source"] for i in items if i["measured"]), None)
    notes = [_LEGEND, f"measured: {src}" if src else "no measured times (sgemmlab ladder "
             "--track numba on a GPU writes them)"]
    return "\n".join([title, "", _table_text(head, body), "", *notes])


def markdown(items: list[dict], title: str, command: str) -> str:
    head, body = rows(items)
    src = next((i["measured"]["source"] for i in items if i["measured"]), None)
    cfgs = "\n".join(f"- `{i['rung']}` at `{registry.config_key(i['config'])}`" for i in items)
    return (f"# {title}\n\nGenerated by `{command}`; {_LEGEND}.\n"
            + (f"Times from `{src}`.\n" if src else "") + "\n" + _table_md(head, body)
            + f"\n\nConfigurations:\n\n{cfgs}\n")
