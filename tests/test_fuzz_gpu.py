"""The fuzz campaign on the GPU (skipped without one): a short campaign finds no wrong
product, and every minimal failure a campaign kept (tests/data/fuzz_regressions.json)
passes now. `sgemmlab fuzz --count 10000` is the full run; its results file is committed."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import fields
from pathlib import Path

import pytest

pytest.importorskip("hypothesis")

from sgemmlab.bench import fuzz  # noqa: E402

pytestmark = pytest.mark.gpu
KEPT = Path(__file__).parent / "data" / "fuzz_regressions.json"


def test_a_short_campaign_finds_no_wrong_product():
    records, failure = fuzz.campaign(150, seed=11)
    assert failure is None, failure
    s = fuzz.summary(records, failure)
    assert s["checked"] >= 100 and s["failed"] == 0


def _kept():
    return json.loads(KEPT.read_text()) if KEPT.is_file() else []


def _case(rec: dict) -> fuzz.Case:
    """A kept record as a Case (fields added since it was kept take their defaults)."""
    return fuzz.Case(**{f.name: tuple(rec[f.name]) if f.name == "pad" else rec[f.name]
                        for f in fields(fuzz.Case) if f.name in rec})


@pytest.mark.parametrize("rec", _kept() or [None], ids=lambda r: "none-kept" if r is None
                         else _case(r).label())
def test_every_kept_failure_passes_now(rec):
    if rec is None:
        pytest.skip("no failure kept yet")
    case = _case(rec)
    out = fuzz.check(case, rec["seed"])
    assert out["status"] != "failed", out
    # and with deterministic=True, through dispatch (a pinned atomic configuration would be
    # refused), judged by the strict subnormal floor: docs/api.md's promise for subnormals
    strict = fuzz.check(dataclasses.replace(case, deterministic=True, kernel=None), rec["seed"])
    assert strict["status"] == "ok" and not strict["flushed_subnormals"], strict


HANDED = [
    dict(view="neg_a"), dict(view="neg_b", layout="TT", pad=(1, 3, 0)),
    dict(view="neg_ab", batch=3, broadcast="b"), dict(view="conj_a", K=1),
    dict(view="conj_a", M=1, layout="NT"), dict(producer="cupy"),
    dict(producer="cupy", layout="TN", offset=1, view="neg_a", batch=2),
    dict(producer="jax"), dict(producer="jax", view="neg_b", batch=2, broadcast="a"),
    dict(producer="jax", offset=1, layout="TN"),  # XLA wants aligned buffers: copies
    dict(alpha=0.0, inject="nan_a", beta=2.0), dict(alpha=0.0, inject="inf_b", beta=0.0),
    dict(alpha=0.0, inject="ninf_a", beta=-1.0, kernel="14_streamk"),
    dict(inject="spike_a", precision="fp32_emulated", kernel="26_ozaki_int8", K=300, beta=0.5),
    dict(inject="spike_b", precision="fp32_emulated", kernel="26_ozaki_int8", K=300,
         layout="TT"),
    dict(inject="spike_a", precision="fp32_emulated", K=300, batch=2, broadcast="b"),
    *[dict(scalar=s, alpha=a, beta=b) for s in fuzz.SCALARS for a, b in
      ((3.0, -1.0), (-2.5, 0.25), (1e-40, 1.0))],
]


def _handed(kw: dict) -> fuzz.Case:
    return fuzz.Case(**{"M": 37, "N": 29, "K": 41, **kw})


@pytest.mark.parametrize("kw", HANDED, ids=lambda kw: _handed(kw).label())
def test_the_ways_operands_are_handed_over(kw):
    """Every way the campaign hands operands and scalars over, at least once, checked
    against float64: negative and conjugate views, CuPy and JAX producers with work in
    flight, alpha = 0 beside NaN and Inf, every accepted scalar type, and a spike that
    rung 26 refuses (its row's outputs from the FP64 fallback)."""
    if kw.get("producer") in ("cupy", "jax"):
        pytest.importorskip(kw["producer"])
    case = _handed(kw)
    rec = fuzz.check(case, 5)
    refused = case.view == "conj_a" and min(case.M, case.K) > 1  # strides (2K, 2)
    assert rec["status"] == ("refused" if refused else "ok"), rec


def test_a_negative_view_as_the_output_is_refused():
    rec = fuzz.check(fuzz.Case(8, 8, 8, view="neg_c"), 1)
    assert rec["status"] == "refused" and "negative bit" in rec["why"], rec


SWITCHED = [  # (M, N, K, more): ragged, 1 and primes, batches with a broadcast operand
    (1, 1, 1, {}), (1, 4096, 4096, dict(layout="NT")), (37, 29, 41, dict(layout="TT")),
    (61, 1, 97, dict(pad=(3, 1, 5), offset=1)), (128, 3072, 768, dict(layout="NT")),
    (13, 17, 19, dict(batch=3, broadcast="b", layout="NT")),
    (13, 17, 19, dict(batch=8, broadcast="a", beta=-1.0)),
    (31, 33, 65, dict(view="neg_ab", beta=0.25)), (5, 7, 3, dict(inject="nan_c", beta=1.0)),
    (64, 64, 64, dict(precision="tf32x3", beta=1.0)), (97, 65, 33, dict(deterministic=True)),
]


@pytest.mark.parametrize("entry", ["switch", "switch_bias"])
@pytest.mark.parametrize("shape", SWITCHED, ids=lambda s: f"{s[0]}x{s[1]}x{s[2]}{s[3]}")
def test_torch_ops_under_the_switch_are_checked_like_sgemm(entry, shape):
    """The campaign's switch entries: torch.addmm / baddbmm under torch_mode, called twice
    (the second on a plan made before and a launch repointed at new operands), judged
    against float64 like an sgemm call."""
    M, N, K, more = shape
    case = fuzz.Case(M, N, K, **{"alpha": -2.5, "beta": 0.5, **more, "entry": entry})
    rec = fuzz.check(case, 11)
    assert rec["status"] == "ok", rec
