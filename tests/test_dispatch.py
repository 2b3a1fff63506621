"""Dispatch on the CPU: decisions from a fixed tuning table written here, the heuristic where
no table reaches, the per-request cache, the table files, and `sgemmlab explain`. The GPU
test at the end runs every dispatched choice over the suites against float64."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from conftest import one_message  # noqa: E402
from sgemmlab import dispatch, registry
from sgemmlab.bench import runner, suites
from sgemmlab.cli import app
from sgemmlab.runtime import device

GPU = "NVIDIA H200"
SMS = 132
R10, R13, R14 = (registry.rung(n) for n in (10, 13, 14))


def cfg14(split: int, fixup: int) -> dict:
    return {**R14.seed, "SPLIT": split, "FIXUP": fixup}


def entry(M, N, K, rung, cfg, vs, us=100.0, layout="NN", batch=1, **more):
    return {"M": M, "N": N, "K": K, "layout": layout, "batch": batch, "rung": rung.label,
            "config": dict(cfg), "median_us": us, "vs_cublas": vs, **more}


#: The fixed table: what a tune would have found at two shapes (ratios made up).
ENTRIES = [
    entry(1024, 1024, 1024, R13, R13.seed, 0.80),
    entry(1024, 1024, 1024, R14, cfg14(0, 1), 1.05),  # the winner: atomic Stream-K
    entry(1024, 1024, 1024, R14, cfg14(0, 0), 1.01),  # the best bit-reproducible one
    entry(1024, 1024, 1024, R10, R10.seed, 0.70),
    entry(4096, 4096, 4096, R10, R10.seed, 1.02),  # the winner: rung 10 has no layouts
    entry(4096, 4096, 4096, R13, R13.seed, 0.98),
    entry(4096, 4096, 4096, R14, cfg14(1, 0), 0.97),
]


@pytest.fixture(autouse=True)
def isolated(isolated_dispatch):
    """Every test here: see conftest.isolated_dispatch."""


def test_the_seeds_these_tests_reason_with():
    # the heuristic's expectations below are worked out for 128 x 128 tiles, BK = 8
    for r in (R13, R14):
        assert r.tile(r.seed) == (128, 128) and r.seed["BK"] == 8 and r.threads(r.seed) == 128
    assert set(R14.space["SPLIT"]) == {0, 1, 2, 4}


def write_package_table(entries=ENTRIES, sm_count=SMS, gpu=GPU):
    data = dispatch.new_table(gpu, "9.0", sm_count, entries, sources=["results/x.json"])
    return dispatch.write_table(data, dispatch.package_table_path(gpu))


def choose(M, N, K, **kw):
    return dispatch.choose(M, N, K, gpu_name=GPU, sm_count=SMS, **kw)


# -- from the table ------------------------------------------------------------------------
def test_an_exact_shape_takes_its_fastest_entry():
    write_package_table()
    c = choose(1024, 1024, 1024)
    assert (c.source, c.rung, dict(c.config)) == ("table", "14_streamk", cfg14(0, 1))
    assert c.distance == 0 and c.entry["vs_cublas"] == 1.05
    assert c.decomposition == "Stream-K, atomic fix-up"
    assert "this very shape" in c.reason and "package" in c.table


def test_a_nearby_shape_takes_the_nearest_measured_one_with_its_log_distance():
    write_package_table()
    c = choose(1100, 1000, 900)
    want = math.sqrt(math.log(1100 / 1024) ** 2 + math.log(1000 / 1024) ** 2
                     + math.log(900 / 1024) ** 2)
    assert c.source == "table" and c.rung == "14_streamk"
    assert c.distance == pytest.approx(want)
    assert (c.entry["M"], c.entry["N"], c.entry["K"]) == (1024, 1024, 1024)
    big = choose(3500, 4000, 4600)
    assert (big.entry["M"], big.rung) == (4096, "10_warptiling")


def test_deterministic_requests_skip_the_atomic_winner_and_say_so():
    write_package_table()
    c = choose(1024, 1024, 1024, deterministic=True)
    assert dict(c.config) == cfg14(0, 0)
    assert R14.deterministic(c.config)
    assert "not bit-reproducible" in c.reason and "14_streamk" in c.reason


def test_a_column_major_operand_needs_a_rung_with_layouts():
    write_package_table()
    c = choose(4096, 4096, 4096, trans_a=True)
    # rung 10 won the NN measurement but cannot take column-major A
    assert c.source == "table" and c.rung == "13_hoisted"
    assert c.distance == pytest.approx(0.5)  # the layout penalty, nothing else
    assert "lacks a feature this call needs" in c.reason


def test_a_shape_far_from_every_entry_goes_to_the_heuristic():
    write_package_table()
    c = choose(64, 64, 64)
    assert c.source == "heuristic" and c.entry is None
    assert "too far to trust" in c.reason and "1024×1024×1024" in c.reason


def test_no_table_means_the_heuristic_with_a_note():
    c = choose(1024, 1024, 1024)
    assert c.source == "heuristic"
    assert c.reason.splitlines()[0].startswith("no tuning table for NVIDIA H200")


def test_a_table_measured_with_another_sm_count_is_not_used():
    write_package_table(sm_count=114)
    c = choose(1024, 1024, 1024)
    assert c.source == "heuristic" and "114 SMs" in c.reason


def test_entries_of_unknown_rungs_or_illegal_configs_are_ignored():
    stale = [entry(1024, 1024, 1024, R13, R13.seed, 0.5),
             {**entry(1024, 1024, 1024, R13, R13.seed, 9.0), "rung": "99_future"},
             entry(1024, 1024, 1024, R13, {**R13.seed, "BM": 100}, 8.0)]
    write_package_table(stale)
    c = choose(1024, 1024, 1024)
    assert c.rung == "13_hoisted" and c.entry["vs_cublas"] == 0.5


def test_the_user_cache_table_comes_before_the_package_one():
    write_package_table()
    mine = dispatch.new_table(GPU, "9.0", SMS, [entry(1024, 1024, 1024, R13, R13.seed, 1.2)])
    path = dispatch.write_table(mine, dispatch.user_table_path(GPU))
    c = choose(1024, 1024, 1024)
    assert c.rung == "13_hoisted" and c.table.startswith("user cache")
    assert str(path) in c.table


def test_a_broken_user_table_warns_and_falls_back_to_the_package():
    write_package_table()
    bad = dispatch.user_table_path(GPU)
    bad.parent.mkdir(parents=True)
    bad.write_text('{"schema": "sgemmlab.table/1", "gpu": "NVIDIA H200", "entries": [{}]}')
    with pytest.warns(UserWarning, match="not a valid tuning table"):
        c = choose(1024, 1024, 1024)
    assert c.source == "table" and c.table.startswith("package")


def test_a_table_of_another_gpu_under_this_name_is_ignored():
    data = dispatch.new_table("NVIDIA H100", "9.0", SMS, ENTRIES)
    dispatch.write_table(data, dispatch.package_table_path(GPU))
    with pytest.warns(UserWarning, match="NVIDIA H100"):
        assert choose(1024, 1024, 1024).source == "heuristic"


# -- the heuristic (no table) ----------------------------------------------------------
@pytest.mark.parametrize("M, N, K, rung, split, words", [
    # 32 x 33 = 1056 tiles = 4 full waves of 264 slots
    (4096, 4224, 2048, "13_hoisted", None, "data-parallel, one block per tile"),
    # 16 x 15 = 240 tiles: one wave, 91 % full
    (2048, 1920, 2048, "13_hoisted", None, "91 % full on average): data-parallel"),
    # 16 x 13 = 208 tiles: one wave, 79 % full
    (2048, 1664, 2048, "14_streamk", 0, "less than one wave: Stream-K"),
    # 1920 tiles: 7.27 waves, the 8 waves 91 % full on average
    (128 * 48, 128 * 40, 1024, "13_hoisted", None, "7.27 waves, 91 % full"),
    # 64 tiles: a quarter of a wave, K = 1024 is not deep: Stream-K
    (1024, 1024, 1024, "14_streamk", 0, "Stream-K (0 full wave"),
    # 384 tiles: 1.45 waves, the second 45 % full: Stream-K after one full wave
    (3001, 2000, 999, "14_streamk", 0, "Stream-K (1 full wave"),
    # 64 tiles with K = 8 * max(M, N): split-K into 264 // 64 = 4 parts
    (1024, 1024, 8192, "14_streamk", 4, "split-K into 4 parts"),
    # 16 tiles x 64 k-iterations < 264 x 4: split-K, capped by the space's largest (4)
    (512, 512, 512, "14_streamk", 4, "too little work to stream"),
    # 130 tiles (half a wave) and deep K: only 264 // 130 = 2 parts fit
    (1280, 1664, 8192, "14_streamk", 2, "split-K into 2 parts"),
    # a small product: under half a wave of the ladder's tiles, 4096 outputs
    (64, 64, 64, "18_small_tiles", 0, "C has 4096 <= 2^16 outputs"),
    # 64 tiles but only 7 k-iterations of BK = 8
    (1024, 1024, 56, "13_hoisted", None, "7 k-iterations"),
])
def test_heuristic_decisions(M, N, K, rung, split, words):
    c = choose(M, N, K)
    assert c.source == "heuristic"
    assert c.rung == rung, c.reason
    assert c.config.get("SPLIT") == split
    assert words in c.reason, c.reason
    if split is not None and rung == "14_streamk":
        assert c.config["FIXUP"] == dispatch.HEURISTIC_FIXUP == 2  # into C unless asked


def test_heuristic_geometry_in_the_details():
    d = choose(1024, 1024, 1024).details["data_parallel"]
    assert (d["tiles"], d["blocks_per_sm"], d["slots"], d["k_iters"]) == (64, 2, 264, 128)
    assert d["waves"] == pytest.approx(64 / 264)
    assert "registers" in d["limits"]


def test_heuristic_deterministic_uses_the_fixed_order_fixup():
    c = choose(1024, 1024, 8192, deterministic=True)
    assert c.config["SPLIT"] == 4 and c.config["FIXUP"] == 0
    assert R14.deterministic(c.config)
    assert "fixed-order fix-up" in c.decomposition


def test_heuristic_unaligned_operands_keep_the_decision_and_say_why():
    a, u = choose(1024, 1024, 1024), choose(1024, 1024, 1024, aligned=False)
    assert (a.rung, dict(a.config)) == (u.rung, dict(u.config))
    assert "float4 paths fall back" in u.reason and "float4" not in a.reason


def test_an_unknown_gpu_gets_h200_limits_and_its_own_sm_count():
    c = dispatch.choose(1024, 1024, 1024, gpu_name="Imaginary GPU", sm_count=10)
    assert "per-SM limits of the H200 assumed" in c.reason
    assert c.details["data_parallel"]["slots"] == 20  # 10 SMs x 2 blocks


def test_batched_and_transposed_requests_only_get_rungs_with_the_features():
    for kw in ({"batch": 8}, {"trans_a": True}, {"trans_b": True}):
        for shape in ((4096, 4224, 2048), (1024, 1024, 1024), (64, 64, 64)):
            c = choose(*shape, **kw)
            need = dispatch.Request(*shape, GPU, SMS, **kw).needs
            assert need <= registry.rung(c.rung).features, (kw, shape, c.rung)
    assert choose(1024, 1024, 1024, batch=8).details["data_parallel"]["tiles"] == 8 * 64


def test_no_rung_with_the_feature_is_a_dispatch_error(monkeypatch):
    monkeypatch.setattr(registry, "RUNGS", tuple(r for r in registry.RUNGS
                                                 if "batched" not in r.features))
    with pytest.raises(dispatch.DispatchError, match="batched"):
        choose(64, 64, 64, batch=2)


@pytest.mark.parametrize("bad", [dict(M=0), dict(K=-1), dict(batch=0), dict(sm_count=0)])
def test_sizes_must_be_positive(bad):
    args = {"M": 8, "N": 8, "K": 8, "gpu_name": GPU, "sm_count": SMS, **bad}
    M, N, K = args.pop("M"), args.pop("N"), args.pop("K")
    with pytest.raises(ValueError, match="must be an integer >= 1"):
        dispatch.choose(M, N, K, **args)


# -- the cache ---------------------------------------------------------------------------
def test_a_repeated_request_is_a_dict_lookup(monkeypatch):
    write_package_table()
    first = choose(1024, 1024, 1024)
    monkeypatch.setattr(dispatch, "_decide", lambda req: pytest.fail("decided again"))
    assert choose(1024, 1024, 1024) is first
    with pytest.raises(pytest.fail.Exception):
        choose(1024, 1024, 1024, deterministic=True)  # another request: decided anew


def test_clear_cache_rereads_the_tables():
    assert choose(1024, 1024, 1024).source == "heuristic"
    write_package_table()  # write_table clears the cache itself
    assert choose(1024, 1024, 1024).source == "table"


def test_a_cached_choice_cannot_be_changed_by_a_caller():
    c = choose(1024, 1024, 1024)
    with pytest.raises(TypeError):
        c.config["BM"] = 64  # type: ignore[index]
    assert dict(choose(1024, 1024, 1024).config)["BM"] == 128


def test_forced_choice():
    c = dispatch.forced("13", {"BM": 64})
    assert (c.source, c.rung, dict(c.config)) == ("forced", "13_hoisted", {"BM": 64})


# -- table files -------------------------------------------------------------------------
def test_table_round_trip_and_winners(tmp_path):
    data = dispatch.new_table(GPU, "9.0", SMS, ENTRIES, command="sgemmlab tune --table",
                              sources=["results/b.json", "results/a.json", "results/a.json"])
    path = dispatch.write_table(data, tmp_path / "t.json")
    back = dispatch.read_table(path)
    assert back.data == json.loads(json.dumps(data))
    assert back.data["schema"] == dispatch.TABLE_SCHEMA
    assert back.data["sources"] == ["results/a.json", "results/b.json"]
    won = {(w["M"], w["N"], w["K"]): (w["rung"], w["config"]) for w in back.data["winners"]}
    assert won == {(1024,) * 3: ("14_streamk", cfg14(0, 1)),
                   (4096,) * 3: ("10_warptiling", dict(R10.seed))}


def test_merge_replaces_only_the_shapes_measured_again():
    new = [entry(1024, 1024, 1024, R13, R13.seed, 1.5)]
    merged = dispatch.merge_entries(ENTRIES, new)
    at_1024 = [e for e in merged if e["M"] == 1024]
    assert at_1024 == new
    assert len([e for e in merged if e["M"] == 4096]) == 3


@pytest.mark.parametrize("broken, words", [
    ({"schema": "other"}, "schema"),
    ({"entries": "x"}, "entries is not a list"),
    ({"entries": [{"M": 1}]}, "entry 0"),
    ({"entries": [entry(0, 8, 8, R13, R13.seed, 1.0)]}, ">= 1"),
    ({"entries": [entry(8, 8, 8, R13, R13.seed, 1.0, layout="XY")]}, "layout"),
    ({"entries": [entry(8, 8, 8, R13, R13.seed, 1.0, us=0.0)]}, "median_us"),
])
def test_invalid_tables_are_refused(tmp_path, broken, words):
    data = {**dispatch.new_table(GPU, "9.0", SMS, ENTRIES), **broken}
    assert any(words in p for p in dispatch.validate(data)), dispatch.validate(data)
    with pytest.raises(dispatch.TableError):
        dispatch.write_table(data, tmp_path / "t.json")
    (tmp_path / "u.json").write_text(json.dumps(data))
    with pytest.raises(dispatch.TableError, match="u.json"):
        dispatch.read_table(tmp_path / "u.json")


def test_a_table_path_ending_in_gz_is_written_and_read_gzipped(tmp_path):
    import gzip
    from pathlib import Path

    shipped = Path(dispatch.__file__).parent.parent / "data" / "tables" / "nvidia-h200.json.gz"
    data = dispatch.read_table(shipped).full()  # the package ships the compact form
    assert len(data["entries"]) > 1000
    small = {**data, "entries": data["entries"][:3]}
    path = dispatch.write_table(small, tmp_path / "t.json.gz")
    assert json.loads(gzip.decompress(path.read_bytes())) == small
    assert dispatch.read_table(path).data == small
    assert path.read_bytes() == dispatch.write_table(small, tmp_path / "u.json.gz").read_bytes()
    path.write_bytes(b"not gzip")
    with pytest.raises(dispatch.TableError, match="t.json.gz"):
        dispatch.read_table(path)


def test_slugs_match_the_results_folders():
    assert device.slug("NVIDIA H200") == device.GPUInfo(0, "NVIDIA H200", (9, 0), 132, 0,
                                                        0).slug == "nvidia-h200"
    assert dispatch.package_table_path(GPU).name == "nvidia-h200.json.gz"


# -- bench: auto and matmul ----------------------------------------------------------------
def test_bench_kernel_names_auto_and_matmul():
    rungs, special = suites.kernels_for(["auto", "13", "matmul", "auto"])
    assert [r.number for r in rungs] == [13] and special == ["auto", "matmul"]
    assert suites.kernels_for(["auto"]) == ([], ["auto"])
    assert [r.number for r in suites.kernels_for([])[0]] == [registry.best().number]
    with pytest.raises(KeyError, match="auto, matmul"):
        suites.kernels_for(["99"])


def test_auto_vs_best_compares_auto_with_the_best_rung_per_shape():
    def rec(kernel, vs, M=64, **more):
        return {"kernel": kernel, "M": M, "N": 64, "K": 64, "status": "ok", "vs_cublas": vs,
                **more}

    records = [rec("cublas", 1.0), rec("13_hoisted", 0.9), rec("14_streamk", 1.1),
               rec("triton", 2.0), rec("auto", 1.078, rung="14_streamk"),
               rec("auto", 0.5, M=128), rec("cublas", 1.0, M=128)]
    (row,) = runner.auto_vs_best(records)
    assert row["best"] == "14_streamk" and row["ratio"] == pytest.approx(0.98)


def test_an_auto_record_carries_the_choice(monkeypatch):
    write_package_table()
    fake = runner.Candidate("13_hoisted", None, None, dict(R13.seed), {"registers": 200})
    monkeypatch.setattr(runner, "rung_candidate", lambda r, cfg, layout="NN": fake)
    gpu = device.GPUInfo(0, GPU, (9, 0), SMS, 60 << 20, 232448)
    auto = runner.auto_candidate(gpu)
    rec = runner._record(auto, 1024, 1024, 1024, runner.CheckResult(True, 1e-6, 1e-5))
    assert rec["kernel"] == "auto" and rec["config"] == cfg14(0, 1)
    # on sm_90 the table's rung 14 runs as its ordered twin, at the table's configuration
    assert rec["rung"] == registry.TWIN_OF["14_streamk"] and rec["dispatch"]["source"] == "table"
    assert rec["registers"] == 200
    json.dumps(rec)  # goes into a results file as is


# -- sgemmlab explain ------------------------------------------------------------------------
@pytest.fixture
def no_gpu(monkeypatch):
    def refuse(index=0):
        raise device.NoGPUError("No usable NVIDIA GPU was found (test)")

    monkeypatch.setattr(device, "gpu_info", refuse)


def explain(*args):
    return CliRunner().invoke(app, ["explain", *map(str, args)])


def test_explain_without_a_gpu_uses_the_shipped_table_gpu(no_gpu):
    write_package_table()
    out = explain(1100, 1000, 900)
    assert out.exit_code == 0, out.output
    assert "no GPU here: answering for the NVIDIA H200" in out.output
    assert "runs:    22_streamk_ordered" in out.output and "source:  table" in out.output
    assert "entry:   1024×1024×1024 NN" in out.output and "distance 0.1" in out.output
    assert "FFMAs reordered for the register banks, at" in out.output


def test_the_ordered_twins_stand_in_for_13_and_14_on_sm_90_only():
    write_package_table()
    plain = choose(1024, 1024, 1024)
    hopper = choose(1024, 1024, 1024, arch="sm_90")
    ampere = choose(1024, 1024, 1024, arch="sm_80")
    assert plain.rung == ampere.rung == "14_streamk"
    assert hopper.rung == registry.TWIN_OF["14_streamk"] == "22_streamk_ordered"
    assert dict(hopper.config) == dict(plain.config)
    assert hopper.decomposition == plain.decomposition
    twin = registry.rung(hopper.rung)
    assert twin.base == 14 and twin.post == "operand-order"
    assert twin.space == registry.rung(14).space and twin.seed == registry.rung(14).seed


def test_explain_shows_the_heuristics_reasoning(no_gpu):
    out = explain(1024, 1024, 8192, "--deterministic", "--gpu", "h200")
    assert out.exit_code == 0, out.output
    assert "note:" not in out.output
    for words in ("split-K x4, fixed-order fix-up", "source:  heuristic", "64 tiles",
                  "2 blocks/SM", "264 slots", "0.24 waves", "bit-reproducible"):
        assert " ".join(words.split()) in " ".join(out.output.split()), words  # lines fold


def test_explain_for_another_gpu_and_layout(no_gpu):
    out = explain(4096, 4096, 4096, "--gpu", "a100", "--ta", "--batch", "2", "--json")
    assert out.exit_code == 0, out.output
    got = json.loads(out.output)
    assert (got["gpu"], got["sm_count"], got["layout"], got["batch"]) == \
        ("NVIDIA A100-SXM4-80GB", 108, "TN", 2)
    assert {"layouts", "batched"} <= registry.rung(got["rung"]).features
    assert got["details"]["data_parallel"]["slots"] == 216


def test_explain_unknown_gpu_needs_its_sm_count(no_gpu):
    out = explain(64, 64, 64, "--gpu", "Imaginary")
    assert out.exit_code == 2 and "--sms" in out.output
    one_message(out.output)
    ok = explain(64, 64, 64, "--gpu", "Imaginary", "--sms", "10")
    assert ok.exit_code == 0 and "Imaginary (10 SMs)" in ok.output


def test_explain_refuses_a_zero_size(no_gpu):
    out = explain(0, 64, 64)
    assert out.exit_code == 2 and "Traceback" not in out.output


# -- on the GPU ------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("suite", ["square", "ragged", "skinny", "small"])
def test_every_dispatched_choice_is_correct(suite, monkeypatch):
    """Whatever dispatch picks for this GPU (the real table and compiles: the autouse
    fixture's stand-ins are undone), for each suite shape, plain and bit-reproducible,
    row- and column-major: checked against float64 with NaN-poisoned output and alpha/beta."""
    monkeypatch.undo()
    dispatch.clear_cache()
    from sgemmlab.bench.check import check_gemm
    from sgemmlab.runtime.device import gpu_info

    g = gpu_info()
    failures = []
    for M, N, K in suites.suite(suite):
        for kw in ({}, {"deterministic": True}, {"trans_a": True}, {"trans_b": True}):
            c = dispatch.choose(M, N, K, gpu_name=g.name, sm_count=g.sm_count,
                                aligned=K % 4 == 0 and N % 4 == 0, **kw)
            layout = dispatch.layout_of(kw.get("trans_a", False), kw.get("trans_b", False))
            cand = runner.rung_candidate(registry.rung(c.rung), dict(c.config), layout)
            for alpha, beta in ((1.0, 0.0), (0.75, -1.25)):
                res = check_gemm(cand.gemm, M, N, K, alpha=alpha, beta=beta)
                if not res.ok:
                    failures.append(f"{M}x{N}x{K} {kw} {c.rung} {c.decomposition} "
                                    f"({c.source}) alpha={alpha}: {res.reason}")
    assert not failures, "\n".join(failures)


@pytest.mark.gpu
def test_bench_auto_and_matmul_are_checked_and_timed(monkeypatch):
    """`bench -k auto -k matmul` on the GPU: both pass the float64 gate and are timed; the
    auto record names the rung dispatch chose."""
    monkeypatch.undo()
    dispatch.clear_cache()
    from sgemmlab.bench.measure import L2Flusher, Method
    from sgemmlab.runtime.device import gpu_info

    g = gpu_info()
    cands = [runner.auto_candidate(g), runner.matmul_candidate()]
    recs = runner.measure_shape(1000, 1000, 1000, cands, Method(3, 3, 1),
                                L2Flusher(g.l2_bytes))
    auto, matmul = recs[1:]
    for rec in (auto, matmul):
        assert rec["status"] == "ok" and rec["correct"], rec
    want = dispatch.choose(1000, 1000, 1000, gpu_name=g.name, sm_count=g.sm_count)
    assert auto["rung"] == want.rung and auto["config"] == dict(want.config)
    assert auto["dispatch"]["source"] == want.source


def test_a_shape_a_family_rung_serves_goes_to_it(isolated_dispatch):
    """Memory-bound shapes (the vector, decode and tiny-K suites) go to the first
    memory-bound rung that serves them, with the reason; a shape none serves goes to the
    ladder (or the small-tile rung, which claims no shape: it is never preferred)."""
    assert registry.MEMBOUND
    assert not any(r.preferred(M, N, K) for r in registry.SMALL
                   for M, N, K in ((1, 1, 1), (1, 4096, 4096), (4096, 4096, 8)))
    served = [(s, next(r for r in registry.MEMBOUND if r.preferred(*s)))
              for name in ("vector", "decode", "tinyk") for s in suites.suite(name)
              if any(r.preferred(*s) for r in registry.MEMBOUND)]
    assert served, "no suite shape is served by a family rung"
    for (M, N, K), rung in served:
        c = dispatch.choose(M, N, K, gpu_name=GPU, sm_count=132)
        assert c.rung == rung.label and c.source == "heuristic", (M, N, K, c.rung)
        assert rung.domain in c.reason
    c = dispatch.choose(4096, 4096, 4096, gpu_name=GPU, sm_count=132)
    assert registry.rung(c.rung) in registry.RUNGS


def test_a_short_batch_of_large_tiny_k_products_runs_rung_17_one_per_launch(isolated_dispatch):
    """Rung 17 has no batches: a batch of at most PER_ITEM_BATCH products that each write
    PER_ITEM_OUTPUTS floats or more runs on it one product per launch; a longer batch, or a
    batch of small products, stays on a rung with batches."""
    r17 = registry.rung(17)
    assert "batched" not in r17.features and r17.preferred(815, 11900, 4)
    c = dispatch.choose(815, 11900, 4, gpu_name=GPU, sm_count=132, trans_a=True, batch=9)
    assert c.rung == r17.label and "one launch per product" in c.reason
    for M, N, batch in ((815, 11900, dispatch.PER_ITEM_BATCH + 1), (64, 4096, 9)):
        c = dispatch.choose(M, N, 4, gpu_name=GPU, sm_count=132, batch=batch)
        assert "batched" in registry.rung(c.rung).features, (M, N, batch, c.rung)


def test_explain_refuses_what_the_api_refuses(no_gpu):
    out = explain(3000000000, 2, 2)
    assert out.exit_code == 2 and "M = 3000000000 does not fit the kernels' 32-bit" in out.output
    assert "Traceback" not in out.output
    with pytest.raises(OverflowError, match="K = 2147483648"):
        dispatch.choose(2, 2, 2**31, gpu_name=GPU, sm_count=132)
