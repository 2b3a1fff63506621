"""Dispatch tables: time candidate (rung, configuration) pairs at every shape of the suites
and keep, per shape, what won; `sgemmlab tune --table` runs this.

Candidates: each rung's tuned default for this GPU; for a Stream-K rung also every
decomposition its space offers (SPLIT: Stream-K, data-parallel, split-K) with each fix-up
(FIXUP: fixed order, atomic); plus any configurations passed. A split-K variant is left out
at a shape where its parts would get fewer than 2 k-iterations each.

Method: the harness's (runner.measure_shape): every candidate checked against float64 at
the shape (beta = 0 on NaN-poisoned output, then alpha/beta), then timed against cuBLAS
FP32 on a flushed L2, grouped (measure.Method.grouped): each round times cuBLAS once and
every candidate of the shape, so the ratios that rank them share one baseline. Everything
compiles in parallel first.

Resumable: the records of a shape go to results/<gpu>/table/<tag>.partial.jsonl as the
shape is done (tune/resume.py; a candidate that fails its check at once); run the same
command again after a stop and only what is missing is measured. At the end: a results
file (kind "tune", name table-<tag>-<time>) with every record, and the table: merged into
this GPU's current table (a shape measured now replaces that shape's old entries) and
written to the user's cache directory, where dispatch looks first; `export` writes the
same table where asked. An export to a path ending in .json.gz is the compact form the
package ships (data/tables/<gpu>.json.gz: dispatch/table.py, `compact_table`); to any other
path the full form. A compact table is first rebuilt from the results files its sources
name (`full_table`), so `sgemmlab tune --export src/sgemmlab/data/tables/<gpu>.json.gz`
regenerates the shipped file from the committed results.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from .. import dispatch, registry
from ..registry import Rung, config_key
from .resume import PartialLog, kernel_digest
from .search import compile_many, default_jobs

#: Rungs a table compares unless told otherwise: the warptiled rungs and above (on the
#: H200 no lower rung comes near them at any suite shape: results/nvidia-h200/bench/*).
TABLE_FROM_RUNG = 10
#: (M, N, K), or (M, N, K, batch) for a batch of products in one call
Shape = tuple[int, ...]


def problem_of(shape: Shape) -> tuple[int, int, int, int]:
    """(M, N, K, batch) of a shape (batch 1 when it names none)."""
    M, N, K, *rest = shape
    return M, N, K, rest[0] if rest else 1


def default_rungs() -> list[Rung]:
    return [r for r in registry.ALL if r.number >= TABLE_FROM_RUNG]


def candidates_for(rungs: Iterable[Rung], gpu_name: str,
                   extra: Iterable[tuple[Rung, dict]] = ()) -> list[tuple[Rung, dict]]:
    """(rung, configuration) pairs to time at every shape, each once, legal ones only."""
    out: dict[tuple[str, str], tuple[Rung, dict]] = {}

    def add(r: Rung, cfg: dict) -> None:
        if r.is_legal(cfg):
            out.setdefault((r.label, config_key(cfg)), (r, dict(cfg)))

    for r in rungs:
        base = r.default(gpu_name)
        add(r, base)
        if "streamk" in r.features and "SPLIT" in r.space:
            for split in r.space["SPLIT"]:
                fixups = r.space.get("FIXUP", (None,)) if split != 1 else (base.get("FIXUP"),)
                for fixup in fixups:
                    add(r, {**base, "SPLIT": split} | ({} if fixup is None else
                                                       {"FIXUP": fixup}))
    for r, cfg in extra:
        if problems := r.violations(cfg):
            raise ValueError(f"illegal configuration {config_key(cfg)} for {r.label}: "
                             + "; ".join(problems))
        add(r, cfg)
    return list(out.values())


def useful(rung: Rung, cfg: dict, M: int, N: int, K: int, batch: int = 1) -> bool:
    """False where the rung does not serve the shape (or the batch, in one launch), and for
    split-K into parts of fewer than 2 k-iterations (nothing left to overlap: the fix-up
    alone would cost more)."""
    if not rung.serves(M, N, K) or batch > 1 and not rung.supports("batched"):
        return False
    split = cfg.get("SPLIT", 1) if "streamk" in rung.features else 1
    if split < 2:
        return True
    bk = cfg.get("BK") or 1
    return -(-K // bk) >= 2 * split


def record_key(rec: dict) -> tuple:
    """One measurement of a table: layout, shape, kernel and configuration."""
    cfg = rec.get("config")
    return (rec.get("layout", "NN"), rec["M"], rec["N"], rec["K"], rec.get("batch", 1),
            rec["kernel"], config_key(cfg) if cfg else None)


def _digest(label: str) -> str | None:
    try:
        return kernel_digest(registry.rung(label).source)
    except KeyError:
        return None


def _fresh(rec: dict) -> bool:
    return rec["kernel"] == "cublas" or rec.get("kernel_digest") == _digest(rec["kernel"])


def entries_from(records: Iterable[dict], source: str) -> list[dict]:
    """Table entries from results records: every rung record that passed its check and was
    timed (baselines and failures are not dispatchable)."""
    out = []
    for r in records:
        if r.get("status") != "ok" or not r.get("correct") or not r.get("fp32", True):
            continue
        try:
            rung = registry.rung(r["kernel"])
        except KeyError:
            continue
        e = {"M": r["M"], "N": r["N"], "K": r["K"], "layout": r.get("layout", "NN"),
             "batch": r.get("batch", 1), "rung": rung.label, "config": dict(r["config"]),
             "deterministic": rung.deterministic(r["config"]),
             "median_us": r["median_us"], "vs_cublas": r["vs_cublas"],
             "vs_cublas_min": r.get("vs_cublas_min", r["vs_cublas"]),
             "vs_cublas_max": r.get("vs_cublas_max", r["vs_cublas"]), "source": source}
        e["aligned"] = dispatch.aligned_of(e)
        out.append(e)
    return out


def plan(shapes: list[Shape], layouts: list[str], cands: list[tuple[Rung, dict]],
         log: PartialLog, worth: Callable[..., bool] | None = None
         ) -> dict[tuple[str, Shape], list[tuple[Rung, dict]]]:
    """(layout, shape) -> the candidates still to measure there (`worth(rung, cfg, M, N, K,
    batch)` decides where a candidate is measured at all; default `useful`). A batch is
    measured only on rungs that take it in one launch (dispatch offers no other)."""
    worth = worth or useful
    todo = {}
    for layout in layouts:
        for shape in shapes:
            M, N, K, batch = problem_of(shape)
            left = [(r, cfg) for r, cfg in cands
                    if (layout == "NN" or "layouts" in r.features)
                    and (batch == 1 or "batched" in r.features)
                    and worth(r, cfg, M, N, K, batch)
                    and not log.has((layout, M, N, K, batch, r.label, config_key(cfg)))]
            todo[(layout, tuple(shape))] = left
    return todo


@dataclass
class TableRun:
    results: Path
    table: dict
    written: list[Path]
    notes: list[str] = field(default_factory=list)


MeasureShape = Callable[..., list[dict]]


def measure_all(todo: dict[tuple[str, Shape], list[tuple[Rung, dict]]], log: PartialLog,
                measure: MeasureShape, make: Callable[[Rung, dict, str], object],
                baseline_problem: Callable[[list[dict]], str | None] = lambda recs: None,
                ) -> None:
    """Measure what `todo` holds, shape by shape, each record into `log` as it comes.

    `measure(M, N, K, candidates, layout=..., on_record=...)` is runner.measure_shape with
    the method bound; `make(rung, cfg, layout)` builds a runner.Candidate. When
    `baseline_problem` finds cuBLAS untrustworthy at a shape, that shape's records leave
    the log and RuntimeError says why (the rest stays for a resume)."""
    for (layout, shape), left in todo.items():
        if not left:
            continue
        M, N, K, batch = problem_of(shape)

        def keep(rec: dict, layout: str = layout) -> None:
            log.add({**rec, "layout": layout, "kernel_digest": _digest(rec["kernel"])})

        recs = measure(M, N, K, [make(r, cfg, layout) for r, cfg in left], layout=layout,
                       batch=batch, on_record=keep)
        if problem := baseline_problem(recs):
            log.drop(lambda rec: (rec.get("layout", "NN"), rec["M"], rec["N"], rec["K"],
                                  rec.get("batch", 1)) == (layout, M, N, K, batch))
            raise RuntimeError(problem)
        log.add({**recs[0], "layout": layout})  # cuBLAS, complete only now


def build_table(shapes: list[Shape], rungs: list[Rung] | None = None, *,
                layouts: Iterable[str] = ("NN",), extra: Iterable[tuple[Rung, dict]] = (),
                method=None, jobs: int | None = None, resume: bool = True,
                tag: str = "table", export: Path | None = None, live: bool = True,
                echo: Callable[[str], None] = lambda text: None,
                candidates: list[tuple[Rung, dict]] | None = None,
                worth: Callable[..., bool] | None = None) -> TableRun:
    """Measure the candidates at every shape on this GPU; write the results file and the
    table (user cache, and `export` if given). Raises runner.BaselineError when cuBLAS
    FP32 is not FP32 at some shape (what was measured before it stays, for a resume).
    `candidates` replaces the default ones (`candidates_for`), `worth` the rule of where
    a candidate is measured (`useful`): the grid's (tune/grid.py)."""
    from ..bench import results, runner
    from ..bench.measure import QUICK, L2Flusher
    from ..runtime.compiler import nvrtc_version
    from ..runtime.device import gpu_info

    method = dataclasses.replace(method or QUICK, grouped=True)
    layouts = list(dict.fromkeys(layouts))
    for lay in layouts:
        if lay not in dispatch.LAYOUTS:
            raise ValueError(f"unknown layout {lay!r}; choose from {', '.join(dispatch.LAYOUTS)}")
    gpu = gpu_info()
    cands = candidates if candidates is not None else candidates_for(
        rungs or default_rungs(), gpu.name, extra)
    notes: list[str] = []
    log = PartialLog(results.place(gpu.slug, f"table-{tag}.partial.jsonl"),
                     {"gpu": gpu.name, "sm_count": gpu.sm_count, "nvrtc": nvrtc_version(),
                      "method": method.as_dict()}, record_key, resume=resume, fresh=_fresh)
    if log.note:
        notes.append(log.note)
        echo(log.note)

    todo = plan(shapes, layouts, cands, log, worth)
    needed = list({(r.label, config_key(c)): (r, c) for left in todo.values()
                   for r, c in left}.values())
    bad = set()
    for (r, cfg), res in compile_many(needed, gpu.arch, jobs or default_jobs()):
        if isinstance(res, Exception) or res.spills:
            why = str(res).splitlines()[0] if isinstance(res, Exception) else "register spills"
            notes.append(f"{r.label} {config_key(cfg)} left out: {why}")
            echo(notes[-1])
            bad.add((r.label, config_key(cfg)))
    todo = {k: [(r, c) for r, c in left if (r.label, config_key(c)) not in bad]
            for k, left in todo.items()}

    flush = None
    if any(todo.values()):
        flush = L2Flusher(gpu.l2_bytes)
        peak = results.ceilings_for(gpu.slug)["ffma_tflops"]
        made: dict[tuple, runner.Candidate] = {}

        def make(r: Rung, cfg: dict, layout: str) -> runner.Candidate:
            k = (r.label, config_key(cfg), layout)
            if k not in made:
                made[k] = runner.rung_candidate(r, cfg, layout)
            return made[k]

        with runner.progress_bar(live) as progress:
            def measure(M, N, K, candidates, **kw):
                return runner.measure_shape(M, N, K, candidates, method, flush, peak,
                                            progress, **kw)

            try:
                measure_all(todo, log, measure, make, runner.fp32_baseline_problem)
            except RuntimeError as exc:
                raise runner.BaselineError(f"{exc}. Nothing measured against it is kept "
                                           f"(what came before: {log.path})") from None

    wanted = {(r.label, config_key(c)) for r, c in cands}
    keep = {(lay, problem_of(s)) for lay in layouts for s in shapes}
    records = [r for r in log.records if (r.get("layout", "NN"), (r["M"], r["N"], r["K"],
                                                                  r.get("batch", 1)))
               in keep and (r["kernel"] == "cublas"
                            or (r["kernel"], config_key(r["config"])) in wanted)]
    run = results.new_run("tune", gpu, {**method.as_dict(), "l2_flush_bytes":
                                        flush.nbytes if flush else None})
    run["notes"] += notes
    run["records"] = records
    run["table"] = {"layouts": layouts, "candidates": [
        {"rung": r.label, "config": c} for r, c in cands]}
    name = f"table-{tag}-{results.stamp()}"
    path = results.write(run, gpu.slug, name)
    source = f"results/{gpu.slug}/{path.parent.name}/{path.name}"

    table = merged_table(gpu, entries_from(records, source), source, run, method.as_dict())
    written = [dispatch.write_table(table, dispatch.user_table_path(gpu.name))]
    if export is not None:
        written.append(write_export(table, export))
    log.finish()
    return TableRun(path, table, written, notes)


