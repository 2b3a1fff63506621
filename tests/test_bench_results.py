"""The results schema's helpers: which ceilings a run uses, and the recorded command."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from sgemmlab.bench import results


def _ceilings_file(folder, name, ffma, created, kind="ceilings"):
    run = {"schema": results.SCHEMA, "kind": kind, "created": created, "records": [],
           "ceilings": {"ffma_tflops": ffma, "copy_tbps": 4.0, "source": "x"}}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(run))


def test_the_newest_measured_ceilings_are_used(tmp_path, monkeypatch):
    monkeypatch.setenv("SGEMMLAB_RESULTS_DIR", str(tmp_path))
    gpu = tmp_path / "nvidia-h200" / "ceilings"
    _ceilings_file(gpu, "20261101T000000Z.json", 60.0, "2026-11-01T00:00:00+00:00")
    _ceilings_file(gpu, "20261120T000000Z.json", 62.0, "2026-11-20T00:00:00+00:00")
    _ceilings_file(gpu, "20261125T000000Z.json", 99.0, "2026-11-25T00:00:00+00:00",
                   kind="bench")  # misnamed: not a ceilings run
    (gpu / "20261130T000000Z.json").write_text("{half a file")
    got = results.ceilings_for("nvidia-h200")
    assert got["ffma_tflops"] == 62.0
    assert got["source"].endswith("ceilings/20261120T000000Z.json")


def test_without_a_measurement_the_documented_h200_ceilings(tmp_path, monkeypatch):
    monkeypatch.setenv("SGEMMLAB_RESULTS_DIR", str(tmp_path))
    assert results.ceilings_for("nvidia-h200") == results.H200_CEILINGS
    assert results.ceilings_for("nvidia-h200") is not results.H200_CEILINGS  # a copy


def test_command_line_is_recorded_whole_and_quoted(monkeypatch):
    argv = ["/venv/bin/sgemmlab", "bench", "--shape", "4096 4096 4096", "-k", "all"]
    monkeypatch.setattr(sys, "argv", argv)
    cmd = results.command_line()
    assert cmd.startswith("sgemmlab bench")
    assert shlex.split(cmd)[1:] == argv[1:]  # pasting it back gives the same arguments


def test_the_commit_named_by_the_environment_wins_over_a_copied_git(monkeypatch):
    from sgemmlab.bench import results as res

    monkeypatch.setenv("SGEMMLAB_GIT_COMMIT", "feedc0de")
    monkeypatch.setattr(res, "_run", lambda cmd, cwd=None: "stale-head" if "rev-parse" in cmd
                        else "")
    assert res.git_state()["git_commit"] == "feedc0de"
    monkeypatch.delenv("SGEMMLAB_GIT_COMMIT")
    assert res.git_state()["git_commit"] == "stale-head"


def test_a_large_run_is_written_compressed_and_loads_the_same(tmp_path, monkeypatch):
    monkeypatch.setenv("SGEMMLAB_RESULTS_DIR", str(tmp_path))
    monkeypatch.setattr(results, "sm_clock_mhz", lambda: 1980)
    monkeypatch.setattr(results, "COMPRESS_FROM_BYTES", 4096)

    def run(n):
        return {"schema": results.SCHEMA, "kind": "bench", "environment": {},
                "records": [{"M": i, "times_us": [1.5] * 8} for i in range(n)]}

    small = results.write(run(2), "nvidia-h200", "bench-small-20261204T101010Z")
    big = results.write(run(400), "nvidia-h200", "bench-big-20261204T101010Z")
    assert small == tmp_path / "nvidia-h200" / "bench" / "small-20261204T101010Z.json"
    assert big.name == "big-20261204T101010Z.json.xz"
    assert not big.with_suffix("").exists()
    assert results.load(big)["records"] == run(400)["records"]
    assert results.load(small)["environment"]["sm_clock_mhz_after"] == 1980
    assert len(big.read_bytes()) < len(results.read_text(big)) / 5


def test_one_reader_reads_plain_gzipped_and_xz_files(tmp_path):
    import gzip
    import lzma

    text = json.dumps({"schema": results.SCHEMA, "records": [1, 2]})
    for name, data in (("a.json", text.encode()), ("a.json.gz", gzip.compress(text.encode())),
                       ("a.json.xz", lzma.compress(text.encode()))):
        (tmp_path / name).write_bytes(data)
        assert results.load(tmp_path / name)["records"] == [1, 2]


@pytest.mark.parametrize("name, where", [
    ("bench-square-ragged-skinny-20261129T122009Z.json",
     "bench/square-ragged-skinny-20261129T122009Z.json"),
    ("ladder-numba-4096x4096x4096-20261201T200214Z.json",
     "ladder/numba-4096x4096x4096-20261201T200214Z.json"),
    ("pytest-sanitizer-r21-20261201T2005Z.txt", "sanitizer/pytest-r21-20261201T2005Z.txt"),
    ("pytest-gpu-20261203T1639Z.txt", "pytest/gpu-20261203T1639Z.txt"),
    ("models-20261203T105312Z.json.xz", "models/20261203T105312Z.json.xz"),
    ("tune-13_hoisted-2048x2048x2048.partial.jsonl",
     "tune/13_hoisted-2048x2048x2048.partial.jsonl"),
])
def test_results_are_placed_by_kind(name, where, tmp_path):
    assert results.place("nvidia-h200", name, tmp_path) == tmp_path / "nvidia-h200" / where


def test_a_long_name_is_cut_and_keeps_its_stamp_and_a_digest(tmp_path):
    long = ("bench-2048x2048x2048-3072x3072x3072-4096x4096x4096-6144x6144x6144-8192x8192x8192-"
            "8192x-20261202T003023Z.json.gz")
    path = results.place("nvidia-h200", long, tmp_path)
    assert path.parent == tmp_path / "nvidia-h200" / "bench"
    assert path.name.startswith("2048x2048x2048-3072x3072x3072-")
    assert path.name.endswith("-20261202T003023Z.json.gz") and len(path.name) < 70
    other = results.place("nvidia-h200", long.replace("8192x-", "512x-"), tmp_path)
    assert other != path  # the digest tells two cut names apart
    # the same partial log every time: a search resumes from it
    tune = "tune-18_small_tiles-" + "_".join(["127x129x131"] * 8) + ".partial.jsonl"
    assert results.place("g", tune, tmp_path) == results.place("g", tune, tmp_path)
    assert results.place("g", tune, tmp_path).name.endswith(".partial.jsonl")


def test_a_path_recorded_before_the_layout_is_located(tmp_path):
    moved = tmp_path / "results" / "nvidia-h200" / "table" / "grid-20261201T150405Z.json.xz"
    moved.parent.mkdir(parents=True)
    moved.write_bytes(b"")
    old = "results/nvidia-h200/table-grid-20261201T150405Z.json.gz"
    assert results.locate(old, tmp_path / "results") == moved
    since = "results/nvidia-h200/table/grid-20261201T150405Z.json.gz"  # compressed anew since
    assert results.locate(since, tmp_path / "results") == moved
    assert results.locate("results/nvidia-h200/table-gone-20261201T150405Z.json",
                          tmp_path / "results") is None


def test_ladder_and_ceilings_files_are_found_compressed_too(tmp_path, monkeypatch):
    """Since files past COMPRESS_FROM_BYTES are written compressed, the readers that pick the
    newest ladder or ceilings file must find <name>.json.xz as well as <name>.json."""
    monkeypatch.setenv("SGEMMLAB_RESULTS_DIR", str(tmp_path))
    monkeypatch.setattr(results, "sm_clock_mhz", lambda: 1980)
    rec = {"kernel": "13_hoisted", "M": 64, "N": 64, "K": 64, "status": "ok",
           "median_us": 5.0, "vs_cublas": 1.1, "config": {}}
    for name, xz, created in (("ladder-64x64x64-20261201T000000Z", False, "2026-12-01"),
                              ("ladder-64x64x64-20261202T000000Z", True, "2026-12-02")):
        monkeypatch.setattr(results, "COMPRESS_FROM_BYTES", 1 if xz else 1 << 30)
        results.write({"schema": results.SCHEMA, "kind": "ladder", "created": created,
                       "environment": {}, "records": [{**rec, "median_us": 5.0 + xz}]},
                      "nvidia-h200", name)
    results.write({"schema": results.SCHEMA, "kind": "ceilings", "created": "2026-12-02",
                   "environment": {}, "ceilings": {"ffma_tflops": 60.0, "copy_tbps": 4.0},
                   "records": []}, "nvidia-h200", "ceilings-20261202T000000Z")
    assert (tmp_path / "nvidia-h200" / "ceilings" / "20261202T000000Z.json.xz").exists()
    newest = results.newest_ladder("nvidia-h200", "64x64x64", root=tmp_path)
    assert newest["13_hoisted"]["median_us"] == 6.0
    assert newest["13_hoisted"]["file"] == \
        "results/nvidia-h200/ladder/64x64x64-20261202T000000Z.json.xz"
    recs, shown = results.ladder_records("NVIDIA H200", (64, 64, 64), root=tmp_path)
    assert recs["13_hoisted"]["median_us"] == 6.0 and shown.endswith(".json.xz")
    assert results.latest_ceilings(tmp_path / "nvidia-h200")["ffma_tflops"] == 60.0
    # a report beside a bench file finds the GPU's ceilings from the bench file's folder
    assert results.latest_ceilings(tmp_path / "nvidia-h200" / "bench")["ffma_tflops"] == 60.0


def test_a_results_file_records_the_dispatch_settings_an_experiment_may_change(monkeypatch):
    from sgemmlab import plan
    from sgemmlab.dispatch import lookup

    got = results.dispatch_settings()
    assert set(got) == {f"{m}.{k}" for m, keys in results.SETTINGS.items() for k in keys}
    assert got["plan.STAGE_SHARE"] == plan.STAGE_SHARE
    monkeypatch.setattr(lookup, "MODEL_TRANSFER", 0.5)
    assert results.dispatch_settings()["dispatch.lookup.MODEL_TRANSFER"] == 0.5


def test_the_scheme_s_switches_are_recorded_and_set_only_by_name_and_type(monkeypatch):
    """precision="fp32_emulated" changes with runtime.ozaki's switches: a bench run made with
    one flipped (tools/h200.sh's SET) must say so in its file. apply_settings sets only the
    recorded ones, each of its own type, and refuses anything else by name."""
    from sgemmlab.runtime import ozaki

    for name in ("MERGED", "FALLBACK_EARLY", "SCALE_BLOCKS", "SCALE_ROWS_K", "CRT_INT", "GEMM"):
        monkeypatch.setattr(ozaki, name, getattr(ozaki, name))  # set back afterwards
    done = results.apply_settings(["runtime.ozaki.MERGED=1", "runtime.ozaki.SCALE_BLOCKS=3",
                                   "runtime.ozaki.CRT_INT=false",
                                   "runtime.ozaki.GEMM=EXACT_DIV=1,GROUP_M=16"])
    assert done == {"runtime.ozaki.MERGED": True, "runtime.ozaki.SCALE_BLOCKS": 3,
                    "runtime.ozaki.CRT_INT": False,
                    "runtime.ozaki.GEMM": "EXACT_DIV=1,GROUP_M=16"}
    assert ozaki.MERGED is True and ozaki.SCALE_BLOCKS == 3
    got = results.dispatch_settings()
    assert got["runtime.ozaki.MERGED"] is True and got["runtime.ozaki.SCALE_BLOCKS"] == 3
    for bad, says in [("runtime.ozaki.MERGD=1", "not module.NAME=value"),
                      ("runtime.ozaki.MERGED", "not module.NAME=value"),
                      ("runtime.ozaki.KERNELS=1", "not module.NAME=value"),
                      ("ozaki.MERGED=1", "not module.NAME=value"),
                      ("runtime.ozaki.MERGED=yes", "1, 0, true or false"),
                      ("runtime.ozaki.SCALE_BLOCKS=3.5", "of type int"),
                      ("runtime.ozaki.GEMM=EXACT_DIV=1,FOO=2", "'FOO=2' is not NAME=integer")]:
        with pytest.raises(ValueError, match=says):
            results.apply_settings([bad])
    assert ozaki.MERGED is True  # a refusal sets nothing of its own


def test_with_settings_runs_the_command_line_with_the_settings_or_refuses(tmp_path):
    """tools/with_settings.py: the settings before "--", then sgemmlab's own arguments."""
    import subprocess

    tool = Path(__file__).resolve().parents[1] / "tools" / "with_settings.py"
    ok = subprocess.run([sys.executable, str(tool), "runtime.ozaki.MERGED=1", "--", "--help"],
                        capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert ok.returncode == 0 and "Usage: sgemmlab" in ok.stdout
    assert "runtime.ozaki.MERGED=True" in ok.stderr
    bad = subprocess.run([sys.executable, str(tool), "runtime.ozaki.MERGED=2", "--", "--help"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert bad.returncode != 0 and "1, 0, true or false" in bad.stderr
    assert "Usage" not in bad.stdout


def test_the_ozaki_probe_splits_a_combination_into_switches_and_rung_26_s_configuration():
    import importlib

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    try:
        probe = importlib.import_module("ozaki_probe")
    finally:
        sys.path.pop(0)
    switches, over = probe.combo("MERGED=1,FALLBACK_EARLY=1,SCALE_BLOCKS=3,GROUP_M=16")
    assert switches == {"MERGED": True, "FALLBACK_EARLY": True, "SCALE_BLOCKS": 3}
    assert over == {"GROUP_M": 16}
    with pytest.raises(ValueError, match="1, 0, true or false"):
        probe.combo("MERGED=2")
    with pytest.raises(ValueError, match="'SPLIT=2' is not NAME=integer"):  # not rung 26's
        probe.combo("MERGED=1,SPLIT=2")
