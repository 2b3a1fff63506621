"""The visualizer's data (anatomy/visual.py) without a browser: it is the replay's, so its
numbers are the bill's — each test below checks the page's data against `bill.count`, the
function `sgemmlab inspect` reports, or against the rung's own geometry."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sgemmlab import registry
from sgemmlab.anatomy import bill as bill_mod
from sgemmlab.anatomy import visual
from sgemmlab.bench.results import visualizer_measurements
from sgemmlab.cli import app

REPO = Path(__file__).resolve().parent.parent
H200 = "NVIDIA H200"


@pytest.fixture(scope="module")
def data():
    return visual.site_data(list(registry.RUNGS),
                            visualizer_measurements("nvidia-h200", root=REPO / "results"))


def by_label(data, label):
    return next(r for r in data["rungs"] if r["label"] == label)


def test_every_ladder_rung_is_drawn_and_the_others_say_why(data):
    assert [r["number"] for r in data["rungs"]] == [r.number for r in registry.RUNGS]
    skipped = {r["label"] for r in data["not_replayed"]}
    assert skipped == {r.label for r in registry.FAMILY + registry.TENSOR}
    assert all("replay" in r["why"] for r in data["not_replayed"])


@pytest.mark.parametrize("rung", registry.RUNGS, ids=lambda r: r.label)
def test_the_owned_elements_tile_the_block_exactly_once(data, rung):
    r = by_label(data, rung.label)
    rows, cols = r["tile"]
    cells = [tuple(e) for owned in r["owned"] for e in owned]
    assert len(cells) == len(set(cells)) == rows * cols
    assert {c for c in cells} == {(i, j) for i in range(rows) for j in range(cols)}


@pytest.mark.parametrize("rung", registry.RUNGS, ids=lambda r: r.label)
def test_the_per_warp_figures_add_up_to_the_bill(data, rung):
    r = by_label(data, rung.label)
    b = bill_mod.count(rung, r["config"], tuple(r["shape"]))
    sectors = sum(w["sectors"] for i in r["instructions"] if i["space"] == "global"
                  and i["operand"] in "AB" for w in i["warps"]) * 32 / r["warps"]
    assert sectors == pytest.approx(b.global_sector_bytes_per_warp)
    waves = sum(w["wavefronts"] for i in r["instructions"] if i["space"] == "shared"
                for w in i["warps"]) / r["warps"]
    assert waves == pytest.approx(b.smem_wavefronts_per_warp)
    assert r["bill"]["global_sector_bytes_per_warp"] == pytest.approx(
        b.global_sector_bytes_per_warp)


def test_rungs_1_and_2_at_the_seed_move_1056_and_160_bytes_per_warp():
    out = []
    for n in (1, 2):
        rung = registry.rung(n)
        r = visual.rung_data(rung, dict(rung.seed), measured={})
        first_a = next(i for i in r["instructions"] if i["operand"] == "A")
        first_b = next(i for i in r["instructions"] if i["operand"] == "B")
        out.append(32 * (first_a["warps"][0]["sectors"] + first_b["warps"][0]["sectors"]))
    assert out == [1056, 160]


def test_lanes_are_elements_or_words_and_inactive_lanes_are_minus_one(data):
    r = by_label(data, "06_vectorized")
    M, N, K = r["shape"]
    for i in r["instructions"]:
        assert len(i["lanes"]) == r["threads"]
        live = [x for x in i["lanes"] if x >= 0]
        if i["space"] == "global":
            assert i["ld"] == (K if i["operand"] == "A" else N)
            assert all(x // i["ld"] < (M if i["operand"] != "B" else K) for x in live)
        else:
            assert i["ld"] == 1


def test_rung_14_shows_the_launchers_stream_k_plan(data):
    from sgemmlab.runtime.decompose import streamk as plan

    r = by_label(data, "14_streamk")
    cfg = r["config"]
    for p in r["pipeline"]["streamk"]:
        M, N, K = p["shape"]
        want = plan(0, cfg["FIXUP"], cfg["BM"], cfg["BN"], cfg["BK"], M, N, K, 1,
                    visual.H200_SLOTS)
        assert p["ranges"] == [list(x) for x in want.ranges()]
        assert p["sk_blocks"] == len(p["ranges"]) and p["describe"] == want.describe()
        if p["ranges"]:
            assert p["ranges"][-1][1] == p["sk_tiles"] * p["k_tiles"]  # the stream, covered


def test_measured_figures_come_from_the_newest_ladder_file(data):
    files = sorted((REPO / "results" / "nvidia-h200" / "ladder").glob("4096x4096x4096-*.json"))
    if not files:
        pytest.skip("no ladder file at 4096^3 committed")
    recs = {x["kernel"]: x for x in json.loads(files[-1].read_text())["records"]}
    for r in data["rungs"]:
        m = r["measured"]
        if m is None:
            assert r["label"] not in recs or recs[r["label"]].get("status") != "ok"
            continue
        assert m["file"].endswith(files[-1].name)
        assert m["vs_cublas"] == recs[r["label"]]["vs_cublas"]


def test_the_command_writes_a_site_in_under_30_seconds_and_refuses_family_rungs(tmp_path):
    runner = CliRunner()
    start = time.time()
    result = runner.invoke(app, ["visualize", "--out", str(tmp_path / "site"), "--shape",
                                 "1000,1000,1000"])
    took = time.time() - start
    assert result.exit_code == 0, result.output
    assert took < 30, f"{took:.1f} s"
    files = sorted(p.name for p in (tmp_path / "site").iterdir())
    assert files == ["app.js", "data.js", "index.html", "style.css"]
    text = (tmp_path / "site" / "data.js").read_text()
    lines = text.splitlines()
    assert [x.split(" = ")[0] for x in lines] == ["window.SGEMMLAB", "window.SGEMMLAB_SEED"]
    site = json.loads(lines[0].partition(" = ")[2].rstrip(";"))
    seed = json.loads(lines[1].partition(" = ")[2].rstrip(";"))
    assert site["configuration"] == "default" and seed["configuration"] == "seed"
    assert by_label(seed, "01_naive")["config"] == dict(registry.rung(1).seed)
    shapes = [p["shape"] for p in by_label(site, "14_streamk")["pipeline"]["streamk"]]
    assert [1000, 1000, 1000] in shapes
    refused = runner.invoke(app, ["visualize", "17", "--out", str(tmp_path / "x")])
    assert refused.exit_code == 2 and "no per-thread replay" in refused.output


def test_the_site_is_generated_not_kept_twice():
    """The page's files live once, in the package (data/visualizer/); the site is written
    when it is wanted (`sgemmlab visualize --out DIR`), so no copy is committed to go
    stale: docs/visualizer/ is ignored."""
    import subprocess

    ignored = subprocess.run(["git", "check-ignore", "-q", "docs/visualizer/index.html"],
                             cwd=REPO, timeout=60).returncode
    assert ignored == 0, "docs/visualizer/ must be ignored: the site is generated"
    tracked = subprocess.run(["git", "ls-files", "docs/visualizer"], cwd=REPO,
                             capture_output=True, text=True, timeout=60).stdout
    assert not tracked.strip(), f"a committed copy of the site: {tracked.split()[:3]}"


def test_each_twin_of_a_python_rung_names_it_with_its_h200_figure(data):
    """The Python rungs mirror their twins' index arithmetic, so the replay drawn for a
    twin is the Python rung's too: the side panel names it, with its time from the newest
    Python-track file at the twin's configuration."""
    files = sorted((REPO / "results" / "nvidia-h200" / "ladder").glob("numba-*.json*"))
    twins = {p.twin: p for p in registry.PYTHON}
    for r in data["rungs"]:
        py = twins.get(r["number"])
        if py is None:
            assert r["python"] is None, r["label"]
            continue
        assert r["python"]["label"] == py.label
        assert (REPO / "src" / "sgemmlab" / r["python"]["file"]).is_file()
        m = r["python"]["measured"]
        if files:
            assert m is not None and m["file"].endswith(files[-1].name), r["label"]
            assert m["config"] == r["config"] and m["over_twin"] > 1.0
