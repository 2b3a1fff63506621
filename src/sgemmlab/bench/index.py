"""The index of results/: every file the project's numbers come from, with its kind, when and
at which commit it was made, on which GPU, and what it measured, in one line each.

`sgemmlab index` writes results/index.json from the files themselves (a results file says
its kind, date, commit, GPU and command; a text file is described by its first line); a test
holds the committed index to the files in the tree, so a results file is never committed
without its line. `newest(kind)` answers "the latest file of this kind" from it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from . import results

INDEX = "index.json"
#: a file name's stamp, as `results.stamp()` writes it (with or without seconds)
_STAMP = re.compile(r"-(\d{8}T\d{4}(?:\d{2})?Z)")


def files(root: Path) -> list[Path]:
    """Every file under `root` but the index itself, in name order."""
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name != INDEX)


def kind_of(path: Path) -> str:
    """A file's kind from its name: the part before its stamp or its first size/seed field
    (bench-random-mix-300-s3500-… is a bench; pytest-gpu-pack-… a pytest log)."""
    name = path.name
    if "-report" in path.parent.name:
        return "report"
    head = _STAMP.split(name)[0]
    return head.split("-")[0] if head else name.split(".")[0]


def describe(path: Path, root: Path) -> dict[str, Any]:
    """One index line: what the file says of itself."""
    entry: dict[str, Any] = {"path": path.relative_to(root).as_posix(), "kind": kind_of(path)}
    stamp = _STAMP.search(path.name)
    if stamp:
        entry["stamp"] = stamp.group(1)
    if path.name.endswith((".json", ".json.gz")):
        try:
            data = json.loads(results.read_text(path))
        except (OSError, ValueError, UnicodeDecodeError):
            data = None
        if isinstance(data, dict):
            env = data.get("environment") or {}
            entry["kind"] = data.get("kind") or entry["kind"]
            for key, value in (("created", data.get("created") or data.get("made")),
                               ("commit", env.get("git_commit")),
                               ("gpu", env.get("gpu")),
                               ("what", data.get("command") or data.get("about"))):
                if value:
                    entry[key] = str(value)[:160]
    elif path.suffix in (".txt", ".md"):
        first = next((ln.strip() for ln in path.read_text(errors="replace").splitlines()
                      if ln.strip()), "")
        if first:
            entry["what"] = first[:160]
    elif entry["kind"] == "report":
        entry["what"] = f"a chart of {path.parent.name.removesuffix('-report')}"
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


def newest(root: Path, kind: str, gpu_slug: str | None = None) -> Path | None:
    """The newest indexed file of `kind` (under results/<gpu_slug>/ when given), by stamp."""
    found = [e for e in read(root)["files"] if e["kind"] == kind and "stamp" in e
             and (gpu_slug is None or e["path"].startswith(f"{gpu_slug}/"))]
    if not found:
        return None
    return root / max(found, key=lambda e: e["stamp"])["path"]
