"""The packed plans (CPU): x @ W^T at many rows reads a row-major copy of W^T made in the
workspace first (plan.packs_b, runtime/launch.PackFirst). Which calls pack, the product
they plan instead, and the two launches a call makes: the copy into the workspace after
the region the product's own launch uses (or into a captured graph's own buffer), then the
product reading the copy. The GPU side (values against float64): tests/test_pack_gpu.py."""

from __future__ import annotations

import ctypes
import json
import types

import numpy as np
import pytest
from typer.testing import CliRunner

from sgemmlab import plan as plan_mod
from sgemmlab.cli import app
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
    assert p.pack == (1024, 3071, 1, 1024)
    assert not p.gemm.trans_b and p.gemm.ldb == 3072 and p.rung.supports("layouts")
    named = plan_mod.make_plan(g, 0, 24, None, False, True)  # a named rung reads B as is
    assert named.pack is None and named.gemm.trans_b


def _recorder(monkeypatch):
    """cuLaunchKernel through fastcall, recording (kernel, arguments as 64-bit cells)."""
    seen = []

    def call(*a):
        n = 7 if a[0] == PACK_KERNEL else 13
        ptrs = (ctypes.c_void_p * n).from_address(a[9])
        seen.append((a[0], tuple(ctypes.c_uint64.from_address(ptrs[i]).value
                                 for i in range(n))))
        return 0

    monkeypatch.setattr(launch_mod.fastcall, "launch_kernel", lambda: call)
    monkeypatch.setattr(launch_mod, "load_kernel", lambda *a, **k: (
        types.SimpleNamespace(handle=PACK_KERNEL), None))
    monkeypatch.setattr(launch_mod, "_PACK_KERNELS", {})
    return seen


def _product(p):
    head = [np.int32(8), np.int32(8), np.int32(8), np.float32(1), 0x100, np.int32(8), 0x200,
            np.int32(8), np.float32(0), 0x300, np.int32(8)]
    return launch_mod.WorkspaceLaunch(0, types.SimpleNamespace(handle=PRODUCT_KERNEL),
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
    first = launch_mod.PackFirst(inner, 0, types.SimpleNamespace(handle=0x20), 1024, 3071,
                                 1, 1024, 3072)
    assert first.pointer_slots == launch_mod.POINTERS
    first.repointed(0x400, 0x500, 0x600)()
    dst = 0xB000 + 512  # the product's 300 bytes of scratch, rounded up to ws.ALIGN
    assert asked[1:] == [(512, 512 + 4 * 3072 * 1024)]  # [0]: the product's own, when bound
    (k1, pack), (k2, product) = seen
    assert (k1, k2) == (PACK_KERNEL, PRODUCT_KERNEL)
    assert pack == (dst, 3072, 0x500, 1024, 3071, 1, 1024)  # dst, ldd, B, rows, cols, steps
    assert (product[4], product[6], product[9]) == (0x400, dst, 0x600)
    assert product[11:] == (0xB000, 0xA000)  # the product's own workspace, unmoved


def test_a_captured_call_copies_into_a_buffer_of_the_graphs_own(monkeypatch):
    seen = _recorder(monkeypatch)
    monkeypatch.setattr(ws, "workspace", lambda dev, stream, z, s: (0xA000, 0xB000))
    monkeypatch.setattr(ws, "capture_probe", lambda stream: lambda: True)
    bufs = iter([(0xC000, 0xD000, None), (0xE000, 0xF000, None)])
    monkeypatch.setattr(ws, "for_capture", lambda dev, stream, z, s: next(bufs))
    inner = _product(types.SimpleNamespace(zeroed_bytes=256, scratch_bytes=256))
    first = launch_mod.PackFirst(inner, 0, types.SimpleNamespace(handle=0x20), 64, 64, 1,
                                 64, 64)
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
    # C's rows 3071 floats apart close the float4 paths: matmul would not pack, nor says explain
    out = run(app, ["explain", "8192", "3071", "1024", "--tb", "--gpu", "h200", "--json"])
    assert json.loads(out.output)["packs_b"] is False
    out = run(app, ["explain", "8192", "3072", "1024", "--tb", "--gpu", "h200"])
    assert "packs:   B (column-major) into a row-major copy" in out.output
