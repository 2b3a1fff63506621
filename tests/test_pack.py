"""The packed plans (CPU): x @ W^T at many rows reads a row-major copy of W^T made in the
workspace first (plan.packs_b), and an FFMA-bound product whose operands close the float4
paths reads aligned, padded copies of them (plan.stages), writing a misaligned C element by
element (the "store4" feature). Which calls pack, the product they plan instead, and the
launches a call makes (runtime/launch.PackFirst): the copies into the workspace after the
region the product's own launch uses (or into a captured graph's own buffer), then the
product reading the copies. The GPU side (values against float64): tests/test_pack_gpu.py."""

from __future__ import annotations

import ctypes
import dataclasses
import json
import types

import numpy as np
import pytest
from typer.testing import CliRunner

from sgemmlab import plan as plan_mod
from sgemmlab.cli import app
from sgemmlab.runtime import driver as driver_mod
from sgemmlab.runtime import launch as launch_mod
from sgemmlab.runtime import workspace as ws

PACK_KERNEL, PRODUCT_KERNEL = 0x11, 0x10


def _gemm(M=4096, N=3072, K=1024, ta=False, tb=True, batch=1, ldb=None, ldc=None):
    lda = M if ta else K
    ldb = ldb or (K if tb else N)
    return plan_mod.Gemm(M, N, K, batch, ta, tb, lda, ldb, ldc or N, 0, 0, 0, False, (M, N))


