"""The Python track on the GPU (skipped without one): every Python rung, compiled by Numba
for the real device, against a float64 reference at ragged shapes, on torch tensors through
the harness's candidate (the path `ladder --track numba` times) and on numpy arrays
through the module's own launch; the search of Python rung 7; the ladder command.

With beta = 0 the output is poisoned with NaN first (check_gemm), so an element a kernel
forgets to write fails, and so does a kernel that reads C when it must not."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sgemmlab import registry
from sgemmlab.bench.check import check_gemm, error_bound, relative_error

pytestmark = pytest.mark.gpu
pytest.importorskip("numba")

from sgemmlab import pytrack  # noqa: E402

SHAPES = [(1, 1, 1), (17, 33, 65), (67, 45, 33), (129, 257, 31), (300, 200, 100)]
ALPHA_BETA = [(1.0, 0.0), (0.5, -2.0)]
PY = [pytest.param(p, id=p.label) for p in registry.PYTHON]


def _gpu_name() -> str:
    from sgemmlab.runtime.device import gpu_info

    return gpu_info().name


@pytest.mark.parametrize("alpha, beta", ALPHA_BETA)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("py", PY)
def test_python_rung_matches_float64_on_torch_tensors(py, shape, alpha, beta):
    from sgemmlab.bench.pytrack import python_candidate

    cand = python_candidate(py, py.rung.default(_gpu_name()))
    res = check_gemm(cand.gemm, *shape, alpha=alpha, beta=beta)
    assert res.ok, f"{py.label} {shape}: {res.reason}"


@pytest.mark.parametrize("py", PY)
def test_python_rung_on_numpy_arrays_copies_back(py):
    """The module's own launch (what a learner calls): host arrays in, C copied back."""
    rng = np.random.default_rng(1)
    M, N, K = 131, 97, 75
    A = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    B = rng.uniform(-1, 1, (K, N)).astype(np.float32)
    C = np.full((M, N), np.nan, np.float32)
    pytrack.module(py).launch(A, B, C, 1.0, 0.0)
    ref = A.astype(np.float64) @ B.astype(np.float64)
    assert relative_error(C, ref) <= error_bound(K)


def test_every_search_candidate_is_correct():
    from sgemmlab.bench.pytrack import python_candidate

    py = registry.python_rung(7)
    for cfg in pytrack.module(py).CANDIDATES:
        res = check_gemm(python_candidate(py, cfg).gemm, 200, 300, 70, alpha=0.5, beta=1.5)
        assert res.ok, f"{cfg}: {res.reason}"


def test_ladder_track_numba_pairs_each_python_rung_with_its_twin(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from sgemmlab.cli import app

    monkeypatch.setenv("SGEMMLAB_RESULTS_DIR", str(tmp_path))
    done = CliRunner().invoke(app, ["ladder", "--track", "numba", "--size", "256", "-k",
                                    "py2", "-k", "py7", "--quiet", "--no-plot"])
    assert done.exit_code == 0, done.output
    path = next(tmp_path.rglob("ladder/numba-*.json"))
    run = json.loads(path.read_text())
    kernels = [r["kernel"] for r in run["records"]]
    assert run["kind"] == "ladder-numba"
    assert kernels[:3] == ["cublas", "02_coalesced", "py02_coalesced"]
    searched = pytrack.module(registry.python_rung(7)).CANDIDATES
    assert kernels.count("py07_warptiling") == len(searched)
    assert all(r["status"] == "ok" and r["correct"] for r in run["records"])
