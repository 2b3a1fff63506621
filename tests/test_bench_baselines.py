"""The baselines' bookkeeping: TF32 is labelled and switched off again, a missing package is
a note. (Their numbers on a real GPU: test_bench_gpu.py.)"""

from __future__ import annotations

import sys

import pytest

from sgemmlab.bench import baselines


def test_tf32_baseline_is_labelled_not_fp32():
    c = baselines.candidate("tf32")
    assert c.kernel == "cublas_tf32" and c.fp32 is False
    assert "NOT FP32" in c.info["note"]


def test_a_missing_triton_is_a_note_not_an_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # makes `import triton` fail
    monkeypatch.delitem(sys.modules, "sgemmlab.bench.triton_matmul", raising=False)
    with pytest.raises(baselines.BaselineUnavailable, match="triton baseline skipped"):
        baselines.candidate("triton")


def test_unknown_baseline():
    with pytest.raises(KeyError):
        baselines.candidate("cutlass")


def test_tf32_is_switched_back_off_even_when_the_call_fails():
    torch = pytest.importorskip("torch")
    baselines.fp32_only()
    with baselines.tf32_matmul():
        assert torch.backends.cuda.matmul.allow_tf32
    assert not baselines.tf32_is_on()
    with pytest.raises(RuntimeError), baselines.tf32_matmul():
        raise RuntimeError("cuBLAS failed")
    assert not baselines.tf32_is_on()
    assert torch.get_float32_matmul_precision() == "highest"
