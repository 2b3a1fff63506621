"""Dispatch's cost model (dispatch/model.py) on the CPU: the shipped fits are the fits of the
shipped table, the terms follow each decomposition, the fit recovers known coefficients and
keeps them non-negative, and a request far from the table gets a tile that fits it."""

from __future__ import annotations

import numpy as np
import pytest

from sgemmlab import dispatch, registry
from sgemmlab.dispatch import model
from sgemmlab.registry import config_key

GPU, SMS = "NVIDIA H200", 132


def test_the_shipped_model_is_the_fit_of_the_shipped_table():
    sms, fitted = model.load_model(GPU)
    assert sms == SMS and len(fitted) >= 15
    table = dispatch.load_table(GPU)
    slots = {(f.rung, config_key(f.config)): f.slots for f in fitted}
    again = model.fit_entries(table.entries,
                              lambda r, cfg: slots[(r.label, config_key(cfg))])
    assert [(f.rung, config_key(f.config)) for f in again] == list(slots)
    for old, new in zip(fitted, again):
        assert new.shapes == old.shapes >= model.MIN_SHAPES
        assert np.allclose(new.coef, old.coef, rtol=1e-6, atol=1e-9), old.rung
        assert min(old.coef) >= 0 and old.error < 0.3  # median error under 35 %
        assert new.span == old.span and new.rate == old.rate and 0 < old.rate <= 1


def test_the_fit_recovers_known_coefficients_and_drops_a_negative_one():
    rng = np.random.default_rng(3)
    rows = np.column_stack([np.ones(300), rng.uniform(1, 100, 300), rng.uniform(0, 5, 300)])
    times = rows @ np.array([10.0, 2.0, 0.0]) * rng.uniform(0.99, 1.01, 300)
    coef = model.fit(rows, times)
    assert coef[0] == pytest.approx(10, rel=0.05) and coef[1] == pytest.approx(2, rel=0.02)
    assert coef[2] >= 0
    worse = model.fit(rows, rows @ np.array([10.0, 2.0, -1.0]) + 20)  # a term that only hurts
    assert min(worse) >= 0


def _terms(rung, change, M, N, K, batch=1, slots=132):
    r = registry.rung(rung)
    cfg = {**r.default(GPU), **change}
    return model.terms(r, cfg, M, N, K, batch, False, False, True, slots)


def test_the_iterations_term_follows_waves_and_splits():
    one = _terms(14, {"SPLIT": 1}, 128 * 132, 256, 800)  # exactly one wave of 128 x 256
    assert one[1] == 100 and one[5] == 0  # 800 / BK 8 k-iterations, no fix-up
    two = _terms(14, {"SPLIT": 1}, 128 * 133, 256, 800)  # one tile more: a second wave
    assert two[1] == 200
    split = _terms(14, {"SPLIT": 4}, 128, 256, 8000)  # one tile, K in four parts
    assert split[1] == 250 and split[5] > 0
    streamed = _terms(14, {"SPLIT": 0}, 128 * 133, 256, 800)  # the last tile streamed
    assert streamed[1] < two[1]
    assert _terms(14, {}, 64, 64, 64, batch=4)[6] == pytest.approx(4 * 4 * 3 * 64 * 64 / 1e6)


def test_a_far_skinny_batch_gets_a_tile_that_fits_it():
    """17 products of 10093 x 4 x 3793 with A column-major: no table shape is near, and the
    rules' default 128 x 256 tile would compute 64 columns for every 4 (it ran at 0.16 of
    cuBLAS in the first mixed run)."""
    c = dispatch.choose(10093, 4, 3793, gpu_name=GPU, sm_count=SMS, trans_a=True, batch=17,
                        aligned=False)
    assert c.source == "model"
    rows, cols = registry.rung(c.rung).tile(dict(c.config))
    assert cols <= 64 and "cost model" in c.reason
    assert [d["predicted_us"] for d in c.details["model"]] == sorted(
        d["predicted_us"] for d in c.details["model"])


def test_without_a_model_for_the_gpu_the_rules_decide():
    c = dispatch.choose(10093, 4, 3793, gpu_name=GPU, sm_count=114, trans_a=True, batch=17,
                        aligned=False)
    assert c.source == "heuristic"


def test_the_model_transfer_moves_the_blend_off_a_tile_that_leaves_sms_idle():
    """6155 x 292 x 968: the plain blend takes rung 25's 128 x 256 tiles, which won at the
    larger neighbours (16384 x 251, 4093 x 1024) but make 98 tiles for 132 SMs here (0.56
    of cuBLAS in a mixed run). Carried through the model, the neighbours' ratios pick a
    decomposition that streams or splits; off (0), the blend is the plain one."""
    from sgemmlab.dispatch import Request, lookup

    table = dispatch.load_table(GPU)
    req = Request(6155, 292, 968, GPU, SMS)
    plain = lookup.blend(table, req)
    assert lookup.blend(table, req, transfer=0.0).entry is plain.entry
    assert plain.entry["rung"] == "25_hoisted_steady"
    moved = lookup.blend(table, req, transfer=0.5).entry
    assert moved is not plain.entry and dict(moved["config"]).get("SPLIT", 1) != 1


def test_a_broken_model_file_is_skipped_with_a_warning(tmp_path, monkeypatch):
    bad = tmp_path / "nvidia-h200.model.json"
    bad.write_text('{"schema": "sgemmlab.model/1", "terms": %s, "sm_count": 132, '
                   '"candidates": [{"rung": "14_streamk"}]}' % list(model.TERMS)
                   .__repr__().replace("'", '"'))
    monkeypatch.setattr(model, "model_path", lambda gpu: bad)
    dispatch.clear_cache()  # forgets the loaded model and the cached choices
    try:
        with pytest.warns(UserWarning, match="not a cost model"):
            assert model.load_model(GPU) is None
        c = dispatch.choose(10093, 4, 3793, gpu_name=GPU, sm_count=SMS, trans_a=True,
                            batch=17, aligned=False)
        assert c.source == "heuristic"
    finally:
        monkeypatch.undo()
        dispatch.clear_cache()
