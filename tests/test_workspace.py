"""The scratch-memory provider (CPU, with a fake device): regions, growth, generations,
and that a replaced buffer is kept until release_all (a CUDA graph may point into it)."""

from __future__ import annotations

import types

import pytest

from sgemmlab.runtime import device as device_mod
from sgemmlab.runtime import workspace as ws


class FakeBuffer:
    next_handle = 1 << 20

    def __init__(self, size: int):
        self.size, self.handle = size, FakeBuffer.next_handle
        FakeBuffer.next_handle += size + 4096
        self.filled, self.closed = None, False

    def fill(self, value, *, stream):
        self.filled = value

    def close(self, stream=None):
        self.closed = True


@pytest.fixture
def fake(monkeypatch):
    made: list[FakeBuffer] = []

    def allocate(size, stream=None):
        made.append(FakeBuffer(size))
        return made[-1]

    monkeypatch.setattr(device_mod, "device",
                        lambda index=0: types.SimpleNamespace(allocate=allocate))
    ws.release_all()
    yield made
    ws.release_all()


STREAM = types.SimpleNamespace(handle=7)


def test_regions_are_separate_and_the_new_buffer_is_zeroed(fake):
    zeroed, scratch = ws.workspace(0, STREAM, 100, 5000)
    assert len(fake) == 1 and fake[0].filled == 0
    assert scratch - zeroed >= 100 and (scratch - zeroed) % ws.ALIGN == 0
    assert scratch + 5000 <= fake[0].handle + fake[0].size


def test_a_request_that_fits_reuses_the_buffer(fake):
    first = ws.workspace(0, STREAM, 1000, 1 << 16)
    gen = ws.generation
    assert ws.workspace(0, STREAM, 10, 100) == first
    assert len(fake) == 1 and ws.generation == gen


def test_growth_keeps_the_old_buffer_and_bumps_the_generation(fake):
    ws.workspace(0, STREAM, 256, 1 << 16)
    gen = ws.generation
    ws.workspace(0, STREAM, 256, (1 << 16) + 1)
    assert len(fake) == 2 and ws.generation == gen + 1
    assert not fake[0].closed, "a graph captured with the old buffer would read freed memory"
    assert fake[1].size >= 256 + 2 * (1 << 16), "regions grow at least twofold"
    ws.release_all()
    assert all(b.closed for b in fake)


def test_streams_and_devices_do_not_share(fake):
    a = ws.workspace(0, STREAM, 256, 256)
    b = ws.workspace(0, types.SimpleNamespace(handle=8), 256, 256)
    c = ws.workspace(1, STREAM, 256, 256)
    assert len({a, b, c}) == 3 and len(fake) == 3


def test_free_workspaces_gives_back_every_buffer_and_says_how_much(fake):
    """sgemmlab.free_workspaces(): the live buffers and the replaced ones closed, their
    bytes counted; bound launches see the generation move; the next request allocates
    afresh."""
    import sgemmlab

    ws.workspace(0, STREAM, 256, 1 << 16)
    ws.workspace(0, STREAM, 256, (1 << 16) + 1)  # replaces the first (kept: retired)
    ws.workspace(0, types.SimpleNamespace(handle=8), 512, 512)
    gen = ws.generation
    assert sgemmlab.free_workspaces() == sum(b.size for b in fake)
    assert all(b.closed for b in fake) and ws.generation == gen + 1
    assert sgemmlab.free_workspaces() == 0, "nothing left to free"
    ws.workspace(0, STREAM, 256, 256)
    assert len(fake) == 4 and not fake[-1].closed
