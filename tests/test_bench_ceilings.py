"""The FFMA ceiling kernel compiles without a GPU; its SASS must keep every FMA it times."""

from __future__ import annotations

import types

import pytest

from sgemmlab.bench import ceilings
from sgemmlab.runtime import launch
from sgemmlab.runtime.compiler import compile_kernel


def test_ffma_kernel_keeps_its_fmas_in_sass():
    compiled = compile_kernel(ceilings.SOURCE, ceilings.FFMA)
    assert not compiled.resources.spills
    assert compiled.resources.registers <= 32  # 2048 threads per SM: full occupancy
    count = ceilings.sass_count(compiled.cubin, "FFMA")
    if count is None:
        pytest.skip("no nvdisasm or cuobjdump here")
    assert count >= ceilings.FFMA["CHAINS"] * ceilings.FFMA["UNROLL"]


def test_a_kernel_whose_fmas_were_optimised_away_is_refused(monkeypatch):
    fake = types.SimpleNamespace(cubin=b"", resources=None)
    monkeypatch.setattr(launch, "load_kernel", lambda *a, **k: (object(), fake))
    monkeypatch.setattr(ceilings, "sass_count", lambda cubin, op: 16)
    with pytest.raises(ceilings.CeilingError, match="removed work"):
        ceilings.ffma_kernel()


def test_without_a_disassembler_the_kernel_is_used_unchecked(monkeypatch):
    fake = types.SimpleNamespace(cubin=b"", resources=None)
    monkeypatch.setattr(launch, "load_kernel", lambda *a, **k: ("kernel", fake))
    monkeypatch.setattr(ceilings, "sass_count", lambda cubin, op: None)
    assert ceilings.ffma_kernel() == ("kernel", fake, None)
