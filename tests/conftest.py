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
