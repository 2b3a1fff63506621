"""The README and docs point at files that exist: every relative Markdown link, and every
repository path written in backticks (`results/...`, `src/...`, `docs/...`, `tools/...`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
PATH = re.compile(r"`((?:results|src|docs|tools|tests)/[^`\s*<>{}]+)`")


def targets(md: Path) -> list[str]:
    text = md.read_text()
    out = [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t) and
           not t.startswith("#")]
    return out + PATH.findall(text)


def resolves(md: Path, target: str) -> bool:
    target = target.split("#")[0].rstrip(".,;:")
    if not target:
        return True
    for base in (md.parent, REPO):
        if (base / target).exists():
            return True
    return False


@pytest.mark.parametrize("md", DOCS, ids=lambda p: p.name)
def test_every_link_resolves(md):
    missing = [t for t in targets(md) if not resolves(md, t)]
    assert missing == [], f"{md.name} points at files that do not exist: {missing}"


def test_the_link_check_can_fail(tmp_path):
    md = tmp_path / "x.md"
    md.write_text("see [it](nowhere/here.md) and `results/none-such.json`")
    assert [t for t in targets(md) if not resolves(md, t)] == ["nowhere/here.md",
                                                               "results/none-such.json"]


def test_the_readme_has_one_of_each_section():
    headings = re.findall(r"^#+ .*$", (REPO / "README.md").read_text(), re.MULTILINE)
    assert len(headings) == len(set(headings)), "a heading appears twice"
