"""Results files: one JSON schema for every run (ladder, bench, tune, ceilings).

    {
      "schema": "sgemmlab.results/1",
      "kind": "ladder" | "ladder-numba" | "bench" | "tune" | "ceilings",
      "command": "sgemmlab ladder --size 4096",
      "created": ISO-8601 UTC time,
      "environment": {gpu, compute_capability, sm_count, l2_bytes, driver,
                      sm_clock_mhz_before, sm_clock_mhz_after, versions{...},
                      git_commit, git_dirty, source_digest, dispatch_settings{...}},
      "method": {launches_per_round, rounds, warmup, mode, grouped, l2_flush_bytes},
      "ceilings": {ffma_tflops, copy_tbps, source},
      "notes": [what was skipped and why, ...],
      "suites": {suite name: [problem, ...]}   (bench: which problems each suite named),
      "records": [ {kernel, config, M, N, K, [batch], [layout], status, correct, error,
                    error_bound, median_us, tflops, vs_cublas, vs_cublas_min, vs_cublas_max,
                    rounds, round_ratios, times_us (per round, raw), cublas_times_us, ...},
                   ...]
    }

A record's problem (problems.py) is M, N, K, with "batch" only when it is above 1 and
"layout" only when it is not "NN": a file without them measured single row-major products.
`status` is "ok" (checked, then timed), "failed" (the check failed; never timed), "skipped"
(the candidate cannot compute this problem: `skip_note` says why) or "not timed" (cuBLAS
where no candidate was timed against it). tflops counts every product of a batch.

`source_digest` hashes every file of the installed package, so a result names the exact
code that produced it even where no git metadata travelled with the tree.

Where files go: results/<gpu>/<kind>/<name>-<stamp>.json, by kind (`place`, `PLACES`: bench,
ladder, tune, table, accuracy, sanitizer, pytest, profile, models, host, ceilings, pairs,
probe), compressed to .json.xz from 128 kB; `read_text` reads every form, and
results/index.json (bench/index.py, `sgemmlab index`) lists every file.
"""

from __future__ import annotations

import datetime as _dt
import gzip
import hashlib
import json
import lzma
import os
import platform
import re
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable

from ..runtime.files import write_atomic
from .problems import Problem, key

SCHEMA = "sgemmlab.results/1"
PACKAGE_DIR = Path(__file__).resolve().parent.parent
REPO_DIR = PACKAGE_DIR.parent.parent

#: The H200's measured ceilings (../shared/docs/H200-baseline.md), used until
#: `sgemmlab ceilings` has measured the GPU at hand (see `ceilings_for`).
H200_CEILINGS = {"ffma_tflops": 63.6, "copy_tbps": 4.22, "source": "H200-baseline.md"}


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def source_digest() -> str:
    h = hashlib.sha256()
    for p in sorted(PACKAGE_DIR.rglob("*")):
        if p.is_file() and p.suffix in (".py", ".cu", ".cuh", ".json"):
            h.update(str(p.relative_to(PACKAGE_DIR)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def git_state() -> dict[str, Any]:
    """The commit the run is made from: $SGEMMLAB_GIT_COMMIT when set (a copied tree, as on
    the GPU machine, can carry a stale .git whose HEAD says nothing about the files), else
    git's HEAD."""
    commit = os.environ.get("SGEMMLAB_GIT_COMMIT") or _run(["git", "rev-parse", "HEAD"],
                                                           REPO_DIR)
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], REPO_DIR)
    return {"git_commit": commit, "git_dirty": bool(status) if status is not None else None}


