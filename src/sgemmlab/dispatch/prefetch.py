"""What a process's first product would spend its time on, begun when sgemmlab is imported.

Measured on the H200 (`sgemmlab firstcall`, with its cProfile of the first call): a fresh
process's first `matmul` spent about 160 ms importing cuda.core (the launch needs it) and
about 150 ms reading, checking and indexing the shipped dispatch table (11,010 entries),
where every later first call at a new shape took a few milliseconds. Neither needs a GPU
or a CUDA context, so `import sgemmlab` does both ahead of the first call: cuda.core is
imported there and then (importing it from two threads at once was seen to fail on the
H200 machine: the main thread found `cuda.core.cu13` half-initialised), and the table is
read on a daemon thread, pure Python over modules already imported; the first call waits
only for whatever of that is not done yet (`wait`, from dispatch.choose). A program that
does anything between its imports and its first product (making tensors, building a model,
creating the CUDA context) finds it done.

SGEMMLAB_PREFETCH=0 turns it off (the test suite does: its tables are its own). Nothing
here can fail a call: an error is left for the call itself to meet and report.
"""

from __future__ import annotations

import os
import threading

_thread: threading.Thread | None = None


def _work(gpu_name: str) -> None:
    from .lookup import _index
    from .table import load_table

    try:
        table = load_table(gpu_name)
        if table is not None:
            _index(table)
    except Exception:  # the first call meets the same problem, and reports it
        pass


def start(gpu_name: str) -> None:
    """Import cuda.core, and begin reading `gpu_name`'s shipped table on a thread (once per
    process; neither when SGEMMLAB_PREFETCH=0)."""
    global _thread
    if _thread is not None or os.environ.get("SGEMMLAB_PREFETCH", "1") == "0":
        return
    try:
        import cuda.core  # noqa: F401  (here, on the importing thread: see above)
    except Exception:  # a broken install: the first call reports it in its own words
        pass
    _thread = threading.Thread(target=_work, args=(gpu_name,), name="sgemmlab-prefetch",
                               daemon=True)
    _thread.start()


def wait() -> None:
    """Return once the prefetch, if one was begun, has finished (at once after that)."""
    t = _thread
    if t is not None and t.is_alive():
        t.join()
