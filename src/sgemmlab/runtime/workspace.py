"""Scratch memory for kernels that need it (rung 14's partial tiles and counters).

One buffer per (device, stream), grown on demand and never shrunk. Kernels on one stream
run one after another, so they can share it; two streams never share one. The buffer has
two regions:

    [ zeroed | scratch ]

`zeroed` is all zeros between launches: a kernel may count or accumulate there (rung 14's
per-tile counters, its atomic fix-up tiles) as long as it leaves zeros behind, so no launch
pays for a clearing pass. `scratch` holds anything (rung 14's ordered partial tiles). The two
must not share memory: one launch's partial tiles would be the next one's counters. A new
buffer is zeroed on its stream before first use.

A launch being captured into a CUDA graph by torch (`torch.cuda.graph`, torch.compile's
"reduce-overhead") gets a workspace of its own instead (`for_capture`), from torch's
allocator, which gives it the graph's private memory: the graph can then be replayed on any
stream, beside eager work on the stream it was captured on, and the two never share
counters. A capture that is not torch's uses the stream's buffer, which must then exist
before capturing (make one call of the same shape, or a larger one, first) and must not be
in use elsewhere while the graph replays. A replaced buffer is kept, not freed, until
release_all() (`sgemmlab.free_workspaces()`): a graph captured with it stays valid. Regions
grow at least twofold, so what is kept is less than what is in use.

Streams die (CuPy destroys its stream with the Stream object), and a buffer must never be
freed on a dead one: every buffer's deallocation goes on the legacy default stream after a
synchronize of its device, never on the stream it served. A stream whose death the library
tells (`arrays.stream_gone`) loses its workspace at once; the buffer waits in `_dead` and is
freed at the next allocation made outside a capture, or by release_all().
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

from . import driver

ALIGN = 256


def _round_up(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


@dataclass
class _Workspace:
    buffer: object
    zeroed: int  # bytes of the zeroed region
    scratch: int  # bytes of the scratch region, after it


_spaces: dict[tuple[int, int], _Workspace] = {}
_retired: list[object] = []  # replaced buffers, kept until release_all()
_dead: list[object] = []  # buffers of destroyed streams, freed at the next safe moment
_gone: list[int] = []  # handles of destroyed streams not yet looked at (stream_gone)
_lock = threading.Lock()
#: Bumped whenever a buffer is replaced or freed: a launch bound to workspace pointers
#: compares it with the value it saw and asks again when it changed.
generation = 0
#: Called (no arguments) whenever `generation` moves: the drop-in switch's native kernels,
#: which keep workspace pointers in C++ (csrc/switch.cpp's bump). A listener takes no lock
#: and makes no CUDA call: stream_gone calls it from a garbage collector's callback.
_listeners: list[Callable[[], None]] = []


def on_change(listener: Callable[[], None]) -> None:
    """Call `listener` whenever a workspace is replaced or freed (once per listener)."""
    if listener not in _listeners:
        _listeners.append(listener)


def _moved() -> None:
    global generation
    generation += 1
    for listener in _listeners:
        listener()


def workspace(device_id: int, stream, zeroed: int, scratch: int) -> tuple[int, int]:
    """(zeroed, scratch) device pointers with at least the given sizes, for work on
    `stream`."""
    from .device import device

    key = (device_id, int(stream.handle))
    zeroed, scratch = _round_up(zeroed), _round_up(scratch)
    with _lock:
        if _gone:
            _bury()
        ws = _spaces.get(key)
        if ws is None or ws.zeroed < zeroed or ws.scratch < scratch:
            if _dead and not capturing(stream):  # a synchronize is allowed here
                _free(_dead)
            z, s = max(zeroed, ALIGN), scratch
            if ws is not None:
                z = max(z, ws.zeroed * (2 if zeroed > ws.zeroed else 1))
                s = max(s, ws.scratch * (2 if scratch > ws.scratch else 1))
            buf = device(device_id).allocate(z + s, stream=stream)
            buf.fill(0, stream=stream)
            # freed on a stream that never dies (_free synchronizes first), not on this one
            buf.set_deallocation_stream(driver.LEGACY)
            if ws is not None:
                _retired.append(ws.buffer)  # a captured graph may still point into it
            _moved()
            ws = _spaces[key] = _Workspace(buf, z, s)
        base = int(ws.buffer.handle)
        return base, base + ws.zeroed


def release_all() -> int:
    """Free every workspace, the replaced ones and those of destroyed streams too; returns
    the bytes freed (`sgemmlab.free_workspaces`, the tests). Each device is synchronized
    first (its buffers may be in use on any stream); launches bound to a buffer see
    `generation` move and ask again."""
    with _lock:
        freed = _free([ws.buffer for ws in _spaces.values()] + _retired + _dead)
        _spaces.clear()
        _retired.clear()
        _dead.clear()
        _moved()
    return freed


def _free(buffers: list) -> int:
    """Free `buffers` (emptied) after the work queued on their devices, on the legacy default
    stream, and return their bytes. Never on the stream a buffer served: it may be gone."""
    from .device import device

    freed = 0
    for dev in sorted({int(b.device_id) for b in buffers}):
        device(dev).sync()  # current, and idle: no stream still uses its buffers
        for buf in [b for b in buffers if int(b.device_id) == dev]:
            freed += int(buf.size)
            buf.close(driver.LEGACY)
    buffers.clear()
    return freed


def stream_gone(handle: int) -> None:
    """The stream `handle` was destroyed (arrays.stream_gone). This runs in a garbage
    collector's callback, which may interrupt any code of this thread, lock holders
    included: it takes no lock and makes no CUDA call, only notes the handle and moves
    `generation`, so launches bound to that stream's workspace ask again. The next
    workspace() call moves the stream's buffers to `_dead` (`_bury`), and a new stream that
    got the same handle gets a new workspace."""
    _gone.append(handle)
    _moved()


def _bury() -> None:
    """Workspaces of the streams in `_gone` to `_dead` (the caller holds `_lock`)."""
    while _gone:
        handle = _gone.pop()
        for key in [k for k in _spaces if k[1] == handle]:
            _dead.append(_spaces.pop(key).buffer)


# The legacy default stream (handle 0, or CU_STREAM_LEGACY): CUDA refuses to capture it
LEGACY_STREAMS = (0, 1)


def capturing(stream) -> bool:
    """True while `stream` is being captured into a CUDA graph (one driver query)."""
    probe = capture_probe(stream)
    return probe is not None and probe()


def capture_probe(stream) -> Callable[[], bool] | None:
    """`capturing(stream)` with what it needs looked up once: the launches that use a
    workspace ask it on every call. None for the legacy default stream, which no graph can
    capture: a launch there needs no query (torch's default stream is this one)."""
    handle = stream.handle
    if int(handle) in LEGACY_STREAMS:
        return None
    return driver.stream_is_capturing(int(handle))


def for_capture(device_id: int, stream, zeroed: int, scratch: int
                ) -> tuple[int, int, object]:
    """(zeroed, scratch, owner) for one launch being captured on `stream`. When torch is
    capturing it: a buffer of this launch's own from torch's allocator (the graph's private
    pool), its zeroed region cleared by a memset the graph replays; the caller holds
    `owner` until the launch is enqueued (the pool then keeps the memory for the graph).
    Any other capture: the stream's workspace, and `owner` is None."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_current_stream_capturing() and \
            int(torch.cuda.current_stream(device_id).cuda_stream) == int(stream.handle):
        z, s = max(_round_up(zeroed), ALIGN), _round_up(scratch)
        buf = torch.empty(z + s + ALIGN, dtype=torch.uint8, device=f"cuda:{device_id}")
        base = _round_up(buf.data_ptr())
        buf[base - buf.data_ptr():base - buf.data_ptr() + z].zero_()
        return base, base + z, buf
    return (*workspace(device_id, stream, zeroed, scratch), None)
