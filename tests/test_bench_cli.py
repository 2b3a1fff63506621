"""Mistakes on the `bench` and `ceilings` command lines end in one plain sentence and a
non-zero exit, never a traceback; arguments are checked before the GPU is looked for."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from sgemmlab.cli import app
from sgemmlab.runtime import device


def run(*args):
    return CliRunner().invoke(app, list(args))


def one_line_error(result, *words):
    assert result.exit_code not in (0, None), result.output
    assert isinstance(result.exception, SystemExit), result.exception  # not a crash
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    for w in words:
        assert w in lines[0]


@pytest.fixture
def no_gpu(monkeypatch):
    """Behave as on a machine without a GPU, even where there is one."""
    def refuse(index=0):
        raise device.NoGPUError("No usable NVIDIA GPU was found (test); sgemmlab needs one "
                                "to run kernels.")

    monkeypatch.setattr(device, "gpu_info", refuse)


def test_unknown_kernel():
    one_line_error(run("bench", "--kernel", "99"), "unknown kernel", "99", "warptiling")


@pytest.mark.parametrize("shape", ["4096,4096", "4096,4096,0", "big"])
def test_malformed_shape(shape):
    one_line_error(run("bench", "--shape", shape), "--shape", shape, "M,N,K")


def test_unknown_suite():
    one_line_error(run("bench", "--suite", "huge"), "unknown suite", "huge", "ragged")


@pytest.mark.parametrize("args, words", [
    (["--baseline", "cutlass"], ["unknown baseline", "cutlass"]),
    (["--baseline", "none", "--baseline", "tf32"], ["none", "combined"]),
])
def test_bad_baseline(args, words):
    one_line_error(run("bench", *args), *words)


def test_argument_errors_come_before_the_gpu_check(no_gpu):
    one_line_error(run("bench", "--kernel", "99", "--suite", "small"), "unknown kernel")


@pytest.mark.parametrize("command", [["bench"], ["bench", "--suite", "small", "-k", "all"],
                                     ["ceilings"]])
def test_no_gpu(no_gpu, command):
    one_line_error(run(*command), "No usable NVIDIA GPU")


def test_report_of_a_missing_file(tmp_path):
    one_line_error(run("report", str(tmp_path / "nope.json")), "nope.json")


def test_the_three_commands_are_registered():
    out = run("--help").output
    for name in ("bench", "ceilings", "report"):
        assert name in out
