"""The scratch-memory provider (CPU, with a fake device): regions, growth, generations,
and that a replaced buffer is kept until release_all (a CUDA graph may point into it)."""

from __future__ import annotations

import types

import pytest

from sgemmlab.runtime import device as device_mod
from sgemmlab.runtime import workspace as ws


class FakeBuffer:
    next_handle = 1 << 20
    events: list = []  # ("sync", device) and ("close", handle, stream), in order

    def __init__(self, size: int, stream, device_id: int):
        self.size, self.handle = size, FakeBuffer.next_handle
        FakeBuffer.next_handle += size + 4096
        self.filled, self.closed = None, False
        self.device_id = device_id
        self.dealloc_stream = stream  # the default: the stream it was allocated on

    def fill(self, value, *, stream):
        self.filled = value

    def set_deallocation_stream(self, stream):
        self.dealloc_stream = stream

    def close(self, stream=None):
        stream = self.dealloc_stream if stream is None else stream
        if getattr(stream, "dead", False):
            raise AssertionError("freed on a destroyed stream: the real driver crashes here")
        FakeBuffer.events.append(("close", self.handle, stream))
        self.closed = True


@pytest.fixture
def fake(monkeypatch):
    made: list[FakeBuffer] = []
    FakeBuffer.events = []

    def make_device(index=0):
        def allocate(size, stream=None):
            made.append(FakeBuffer(size, stream, index))
            return made[-1]

        return types.SimpleNamespace(allocate=allocate,
                                     sync=lambda: FakeBuffer.events.append(("sync", index)))

    monkeypatch.setattr(device_mod, "device", make_device)
    monkeypatch.setattr(ws, "capturing", lambda stream: False)
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


def test_a_buffer_is_never_freed_on_the_stream_it_served(fake):
    """The stream a workspace served may be destroyed by its library (a CuPy stream dies
    with its Stream object); freeing on it crashed the process (free_workspaces after the
    stream was gone: exit 139). Buffers are freed after a synchronize of their device, on
    the legacy default stream, and their own deallocation stream is that one too (so the
    garbage collector at exit does not use the dead stream either)."""
    from sgemmlab.runtime.driver import LEGACY as LEGACY_DEFAULT_STREAM

    stream = types.SimpleNamespace(handle=9, dead=False)
    ws.workspace(0, stream, 256, 256)
    assert fake[0].dealloc_stream is LEGACY_DEFAULT_STREAM
    stream.dead = True  # its library destroyed it
    FakeBuffer.events.clear()
    assert ws.release_all() == fake[0].size
    assert FakeBuffer.events == [("sync", 0), ("close", fake[0].handle, LEGACY_DEFAULT_STREAM)]


def test_a_destroyed_stream_loses_its_workspace(fake):
    """arrays.stream_gone (the library's stream object died): the stream's workspace leaves
    the table at once (a new stream with the same handle gets a new one), bound launches
    see the generation move, and the buffer is freed, after a synchronize, at the next
    allocation: not kept until the process ends."""
    from sgemmlab.runtime import arrays

    dying = types.SimpleNamespace(handle=11)
    first = ws.workspace(0, dying, 256, 256)
    ws.workspace(0, STREAM, 256, 256)
    gen = ws.generation
    arrays.stream_gone(11)
    assert ws.generation != gen, "launches bound to the dead stream's workspace must ask again"
    assert not fake[0].closed, "nothing is freed inside a garbage collector's callback"
    reborn = ws.workspace(0, types.SimpleNamespace(handle=11), 256, 256)  # a new stream
    assert len(fake) == 3 and reborn != first
    assert fake[0].closed and not fake[1].closed and not fake[2].closed
    assert FakeBuffer.events[0] == ("sync", 0), "freed only after the device is idle"


def test_a_dead_streams_buffer_waits_while_a_capture_runs(fake, monkeypatch):
    """Freeing needs a synchronize, which a CUDA graph capture forbids: a buffer of a dead
    stream waits for an allocation outside any capture (or release_all)."""
    from sgemmlab.runtime import arrays

    ws.workspace(0, types.SimpleNamespace(handle=12), 256, 256)
    arrays.stream_gone(12)
    monkeypatch.setattr(ws, "capturing", lambda stream: True)
    ws.workspace(0, types.SimpleNamespace(handle=13), 256, 256)
    assert not fake[0].closed and ("sync", 0) not in FakeBuffer.events
    monkeypatch.setattr(ws, "capturing", lambda stream: False)
    ws.workspace(0, types.SimpleNamespace(handle=14), 256, 256)
    assert fake[0].closed


def test_a_stream_is_its_raw_handle_and_device_and_keeps_nothing():
    """arrays.stream_for wraps a raw handle for launches and workspaces: nothing is created
    or kept per handle (a program that makes and destroys streams grows nothing)."""
    from sgemmlab.runtime import arrays, driver

    s = arrays.stream_for(0x51, 3)
    assert isinstance(s, driver.Stream) and (s.handle, s.device_id) == (0x51, 3)
    assert not hasattr(arrays, "_streams")
