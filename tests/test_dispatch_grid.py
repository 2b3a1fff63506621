"""Dispatch between measured shapes (dispatch/lookup.blend), the shape grid (tune/grid.py) and
leave-one-out validation (tune/validate.py), on synthetic tables (no GPU).

A blend must: return a measured shape's own winner there; between shapes prefer the candidate
good across the neighbours over one that wins only at the nearest by a hair and loses badly
elsewhere; ignore a candidate measured too thinly around the request; let a memory-bound
rung be chosen by measurement only where it was measured. Validation must report a loss of 1
where one candidate wins everywhere, and the real loss where it does not.
"""

from __future__ import annotations

import itertools
import math
import random

import pytest

from sgemmlab import dispatch, registry
from sgemmlab.dispatch import Request
from sgemmlab.dispatch.lookup import MAX_DISTANCE, blend, distance
from sgemmlab.tune import grid, validate

GPU, SMS = "NVIDIA H200", 132
R13, R14, R15, R18 = (registry.rung(n) for n in (13, 14, 15, 18))
X = (R14, {**R14.seed, "SPLIT": 0, "FIXUP": 2})
Y = (R14, {**R14.seed, "SPLIT": 4, "FIXUP": 2})
Z = (R13, dict(R13.seed))


@pytest.fixture(autouse=True)
def isolated(isolated_dispatch):
    """conftest.isolated_dispatch: no tables but the tests' own, seeds as defaults."""


def entry(M, N, K, cand, vs, layout="NN", batch=1):
    rung, cfg = cand
    return {"M": M, "N": N, "K": K, "layout": layout, "batch": batch, "rung": rung.label,
            "config": dict(cfg), "median_us": 10.0, "vs_cublas": vs}


def table(entries):
    data = dispatch.new_table(GPU, "9.0", SMS, entries, sources=["results/x.json"])
    dispatch.write_table(data, dispatch.package_table_path(GPU))
    dispatch.clear_cache()
    return dispatch.load_table(GPU)


def req(M, N, K, **kw):
    return Request(M, N, K, GPU, SMS, **kw)


def test_a_measured_shape_takes_its_own_winner():
    t = table([entry(1024, 1024, 1024, X, 0.9), entry(1024, 1024, 1024, Y, 1.1)])
    hit = blend(t, req(1024, 1024, 1024))
    assert hit.distance == 0 and hit.shapes == 1 and hit.entry["config"]["SPLIT"] == 4


def test_between_shapes_the_candidate_good_all_around_wins():
    # Y wins at the nearest shape by 1 %, but loses by half at the three others; X is
    # good at all four
    shapes = [(1024, 1024, 1024), (4096, 1024, 1024), (1024, 4096, 1024), (1024, 1024, 4096)]
    entries = []
    for i, s in enumerate(shapes):
        entries += [entry(*s, X, 1.00), entry(*s, Y, 1.01 if i == 0 else 0.5)]
    t = table(entries)
    hit = blend(t, req(1300, 1300, 1300))  # nearest: 1024^3
    assert hit.shapes == 4 and hit.entry["config"]["SPLIT"] == 0
    assert hit.score == pytest.approx(1.0)
    assert hit.runner_up is not None and hit.runner_up[1] < 1.0
    c = dispatch.choose(1300, 1300, 1300, gpu_name=GPU, sm_count=SMS)
    assert c.source == "table" and "best over the 4 measured shapes" in c.reason, c.reason


def test_a_candidate_measured_thinly_around_the_request_is_not_scored():
    # Z measured only at the farthest of five shapes, where it is excellent
    near = [(1024, 1024, 1024), (2048, 1024, 1024), (1024, 2048, 1024), (1024, 1024, 2048)]
    entries = [entry(*s, X, 0.9) for s in near]
    entries += [entry(8192, 8192, 1024, X, 0.9), entry(8192, 8192, 1024, Z, 2.0)]
    t = table(entries)
    hit = blend(t, req(1100, 1100, 1100))
    assert hit.entry["rung"] == R14.label


