"""What `sgemmlab visualize` draws: the replay of each rung's index arithmetic, as data.

The visualizer (a static site: `sgemmlab/data/visualizer/`, written out by `write_site`)
draws nothing of its own invention: every lane's address, every sector, every bank and
every owned element of C comes from `replay.trace`, the same per-thread replay of the
kernel's index expressions that `sgemmlab inspect` counts the bill from, and every
wavefront count from `bill.wavefronts`. This module turns one trace into JSON:

    owned         per thread, the elements of C it stores in the epilogue (block-relative)
    instructions  per source instruction of one K step (and the epilogue): its operand, kind
                  and width; per lane the element of A, B or C it starts at (global: row =
                  element // ld, col = element % ld) or the shared word (shared), -1 where
                  the lane is inactive; per warp the bytes
                  requested, the 32-byte sectors touched and, for shared memory, the
                  wavefronts and phases (more wavefronts than phases: bank conflicts)
    bill          the headline figures of inspect's bill
    pipeline      the ring's stages (rungs 11+), and rung 14's Stream-K plan for a few
                  shapes (runtime/decompose.py's own arithmetic)
    measured      the H200 time and % of cuBLAS from the newest committed ladder file at
                  4096^3 (the caller reads it: bench.results.newest_ladder), or None ("not
                  measured")

The data goes into `data.js` as two assignments, `window.SGEMMLAB` (every rung at the H200's
default configuration) and `window.SGEMMLAB_SEED` (at the seed's, the original articles'):
a page opened from file:// may not fetch() a JSON file, but it may load a script.
"""

from __future__ import annotations

import json
import shutil
from importlib import resources
from pathlib import Path

import numpy as np

from .. import registry
from ..registry import Rung
from . import bill as bill_mod
from . import replay

SCHEMA = "sgemmlab.visual/1"
SHAPE = (4096, 4096, 4096)  # the shape every rung is replayed at (as inspect's bill)
#: Shapes whose Stream-K plan rung 14's page shows (a typed shape: --shape on the CLI).
STREAMK_SHAPES = ((4096, 4096, 4096), (1024, 1024, 1024), (4097, 1023, 515),
                  (3001, 2000, 999), (256, 4096, 4096))
H200_SLOTS = 132  # rung 14's default holds one block per SM on the H200 (its occupancy)
SITE_FILES = ("index.html", "app.js", "style.css")


def _lanes(a: replay.Access, shape) -> tuple[list[int], int]:
    """(per lane the first element a global access touches, or the shared word; -1 where
    the lane is inactive) and the leading dimension that turns an element into (row, col):
    A is M x K with lda = K, B is K x N and C is M x N with ld = N, as the trace lays them
    out (1 for shared words: the page lays those out 32 banks to a row itself)."""
    M, N, K = shape
    idx = a.addr // replay.F
    ld = 1 if a.shared else K if a.operand == "A" else N
    return np.where(a.active, idx, -1).tolist(), ld


