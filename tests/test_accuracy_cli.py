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


def test_config_specs_name_a_rung_at_its_defaults_with_the_keys_given():
    from sgemmlab.bench import accuracy as acc

    c = acc.configured("20:ORDER=1", "NVIDIA H200")
    assert c.name == "20_3xtf32_wgmma[ORDER=1]" and c.kernel == 20 and c.fp32
    assert c.config["ORDER"] == 1 and c.config["PROMOTE"] == 1  # the rest: the defaults
    assert c.precision == "tf32x3"
    t = acc.configured("19", "NVIDIA H200")
    assert not t.fp32 and t.precision == "tf32"  # TF32 is reported, never judged
    for bad, words in (("20:STAGES=99", "STAGES"), ("99:X=1", "unknown kernel"),
                       ("20:BOGUS=1", "configuration must set exactly")):
        with pytest.raises(ValueError, match=words):
            acc.configured(bad, "NVIDIA H200")


def test_an_unknown_distribution_is_a_usage_error(cli):
    result = cli("accuracy", "-d", "normal,cauchy")
    assert result.exit_code == 2 and "unknown cauchy" in result.stderr
    assert "span, subnormal, spikes" in result.stderr


def test_a_distribution_the_quick_set_lacks_is_a_usage_error(cli):
    result = cli("accuracy", "--quick", "--distribution", "spikes")
    assert result.exit_code == 2 and "the quick set has no case of spikes" in result.stderr