def merged_table(gpu, entries: list[dict], source: str, run: dict, method: dict) -> dict:
    """This GPU's current table (user cache, else package) with `entries` merged in; a
    table of another SM count is replaced, not merged."""
    dispatch.clear_cache()
    base = dispatch.load_table(gpu.name)
    old, sources = [], []
    if base is not None and base.sm_count in (None, gpu.sm_count):
        full = full_table(base)
        old, sources = full["entries"], list(full.get("sources") or [])
    merged = dispatch.merge_entries(old, entries)
    live = {e["source"] for e in merged if "source" in e}
    return dispatch.new_table(
        gpu.name, ".".join(map(str, gpu.compute_capability)), gpu.sm_count, merged,
        command=run["command"], created=run["created"], method=method,
        sources=[s for s in sources + [source] if s in live])


def export_table(gpu_name: str, path: Path) -> tuple[Path, dispatch.Table]:
    """Write the table dispatch uses for `gpu_name` (user cache, else package) to `path`."""
    dispatch.clear_cache()
    table = dispatch.load_table(gpu_name)
    if table is None:
        raise FileNotFoundError(f"no tuning table for {gpu_name} (looked in "
                                f"{dispatch.user_table_path(gpu_name)} and "
                                f"{dispatch.package_table_path(gpu_name)}); build one with "
                                "`sgemmlab tune --table`")
    return write_export(full_table(table), path), table


