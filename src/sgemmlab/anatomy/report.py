"""`sgemmlab inspect`: a rung's bill, resources, occupancy, SASS mix and predicted bound,
gathered into one dict (the JSON output) and rendered as terminal text or Markdown.

Everything here is computed: the bill from the registry's configuration (bill.py), the
resources from ptxas's report of a fresh NVRTC compile, the instruction mix from the cubin.
No GPU is needed; measured times, when the caller passes them (the CLI reads the newest
ladder results file: bench.results.ladder_records), are shown beside the prediction.
"""

from __future__ import annotations

from .. import registry
from ..runtime import occupancy as occ_mod
from ..runtime.compiler import CompileError, compile_kernel
from ..runtime.launch import variant_macros
from . import bill as bill_mod
from . import predict as predict_mod
from . import sass as sass_mod


def compile_for(rung: registry.Rung, config: registry.Config, arch: str):
    """As the launcher compiles it for aligned operands (float4 accesses where it can)."""
    macros = rung.macros(config) | variant_macros(rung, vec4=True)
    return compile_kernel(rung.source, macros, arch)


class DoesNotCompile(ValueError):
    """The rung does not compile for the GPU's architecture (a Hopper-only instruction)."""


def inspect_rung(rung: registry.Rung, config: registry.Config, shape, g: occ_mod.GPU,
                 measured: tuple[dict, str] | None = None,
                 occupancy_gpus: list[occ_mod.GPU] | None = None) -> dict:
    """Everything `sgemmlab inspect` says about one rung at one configuration and shape."""
    if rung.supports("tma"):
        raise ValueError(f"rung {rung.label} is a tensor-core rung: inspect replays the FMA "
                         "rungs' index arithmetic, not wgmma's; its bill is in its header, "
                         f"kernels/{rung.page}, and in docs/worklog.md")
    if problems := rung.violations(config):
        raise ValueError(f"illegal configuration for {rung.label}: " + "; ".join(problems))
    try:
        compiled = compile_for(rung, config, g.arch)
    except CompileError as exc:
        raise DoesNotCompile(f"{rung.label} does not compile for {g.slug} ({g.arch}): "
                             f"{_first_error(exc)}") from None
    res = compiled.resources
    occupancy = {}
    gpus = occupancy_gpus or [g]
    for other in gpus if g in gpus else [g, *gpus]:
        try:
            r = res if other.arch == g.arch else compile_for(rung, config, other.arch).resources
        except CompileError as exc:  # e.g. a Hopper-only instruction on an older GPU
            occupancy[other.slug] = {"skipped": f"does not compile for {other.arch}: "
                                                f"{_first_error(exc)}"}
            continue
        occupancy[other.slug] = occ_mod.occupancy(other, rung.threads(config), r.registers,
                                                  r.smem_bytes).to_dict()
    # rung 14's launch plan (and so its fix-up) depends on the blocks the GPU holds at once
    b = bill_mod.count(rung, config, shape, slots=g.sms * occupancy[g.slug]["blocks"])
    try:
        loop, whole = sass_mod.analyse(compiled.cubin)
        sass = loop.to_dict() if loop else {"skipped": "no loop with FFMAs found"}
        sass["local_memory_instructions"] = whole["local"]
    except sass_mod.NoDisassembler as exc:
        loop, sass = None, {"skipped": str(exc)}
    pred = predict_mod.predict(b, g, loop)
    out = {
        "rung": rung.label, "title": rung.title, "gpu": g.slug, "arch": g.arch,
        "shape": list(shape), "config": dict(config), "bill": b.to_dict(),
        "resources": {"registers": res.registers, "spill_stores": res.spill_stores,
                      "spill_loads": res.spill_loads, "stack_bytes": res.stack_bytes,
                      "static_smem_bytes": res.smem_bytes, "dynamic_smem_bytes": 0},
        "occupancy": occupancy, "sass": sass, "prediction": pred.to_dict(), "measured": None,
    }
    if measured and (rec := measured[0].get(rung.label)) and rec.get("median_us"):
        out["measured"] = {"median_us": rec["median_us"], "config": rec.get("config"),
                           "same_config": rec.get("config") == dict(config),
                           "source": measured[1]}
    return out


