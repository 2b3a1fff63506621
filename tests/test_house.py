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
