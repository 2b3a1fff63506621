"""The README keeps its promises to a user: the quick start without a GPU installs no torch
and still prints the predicted ladder; every dependency says why it is there; the examples
and the docs are linked. (Its length and its silence about the project's history are in
test_house.py.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[;\s]", requirement, maxsplit=1)[0].lower()


def test_the_quick_start_without_a_gpu_installs_no_extra():
    """The command a user without a GPU copies installs the package alone, and the package
    alone needs no torch (its CUDA build is gigabytes)."""
    assert re.search(r"pip install -e \.\s+&&\s+sgemmlab ladder", README), \
        "no quick-start command that installs the package without extras"
    assert "torch" not in {_name(r) for r in PROJECT["dependencies"]}


def test_the_ladder_without_torch_or_gpu_prints_the_prediction(tmp_path):
    """What that command prints where torch cannot be imported: the predicted ladder, exit 0."""
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('no torch here')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-m", "sgemmlab", "ladder", "--size", "4096"],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-2000:]
    assert "PREDICTS" in out and "Traceback" not in out


def test_every_dependency_says_why_it_is_there():
    """Each package of the base install and of every extra has a row in the README's table."""
    head = "## Dependencies, and why each is there"
    assert head in README
    table = README.split(head, 1)[1]
    named = {m.lower() for m in re.findall(r"`([A-Za-z0-9_.-]+)`", table)}
    wanted = {_name(r) for r in PROJECT["dependencies"]}
    for extra in PROJECT["optional-dependencies"].values():
        wanted |= {_name(r) for r in extra}
    assert wanted - named == set(), f"not in the README's dependency table: {wanted - named}"


def test_the_examples_and_the_docs_are_linked():
    assert "](examples/" in README
    for doc in ("api.md", "dispatch.md", "lab.md", "results.md", "worklog.md"):
        assert f"](docs/{doc})" in README, doc