def test_a_memory_bound_rung_is_chosen_by_the_table_only_where_it_was_measured():
    r15 = (R15, R15.seed)
    r18 = (R18, {**R18.seed, "SPLIT": 0})
    t_without = [entry(M, 4096, 4096, r18, 1.5) for M in (4, 16)]
    table(t_without)
    c = dispatch.choose(8, 4096, 4096, gpu_name=GPU, sm_count=SMS)
    assert c.rung == R15.label and c.source == "heuristic", c.reason
    assert "was not measured around it" in c.reason
    table(t_without + [entry(M, 4096, 4096, r15, 1.2) for M in (4, 16)])
    c = dispatch.choose(8, 4096, 4096, gpu_name=GPU, sm_count=SMS)
    assert c.rung == R18.label and c.source == "table", c.reason  # measured: 1.5 > 1.2


def test_leave_one_out_reports_no_loss_where_one_candidate_wins_everywhere():
    shapes = list(itertools.product((64, 256, 1024), repeat=3))
    t = table([e for s in shapes for e in (entry(*s, X, 1.0), entry(*s, Y, 0.8))])
    misses = validate.leave_one_out(t)
    assert len(misses) == len(shapes)
    s = validate.summary(misses)
    assert s["median_loss"] == 1.0 and s["worst_loss"] == 1.0 and s["within_97"] == 1.0


def test_leave_one_out_reports_the_real_loss():
    # Y wins only at the big corner, so that shape left out is predicted X: loss 0.8
    shapes = list(itertools.product((64, 256, 1024), repeat=3))
    entries = []
    for s in shapes:
        big = s == (1024, 1024, 1024)
        entries += [entry(*s, X, 0.8 if big else 1.0), entry(*s, Y, 1.0 if big else 0.7)]
    misses = validate.leave_one_out(table(entries))
    worst = min(misses, key=lambda m: m.loss)
    assert worst.shape[:3] == (1024, 1024, 1024)
    assert worst.loss == pytest.approx(0.8) and worst.chosen.startswith(R14.label)
    s = validate.summary(misses)
    assert s["worst"][0]["M"] == 1024 and s["worst_loss"] == pytest.approx(0.8)
    assert s["within_90"] == pytest.approx((len(shapes) - 1) / len(shapes))


def test_the_grid_covers_the_space_within_the_trusted_distance():
    shapes = grid.grid_shapes()
    assert len(shapes) == len(set(shapes))
    assert all(M * N * K <= grid.MAX_PRODUCT for M, N, K in shapes)
    assert (16384, 16384, 251) in shapes and (16384, 16384, 1024) not in shapes
    odd = [s for s in grid.SIDES if s % 4]
    assert odd and len(odd) < len(grid.SIDES)  # both alignment classes
    rng = random.Random(7)
    for _ in range(2000):
        M, N, K = (round(math.exp(rng.uniform(0, math.log(16384)))) for _ in range(3))
        d = min(distance(req(M, N, K), {"M": a, "N": b, "K": c, "aligned": (N % 4 == 0 and
                                                                           K % 4 == 0)})
                for a, b, c in grid.grid_shapes(limit=2**42))
        assert d <= MAX_DISTANCE + 0.25, (M, N, K, d)  # + the alignment penalty at most


def test_the_grid_candidates_are_legal_and_measured_where_they_matter():
    cands = grid.grid_candidates(GPU)
    assert len({(r.label, registry.config_key(c)) for r, c in cands}) == len(cands)
    labels = {r.label for r, _ in cands}
    assert {"13_hoisted", "14_streamk", "15_skinny_m", "16_skinny_n", "17_tiny_k",
            "18_small_tiles"} <= labels
    r18 = next(c for r, c in cands if r is R18)
    assert grid.useful(R18, r18, 127, 129, 131) and not grid.useful(R18, r18, 4096, 4096, 64)
    r15 = next(c for r, c in cands if r is R15)
    assert grid.useful(R15, r15, 4, 4096, 4096) and not grid.useful(R15, r15, 64, 64, 64)
    split8 = next(c for r, c in cands if r is R14 and c["SPLIT"] == 8)
    assert not grid.useful(R14, split8, 1024, 1024, 64)  # 4 k-tiles: parts of < 2


