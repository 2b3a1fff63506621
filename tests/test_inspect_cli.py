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
    assert "ladder/4096x4096x4096" in result.output  # the measured times' source


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
                                         (["inspect", "3", "--config", "BS=7"], "illegal"),
                                         (["inspect", "17", "--gpu", "h200"],
                                          "17_tiny_k has no per-thread replay yet"),
                                         (["inspect", "20", "--gpu", "h200"],
                                          "20_3xtf32_wgmma is a tensor-core rung")])
def test_mistakes_are_one_sentence(cli, args, words):
    result = cli(*args)
    assert result.exit_code != 0
    assert "Traceback" not in result.output and words in " ".join(result.output.split())


def test_rung_14_counts_its_fix_up_per_product(cli):
    result = cli("inspect", "14", "--seed", "--shape", "1024,1024,1024", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    f, b = out["bill"]["fixup"], out["bill"]
    # 64 tiles on the H200's slots (132 SMs x the blocks the occupancy model allows)
    slots = 132 * out["occupancy"]["h200"]["blocks"]
    assert f["slots"] == slots and f["split_tiles"] >= 1 and f["bytes"] > 0
    blocks, k_steps = 8 * 8, 1024 // 8
    assert b["dram_bytes"] == (blocks * k_steps * b["block_bytes_distinct"]
                               + 1024 * 1024 * 4 + f["bytes"])
    for slug, o in out["occupancy"].items():  # a GPU it does not compile for says so
        assert "blocks" in o or "does not compile" in o["skipped"], slug
    text = cli("inspect", "14", "--seed", "--shape", "1024,1024,1024").output
    assert "Stream-K fix-up (per split tile, not per K step" in text


def test_cp_async_rungs_show_their_copies(cli):
    result = cli("inspect", "12", "--seed")
    assert result.exit_code == 0, result.output
    assert "A.cp.async" in result.output and "As.cp.async" in result.output
    # the seed: TRANSPOSE_A = 1, 128 threads: 16 cp.async.4 of A + 2 cp.async.16 of B
    assert "A and B in: 0 LDG, 0 STS, 18 LDGSTS" in result.output
    result = cli("inspect", "13", "--seed", "--json")
    assert json.loads(result.output)["bill"]["copy_instructions"] == {
        "LDG": 2, "STS": 8, "LDGSTS": 2}


def test_a_rung_that_does_not_compile_for_a_gpu_is_skipped_not_fatal(cli, monkeypatch):
    from sgemmlab.anatomy import report
    from sgemmlab.runtime.compiler import CompileError

    real = report.compile_for

    def compile_for(rung, config, arch):  # rung 14 as a Hopper-only kernel
        if rung.number == 14 and arch != "sm_90":
            raise CompileError("ladder/14_streamk.cu did not compile:\n"
                               "ladder/14_streamk.cu(83): error: no float4 atomicAdd before sm_90")
        return real(rung, config, arch)

    monkeypatch.setattr(report, "compile_for", compile_for)
    result = cli("inspect", "--all", "--gpu", "a100", "--shape", "256,256,256")
    assert result.exit_code == 0, result.output
    assert "14_streamk does not compile for a100 (sm_80): no float4 atomicAdd before sm_90" \
        in result.output and "13_hoisted" in result.output
    result = cli("inspect", "14", "--gpu", "a100")
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "does not compile for a100" in result.output
    out = json.loads(cli("inspect", "14", "--seed", "--json").output)
    assert "blocks" in out["occupancy"]["h200"]
    assert "does not compile for sm_80" in out["occupancy"]["a100"]["skipped"]
