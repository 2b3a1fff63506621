"""Every rung, every decomposition, under every compute-sanitizer tool (issue 18), on the GPU.

    python tools/sanitizer_matrix.py [--tools memcheck,racecheck,synccheck,initcheck]
                                     [--rungs 1,14] [--jobs 6] [--table-builds]

The matrix: each rung of the registry (1-21) at its H200 default; rung 14 at every FIXUP
(0 fixed order, 1 atomic workspace, 2 atomic into C) and SPLIT 0, 1, 4; the split-K rungs
(15, 16, 18) with and without their split; rung 20 with and without its split tail — each
at five ragged shapes the rung serves (1x1x1, odd sizes on the scalar path, multiples of 4
on the float4 path, tiles cut at the edges, a long K that Stream-K and split-K divide), in
every layout a rung with layouts reads, a batch where the rung takes batches, alpha and
beta both non-trivial so that C is read and written. --table-builds: instead, every build
the H200's dispatch table can pick that the matrix does not already hold (a rung at a
configuration other than its default and its decompositions), each at the five shapes. One
process per (tool, rung, decomposition) runs its five shapes under the tool with markers
between them, so a report is pinned to its shape; each result is also checked against
float64 there (a sanitizer slows a kernel, it must not change it). PyTorch's caching
allocator is off in those processes: an access past a matrix's end then leaves the
allocation the sanitizer knows.

Writes results/<gpu>/sanitizer/matrix-<stamp>.json and the table docs/sanitizer-h200.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from sgemmlab import registry  # noqa: E402
from sgemmlab.bench import results  # noqa: E402
from sgemmlab.bench.ceilings import cuda_tool  # noqa: E402
from sgemmlab.runtime.files import write_atomic  # noqa: E402

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
GENERIC = [(1, 1, 1), (67, 45, 33), (68, 44, 36), (130, 129, 257), (300, 200, 1000)]
SHAPES = {  # the rungs that serve part of the shape space: five shapes each of them serves
    15: [(1, 1, 1), (7, 45, 33), (8, 44, 36), (16, 129, 257), (3, 200, 5000)],
    16: [(1, 1, 1), (45, 7, 33), (44, 8, 36), (129, 16, 257), (200, 3, 5000)],
    17: [(1, 1, 1), (67, 45, 3), (68, 44, 4), (130, 129, 17), (300, 257, 64)],
    18: [(1, 1, 1), (67, 45, 33), (68, 44, 36), (127, 129, 131), (29, 32, 3635)],
}
LAYOUTS = ["NN", "TN", "NT", "TT", "NN"]  # shape i of a rung with layouts takes LAYOUTS[i]
MARK = "@@sgemmlab"

CHILD = r"""
import json, sys
import torch
import sgemmlab
from sgemmlab.bench.check import check_result, precision_bound
spec = json.loads(sys.argv[1])
for i, (M, N, K, layout, batch) in enumerate(spec["shapes"]):
    print(f"{MARK} case {i}", flush=True)
    lead = (batch,) if batch > 1 else ()
    def one(rows, cols, t):
        x = torch.rand(*lead, *((cols, rows) if t else (rows, cols)), device="cuda") * 2 - 1
        return x.transpose(-2, -1) if t else x
    a, b = one(M, K, layout[0] == "T"), one(K, N, layout[1] == "T")
    c = torch.rand(*lead, M, N, device="cuda") * 2 - 1
    c0 = c.clone()
    sgemmlab.sgemm(a, b, c, alpha=1.5, beta=0.5, kernel=spec["rung"], config=spec["config"],
                   precision=spec["precision"])
    torch.cuda.synchronize()
    ab, bc = 1.5 * (a.double() @ b.double()), 0.5 * c0.double()
    res = check_result(c, ab + bc, K, alpha_ab=ab, beta_c=bc)
    ok = res.ok or (spec["precision"] == "tf32" and res.error <= precision_bound(K, "tf32"))
    print(f"{MARK} done {i} {'right' if ok else 'WRONG ' + res.reason}", flush=True)
