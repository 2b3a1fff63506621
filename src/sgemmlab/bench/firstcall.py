"""`sgemmlab firstcall`: how long a user's first call at each shape takes on a fresh machine.

A new process with an empty compile cache (the package's bundle of prebuilt cubins is all
it has: runtime/compiler.py) calls `sgemmlab.matmul` once at every problem of this GPU's
shipped table (its winners: each shape, layout and batch the table was measured at), and
times each call from entry to a synchronized GPU — the plan, dispatch, any module load or
compile, the launch and the product itself — then a second call at the same problem, so the
difference is what the first call cost. The very first call of the process also pays
sgemmlab's one-time set-up (the CUDA context is torch's, made before). Whether a call had
to compile is read from the cache directory (a compile writes an entry there). The target
(issue 17): every first call under 50 ms on the H200.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_MS = 50.0


def problems(gpu_name: str, limit: int | None = None) -> list[dict]:
    """The shipped table's problems for `gpu_name` (M, N, K, layout, batch), in its order."""
    from ..dispatch import table as table_mod

    path = table_mod.package_table_path(gpu_name)
    if not path.is_file():
        raise ValueError(f"no shipped table for {gpu_name}: nothing to measure")
    seen, out = set(), []
    for w in table_mod.read_table(path).data["winners"]:
        key = (w["M"], w["N"], w["K"], w.get("layout", "NN"), w.get("batch", 1))
        if key not in seen:
            seen.add(key)
            out.append(dict(zip(("M", "N", "K", "layout", "batch"), key)))
    return out[:limit] if limit else out


def _child(todo_path: str, out_path: str) -> None:
    """In the fresh process: every problem once, then again; write the records."""
    import torch

    torch.cuda.init()
    torch.zeros(1, device="cuda")  # torch's context, as a user's program has it
    torch.cuda.synchronize()
    import sgemmlab
    from sgemmlab.runtime.compiler import cache_dir

    cubins = cache_dir() / "cubins"

    def entries() -> int:
        return len(list(cubins.glob("*.bin"))) if cubins.is_dir() else 0

    def operand(rows: int, cols: int, col_major: bool, batch: int):
        shape = (batch, cols, rows) if col_major else (batch, rows, cols)
        x = torch.rand(shape, device="cuda")
        x = x.mT if col_major else x
        return x[0] if batch == 1 else x

    records = []
    for p in json.loads(Path(todo_path).read_text()):
        a = operand(p["M"], p["K"], p["layout"][0] == "T", p["batch"])
        b = operand(p["K"], p["N"], p["layout"][1] == "T", p["batch"])
        torch.cuda.synchronize()
        times = []
        before = entries()
        for _ in range(2):
            t0 = time.perf_counter()
            sgemmlab.matmul(a, b)
            torch.cuda.synchronize()
            times.append(1e3 * (time.perf_counter() - t0))
        records.append({**p, "first_ms": times[0], "second_ms": times[1],
                        "compiled": entries() > before})
    Path(out_path).write_text(json.dumps(records))


def measure(todo: list[dict], timeout: int = 900) -> list[dict]:
    """Run the problems in a fresh process with an empty compile cache; its records."""
    with tempfile.TemporaryDirectory() as tmp:
        todo_path, out_path = Path(tmp) / "todo.json", Path(tmp) / "out.json"
        todo_path.write_text(json.dumps(todo))
        env = {**os.environ, "SGEMMLAB_CACHE_DIR": str(Path(tmp) / "empty-cache")}
        env.pop("SGEMMLAB_BUNDLE_DIR", None)  # the package's own bundle, as installed
        done = subprocess.run([sys.executable, "-m", "sgemmlab.bench.firstcall",
                               str(todo_path), str(out_path)], env=env, capture_output=True,
                              text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError("the fresh process failed: "
                               + (done.stderr or done.stdout).strip()[-600:])
        return json.loads(out_path.read_text())


def summary(records: list[dict]) -> dict:
    firsts = sorted(r["first_ms"] for r in records)
    worst = max(records, key=lambda r: r["first_ms"])
    return {"problems": len(records), "median_first_ms": firsts[len(firsts) // 2],
            "max_first_ms": worst["first_ms"], "worst": worst,
            "compiled": sum(r["compiled"] for r in records),
            "over_target": sum(r["first_ms"] >= TARGET_MS for r in records),
            "target_ms": TARGET_MS}


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2])
