"""`sgemmlab inspect` on a machine without a GPU: text, JSON, the ladder, the Markdown."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sgemmlab import registry
from sgemmlab.cli import app


@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    return lambda *args: CliRunner().invoke(app, list(args))


def test_one_rung_as_json_at_the_seed_configuration(cli, tmp_path):
    result = cli("inspect", "1", "--seed", "--json", "--measured",
                 str(tmp_path / "none.json"))
    assert result.exit_code != 0 and "none.json" in result.output  # a missing file: one line
    result = cli("inspect", "1", "--seed", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["config"] == {"BS": 32}
    assert out["bill"]["global_sector_bytes_per_warp"] == 1056
    assert set(out["occupancy"]) == {"h200", "h100", "a100", "a6000", "rtx4090"}
    assert out["prediction"]["limit"] in out["prediction"]["times_us"]


def test_rung_3_text_names_the_occupancy_limit(cli):
    result = cli("inspect", "smem", "--gpu", "a6000")
    assert result.exit_code == 0, result.output
    assert "shared loads per FFMA: 2 words" in result.output
    assert "a6000" in result.output and "limited by threads" in result.output


def test_all_puts_predicted_next_to_measured(cli):
    result = cli("inspect", "--all", "--shape", "4096,4096,4096", "--gpu", "h200")
    assert result.exit_code == 0, result.output
    assert "PREDICTED, not measured" in result.output
    for r in registry.RUNGS:
        assert r.label in result.output
    assert "ladder-4096x4096x4096" in result.output  # the measured times' source


def test_markdown_report(cli, tmp_path):
    md = tmp_path / "inspect.md"
    result = cli("inspect", "--all", "--shape", "256,256,256", "--markdown", str(md))
    assert result.exit_code == 0, result.output
    text = md.read_text()
    assert "| 01_naive |" in text and "At the seed's configurations" in text
    assert "1056" in text and "| 2 |" in text


@pytest.mark.parametrize("args, words", [(["inspect"], "RUNG or --all"),
                                         (["inspect", "99"], "unknown kernel"),
                                         (["inspect", "3", "--gpu", "v100"], "unknown GPU"),
                                         (["inspect", "3", "--config", "BS=7"], "illegal")])
def test_mistakes_are_one_sentence(cli, args, words):
    result = cli(*args)
    assert result.exit_code != 0
    assert "Traceback" not in result.output and words in " ".join(result.output.split())