def write_export(data: dict, path: Path) -> Path:
    """A full table written to `path`: in the compact form the package ships where the path
    ends in .json.gz, else as it is."""
    path = Path(path)
    return dispatch.write_table(dispatch.compact_table(data) if path.name.endswith(".json.gz")
                                else data, path)


def _source_path(source: str, gpu_name: str) -> tuple[Path, str] | None:
    """(the file, its name as a source) of the results file a table's source names: at its
    path under the checkout, or where results/ files are now placed (bench.results.place,
    results/<gpu>/<kind>/...); None when neither holds it."""
    from ..bench import results

    root = results.results_root()
    named = root.parent / source
    if named.is_file():
        return named, source
    moved = results.locate(source, root)
    if moved is None:
        return None
    return moved, f"{root.name}/{moved.relative_to(root).as_posix()}"


def full_table(table: dispatch.Table) -> dict:
    """A table in the full form. A compact one (the package's) is rebuilt from the results
    files its sources name, merged oldest first as `build_table` merged them (every entry
    as `entries_from` makes it: its spread, source and flags again); where one of them is
    not at hand (an installed package has no results/), its own entries in the full form."""
    from ..bench import results

    if not table.compact:
        return dict(table.data)
    runs = []
    for source in table.data.get("sources") or []:
        found = _source_path(source, table.gpu)
        if found is None:
            return table.full()
        runs.append((json.loads(results.read_text(found[0])), found[1]))
    entries: list[dict] = []
    for run, source in sorted(runs, key=lambda r: r[0].get("created", "")):
        entries = dispatch.merge_entries(entries, entries_from(run["records"], source))
    d = table.data
    return dispatch.new_table(d["gpu"], d.get("compute_capability", ""), d.get("sm_count"),
                              entries, command=d.get("command", ""),
                              created=d.get("created", ""), method=d.get("method"),
                              sources=[source for _, source in runs])