print(f"{MARK} all", flush=True)
""".replace("MARK", repr(MARK))


def decompositions(r) -> list[tuple[str, dict]]:
    """(name, overrides) of each decomposition the rung has."""
    if r.supports("streamk"):
        return [(f"FIXUP={f} SPLIT={s}", {"FIXUP": f, "SPLIT": s})
                for f in (0, 1, 2) for s in (0, 1, 4)]
    if r.supports("splitk"):
        return [("split-K", {"SPLIT": 0}), ("no split", {"SPLIT": 1})]
    if "TAIL" in r.seed:
        return [("split tail", {"TAIL": 1}), ("no tail split", {"TAIL": 0})]
    return [("default", {})]


def shapes_for(r) -> list[list]:
    base = SHAPES.get(r.number, GENERIC)
    out = []
    for i, (M, N, K) in enumerate(base):
        layout = LAYOUTS[i] if r.supports("layouts") else "NN"
        batch = 3 if r.supports("batched") and i == 3 else 1
        assert r.serves(M, N, K), f"{r.label} does not serve {M}x{N}x{K}"
        out.append([M, N, K, layout, batch])
    return out


GPU = "NVIDIA H200"


def _cell(r, name: str, cfg: dict) -> dict:
    if not r.is_legal(cfg):
        return {"rung": r.label, "decomposition": name, "config": cfg,
                "illegal": r.violations(cfg)}
    return {"rung": r.label, "decomposition": name, "config": cfg, "precision": r.precision,
            "shapes": shapes_for(r)}


def _rungs(numbers: list[int] | None) -> list:
    return [r for r in registry.ALL + registry.TENSOR + registry.HISTORY + registry.ORDERED
            if not numbers or r.number in numbers]


def cells(rungs: list[int] | None) -> list[dict]:
    """Each rung's default and its decompositions."""
    return [_cell(r, name, {**r.default(GPU), **over})
            for r in _rungs(rungs) for name, over in decompositions(r)]


def table_cells(rungs: list[int] | None) -> list[dict]:
    """The builds of the H200's dispatch table (the package's) that `cells` leaves out; the
    decomposition column names the configuration."""
    from sgemmlab import dispatch
    from sgemmlab.registry import config_key

    held = {(c["rung"], config_key(c["config"])) for c in cells(None)}
    wanted = {r.label: r for r in _rungs(rungs)}
    table = dispatch.read_table(dispatch.package_table_path(GPU))
    out: dict[tuple, dict] = {}
    for e in table.entries:
        key = (e["rung"], config_key(e["config"]))
        if e["rung"] in wanted and key not in held and key not in out:
            out[key] = _cell(wanted[e["rung"]], "table " + key[1], dict(e["config"]))
    return list(out.values())


def _env() -> dict:
    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"),
                                                      env.get("PYTHONPATH")]))
    return env


def parse(output: str, n: int) -> dict:
    """Per case: 'clean', or the sanitizer's report lines pinned to it; and the run's state."""
    per = [[] for _ in range(n)]
    right = [None] * n
    case = None
    for line in output.splitlines():
        if line.startswith(MARK):
            words = line.split()
            if words[1] == "case":
                case = int(words[2])
            elif words[1] == "done":
                right[int(words[2])] = words[3] == "right"
            continue
        if case is not None and line.startswith("========= ") and not re.search(
                r"COMPUTE-SANITIZER|ERROR SUMMARY|RACECHECK SUMMARY|^=========\s*$", line):
            per[case].append(line[10:].strip())
    summary = re.findall(r"(ERROR SUMMARY: \d+ errors?|RACECHECK SUMMARY: [^\n]*)", output)
    return {"reports": per, "right": right, "finished": f"{MARK} all" in output,
            "summary": summary[-1] if summary else ""}