def _per_warp(a: replay.Access, warps: int) -> list[dict]:
    """Per warp: lanes active, bytes requested, sectors touched (global) or wavefronts and
    phases (shared: bill.wavefronts, the count inspect's bill sums)."""
    lanes = a.active.reshape(warps, 32)
    out = []
    if a.shared:
        words = (a.addr // replay.F).reshape(warps, 32)
        for w in range(warps):
            wf, ph = bill_mod.wavefronts(words[w], lanes[w], a.width) if lanes[w].any() else (0, 0)
            out.append({"active": int(lanes[w].sum()), "wavefronts": wf, "phases": ph,
                        "bytes": int(lanes[w].sum()) * a.width})
        return out
    addr = a.addr.reshape(warps, 32)
    for w in range(warps):
        live = addr[w][lanes[w]]
        sectors = sorted({int(s) for x in live.tolist()
                          for s in range(x // bill_mod.SECTOR,
                                         (x + a.width - 1) // bill_mod.SECTOR + 1)})
        out.append({"active": int(lanes[w].sum()), "bytes": int(lanes[w].sum()) * a.width,
                    "sectors": len(sectors)})
    return out


def _owned(t: replay.Trace, shape) -> list[list[list[int]]]:
    """Per thread, the [row, col] of every element of C its epilogue stores write."""
    N = shape[1]
    owned: list[list[list[int]]] = [[] for _ in range(t.threads)]
    for a in t.accesses:
        if a.operand != "C" or not a.store:
            continue
        elem = a.addr // replay.F
        for tid in np.flatnonzero(a.active).tolist():
            e = int(elem[tid])
            owned[tid] += [[e // N, e % N + i] for i in range(a.width // replay.F)]
    return owned


def _header(rung: Rung) -> list[str]:
    """The kernel header's first paragraph (what the rung is), for the side panel."""
    from ..runtime.compiler import KERNEL_DIR

    lines = []
    page = KERNEL_DIR / rung.page
    comment = "" if page.suffix == ".md" else "//"  # a page of its own, or the kernel's header
    for line in page.read_text().splitlines():
        if not line.startswith(comment):
            break
        text = line[len(comment):].strip().lstrip("# ")
        if not text and lines:
            break
        if text:
            lines.append(text)
    return lines


def streamk_plans(cfg: dict, shapes) -> list[dict]:
    """Rung 14's Stream-K plan (SPLIT = 0, the configuration's tiles) per shape: the whole
    tiles first, in waves over the persistent blocks, then each streaming block's range of
    the remaining tiles' k-tiles, from runtime/decompose.py (the launcher's own arithmetic)."""
    from ..runtime.decompose import streamk as plan

    out = []
    for M, N, K in shapes:
        p = plan(0, cfg["FIXUP"], cfg["BM"], cfg["BN"], cfg["BK"], M, N, K, 1, H200_SLOTS)
        out.append({"shape": [M, N, K], "grid": p.grid, "tiles": p.tiles_mn,
                    "dp_tiles": p.dp_tiles, "sk_tiles": p.sk_tiles, "sk_blocks": p.sk_blocks,
                    "k_tiles": p.k_tiles, "ranges": [list(r) for r in p.ranges()],
                    "describe": p.describe()})
    return out


def rung_data(rung: Rung, cfg: dict | None = None, shape=SHAPE,
              measured: dict | None = None, streamk_shapes=STREAMK_SHAPES) -> dict:
    """Everything the visualizer draws for one rung (see the module docstring)."""
    cfg = dict(cfg) if cfg is not None else rung.default("NVIDIA H200")
    t = replay.trace(rung, cfg, shape)
    warps = t.threads // 32
    b = bill_mod.count(rung, cfg, shape)
    instructions = []
    for i, a in enumerate(t.accesses):
        lanes, ld = _lanes(a, shape)
        instructions.append({"index": i, "operand": a.operand, "kind": a.kind,
                             "width": a.width, "epilogue": a.epilogue,
                             "space": "shared" if a.shared else "global",
                             "lanes": lanes, "ld": ld, "warps": _per_warp(a, warps)})
    bd = b.to_dict()
    keep = ("global_sector_bytes_per_warp", "smem_loads_per_ffma", "lds_per_ffma",
            "intensity", "smem_wavefronts_per_warp", "block_bytes_requested",
            "block_bytes_distinct", "dram_bytes", "minimal_dram_bytes", "copy_instructions")
    ops = {k: {f: v[f] for f in ("instructions", "bytes_requested", "sector_bytes",
                                 "wavefronts", "conflict_ways")} for k, v in bd["ops"].items()}
    rows, cols = rung.tile(cfg)
    m = (measured or {}).get(rung.label)
    if m and m.get("config") not in (None, cfg):
        m = None  # measured at another configuration: not this one's figure
    occupancy = None
    if m and m.get("registers"):
        from ..runtime import occupancy as occ

        occupancy = occ.occupancy(occ.gpu("h200"), t.threads, int(m["registers"]),
                                  rung.smem_bytes(cfg)).to_dict()
    pipeline = {"stages": cfg.get("STAGES")}
    if rung.supports("streamk"):
        from ..runtime.decompose import MIN_KTILES

        pipeline["streamk"] = streamk_plans(cfg, streamk_shapes)
        # what the page needs to plan a shape the reader types (app.js: planStreamK, the
        # same arithmetic as runtime/decompose.streamk; a browser test holds the two equal)
        pipeline["streamk_rule"] = {"slots": H200_SLOTS, "min_ktiles": MIN_KTILES}
    return {"number": rung.number, "label": rung.label, "name": rung.name,
            "title": rung.title, "source": rung.source, "header": _header(rung),
            "config": cfg, "shape": list(shape), "threads": t.threads, "warps": warps,
            "block": list(rung.block(cfg)), "bk": t.bk, "tile": [rows, cols],
            # the launch's blocks at `shape` and which grid axis walks the rows of C; a
            # block (x, y) computes the tile at rows y*rows (x*rows with rows_on_x), columns
            # x*cols: its pattern is the replayed block's, shifted there (a persistent grid's
            # blocks walk tiles instead: `persistent`)
            "grid": list(rung.grid(cfg, shape[0], shape[1])[:2]), "rows_on_x": rung.rows_on_x,
            "persistent": rung.supports("streamk"),
            "ffma_per_thread": t.ffma, "owned": _owned(t, shape),
            "instructions": instructions,
            "bill": {**{k: bd[k] for k in keep}, "ops": ops},
            "occupancy": occupancy, "pipeline": pipeline, "measured": m,
            "python": _python_twin(rung, cfg, measured)}


def _python_twin(rung: Rung, cfg: dict, measured: dict | None) -> dict | None:
    """The Python rung that mirrors this one (registry.PYTHON): its index arithmetic is
    this rung's line for line, so the replay drawn is its too; with its H200 figure (from
    the Python-track file, at this configuration) when there is one."""
    from ..registry import PYTHON

    py = next((p for p in PYTHON if p.twin == rung.number), None)
    if py is None:
        return None
    m = (measured or {}).get(py.label)
    if m and m.get("config") not in (None, cfg):
        m = None
    return {"label": py.label, "file": f"pytrack/{py.module_name}.py", "measured": m}


def site_data(rungs: list[Rung], measured: dict | None = None, shape=SHAPE,
              streamk_shapes=STREAMK_SHAPES, seed: bool = False) -> dict:
    """The whole site's data; `measured` maps rung labels to their H200 figures
    (bench.results.newest_ladder: the lab's results files, which this layer does not read).
    seed=True: every rung at the seed's configuration (the original articles'), where the
    coalescing story's 1056 and 160 bytes per warp are; else at the H200's defaults."""
    return {"schema": SCHEMA, "gpu": "NVIDIA H200", "shape": list(shape),
            "configuration": "seed" if seed else "default",
            "rungs": [rung_data(r, dict(r.seed) if seed else None, shape, measured,
                                streamk_shapes) for r in rungs],
            "not_replayed": [{"label": r.label, "title": r.title,
                              "why": "no per-thread replay yet: its bill is in its header, "
                                     f"kernels/{r.page}"}
                             for r in registry.FAMILY + registry.TENSOR]}


def write_site(out: Path, rungs: list[Rung], measured: dict | None = None, shape=SHAPE,
               streamk_shapes=STREAMK_SHAPES) -> Path:
    """The static site in `out`: the page, its script and style (package data) and data.js.
    Returns the page's path."""
    out.mkdir(parents=True, exist_ok=True)
    src = resources.files("sgemmlab") / "data" / "visualizer"
    for name in SITE_FILES:
        with resources.as_file(src / name) as f:
            shutil.copyfile(f, out / name)
    text = []
    for name, seed in (("SGEMMLAB", False), ("SGEMMLAB_SEED", True)):
        data = site_data(rungs, measured, shape, streamk_shapes, seed)
        text.append(f"window.{name} = " + json.dumps(data, separators=(",", ":")) + ";\n")
    (out / "data.js").write_text("".join(text))
    return out / "index.html"