def sm_clock_mhz() -> int | None:
    out = _run(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits",
                "-i", "0"])
    try:
        return int(out.splitlines()[0]) if out else None
    except ValueError:
        return None


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for dist in ("sgemmlab", "torch", "cuda-core", "cuda-bindings", "nvidia-cuda-nvrtc",
                 "numpy", "triton", "cupy-cuda13x"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    try:
        from ..runtime.compiler import nvrtc_version

        out["nvrtc"] = nvrtc_version()
    except Exception:
        out["nvrtc"] = None
    return out


def environment(gpu) -> dict[str, Any]:
    """Everything that decides a number, except the SM clock after (added by `finish`)."""
    driver = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader",
                   "-i", "0"])
    return {
        "gpu": gpu.name, "compute_capability": ".".join(map(str, gpu.compute_capability)),
        "sm_count": gpu.sm_count, "l2_bytes": gpu.l2_bytes, "driver": driver,
        "sm_clock_mhz_before": sm_clock_mhz(), "versions": versions(),
        **git_state(), "source_digest": source_digest(), "host": platform.node(),
        "dispatch_settings": dispatch_settings(),
    }


#: the module settings that change what matmul runs without changing a file: an experiment
#: that sets one (`apply_settings`: tools/h200.sh's SET, a tool's packing gate) is told apart
#: by them. runtime.ozaki's are the scheme's switches (precision="fp32_emulated").
SETTINGS = {"dispatch.lookup": ("MODEL_TRANSFER",),
            "plan": ("STAGE", "STAGE_MIN_K", "STAGE_KEEP_A", "STAGE_KEEP_B", "STAGE_COPY_US",
                     "STAGE_COPY_US_PER_MB", "STAGE_RATE", "STAGE_SHARE", "PACK_B",
                     "PACK_MIN_M", "PACK_MIN_OUTPUTS", "PACK_MIN_K"),
            "runtime.ozaki": ("FUSED", "MERGED", "FALLBACK_EARLY", "CRT_INT", "CRT_ONE_WAVE",
                              "OVERLAP", "SCALE_BLOCKS", "SCALE_ROWS_K", "SCALE_ROWS_R",
                              "GEMM")}


def dispatch_settings() -> dict[str, Any]:
    import importlib

    out = {}
    for name, keys in SETTINGS.items():
        mod = importlib.import_module(f"sgemmlab.{name}")
        out.update({f"{name}.{k}": getattr(mod, k) for k in keys})
    return out


def parse_settings(specs: Iterable[str]) -> list[tuple[str, str, Any]]:
    """"module.NAME=value" (a module of SETTINGS, e.g. runtime.ozaki.MERGED=1) -> (module,
    NAME, value), the value of the setting's own type (bool: 1/0/true/false). Anything not
    in SETTINGS is refused: a run's file records every setting it was made with."""
    out = []
    for spec in specs:
        key, sep, text = spec.partition("=")
        module, _, name = key.strip().rpartition(".")
        if not sep or name not in SETTINGS.get(module, ()):
            known = ", ".join(f"{m}.{k}" for m, keys in SETTINGS.items() for k in keys)
            raise ValueError(f"{spec!r}: not module.NAME=value of a recorded setting ({known})")
        out.append((module, name, _setting_value(module, name, text.strip())))
    return out


def _setting_value(module: str, name: str, text: str) -> Any:
    import importlib

    mod = importlib.import_module(f"sgemmlab.{module}")
    kind = type(getattr(mod, name))
    if kind is bool:
        if text.lower() not in ("0", "1", "true", "false"):
            raise ValueError(f"{module}.{name}={text!r}: a switch takes 1, 0, true or false")
        return text.lower() in ("1", "true")
    try:
        value = kind(text)
    except ValueError:
        raise ValueError(f"{module}.{name}={text!r}: the setting is of type {kind.__name__}") \
            from None
    if check := getattr(mod, "SETTING_CHECKS", {}).get(name):  # a value's own rules
        check(value)
    return value


def apply_settings(specs: Iterable[str]) -> dict[str, Any]:
    """Set each "module.NAME=value" (parse_settings) for this process; what was set."""
    import importlib

    done = {}
    for module, name, value in parse_settings(specs):
        setattr(importlib.import_module(f"sgemmlab.{module}"), name, value)
        done[f"{module}.{name}"] = value
    return done


