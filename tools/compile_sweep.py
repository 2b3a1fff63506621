"""Compile every legal configuration of every rung and record what ptxas says of each: the
evidence behind registry.py's compile guarantee (issue 18).

    python tools/compile_sweep.py [--rungs 12,14] [--jobs 2] [--out results/compile]

Every distinct build of every rung's legal space (host-only keys change no code), in both
alignment variants of a vectorized rung, row-major: registers, spill stores and loads,
stack frame and shared memory, or the compiler's first error line. A configuration's
record is its worst variant's (an error, else a spill, else the float4 build), as
`sgemmlab tune` judges it (tune/search.compile_many). The column-major variants are
compiled on the covering sample of tests/test_compile.py.

The file records each rung's source digest (the source and its includes). A rung whose
digest is unchanged since the newest committed sweep is taken from that file, so after a
kernel edit only the edited rungs compile again; tests/test_compile.py fails while the
newest sweep does not cover the registry as it is. The spilling configurations go to the
package's data/spills.json (registry.known_spills). The compile cache makes an interrupted
sweep cheap to resume: what was built is read back, not rebuilt.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from sgemmlab import registry  # noqa: E402
from sgemmlab.registry import Rung, config_key  # noqa: E402
from sgemmlab.runtime.compiler import nvrtc_version, source_with_includes  # noqa: E402
from sgemmlab.tune.search import compile_many  # noqa: E402

ARCH = "sm_90"
OUT = ROOT / "results" / "compile"
CHUNK = 64  # configurations per batch: progress is printed, and written, per batch


def swept_rungs() -> tuple[Rung, ...]:
    return registry.ALL + registry.TENSOR + registry.HISTORY


def distinct_configs(r: Rung) -> list[dict]:
    """One legal configuration per distinct build, in the space's order."""
    seen: dict[str, dict] = {}
    for cfg in r.configs():
        seen.setdefault(config_key(r.macros(cfg)), cfg)
    return list(seen.values())


def source_digest(r: Rung) -> str:
    return hashlib.sha256(source_with_includes(r.source).encode()).hexdigest()[:16]


def newest(out: Path = OUT) -> Path | None:
    files = sorted(out.glob("compile-sweep-*.json.gz"))
    return files[-1] if files else None


def load(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def _record(cfg: dict, res) -> dict:
    if isinstance(res, Exception):
        line = next((ln for ln in str(res).splitlines() if ln.strip()), type(res).__name__)
        return {"config": cfg, "error": line[:300]}
    return {"config": cfg, "registers": res.registers, "spill_stores": res.spill_stores,
            "spill_loads": res.spill_loads, "stack": res.stack_bytes, "smem": res.smem_bytes}


def sweep_rung(r: Rung, jobs: int) -> list[dict]:
    configs = distinct_configs(r)
    records: list[dict] = []
    t0 = time.time()
    for start in range(0, len(configs), CHUNK):
        batch = [(r, c) for c in configs[start:start + CHUNK]]
        records += [_record(cfg, res) for (_, cfg), res in compile_many(batch, ARCH, jobs)]
        print(f"  {r.label}: {len(records)}/{len(configs)} in {time.time() - t0:.0f} s",
              flush=True)
    return records


def summary(records: list[dict]) -> dict:
    return {"configs": len(records),
            "errors": sum("error" in x for x in records),
            "spilling": sum(x.get("spill_stores", 0) + x.get("spill_loads", 0) > 0
                            for x in records),
            "stack_frame": sum(x.get("stack", 0) > 0 for x in records),
            "max_registers": max((x.get("registers", 0) for x in records), default=0)}


def write(path: Path, rungs: dict) -> None:
    doc = {"kind": "compile-sweep", "arch": ARCH, "nvrtc": nvrtc_version(),
           "made": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "about": "every distinct legal configuration of every rung, compiled; the record "
                    "of each is its worst alignment variant (tools/compile_sweep.py)",
           "rungs": rungs}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with gzip.open(tmp, "wt") as f:
        json.dump(doc, f, indent=0, sort_keys=True)
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rungs", help="comma-separated rung numbers to compile again "
                                    "(default: those whose source changed, or all)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--carry", help="comma-separated rung numbers whose source changed in "
                                    "ways that should not change a build: a covering sample "
                                    "of --sample builds is compiled again, and the previous "
                                    "records are carried over only if every one matches")
    ap.add_argument("--sample", type=int, default=32)
    args = ap.parse_args(argv)

    previous = newest(args.out)
    old = load(previous)["rungs"] if previous else {}
    if previous and load(previous)["nvrtc"] != nvrtc_version():
        old = {}  # another compiler: nothing carries over
    wanted = {int(n) for n in args.rungs.split(",")} if args.rungs else None
    carry = {int(n) for n in args.carry.split(",")} if args.carry else set()
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = args.out / f"compile-sweep-{ARCH}-{stamp}.json.gz"
    rungs: dict = {}
    for r in swept_rungs():
        digest = source_digest(r)
        kept = old.get(r.label)
        fresh = wanted is not None and r.number in wanted
        if kept and kept["source_digest"] == digest and not fresh and \
                kept["summary"]["configs"] == len(distinct_configs(r)):
            rungs[r.label] = kept
            print(f"{r.label}: kept from {previous.name}", flush=True)
            continue
        if r.number in carry and kept and \
                kept["summary"]["configs"] == len(distinct_configs(r)):
            rungs[r.label] = carried(r, kept, previous.name, digest, args.sample, args.jobs)
            continue
        print(f"{r.label}: compiling {len(distinct_configs(r))} builds", flush=True)
        records = sweep_rung(r, args.jobs)
        rungs[r.label] = {"source_digest": digest, "summary": summary(records),
                          "records": records}
        write(path, rungs)  # partial progress stays on disk
        print(f"{r.label}: {rungs[r.label]['summary']}", flush=True)
    write(path, rungs)
    export_spills(path, rungs)
    print(f"wrote {path.relative_to(ROOT)} and {SPILLS.relative_to(ROOT)}")
    return 0


