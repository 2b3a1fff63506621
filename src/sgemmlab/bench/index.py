"""The index of results/: every file the project's numbers come from, with its kind, when and
at which commit it was made, on which GPU, and what it measured, in one line each.

`sgemmlab index` writes results/index.json from the files themselves: a file's kind is its
folder (results/<gpu>/<kind>/, laid out by bench.results.place), and a results file says its
date, commit, GPU and command (a text file is described by its first line); a test
holds the committed index to the files in the tree, so a results file is never committed
without its line. `newest(kind)` answers "the latest file of this kind" from it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import results

INDEX = "index.json"


def files(root: Path) -> list[Path]:
    """Every file under `root` that is committed, in name order: not the index itself, nor
    what .gitignore keeps out (ncu's reports, a search's partial log, a report's PNG
    copies of its SVG charts)."""
    return sorted(p for p in root.rglob("*") if p.is_file() and not _ignored(p, root))


def _ignored(path: Path, root: Path) -> bool:
    rel = path.relative_to(root)
    return (path.name == INDEX or path.name.endswith(".partial.jsonl")
            or any(part.endswith("-reports") for part in rel.parts)
            or (path.parent.name.endswith("-report") and path.suffix == ".png"))


def kind_of(path: Path, root: Path) -> str:
    """A file's kind: its folder under results/<gpu>/ (bench, ladder, tune, table, …: see
    results.PLACES), or results/<kind>/ for what is not per GPU (compile)."""
    parts = path.relative_to(root).parts
    return parts[1] if len(parts) > 2 else parts[0]


def describe(path: Path, root: Path) -> dict[str, Any]:
    """One index line: what the file says of itself."""
    entry: dict[str, Any] = {"path": path.relative_to(root).as_posix(),
                             "kind": kind_of(path, root)}
    report = path.parent.name.endswith("-report")
    stamp = results.STAMP.search(path.parent.name if report else path.name)
    if stamp:
        entry["stamp"] = stamp.group(1)
    if report:
        entry["what"] = (f"the report of {path.parent.name.removesuffix('-report')}"
                         if path.suffix == ".md" else "a chart of the report beside it")
    elif results.is_json(path):
        try:
            data = json.loads(results.read_text(path))
        except (OSError, ValueError, UnicodeDecodeError):
            data = None
        if isinstance(data, dict):
            env = data.get("environment") or {}
            for key, value in (("created", data.get("created") or data.get("made")),
                               ("commit", env.get("git_commit")),
                               ("gpu", env.get("gpu") or data.get("gpu")),
                               ("what", data.get("command") or data.get("about"))):
                if value:
                    entry[key] = str(value)[:160]
    elif path.suffix in (".txt", ".md", ".log", ".csv"):
        first = next((ln.strip() for ln in path.read_text(errors="replace").splitlines()
                      if ln.strip()), "")
        if first:
            entry["what"] = first[:160]
    return entry


def build(root: Path) -> dict[str, Any]:
    return {"about": "every results file: its kind, stamp, date, commit, GPU and what it "
                     "measured (sgemmlab index writes this)",
            "files": [describe(p, root) for p in files(root)]}


def write(root: Path) -> Path:
    path = root / INDEX
    path.write_text(json.dumps(build(root), indent=1, ensure_ascii=False) + "\n")
    return path


def read(root: Path) -> dict[str, Any]:
    return json.loads((root / INDEX).read_text())


def newest(root: Path, kind: str, gpu_slug: str | None = None, name: str = ""
           ) -> Path | None:
    """The newest indexed file of `kind` (under results/<gpu_slug>/ when given; its name
    starting with `name`: newest(root, "bench", name="random-")), by stamp."""
    found = [e for e in read(root)["files"] if e["kind"] == kind and "stamp" in e
             and not Path(e["path"]).parent.name.endswith("-report")
             and Path(e["path"]).name.startswith(name)
             and (gpu_slug is None or e["path"].startswith(f"{gpu_slug}/"))]
    if not found:
        return None
    return root / max(found, key=lambda e: e["stamp"])["path"]
