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
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

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
_lock = threading.Lock()
#: Bumped whenever a buffer is replaced or freed: a launch bound to workspace pointers
#: compares it with the value it saw and asks again when it changed.
generation = 0


def workspace(device_id: int, stream, zeroed: int, scratch: int) -> tuple[int, int]:
    """(zeroed, scratch) device pointers with at least the given sizes, for work on
    `stream`."""
    from .device import device

    key = (device_id, int(stream.handle))
    zeroed, scratch = _round_up(zeroed), _round_up(scratch)
    with _lock:
        ws = _spaces.get(key)
        if ws is None or ws.zeroed < zeroed or ws.scratch < scratch:
            z, s = max(zeroed, ALIGN), scratch
            if ws is not None:
                z = max(z, ws.zeroed * (2 if zeroed > ws.zeroed else 1))
                s = max(s, ws.scratch * (2 if scratch > ws.scratch else 1))
            buf = device(device_id).allocate(z + s, stream=stream)
            buf.fill(0, stream=stream)
            if ws is not None:
                _retired.append(ws.buffer)  # a captured graph may still point into it
            global generation
            generation += 1
            ws = _spaces[key] = _Workspace(buf, z, s)
        base = int(ws.buffer.handle)
        return base, base + ws.zeroed


def release_all() -> int:
    """Free every workspace, the replaced ones too; returns the bytes freed
    (`sgemmlab.free_workspaces`, the tests). Each buffer goes back in order on the stream it
    was allocated on, after the work queued there; launches bound to it see `generation`
    move and ask again."""
    global generation
    with _lock:
        freed = 0
        for buf in [ws.buffer for ws in _spaces.values()] + _retired:
            freed += int(buf.size)
            buf.close()
        _spaces.clear()
        _retired.clear()
        generation += 1
    return freed


_driver = None


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
    global _driver
    if _driver is None:
        from cuda.bindings import driver

        _driver = driver
    query = _driver.cuStreamIsCapturing
    ok = _driver.CUresult.CUDA_SUCCESS
    active = _driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE

    def probe() -> bool:
        err, status = query(handle)
        return err == ok and status == active

    return probe


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
