"""What `sgemmlab bench` is asked to measure: suites, problems, kernels, baselines."""

from __future__ import annotations

import pytest
import typer

from sgemmlab import registry
from sgemmlab.bench import suites
from sgemmlab.bench.problems import Problem
from sgemmlab.cli import parse_shape


def _plain(name):
    return [p.shape for p in suites.SUITES[name]]


def test_the_plain_suites_hold_the_shapes_the_issue_names():
    assert {name: _plain(name) for name in ("square", "ragged", "skinny", "vector", "decode",
                                           "tinyk")} == {
        "square": [(1024,) * 3, (2048,) * 3, (4096,) * 3, (8192,) * 3],
        "ragged": [(4092,) * 3, (1000,) * 3, (3001, 2000, 999), (4097, 1023, 515)],
        "skinny": [(1024, 1024, 8192), (8192, 8192, 512), (256, 4096, 4096),
                   (4096, 4096, 256)],
        # issue 13: vector (1xNxK and Mx1xK at 4096, 8192, 16384), decode (M in 1..64
        # against 4096x4096, 11008x4096 and 4096x11008), and K <= 16
        "vector": [(1, 4096, 4096), (1, 8192, 8192), (1, 16384, 16384), (4096, 1, 4096),
                   (8192, 1, 8192), (16384, 1, 16384)],
        "decode": [(m, n, k) for n, k in ((4096, 4096), (11008, 4096), (4096, 11008))
                   for m in (1, 2, 4, 8, 16, 32, 64)],
        "tinyk": [(4096, 4096, k) for k in (1, 2, 4, 8, 16)],
    }
    for name in ("square", "ragged", "skinny", "small", "vector", "decode", "tinyk"):
        assert all(p.plain for p in suites.SUITES[name]), name


def test_small_keeps_its_cubes_and_adds_odd_sizes_from_16_to_512():
    small = _plain("small")
    cubes = {s[0] for s in small if s[0] == s[1] == s[2]}
    assert {64, 128, 256, 512} <= cubes
    assert {16, 17, 31, 97, 127, 129, 131, 255, 257, 383, 511} <= cubes
    assert (127, 129, 131) in small and any(len(set(s)) == 3 for s in small)
    assert all(16 <= d <= 512 for s in small for d in s)
    assert len(small) == len(set(small))


def test_the_batched_suite():
    assert suites.SUITES["batched"] == [Problem(128, 128, 128, 32), Problem(64, 64, 64, 256),
                                        Problem(512, 512, 64, 8),
                                        Problem(2048, 2048, 2048, 4)]
    assert [str(p) for p in suites.SUITES["batched"]] == [
        "32@128x128x128", "256@64x64x64", "8@512x512x64", "4@2048x2048x2048"]


def test_the_layouts_suite_takes_shapes_of_the_others_in_every_other_layout():
    got = suites.SUITES["layouts"]
    shapes = list(dict.fromkeys(p.shape for p in got))
    assert shapes == [(4096, 4096, 4096), (1000, 1000, 1000), (4097, 1023, 515),
                      (8192, 8192, 512), (3000, 5000, 700), (1, 4096, 4096),
                      (16, 4096, 4096)]
    for s in shapes:
        assert sorted(p.layout for p in got if p.shape == s) == ["NT", "TN", "TT"]
    assert all(p.batch == 1 for p in got)
    others = {p.shape for name, ps in suites.SUITES.items() if name != "layouts" for p in ps}
    assert len([s for s in shapes if s not in others]) == 1  # 3000x5000x700: all differ


def test_no_suite_and_no_shape_means_the_square_suite():
    assert suites.shapes_for([], []) == suites.SUITES["square"]


def test_suites_then_shapes_in_order_each_once():
    got = suites.shapes_for(["small", "small"], [(7, 8, 9), (64, 64, 64)])
    assert got == [*suites.SUITES["small"], Problem(7, 8, 9)]


def test_an_explicit_shape_alone_replaces_the_default_suite():
    assert suites.shapes_for([], [(7, 8, 9)]) == [Problem(7, 8, 9)]


def test_a_shape_in_another_layout_or_batch_is_another_problem():
    got = suites.shapes_for(["square"], [Problem(1024, 1024, 1024, layout="TN"),
                                         Problem(1024, 1024, 1024, 2),
                                         Problem(1024, 1024, 1024)])
    assert got == [*suites.SUITES["square"], Problem(1024, 1024, 1024, layout="TN"),
                   Problem(1024, 1024, 1024, 2)]


def test_unknown_suite_names_the_known_ones():
    with pytest.raises(KeyError) as err:
        suites.shapes_for(["huge"], [])
    assert "huge" in err.value.args[0] and "square" in err.value.args[0]
    assert "batched" in err.value.args[0] and "layouts" in err.value.args[0]


def test_plain_shapes_for_the_tuner_refuses_batches_and_layouts():
    assert suites.plain_shapes(suites.SUITES["ragged"]) == _plain("ragged")
    for name in ("batched", "layouts"):
        with pytest.raises(ValueError, match="--layout"):
            suites.plain_shapes(suites.SUITES[name])


# -- the random suite --------------------------------------------------------------------
def test_random_shapes_are_deterministic_for_a_seed():
    a = suites.random_shapes(200, 2026)
    assert a == suites.random_shapes(200, 2026)
    assert a != suites.random_shapes(200, 2027)
    assert suites.random_shapes(50, 2026) == a[:50]  # a shorter draw is a prefix


