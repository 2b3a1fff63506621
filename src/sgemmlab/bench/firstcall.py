"""`sgemmlab firstcall`: how long a user's first call at each shape takes on a fresh machine.

A new process with an empty compile cache (the package's bundle of prebuilt cubins is all
it has: runtime/compiler.py) calls `sgemmlab.matmul` once at every problem of this GPU's
shipped table (its winners: each shape, layout and batch the table was measured at), and
times each call (`out=` a tensor made beforehand: allocating C is torch's work, the same
for any library) from entry to a synchronized GPU — the plan, dispatch, any module load or
compile, the launch and the product itself — then a second call at the same problem, so the
difference is what the first call cost. SGEMMLAB_FIRSTCALL_PROFILE=PATH writes a cProfile
of the process's very first call there. The process makes its CUDA context (torch's) and
the first problem's operands, and times torch.matmul's own first call, as a program would;
then it times `import sgemmlab` (which, torch being imported, registers
torch.ops.sgemmlab.matmul and so loads the library) and, right after it, the first
problem's first call: that one pays the rest of sgemmlab's one-time set-up (the shipped
table is read by the first product, not by the import; cuda.core only where a kernel must
be compiled). Its record carries `import_to_first_ms`, from the import to the first product
synchronised, and which CUDA Python libraries it loaded (`library_imports` times what each
would cost). A second fresh process imports sgemmlab before torch, as a program may (the
import then loads the error types alone, and the first product the library), and makes
the first problem's call alone. The process is this file run as a program (`_RUN`), so
nothing of sgemmlab is loaded before the import it times; `import_times` times the import
in processes that import nothing else.
Whether a call had to compile is read from the cache directory (a compile writes an entry
there). Python's garbage collector runs before each problem, outside the timing (timeit's
practice), and any collection inside a call is timed and recorded beside it: on the H200 a
single 91 ms first call was 90.6 ms of one gen-2 collection of the process's heap. The
target: every first call under 50 ms on the H200, the process's first included.
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
    for w in table_mod.read_table(path).winners():
        key = (w["M"], w["N"], w["K"], w.get("layout", "NN"), w.get("batch", 1))
        if key not in seen:
            seen.add(key)
            out.append(dict(zip(("M", "N", "K", "layout", "batch"), key)))
    return out[:limit] if limit else out


def _operand(rows: int, cols: int, col_major: bool, batch: int):
    """A uniform float32 operand on the GPU, stored as bench.check.uniform_matrices stores
    it, made without importing sgemmlab's library (the process times that)."""
    import torch

    shape = (batch, cols, rows) if col_major else (batch, rows, cols)
    x = torch.rand(shape, device="cuda") * 2 - 1
    x = x.mT if col_major else x
    return x[0] if batch == 1 else x


def _output(p: dict):
    """The caller's output (out=): its allocation is torch's, not sgemmlab's."""
    import torch

    return torch.empty((p["batch"], p["M"], p["N"]) if p["batch"] > 1 else (p["M"], p["N"]),
                       device="cuda")


#: The two orders a program may import in: torch first (then `import sgemmlab` registers
#: torch.ops.sgemmlab.matmul, which loads the library), or sgemmlab first (the import loads
#: the error types alone, and the first product loads the rest)
ORDERS = ("torch-first", "sgemmlab-first")


