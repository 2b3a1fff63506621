"""Text tables of results records: the terminal scoreboard (rich) and Markdown."""

from __future__ import annotations


def _fmt(rec: dict, key: str, spec: str, scale: float = 1.0) -> str:
    v = rec.get(key)
    if not isinstance(v, (int, float)):
        return "-"
    v = v * scale
    return format(round(v) if spec.endswith("d") else v, spec)


SCOREBOARD = (  # (header, key, format, scale)
    ("kernel", "kernel", "", 1.0),
    ("M×N×K", None, "", 1.0),
    ("µs", "median_us", ".1f", 1.0),
    ("GFLOP/s", "tflops", ".0f", 1e3),
    ("% of cuBLAS", "vs_cublas", ".1f", 100.0),
    ("% of FFMA peak", "pct_of_peak", ".1f", 1.0),
    ("regs", "registers", "d", 1.0),
    ("max rel. error", "error", ".1e", 1.0),
)


def rows(records: list[dict]) -> list[list[str]]:
    out = []
    for rec in records:
        row = []
        for _, key, spec, scale in SCOREBOARD:
            if key is None:
                row.append(f"{rec['M']}×{rec['N']}×{rec['K']}")
            elif key == "kernel":
                row.append(rec["kernel"] + ("" if rec.get("status") != "failed" else
                                            " (FAILED check, not timed)"))
            else:
                row.append(_fmt(rec, key, spec, scale))
        out.append(row)
    return out


def markdown(records: list[dict]) -> str:
    head = [h for h, *_ in SCOREBOARD]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows(records)]
    return "\n".join(lines) + "\n"


def print_scoreboard(records: list[dict], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for i, (h, *_) in enumerate(SCOREBOARD):
        table.add_column(h, justify="left" if i < 2 else "right")
    for rec, row in zip(records, rows(records)):
        style = "red" if rec.get("status") == "failed" else (
            "bold" if rec["kernel"] == "cublas" else None)
        table.add_row(*row, style=style)
    Console().print(table)
