"""What `sgemmlab bench` is asked to measure: suites, shapes, kernels, baselines."""

from __future__ import annotations

import pytest
import typer

from sgemmlab import registry
from sgemmlab.bench import suites
from sgemmlab.cli import parse_shape


def test_suites_hold_the_shapes_the_issue_names():
    assert suites.SUITES == {
        "square": [(1024,) * 3, (2048,) * 3, (4096,) * 3, (8192,) * 3],
        "ragged": [(4092,) * 3, (1000,) * 3, (3001, 2000, 999), (4097, 1023, 515)],
        "skinny": [(1024, 1024, 8192), (8192, 8192, 512), (256, 4096, 4096),
                   (4096, 4096, 256)],
        "small": [(64,) * 3, (128,) * 3, (256,) * 3, (512,) * 3],
        # issue 13: vector (1xNxK and Mx1xK at 4096, 8192, 16384), decode (M in 1..64
        # against 4096x4096, 11008x4096 and 4096x11008), and K <= 16
        "vector": [(1, 4096, 4096), (1, 8192, 8192), (1, 16384, 16384), (4096, 1, 4096),
                   (8192, 1, 8192), (16384, 1, 16384)],
        "decode": [(m, n, k) for n, k in ((4096, 4096), (11008, 4096), (4096, 11008))
                   for m in (1, 2, 4, 8, 16, 32, 64)],
        "tinyk": [(4096, 4096, k) for k in (1, 2, 4, 8, 16)],
    }


def test_no_suite_and_no_shape_means_the_square_suite():
    assert suites.shapes_for([], []) == suites.SUITES["square"]


def test_suites_then_shapes_in_order_each_once():
    got = suites.shapes_for(["small", "small"], [(7, 8, 9), (64, 64, 64)])
    assert got == [*suites.SUITES["small"], (7, 8, 9)]


def test_an_explicit_shape_alone_replaces_the_default_suite():
    assert suites.shapes_for([], [(7, 8, 9)]) == [(7, 8, 9)]


def test_unknown_suite_names_the_known_ones():
    with pytest.raises(KeyError) as err:
        suites.shapes_for(["huge"], [])
    assert "huge" in err.value.args[0] and "square" in err.value.args[0]


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


def test_unknown_kernel_is_a_key_error_naming_the_rungs():
    with pytest.raises(KeyError) as err:
        suites.rungs_for(["99"])
    assert "99" in err.value.args[0] and "naive" in err.value.args[0]


def test_baselines():
    assert suites.baselines_for([]) == ["triton", "tf32"]
    assert suites.baselines_for(["tf32", "tf32"]) == ["tf32"]
    assert suites.baselines_for(["none"]) == []
    with pytest.raises(ValueError, match="combined"):
        suites.baselines_for(["none", "triton"])
    with pytest.raises(ValueError, match="cutlass"):
        suites.baselines_for(["cutlass"])
