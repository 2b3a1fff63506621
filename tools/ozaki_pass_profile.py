"""The scheme's passes (oz_scale, oz_crt, ...) under Nsight Compute's full set: one product of
`tools/ozaki_once.py` at --size (its second, warm one: the first --launches launches are
skipped), the next --launches launches of the kernels --kernels
matches, each with its memory, issue, occupancy and stall metrics and its hottest SASS
instructions (PC sampling). What `tools/h200.sh passprofile` runs.

    PYTHONPATH=src python3 tools/ozaki_pass_profile.py --size 4096 \
        --kernels '^(oz_scale|oz_crt)$' --launches 3 --out results/.../ncu-passes.txt

The text written holds, per launch: the metrics whose names contain one of KEEP, the stall
reasons (warps per issued instruction), and the 16 instructions with the most warp-stall
samples (bench/probes/profile.parse_source).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

#: substrings of the metric names kept in the digest
KEEP = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        "smsp__issue_active.avg.pct_of_peak_sustained_active",
        "sm__warps_active.avg.pct_of_peak_sustained_active",
        "smsp__warps_eligible.avg.per_cycle_active", "smsp__inst_executed.sum",
        "sm__cycles_elapsed.avg.per_second", "launch__occupancy_limit",
        "launch__registers_per_thread", "launch__grid_size", "launch__shared_mem_per_block",
        "sm__inst_executed_pipe_", "_pipe_fp64", "pipe_alu", "pipe_fma",
        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared", "lts__t_bytes.sum",
        "smsp__sass_inst_executed_op_global", "smsp__sass_inst_executed_op_shared",
        "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
        "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
        "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
        "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum")


def main() -> None:
    from sgemmlab.bench.probes.profile import _ncu, find_ncu, parse_raw, parse_source, stalls

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=4096)
    p.add_argument("--kernels", default="^(oz_scale|oz_crt)$")
    p.add_argument("--launches", type=int, default=3)
    p.add_argument("--gemm", default="", help="rung 26's configuration over its seed")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    ncu = find_ncu()
    once = [sys.executable, str(Path(__file__).with_name("ozaki_once.py")), "--size",
            str(args.size), "--gemm", args.gemm]
    lines = [f"# {' '.join(once)}; kernels {args.kernels}, first {args.launches} launches"]
    with tempfile.TemporaryDirectory() as tmp:
        rep = Path(tmp) / "passes"
        _ncu(ncu, "--clock-control", "none", "--set", "full", "-k", f"regex:{args.kernels}",
             "-c", str(args.launches),
             "--launch-skip", str(args.launches), "--export", str(rep), "-f", *once, timeout=900)
        rep_file = rep.with_name(rep.name + ".ncu-rep")
        recs = parse_raw(_ncu(ncu, "--import", str(rep_file), "--page", "raw", "--csv",
                              "--print-units", "base"))
        for i, rec in enumerate(recs):
            name = rec.get("Kernel Name", "?")
            lines += ["", f"=== launch {i}: {name}"]
            lines += [f"{k} = {v}" for k, v in sorted(rec.items())
                      if isinstance(k, str) and any(s in k for s in KEEP)]
            lines += ["stall reasons (warps per issued instruction):"]
            lines += [f"  {k:36s} {v:.3f}" for k, v in list(stalls(rec).items())[:10]]
        try:  # the source page, per launch: split where a kernel's header starts again
            text = _ncu(ncu, "--import", str(rep_file), "--page", "source", "--csv",
                        "--print-source", "sass")
            parts, cur = [], []
            for ln in text.splitlines():
                if ln.startswith('"Kernel Name"') and cur:
                    parts.append(cur)
                    cur = []
                cur.append(ln)
            parts.append(cur)
            for i, part in enumerate(parts):
                lines += ["", f"=== launch {i}: hottest instructions (warp-stall samples)"]
                lines += [f"  {ins['share']:6.1%}  {ins['address']:>8}  {ins['sass']}"
                          for ins in parse_source("\n".join(part), top=16)]
        except RuntimeError as exc:
            lines += ["", f"source page: {exc}"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
