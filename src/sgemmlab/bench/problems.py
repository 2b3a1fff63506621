"""What one measurement computes: a `Problem` — a batch of row-major C = A B, with A and B
each stored row-major or column-major, and every matrix's rows perhaps padded.

Its text form, which `sgemmlab bench --shape`, results tags, tables and reports all use:

    [BATCH@]M x N x K[:LAYOUT][+PAD]

    4096x4096x4096        one product, A and B row-major (the dimensions as `M,N,K` always were:
                          separated by x, × or commas)
    32@128x128x128        a batch of 32 independent products: A is 32 x 128 x 128, B and C too
    1000x1000x1000:TN     A column-major (T), B row-major (N)
    8@512x512x64:NT       both
    1000x1000x999+3       A, B and C each with its leading dimension 3 floats past its row
                          (or column) length: a view into wider storage

LAYOUT is two letters, A's then B's, as BLAS says it: N, stored row-major; T, stored
column-major (what a transposed view of a contiguous tensor is). C is row-major always. A
missing batch means 1, a missing layout NN. Four plain numbers are refused rather than read
as a batch: which of them is the batch would be a guess.

Records (results.py) carry M, N and K, and "batch", "layout" and "pad" only where they differ
from 1, "NN" and 0, so every results file written before them reads as what it measured.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from ..dispatch import LAYOUTS

FORM = "M,N,K (or MxNxK), optionally BATCH@ before it, :LAYOUT and +PAD after it"
EXAMPLES = "e.g. 4096x4096x4096, 32@128x128x128, 1000x1000x1000:TN or 1000x1000x999+3"

_TEXT = re.compile(r"^\s*(?:(?P<batch>[^@]*)@)?(?P<dims>[^:@+]*)(?::(?P<layout>[^:+]*))?"
                   r"(?:\+(?P<pad>[^+]*))?$")
_SEP = re.compile(r"[,x×\s]+")


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@dataclass(frozen=True, order=True)
class Problem:
    M: int
    N: int
    K: int
    batch: int = 1  # independent products of the same shape
    layout: str = "NN"  # A's then B's storage: N row-major, T column-major
    pad: int = 0  # floats past each matrix's row (column-major: column) in its storage

    def __post_init__(self):
        for name in ("M", "N", "K", "batch"):
            if not _count(getattr(self, name)):
                raise ValueError(f"{name} must be an integer >= 1 (got {getattr(self, name)!r})")
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout {self.layout!r} is not one of {', '.join(LAYOUTS)}")
        if not (isinstance(self.pad, int) and not isinstance(self.pad, bool) and self.pad >= 0):
            raise ValueError(f"pad must be an integer >= 0 (got {self.pad!r})")

    @property
    def shape(self) -> tuple[int, int, int]:
        """(M, N, K) of each product."""
        return (self.M, self.N, self.K)

    @property
    def trans_a(self) -> bool:
        return self.layout[0] == "T"

    @property
    def trans_b(self) -> bool:
        return self.layout[1] == "T"

    @property
    def plain(self) -> bool:
        """One product of row-major, unpadded operands: what every shape meant before
        batches."""
        return self.batch == 1 and self.layout == "NN" and self.pad == 0

    def lds(self) -> tuple[int, int, int]:
        """The leading dimensions of A, B and C as the harness stores them."""
        return ((self.M if self.trans_a else self.K) + self.pad,
                (self.K if self.trans_b else self.N) + self.pad, self.N + self.pad)

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.M * self.N * self.K

    def text(self, times: str = "x") -> str:
        batch = f"{self.batch}@" if self.batch > 1 else ""
        layout = f":{self.layout}" if self.layout != "NN" else ""
        pad = f"+{self.pad}" if self.pad else ""
        return f"{batch}{times.join(map(str, self.shape))}{layout}{pad}"

    def __str__(self) -> str:
        return self.text()

    @property
    def label(self) -> str:
        """The text form as tables and reports print it: 32@128×128×128:TN."""
        return self.text("×")

    @property
    def tag(self) -> str:
        """The text form as a file name can hold it: 32@128x128x128-TN."""
        return self.text().replace(":", "-")

    def fields(self) -> dict[str, Any]:
        """What a record says of its problem: M, N, K, and batch, layout and pad if not 1,
        NN and 0."""
        out: dict[str, Any] = {"M": self.M, "N": self.N, "K": self.K}
        if self.batch != 1:
            out["batch"] = self.batch
        if self.layout != "NN":
            out["layout"] = self.layout
        if self.pad:
            out["pad"] = self.pad
        return out

    def __iter__(self) -> Iterator[int]:
        """`M, N, K = problem` for one row-major product, so code written for shapes takes
        plain problems; a batched or transposed problem refuses, rather than lose its batch
        or layout on the way."""
        if not self.plain:
            raise TypeError(f"{self} is not a plain M x N x K shape: use .shape, .batch, "
                            ".layout and .pad")
        return iter(self.shape)

    @classmethod
    def parse(cls, text: str) -> Problem:
        """A problem from its text form; ValueError naming what is wrong and the form."""
        def refuse(why: str) -> ValueError:
            return ValueError(f"{text!r} is not a problem: {why}; expected {FORM}, "
                              f"{EXAMPLES}")

        m = _TEXT.match(text)
        if m is None:
            raise refuse("more than one '@'" if text.count("@") > 1 else "more than one ':'")
        dims = [p for p in _SEP.split(m["dims"].strip()) if p]
        if len(dims) != 3:
            batch = " (a batch goes before an @: 32@128x128x128)" if len(dims) == 4 else ""
            raise refuse(f"{len(dims)} dimension{'s' if len(dims) != 1 else ''} where "
                         f"M,N,K are three{batch}")
        if not all(_digits(p) and int(p) >= 1 for p in dims):
            raise refuse("M, N and K must be integers >= 1")
        batch = 1
        if m["batch"] is not None:
            b = m["batch"].strip()
            if not (_digits(b) and int(b) >= 1):
                raise refuse(f"the batch {b!r} is not an integer >= 1")
            batch = int(b)
        layout = "NN"
        if m["layout"] is not None:
            layout = m["layout"].strip().upper()
            if layout not in LAYOUTS:
                raise refuse(f"the layout {m['layout'].strip()!r} is not one of "
                             f"{', '.join(LAYOUTS)}")
        pad = 0
        if m["pad"] is not None:
            pd = m["pad"].strip()
            if not _digits(pd):
                raise refuse(f"the pad {pd!r} is not an integer >= 0")
            pad = int(pd)
        return cls(*map(int, dims), batch, layout, pad)

    @classmethod
    def of(cls, x: Any) -> Problem:
        """A problem from a problem, an (M, N, K) shape, or a record (a mapping with M, N,
        K and perhaps batch, layout and pad: absent, they mean 1, NN and 0)."""
        if isinstance(x, Problem):
            return x
        if isinstance(x, Mapping):
            return cls(int(x["M"]), int(x["N"]), int(x["K"]), int(x.get("batch", 1)),
                       x.get("layout", "NN"), int(x.get("pad", 0)))
        M, N, K = x
        return cls(int(M), int(N), int(K))


def key(rec: Mapping[str, Any]) -> Problem:
    """The problem a record measured: what records are grouped by (never (M, N, K) alone,
    which would merge two layouts or batches of one shape)."""
    return Problem.of(rec)