def _first_error(exc: CompileError) -> str:
    """The compiler's first error line, without the file name and line number."""
    line = next((ln for ln in str(exc).splitlines() if "error:" in ln), str(exc).splitlines()[0])
    return line.split("error:", 1)[-1].strip()


def ladder(g: occ_mod.GPU, shape, seed: bool = False,
           measured: tuple[dict, str] | None = None,
           rungs: list[registry.Rung] | None = None) -> list[dict]:
    """Every rung (or `rungs`) at this GPU's default configuration (or the seed's),
    inspected; a rung that does not compile for the GPU is an item with only its label and
    why ("skipped")."""
    items = []
    for r in rungs or registry.RUNGS + registry.HISTORY:
        try:
            items.append(inspect_rung(r, dict(r.seed) if seed else r.default(g.name), shape,
                                      g, measured))
        except DoesNotCompile as exc:
            items.append({"rung": r.label, "title": r.title, "gpu": g.slug,
                          "skipped": str(exc)})
    return items


# -- rendering ---------------------------------------------------------------------------
def _us(x: float | None) -> str:
    return "—" if x is None else (f"{x / 1000:.2f} ms" if x >= 10000 else f"{x:.0f} µs")


def ladder_rows(items: list[dict]) -> tuple[list[str], list[list[str]]]:
    head = ["rung", "glob B/warp/k-step", "FLOP/B", "smem words/FFMA", "worst conflict",
            "LDG/STS/LDGSTS", "regs", "blocks/SM (limit)", "FFMA share", "overhead/FFMA",
            "bank-conflict FFMA",
            "predicted", "limit", "measured", "pred/meas"]
    rows = []
    for it in items:
        if "skipped" in it:
            rows.append([it["rung"]] + ["—"] * (len(head) - 1))
            continue
        b, s, p, m = it["bill"], it["sass"], it["prediction"], it["measured"]
        o = it["occupancy"][it["gpu"]]
        ways = [v["conflict_ways"] for k, v in b["ops"].items() if v["ideal"]]
        meas = m["median_us"] if m else None
        copies = "/".join(f"{n:.3g}" for n in b["copy_instructions"].values())
        rows.append([
            it["rung"], f"{b['global_sector_bytes_per_warp']:.0f}", f"{b['intensity']:.2f}",
            f"{b['smem_loads_per_ffma']:.3g}", f"{max(ways):.0f}-way" if ways else "—",
            copies, str(it["resources"]["registers"]),
            f"{o['blocks']} ({', '.join(o['limits'])})",
            f"{100 * s['ffma_share']:.0f} %" if "ffma" in s else "—",
            f"{s['overhead_per_ffma']:.3f}" if "ffma" in s else "—",
            f"{s.get('bank_conflicts', 0) / s['ffma']:.0%}" if s.get("ffma") else "—",
            _us(p["time_us"]), p["limit"], _us(meas) + ("" if not m or m["same_config"]
                                                        else " *"),
            f"{p['time_us'] / meas:.2f}" if meas else "—"])
    return head, rows


def _table_text(head, rows) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(head, *rows)]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths))  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths]), *map(line, rows)])


def _table_md(head, rows) -> str:
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
                      *("| " + " | ".join(r) + " |" for r in rows)])


PREDICTED_LABEL = "PREDICTED, not measured"


def _skipped(items: list[dict]) -> list[str]:
    return [f"{i['skipped']}: not inspected" for i in items if "skipped" in i]


#: Prediction and measurement further apart than this factor, either way, are marked.
DISAGREE = 1.5