def run_cell(tool: str, cell: dict, exe: str) -> dict:
    spec = json.dumps({"rung": cell["rung"], "config": cell["config"],
                       "precision": cell["precision"], "shapes": cell["shapes"]})
    cmd = [exe, "--tool", tool, "--error-exitcode", "1", "--report-api-errors", "no",
           "--print-limit", "200", sys.executable, "-c", CHILD, spec]
    t0 = time.time()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=900)
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        output, code = (exc.stdout or b"").decode(errors="replace") if isinstance(
            exc.stdout, bytes) else (exc.stdout or ""), "timeout"
    got = parse(output, len(cell["shapes"]))
    clean_summary = ("0 hazards displayed (0 errors, 0 warnings)" in got["summary"]
                     if tool == "racecheck" else got["summary"] == "ERROR SUMMARY: 0 errors")
    ok = (code == 0 and got["finished"] and clean_summary and all(got["right"])
          and not any(got["reports"]))
    return {"tool": tool, "rung": cell["rung"], "decomposition": cell["decomposition"],
            "config": cell["config"], "shapes": cell["shapes"], "exit": code,
            "seconds": round(time.time() - t0, 1), "clean": ok, **got,
            "tail": "" if ok else output[-3000:]}


def warm_up(cell: dict) -> None:
    """A cell once without a tool: its kernels compiled into the cache (NVRTC under a
    sanitizer gives no ptxas report) and its results checked."""
    spec = json.dumps({k: cell[k] for k in ("rung", "config", "precision", "shapes")})
    done = subprocess.run([sys.executable, "-c", CHILD, spec], capture_output=True,
                          text=True, env=_env(), timeout=600)
    if done.returncode or "WRONG" in done.stdout:
        print(f"warm-up {cell['rung']} {cell['decomposition']}: exit {done.returncode}\n"
              f"{(done.stdout + done.stderr)[-2000:]}", flush=True)


def table(records: list[dict], tools: list[str]) -> str:
    rows = {}
    for r in records:
        rows.setdefault((r["rung"], r["decomposition"]), {})[r["tool"]] = r
    lines = ["| rung | decomposition | " + " | ".join(tools) + " |",
             "| --- | --- |" + " --- |" * len(tools)]
    for (rung, dec), by in rows.items():
        cells_ = []
        for t in tools:
            r = by.get(t)
            if r is None:
                cells_.append("-")
            else:
                n = len(r["shapes"])
                bad = sum(1 for x in r["reports"] if x) + (0 if r["finished"] else 1)
                cells_.append(f"clean, {n} shapes" if r["clean"] else
                              f"**{bad} of {n} not clean** (exit {r['exit']})")
        lines.append(f"| {rung} | {dec} | " + " | ".join(cells_) + " |")
    return "\n".join(lines)


DOC = ROOT / "docs" / "sanitizer-h200.md"


