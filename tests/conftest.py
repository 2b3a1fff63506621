"""Shared test setup. Tests marked `gpu` run only where an NVIDIA GPU and torch are present;
elsewhere they are skipped with a reason (CI is CPU-only)."""

from __future__ import annotations

import functools

import pytest


@functools.cache
def gpu_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    from sgemmlab.runtime.device import has_gpu

    return torch.cuda.is_available() and has_gpu()


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with torch (none here)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def isolated_dispatch(tmp_path, monkeypatch):
    """Dispatch with no table but the ones a test writes, seeds as defaults, no compiles
    (255 registers: 2 blocks of 128 threads per SM, 264 slots on 132 SMs), and a fresh
    cache and results directory per test."""
    from sgemmlab import dispatch, registry

    monkeypatch.setenv("SGEMMLAB_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("SGEMMLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(dispatch.table, "PACKAGE_TABLE_DIR", tmp_path / "package")
    monkeypatch.setattr(registry, "tuned_defaults", lambda: {})
    monkeypatch.setattr(dispatch.waves, "registers_of", lambda rung, cfg, arch: 255)
    dispatch.clear_cache()
    yield
    dispatch.clear_cache()