def basis_lines(items: list[dict]) -> list[str]:
    """What the predictions rest on, in a line or two: the model, and whether the SASS was
    read (without nvdisasm the issue limit is left out, and issue-bound rungs come out
    faster: at 4096^3 on the H200, rungs 13-14 as FFMA-bound)."""
    done = [i for i in items if "skipped" not in i]
    if not done:
        return []
    out = ["predicted: the slowest of five throughputs (DRAM, L1, shared memory, instruction "
           "issue, FFMA lanes: anatomy/predict.py), counted from the registry and an NVRTC "
           "compile; latency, occupancy and waves left out"]
    if next((i for i in done if "nvdisasm" in i["sass"].get("skipped", "")), None):
        out.append("SASS: nvdisasm is not installed, so the issue limit is left out and "
                   "issue-bound rungs come out too fast (pip install nvidia-cuda-nvdisasm)")
    else:
        out.append("SASS: read with nvdisasm (the issue limit counts the hot loop's "
                   "instructions)")
    return [_fold(line) for line in out]


def _flags(it: dict, cublas_us: float | None) -> str:
    """† a prediction faster than cuBLAS as measured; ‡ one that the committed measurement
    contradicts by more than DISAGREE."""
    p, m = it["prediction"]["time_us"], it["measured"]
    flag = "†" if cublas_us and p < cublas_us else ""
    if m and not max(p / m["median_us"], m["median_us"] / p) < DISAGREE:
        flag += "‡"
    return flag


def flag_notes(items: list[dict], cublas_us: float | None) -> list[str]:
    """The footnotes of the flags that appear."""
    flags = "".join(_flags(i, cublas_us) for i in items if "skipped" not in i)
    out = []
    if "†" in flags:
        out.append("† faster than cuBLAS as measured: the model counts throughput only, so "
                   "read it as a floor on the time, not a forecast of beating cuBLAS")
    if "‡" in flags:
        out.append(f"‡ the measurement is more than {DISAGREE}x away: slower than measured is "
                   "work counted that the compiled kernel does not do (rungs 11-12: ptxas fuses "
                   "A's scalar shared loads into LDS.128); faster, time the model leaves out")
    return [_fold(line) for line in out]


def _fold(line: str, width: int = 100) -> str:
    """A note folded to `width` columns, continued under two spaces."""
    import textwrap

    return textwrap.fill(line, width, subsequent_indent="  ", break_on_hyphens=False,
                         break_long_words=False)


def brief_rows(items: list[dict], cublas_us: float | None) -> tuple[list[str], list[list[str]]]:
    """The narrow ladder (100 columns): the predicted time and limit, and beside them what
    the committed results measured, each as % of cuBLAS where cuBLAS's time is known; the
    predicted % carries flag_notes' marks."""
    head = ["rung", "predicted", "% of cuBLAS", "limited by", "measured", "% of cuBLAS"]
    rows = []

    def pct(us):
        return f"{100 * cublas_us / us:.0f} %" if cublas_us and us else "—"

    for it in items:
        if "skipped" in it:
            rows.append([it["rung"], "—", "—", "does not compile here", "—", "—"])
            continue
        p, m = it["prediction"], it["measured"]
        meas = m["median_us"] if m else None
        rows.append([it["rung"], _us(p["time_us"]), pct(p["time_us"]) + _flags(it, cublas_us),
                     p["limit"], _us(meas), pct(meas)])
    return head, rows


def brief_text(items: list[dict], title: str, cublas_us: float | None, source: str | None
               ) -> str:
    head, rows = brief_rows(items, cublas_us)
    note = (f"measured: {source} (cuBLAS {_us(cublas_us)})" if source else
            "no committed measurement for this GPU and shape")
    return "\n".join([title, "", _table_text(head, rows), "", *flag_notes(items, cublas_us),
                      *basis_lines(items), note, *_skipped(items),
                      "(sgemmlab inspect --all --wide for the bill behind each prediction)"])


def ladder_text(items: list[dict], title: str) -> str:
    head, rows = ladder_rows(items)
    done = [i for i in items if "skipped" not in i]
    m = next((i["measured"] for i in done if i["measured"]), None)
    notes = [f"source of measured times: {m['source']}"] if m else [
        "no measured times for this GPU and shape"]
    if any(i["measured"] and not i["measured"]["same_config"] for i in done):
        notes.append("* measured at a different configuration")
    return "\n".join([title, "", _table_text(head, rows), "", *basis_lines(items), *notes,
                      *_skipped(items)])


