"""Writing files so that a reader never sees half of one.

`write_atomic` writes to a temporary file beside the target, flushes it to disk and renames
it into place: a reader (another process, or the next run after a crash or Ctrl-C) sees the
old file or the whole new one, never a truncated one. Two writers of the same path each
write a whole file; the last rename wins. Cache entries, tuning tables, results files and
resume logs all go through it.
"""

from __future__ import annotations

import os
import tempfile
from functools import cache
from pathlib import Path


@cache
def _umask() -> int:
    """The process's umask, read without setting it (os.umask would change it for every
    thread for a moment): Linux reports it in /proc/self/status; elsewhere assume 022."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def write_atomic(path: str | Path, data: bytes | str, *, mode: int | None = None,
                 dir_mode: int = 0o777) -> Path:
    """Write `data` (text is UTF-8 encoded) to `path` atomically; returns the path.

    The new file gets `mode` if given, else what a plain open() would give (0o666 less the
    umask; mkstemp's own 0o600 is only for the moment it is being written). Missing parent
    directories are made with `dir_mode` (less the umask)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=dir_mode)
    if isinstance(data, str):
        data = data.encode()
    if mode is None:
        mode = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
