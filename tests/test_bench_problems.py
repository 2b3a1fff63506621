"""Problems (bench/problems.py): the text form `--shape` takes, what records say of them, and
that records of two batches or layouts of one shape never merge."""

from __future__ import annotations

import pytest

from sgemmlab.bench.problems import Problem, key


@pytest.mark.parametrize("text, want", [
    ("4096x4096x4096", Problem(4096, 4096, 4096)),
    ("4096,4096,4096", Problem(4096, 4096, 4096)),  # the old M,N,K form
    (" 4097 × 1023 × 515 ", Problem(4097, 1023, 515)),
    ("32@128x128x128", Problem(128, 128, 128, batch=32)),
    ("1000x1000x1000:TN", Problem(1000, 1000, 1000, layout="TN")),
    ("1000x1000x1000:tn", Problem(1000, 1000, 1000, layout="TN")),
    ("8 @ 512,512,64 : NT", Problem(512, 512, 64, batch=8, layout="NT")),
    ("1@7x8x9:NN", Problem(7, 8, 9)),  # the defaults, written out
    ("1000x1000x999+3", Problem(1000, 1000, 999, pad=3)),
    ("8@5x6x7:TN+16", Problem(5, 6, 7, 8, "TN", 16)),
    ("1@7x8x9:NN+0", Problem(7, 8, 9)),
])
def test_parse_accepts(text, want):
    assert Problem.parse(text) == want


@pytest.mark.parametrize("text, words", [
    ("", "0 dimensions"),
    ("4096x4096", "2 dimensions"),
    ("32x128x128x128", "a batch goes before an @"),  # which number is the batch? refused
    ("0x8x8", "integers >= 1"),
    ("-1,8,8", "integers >= 1"),
    ("8.5,8,8", "integers >= 1"),
    ("a,b,c", "integers >= 1"),
    ("4096²x1x1", "integers >= 1"),
    ("0@8x8x8", "the batch '0'"),
    ("x@8x8x8", "the batch 'x'"),
    ("@8x8x8", "the batch ''"),
    ("2@3@8x8x8", "more than one '@'"),
    ("8x8x8:XY", "the layout 'XY'"),
    ("8x8x8:", "the layout ''"),
    ("8x8x8:TN:NN", "more than one ':'"),
    ("8x8x8+x", "the pad 'x'"),
    ("8x8x8+-1", "the pad '-1'"),
    ("8x8x8:TN+", "the pad ''"),
])
def test_parse_refuses_naming_the_problem_and_the_form(text, words):
    with pytest.raises(ValueError) as err:
        Problem.parse(text)
    msg = err.value.args[0]
    assert words in msg and repr(text) in msg
    assert "M,N,K" in msg and "BATCH@" in msg and ":LAYOUT" in msg  # the form, always


@pytest.mark.parametrize("p", [Problem(4096, 4096, 4096), Problem(128, 128, 128, 32),
                               Problem(1, 4096, 4096, layout="TT"),
                               Problem(512, 512, 64, 8, "NT"), Problem(9, 10, 11, 2, "TT", 3)])
def test_the_text_form_round_trips(p):
    assert Problem.parse(str(p)) == p
    assert Problem.parse(p.label) == p  # × parses too
    assert "@" not in p.tag or p.batch > 1
    assert ":" not in p.tag  # a file name can hold it


def test_text_label_and_tag():
    p = Problem(128, 64, 32, 8, "TN")
    assert (str(p), p.label, p.tag) == ("8@128x64x32:TN", "8@128×64×32:TN", "8@128x64x32-TN")
    assert Problem(7, 8, 9).label == "7×8×9"  # a plain problem prints as shapes always did


@pytest.mark.parametrize("bad", [dict(M=0), dict(N=-1), dict(K=1.5), dict(batch=0),
                                 dict(batch=True), dict(layout="XX"), dict(layout="tn")])
def test_invalid_problems_are_refused(bad):
    with pytest.raises(ValueError):
        Problem(**{"M": 8, "N": 8, "K": 8, **bad})


def test_properties():
    p = Problem(10, 20, 30, 4, "NT")
    assert p.shape == (10, 20, 30) and (p.trans_a, p.trans_b) == (False, True)
    assert p.flops == 2 * 4 * 10 * 20 * 30
    assert not p.plain and Problem(10, 20, 30).plain


def test_record_fields_name_batch_and_layout_only_when_not_the_default():
    assert Problem(1, 2, 3).fields() == {"M": 1, "N": 2, "K": 3}
    assert Problem(1, 2, 3, 5, "TT").fields() == {"M": 1, "N": 2, "K": 3, "batch": 5,
                                                  "layout": "TT"}


def test_old_records_mean_one_row_major_product():
    old = {"kernel": "cublas", "M": 64, "N": 64, "K": 64}
    assert key(old) == Problem(64, 64, 64)
    assert key({**old, "batch": 3, "layout": "TN"}) == Problem(64, 64, 64, 3, "TN")
    assert Problem.of((64, 64, 64)) == Problem(64, 64, 64)
    p = Problem(1, 2, 3, 4)
    assert Problem.of(p) is p


def test_records_of_two_layouts_or_batches_of_one_shape_never_merge():
    recs = [{"M": 64, "N": 64, "K": 64}, {"M": 64, "N": 64, "K": 64, "layout": "TN"},
            {"M": 64, "N": 64, "K": 64, "batch": 2}, {"M": 64, "N": 64, "K": 64, "batch": 1}]
    assert len({key(r) for r in recs}) == 3


def test_a_plain_problem_unpacks_as_a_shape_and_others_refuse():
    M, N, K = Problem(1, 2, 3)
    assert (M, N, K) == (1, 2, 3)
    for p in (Problem(1, 2, 3, 2), Problem(1, 2, 3, layout="TN")):
        with pytest.raises(TypeError, match="not a plain"):
            M, N, K = p


def test_problems_sort_by_shape_then_batch_then_layout():
    ps = [Problem(2, 1, 1), Problem(1, 1, 1, 2), Problem(1, 1, 1, layout="TN"),
          Problem(1, 1, 1)]
    assert sorted(ps) == [Problem(1, 1, 1), Problem(1, 1, 1, layout="TN"),
                          Problem(1, 1, 1, 2), Problem(2, 1, 1)]


def test_a_padded_problem_says_so_in_its_text_record_and_leading_dimensions():
    p = Problem(100, 200, 300, 8, "TN", 3)
    assert str(p) == "8@100x200x300:TN+3" and p.tag == "8@100x200x300-TN+3"
    assert p.fields() == {"M": 100, "N": 200, "K": 300, "batch": 8, "layout": "TN", "pad": 3}
    assert key(p.fields()) == p != Problem(100, 200, 300, 8, "TN")
    assert p.lds() == (103, 203, 203)  # A column-major: M + 3; B row-major: N + 3; C: N + 3
    assert Problem(4, 5, 6).lds() == (6, 5, 5)
    assert not p.plain and not Problem(4, 5, 6, pad=1).plain
    with pytest.raises(TypeError, match="pad"):
        tuple(Problem(4, 5, 6, pad=1))
    for bad in (-1, 1.0, True, "2"):
        with pytest.raises(ValueError, match="pad"):
            Problem(4, 5, 6, pad=bad)