def rung_text(it: dict) -> str:
    b, r, s, p = it["bill"], it["resources"], it["sass"], it["prediction"]
    M, N, K = it["shape"]
    L = [f"{it['rung']} — {it['title']}", f"  config {registry.config_key(it['config'])}",
         f"  shape {M}x{N}x{K} on {it['gpu']} ({it['arch']}); {PREDICTED_LABEL} except "
         "where marked measured", "",
         f"1. Bill (per warp per K step of {b['bk']} k; block of {b['threads']} threads)"]
    for key, v in b["ops"].items():
        if key.split(".")[0] in ("A", "B", "C"):
            L.append(f"  {key:11s} {v['instructions']:6.2f} instr  {v['bytes_requested']:7.0f} B"
                     f" requested  {v['sectors']:6.1f} sectors ({v['sector_bytes']:.0f} B)")
        else:
            L.append(f"  {key:11s} {v['instructions']:6.2f} instr  {v['words']:7.0f} words  "
                     f"{v['wavefronts']:6.1f} wavefronts  {v['conflict_ways']:.2g}-way")
    copies = b["copy_instructions"]
    L += [f"  A and B in: {copies['LDG']:.4g} LDG, {copies['STS']:.4g} STS, "
          f"{copies['LDGSTS']:.4g} LDGSTS" + (" (cp.async: the .cp.async lines above are its "
                                              "global read and its shared write)"
                                              if copies["LDGSTS"] else ""),
          f"  A+B global: {b['global_sector_bytes_per_warp']:.0f} B moved for "
          f"{64 * b['ffma_per_warp']:.0f} FLOPs",
          f"  shared loads per FFMA: {b['smem_loads_per_ffma']:.4g} words, "
          f"{b['lds_per_ffma']:.4g} instructions (source level)",
          f"  intensity {b['intensity']:.2f} FLOP/B; DRAM traffic (block-tile model) "
          f"{b['dram_bytes'] / 1e9:.2f} GB, minimum {b['minimal_dram_bytes'] / 1e9:.3f} GB"]
    if f := b["fixup"]:
        L.append(f"  Stream-K fix-up (per split tile, not per K step; in the DRAM figure): "
                 f"{f['split_tiles']} split tiles, {f['contributions']} partial tiles, "
                 f"{f['written'] / 1e6:.1f} MB written + {f['read'] / 1e6:.1f} MB read; plan "
                 f"for {f['slots']} resident blocks: {f['plan']}")
    L += ["",
          f"2. Resources: {r['registers']} registers, spills {r['spill_stores']}/"
          f"{r['spill_loads']} B, stack {r['stack_bytes']} B, shared {r['static_smem_bytes']} B "
          f"static + {r['dynamic_smem_bytes']} B dynamic"]
    for slug, o in it["occupancy"].items():
        if "skipped" in o:
            L.append(f"  {slug:8s} {o['skipped']}")
            continue
        by = ", ".join(f"{k} {v}" for k, v in o["by"].items())
        L.append(f"  {slug:8s} {o['blocks']} block(s)/SM, {o['warps']}/{o['max_warps']} warps "
                 f"= {100 * o['fraction']:.1f} % occupancy; limited by "
                 f"{' and '.join(o['limits'])} ({by})")
    L.append("")
    if "ffma" in s:
        L += [f"3. SASS hot loop [{s['start']:#06x}..{s['end']:#06x}]: {s['instructions']} "
              f"instructions, {s['ffma']} FFMA ({100 * s['ffma_share']:.1f} %), overhead "
              f"{s['overhead_per_ffma']:.3f} per FFMA, {s.get('bank_conflicts', 0)} FFMA with "
              "two operands in one register bank (measured rule: docs/operands-h200.md)"
              + (f"; bank cycles {s['bank_cycles']['lookahead']} as the H200 reads ahead "
                 f"({s['bank_cycles']['per_instruction']} one at a time, "
                 f"{s['bank_cycles']['pooled']} pooled)" if s.get("bank_cycles") else "")
              + (f"; stall counts in its control bits add up to {s['stall_cycles']} cycles"
                 if s.get("stall_cycles") else ""),
              f"  categories: {s['categories']}",
              f"  LDS by width (bits): {s['lds_widths']}; LDG: {s['ldg_widths']}; local memory "
              f"instructions in the kernel: {s['local_memory_instructions']}"]
        if b["ffma_per_warp"] and s["ffma"]:
            steps = s["ffma"] / b["ffma_per_warp"]  # K steps one pass of the loop covers
            src = {"LDS": b["ops"].get("As.load", {}).get("instructions", 0)
                   + b["ops"].get("Bs.load", {}).get("instructions", 0), **b["copy_instructions"]}
            L.append(f"  one pass = {steps:.3g} K step(s); source vs SASS in it: " + ", ".join(
                f"{k} {n * steps:.4g} vs {s['categories'].get(k, 0)}" for k, n in src.items())
                + " (fused loads, edge paths and dummy loads make the difference)")
    else:
        L.append(f"3. SASS: {s.get('skipped')}")
    L += ["", "4. Predicted bound (" + ", ".join(f"{k} {_us(v)}" for k, v in
                                                 p["times_us"].items())
          + f"): {_us(p['time_us'])}, limited by {p['limit']}"]
    m = it["measured"]
    L.append(f"  measured: {_us(m['median_us'])}"
             + ("" if m["same_config"] else f" at {registry.config_key(m['config'])}")
             + f" ({m['source']})" if m else "  measured: none for this GPU and shape")
    return "\n".join(L)