def test_random_shapes_are_in_range_distinct_and_under_the_product_bound():
    got = suites.random_shapes(500, 7)
    assert len(got) == 500 == len(set(got))
    assert all(p.plain for p in got)
    assert all(1 <= d <= 16384 and isinstance(d, int) for p in got for d in p.shape)
    assert all(p.M * p.N * p.K <= 2**37 for p in got)
    # log-uniform: about as many dimensions below 128 (= sqrt(16384)) as above it
    small = sum(d < 128 for p in got for d in p.shape)
    assert 0.35 < small / (3 * len(got)) < 0.65
    assert min(d for p in got for d in p.shape) < 4 and max(d for p in got
                                                                for d in p.shape) > 4096


def test_random_shapes_leave_out_the_excluded_ones():
    free = suites.random_shapes(100, 3)
    grid = [free[0].shape, free[10], free[99].shape]  # tuples and Problems alike
    got = suites.random_shapes(100, 3, exclude=grid)
    assert len(got) == 100 == len(set(got))
    assert not {free[0], free[10], free[99]} & set(got)
    assert got[:9] == free[1:10]  # the others are still drawn in the same order


def test_the_random_mix_holds_every_kind_of_problem_in_its_proportions():
    got = suites.random_mix(300, 11)
    assert got == suites.random_mix(300, 11) != suites.random_mix(300, 12)
    assert len(got) == 300 == len(set(got))
    assert {p.layout for p in got} == {"NN", "NT", "TN", "TT"}
    for i, p in enumerate(got):
        assert all(1 <= d <= 16384 for d in p.shape)
        aligned = p.K % 4 == 0 and p.N % 4 == 0
        assert aligned == (i % 3 != 2), (i, p)  # a third with K or N off a multiple of 4
        if i % 12 in (5, 10):  # a sixth batched, aligned and misaligned alike
            assert 2 <= p.batch <= 64 and p.batch * p.M * p.N * p.K <= 2**33
        else:
            assert p.batch == 1 and p.M * p.N * p.K <= 2**37
        assert (p.pad in suites.RANDOM_PADS) if i % 5 == 4 else p.pad == 0, (i, p)
    assert {p.pad for p in got[4::5]} == set(suites.RANDOM_PADS)  # odd and aligned pads
    batched = [p for p in got if p.batch > 1]
    assert len(batched) == 50
    assert {p.K % 4 == 0 and p.N % 4 == 0 for p in batched} == {True, False}
    excluded = suites.random_mix(300, 11, exclude=got[:5])
    assert not set(got[:5]) & set(excluded)
    assert suites.random_suite_name(300, 11, mix=True) == "random-mix-300-s11"
    assert suites.is_random_suite("random-mix-300-s11")
    with pytest.raises(ValueError, match="count"):
        suites.random_mix(-1, 1)


def test_random_shapes_refuse_a_bad_count():
    assert suites.random_shapes(0, 1) == []
    with pytest.raises(ValueError, match="count"):
        suites.random_shapes(-1, 1)


def test_the_random_suite_name():
    name = suites.random_suite_name(200, 2026)
    assert name == "random-200-s2026" and suites.is_random_suite(name)
    assert not any(suites.is_random_suite(n) for n in suites.SUITES)


def test_the_dispatch_grid_is_the_tables_shapes(monkeypatch):
    from sgemmlab import dispatch

    table = dispatch.Table({"gpu": "G", "entries": [
        {"M": 64, "N": 64, "K": 64}, {"M": 64, "N": 64, "K": 64, "layout": "TN"},
        {"M": 64, "N": 64, "K": 64, "batch": 4}]}, "test")
    monkeypatch.setattr(dispatch, "load_table", lambda gpu: table if gpu == "G" else None)
    assert suites.dispatch_grid("G") == {Problem(64, 64, 64), Problem(64, 64, 64, layout="TN"),
                                         Problem(64, 64, 64, 4)}
    assert suites.dispatch_grid("other") == set()


@pytest.mark.parametrize("text, shape", [
    ("4096,4096,4096", (4096, 4096, 4096)),
    ("3001x2000x999", (3001, 2000, 999)),
    ("4097 × 1023 × 515", (4097, 1023, 515)),
    (" 64, 64 ,64 ", (64, 64, 64)),
])
def test_parse_shape_accepts(text, shape):
    assert parse_shape(text) == shape


@pytest.mark.parametrize("text", ["4096,4096", "1,2,3,4", "0,8,8", "-1,8,8", "a,b,c",
                                  "8.5,8,8", ""])
def test_parse_shape_refuses(text):
    with pytest.raises(typer.BadParameter):
        parse_shape(text)


def test_best_is_the_highest_numbered_rung_and_the_default():
    top = max(r.number for r in registry.RUNGS)
    assert suites.best_rung().number == top
    assert [r.number for r in suites.rungs_for([])] == [top]
    assert [r.number for r in suites.rungs_for(["best"])] == [top]


def test_kernel_selection_all_names_and_duplicates():
    assert [r.number for r in suites.rungs_for(["all"])] == [r.number for r in registry.RUNGS]
    picked = suites.rungs_for(["3", "smem", "03_smem", "best", "1"])
    assert [r.number for r in picked] == [3, suites.best_rung().number, 1]


def test_unknown_kernel_is_a_key_error_saying_where_the_rungs_are_listed():
    with pytest.raises(KeyError) as err:
        suites.rungs_for(["99"])
    assert "99" in err.value.args[0] and "sgemmlab info" in err.value.args[0]


def test_baselines():
    assert suites.baselines_for([]) == ["triton", "tf32"]
    assert suites.baselines_for(["tf32", "tf32"]) == ["tf32"]
    assert suites.baselines_for(["none"]) == []
    with pytest.raises(ValueError, match="combined"):
        suites.baselines_for(["none", "triton"])
    with pytest.raises(ValueError, match="cutlass"):
        suites.baselines_for(["cutlass"])