def carried(r: Rung, kept: dict, source: str, digest: str, k: int, jobs: int) -> dict:
    """`kept` (a previous sweep's entry for r) under r's new source digest, after a covering
    sample of k builds — the seed, the tuned defaults and up to 8 spilling configurations
    first — compiled again has matched its records one for one; SystemExit naming the first
    that does not (the rung then needs its full sweep: --rungs)."""
    old = {config_key(r.macros(x["config"])): x for x in kept["records"]}
    spilling = [x["config"] for x in kept["records"]
                if x.get("spill_stores", 0) + x.get("spill_loads", 0) > 0][:8]
    defaults = [t[r.label] for t in registry.tuned_defaults().values() if r.label in t]
    sample = registry.covering_sample(distinct_configs(r), k,
                                      first=[r.seed, *defaults, *spilling])
    print(f"{r.label}: compiling a sample of {len(sample)} builds to carry "
          f"{len(kept['records'])} records", flush=True)
    for (_, cfg), res in compile_many([(r, c) for c in sample], ARCH, jobs):
        new, was = _record(cfg, res), old.get(config_key(r.macros(cfg)))
        if was is None or {k: v for k, v in new.items() if k != "config"} != \
                {k: v for k, v in was.items() if k != "config"}:
            raise SystemExit(f"{r.label} {config_key(cfg)}: {new} now, {was} in {source}: "
                             "sweep it again (--rungs)")
    return {**kept, "source_digest": digest, "carried_from": kept.get("carried_from", source),
            "evidence": f"{len(sample)} builds (a covering sample: seed, tuned defaults, "
                        f"{len(spilling)} spilling) compiled again from this source matched "
                        f"the records of {source} one for one (tools/compile_sweep.py --carry)"}


SPILLS = ROOT / "src" / "sgemmlab" / "data" / "spills.json"


def export_spills(path: Path, rungs: dict) -> None:
    """data/spills.json: each rung's spilling configurations (registry.known_spills)."""
    spills = {label: [x["config"] for x in rec["records"]
                      if x.get("spill_stores", 0) + x.get("spill_loads", 0) > 0]
              for label, rec in rungs.items()}
    doc = {"about": "legal configurations that spill, from the full compile sweep "
                    "(tools/compile_sweep.py)", "sweep": path.name,
           "rungs": {k: v for k, v in spills.items() if v}}
    SPILLS.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
