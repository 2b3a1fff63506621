"""`sgemmlab firstcall`: how long a user's first call at each shape takes on a fresh machine.

A new process with an empty compile cache (the package's bundle of prebuilt cubins is all
it has: runtime/compiler.py) calls `sgemmlab.matmul` once at every problem of this GPU's
shipped table (its winners: each shape, layout and batch the table was measured at), and
times each call (`out=` a tensor made beforehand: allocating C is torch's work, the same
for any library) from entry to a synchronized GPU — the plan, dispatch, any module load or
compile, the launch and the product itself — then a second call at the same problem, so the
difference is what the first call cost. SGEMMLAB_FIRSTCALL_PROFILE=PATH writes a cProfile
of the process's very first call there. The very first call of the process also pays
whatever of sgemmlab's one-time set-up is not done by then: the process imports sgemmlab
first (it runs as `python -m sgemmlab.bench.firstcall`), then makes its CUDA context
(torch's) and its operands and times torch.matmul's own first call, as a program would,
while the import's prefetch (dispatch/prefetch.py: cuda.core, the shipped table) runs.
Whether a call had to compile is read from the cache directory (a compile writes an entry
there). Python's garbage collector runs before each problem, outside the timing (timeit's
practice), and any collection inside a call is timed and recorded beside it: on the H200 a
single 91 ms first call was 90.6 ms of one gen-2 collection of the process's heap. The target
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
    t_import = time.perf_counter()
    import sgemmlab

    import_ms = 1e3 * (time.perf_counter() - t_import)  # after torch, as a program has it
    from sgemmlab.runtime.compiler import cache_dir

    cubins = cache_dir() / "cubins"

    def entries() -> int:
        return len(list(cubins.glob("*.bin"))) if cubins.is_dir() else 0

    from sgemmlab.bench.check import uniform_matrices

    def operand(rows: int, cols: int, col_major: bool, batch: int):
        return uniform_matrices(rows, cols, col_major=col_major, batch=batch)

    todo = json.loads(Path(todo_path).read_text())
    # the reference: torch.matmul's (cuBLAS's) first call in this process, at the first
    # problem, before sgemmlab's (TF32 off, as sgemmlab's FP32)
    torch.backends.cuda.matmul.allow_tf32 = False
    p0 = todo[0]
    a0 = operand(p0["M"], p0["K"], p0["layout"][0] == "T", p0["batch"])
    b0 = operand(p0["K"], p0["N"], p0["layout"][1] == "T", p0["batch"])
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    torch.matmul(a0, b0)
    torch.cuda.synchronize()
    torch_first_ms = 1e3 * (time.perf_counter() - t0)
    # Python's cyclic garbage collector can pause any call: its pauses are timed, and each
    # call's record says how much of its time they took
    import gc

    pauses: list[float] = []
    began: list[float] = []

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            began.append(time.perf_counter())
        elif began:
            pauses.append(1e3 * (time.perf_counter() - began.pop()))

    gc.callbacks.append(on_gc)
    records = []
    profile = os.environ.get("SGEMMLAB_FIRSTCALL_PROFILE")
    for n, p in enumerate(todo):
        gc.collect()  # outside the timing, as timeit does: a collection inside a call is
        # the process's heap (torch's mostly), not the call's work; any left is recorded
        a = operand(p["M"], p["K"], p["layout"][0] == "T", p["batch"])
        b = operand(p["K"], p["N"], p["layout"][1] == "T", p["batch"])
        # the output is the caller's (out=): its allocation is torch's, not sgemmlab's
        out = torch.empty((p["batch"], p["M"], p["N"]) if p["batch"] > 1 else
                          (p["M"], p["N"]), device="cuda")
        torch.cuda.synchronize()
        times, gc_ms = [], []
        before = entries()
        for i in range(2):
            del pauses[:]
            prof = None
            if profile and n == 0 and i == 0:
                import cProfile

                prof = cProfile.Profile()
                prof.enable()
            t0 = time.perf_counter()
            sgemmlab.matmul(a, b, out=out)
            torch.cuda.synchronize()
            times.append(1e3 * (time.perf_counter() - t0))
            gc_ms.append(sum(pauses))
            if prof is not None:
                prof.disable()
                _dump(prof, profile)
        records.append({**p, "first_ms": times[0], "second_ms": times[1],
                        "compiled": entries() > before, "first_gc_ms": gc_ms[0]})
    Path(out_path).write_text(json.dumps({"records": records, "torch_first_ms": torch_first_ms,
                                          "import_after_torch_ms": import_ms}))


def _dump(prof, path: str) -> None:
    """The first call's profile, the 40 largest by cumulative time, as text."""
    import io
    import pstats

    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(40)
    Path(path).write_text(text.getvalue())


def measure(todo: list[dict], timeout: int = 900) -> dict:
    """Run the problems in a fresh process with an empty compile cache: {"records": one per
    problem, "torch_first_ms": torch.matmul's first call in that process}."""
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


#: `import sgemmlab` alone, in a fresh process (no torch before it): the budget a library
#: import should keep
IMPORT_TARGET_MS = 100.0


def import_times(runs: int = 7) -> list[float]:
    """`import sgemmlab` in `runs` fresh processes that import nothing else first (ms each:
    the import statement alone, timed inside the process)."""
    code = ("import time; t = time.perf_counter(); import sgemmlab; "
            "print(1e3 * (time.perf_counter() - t))")
    out = []
    for _ in range(runs):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=120, env=os.environ)
        if done.returncode != 0:
            raise RuntimeError("import sgemmlab failed: " + done.stderr.strip()[-400:])
        out.append(float(done.stdout.strip().splitlines()[-1]))
    return out


def summary(records: list[dict]) -> dict:
    firsts = sorted(r["first_ms"] for r in records)
    worst = max(records, key=lambda r: r["first_ms"])
    own = max(r["first_ms"] - r.get("first_gc_ms", 0.0) for r in records)
    return {"problems": len(records), "median_first_ms": firsts[len(firsts) // 2],
            "max_first_ms": worst["first_ms"], "worst": worst,
            "max_first_ms_without_gc": own,
            "gc_ms_in_first_calls": sum(r.get("first_gc_ms", 0.0) for r in records),
            "compiled": sum(r["compiled"] for r in records),
            "over_target": sum(r["first_ms"] >= TARGET_MS for r in records),
            "target_ms": TARGET_MS}


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2])
