"""What lets an interrupted tune resume: every measurement written the moment it exists.

A tune keeps a *partial file* beside its results, `results/<gpu>/<name>.partial.jsonl`: a
header line, then one JSON record per line, appended and flushed as each configuration is
measured (or rejected). Run the same command again and it reads the file back and measures
only what is missing; when the run completes, the records go into the ordinary results
file and the partial file is removed.

What makes an old record stale, so that it is measured again:
  * the header differs (another GPU, NVRTC version or measurement method): the whole file
    is discarded, and `note` says why;
  * the record's `kernel_digest` differs from the digest of its rung's source now (the
    .cu file or an include changed since): that record alone is dropped.
A line cut short by the interruption is ignored.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Any, Callable, Hashable, Iterable, Mapping

from ..runtime.files import write_atomic

PARTIAL_SCHEMA = "sgemmlab.partial/1"


@cache
def kernel_digest(source: str) -> str:
    """A digest of kernels/`source` and everything it includes (what its machine code is
    made from; the generated <measured> comment block left out)."""
    from ..runtime.compiler import source_with_includes

    return hashlib.sha256(source_with_includes(source).encode()).hexdigest()[:16]


class PartialLog:
    """The records measured so far by one tune, persisted line by line.

    `key` maps a record to what identifies its measurement (e.g. configuration and shape);
    `fresh` tells whether a loaded record still holds (e.g. its kernel digest matches).
    With `resume=False` an existing file is discarded.
    """

    def __init__(self, path: Path, header: Mapping[str, Any],
                 key: Callable[[dict], Hashable], *, resume: bool = True,
                 fresh: Callable[[dict], bool] = lambda rec: True):
        self.path = Path(path)
        self.header = {"partial": PARTIAL_SCHEMA, **header}
        self.key = key
        self.note = ""
        self.records: list[dict] = []
        self._index: dict[Hashable, int] = {}
        if resume:
            loaded = self._read()  # None: no file, or another header (self.note says)
            stale = 0
            for rec in loaded or []:
                if fresh(rec):
                    self._keep(rec)
                else:
                    stale += 1
            notes = []
            if self.records:
                notes.append(f"resuming from {self.path.name}: {len(self.records)} "
                             "measurement(s) kept")
            if stale:
                notes.append(f"{stale} stale measurement(s) of changed kernels dropped")
            self.note = self.note or "; ".join(notes)
        elif self.path.is_file():
            self.note = f"{self.path.name} discarded (--no-resume): starting over"
        self._rewrite()  # the header, and only the records kept

    # -- reading --------------------------------------------------------------------------
    def _read(self) -> list[dict] | None:
        """The records of a file with the same header, or None (no file, other header)."""
        try:
            lines = self.path.read_text().splitlines()
        except OSError:
            return None
        if not lines:
            return None
        try:
            header = json.loads(lines[0])
        except ValueError:
            return None
        if header != self.header:
            differs = sorted(k for k in set(header) | set(self.header)
                             if header.get(k) != self.header.get(k)) \
                if isinstance(header, dict) else ["header"]
            self.note = (f"{self.path.name} was measured with another "
                         f"{', '.join(differs)}: starting over")
            return None
        out = []
        for line in lines[1:]:
            try:
                rec = json.loads(line)
            except ValueError:  # the line being written when the run was stopped
                continue
            if isinstance(rec, dict):
                out.append(rec)
        return out

    def _keep(self, rec: dict) -> None:
        k = self.key(rec)
        if k in self._index:  # a later line for the same measurement wins
            self.records[self._index[k]] = rec
        else:
            self._index[k] = len(self.records)
            self.records.append(rec)

    # -- writing --------------------------------------------------------------------------
    def _rewrite(self) -> None:
        """The whole file anew, atomically: a stop here leaves the old file, whose records
        the next run still resumes from (appends, by contrast, lose at most a torn line)."""
        write_atomic(self.path, "".join(json.dumps(x) + "\n"
                                        for x in [self.header, *self.records]))

    def has(self, key: Hashable) -> bool:
        return key in self._index

    def get(self, key: Hashable) -> dict | None:
        i = self._index.get(key)
        return self.records[i] if i is not None else None

    def add(self, rec: dict) -> None:
        """Keep `rec` and append it to the file at once (flushed: a stop loses nothing)."""
        self._keep(rec)
        with self.path.open("a") as f:
            f.write(json.dumps(rec) + "\n")
            f.flush()

    def extend(self, recs: Iterable[dict]) -> None:
        for rec in recs:
            self.add(rec)

    def drop(self, which: Callable[[dict], bool]) -> int:
        """Forget the records `which` selects (measured against a bad baseline, say), in
        memory and on disk; returns how many."""
        kept = [r for r in self.records if not which(r)]
        gone = len(self.records) - len(kept)
        self.records, self._index = [], {}
        for rec in kept:
            self._keep(rec)
        self._rewrite()
        return gone

    def finish(self) -> None:
        """The run completed and its results file is written: the partial file goes."""
        self.path.unlink(missing_ok=True)