def command_line() -> str:
    """The command as typed, quoted so it can be pasted back into a shell."""
    argv = list(sys.argv)
    if argv and argv[0].endswith(("sgemmlab", "__main__.py")):
        argv[0] = "sgemmlab"
    return shlex.join(argv)


def new_run(kind: str, gpu, method: dict, ceilings: dict | None = None) -> dict[str, Any]:
    return {
        "schema": SCHEMA, "kind": kind, "command": command_line(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "environment": environment(gpu), "method": method,
        "ceilings": ceilings or ceilings_for(gpu.slug), "notes": [], "records": [],
    }


def results_root() -> Path:
    """$SGEMMLAB_RESULTS_DIR, else results/ of the source checkout, else ./results. A
    checkout is src/sgemmlab beside a pyproject.toml: an installed package's grandparent
    (lib/python3.X, or a project installed into with --target) is not ours to write into."""
    env = os.environ.get("SGEMMLAB_RESULTS_DIR")
    if env:
        return Path(env)
    checkout = PACKAGE_DIR.parent.name == "src" and (REPO_DIR / "pyproject.toml").is_file()
    return REPO_DIR / "results" if checkout else Path("results")


#: results/<gpu>/ is laid out by kind: a file named <prefix><rest> (as its writer names it:
#: bench-…, pytest-gpu-…) lives at <folder>/<sub><rest>. The first prefix that matches wins.
PLACES: tuple[tuple[str, str, str], ...] = (
    ("ladder-numba-", "ladder", "numba-"), ("ladder-", "ladder", ""),
    ("bench-", "bench", ""), ("worst-shapes-", "bench", "worst-"),
    ("smi-bench-", "bench", "smi-"),
    ("tune-", "tune", ""), ("blend-search-", "tune", "blend-search-"),
    ("table-", "table", ""), ("validate-", "table", "validate-"),
    ("accuracy-", "accuracy", ""), ("fuzz-", "accuracy", "fuzz-"),
    ("pytest-sanitizer-", "sanitizer", "pytest-"), ("sanitizer-matrix-", "sanitizer", "matrix-"),
    ("pytest-", "pytest", ""),
    ("profile-", "profile", ""), ("ncu-", "profile", "ncu-"),
    ("firstcall-profile-", "profile", "firstcall-"), ("model-profile-", "profile", "models-"),
    ("models-", "models", ""), ("dropin-", "models", "dropin-"),
    ("firstcall-", "host", "firstcall-"), ("overhead-", "host", "overhead-"),
    ("host-", "host", ""), ("switch-anatomy-", "host", "switch-anatomy-"),
    ("ceilings-", "ceilings", ""),
    ("pack-pair-", "pairs", "pack-"), ("source-pair-", "pairs", "source-"),
    ("stage-pair-", "pairs", "stage-"),
    ("smi-hopper-probe-", "probe", "smi-hopper-"), ("hopper-probe-", "probe", "hopper-"),
    ("order-probe-", "probe", "order-"), ("operands-", "probe", "operands-"),
    ("power-", "probe", "power-"), ("probe-", "probe", ""),
)
#: the kind folders under results/<gpu>/ (the index's kinds)
KINDS = tuple(dict.fromkeys(folder for _, folder, _ in PLACES))
#: a stamp as `stamp()` writes it (older files: minutes only, or a date)
STAMP = re.compile(r"(?:^|-)(\d{8}T\d{4}(?:\d{2})?Z)")
#: a name's part before its stamp is cut to about this many characters, the rest replaced
#: by a digest of it (the file's "command" says what it measured in full)
NAME_CHARS = 40
#: the suffixes of a results file (the first that a name ends with is its suffix)
SUFFIXES = (".partial.jsonl", ".json.xz", ".json.gz", ".json", ".txt", ".log", ".csv",
            ".png", ".svg", ".md")


def route(name: str) -> tuple[str, str]:
    """(kind folder, name inside it) of a file named as its writer names it."""
    for prefix, folder, sub in PLACES:
        if name.startswith(prefix):
            return folder, sub + name[len(prefix):]
    return "other", name


def short(head: str, limit: int = NAME_CHARS) -> str:
    """`head` if it is short, else its first '-' fields within `limit` and a digest of all
    (a tune of a given list keeps its list's digest: -list<8 hex>)."""
    if len(head) <= limit:
        return head
    if listed := re.search(r"-(list[0-9a-f]{8})$", head):
        return f"{short(head[:listed.start()], limit - 13)}-{listed.group(1)}"
    kept = ""
    for field in head.split("-"):
        if len(kept) + len(field) + 1 > limit - 7:
            break
        kept = f"{kept}-{field}" if kept else field
    return f"{kept or head[:limit - 7]}-{hashlib.sha1(head.encode()).hexdigest()[:6]}"


def split_suffix(name: str) -> tuple[str, str]:
    suffix = next((s for s in SUFFIXES if name.endswith(s)), "")
    return name[:len(name) - len(suffix)], suffix


def place(slug: str, name: str, root: Path | None = None) -> Path:
    """Where a file named `name` (bench-square-20261204T101010Z.json, tune-13_hoisted-…
    .partial.jsonl) goes: results/<slug>/<kind>/<short name>. A long name keeps its stamp
    and suffix; the part before the stamp is cut (`short`)."""
    stem, suffix = split_suffix(name)
    folder, inner = route(stem)
    found = STAMP.search(inner)
    if found:
        head, tail = inner[:found.start(1)].rstrip("-"), inner[found.start(1):]
        inner = f"{short(head)}-{tail}" if head else tail
    else:
        inner = short(inner)
    return (root or results_root()) / slug / folder / f"{inner}{suffix}"


def kind_dir(slug: str, kind: str, root: Path | None = None) -> Path:
    """results/<slug>/<kind>/."""
    return (root or results_root()) / slug / kind


def gpu_dir(path: Path) -> Path:
    """The results/<gpu>/ folder that a results file lies in (under its kind folder)."""
    path = Path(path)
    parent = path.parent
    if parent.name.endswith("-report"):
        parent = parent.parent
    return parent.parent if parent.name in KINDS else parent


def sibling(path: Path, suffix: str) -> Path:
    """A file beside a results file, its name with `suffix` for the results suffix (the
    chart of ladder/x-<stamp>.json.xz is ladder/x-<stamp>.png)."""
    path = Path(path)
    return path.with_name(split_suffix(path.name)[0] + suffix)


def locate(named: str | Path, root: Path | None = None) -> Path | None:
    """The results file a recorded path names (a table's sources, a report's), compressed
    since or not: results/<gpu>/<kind>/<name>, or a path from before the layout by kind
    (results/<gpu>/<kind>-<name>: where `place` puts that name now); None when missing."""
    root = root or results_root()
    parts = Path(named).parts
    parts = parts[parts.index("results") + 1:] if "results" in parts else parts
    if len(parts) < 2:
        return None
    stem, suffix = split_suffix(parts[-1])
    where = [root.joinpath(*parts[:-1]) / stem]
    if len(parts) == 2:
        where.append(place(parts[0], stem, root))
    for base in where:
        for ending in (suffix, ".json", ".json.xz", ".json.gz"):
            if (found := base.with_name(base.name + ending)).is_file():
                return found
    return None


#: Results past this size are written xz-compressed (<name>.json.xz): a table over the grid
#: keeps every round's times (24 MB as text, 2 MB compressed), and the checkout travels to
#: the GPU machine whole, under a limit of 64 MiB. Smaller files stay plain JSON to read.
COMPRESS_FROM_BYTES = 128 << 10


def write(run: dict[str, Any], slug: str, name: str) -> Path:
    """Write `run` to results/<gpu slug>/<kind>/<name>.json (`place`; .json.xz when it is
    large), with the SM clock after the work; atomically, so a run stopped while writing
    leaves the previous file (or none), never a truncated one that the next run fails to
    read."""
    run["environment"]["sm_clock_mhz_after"] = sm_clock_mhz()
    text = json.dumps(run, indent=1) + "\n"
    path = place(slug, f"{name}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    if len(text) >= COMPRESS_FROM_BYTES:
        return write_atomic(path.with_name(path.name + ".xz"), lzma.compress(text.encode()))
    return write_atomic(path, text)


def read_text(path: str | Path) -> str:
    """A results file's JSON text: plain, xz-compressed (.xz) or gzipped (.gz). Every reader
    of results files comes through here."""
    path = Path(path)
    if path.suffix == ".xz":
        return lzma.decompress(path.read_bytes()).decode()
    if path.suffix == ".gz":
        return gzip.decompress(path.read_bytes()).decode()
    return path.read_text()


def load(path: str | Path) -> dict[str, Any]:
    data = json.loads(read_text(path))
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not an sgemmlab results file (schema {data.get('schema')!r})")
    return data


def is_json(path: Path) -> bool:
    return Path(path).name.endswith((".json", ".json.gz", ".json.xz"))


def _shown(p: Path) -> str:
    """A path as results files record it: relative to the checkout when inside it."""
    try:
        return p.resolve().relative_to(REPO_DIR).as_posix()
    except ValueError:
        return str(p)


def files_named(directory: Path, prefix: str) -> list[Path]:
    """The JSON results files (compressed or not) in the GPU folder `directory` that its
    writers named `prefix`… (ladder-4096x4096x4096-: ladder/4096x4096x4096-…)."""
    folder, inner = route(prefix)
    return sorted(p for p in (directory / folder).glob(f"{inner}*") if is_json(p))


def latest_ceilings(directory: Path) -> dict[str, Any] | None:
    """The ceilings of the newest `sgemmlab ceilings` file of the GPU folder `directory`
    (results/<gpu>/, or a results file's folder within it), or None."""
    found = []
    directory = Path(directory)
    if directory.name in KINDS or directory.name.endswith("-report"):
        directory = gpu_dir(directory / "x")
    for p in files_named(directory, "ceilings-"):
        try:
            data = load(p)
        except (OSError, ValueError):  # a stray or half-written file is not a measurement
            continue
        c = data.get("ceilings") or {}
        if data.get("kind") == "ceilings" and c.get("ffma_tflops") and c.get("copy_tbps"):
            found.append((data.get("created", ""), p.name, {**c, "source": _shown(p)}))
    return max(found)[2] if found else None


def ceilings_for(slug: str) -> dict[str, Any]:
    """The roofs for a GPU: its newest measured ceilings, else the H200's from the docs."""
    return latest_ceilings(results_root() / slug) or dict(H200_CEILINGS)


def stamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def _records_at(run: dict[str, Any], shape) -> dict[str, dict]:
    want = Problem.of(shape)
    return {r["kernel"]: r for r in run.get("records", []) if "M" in r and key(r) == want}


def ladder_records(gpu_name: str, shape, root: Path | None = None
                   ) -> tuple[dict[str, dict], str] | None:
    """(kernel label -> record, the file shown) from the newest ladder results file of this
    GPU at this shape (an (M, N, K) shape or a Problem: a batch or layout matches only
    records of that batch and layout); None when there is none."""
    from ..runtime.device import slug

    found = []
    for p in files_named((root or results_root()) / slug(gpu_name), "ladder-"):
        try:
            run = load(p)
        except (OSError, ValueError):
            continue
        if run.get("kind") != "ladder":  # the Python track's files (ladder-numba) too
            continue
        if recs := _records_at(run, shape):
            found.append((run.get("created", ""), p.name, recs, _shown(p)))
    if not found:
        return None
    newest = max(found)
    return newest[2], newest[3]


def track_records(gpu_name: str, shape, path: Path | None = None,
                  root: Path | None = None) -> dict[str, list[dict]]:
    """kernel label -> its records at `shape` in `path`, or else in the newest Python-track
    file of this GPU (`sgemmlab ladder --track numba`: kind "ladder-numba"), each with the
    file it came from as "source"; {} when there is none. A label has a list: Python rung 7
    is timed at every configuration of its search."""
    from ..runtime.device import slug

    if path is None:
        runs = []
        for p in files_named((root or results_root()) / slug(gpu_name), "ladder-numba-"):
            try:
                run = load(p)
            except (OSError, ValueError):
                continue
            if run.get("kind") == "ladder-numba" and _records_at(run, shape):
                runs.append((run.get("created", ""), p.name, p))
        if not runs:
            return {}
        path = max(runs)[2]
    want = Problem.of(shape)
    out: dict[str, list[dict]] = {}
    for r in load(path).get("records", []):
        if "M" in r and key(r) == want:
            out.setdefault(r["kernel"], []).append({**r, "source": _shown(path)})
    return out


def records_from(path: Path, shape) -> tuple[dict[str, dict], str]:
    """(kernel label -> record, the path) at this shape (or Problem) from one results file."""
    return _records_at(load(path), shape), str(path)


def track_pairs(records: list[dict]) -> list[tuple]:
    """Per Python rung (registry.PYTHON), from one shape's records of a Python-track file:
    (the rung, its twin's ok record, its own ok record at the twin's configuration, all its
    ok records: rung 7 has one per configuration of its search). None where one is missing."""
    from ..registry import PYTHON

    ok = [r for r in records if r.get("status") == "ok"]
    out = []
    for py in PYTHON:
        twin = next((r for r in ok if r["kernel"] == py.rung.label), None)
        mine = [r for r in ok if r["kernel"] == py.label]
        same = next((r for r in mine if twin and r.get("config") == twin.get("config")), None)
        out.append((py, twin, same, mine))
    return out


def newest_track(slug: str, shape=(4096, 4096, 4096), root: Path | None = None
                 ) -> dict[str, dict]:
    """Python rung label -> its figures at its twin's configuration, in the newest
    Python-track file of this GPU at `shape` ({} if none): what the visualizer shows
    beside each twin."""
    recs = [r for rs in track_records(slug, shape, root=root).values() for r in rs]
    return {py.label: {"file": same["source"], "median_us": same["median_us"],
                       "vs_cublas": same["vs_cublas"], "config": same["config"],
                       "over_twin": same["median_us"] / twin["median_us"]}
            for py, twin, same, _ in track_pairs(recs) if same}


def newest_ladder(slug: str, shape: str = "4096x4096x4096", root: Path | None = None
                  ) -> dict[str, dict]:
    """kernel -> its figures in the newest ladder file of this GPU at `shape` ({} if none):
    what the visualizer's side panel shows beside each rung."""
    files = sorted(files_named((root or results_root()) / slug, f"ladder-{shape}-"))
    if not files:
        return {}
    run = load(files[-1])
    out = {}
    for r in run["records"]:
        if r.get("status") == "ok" and r.get("vs_cublas") is not None:
            out[r["kernel"]] = {"file": f"results/{slug}/ladder/{files[-1].name}",
                                "median_us": r["median_us"], "vs_cublas": r["vs_cublas"],
                                "tflops": r.get("tflops"), "registers": r.get("registers"),
                                "config": r.get("config")}
    return out


def visualizer_measurements(slug: str, root: Path | None = None) -> dict[str, dict]:
    """What the visualizer shows beside each rung: the newest ladder file's figures at
    4096^3, and its Python twin's from the newest Python-track file."""
    return newest_ladder(slug, root=root) | newest_track(slug, root=root)