def _child(todo_path: str, out_path: str, order: str = ORDERS[0]) -> None:
    """In the fresh process: every problem once, then again; write the records."""
    import gc

    early = None
    if order == "sgemmlab-first":
        t0 = time.perf_counter()
        import sgemmlab  # noqa: F401

        early = 1e3 * (time.perf_counter() - t0)
    import torch

    torch.cuda.init()
    torch.zeros(1, device="cuda")  # torch's context, as a user's program has it
    todo = json.loads(Path(todo_path).read_text())
    # the reference: torch.matmul's (cuBLAS's) first call in this process, at the first
    # problem, before sgemmlab's (TF32 off, as sgemmlab's FP32)
    torch.backends.cuda.matmul.allow_tf32 = False
    p0 = todo[0]
    a0 = _operand(p0["M"], p0["K"], p0["layout"][0] == "T", p0["batch"])
    b0 = _operand(p0["K"], p0["N"], p0["layout"][1] == "T", p0["batch"])
    out0 = _output(p0)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    torch.matmul(a0, b0)
    torch.cuda.synchronize()
    torch_first_ms = 1e3 * (time.perf_counter() - t0)
    # Python's cyclic garbage collector can pause any call: its pauses are timed, and each
    # call's record says how much of its time they took
    pauses: list[float] = []
    began: list[float] = []

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            began.append(time.perf_counter())
        elif began:
            pauses.append(1e3 * (time.perf_counter() - began.pop()))

    gc.collect()
    gc.callbacks.append(on_gc)
    profile = os.environ.get("SGEMMLAB_FIRSTCALL_PROFILE")
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
    # the import, then at once the first product: what a program's first call costs
    t_import = time.perf_counter()
    import sgemmlab

    t_first = time.perf_counter()
    if prof is not None:
        prof.enable()
    sgemmlab.matmul(a0, b0, out=out0)
    torch.cuda.synchronize()
    t_done = time.perf_counter()
    if prof is not None:
        prof.disable()
        _dump(prof, profile)
    import_ms = 1e3 * (t_first - t_import) if early is None else early
    first0 = {"first_ms": 1e3 * (t_done - t_first), "import_ms": import_ms, "order": order,
              "import_to_first_ms": import_ms + 1e3 * (t_done - t_first),
              "first_gc_ms": sum(pauses),
              # which of the CUDA Python libraries the first product loaded
              "loaded": sorted(m for m in LIBRARIES if m in sys.modules)}
    from sgemmlab.runtime.compiler import cache_dir

    cubins = cache_dir() / "cubins"

    def entries() -> int:
        return len(list(cubins.glob("*.bin"))) if cubins.is_dir() else 0

    records = []
    for n, p in enumerate(todo):
        gc.collect()  # outside the timing, as timeit does: a collection inside a call is
        # the process's heap (torch's mostly), not the call's work; any left is recorded
        if n == 0:  # its first call was timed with the import
            a, b, out = a0, b0, out0
        else:
            a = _operand(p["M"], p["K"], p["layout"][0] == "T", p["batch"])
            b = _operand(p["K"], p["N"], p["layout"][1] == "T", p["batch"])
            out = _output(p)
        torch.cuda.synchronize()
        times, gc_ms = [], []
        before = entries()
        for _ in range(1 if n == 0 else 2):
            del pauses[:]
            t0 = time.perf_counter()
            sgemmlab.matmul(a, b, out=out)
            torch.cuda.synchronize()
            times.append(1e3 * (time.perf_counter() - t0))
            gc_ms.append(sum(pauses))
        if n == 0:  # (the empty cache had no entry before the first call)
            records.append({**p, **first0, "second_ms": times[0], "compiled": before > 0})
        else:
            records.append({**p, "first_ms": times[0], "second_ms": times[1],
                            "compiled": entries() > before, "first_gc_ms": gc_ms[0]})
    Path(out_path).write_text(json.dumps({"records": records, "torch_first_ms": torch_first_ms,
                                          # (imported before torch: not this figure)
                                          "import_after_torch_ms": import_ms if early is None
                                          else None}))


def _dump(prof, path: str) -> None:
    """The first call's profile, the 40 largest by cumulative time, as text."""
    import io
    import pstats

    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(40)
    Path(path).write_text(text.getvalue())


#: Runs this file as a program, not as a module of the package: `python -m` would import
#: sgemmlab before the program does, and the import is part of what is timed.
_RUN = ("import sys; path = sys.argv[1]; sys.argv = sys.argv[1:]; exec(compile(open(path)"
        ".read(), path, 'exec'), {'__name__': '__main__', '__file__': path})")


def measure(todo: list[dict], timeout: int = 900) -> dict:
    """Run the problems in a fresh process with an empty compile cache, torch imported
    first: {"records": one per problem, "torch_first_ms": torch.matmul's first call in that
    process, "sgemmlab_first": the first problem's record in a process that imports sgemmlab
    before torch}."""
    got = _fresh(todo, ORDERS[0], timeout)
    got["sgemmlab_first"] = _fresh(todo[:1], ORDERS[1], timeout)["records"][0]
    return got


def _fresh(todo: list[dict], order: str, timeout: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        todo_path, out_path = Path(tmp) / "todo.json", Path(tmp) / "out.json"
        todo_path.write_text(json.dumps(todo))
        env = {**os.environ, "SGEMMLAB_CACHE_DIR": str(Path(tmp) / "empty-cache")}
        env.pop("SGEMMLAB_BUNDLE_DIR", None)  # the package's own bundle, as installed
        if order != ORDERS[0]:
            env.pop("SGEMMLAB_FIRSTCALL_PROFILE", None)  # the main run's first call only
        done = subprocess.run([sys.executable, "-c", _RUN, str(Path(__file__).resolve()),
                               str(todo_path), str(out_path), order], env=env,
                              capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError("the fresh process failed: "
                               + (done.stderr or done.stdout).strip()[-600:])
        return json.loads(out_path.read_text())


#: The CUDA Python libraries whose import a first product would pay for (none, when its
#: kernels come from the bundle: runtime/driver.py)
LIBRARIES = ("cuda.bindings.driver", "cuda.bindings.nvrtc", "cuda.core")


def library_imports() -> dict[str, float]:
    """What importing each of LIBRARIES costs (ms, in that order, each after the ones before
    it) in a fresh process that has imported torch and made its CUDA context, as the first
    calls' process has: what a first product that needed them would pay."""
    code = ("import json, time, torch; torch.zeros(1, device='cuda'); out = {}\n"
            f"for name in {LIBRARIES!r}:\n"
            "    t = time.perf_counter(); __import__(name)\n"
            "    out[name] = 1e3 * (time.perf_counter() - t)\n"
            "print(json.dumps(out))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=os.environ)
    if done.returncode != 0:
        raise RuntimeError("timing the libraries' imports failed: " + done.stderr[-400:])
    return json.loads(done.stdout.strip().splitlines()[-1])


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
            "target_ms": TARGET_MS,
            # the process's first product, from `import sgemmlab` to its result
            "import_to_first_ms": records[0].get("import_to_first_ms") if records else None,
            "first_product_loaded": records[0].get("loaded") if records else None}


if __name__ == "__main__":
    _child(*sys.argv[1:4])
