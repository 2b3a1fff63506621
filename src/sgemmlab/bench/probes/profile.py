"""`sgemmlab profile`: Nsight Compute on one rung and on cuBLAS at the same shape, digested.

The figures the worklog reasons with, for both kernels side by side: how often a scheduler
issued (issue active), how busy the FMA pipe was, warps per scheduler (active, eligible),
why warps were not issuing (the stall reasons, per issued instruction), shared-memory bank
conflicts, instructions executed, and the kernel's duration; then the instructions of the
rung where its warps stalled most (PC sampling, per SASS instruction).

How: `ncu` profiles one launch of `sgemmlab run -k RUNG` (the kernel is `sgemm`) and one of
torch.matmul with TF32 off (cuBLAS's kernel, matched by name), writing a report each; the
report is then read back as CSV (`--page raw` for the metrics, `--page source --print-source
sass` for the instructions) and parsed here. Clocks are left as the GPU runs them
(--clock-control none), as every other measurement of the project. Needs ncu on PATH (or
$NCU); without it the command says so in one sentence.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

#: (label, metric): what the digest prints, in order.
METRICS = (
    ("duration (ns)", "gpu__time_duration.sum"),
    ("issue active (% of peak)", "smsp__issue_active.avg.pct_of_peak_sustained_active"),
    ("FMA pipe busy (% of peak)", "smsp__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"),
    ("warps active per scheduler", "smsp__warps_active.avg.per_cycle_active"),
    ("warps eligible per scheduler", "smsp__warps_eligible.avg.per_cycle_active"),
    ("instructions executed", "smsp__inst_executed.sum"),
    ("FMA-pipe instructions", "smsp__inst_executed_pipe_fma.sum"),
    ("shared load bank conflicts", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"),
    ("shared store bank conflicts", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"),
    ("registers per thread", "launch__registers_per_thread"),
)
STALLS = "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio"
_STALL_PREFIX, _STALL_SUFFIX = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"

#: The cuBLAS side: torch.matmul with TF32 off, warmed up, at the same shape.
_CUBLAS = ("import torch; torch.backends.cuda.matmul.allow_tf32 = False; "
           "a = torch.rand({M}, {K}, device='cuda'); b = torch.rand({K}, {N}, device='cuda'); "
           "[a @ b for _ in range(3)]; torch.cuda.synchronize()")


class NoProfiler(RuntimeError):
    """ncu is not installed (or not on PATH / $NCU)."""


def find_ncu() -> str:
    for cand in (os.environ.get("NCU"), shutil.which("ncu"), "/usr/local/cuda/bin/ncu"):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return cand
    raise NoProfiler("Nsight Compute (ncu) is not installed here, so nothing was profiled: "
                     "install it (or set $NCU) and run again")


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def parse_raw(text: str) -> list[dict[str, float | str]]:
    """`ncu --import R --page raw --csv`: one dict per profiled kernel, metric -> value
    (numbers as floats; the second CSV row, the units, is skipped)."""
    rows = list(csv.reader(io.StringIO("\n".join(
        ln for ln in text.splitlines() if not ln.startswith("==")))))
    if len(rows) < 2:
        return []
    head, body = rows[0], rows[1:]
    if body and body[0] and not body[0][0].strip():
        body = body[1:]  # the units row: its ID cell is empty
    out = []
    for row in body:
        rec: dict[str, float | str] = {}
        for name, value in zip(head, row):
            num = _number(value)
            rec[name] = value if num is None else num
        out.append(rec)
    return out


def parse_source(text: str, top: int = 12) -> list[dict]:
    """`ncu --import R --page source --csv --print-source sass`: the `top` instructions by
    warp-stall samples, each {address, sass, samples, share}. [] when the columns are not
    there (an ncu that prints something else)."""
    lines = [ln for ln in text.splitlines() if not ln.startswith("==")]
    # ncu 2025 prints a '"Kernel Name","sgemm",' line before the header: start at the header
    start = next((i for i, ln in enumerate(lines) if '"Address"' in ln and '"Source"' in ln),
                 0)
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
    if not rows:
        return []
    cols = [c for c in rows[0] if isinstance(c, str)]  # (a ragged row puts None keys in)
    src = next((c for c in cols if c.strip().lower() == "source"), None)
    samp = next((c for c in cols if "warp stall sampling (all" in c.lower()), None)
    addr = next((c for c in cols if c.strip().lower() == "address"), None)
    if src is None or samp is None:
        return []
    items = [(r, _number(r.get(samp) or "") or 0.0) for r in rows]
    total = sum(v for _, v in items) or 1.0
    items.sort(key=lambda t: -t[1])
    return [{"address": r.get(addr) or "", "sass": (r.get(src) or "").strip(), "samples": v,
             "share": v / total} for r, v in items[:top] if v > 0]


def stalls(rec: dict) -> dict[str, float]:
    """stall reason -> warps stalled on it per issued instruction, largest first."""
    out = {k[len(_STALL_PREFIX):-len(_STALL_SUFFIX)]: v for k, v in rec.items()
           if k.startswith(_STALL_PREFIX) and k.endswith(_STALL_SUFFIX)
           and isinstance(v, float)}
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


@dataclass
class Profiled:
    label: str
    metrics: dict
    stalls: dict[str, float]
    instructions: list[dict]
    #: the source page's first lines when no instruction could be read from it (what this
    #: ncu printed instead, kept in the results file)
    source_head: list[str] | None = None

    def to_dict(self) -> dict:
        return {"label": self.label, "metrics": self.metrics, "stalls": self.stalls,
                "instructions": self.instructions, "source_head": self.source_head}


def _ncu(ncu: str, *args: str, timeout: int = 600) -> str:
    done = subprocess.run([ncu, *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"ncu {' '.join(args[:4])}... failed: {' | '.join(tail)}")
    return done.stdout


def profile_command(ncu: str, label: str, kernel: str, command: list[str], rep: Path
                    ) -> Profiled:
    """Profile the first launch of `kernel` (ncu's -k filter) in `command`."""
    metrics = ",".join(m for _, m in METRICS) + "," + STALLS
    _ncu(ncu, "--clock-control", "none", "-k", kernel, "-c", "1", "--metrics", metrics,
         "--section", "WarpStateStats", "--section", "SourceCounters", "--export", str(rep),
         "-f", *command)
    rep_file = rep if rep.suffix == ".ncu-rep" else rep.with_name(rep.name + ".ncu-rep")
    recs = parse_raw(_ncu(ncu, "--import", str(rep_file), "--page", "raw", "--csv",
                          "--print-units", "base"))
    if not recs:
        raise RuntimeError(f"ncu profiled no kernel matching {kernel!r} in {' '.join(command)}")
    rec = recs[0]
    head = None
    try:
        source = _ncu(ncu, "--import", str(rep_file), "--page", "source", "--csv",
                      "--print-source", "sass")
        instructions = parse_source(source)
        if not instructions:
            head = source.splitlines()[:6]
    except RuntimeError as exc:
        instructions, head = [], [str(exc)]
    picked = {label_: rec.get(m) for label_, m in METRICS}
    return Profiled(label, picked, stalls(rec), instructions, head)


def profile(rung_label: str, shape: tuple[int, int, int], out_dir: Path,
            config: str | None = None) -> tuple[Profiled, Profiled]:
    """The rung and cuBLAS at `shape`, profiled (reports written under out_dir)."""
    ncu = find_ncu()
    M, N, K = shape
    out_dir.mkdir(parents=True, exist_ok=True)
    run = [sys.executable, "-m", "sgemmlab", "run", "-k", rung_label, "--shape", f"{M},{N},{K}"]
    if config:
        run += ["--config", config]
    mine = profile_command(ncu, rung_label, "regex:^sgemm$", run, out_dir / f"{rung_label}")
    theirs = profile_command(ncu, "cublas", "regex:gemm",
                             [sys.executable, "-c", _CUBLAS.format(M=M, N=N, K=K)],
                             out_dir / "cublas")
    return mine, theirs


def _fmt(v) -> str:
    if not isinstance(v, float):
        return "—" if v in (None, "") else str(v)
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def digest(mine: Profiled, theirs: Profiled, stall_rows: int = 8) -> str:
    """The side-by-side text: metrics, the largest stall reasons, the rung's hottest
    instructions. Fits 100 columns."""
    w = max(len(lbl) for lbl, _ in METRICS) + 2
    lines = [f"{'':{w}}{mine.label:>18}{theirs.label:>18}"]
    for label, _ in METRICS:
        lines.append(f"{label:{w}}{_fmt(mine.metrics.get(label)):>18}"
                     f"{_fmt(theirs.metrics.get(label)):>18}")
    lines += ["", "stall reasons (warps stalled per issued instruction), largest first:"]
    reasons = list(dict.fromkeys([*list(mine.stalls)[:stall_rows],
                                  *list(theirs.stalls)[:stall_rows]]))
    for r in reasons[:stall_rows + 4]:
        lines.append(f"  {r:{w - 2}}{_fmt(mine.stalls.get(r)):>18}"
                     f"{_fmt(theirs.stalls.get(r)):>18}")
    if mine.instructions:
        lines += ["", f"{mine.label}: where its warps stalled (share of stall samples):"]
        for it in mine.instructions:
            lines.append(f"  {100 * it['share']:5.1f} %  {it['address']:>6}  "
                         f"{it['sass'][:80]}")
    else:
        lines += ["", f"{mine.label}: ncu gave no per-instruction stall samples"]
    return "\n".join(lines)