MD_METHOD = """\
Generated by `{command}` on a machine without a GPU: everything but the *measured* column
is computed from the registry, the kernels' index arithmetic (replayed in Python for one
block, `sgemmlab/anatomy/replay.py`), ptxas's resource report and the SASS of a fresh NVRTC
compile. *Predicted* is the slowest of five services (DRAM, L1 wavefronts, shared-memory
wavefronts, instruction issue, FFMA lanes: `sgemmlab/anatomy/predict.py`). It is an
estimate, not a bound: it leaves out latency (which makes it too fast), and it counts
shared-memory traffic at source level, before the compiler fuses loads (which can make it
too slow: rungs 11-12 are predicted slower than measured, because ptxas fuses their scalar
A reads into LDS.128). *pred/meas* below 1 is time the model does not explain; above 1,
work it counted that the compiled kernel does not do. The bill's columns are per warp per
K step; *smem words/FFMA* is the articles' "shared loads per FFMA" at source level (the
compiler fuses some, see the SASS columns); *LDG/STS/LDGSTS* counts the instructions that
bring A and B in: global loads, shared stores, and cp.async copies (rungs 11-14), which do
both without registers. Rung 14's Stream-K fix-up is paid per split tile, not per K step:
it is in *predicted* (DRAM) only."""


def ladder_markdown(items: list[dict], seed_items: list[dict], title: str, command: str) -> str:
    head, rows = ladder_rows(items)
    shead, srows = ladder_rows(seed_items)
    keep = [0, 1, 2, 3, 4, 5, 6, 7]
    m = next((i["measured"] for i in items if i.get("measured")), None)
    skipped = _skipped(items)
    return "\n".join([
        f"# {title}", "", MD_METHOD.format(command=command), "",
        f"Measured: `{m['source']}`." if m else "No measured times.", "",
        "## The ladder: predicted and measured", "", _table_md(head, rows), "",
        *([*skipped, ""] if skipped else []),
        "## At the seed's configurations (the articles' A6000 tiles)", "",
        "Bill only: these are the configurations the articles counted; compare 1056 and "
        "160 bytes (rungs 1-2), 2.0 / 1.125 / 0.25 shared loads per FFMA (rungs 3-5). "
        "Rungs 11-14 have no article tile: theirs are the seeds their headers count.", "",
        _table_md([shead[i] for i in keep], [[r[i] for i in keep] for r in srows]), ""])
