"""Scratch memory for kernels that need it (rung 14's partial tiles and counters).

One buffer per (device, stream), grown on demand and never shrunk. Kernels on one stream
run one after another, so they can share it; two streams never share one. A new buffer is
zeroed on its stream before first use, and rung 14 leaves its workspace zeroed when it
finishes, so no launch pays for a clearing pass.

Allocating is not allowed while a stream is being captured into a CUDA graph: make one call
of the same shape (or a larger one) before capturing, and the capture reuses the buffer.
"""

from __future__ import annotations

import threading

_buffers: dict[tuple[int, int], object] = {}
_lock = threading.Lock()


def workspace(device_id: int, stream, nbytes: int) -> int:
    """Device pointer to at least `nbytes` of zeroed scratch for work on `stream`."""
    from .device import device

    key = (device_id, int(stream.handle))
    with _lock:
        buf = _buffers.get(key)
        if buf is not None and buf.size >= nbytes:
            return int(buf.handle)
        size = max(nbytes, 2 * buf.size if buf is not None else 0, 1 << 20)
        new = device(device_id).allocate(size, stream=stream)
        new.fill(0, stream=stream)
        if buf is not None:
            buf.close(stream)  # freed in stream order, after the launches that used it
        _buffers[key] = new
        return int(new.handle)


def release_all() -> None:
    """Free every workspace (tests; a process that is done with the GPU)."""
    with _lock:
        for buf in _buffers.values():
            buf.close()
        _buffers.clear()
