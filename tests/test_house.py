"""The house rules of the package's own tree, checked as files (no GPU, no compiler)."""

from __future__ import annotations

import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "sgemmlab"


def test_no_module_or_package_shadows_the_standard_library():
    """Python run from inside src/sgemmlab puts the folder first on sys.path: a package named
    like a standard module (the lab's static accounting was once `inspect`) would then hide
    the standard one from everything, dataclasses included."""
    names = {p.stem for p in SRC.glob("*.py")} | {p.name for p in SRC.iterdir() if p.is_dir()}
    clash = sorted(n for n in names & set(sys.stdlib_module_names) if not n.startswith("_"))
    assert not clash, f"named like standard modules: {clash}"


def test_the_readme_is_short_and_user_facing_documents_tell_no_history():
    """The README says what sgemmlab is, how to install and use it, and where it stands
    (about 200 lines); the story of how it got there lives in docs/worklog.md alone."""
    import re

    root = SRC.parent.parent
    readme = (root / "README.md").read_text()
    assert len(readme.splitlines()) <= 250, len(readme.splitlines())
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        if doc.name == "worklog.md":
            continue
        told = re.findall(r"\b(?:sessions?\s+\d+|issues?\s+\d+)", doc.read_text(),
                          re.IGNORECASE)
        assert not told, f"{doc.name} tells the project's history: {told[:3]}"


def test_every_tool_is_run_by_something():
    """tools/ holds only what CI, a test, the README or the device runner (tools/h200.sh)
    runs or reads, and the modules those scripts import; anything else goes."""
    import re

    root = SRC.parent.parent
    runners = [root / ".ci" / "run", root / "README.md", root / "tools" / "h200.sh",
               *sorted((root / "tests").glob("*.py"))]
    said = "\n".join(p.read_text() for p in runners)
    tools = sorted(p for p in (root / "tools").iterdir() if p.is_file())
    used = {p.name for p in tools if re.search(rf"(?<![\w-]){re.escape(p.name)}", said)}
    for p in tools:  # a module the used scripts import
        if p.suffix == ".py" and p.name not in used and any(
                re.search(rf"^\s*(?:from|import)\s+{p.stem}\b", (root / "tools" / u).read_text(),
                          re.MULTILINE) for u in used if u.endswith(".py")):
            used.add(p.name)
    idle = sorted({p.name for p in tools} - used)
    assert not idle, f"tools nothing runs: {idle}"


def test_no_module_is_past_about_six_hundred_lines():
    """A module a reader can hold: about 600 lines at most (a few lines of slack, so a
    docstring's growth is not a refactor); past it, split at a seam."""
    long = {p.relative_to(SRC).as_posix(): n for p in SRC.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 610}
    assert not long, f"modules past ~600 lines: {long}"


def test_results_have_an_index_that_lists_every_file():
    """results/index.json names every results file (and nothing else): `sgemmlab index`
    rewrites it, before new results are committed."""
    from sgemmlab.bench import index

    root = SRC.parent.parent / "results"
    listed = {e["path"] for e in index.read(root)["files"]}
    present = {p.relative_to(root).as_posix() for p in index.files(root)}
    assert listed == present, (f"not indexed: {sorted(present - listed)[:5]}; indexed but "
                               f"gone: {sorted(listed - present)[:5]} (run `sgemmlab index`)")


def test_the_index_reads_each_file_and_finds_the_newest_of_a_kind(tmp_path):
    import json
    import lzma

    from sgemmlab.bench import index, results

    run = {"schema": "sgemmlab.results/1", "kind": "bench", "created": "2026-12-04",
           "command": "sgemmlab bench --suite square",
           "environment": {"gpu": "NVIDIA H200", "git_commit": "abc1234"}}
    first = results.place("nvidia-h200", "bench-square-20261204T101010Z.json", tmp_path)
    second = results.place("nvidia-h200", "bench-square-20261204T111111Z.json.xz", tmp_path)
    log = results.place("nvidia-h200", "pytest-gpu-20261204T1200Z.txt", tmp_path)
    for p in (first, log):
        p.parent.mkdir(parents=True, exist_ok=True)
    first.write_text(json.dumps(run))
    second.write_bytes(lzma.compress(json.dumps(run).encode()))
    log.write_text("\n2960 passed, 17 skipped\n")
    (first.parent / "square-20261204T101010Z-report").mkdir()
    (first.parent / "square-20261204T101010Z-report" / "report.md").write_text("# report\n")
    (first.parent / "square-20261204T101010Z-report" / "roofline.png").write_bytes(b"png")
    index.write(tmp_path)
    entries = {e["path"]: e for e in index.read(tmp_path)["files"]}
    assert entries["nvidia-h200/pytest/gpu-20261204T1200Z.txt"] == {
        "path": "nvidia-h200/pytest/gpu-20261204T1200Z.txt", "kind": "pytest",
        "stamp": "20261204T1200Z", "what": "2960 passed, 17 skipped"}
    bench = entries["nvidia-h200/bench/square-20261204T101010Z.json"]
    assert (bench["kind"], bench["commit"], bench["gpu"]) == ("bench", "abc1234", "NVIDIA H200")
    assert "nvidia-h200/bench/square-20261204T101010Z-report/roofline.png" not in entries
    assert index.newest(tmp_path, "bench") == second
    assert index.newest(tmp_path, "bench", name="square-") == second
    assert index.newest(tmp_path, "ladder") is None
