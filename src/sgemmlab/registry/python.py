"""The Python track (sgemmlab/pytrack/): Numba kernels mirroring CUDA rungs."""

from __future__ import annotations

from dataclasses import dataclass

from .core import Rung
from .ladder import RUNGS


@dataclass(frozen=True)
class PyRung:
    """A rung of the Python track (sgemmlab/pytrack/, issue 16): a kernel written in Python
    and compiled by Numba, mirroring CUDA rung `twin`, whose configuration space, rules, seed
    and launch geometry it takes (nothing of them is repeated here or in its module)."""

    number: int  # its place in the track, 1-7
    name: str
    twin: int  # the CUDA rung it mirrors
    module_name: str  # sgemmlab.pytrack.<module_name> (pytrack.module(py) imports it)

    @property
    def label(self) -> str:
        return f"py{self.number:02d}_{self.name}"

    @property
    def rung(self) -> Rung:
        return next(r for r in RUNGS if r.number == self.twin)


#: The course's seven Python kernels, re-created: naive, coalesced, shared-memory tiles, 1D
#: and 2D blocktiling, four-float copies with A transposed, warptiling (CUDA rung 10) with
#: the small autotuning search of the course's kernel 7.
PYTHON: tuple[PyRung, ...] = (
    PyRung(1, "naive", 1, "r01_naive"),
    PyRung(2, "coalesced", 2, "r02_coalesced"),
    PyRung(3, "smem", 3, "r03_smem"),
    PyRung(4, "blocktile1d", 4, "r04_blocktile_1d"),
    PyRung(5, "blocktile2d", 5, "r05_blocktile_2d"),
    PyRung(6, "vectorized", 6, "r06_vectorized"),
    PyRung(7, "warptiling", 10, "r07_warptiling"),
)


def python_rung(key: str | int) -> PyRung:
    """A Python rung by number (3, '3', 'py3'), label ('py03_smem') or 'py' + name."""
    text = str(key).strip()
    for p in PYTHON:
        if text in (str(p.number), f"py{p.number}", p.label, f"py{p.number:02d}",
                    f"py_{p.name}", p.name):
            return p
    names = ", ".join(f"{p.number} ({p.label})" for p in PYTHON)
    raise KeyError(f"unknown Python rung {key!r}; the Python track has: {names}")
