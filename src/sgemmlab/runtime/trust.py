"""Which files on disk sgemmlab may load: the rule ssh applies to ~/.ssh.

A cubin read from disk runs on the GPU with the process's rights, and a tuning table chooses
which one runs. The digest inside a cache entry catches damage, not a forger (anyone can
compute it), so a file is used only where nobody but you or root can have put it:

* its directory exists, is a directory, is owned by you (the effective uid) or root, and is
  not writable by group or others: then only you or root can add, replace or rename files
  in it;
* the file is opened without following a symbolic link (O_NOFOLLOW: a link could point
  anywhere) and checked on the open descriptor (fstat): a regular file, owned by you or
  root, not writable by group or others. What is checked is what is read.

The directory is opened first and the file relative to that descriptor, so the checks hold
for the directory the file is read from, whatever happens to the path meanwhile. That is
why the directory's ancestors need no check: whoever can write one of them can move the
directory away or put another in its place, which is then checked (and refused) on its own,
but cannot put a file into a directory that only you can write.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import warnings
from pathlib import Path


class Untrusted(Exception):
    """A file or directory someone else could have written: its `path`, and `why` in a
    short phrase ("is a symbolic link")."""

    def __init__(self, path: str | Path, why: str):
        super().__init__(f"{path} {why}")
        self.path, self.why = Path(path), why


def _uid() -> int:
    return os.geteuid()


def problem(st: os.stat_result) -> str | None:
    """Why a file or directory with this status may not be trusted (its owner or its
    mode), as a short phrase; None when it may."""
    me = _uid()
    if st.st_uid not in (me, 0):
        return f"is owned by uid {st.st_uid}, not by you (uid {me})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):#o})"
    return None


def dir_problem(path: str | Path) -> str | None:
    """Why the directory `path` may not be trusted, as a short phrase ("does not exist",
    "is writable by group or others (mode 0o777)"); None when it may."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot be examined ({exc.strerror})"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    return problem(st)


def read_file(path: str | Path) -> bytes:
    """The contents of `path` if it and its directory may be trusted (the module docstring);
    raises Untrusted saying why not, or OSError when it cannot be read."""
    path = Path(path)
    d = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if why := problem(os.fstat(d)):
            raise Untrusted(path.parent, why)
        try:  # O_NONBLOCK: a FIFO planted under the name must not hang the open
            fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=d)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Untrusted(path, "is a symbolic link") from None
            raise
    finally:
        os.close(d)
    with open(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Untrusted(path, "is not a regular file")
        if why := problem(st):
            raise Untrusted(path, why)
        return f.read()


_warned: set = set()
_warned_lock = threading.Lock()


def warn_once(key, message: str, stacklevel: int = 2) -> None:
    """`message` as a RuntimeWarning the first time `key` (what is refused, and where) comes
    up in this process: a refused directory is one warning, not one per compile."""
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, RuntimeWarning, stacklevel=stacklevel + 1)
