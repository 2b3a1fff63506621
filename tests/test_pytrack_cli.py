"""`sgemmlab run --track numba --simulate`: a Python rung in Numba's CUDA simulator from the
command line, checked against float64 — what a learner without a GPU runs (and steps
through in a debugger). Each call is a fresh process: the simulator is chosen before
numba.cuda is first imported."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("numba")


def sgemmlab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sgemmlab", *args], capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("rung", [2, 5])
def test_a_python_rung_runs_in_the_simulator_and_is_checked(rung):
    done = sgemmlab("run", "--track", "numba", "--simulate", "-k", str(rung), "--shape",
                    "13,17,19", "--alpha", "0.5", "--beta", "-2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "on the simulator" in done.stdout and done.stdout.rstrip().endswith("ok")


@pytest.mark.parametrize("args, words", [
    (["run", "--track", "numba", "--simulate", "-k", "9"], "rungs 1-7"),
    (["run", "--simulate", "-k", "3"], "add --track numba"),
    (["run", "--track", "rust", "-k", "3"], "cuda or numba"),
])
def test_mistakes_are_one_sentence(args, words):
    done = sgemmlab(*args)
    assert done.returncode == 2 and words in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