def write_doc(paths: list[Path], tools: list[str]) -> None:
    """docs/sanitizer-h200.md: the table of the records of `paths` (a later file's record of
    a (tool, rung, decomposition) replaces an earlier one's)."""
    merged: dict = {}
    for p in paths:
        for r in json.loads(p.read_text())["records"]:
            merged[(r["tool"], r["rung"], r["decomposition"])] = r
    records = sorted(merged.values(), key=lambda r: (
        registry.rung(r["rung"]).number, r["decomposition"]))
    clean = sum(r["clean"] for r in records)
    names = ", ".join(f"`{p.resolve().relative_to(ROOT)}`" for p in paths)
    commits = sorted({json.loads(p.read_text()).get("git_commit", "")[:7] for p in paths})
    names += f" (made at {', '.join(c for c in commits if c) or 'an unrecorded commit'})"
    write_atomic(DOC,
        "# Every rung under every compute-sanitizer tool, on the H200\n\n"
        "Made by `python tools/sanitizer_matrix.py` (`tools/h200.sh matrix`); the table by "
        f"`python tools/sanitizer_matrix.py --table` from {names}.\n"
        f"{clean} of {len(records)} cells clean. Each cell is one process under the tool "
        "running the rung's five ragged shapes (1x1x1, odd sizes on the scalar path, "
        "multiples of 4 on the float4 path, tiles cut at the edges, a long K that the "
        "split decompositions divide; every layout where the rung reads layouts, a batch of "
        "3 where it takes batches), alpha = 1.5 and beta = 0.5, each result also checked "
        "against float64. The shapes of each rung are in the results file.\n\n"
        "Racecheck sees shared memory only: the cross-block protocol of Stream-K and "
        "split-K (counters, flags, fences in global memory) is checked by construction in "
        "tests/test_protocol.py.\n\n" + table(records, tools) + "\n")
    print(f"wrote {DOC.relative_to(ROOT)}: {clean} of {len(records)} clean")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--rungs", help="comma-separated rung numbers (default: all)")
    ap.add_argument("--jobs", type=int, default=6)
    ap.add_argument("--list", action="store_true", help="print the matrix and stop")
    ap.add_argument("--table-builds", action="store_true",
                    help="the dispatch table's builds beyond the defaults (module docstring)")
    ap.add_argument("--table", nargs="+", type=Path, metavar="RESULTS",
                    help="write docs/sanitizer-h200.md from these results files and stop")
    args = ap.parse_args(argv)
    tools = args.tools.split(",")
    if args.table:
        write_doc(args.table, tools)
        return 0
    rungs = [int(n) for n in args.rungs.split(",")] if args.rungs else None
    all_cells = table_cells(rungs) if args.table_builds else cells(rungs)
    runnable = [c for c in all_cells if "illegal" not in c]
    if args.list:
        for c in all_cells:
            print(c["rung"], c["decomposition"], c.get("shapes") or c["illegal"])
        print(f"{len(runnable)} cells x {len(tools)} tools")
        return 0
    exe = cuda_tool("compute-sanitizer")
    if exe is None:
        print("compute-sanitizer is neither on PATH nor in /usr/local/cuda/bin")
        return 2
    import torch

    gpu = torch.cuda.get_device_name()
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = results.place(gpu.lower().replace(" ", "-"), f"sanitizer-matrix-{stamp}.json",
                         ROOT / "results")
    path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(warm_up, runnable))
    print(f"warm-up: {time.time() - t0:.0f} s", flush=True)
    work = [(t, c) for c in runnable for t in tools]
    # the slow tool first, so that the pool ends together
    work.sort(key=lambda tc: tc[0] != "racecheck")
    doc = {"schema": "sgemmlab.results/1", "kind": "sanitizer-matrix", "gpu": gpu,
           "command": "python tools/sanitizer_matrix.py " + " ".join(
               sys.argv[1:] if argv is None else argv),
           "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "git_commit": os.environ.get("SGEMMLAB_GIT_COMMIT", ""),
           "sanitizer": subprocess.run([exe, "--version"], capture_output=True, text=True,
                                       timeout=60).stdout.strip().splitlines()[-1:],
           "illegal": [c for c in all_cells if "illegal" in c], "records": []}
    records = doc["records"]
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_cell, t, c, exe) for t, c in work]
        for future in as_completed(futures):
            rec = future.result()
            records.append(rec)
            print(f"{rec['tool']:9} {rec['rung']:16} {rec['decomposition']:18} "
                  f"{'clean' if rec['clean'] else 'NOT CLEAN'} {rec['seconds']} s", flush=True)
            doc["summary"] = {"cells": len(records), "of": len(work),
                              "clean": sum(r["clean"] for r in records),
                              "seconds": round(time.time() - t0)}
            # whole each time: a timeout (or a kill mid-write) keeps what ran
            write_atomic(path, json.dumps(doc, indent=1) + "\n")
    print(f"wrote {path.relative_to(ROOT)}: {doc['summary']}")
    print(table(records, tools))
    return 0 if all(r["clean"] for r in records) else 1


if __name__ == "__main__":
    raise SystemExit(main())
