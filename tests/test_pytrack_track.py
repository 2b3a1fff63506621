"""The Python track as a track of the ladder, without a GPU: the registry's description
(registry.PYTHON), the commands that take Python rungs (ladder, bench, inspect), the
results files they write and read, the README block, and the machine code `inspect --track
numba` reads (Numba's PTX linked by nvJitLink, beside the CUDA twin's NVRTC cubin)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sgemmlab import registry
from sgemmlab.bench import readme, results, suites
from sgemmlab.bench.problems import key


def sgemmlab(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-m", "sgemmlab", *args], capture_output=True,
                          text=True, timeout=600, env={**os.environ, **(env or {})})


# -- the registry ------------------------------------------------------------------------
def test_the_track_names_its_twins_in_order():
    assert [p.number for p in registry.PYTHON] == list(range(1, 8))
    assert [p.twin for p in registry.PYTHON] == [1, 2, 3, 4, 5, 6, 10]
    for p in registry.PYTHON:
        assert p.rung is registry.rung(p.twin)
        assert p.label == f"py{p.number:02d}_{p.name}"
        assert p.name == p.rung.name  # the twin's slug: a Python rung is not a new idea


@pytest.mark.parametrize("text", ["3", 3, "py3", "py03", "py03_smem", "smem"])
def test_a_python_rung_is_found_by_any_of_its_names(text):
    assert registry.python_rung(text).label == "py03_smem"


def test_an_unknown_python_rung_is_refused_with_the_menu():
    with pytest.raises(KeyError, match="py07_warptiling"):
        registry.python_rung("py9")


def test_modules_read_their_twin_from_the_registry():
    pytest.importorskip("numba")
    from sgemmlab import pytrack

    assert len(pytrack.RUNGS) == len(registry.PYTHON)
    for p, mod in zip(registry.PYTHON, pytrack.RUNGS):
        assert pytrack.module(p) is mod and mod.PY is p and mod.RUNG is p.rung


# -- the commands --------------------------------------------------------------------------
def test_bench_takes_python_rungs_as_kernels():
    rungs, special = suites.kernels_for(["13", "py3", "auto", "py03_smem", "py7"])
    assert [r.number for r in rungs] == [13]
    assert special == ["auto", "py03_smem", "py07_warptiling"]
    with pytest.raises(KeyError, match="py07_warptiling"):
        suites.kernels_for(["py8"])


def test_ladder_refuses_an_unknown_track():
    from sgemmlab.bench import ladder

    with pytest.raises(ValueError, match="cuda, numba"):
        ladder.run([(64, 64, 64)], track="rust")


@pytest.mark.parametrize("args, code, words", [
    (["ladder", "--track", "rust"], 2, "cuda or numba"),
    (["ladder", "--track", "numba", "-k", "py9"], 2, "unknown Python rung"),
    (["inspect", "--track", "rust", "3"], 2, "cuda or numba"),
])
def test_track_mistakes_are_one_sentence(args, code, words):
    done = sgemmlab(*args)
    assert done.returncode == code, done.stdout + done.stderr
    assert words in done.stdout + done.stderr and "Traceback" not in done.stderr


def test_the_numba_ladder_without_a_gpu_says_where_python_runs():
    pytest.importorskip("numba")
    done = sgemmlab("ladder", "--track", "numba", "--size", "64",
                    env={"CUDA_VISIBLE_DEVICES": ""})
    if done.returncode == 0:
        pytest.skip("a GPU answered")
    assert done.returncode == 1 and "--simulate" in done.stdout + done.stderr


# -- results files and the README block --------------------------------------------------
def _record(kernel: str, cfg: dict, us: float, vs: float, regs: int = 40) -> dict:
    return {"kernel": kernel, "config": cfg, "M": 512, "N": 512, "K": 512, "status": "ok",
            "median_us": us, "vs_cublas": vs, "registers": regs, "correct": True}


def _track_file(root: Path, created: str, name: str) -> Path:
    twin7 = registry.python_rung(7).rung.seed
    other7 = {**twin7, "BK": 8}
    run = {"schema": results.SCHEMA, "kind": "ladder-numba", "created": created,
           "environment": {"gpu": "NVIDIA H200", "driver": "580", "git_commit": "abc"},
           "records": [
               _record("cublas", None, 10.0, 1.0),
               _record("03_smem", {"BS": 32}, 20.0, 0.5, 32),
               _record("py03_smem", {"BS": 32}, 40.0, 0.25, 34),
               _record("10_warptiling", twin7, 12.5, 0.8, 127),
               _record("py07_warptiling", twin7, 25.0, 0.4, 168),
               _record("py07_warptiling", other7, 20.0, 0.5, 150),
           ]}
    path = results.place("nvidia-h200", name, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(run))
    return path


def test_the_readme_block_pairs_each_python_rung_with_its_twin(tmp_path):
    path = _track_file(tmp_path, "2026-12-01T00:00:00+00:00", "ladder-numba-512-x.json")
    text = readme.track_board([path])
    row3 = next(line for line in text.splitlines() if line.startswith("| `py03_smem`"))
    assert row3 == "| `py03_smem` | `03_smem` | 50.0 | 25.0 | 2.00 | 34 / 32 |"
    row7 = next(line for line in text.splitlines() if line.startswith("| `py07_warptiling`"))
    assert "| 80.0 | 40.0 | 2.00 |" in row7  # at the twin's configuration, not the search's
    assert "2 configurations" in text and "50.0 % of cuBLAS (from 40.0 %)" in text
    assert "BK=8" in text  # the search's fastest


def test_track_files_stay_out_of_the_ladder_lookup(tmp_path):
    _track_file(tmp_path, "2026-12-02T00:00:00+00:00", "ladder-numba-512-b.json")
    assert results.ladder_records("NVIDIA H200", (512, 512, 512), root=tmp_path) is None
    older = _track_file(tmp_path, "2026-11-30T00:00:00+00:00", "ladder-numba-512-a.json")
    recs = results.track_records("NVIDIA H200", (512, 512, 512), root=tmp_path)
    assert len(recs["py07_warptiling"]) == 2 and "numba-512-b" in \
        recs["py03_smem"][0]["source"]  # the newest file
    assert results.track_records("NVIDIA H200", (512, 512, 512), older)["py03_smem"][0][
        "source"].endswith("ladder/numba-512-a.json")
    assert results.track_records("NVIDIA H200", (64, 64, 64), root=tmp_path) == {}


def test_readme_update_fills_the_track_block(tmp_path):
    path = _track_file(tmp_path, "2026-12-01T00:00:00+00:00", "ladder-numba-512-x.json")
    md = tmp_path / "R.md"
    md.write_text(f"a\n{readme.TRACK_BEGIN}\nold\n{readme.TRACK_END}\nb\n")
    readme.update(md, [path])
    text = md.read_text()
    assert "old" not in text and "| `py03_smem` |" in text and text.endswith("b\n")
    assert key(_record("x", {}, 1, 1)).label == "512×512×512" and "512×512×512" in text


# -- the machine code ----------------------------------------------------------------------
def test_int64_ops_counts_the_high_halves_only():
    from sgemmlab.anatomy.pytrack import int64_ops

    ops = {"IADD3": 4, "IADD3.X": 3, "LEA.HI.X": 2, "IMAD.WIDE.U32": 1, "ISETP.GE.AND.EX": 1,
           "FFMA": 9, "LDS.128": 2, "SHF.R.S32.HI": 1}
    assert int64_ops(ops) == 3 + 2 + 1 + 1 + 1


@pytest.fixture(scope="module")
def track_items():
    pytest.importorskip("numba")
    from sgemmlab import pytrack
    from sgemmlab.anatomy import pytrack as track_mod
    from sgemmlab.anatomy import sass
    from sgemmlab.pytrack import build
    from sgemmlab.runtime import occupancy

    if sass.find_nvdisasm() is None:
        pytest.skip("nvdisasm not installed")
    g = occupancy.gpu("h200")
    try:
        first = registry.python_rung(1)
        build.build(pytrack.module(first), first.rung.seed, g.arch)
    except build.NoToolchain as exc:
        pytest.skip(str(exc))
    return track_mod.track(g)


def test_every_python_rung_compiles_and_has_a_hot_loop(track_items):
    assert [i["rung"] for i in track_items] == [p.label for p in registry.PYTHON]
    for it in track_items:
        for side in ("python", "cuda"):
            s = it[side]
            assert s["registers"] > 0 and s["blocks_per_sm"] >= 1, (it["rung"], side)
            assert s["sass"]["ffma"] > 0, (it["rung"], side)


def test_what_python_costs_is_in_the_machine_code(track_items):
    by = {i["rung"]: i for i in track_items}
    # Numba's indices are int64 (Python ints): the naive loop's addresses carry high halves
    naive = by["py01_naive"]
    assert naive["python"]["sass"]["int64_ops"] > naive["cuda"]["sass"]["int64_ops"]
    # no float4 in Numba: rung 6's twin loads 16 bytes at a time, the Python rung never
    vec = by["py06_vectorized"]
    assert "128" in vec["cuda"]["sass"]["lds_widths"]
    assert "128" not in vec["python"]["sass"]["lds_widths"]
    # the twin's k loop is unrolled (#pragma unroll), Numba's is not: more FFMAs per trip
    assert vec["cuda"]["sass"]["ffma"] > vec["python"]["sass"]["ffma"]


def test_inspect_track_prints_the_side_by_side_table(tmp_path):
    pytest.importorskip("numba")
    md = tmp_path / "numba.md"
    done = sgemmlab("inspect", "--track", "numba", "3", "--gpu", "h200", "--markdown", str(md))
    if "not found" in done.stderr or "nvJitLink" in done.stderr:
        pytest.skip(done.stderr.strip())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "py03/03" in done.stdout and "py/cu" in done.stdout
    assert max(len(ln) for ln in done.stdout.splitlines()) <= 100
    assert "| py03_smem (03_smem) |" in md.read_text()


def test_the_track_imports_where_numpy_has_dropped_row_stack():
    """numpy 2.5 removed np.row_stack; numba-cuda 0.30 overloads it at import (the H200
    machine's numba failed so): the package puts the alias back before importing numba."""
    pytest.importorskip("numba")
    code = ("import numpy as np\n"
            "if hasattr(np, 'row_stack'):\n    del np.row_stack\n"
            "import sgemmlab.pytrack\n"
            "assert np.row_stack is np.vstack\nprint('imported')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and "imported" in done.stdout, done.stderr[-2000:]
