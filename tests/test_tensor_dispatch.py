"""The tensor-core rungs (19 TF32, 20 3xTF32, 26 Ozaki scheme II) on the host, without a GPU.

(a) runtime/hopper.py's operand plan: which operands reach the kernels as they lie, which
    the pre-pass copies, transposes or splits, and the workspace that takes; the TAIL
    split and its workspace by hand;
(b) dispatch/tensor.py through `dispatch.choose`: precision "tf32x3" runs rung 20, "tf32"
    rung 19 and "fp32_emulated" rung 26 where they serve (rung 26: where its cost model
    predicts it faster than exact FP32), an exact FP32 rung (whose reason names the precision asked)
    where they do not; "ieee" never runs a tensor rung; choices are cached per precision;
(c) the plan refuses a named rung of another precision than the one asked, through
    `plan.named_rung` and through `sgemmlab.matmul` on numpy arrays (the launcher
    replaced by a recorder: nothing runs).
On the GPU: tests/test_tensor_gpu.py.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import sgemmlab
from sgemmlab import api, dispatch, plan, product, registry
from sgemmlab.dispatch import tensor
from sgemmlab.errors import ConfigError
from sgemmlab.runtime import decompose, hopper
from sgemmlab.runtime.arrays import Operand
from sgemmlab.runtime.device import GPUInfo

TF32, TF32X3, OZAKI = registry.rung(19), registry.rung(20), registry.rung(26)
H200 = GPUInfo(index=0, name="NVIDIA H200", compute_capability=(9, 0), sm_count=132,
               l2_bytes=60 * 2**20, max_smem_per_block_optin=227 * 1024)
BASE = 1 << 20  # a 16-byte aligned address


# -- (a) the operand plan --------------------------------------------------------------------
def op_plan(rung, M=300, N=200, K=36, a=BASE, lda=None, b=BASE, ldb=None, trans_a=False,
            trans_b=False):
    """operand_plan with tight leading dimensions unless given (A: K or M, B: N or K)."""
    lda = lda if lda is not None else (M if trans_a else K)
    ldb = ldb if ldb is not None else (K if trans_b else N)
    return hopper.operand_plan(rung, M, N, K, a, lda, b, ldb, trans_a, trans_b)


@pytest.mark.parametrize("rung", [TF32, TF32X3], ids=["r19", "r20"])
def test_a_row_major_aligned_a_is_used_as_it_lies(rung):
    p = op_plan(rung)
    assert not p.copy_a and not p.trans_a and p.a_bytes == 0


@pytest.mark.parametrize("rung", [TF32, TF32X3], ids=["r19", "r20"])
@pytest.mark.parametrize("change, transposed", [
    ({"trans_a": True}, True),  # column-major
    ({"lda": 37}, False),  # rows not 16-byte aligned
    ({"lda": 38}, False),
    ({"a": BASE + 4}, False),  # a misaligned base
    ({"a": BASE + 8}, False),
])
def test_a_column_major_unaligned_or_misaligned_a_is_copied(rung, change, transposed):
    p = op_plan(rung, **change)
    assert p.copy_a and p.trans_a is transposed
    assert p.a_bytes == 4 * 300 * 36  # M x kpad floats
    assert p.notes()[0].startswith("A copied K-major first")
    assert ("transposed" in p.notes()[0]) is transposed


@pytest.mark.parametrize("trans_b, ldb, b", [
    (True, None, BASE),  # column-major, aligned: rung 19 would take it as it lies
    (True, 37, BASE),
    (False, None, BASE),  # row-major: transposed on the way
    (False, 202, BASE + 4),
])
def test_rung_20_always_splits_b_and_transposes_a_row_major_b(trans_b, ldb, b):
    p = op_plan(TF32X3, trans_b=trans_b, ldb=ldb, b=b)
    assert p.split_b and p.copy_b
    assert p.trans_b_read is (not trans_b)
    assert p.b_bytes == 4 * 200 * 36  # each of B_big and B_small: N x kpad floats
    assert any(n.startswith("B split into big and small") for n in p.notes())


def test_rung_19_takes_a_column_major_aligned_b_as_it_lies():
    p = op_plan(TF32, trans_b=True)
    assert not p.copy_b and not p.split_b and not p.trans_b_read and p.b_bytes == 0
    assert p.notes() == []  # nothing to do before the GEMM
    assert op_plan(TF32, trans_b=True, ldb=40).copy_b is False  # padded rows are fine


@pytest.mark.parametrize("change, transposed", [
    ({}, True),  # row-major: B^T is column-major, so transposed
    ({"trans_b": True, "ldb": 37}, False),
    ({"trans_b": True, "ldb": 38}, False),
    ({"trans_b": True, "b": BASE + 4}, False),
])
def test_rung_19_copies_b_otherwise(change, transposed):
    p = op_plan(TF32, **change)
    assert p.copy_b and not p.split_b and p.trans_b_read is transposed
    assert p.b_bytes == 4 * 200 * 36
    assert p.notes()[-1].startswith("B copied K-major first")


@pytest.mark.parametrize("K, kpad", [(1, 4), (3, 4), (4, 4), (5, 8), (36, 36), (37, 40),
                                     (4097, 4100)])
def test_kpad_rounds_k_up_to_4_floats_and_sizes_the_copies(K, kpad):
    p = op_plan(TF32X3, M=130, N=70, K=K, trans_a=True)
    assert p.kpad == kpad
    assert (p.a_bytes, p.b_bytes) == (4 * 130 * kpad, 4 * 70 * kpad)


def test_an_unaligned_k_copies_a_row_major_a_whose_lda_is_k():
    assert op_plan(TF32, K=37).copy_a  # lda = K = 37
    assert not op_plan(TF32, K=37, lda=40).copy_a  # rows padded to 40: as it lies


def test_tail_split_and_workspace_by_hand():
    # 140 tiles on 132 blocks: 8 leftover tiles, 132 // 8 = 16 parts would fit, 8 at most
    assert decompose.tail_splits(140, 132, 128) == 8
    assert decompose.split_workspace(140, 132, 8) == (8 * 8 * 128 * 128, 8 * 2 * 128)
    # 133 tiles: 1 leftover, as many parts as k-tiles when fewer than 8
    assert decompose.tail_splits(133, 132, 5) == 5
    assert decompose.split_workspace(133, 132, 5) == (5 * 128 * 128, 256)
    # 200 tiles: 68 leftover, 132 // 68 = 1 part each: nothing split, nothing needed
    assert decompose.tail_splits(200, 132, 128) == 1
    assert decompose.split_workspace(200, 132, 1) == (0, 0)
    assert decompose.tail_splits(264, 132, 128) == 1  # two whole waves
    assert decompose.split_workspace(264, 132, 1) == (0, 0)
    assert decompose.tail_splits(7, 2, 1) == 1  # a single k-tile cannot be split


# -- (b) dispatch ----------------------------------------------------------------------------
def choose(M, N, K, precision, arch="sm_90", **kw):
    return dispatch.choose(M, N, K, gpu_name=H200.name, sm_count=H200.sm_count,
                           precision=precision, arch=arch, **kw)


def precision_of(choice) -> str:
    return registry.rung(choice.rung).precision


def test_tf32x3_runs_rung_20_on_a_big_product(isolated_dispatch):
    c = choose(4096, 4096, 4096, "tf32x3")
    assert c.rung == TF32X3.label and c.source == "precision"
    assert dict(c.config) == TF32X3.seed  # no tuned defaults in isolated_dispatch
    assert "3xTF32: FP32-accurate" in c.reason
    assert "split along K" in c.decomposition  # the seed's TAIL = 1


@pytest.mark.parametrize("shape, kw, words", [
    ((4096, 4096, tensor.TF32X3_MIN_K - 1), {}, f"K = {tensor.TF32X3_MIN_K - 1} <"),
    ((4096, 4096, 64), {}, "truncating accumulation"),
    ((tensor.SKINNY, 4096, 4096), {}, "a side of at most 16"),
    ((4096, tensor.SKINNY, 4096), {}, "a side of at most 16"),
    ((1, 4096, 4096), {}, "a side of at most 16"),
    ((4096, 4096, 4096), {"arch": "sm_80"}, "this GPU is sm_80"),
    ((4096, 4096, 4096), {"arch": ""}, "architecture is not known"),
    ((128, 128, 512), {"batch": 64}, "a batch of 64 small products"),
])
def test_tf32x3_falls_back_to_exact_fp32_and_says_why(isolated_dispatch, shape, kw, words):
    c = choose(*shape, "tf32x3", **kw)
    assert precision_of(c) == "ieee", c.rung
    assert "precision='tf32x3' asked" in c.reason and words in c.reason, c.reason


@pytest.mark.parametrize("shape, kw", [
    ((4096, 4096, tensor.TF32X3_MIN_K), {}),  # the first K it serves
    ((tensor.SKINNY + 1, tensor.SKINNY + 1, 4096), {}),
    ((4096, 4096, 4096), {"trans_a": True, "trans_b": True}),  # it has "layouts"
    ((4096, 4096, 4096), {"deterministic": True}),  # its TAIL fix-up is in a fixed order
    ((1024, 1024, 1024), {"batch": 4}),  # big products: one launch each costs little
])
def test_tf32x3_serves_the_edges_of_its_domain(isolated_dispatch, shape, kw):
    assert choose(*shape, "tf32x3", **kw).rung == TF32X3.label


def test_the_batch_rule_is_per_product_flops(isolated_dispatch):
    M = N = 512
    K = tensor.BATCH_MIN_FLOP // (2 * M * N)  # exactly BATCH_MIN_FLOP per product
    assert choose(M, N, K, "tf32x3", batch=8).rung == TF32X3.label
    assert precision_of(choose(M, N, K - 1, "tf32x3", batch=8)) == "ieee"
    assert choose(M, N, K - 1, "tf32x3").rung == TF32X3.label  # no batch: no such rule


def test_tf32_runs_rung_19_and_falls_back_at_a_shallow_k(isolated_dispatch):
    c = choose(4096, 4096, 4096, "tf32")
    assert c.rung == TF32.label and "NOT FP32" in c.reason
    assert c.decomposition == "persistent"
    assert choose(4096, 4096, 64, "tf32").rung == TF32.label  # K < TF32X3_MIN_K is fine
    assert choose(4096, 4096, tensor.SKINNY + 1, "tf32").rung == TF32.label
    low = choose(4096, 4096, tensor.SKINNY, "tf32")
    assert precision_of(low) == "ieee"
    assert "precision='tf32' asked" in low.reason and f"K = {tensor.SKINNY} <=" in low.reason
    assert precision_of(choose(4096, 4096, 4096, "tf32", arch="sm_80")) == "ieee"


def test_fp32_emulated_runs_rung_26_on_a_big_product(isolated_dispatch):
    for shape, kw in [((4096, 4096, 4096), {}), ((8192, 8192, 8192), {"trans_b": True}),
                      ((16384, 16384, 16384), {"trans_a": True}),
                      ((4096, 4096, 4096), {"deterministic": True}),  # integer sums: exact
                      ((8192, 8192, 1024), {}),
                      ((4096, 4096, 4096), {"batch": 4}), ((4096, 4096, 4096),
                                                           {"aligned": False})]:
        c = choose(*shape, "fp32_emulated", **kw)
        assert c.rung == OZAKI.label and c.source == "precision", (shape, kw, c.reason)
        assert dict(c.config) == OZAKI.seed
        assert "Ozaki scheme II" in c.reason and "predicted" in c.reason


@pytest.mark.parametrize("shape, kw, words", [
    ((4096, 4096, tensor.EMULATED_MIN_K - 1), {}, f"K = {tensor.EMULATED_MIN_K - 1} <"),
    ((4096, 4096, 16), {}, "more accurate than the scheme"),
    ((512, 512, 2**17), {}, f"K = {2**17}: rung 26_ozaki_int8 computes any M, N and K < 131072"),
    ((tensor.SKINNY, 4096, 4096), {}, "a side of at most 16"),
    ((4096, 4096, 4096), {"arch": "sm_80"}, "this GPU is sm_80"),
    ((512, 512, 512), {}, "the passes cost more"),
    ((1024, 1024, 1024), {}, "the passes cost more"),
    ((256, 256, 65536), {}, "the passes cost more"),  # 2 tiles: a wave of 16 of 132 SMs
    ((512, 512, 2048), {"batch": 64}, "the passes cost more"),
])
def test_fp32_emulated_falls_back_to_exact_fp32_and_says_why(isolated_dispatch, shape, kw,
                                                              words):
    c = choose(*shape, "fp32_emulated", **kw)
    assert precision_of(c) == "ieee", c.rung
    assert "precision='fp32_emulated' asked" in c.reason and words in c.reason, c.reason


def test_the_emulated_cost_model_by_hand():
    """The passes' bytes and the INT8 waves of `emulated_us`, and where the rule turns."""
    M = N = K = 2048
    passes = (8 + 8) * (M + N) * K + 2 * 8 * M * N + 8 * M * N
    waves = -(-(16 * 8 * 8) // 132)  # 1024 (modulus, tile) pairs on 132 SMs
    tile = tensor.EMULATED_WAVE_US + 2 * 128 * 256 * K / tensor.EMULATED_TILE_OPS_PER_US
    want = tensor.EMULATED_PASS_US + passes / tensor.EMULATED_PASS_BYTES_PER_US + waves * tile
    assert tensor.emulated_us(M, N, K, 132) == pytest.approx(want)
    assert tensor.fp32_us(M, N, K) == pytest.approx(36 + 2 * M * N * K / 49e6)
    # more SMs: fewer waves, never slower
    assert tensor.emulated_us(M, N, K, 264) < tensor.emulated_us(M, N, K, 132)
    # the cubes: the scheme from some size on, and from there on at every larger one
    chosen = [n for n in range(256, 16385, 256)
              if tensor.emulated_us(n, n, n, 132) * tensor.EMULATED_MARGIN < tensor.fp32_us(
                  n, n, n)]
    assert chosen and chosen == list(range(chosen[0], 16385, 256)), chosen[:3]


def test_the_emulated_rule_chose_only_winners_in_its_paired_runs():
    """Every committed paired run of the scheme against exact FP32 (tools/emulated_pair.py:
    the shapes the cost model was fitted to, and those it was checked on): wherever dispatch,
    as it is now, would run rung 26, rung 26 ran faster than exact FP32 there; and it does
    run it at 4096^3 and at the models' layers."""
    import json
    from pathlib import Path

    runs = sorted(Path(__file__).resolve().parents[1].glob(
        "results/nvidia-h200/pairs/emulated-*.json"))
    assert len(runs) >= 2, "the fit's run and the check's"
    records = [r for run in runs for r in json.loads(run.read_text())["records"]]
    picked = []
    for r in records:
        M, N, K = r["shape"]
        if choose(M, N, K, "fp32_emulated").rung != OZAKI.label:
            continue
        ms = r["ms"]
        scheme = ms["fp32_emulated"] if r["chosen"] == OZAKI.label else ms["rung26"]
        assert scheme < ms["ieee"], (r["shape"], ms)
        picked.append((M, N, K))
    assert (4096, 4096, 4096) in picked and (4096, 14336, 4096) in picked, picked


@pytest.mark.parametrize("precision", ["fp32_emulated", "tf32x3"])
def test_the_accuracy_sets_served_cases_run_on_the_tensor_cores(isolated_dispatch, precision):
    """bench/accuracy.py's served cases exist so that the harness sees the tensor-core rungs
    through dispatch: they must stay large enough for both FP32-accurate precisions."""
    from sgemmlab.bench import accuracy as acc

    for K in acc.SERVED_K:
        assert precision_of(choose(*acc.SERVED_MN, K, precision)) == precision, K


def test_the_emulated_constants_are_the_schemes():
    from sgemmlab.ozaki import reference
    from sgemmlab.runtime import ozaki

    assert tensor.EMULATED_MIN_K == reference.MIN_K
    assert tensor.EMULATED_COUNT == reference.COUNT
    assert OZAKI.serves(1, 1, ozaki.MAX_K) and not OZAKI.serves(1, 1, ozaki.MAX_K + 1)


SIZES = (1, 16, 17, 128, 1000, 4096)


def test_ieee_never_runs_a_tensor_rung(isolated_dispatch):
    tensor_labels = {r.label for r in registry.TENSOR}
    for M, N, K in itertools.product(SIZES, repeat=3):
        for kw in ({}, {"trans_b": True}, {"batch": 8}):
            c = choose(M, N, K, "ieee", **kw)
            assert c.rung not in tensor_labels and precision_of(c) == "ieee", (M, N, K, kw)
            assert "precision=" not in c.reason


def test_the_fp32_fallback_is_the_ieee_choice_with_a_note(isolated_dispatch):
    fallback = choose(4096, 4096, 64, "tf32x3")
    exact = choose(4096, 4096, 64, "ieee")
    assert (fallback.rung, dict(fallback.config), fallback.decomposition) == (
        exact.rung, dict(exact.config), exact.decomposition)
    assert fallback.reason.endswith(exact.reason) and fallback.reason != exact.reason


@pytest.mark.parametrize("precision", ["fp16", "TF32", "", "3xtf32"])
def test_an_unknown_precision_raises_value_error(isolated_dispatch, precision):
    with pytest.raises(ValueError, match="precision must be one of"):
        choose(4096, 4096, 4096, precision)


def test_choices_are_cached_per_precision(isolated_dispatch):
    fast = choose(4096, 4096, 4096, "tf32x3")
    exact = choose(4096, 4096, 4096, "ieee")
    assert fast.rung == TF32X3.label and precision_of(exact) == "ieee"
    assert choose(4096, 4096, 4096, "tf32x3") is fast  # cached
    assert choose(4096, 4096, 4096, "ieee") is exact
    assert choose(4096, 4096, 4096, "tf32").rung == TF32.label
    # the other order: an ieee choice does not answer a later tensor-core request either
    dispatch.clear_cache()
    assert precision_of(choose(2048, 2048, 2048, "ieee")) == "ieee"
    assert choose(2048, 2048, 2048, "tf32x3").rung == TF32X3.label
    # and a fallback's note stays with the precision that asked
    choose(4096, 4096, 100, "tf32x3")
    assert "precision=" not in choose(4096, 4096, 100, "ieee").reason


def test_the_tensor_rungs_are_the_precisions():
    assert tensor.tensor_rung("tf32") is TF32 and tensor.tensor_rung("tf32x3") is TF32X3
    assert tensor.tensor_rung("fp32_emulated") is OZAKI
    assert {r.precision for r in registry.TENSOR} == set(registry.PRECISIONS) - {"ieee"}
    assert all(r.precision == "ieee" for r in registry.ALL)
    assert tensor.check_precision("ieee") == "ieee"


# -- (c) the plan refuses another precision's rung ---------------------------------------------
def gemm(M=256, N=256, K=256, trans_a=False) -> plan.Gemm:
    return plan.Gemm(M, N, K, 1, trans_a, False, M if trans_a else K, N, N, 0, 0, 0, False,
                     (M, N))


@pytest.fixture
def h200(monkeypatch, isolated_dispatch):
    monkeypatch.setattr(plan, "gpu_info", lambda i=0: H200)


@pytest.mark.parametrize("kernel, precision", [(20, "ieee"), ("3xtf32_wgmma", "ieee"),
                                               (19, "ieee"), (19, "tf32x3"), (20, "tf32"),
                                               (13, "tf32x3"), (10, "tf32")])
def test_named_rung_refuses_another_precision(h200, kernel, precision):
    with pytest.raises(ConfigError, match=r"precision and this call asks for "
                                          rf"'{precision}'.*precision is never switched"):
        plan.named_rung(gemm(), 0, kernel, None, False, precision)


def test_named_rung_takes_a_tensor_rung_in_its_precision(h200):
    rung, cfg = plan.named_rung(gemm(trans_a=True), 0, 20, None, False, "tf32x3")
    assert rung is TF32X3 and cfg == TF32X3.seed  # layouts: a column-major A is fine
    rung, cfg = plan.named_rung(gemm(), 0, None, {"BN": 128, "STAGES": 3, "GROUP_M": 4},
                                False, "tf32")
    assert rung is TF32 and cfg["STAGES"] == 3  # config= alone: the precision's rung


class Recorder:
    """plan.Launcher's place: records what would run, runs nothing."""

    binds: list = []

    def __init__(self, rung, config, device_id=0):
        self.rung, self.config = rung, config

    def bind(self, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc, stream, **kw):
        Recorder.binds.append((self.rung.label, (M, N, K), kw))
        return lambda: None


@pytest.fixture
def host_device(monkeypatch, h200):
    """numpy arrays as device arrays, an H200 as the GPU, the Recorder as the launcher."""

    def as_operand(obj, name, **kw):
        assert isinstance(obj, np.ndarray) and obj.dtype == np.float32, name
        return Operand(obj, obj.ctypes.data, tuple(obj.shape),
                       tuple(s // 4 for s in obj.strides), 0, "other", False)

    Recorder.binds = []
    monkeypatch.setattr(product, "as_operand", as_operand)
    monkeypatch.setattr(product, "make_current", lambda device_id: None)
    monkeypatch.setattr(plan, "Launcher", Recorder)
    monkeypatch.setattr(plan, "stream_for", lambda handle, device_id: handle)
    api.clear_caches()
    yield Recorder.binds
    api.clear_caches()


def operands(M, N, K):
    return (np.ones((M, K), np.float32), np.ones((K, N), np.float32),
            np.zeros((M, N), np.float32))


def test_matmul_refuses_rung_20_unless_tf32x3_is_asked(host_device):
    a, b, out = operands(256, 256, 256)
    with pytest.raises(ConfigError, match="precision"):
        sgemmlab.matmul(a, b, out=out, kernel=20)
    with pytest.raises(ConfigError, match="precision"):
        sgemmlab.matmul(a, b, out=out, kernel=20, precision="tf32")
    assert host_device == []  # refused before anything was bound
    sgemmlab.matmul(a, b, out=out, kernel=20, precision="tf32x3")
    sgemmlab.matmul(a.T.copy().T, b, out=out, kernel=20, precision="tf32x3")  # column-major A
    assert host_device == [(TF32X3.label, (256, 256, 256), {}),
                           (TF32X3.label, (256, 256, 256), {"trans_a": True})]


def test_matmul_refuses_an_fp32_rung_under_a_tensor_precision(host_device):
    a, b, out = operands(64, 64, 64)
    with pytest.raises(ConfigError, match="precision"):
        sgemmlab.matmul(a, b, out=out, kernel=13, precision="tf32x3")
    with pytest.raises(ValueError, match="precision must be one of"):
        sgemmlab.matmul(a, b, out=out, precision="bf16")


def test_matmul_dispatches_by_precision(host_device):
    a, b, out = operands(512, 512, 512)
    sgemmlab.matmul(a, b, out=out, precision="tf32x3")
    sgemmlab.matmul(a, b, out=out, precision="tf32")
    sgemmlab.matmul(a, b, out=out)
    a, b, out = operands(512, 512, 64)  # too short a K for tf32x3
    sgemmlab.matmul(a, b, out=out, precision="tf32x3")
    labels = [label for label, _, _ in host_device]
    assert labels[:2] == [TF32X3.label, TF32.label]
    assert registry.rung(labels[2]).precision == registry.rung(labels[3]).precision == "ieee"


@pytest.mark.parametrize("tiles, ktiles, grid, splits", [
    (1, 2048, 16, 16),     # one tile, a deep K: SPLIT_MAX parts on as many blocks
    (4, 512, 64, 16),
    (64, 256, 128, 2),     # 132 // 64 = 2 parts a tile
    (64, 7, 64, 1),        # too shallow to split: fewer than 2 * PART_MIN_KTILES k-tiles
    (130, 4, 130, 1),
    (1024, 128, 132, 1),   # 1024 % 132 = 100 left over: too many to split
    (4096, 256, 132, 8),   # 4096 % 132 = 4 left over: the tail split
])
def test_split_plan_splits_few_tiles_and_the_last_wave(tiles, ktiles, grid, splits):
    assert decompose.split_plan(tiles, ktiles, 132, True) == (grid, splits)
    assert decompose.split_plan(tiles, ktiles, 132, False) == (min(tiles, 132), 1)
    work, counters = decompose.split_workspace(tiles, grid, splits)
    split_tiles = 0 if splits == 1 else (tiles if grid > tiles else tiles % grid)
    assert work == split_tiles * splits * 128 * 128
    assert counters == split_tiles * 256
