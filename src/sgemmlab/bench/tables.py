"""Text tables of results records: the terminal scoreboard (rich, also live) and Markdown.

One list of columns serves both, so the terminal and the report always show the same thing.
A problem is shown in its text form (problems.py): 4096×4096×4096, 32@128×128×128 (a batch
of 32), 1000×1000×1000:TN (A column-major).
"""

from __future__ import annotations

from typing import Callable

from .problems import key


def _fmt(rec: dict, key: str, spec: str, scale: float = 1.0) -> str:
    v = rec.get(key)
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return "-"
    v = v * scale
    return format(round(v) if spec.endswith("d") else v, spec)  # int * 1.0 is a float


def _num(key: str, spec: str, scale: float = 1.0) -> Callable[[dict], str]:
    return lambda rec: _fmt(rec, key, spec, scale)


def kernel_label(rec: dict) -> str:
    """The kernel's name, with what a reader must not miss: not FP32, or not timed."""
    label = rec["kernel"]
    if rec.get("fp32") is False:
        label += " (TF32: NOT FP32)"
    if rec.get("status") == "failed":
        label += " (FAILED check, not timed)"
    if rec.get("status") == "skipped":
        label += " (skipped: cannot compute it)"
    return label


def _spread(rec: dict) -> str:
    """The paired ratio's min-max over rounds: how far to trust the median."""
    lo, hi = rec.get("vs_cublas_min"), rec.get("vs_cublas_max")
    if not isinstance(lo, (int, float)) or not isinstance(hi, (int, float)):
        return "-"
    return f"{100 * lo:.1f}–{100 * hi:.1f}"


def _verdict(rec: dict) -> str:
    """The float64 check: gating for FP32 kernels, only reported for the others."""
    if "correct" not in rec:
        return "-"
    if rec["correct"]:
        return "pass"
    return "above FP32 bound" if rec.get("fp32") is False else "FAIL"


SCOREBOARD: tuple[tuple[str, Callable[[dict], str]], ...] = (  # (header, cell)
    ("kernel", kernel_label),
    ("M×N×K", lambda rec: key(rec).label),
    ("µs", _num("median_us", ".1f")),
    ("GFLOP/s", _num("tflops", ".0f", 1e3)),
    ("% of cuBLAS", _num("vs_cublas", ".1f", 100.0)),
    ("min–max %", _spread),
    ("% of FFMA peak", _num("pct_of_peak", ".1f")),
    ("regs", lambda rec: "?" if (rec.get("registers") or 0) < 0 else
     _num("registers", "d")(rec)),  # -1: the compiler gave no report
    ("max rel. error", _num("error", ".1e")),
    ("check", _verdict),
)


def rows(records: list[dict]) -> list[list[str]]:
    return [[cell(rec) for _, cell in SCOREBOARD] for rec in records]


def markdown_table(head: list[str], body: list[list[str]]) -> str:
    """A GitHub-flavoured Markdown table; every table sgemmlab writes goes through here."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(lines) + "\n"


def markdown(records: list[dict]) -> str:
    return markdown_table([h for h, _ in SCOREBOARD], rows(records))


def scoreboard(records: list[dict], title: str):
    """The rich Table of `records` (cuBLAS in bold, failures in red, skipped ones dim)."""
    from rich.table import Table

    table = Table(title=title)
    for i, (h, _) in enumerate(SCOREBOARD):
        table.add_column(h, justify="left" if i < 2 else "right")
    for rec, row in zip(records, rows(records)):
        style = {"failed": "red", "skipped": "dim"}.get(rec.get("status", ""), (
            "bold" if rec["kernel"] == "cublas" else None))
        table.add_row(*row, style=style)
    return table


def print_scoreboard(records: list[dict], title: str) -> None:
    from rich.console import Console

    Console().print(scoreboard(records, title))


class LiveBoard:
    """While a run works: the scoreboard of everything measured so far, and under it the
    progress of the work in hand. `progress` is an unstarted rich Progress (this display
    draws it); `show` is called with the records after each shape."""

    def __init__(self, title: str, progress, console=None):
        from rich.live import Live

        self.title, self.progress, self.records = title, progress, []
        self._live = Live(self._view(), refresh_per_second=4, console=console)

    def _view(self):
        from rich.console import Group

        return Group(scoreboard(self.records, self.title), self.progress)

    def show(self, records: list[dict]) -> None:
        self.records = list(records)
        for task in self.progress.tasks:  # done work is in the table now
            if task.total is not None and task.completed >= task.total:
                self.progress.update(task.id, visible=False)
        self._live.update(self._view())

    def __enter__(self) -> LiveBoard:
        self._live.start()
        return self

    def __exit__(self, *exc) -> None:
        from rich.console import Group

        self._live.update(Group(scoreboard(self.records, self.title)))
        self._live.stop()
