"""The Python track: rungs 1-7 of the ladder written in Python and compiled by Numba.

Each module rNN_*.py is one kernel, a readable Python twin of a CUDA rung under
sgemmlab/kernels/ (its TWIN): 1 naive, 2 coalesced, 3 shared-memory tiles, 4 1D and
5 2D blocktiling, 6 four-float copies with A transposed in shared memory, 7 warptiling
(CUDA rung 10) with a small autotuning search, as the course these seven re-create had it.
The kernel source is Python; Numba's @cuda.jit compiles it for the GPU, and configuration
constants enter as Python ints closed over by a per-configuration factory, `kernel(cfg)`.
Configuration spaces, seeds, legality rules and launch geometry come from the twin's entry
in sgemmlab.registry, never from here.

Every module exposes TWIN, NAME, RUNG (the twin's registry entry), SIM_CONFIG (a small legal
configuration for the simulator), kernel(cfg), grid(cfg, M, N), block(cfg) and
launch(A, B, C, alpha=1.0, beta=0.0, cfg=None).

On a machine without a GPU, set NUMBA_ENABLE_CUDASIM=1 before numba is first imported: Numba's
CUDA simulator then runs every thread of a block as a Python thread (slow; keep shapes and
blocks small, e.g. each module's SIM_CONFIG; simulator.py estimates a launch's time and
shows its progress).

Importing this package needs numba-cuda: pip install -e ".[numba]".
"""

from __future__ import annotations

import numpy as _np

if not hasattr(_np, "row_stack"):
    # numpy 2.5 removed np.row_stack, an alias of np.vstack; numba-cuda 0.30 still registers
    # an overload for it when numba.cuda is first imported, and fails there. The alias is
    # put back, exactly as numpy had it, before that import (seen on the H200 machine).
    _np.row_stack = _np.vstack

try:
    import numba.cuda  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError('sgemmlab.pytrack needs numba-cuda: pip install -e ".[numba]"') from e

from sgemmlab.pytrack import (  # noqa: E402
    r01_naive,
    r02_coalesced,
    r03_smem,
    r04_blocktile_1d,
    r05_blocktile_2d,
    r06_vectorized,
    r07_warptiling,
)

RUNGS = (r01_naive, r02_coalesced, r03_smem, r04_blocktile_1d, r05_blocktile_2d,
         r06_vectorized, r07_warptiling)  # in registry.PYTHON's order (a test holds it)


def rung(n: int):
    """The module of Python rung n (1-7)."""
    if not 1 <= n <= len(RUNGS):
        raise KeyError(f"no Python rung {n}: the track has rungs 1-{len(RUNGS)}")
    return RUNGS[n - 1]


def module(py):
    """The module of registry.PyRung `py` (the registry describes the track; the lab,
    this package, holds its code)."""
    return rung(py.number)
