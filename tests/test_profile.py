"""`sgemmlab profile` without a GPU or ncu: what it parses from ncu's CSV pages (raw
metrics with their units row, per-instruction stall samples), the digest it prints, and
the one sentence it says where ncu is missing."""

from __future__ import annotations

from typer.testing import CliRunner

from sgemmlab.bench.probes import profile as prof
from sgemmlab.cli import app

_STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
RAW = "\n".join([
    "==PROF== Disconnected from process 1234",
    ",".join(f'"{c}"' for c in ["ID", "Kernel Name", "gpu__time_duration.sum",
                                 "smsp__issue_active.avg.pct_of_peak_sustained_active",
                                 _STALL.format("long_scoreboard"),
                                 _STALL.format("mio_throttle"), "smsp__inst_executed.sum"]),
    '"","","nsecond","%","ratio","ratio","inst"',
    '"0","sgemm","2,784,000","81.25","0.12","0.85","1,234,567"', ""])

SOURCE = "\n".join([
    '"Address","Source","Warp Stall Sampling (All Samples)",'
    '"Warp Stall Sampling (Not-issued Samples)"',
    '"00007f00 00000010","FFMA R1, R2, R3, R1","10","4"',
    '"00007f00 00000020","LDS.128 R4, [R5]","30","20"',
    '"00007f00 00000030","BAR.SYNC.DEFER_BLOCKING 0x0","60","55"',
    '"00007f00 00000040","EXIT","0","0"', ""])


def test_raw_page_metrics_skip_units_and_read_thousands():
    (rec,) = prof.parse_raw(RAW)
    assert rec["Kernel Name"] == "sgemm"
    assert rec["gpu__time_duration.sum"] == 2_784_000.0
    assert rec["smsp__inst_executed.sum"] == 1_234_567.0
    assert prof.stalls(rec) == {"mio_throttle": 0.85, "long_scoreboard": 0.12}


def test_source_page_ranks_instructions_by_stall_samples():
    top = prof.parse_source(SOURCE, top=2)
    assert [t["sass"].split()[0] for t in top] == ["BAR.SYNC.DEFER_BLOCKING", "LDS.128"]
    assert abs(top[0]["share"] - 0.6) < 1e-12 and top[1]["samples"] == 30.0
    assert prof.parse_source('"Address","Other"\n"1","2"\n') == []


def test_the_digest_is_side_by_side_and_fits_100_columns():
    (rec,) = prof.parse_raw(RAW)
    mine = prof.Profiled("14_streamk", {lbl: rec.get(m) for lbl, m in prof.METRICS},
                         prof.stalls(rec), prof.parse_source(SOURCE))
    theirs = prof.Profiled("cublas", {"issue active (% of peak)": 88.0}, {"wait": 0.3}, [])
    text = prof.digest(mine, theirs)
    assert max(map(len, text.splitlines())) <= 100
    issue = next(ln for ln in text.splitlines() if ln.startswith("issue active"))
    assert issue.split()[-2:] == ["81.2", "88"]
    assert "mio_throttle" in text and "wait" in text and "BAR.SYNC" in text


def test_without_ncu_it_says_so_in_one_sentence(monkeypatch, tmp_path):
    monkeypatch.setenv("NCU", str(tmp_path / "no-such-ncu"))
    monkeypatch.setenv("PATH", str(tmp_path))
    done = CliRunner().invoke(app, ["profile", "-k", "14", "--size", "256"])
    assert done.exit_code == 1
    assert "ncu" in done.output and "not installed" in done.output
    lines = done.output.strip().splitlines()  # one sentence, folded to 100 columns
    assert max(map(len, lines)) <= 100 and all(line.startswith("  ") for line in lines[1:])


def test_a_ragged_source_page_does_not_break_the_digest():
    ragged = SOURCE + '"00007f00 00000050","IADD3 R1, R1, 1","5","1","extra","cells"\n'
    top = prof.parse_source(ragged)
    assert top[0]["sass"].startswith("BAR.SYNC") and len(top) == 4


def test_the_kernel_name_line_before_the_header_is_skipped():
    top = prof.parse_source('"Kernel Name","sgemm",\n' + SOURCE)
    assert [t["sass"].split()[0] for t in top[:2]] == ["BAR.SYNC.DEFER_BLOCKING", "LDS.128"]
