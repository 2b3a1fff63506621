"""The README's whole-model block (bench/readme.py): a `bench --model` file as its paired
ratios, the F.linear sweep as geometric mean and worst, the host µs, and the targets — from
the results file only, never mixed into the ladder's scoreboard."""

from __future__ import annotations

import json

import pytest

from sgemmlab.bench import readme
from sgemmlab.bench.results import SCHEMA

ENV = {"gpu": "NVIDIA H200", "driver": "580", "git_commit": "abcdef1234567"}


def _models(tmp_path, ratio=0.9437, met=False):
    ok = {"ok": True}
    records = [
        {"model": "encoder", "phase": "train", "mode": "eager", "batch": 16, "status": "ok",
         "ratio": ratio, "check": ok},
        {"model": "llama", "phase": "decode", "mode": "graphs", "batch": 8, "status": "ok",
         "ratio": 1.2612, "check": {"ok": False}},
        {"model": "llama", "phase": "decode", "mode": "eager", "batch": 1, "status": "error"},
        {"model": "overhead", "phase": "overhead", "mode": "b2b", "batch": 1, "status": "ok",
         "op": "mm(x, W.t())", "M": 1, "N": 1024, "K": 1024, "us_without": 10.36,
         "us_with": 16.15, "ratio": 0.63, "check": ok},
        {"model": "linear", "phase": "linear", "mode": "b2b", "batch": 1, "status": "ok",
         "M": 4, "N": 3072, "K": 768, "ratio": 0.41, "check": ok},
    ]
    summary = {"groups": [{"model": "linear", "phase": "linear", "mode": "b2b", "pairs": 60,
                           "geomean": 0.8761, "worst": {"ratio": 0.4118,
                                                        "case": "4×3072×768"}}],
               "targets": [{"case": "encoder train eager b16", "ratio": 1.8, "met": met,
                            "ratio_measured": 1.7155}]}
    path = tmp_path / "models-x.json"
    path.write_text(json.dumps({"schema": SCHEMA, "kind": "models", "environment": ENV,
                                "method": {"baseline": "torch FP32 (TF32 off)",
                                           "precision": "tf32x3"},
                                "records": records, "summary": summary}))
    return path


def test_a_models_run_is_its_paired_ratios_sweep_host_time_and_targets(tmp_path):
    text = readme.models_board([_models(tmp_path)])
    assert "| encoder | train | eager | 16 | 0.944 | ok |" in text
    assert "| llama | decode | graphs | 8 | 1.261 | FAILED |" in text  # its check failed
    assert "| llama | decode | eager | 1 |" not in text  # an error has no ratio
    assert "0.876 (worst 0.412, 4×3072×768)" in text
    assert "mm(x, W.t()) 1×1024×1024 10.4 → 16.1" in text
    assert "precision='tf32x3'" in text and "commit abcdef1234" in text
    assert "measured 1.72×, not met" in text
    assert "measured 1.72×, met" in readme.models_board([_models(tmp_path, met=True)])


def test_readme_update_fills_the_models_block_and_nothing_else(tmp_path):
    md = tmp_path / "README.md"
    md.write_text(f"intro\n{readme.BEGIN}\nold board\n{readme.END}\n"
                  f"{readme.MODELS_BEGIN}\nold models\n{readme.MODELS_END}\nend\n")
    readme.update(md, [_models(tmp_path, ratio=1.25)])
    text = md.read_text()
    assert "old board" in text and "old models" not in text
    assert "| encoder | train | eager | 16 | 1.250 | ok |" in text


def test_a_readme_without_the_models_markers_is_refused(tmp_path):
    md = tmp_path / "README.md"
    md.write_text("no markers\n")
    with pytest.raises(ValueError, match="models:begin"):
        readme.update(md, [_models(tmp_path)])
