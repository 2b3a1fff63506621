"""`sgemmlab accuracy` on the command line, on any machine (no torch, no GPU needed): it is
listed, it refuses an unknown candidate or configuration before looking for a GPU, and
without a GPU it fails in one sentence. The harness itself: tests/test_accuracy.py."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from sgemmlab.cli import app
from sgemmlab.runtime.device import has_gpu


@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.setenv("SGEMMLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("NO_COLOR", "1")
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args))


def test_the_command_is_listed(cli):
    result = cli("--help")
    assert result.exit_code == 0 and "accuracy" in result.stdout


def test_without_a_gpu_it_fails_in_one_sentence(cli):
    if has_gpu():
        pytest.skip("this machine has a GPU")
    result = cli("accuracy", "--quick")
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "GPU" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_an_unknown_candidate_is_a_usage_error(cli):
    result = cli("accuracy", "--candidates", "ieee,fp16")
    assert result.exit_code == 2 and "unknown candidate 'fp16'" in result.stderr


def test_a_bad_configuration_is_a_usage_error(cli):
    if not has_gpu():
        pytest.skip("the configuration is checked against this GPU's defaults")
    result = cli("accuracy", "--config", "20:STAGES=99")
    assert result.exit_code == 2 and "--config" in result.stderr
