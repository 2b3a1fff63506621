"""The Python track (sgemmlab.pytrack) in Numba's CUDA simulator: every rung, ragged shapes.

Each rung runs in a subprocess with NUMBA_ENABLE_CUDASIM=1 (set before numba is imported,
and kept out of this process), at its SIM_CONFIG; the subprocess prints one JSON line, one
entry per case, and the test asserts on it. The metric and bound are the project's one
(sgemmlab.bench.check); beta == 0 runs with C full of NaN, so an unwritten output fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba")

from sgemmlab import pytrack  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

#: (M, N, K, alpha, beta): 1s, primes and ragged edges; beta != 0 with C random.
RAGGED = [(1, 1, 1, 1.0, 0.0), (1, 7, 5, 1.0, 0.0), (13, 1, 17, 1.0, 0.0),
          (17, 19, 1, 1.0, 0.0), (31, 33, 37, 1.0, 0.0), (31, 33, 37, 0.5, -2.0)]

#: More configurations than SIM_CONFIG where a rung has switches worth covering.
EXTRA = {7: [{"BM": 64, "BN": 64, "BK": 4, "WM": 32, "WN": 32, "WNITER": 1, "TM": 4, "TN": 4,
              "PAD": 0, "PREFETCH": 0}]}  # WMITER = 2, the fetch after the math

SCRIPT = r"""
import json, sys
import numpy as np
from sgemmlab import pytrack
from sgemmlab.bench.check import error_bound, relative_error

n, configs, cases = json.loads(sys.argv[1])
module = pytrack.rung(n)
rng = np.random.default_rng(n)
out = []
for cfg in configs:
    for M, N, K, alpha, beta in cases:
        A = rng.uniform(-1, 1, (M, K)).astype(np.float32)
        B = rng.uniform(-1, 1, (K, N)).astype(np.float32)
        C0 = (np.full((M, N), np.nan, np.float32) if beta == 0
              else rng.uniform(-1, 1, (M, N)).astype(np.float32))
        C = C0.copy()
        module.launch(A, B, C, alpha, beta, cfg=cfg)
        ab = alpha * (A.astype(np.float64) @ B.astype(np.float64))
        bc = beta * C0.astype(np.float64) if beta != 0 else None
        ref = ab + bc if bc is not None else ab
        out.append({"cfg": cfg, "shape": [M, N, K], "alpha": alpha, "beta": beta,
                    "nan": int(np.isnan(C).sum()), "bound": error_bound(K),
                    "error": relative_error(C, ref, alpha_ab=ab, beta_c=bc)})
print(json.dumps(out))
"""


def tiled_cases(module, cfg) -> list[tuple[int, int, int, float, float]]:
    """Two block tiles down, one across, two k-tiles deep: no edge anywhere; and a shape
    a few rows, columns and k past whole tiles, so the edges fall in the second tile."""
    rows, cols = module.RUNG.tile(cfg)
    bk = cfg.get("BK", cfg.get("BS"))
    return [(2 * rows, cols, 2 * bk, 1.0, 0.0), (rows + 7, cols + 3, 2 * bk + 5, 0.5, -2.0)]


@pytest.mark.parametrize("n", range(1, len(pytrack.RUNGS) + 1))
def test_rung_in_simulator(n):
    module = pytrack.rung(n)
    configs = [module.SIM_CONFIG] + EXTRA.get(n, [])
    cases = RAGGED + tiled_cases(module, module.SIM_CONFIG)
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps([n, configs, cases])],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == len(configs) * len(cases)
    bad = [r for r in results if r["nan"] or not r["error"] <= r["bound"]]
    assert not bad, f"rung {n} ({module.NAME}) wrong:\n" + "\n".join(map(json.dumps, bad))


@pytest.mark.parametrize("module", pytrack.RUNGS, ids=lambda m: m.NAME)
def test_sim_config_is_legal_for_the_twin(module):
    assert module.RUNG.number == module.TWIN
    for cfg in [module.SIM_CONFIG] + EXTRA.get(pytrack.RUNGS.index(module) + 1, []):
        assert module.RUNG.violations(cfg) == [], cfg


@pytest.mark.parametrize("module", pytrack.RUNGS, ids=lambda m: m.NAME)
def test_header_names_the_twin(module):
    header = module.__doc__
    n = pytrack.RUNGS.index(module) + 1
    assert header.startswith(f"Python rung {n} ")
    assert f"CUDA rung {module.TWIN} (kernels/{module.RUNG.source})" in header


def test_track_order_and_twins():
    assert [m.TWIN for m in pytrack.RUNGS] == [1, 2, 3, 4, 5, 6, 10]
    assert [pytrack.rung(n) for n in range(1, 8)] == list(pytrack.RUNGS)
    with pytest.raises(KeyError):
        pytrack.rung(8)


def test_illegal_configuration_is_refused():
    import numpy as np

    A = np.zeros((4, 4), np.float32)
    with pytest.raises(ValueError, match="multiple of TM"):
        pytrack.rung(4).launch(A, A, A.copy(), cfg={"BM": 16, "BN": 16, "BK": 4, "TM": 3})


def test_search_keeps_the_fastest_legal_candidate():
    r7 = pytrack.rung(7)
    assert len(r7.CANDIDATES) >= 5
    assert all(r7.RUNG.violations(c) == [] for c in r7.CANDIDATES)
    calls = []

    def time_fn(cfg, M, N, K):  # a fake clock: bigger block tiles are "faster"
        calls.append((M, N, K))
        return 1.0 / (cfg["BM"] * cfg["BN"]) + cfg["PREFETCH"] * 1e-9

    best, timed = r7.search([(256, 256, 256), (512, 512, 64)], time_fn)
    assert len(timed) == len(r7.CANDIDATES) and len(calls) == 2 * len(r7.CANDIDATES)
    assert best == min(timed, key=lambda t: t[1])[0]
    assert best["BM"] * best["BN"] == 128 * 128 and best["PREFETCH"] == 0
