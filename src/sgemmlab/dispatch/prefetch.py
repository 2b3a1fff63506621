"""What a process's first product would spend its time on, begun when sgemmlab is imported.

Measured on the H200 (`sgemmlab firstcall`, with its cProfile of the first call): a fresh
process's first `matmul` spent about 160 ms importing cuda.core (the launch needs it) and
about 150 ms reading, checking and indexing the shipped dispatch table (11,010 entries),
where every later first call at a new shape took a few milliseconds. Both need no GPU and
no CUDA context, so `import sgemmlab` starts them on a daemon thread, and the first call
waits only for whatever is not done yet (`wait`, from dispatch.choose). A program that does
anything between its imports and its first product (making tensors, building a model,
creating the CUDA context) finds them done.

SGEMMLAB_PREFETCH=0 turns it off (the test suite does: its tables are its own). Nothing
here can fail a call: an error is left for the call itself to meet and report.
"""

from __future__ import annotations

import os
import threading

_thread: threading.Thread | None = None


def _work() -> None:
    try:
        import cuda.core  # noqa: F401

        from . import SHIPPED_GPU
        from .lookup import _index
        from .table import load_table

        table = load_table(SHIPPED_GPU)
        if table is not None:
            _index(table)
    except Exception:  # the first call meets the same problem, and reports it
        pass


def start() -> None:
    """Begin the prefetch (once per process; not when SGEMMLAB_PREFETCH=0)."""
    global _thread
    if _thread is not None or os.environ.get("SGEMMLAB_PREFETCH", "1") == "0":
        return
    _thread = threading.Thread(target=_work, name="sgemmlab-prefetch", daemon=True)
    _thread.start()


def wait() -> None:
    """Return once the prefetch, if one was begun, has finished (at once after that)."""
    t = _thread
    if t is not None and t.is_alive():
        t.join()