@pytest.mark.parametrize("change, packs", [
    ({}, True),
    ({"M": 4096, "N": 512}, True),
    ({"M": 4095}, False),  # fewer rows than PACK_MIN_M: the copy would cost more
    ({"M": 8192, "N": 252}, False),  # fewer outputs than PACK_MIN_OUTPUTS
    ({"K": 4}, False),  # K under PACK_MIN_K: C's bytes bound it, the copy adds a launch
    ({"K": 256}, True),
    ({"tb": False}, False),  # B already row-major
    ({"ta": True}, False),
    ({"batch": 2}, False),
    ({"K": 1022, "ldb": 1024}, False),  # rows of A not whole float4 chunks
    ({"N": 3071}, False),  # C's rows not a multiple of 4 floats apart
])
def test_only_x_at_w_transposed_at_many_rows_packs_b(change, packs):
    g = _gemm(**change)
    got = plan_mod.packed_b(g, True, "ieee")
    assert (got is not None) == packs
    if packs:  # the same product on a row-major B whose rows are a multiple of 4 apart
        assert (got.trans_b, got.ldb, got.M, got.N, got.K) == (False, -(-g.N // 4) * 4, g.M,
                                                                g.N, g.K)


def test_packing_needs_exact_fp32_aligned_pointers_and_can_be_turned_off(monkeypatch):
    g = _gemm()
    assert plan_mod.packed_b(g, False, "ieee") is None
    assert plan_mod.packed_b(g, True, "tf32x3") is None
    monkeypatch.setattr(plan_mod, "PACK_B", False)
    assert plan_mod.packed_b(g, True, "ieee") is None


def test_a_packed_plan_plans_the_product_on_the_copy(monkeypatch):
    monkeypatch.setattr(plan_mod, "gpu_info", lambda dev: types.SimpleNamespace(
        name="NVIDIA H200", sm_count=132, arch="sm_90"))
    # a ragged N (C's rows padded to float4): the copy's rows are 3072 floats apart
    g = _gemm(N=3071, ldb=1024, ldc=3072)
    p = plan_mod.make_plan(g, 0, None, None, False, True)
    assert p.staging.copies == (launch_mod.Copy(1, 1024, 3071, 1, 1024, 3072),)
    assert p.staging.store4
    assert not p.gemm.trans_b and p.gemm.ldb == 3072 and p.rung.supports("layouts")
    named = plan_mod.make_plan(g, 0, 24, None, False, True)  # a named rung reads B as is
    assert named.staging is None and named.gemm.trans_b


def _recorder(monkeypatch):
    """cuLaunchKernel through runtime/driver.py, recording (kernel, arguments as 64-bit cells)."""
    seen = []

    def call(*a):
        n = 8 if a[0] == PACK_KERNEL else 13
        ptrs = (ctypes.c_void_p * n).from_address(a[9])
        seen.append((a[0], tuple(ctypes.c_uint64.from_address(ptrs[i]).value
                                 for i in range(n))))
        return 0

    monkeypatch.setattr(driver_mod, "launch_kernel", lambda: call)
    monkeypatch.setattr(launch_mod, "load_kernel", lambda *a, **k: (
        types.SimpleNamespace(handle=PACK_KERNEL), None))
    monkeypatch.setattr(launch_mod, "_PACK_KERNELS", {})
    return seen


def _product(p):
    head = [np.int32(8), np.int32(8), np.int32(8), np.float32(1), 0x100, np.int32(8), 0x200,
            np.int32(8), np.float32(0), 0x300, np.int32(8)]
    return launch_mod.one_launch(0, types.SimpleNamespace(handle=PRODUCT_KERNEL),
                                      types.SimpleNamespace(handle=0x20), (1, 1, 1),
                                      (32, 1, 1), head, p,
                                      [(launch_mod.SCRATCH, 0), (launch_mod.ZEROED, 0)])


def test_each_call_copies_b_past_the_products_workspace_then_runs_on_the_copy(monkeypatch):
    seen = _recorder(monkeypatch)
    asked = []

    def workspace(dev, stream, zeroed, scratch):
        asked.append((zeroed, scratch))
        return 0xA000, 0xB000

    monkeypatch.setattr(ws, "workspace", workspace)
    monkeypatch.setattr(ws, "capture_probe", lambda stream: None)
    inner = _product(types.SimpleNamespace(zeroed_bytes=512, scratch_bytes=300))
    first = launch_mod.PackFirst(inner, 0, types.SimpleNamespace(handle=0x20),
                                 (launch_mod.Copy(1, 1024, 3071, 1, 1024, 3072),))
    assert first.pointer_slots == launch_mod.POINTERS
    first.repointed(0x400, 0x500, 0x600)()
    dst = 0xB000 + 512  # the product's 300 bytes of scratch, rounded up to ws.ALIGN
    assert asked[1:] == [(512, 512 + 4 * 3072 * 1024)]  # [0]: the product's own, when bound
    (k1, pack), (k2, product) = seen
    assert (k1, k2) == (PACK_KERNEL, PRODUCT_KERNEL)
    # dst, ldd, B, rows, cols, steps, the padded columns
    assert pack == (dst, 3072, 0x500, 1024, 3071, 1, 1024, 3072)
    assert (product[4], product[6], product[9]) == (0x400, dst, 0x600)
    assert product[11:] == (0xB000, 0xA000)  # the product's own workspace, unmoved


def test_both_operands_are_copied_one_after_the_other_then_the_product(monkeypatch):
    seen = _recorder(monkeypatch)
    monkeypatch.setattr(ws, "workspace", lambda dev, stream, z, s: (0xA000, 0xB000))
    monkeypatch.setattr(ws, "capture_probe", lambda stream: None)
    inner = _product(types.SimpleNamespace(zeroed_bytes=0, scratch_bytes=0))
    copies = (launch_mod.Copy(0, 37, 101, 1, 40, 104),  # A column-major: transposed
              launch_mod.Copy(1, 101, 33, 35, 1, 36))  # B row-major, rows 35 apart
    launch_mod.PackFirst(inner, 0, types.SimpleNamespace(handle=0x20),
                         copies).repointed(0x400, 0x500, 0x600)()
    (_, a), (_, b), (k, product) = seen
    a_bytes = -(-4 * 37 * 104 // ws.ALIGN) * ws.ALIGN
    assert a == (0xB000, 104, 0x400, 37, 101, 1, 40, 104)
    assert b == (0xB000 + a_bytes, 36, 0x500, 101, 33, 35, 1, 36)
    assert k == PRODUCT_KERNEL and (product[4], product[6], product[9]) == (
        0xB000, 0xB000 + a_bytes, 0x600)


def test_a_captured_call_copies_into_a_buffer_of_the_graphs_own(monkeypatch):
    seen = _recorder(monkeypatch)
    monkeypatch.setattr(ws, "workspace", lambda dev, stream, z, s: (0xA000, 0xB000))
    monkeypatch.setattr(ws, "capture_probe", lambda stream: lambda: True)
    bufs = iter([(0xC000, 0xD000, None), (0xE000, 0xF000, None)])
    monkeypatch.setattr(ws, "for_capture", lambda dev, stream, z, s: next(bufs))
    inner = _product(types.SimpleNamespace(zeroed_bytes=256, scratch_bytes=256))
    first = launch_mod.PackFirst(inner, 0, types.SimpleNamespace(handle=0x20),
                                 (launch_mod.Copy(1, 64, 64, 1, 64, 64),))
    first.repointed(0x400, 0x500, 0x600)()
    (_, pack), (_, product) = seen
    assert pack[0] == 0xD000 and product[6] == 0xD000  # the copy's own captured buffer
    assert product[11:] == (0xF000, 0xE000)  # and the product's, another one


def test_explain_says_when_b_is_packed():
    run = CliRunner().invoke
    out = run(app, ["explain", "8192", "3072", "1024", "--tb", "--gpu", "h200", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["packs_b"] is True
    assert json.loads(out.output)["layout"] == "NT"
    out = run(app, ["explain", "2048", "3072", "1024", "--tb", "--gpu", "h200", "--json"])
    assert json.loads(out.output)["packs_b"] is False
    # C's rows 3071 floats apart: B is read where it is (float4), C element by element
    out = run(app, ["explain", "8192", "3071", "1024", "--tb", "--gpu", "h200", "--json"])
    assert json.loads(out.output)["packs_b"] is False
    assert json.loads(out.output)["packs"] == [
        "C written element by element (its rows are not 16-byte aligned)"]
    out = run(app, ["explain", "8192", "3072", "1024", "--tb", "--gpu", "h200"])
    assert "packs:   B (1024x3072) transposed into a row-major copy" in out.output


def _misaligned(M=2470, N=6014, K=1534, ta=False, tb=False, lda=None, ldb=None, ldc=None):
    lda = lda or (M if ta else K)
    ldb = ldb or (K if tb else N)
    return plan_mod.Gemm(M, N, K, 1, ta, tb, lda, ldb, ldc or N, 0, 0, 0, False, (M, N))


@pytest.mark.parametrize("change, copies, store4", [
    ({}, "AB", False),  # K and N not multiples of 4: A, B and C's rows
    ({"N": 6016}, "A", True),  # only K
    ({"K": 1536}, "B", False),  # only N: B's rows, and C's
    ({"K": 1536, "N": 6016, "ldc": 6018}, "", False),  # only C: nothing copied
    ({"K": 1536, "N": 6016, "lda": 1537}, "A", True),  # A's leading dimension
    ({"ta": True, "K": 1536, "N": 6016, "M": 2471}, "A", True),  # A column-major, M odd
    ({"tb": True, "N": 6016}, "AB", True),  # B column-major along an odd K
])
@pytest.mark.parametrize("keep", [True, False])
def test_a_misaligned_ffma_bound_product_copies_what_closes_the_float4_paths(
        change, copies, store4, keep, monkeypatch):
    monkeypatch.setattr(plan_mod, "STAGE_KEEP_A", keep)
    monkeypatch.setattr(plan_mod, "STAGE_KEEP_B", keep)
    g = _misaligned(**change)
    assert not plan_mod.aligned(g, True)
    st = plan_mod.staging(g, True, "ieee")
    assert "".join("AB"[cp.slot] for cp in st.copies) == copies
    assert st.store4 == store4
    gp = st.gemm
    r4 = lambda n: -(-n // 4) * 4  # noqa: E731
    assert plan_mod.aligned(dataclasses.replace(gp, ldc=r4(gp.ldc), M=r4(gp.M), N=r4(gp.N),
                                                K=r4(gp.K)), True)
    for cp in st.copies:
        assert cp.ld % 4 == 0 and cp.ld >= cp.cols and not (cp.column_major and cp.transposes)
        if cp.slot == 0 and g.trans_a and keep:  # A's columns, padded: A stays column-major
            assert (cp.rows, cp.cols, gp.lda, gp.trans_a) == (g.K, g.M, cp.ld, True)
            assert (cp.row_step, cp.col_step, cp.column_major) == (g.lda, 1, True)
        elif cp.slot == 0:
            assert (cp.rows, cp.cols, gp.lda, gp.trans_a) == (g.M, g.K, cp.ld, False)
            assert (cp.row_step, cp.col_step) == ((1, g.lda) if g.trans_a else (g.lda, 1))
        elif g.trans_b and keep:
            assert (cp.rows, cp.cols, gp.ldb, gp.trans_b) == (g.N, g.K, cp.ld, True)
            assert (cp.row_step, cp.col_step, cp.column_major) == (g.ldb, 1, True)
        else:
            assert (cp.rows, cp.cols, gp.ldb, gp.trans_b) == (g.K, g.N, cp.ld, False)
            assert (cp.row_step, cp.col_step) == ((1, g.ldb) if g.trans_b else (g.ldb, 1))
    # misaligned pointers: A and B copied whatever their strides, C element by element
    st = plan_mod.staging(g, False, "ieee")
    assert [cp.slot for cp in st.copies] == [0, 1] and not st.store4


@pytest.mark.parametrize("change", [
    {"M": 16}, {"N": 16},  # not FFMA-bound: the copies would cost more
    {"K": 63},  # under STAGE_MIN_K: C's bytes bound it
    {"M": 300, "N": 300, "K": 1000},  # 1.8e8 FLOP: about 9 µs against two copies' 25
    {"M": 61, "N": 3505, "K": 1753},  # a copy of B (25 MB) for a thin product
])
def test_small_or_memory_bound_products_read_in_place(change):
    assert plan_mod.staging(_misaligned(**change), True, "ieee") is None


@pytest.mark.parametrize("change", [{}, {"ta": True, "M": 16221, "N": 368, "K": 2561},
                                    {"tb": True, "M": 1127, "N": 3886, "K": 1325}])
def test_a_product_packs_where_the_copies_cost_at_most_a_share_of_it(change, monkeypatch):
    """The gate is the predicted cost: copies (STAGE_COPY_US each plus STAGE_COPY_US_PER_MB
    per MB) against STAGE_SHARE of the product at STAGE_RATE: a share just under the
    ratio reads in place, just over it packs."""
    g = _misaligned(**change)
    monkeypatch.setattr(plan_mod, "STAGE_SHARE", 1e30)
    copies = plan_mod.staging(g, True, "ieee").copies
    copy_us = sum(plan_mod.STAGE_COPY_US + plan_mod.STAGE_COPY_US_PER_MB * cp.bytes / 1e6
                  for cp in copies)
    product_us = 2.0 * g.M * g.N * g.K / plan_mod.STAGE_RATE
    for share, packs in ((copy_us / product_us * 0.99, False), (copy_us / product_us * 1.01,
                                                                 True)):
        monkeypatch.setattr(plan_mod, "STAGE_SHARE", share)
        assert (plan_mod.staging(g, True, "ieee") is not None) == packs, share
    monkeypatch.undo()
    assert plan_mod.staging(g, True, "ieee") is not None  # these pay at the shipped share


def test_staging_needs_exact_fp32_one_product_and_can_be_turned_off(monkeypatch):
    g = _misaligned()
    assert plan_mod.staging(g, True, "tf32x3") is None
    assert plan_mod.staging(dataclasses.replace(g, batch=2), True, "ieee") is None
    monkeypatch.setattr(plan_mod, "STAGE", False)
    assert plan_mod.staging(g, True, "ieee") is None


def test_a_staged_plan_runs_on_a_rung_that_writes_c_element_by_element(monkeypatch):
    monkeypatch.setattr(plan_mod, "gpu_info", lambda dev: types.SimpleNamespace(
        name="NVIDIA H200", sm_count=132, arch="sm_90"))
    g = _misaligned()
    p = plan_mod.make_plan(g, 0, None, None, False, True)
    assert p.staging is not None and p.rung.supports("store4") and not p.staging.store4
    assert (p.gemm.lda, p.gemm.ldb, p.gemm.ldc) == (1536, 6016, 6014)
    # a rung without the feature: the plan reads in place
    other = plan_mod.registry.rung(18)
    monkeypatch.setattr(plan_mod, "choose_rung", lambda g, *a: (other, other.seed))
    p = plan_mod.make_plan(g, 0, None, None, False, True)
    assert p.staging is None and p.gemm == g


def test_the_store4_variant_needs_the_feature_and_float4_reads():
    from sgemmlab import registry

    r13, r10 = registry.rung(13), registry.rung(10)
    assert launch_mod.variant_macros(r13, True, store4=False)["SGEMM_STORE4"] == 0
    assert "SGEMM_STORE4" not in launch_mod.variant_macros(r13, True)
    assert "SGEMM_STORE4" not in launch_mod.variant_macros(r13, False, store4=False)
    with pytest.raises(plan_mod.ConfigError, match="writes C by float4"):
        launch_mod.load(r10, r10.default("NVIDIA H200"), True, store4=False)


def test_explain_lists_the_copies_of_a_misaligned_product():
    out = CliRunner().invoke(app, ["explain", "2470", "6014", "1534", "--gpu", "h200",
                                   "--json"])
    assert out.exit_code == 0, out.output
    notes = json.loads(out.output)["packs"]
    assert notes[0].startswith("A (2470x1534) copied") and notes[1].startswith("B (1534x6014)")
    assert "element by element" in notes[2]
    out = CliRunner().invoke(app, ["explain", "300", "301", "299", "--gpu", "h200", "--json"])
    assert json.loads(out.output)["packs"] == []


def test_a_packed_plan_can_be_held_to_one_reg_transpose(monkeypatch):
    monkeypatch.setattr(plan_mod, "gpu_info", lambda dev: types.SimpleNamespace(
        name="NVIDIA H200", sm_count=132, arch="sm_90"))
    r25 = plan_mod.registry.rung(25)
    cfg = {**r25.default("NVIDIA H200"), "REG_TRANSPOSE": 1}
    monkeypatch.setattr(plan_mod, "choose_rung", lambda g, *a: (r25, dict(cfg)))
    g = _misaligned()  # C's rows misaligned: written element by element
    assert plan_mod.make_plan(g, 0, None, None, False, True).config == cfg  # the table's
    monkeypatch.setattr(plan_mod, "STAGE_REG_TRANSPOSE", 0)
    assert plan_mod.make_plan(g, 0, None, None, False, True).config == {
        **cfg, "REG_TRANSPOSE": 0}
    aligned_c = _misaligned(N=6016)  # C aligned: the table's choice stands
    assert plan_mod.make_plan(aligned_c, 0, None, None, False, True).config == cfg
