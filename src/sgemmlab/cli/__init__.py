"""The `sgemmlab` command line: thin — every command reads its options, calls one function
of the lab or the library, and prints what came back.

    common    the app, the one error style, option parsing
    measure   ladder, run, bench, ceilings, overhead   (need a GPU)
    tune      tune (a configuration search, or this GPU's dispatch table)
    look      explain, build, inspect, report, readme, info   (no GPU needed)
    accuracy  accuracy (error against float64 over a fuzz set, beside cuBLAS; needs a GPU)
"""

from __future__ import annotations

import sys

from . import accuracy, look, measure, tune  # noqa: F401  (each registers its commands on the app)
from .common import app, fail, parse_shape, require_torch, rungs_from  # noqa: F401


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