def test_the_table_is_indexed_once_and_its_distances_are_the_documented_ones(monkeypatch):
    from sgemmlab.dispatch import lookup

    shapes = list(itertools.product((1, 64, 4093), repeat=3))
    entries = [entry(*s, X, 1.0, layout=lay) for s in shapes for lay in ("NN", "TN")]
    t = table(entries)
    built = []
    real = lookup._Index.__init__
    monkeypatch.setattr(lookup._Index, "__init__",
                        lambda self, tb: (built.append(1), real(self, tb))[1])
    for s in [(100, 200, 300), (5, 6, 7), (4000, 1, 64)]:
        dispatch.choose(*s, gpu_name=GPU, sm_count=SMS)
    assert len(built) == 1, "one index per loaded table, not one per request"
    idx = lookup._index(t)
    rng = random.Random(3)
    for _ in range(50):
        r = req(rng.randint(1, 9000), rng.randint(1, 9000), rng.randint(1, 9000),
                trans_a=rng.random() < 0.5, batch=rng.choice((1, 4)),
                aligned=rng.random() < 0.5)
        got = idx.distances(r)
        want = [distance(r, idx.entries(i)[0]) for i in range(len(idx.keys))]
        assert got == pytest.approx(want)
    dispatch.clear_cache()
    table(entries)
    dispatch.choose(100, 200, 300, gpu_name=GPU, sm_count=SMS)
    assert len(built) == 2, "a new table is indexed again"


def test_the_layer_shapes_are_the_products_a_linear_layer_sends():
    """x @ W^T (NT) for the forward; G @ W (NN) and (G^T @ x)^T (TN: N x K of inner M)
    for the backward, each once and within the grid's budget; other layouts are refused."""
    fwd, dx, dw = (grid.layer_shapes(lay) for lay in ("NT", "NN", "TN"))
    N, K = grid.LAYER_WEIGHTS[1]  # 11008 x 4096
    assert (1, N, K) in fwd and (512, N, K) in fwd
    assert (2048, K, N) in dx and (N, K, 2048) in dw
    assert (8192, 4096, 14336) not in dx  # beyond MAX_PRODUCT
    for shapes in (fwd, dx, dw):
        assert len(shapes) == len(set(shapes))
        assert all(M * n * k <= grid.MAX_PRODUCT for M, n, k in shapes)
    with pytest.raises(ValueError, match="NT, NN and TN"):
        grid.layer_shapes("TT")
    # prefill and training: every layout at TRAIN_ROWS, the forward included
    train = grid.layer_shapes("NT", grid.TRAIN_ROWS)
    assert (2048, N, K) in train and (1, N, K) not in train
    assert grid.layer_shapes("NN", grid.TRAIN_ROWS) == dx


def test_the_large_candidates_are_tried_only_where_their_tiles_fill_the_gpu():
    large = grid.large_candidates(GPU)
    assert {r.number for r, _ in large} == {24, 25}
    assert {c["REG_TRANSPOSE"] for _, c in large} == {0, 1}
    assert all(r.is_legal(c) for r, c in large)
    cands = grid.layer_candidates(GPU)
    assert all(c in cands for c in large) and len(cands) == len(
        {(r.label, registry.config_key(c)) for r, c in cands})
    r, cfg = large[0]
    assert grid.layer_useful(r, cfg, 2048, 4096, 4096)
    assert not grid.layer_useful(r, cfg, 16, 4096, 4096)  # below LARGE_C outputs
    # with two k-major operands (NT), each alone through registers as well
    nt = grid.large_candidates(GPU, "NT")
    assert {c["REG_TRANSPOSE"] for _, c in nt} == {0, 1, 2, 3}
    assert all(c in nt for c in large) and all(r.is_legal(c) for r, c in nt)
    assert all(c in grid.layer_candidates(GPU, "NT") for c in nt)


def test_the_layers_candidates_try_rung_15_only_at_the_rows_a_call_rounds_up_to():
    r15 = registry.rung(15)
    cands = [cfg for r, cfg in grid.layer_candidates(GPU) if r is r15]
    assert {c["RM"] for c in cands} == {1, 2, 4, 8, 16}
    worth = {c["RM"] for c in cands if grid.layer_useful(r15, c, 3, 4096, 4096)}
    assert worth == {4, r15.default(None)["RM"]}
