"""Rung 19 (TF32 wgmma, 3xTF32) on the GPU: checked against float64, timed against cuBLAS.

Every variant is compiled, then run in a child process with a time limit, so that one run
reports everything even when a variant hangs or crashes.

    PYTHONPATH=src python3 tools/hopper_probe.py                    # defaults, ~2-3 minutes
    PYTHONPATH=src python3 tools/hopper_probe.py --shapes 4096,8192 --variants tf32
    PYTHONPATH=src python3 tools/hopper_probe.py --variants "tf32:STAGES=3,3xtf32"

Variants (VARIANTS below) are kernels/hopper/19_tf32_wgmma.cu with macros; NAME:MACRO=V:...
overrides a variant's macros. Every kernel is built with WATCHDOG=1 unless --no-watchdog: a
barrier wait of more than a second ends the launch (wrong, not hung) and the kernel's global
`watchdog` says which barrier, block, thread, tile and k-tile; the probe reports it.

Per shape, in the child: A (M x K) and B^T (N x K) uniform in [-1, 1], stored with rows
padded to a multiple of 4 floats and NaN in the padding (a read past K shows); C poisoned
with NaN; the float64 reference on the GPU. Checks: alpha = 1, beta = 0 on the persistent
grid (min(tiles, SMs) blocks); for small problems also 2 blocks (each walks many tiles: the
ring's phases carry across tiles) and alpha = 0.75, beta = -0.5; with TAIL also 3 blocks
and alpha, beta (the last partial wave split along K: its workspace, counters and fix-up).
Errors: the project's metric (bench/check.py: max|C - ref| / max|ref|) against FP32's
bound, the same for torch.matmul in FP32 and in TF32, and max |C - ref|_ij / (|a_i| |b_j|);
"err/SGEMM" is the error over cuBLAS SGEMM's on the same inputs. The target of issue 14
(3xTF32 variants): >= 2.5x cuBLAS SGEMM with err/SGEMM <= 1, per shape. Timing: the
project's measurement core (bench/measure.py: paired alternating rounds, CUDA events, L2
flushed before each launch unless --no-flush), against torch.matmul with TF32 off (cuBLAS
SGEMM) and on. 3xTF32 times include its B pre-pass (also timed alone).

Prints a table and writes every number to $SGEMMLAB_RESULTS_DIR/<gpu>/hopper-probe-<UTC>.json
(default results/), rewritten after each child so that a run cut short keeps what it did.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
import types
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src"
sys.path.insert(0, str(SRC))
# the kernels' terms, the TAIL split and the shared-memory size, as the library has them
from sgemmlab import registry  # noqa: E402
from sgemmlab.runtime.hopper import BK, BM, PREP, tail_splits, tail_workspace  # noqa: E402,F401

#: the kernel file by the probe's SPLIT3 key: 0 rung 19 (TF32), 1 rung 20 (3xTF32)
KERNELS = {0: "hopper/19_tf32_wgmma.cu", 1: "hopper/20_3xtf32_wgmma.cu"}
ENTRY, SPLIT_ENTRY = "sgemm", "prep"
ARCH = "sm_90a"  # wgmma and setmaxnreg exist only for the arch-specific target
THREADS = 384  # one producer and two consumer warpgroups
SPLIT_BLOCK = (32, 8)

#: name -> (macros, what it is). DEFAULT_VARIANTS run by default.
_P = {"SPLIT3": 1, "BN": 128, "STAGES": 4, "TAIL": 0}
VARIANTS = {
    "tf32": ({"BN": 256, "STAGES": 4}, "TF32 wgmma, 128 x 256 tiles, 4 stages (NOT FP32)"),
    "tf32_bn128": ({"BN": 128, "STAGES": 6}, "TF32 wgmma, 128 x 128 tiles, 6 stages"),
    "3xtf32_nofence": ({**_P, "PROMOTE": 1, "PROXY_FENCE": 0},
                       "3xTF32 without the proxy fence before a stage's release"),
    "3xtf32_p1": ({**_P, "PROMOTE": 1},
                  "3xTF32, the wgmma sum FADDed into registers every k-tile, one k-tile in "
                  "flight"),
    "3xtf32_p2": ({**_P, "PROMOTE": 2}, "3xTF32, promoted every 2 k-tiles, one in flight"),
    "3xtf32_p4": ({**_P, "PROMOTE": 4}, "3xTF32, promoted every 4 k-tiles, one in flight"),
    "3xtf32_p1_serial": ({**_P, "PROMOTE": 1, "INFLIGHT": 0},
                         "3xTF32, promoted every k-tile, nothing in flight while splitting A"),
    "3xtf32_p1_tail": ({**_P, "PROMOTE": 1, "TAIL": 1},
                       "3xtf32_p1, the last partial wave split along K"),
    "3xtf32_p2_tail": ({**_P, "PROMOTE": 2, "TAIL": 1},
                       "3xtf32_p2, the last partial wave split along K"),
}
DEFAULT_VARIANTS = ("tf32,3xtf32_p1,3xtf32_p2,3xtf32_p4,3xtf32_p1_tail,"
                    "3xtf32_p2_tail,3xtf32_p1_serial")
DEFAULT_SHAPES = "128x128x32,256x256x256,1000x1000x1000,4096x4096x4096,8192x8192x8192"
MARK = "@@PROBE "  # a child's result lines start with this
SMALL = 2**31  # M*N*K up to this also gets the 2-block and the alpha/beta checks
TARGET_SPEEDUP, TARGET_ERR = 2.5, 1.0  # issue 14: x cuBLAS SGEMM, and error / SGEMM's


# -- what the host must know of the kernel ----------------------------------------------------
def smem_bytes(macros: dict) -> int:
    """Dynamic shared memory of a launch (the registry's formula: rung 20's with SPLIT3, rung
    19's without); the kernel checks it (SMEM_EXPECT)."""
    return registry.rung(20 if macros.get("SPLIT3") else 19).dynamic_smem(macros)


def variant_macros(spec: str, watchdog: bool = True) -> tuple[str, dict]:
    """'NAME' or 'NAME:MACRO=V:MACRO=V' -> (label, the macros to compile with)."""
    name, *overrides = spec.split(":")
    if name not in VARIANTS:
        raise SystemExit(f"unknown variant {name!r}; choose from {', '.join(VARIANTS)}")
    macros = dict(VARIANTS[name][0])
    for item in overrides:
        key, _, value = item.partition("=")
        macros[key.strip().upper()] = int(value)
    macros.setdefault("GROUP_M", 8)
    macros["WATCHDOG"] = int(watchdog)
    macros["SMEM_EXPECT"] = smem_bytes(macros)
    return spec, macros


def parse_shape(text: str) -> tuple[int, int, int]:
    parts = [int(x) for x in text.lower().split("x")]
    if len(parts) == 1:
        parts *= 3
    if len(parts) != 3 or min(parts) < 1:
        raise SystemExit(f"bad shape {text!r}: N or MxNxK, all >= 1")
    return tuple(parts)


def tiles(M: int, N: int, BN: int) -> int:
    return -(-M // BM) * -(-N // BN)


def _lab():
    """Import the project's modules; if the package's __init__ does not import (another
    engineer's half-done edit), load its modules without it."""
    if str(SRC) not in sys.path:
        sys.path.insert(0, str(SRC))
    note = None
    try:
        import sgemmlab  # noqa: F401
    except Exception as exc:  # anything: the modules we need may still load
        for k in [k for k in sys.modules if k == "sgemmlab" or k.startswith("sgemmlab.")]:
            del sys.modules[k]
        pkg = types.ModuleType("sgemmlab")
        pkg.__path__ = [str(SRC / "sgemmlab")]
        sys.modules["sgemmlab"] = pkg
        note = f"import sgemmlab failed ({exc!r}); its modules were loaded without __init__"
    return note


def compile_variant(macros: dict):
    """(the GEMM, the B pre-pass or None), each a runtime.compiler.Compiled."""
    from sgemmlab.runtime.compiler import compile_kernel

    kernel_macros = dict(macros)
    split3 = kernel_macros.pop("SPLIT3", 0)
    gemm = compile_kernel(KERNELS[split3], kernel_macros, ARCH)
    split = None
    if split3:
        split = compile_kernel(PREP, {"PREP": 1}, ARCH)
    return gemm, split


_OPCODE = re.compile(r"/\*[0-9a-f]+\*/\s+(?:@!?U?P\S+\s+)?([A-Z][A-Z0-9_]*)((?:\.\w+)*)")


def sass_summary(cubin: bytes) -> dict:
    """Counts of the instructions that show the Hopper path (HGMMA, UTMALDG, SYNCS, ...) and
    of local memory, and the registers the code touches (R0 .. the highest: the consumers'
    after setmaxnreg; ptxas reports the entry's), from nvdisasm (or cuobjdump); {'error':
    ...} without either."""
    text = None
    try:
        from sgemmlab.inspect.sass import disassemble

        text = disassemble(cubin)
    except Exception as exc:  # no nvdisasm here: try cuobjdump
        import shutil
        import tempfile

        tool = shutil.which("cuobjdump")
        if tool is None:
            return {"error": f"no disassembler ({exc})"}
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(cubin)
            f.flush()
            done = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True,
                                  timeout=120)
            text = done.stdout
    counts: dict[str, int] = {}
    shapes: dict[str, int] = {}
    for op, mods in _OPCODE.findall(text):
        counts[op] = counts.get(op, 0) + 1
        if op == "HGMMA":
            shapes[op + mods] = shapes.get(op + mods, 0) + 1
    keys = ("HGMMA", "UTMALDG", "SYNCS", "USETMAXREG", "WARPGROUP", "LDS", "STG", "LDL", "STL",
            "FFMA", "FADD", "ATOMG", "BAR")
    used = [int(r) for r in re.findall(r"\bR(\d+)\b", text)]
    return {"counts": {k: counts.get(k, 0) for k in keys}, "hgmma": shapes,
            "instructions": sum(counts.values()), "registers_used": max(used, default=-1) + 1}


# -- the child: one variant, several shapes, on the GPU ---------------------------------------
def emit(**record) -> None:
    print(MARK + json.dumps(record, default=str), flush=True)


class Kernel:
    """The variant loaded on the GPU, with what a launch needs."""

    def __init__(self, macros: dict):
        from sgemmlab.runtime.tma import RawKernel

        gemm, split = compile_variant(macros)
        self.macros = macros
        self.bn = macros["BN"]
        self.gemm = RawKernel(gemm.cubin, ENTRY, smem_bytes(macros))
        self.split = RawKernel(split.cubin, SPLIT_ENTRY) if split else None

    def watchdog(self) -> dict | None:
        """What the kernel's watchdog recorded (WATCHDOG=1), zeroed for the next launch;
        None when no wait gave up. Reads after the launch has finished."""
        if not self.macros.get("WATCHDOG"):
            return None
        import numpy as np
        from cuda.bindings import driver

        ptr, size = self.gemm.global_symbol("watchdog")
        host = np.zeros(size // 8, np.uint64)
        (err,) = driver.cuMemcpyDtoH(host.ctypes.data, ptr, size)
        if err != driver.CUresult.CUDA_SUCCESS:
            return {"error": f"reading the watchdog: {err}"}
        if not host[0]:
            return None
        (err,) = driver.cuMemsetD8(ptr, 0, size)
        stages = self.macros["STAGES"]
        which = int(host[3])
        return {"block": int(host[1]), "thread": int(host[2]),
                "barrier": (f"full[{which}] (a consumer waited for a tile's bytes)"
                            if which < stages else
                            f"empty[{which - stages}] (the producer waited for the consumers)"),
                "parity": int(host[4]), "tile": int(host[5]), "ktile": int(host[6]),
                "state": f"{int(host[7]):#018x}"}

    def attributes(self) -> dict:
        out = {k: self.gemm.attribute(k) for k in ("NUM_REGS", "MAX_THREADS_PER_BLOCK",
                                                   "LOCAL_SIZE_BYTES", "SHARED_SIZE_BYTES")}
        out["dynamic_smem"] = self.gemm.dynamic_smem
        return out


class Problem:
    """Operands of one shape on the GPU, the float64 reference and the bound launches."""

    def __init__(self, kern: Kernel, M: int, N: int, K: int, seed: int):
        import numpy as np
        import torch

        from sgemmlab.runtime.tma import Params, Tiled2D, encode_tiled_2d

        self.M, self.N, self.K = M, N, K
        self.kern = kern
        g = torch.Generator(device="cuda").manual_seed(seed)
        ldk = -(-K // 4) * 4  # rows 16-byte aligned, as the copy engine needs

        def operand(rows: int):
            store = torch.full((rows, ldk), float("nan"), device="cuda")  # NaN padding
            view = store[:, :K]
            view.copy_(torch.rand(rows, K, device="cuda", generator=g) * 2 - 1)
            return store, view

        self.a_store, self.A = operand(M)
        self.bt_store, self.Bt = operand(N)  # B^T: N x K, K contiguous (B column-major)
        self.C = torch.empty(M, N, device="cuda")
        self.ref = self.A.double() @ self.Bt.double().T
        self.ldk = ldk
        maps = [encode_tiled_2d(Tiled2D(self.A.data_ptr(), M, K, ldk, BM, BK))]
        if kern.split:
            self.big = torch.full((N, ldk), float("nan"), device="cuda")
            self.small = torch.full((N, ldk), float("nan"), device="cuda")
            maps += [encode_tiled_2d(Tiled2D(t.data_ptr(), N, K, ldk, kern.bn, BK))
                     for t in (self.big, self.small)]
            self.split_params = Params([self.Bt.data_ptr(), np.int64(ldk), _i32(N), _i32(K),
                                        _i32(0), self.big.data_ptr(), self.small.data_ptr(),
                                        np.int64(ldk), _i32(1)])
        else:
            maps.append(encode_tiled_2d(Tiled2D(self.Bt.data_ptr(), N, K, ldk, kern.bn, BK)))
        self.maps = maps
        self.tiles = tiles(M, N, kern.bn)
        self.ktiles = -(-K // BK)
        self.stream = torch.cuda.current_stream().cuda_stream
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count
        self.tail = bool(kern.macros.get("TAIL"))
        self.work = self.counters = None
        if self.tail:  # enough for every grid the checks use; counters start (and end) zero
            need = [tail_workspace(self.tiles, g, self.ktiles)
                    for g in (min(self.tiles, self.sms), 2, 3)]
            self.work = torch.full((max(1, max(n for n, _ in need)),), float("nan"),
                                   device="cuda")
            self.counters = torch.zeros(max(1, max(c for _, c in need)), dtype=torch.int32,
                                        device="cuda")
        self._params = {}

    def splits(self, grid: int) -> int:
        return tail_splits(self.tiles, grid, self.ktiles) if self.tail else 1

    def params(self, alpha: float, beta: float, grid: int):
        import numpy as np

        from sgemmlab.runtime.tma import Params

        key = (alpha, beta, grid)
        if key not in self._params:
            work = (self.work.data_ptr(), self.counters.data_ptr()) if self.tail else (0, 0)
            tail = [*work, _i32(self.splits(grid))] if self.kern.split else []  # rung 20's
            self._params[key] = Params([*self.maps, _i32(self.M), _i32(self.N), _i32(self.K),
                                        np.float32(alpha), np.float32(beta),
                                        self.C.data_ptr(), _i32(self.N), *tail])
        return self._params[key]

    def split_pass(self) -> None:
        grid = min(self.N, 8 * self.sms)
        self.kern.split.launch((grid,), SPLIT_BLOCK, self.split_params, self.stream)

    def launch(self, alpha: float = 1.0, beta: float = 0.0, blocks: int | None = None):
        """One call: the pre-pass (3xTF32), then the GEMM on `blocks` blocks (default
        min(tiles, SMs): one resident block per SM, each walking tiles gridDim.x apart)."""
        if self.kern.split:
            self.split_pass()
        grid = blocks or min(self.tiles, self.sms)
        self.kern.gemm.launch((grid,), (THREADS,), self.params(alpha, beta, grid), self.stream)


def _i32(v: int):
    import numpy as np

    return np.int32(v)


def errors(C, ref, A, Bt, K: int, *, limit: float | None = None, alpha_ab=None,
           beta_c=None) -> dict:
    """The project's metric (bench/check.py) and FP32's bound, the norm-scaled error, and,
    with `limit` (relative to max|ref|), where the outputs beyond it are."""
    import torch

    from sgemmlab.bench.check import error_bound, relative_error

    err = relative_error(C, ref, alpha_ab=alpha_ab, beta_c=beta_c)
    d = (C.double() - ref).abs()
    nan = int(torch.isnan(C).sum())
    scale = torch.outer(A.double().norm(dim=1), Bt.double().norm(dim=1)).clamp_min(1e-300)
    out = {"error": err, "bound": error_bound(K), "nan": nan,
           "error_norm": float((d / scale).max()) if not nan else float("inf")}
    del scale
    if limit is None:
        return out
    bad = ~(d <= limit * float(ref.abs().max()))  # NaN is bad too
    out["bad"] = count = int(bad.sum())
    if count:
        first = int(bad.view(-1).to(torch.float32).argmax())
        r, c = divmod(first, C.shape[1])
        out["first_bad"] = {"row": r, "col": c, "got": float(C[r, c]),
                            "want": float(ref[r, c])}
        rows = bad.any(dim=1).nonzero().flatten()
        cols = bad.any(dim=0).nonzero().flatten()
        out["bad_rows"] = {"count": int(rows.numel()), "first": int(rows[0]),
                           "last": int(rows[-1]),
                           "mod_128": sorted({int(x) % 128 for x in rows[:4096]})[:64]}
        out["bad_cols"] = {"count": int(cols.numel()), "first": int(cols[0]),
                           "last": int(cols[-1]),
                           "mod_8": sorted({int(x) % 8 for x in cols[:4096]})}
    return out


def tf32_limit(macros: dict, torch_tf32_err: float, bound: float) -> float:
    """What a variant's error must stay within: FP32's bound for 3xTF32; for TF32, 4x the
    error of torch's TF32 matmul (cuBLAS), at least 1e-3."""
    return bound if macros.get("SPLIT3") else max(4 * torch_tf32_err, 1e-3)


def verdict(e: dict, limit: float) -> str:
    if e["nan"]:
        return f"wrong: {e['nan']} NaN outputs (unwritten, or padding read)"
    if not e["error"] <= limit:
        kind = "garbage" if e["error"] > 0.05 else "precision"
        return f"wrong ({kind}): error {e['error']:.3e} > {limit:.3e}"
    return "ok"


def set_tf32(on: bool) -> None:
    """torch.matmul of float32 in TF32 (on) or IEEE FP32 (off), old and new torch alike."""
    import torch

    m = torch.backends.cuda.matmul
    if hasattr(m, "fp32_precision"):
        m.fp32_precision = "tf32" if on else "ieee"
    else:
        m.allow_tf32 = on


_FLUSH = []


def flusher():
    import torch

    from sgemmlab.bench.measure import L2Flusher

    if not _FLUSH:
        _FLUSH.append(L2Flusher(torch.cuda.get_device_properties(0).L2_cache_size))
    return _FLUSH[0]


def probe_shape(kern: Kernel, M: int, N: int, K: int, args) -> dict:
    import torch

    from sgemmlab.bench.measure import Method, median, paired, tflops, time_launches

    rec: dict = {"M": M, "N": N, "K": K}
    p = Problem(kern, M, N, K, seed=args.seed)
    rec["tiles"], rec["grid"] = p.tiles, min(p.tiles, p.sms)
    if p.tail:
        rec["tail_splits"] = p.splits(rec["grid"])
    out32, out_tf = torch.empty(M, N, device="cuda"), torch.empty(M, N, device="cuda")

    def fp32_run():
        torch.matmul(p.A, p.Bt.T, out=out32)

    def tf32_run():
        torch.matmul(p.A, p.Bt.T, out=out_tf)

    set_tf32(False)
    fp32_run()
    set_tf32(True)
    tf32_run()
    set_tf32(False)
    torch.cuda.synchronize()
    rec["torch_fp32"] = errors(out32, p.ref, p.A, p.Bt, K)
    rec["torch_tf32"] = errors(out_tf, p.ref, p.A, p.Bt, K)
    rec["torch_tf32_took_effect"] = rec["torch_tf32"]["error"] > 8 * rec["torch_fp32"]["error"]
    limit = tf32_limit(kern.macros, rec["torch_tf32"]["error"], rec["torch_fp32"]["bound"])
    rec["limit"] = limit

    def check(name: str) -> bool:
        """Record the check of the launch just made; False if the watchdog ended it."""
        torch.cuda.synchronize()
        rec[name] = errors(p.C, want, p.A, p.Bt, K, limit=limit, alpha_ab=ab, beta_c=bc)
        s = verdict(rec[name], limit)
        if wd := kern.watchdog():
            rec[name]["watchdog"] = wd
            s = f"watchdog: {wd.get('barrier', wd)} never completed"
        if rec.get("status", "ok") == "ok" and s != "ok":
            rec["status"] = s if name == "check" else f"{name}: {s}"
        rec.setdefault("status", s)
        return not wd

    # NaN-poisoned C, alpha = 1, beta = 0, the persistent grid
    want, ab, bc = p.ref, None, None
    p.C.fill_(float("nan"))
    p.launch()
    if not check("check"):
        return rec  # every further launch would stall a second per wait: stop here
    if M * N * K <= SMALL and p.tiles > 2:  # two blocks: each walks many tiles
        p.C.fill_(float("nan"))
        p.launch(blocks=2)
        if not check("check_2_blocks"):
            return rec
    if M * N * K <= SMALL:  # alpha and beta: C is read
        c0 = torch.rand(M, N, device="cuda") * 2 - 1
        p.C.copy_(c0)
        p.launch(0.75, -0.5)
        ab, bc = 0.75 * p.ref, -0.5 * c0.double()
        want = ab + bc
        if not check("check_alpha_beta"):
            return rec
        if p.tail and p.tiles > 3:  # 3 blocks: a partial last wave, split along K
            rec["tail_splits_3_blocks"] = p.splits(3)
            p.C.copy_(c0)
            p.launch(0.75, -0.5, blocks=3)
            if not check("check_3_blocks"):
                return rec
    if args.no_timing:
        return rec
    # timed even when wrong (flagged): the numbers still say where the kernel stands
    flush = None if args.no_flush else flusher()
    method = Method(launches=args.launches, rounds=args.rounds, warmup=3)
    for name, base, tf32 in (("fp32", fp32_run, False), ("tf32", tf32_run, True)):
        set_tf32(tf32)
        pr = paired(p.launch, base, method, flush)
        summary = pr.summary()
        rec[f"vs_{name}"] = {
            "kernel_us": pr.candidate_median_us, "torch_us": pr.baseline_median_us,
            "kernel_tflops": tflops(M, N, K, pr.candidate_median_us),
            "torch_tflops": tflops(M, N, K, pr.baseline_median_us),
            "speedup": summary["vs_cublas"], "speedup_min": summary["vs_cublas_min"],
            "speedup_max": summary["vs_cublas_max"], "kernel_times_us": pr.candidate_us,
            "torch_times_us": pr.baseline_us}
    set_tf32(False)
    if kern.split:
        t = median(time_launches(p.split_pass, args.launches, flush))
        rec["split_pass_us"] = t
        rec["split_pass_gbps"] = 12.0 * N * K / (t * 1e-6) / 1e9  # read 4, write 8 bytes
    return rec


def against_target(rec: dict, split3: bool) -> dict:
    """err/SGEMM (the check's error over cuBLAS SGEMM's on the same inputs) and, for 3xTF32,
    issue 14's verdict: >= TARGET_SPEEDUP x SGEMM and err/SGEMM <= TARGET_ERR."""
    err, sgemm = rec.get("check", {}).get("error"), rec.get("torch_fp32", {}).get("error")
    ratio = err / sgemm if err is not None and sgemm else None
    speedup = rec.get("vs_fp32", {}).get("speedup")
    out = {"err_vs_sgemm": ratio, "speedup": speedup}
    if split3 and ratio is not None and speedup is not None:
        out["error_ok"] = ratio <= TARGET_ERR
        out["speed_ok"] = speedup >= TARGET_SPEEDUP
        out["met"] = out["error_ok"] and out["speed_ok"] and rec.get("status") == "ok"
    return out


def child(args) -> int:
    note = _lab()
    import torch

    if note:
        emit(event="note", text=note)
    _, macros = variant_macros(args.variant, not args.no_watchdog)
    try:
        props = torch.cuda.get_device_properties(0)
    except Exception:  # no GPU, or torch without CUDA: nothing here can run
        emit(event="fatal", text=traceback.format_exc())
        return 2
    emit(event="env", gpu=props.name, cc=f"{props.major}.{props.minor}",
         sms=props.multi_processor_count, l2=props.L2_cache_size, torch=torch.__version__,
         cuda=torch.version.cuda)
    if (props.major, props.minor) != (9, 0):
        emit(event="fatal", text=f"compute capability {props.major}.{props.minor}: sm_90a "
             "code runs on 9.0 only")
        return 2
    try:
        kern = Kernel(macros)
        emit(event="loaded", attributes=kern.attributes())
    except Exception:  # reported, then this child is done
        emit(event="fatal", text=traceback.format_exc())
        return 2
    for shape in args.shapes.split(","):
        M, N, K = parse_shape(shape)
        emit(event="start", shape=[M, N, K])
        t0 = time.time()
        try:
            rec = probe_shape(kern, M, N, K, args)
        except Exception as exc:  # a CUDA error poisons the context: stop
            emit(event="result", shape=[M, N, K], status=f"error: {exc}".splitlines()[0],
                 traceback=traceback.format_exc(), seconds=time.time() - t0)
            return 3
        rec["seconds"] = time.time() - t0
        rec["target"] = against_target(rec, bool(macros.get("SPLIT3")))
        emit(event="result", shape=[M, N, K], **rec)
        torch.cuda.empty_cache()
    return 0


# -- the parent: compile, run children under a watchdog, report ---------------------------------
def run_child(spec: str, shapes: list[str], args, timeout: float):
    """Yield (kind, payload) events of a child running `spec` on `shapes`: ('line', record),
    then ('exit', rc) or ('timeout', shape_in_flight). The child runs in its own session and
    is killed (its process group) on a timeout."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--variant", spec,
           "--shapes", ",".join(shapes), "--seed", str(args.seed), "--rounds", str(args.rounds),
           "--launches", str(args.launches)]
    cmd += [f for f, on in (("--no-flush", args.no_flush), ("--no-timing", args.no_timing),
                            ("--no-watchdog", args.no_watchdog)) if on]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(SRC)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]),
        PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    lines: queue.Queue = queue.Queue()
    err_tail: collections.deque = collections.deque(maxlen=80)  # the last lines of stderr

    def pump_out():
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    def pump_err():
        for line in proc.stderr:
            err_tail.append(line)

    threading.Thread(target=pump_out, daemon=True).start()
    threading.Thread(target=pump_err, daemon=True).start()
    in_flight = None
    deadline = time.time() + timeout + 60  # startup: torch import, context, compile
    while True:
        try:
            line = lines.get(timeout=max(0.1, deadline - time.time()))
        except queue.Empty:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the child's own process group
            except ProcessLookupError:
                pass
            proc.wait()
            yield "timeout", {"shape": in_flight, "stderr": "".join(err_tail)}
            return
        if line is None:
            break
        if not line.startswith(MARK):
            continue
        rec = json.loads(line[len(MARK):])
        if rec.get("event") == "start":
            in_flight = rec["shape"]
            deadline = time.time() + timeout
        elif rec.get("event") == "result":
            in_flight = None
            deadline = time.time() + timeout
        yield "line", rec
    rc = proc.wait()
    time.sleep(0.2)  # let the stderr pump finish
    yield "exit", {"rc": rc, "stderr": "".join(err_tail), "shape": in_flight}


def fmt(x, spec: str) -> str:
    if x is None:
        width = re.match(r"\d*", spec).group()
        return "-".rjust(int(width)) if width else "-"
    return format(x, spec)


def _verdict(target: dict) -> str:
    """The target's column: 'MET', or what misses it ('err', 'speed', 'both', 'fail' for a
    failed check); '-' where it does not apply (TF32) or was not measured."""
    if "met" not in target:
        return "-"
    if target["met"]:
        return "MET"
    if target["error_ok"] and target["speed_ok"]:
        return "fail"  # fast and accurate enough, but a check failed
    return {(False, True): "err", (True, False): "speed"}.get(
        (target["error_ok"], target["speed_ok"]), "both")


def table(run: dict) -> str:
    head = (f"{'variant':<17} {'M x N x K':<18} {'status':<10} {'error':>9} {'/bound':>7} "
            f"{'cuB32 err':>9} {'err/SGEMM':>9} {'cuTF32 err':>10} {'us':>9} {'TFLOP/s':>8} "
            f"{'xSGEMM':>7} {'xTF32':>6} {'target':>6}")
    rows = [head, "-" * len(head)]
    for r in run["records"]:
        chk, t32, t = r.get("check", {}), r.get("torch_tf32", {}), r.get("vs_fp32", {})
        tt, target = r.get("vs_tf32", {}), r.get("target", {})
        status = r.get("status", "?")
        rows.append(
            f"{r['variant']:<17} {'x'.join(map(str, r['shape'])):<18} "
            f"{(status if len(status) <= 10 else status[:9] + '~'):<10} "
            f"{fmt(chk.get('error'), '9.2e')} "
            f"{fmt(chk['error'] / chk['bound'] if chk.get('bound') else None, '7.2f')} "
            f"{fmt(r.get('torch_fp32', {}).get('error'), '9.2e')} "
            f"{fmt(target.get('err_vs_sgemm'), '9.2f')} "
            f"{fmt(t32.get('error'), '10.2e')} {fmt(t.get('kernel_us'), '9.1f')} "
            f"{fmt(t.get('kernel_tflops'), '8.1f')} {fmt(t.get('speedup'), '7.2f')} "
            f"{fmt(tt.get('speedup'), '6.2f')} {_verdict(target):>6}")
    long = [r for r in run["records"] if len(r.get("status", "")) > 10]
    rows += [f"  {r['variant']} {'x'.join(map(str, r['shape']))}: {r['status']}" for r in long]
    rows.append(f"target (issue 14, 3xTF32 only): >= {TARGET_SPEEDUP}x cuBLAS SGEMM and "
                f"err/SGEMM <= {TARGET_ERR}; 'err' / 'speed' / 'both' say what misses it")
    met = collections.defaultdict(list)
    for r in run["records"]:
        if r.get("target", {}).get("met"):
            met[r["variant"]].append("x".join(map(str, r["shape"])))
    rows += [f"  met by {v} at {', '.join(shapes)}" for v, shapes in met.items()]
    return "\n".join(rows)


def results_path(slug: str, stamp: str) -> Path:
    root = os.environ.get("SGEMMLAB_RESULTS_DIR")
    base = Path(root) if root else REPO / "results"
    return base / slug / f"hopper-probe-{stamp}.json"


def parent(args) -> int:
    note = _lab()
    started = time.time()
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    for s in shapes:
        parse_shape(s)
    specs = [s.strip() for s in args.variants.split(",") if s.strip()]
    from importlib import metadata

    versions = {}
    for pkg in ("cuda-core", "cuda-bindings", "nvidia-cuda-nvrtc", "torch", "numpy"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    run = {"schema": "sgemmlab.hopper-probe/1", "kind": "hopper-probe",
           "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]),
           "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "environment": {"python": sys.version.split()[0], "versions": versions},
           "method": {"timing": "bench.measure.paired: alternating rounds, CUDA events around "
                                "each launch, host work included",
                      "l2_flush": not args.no_flush, "rounds": args.rounds,
                      "launches_per_round": args.launches, "warmup": 3,
                      "grid": "min(tiles, SMs) persistent blocks of 384 threads",
                      "inputs": "uniform [-1, 1], rows padded to 4 floats with NaN",
                      "watchdog": not args.no_watchdog, "arch": ARCH},
           "notes": [note] if note else [], "variants": {}, "records": []}
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = None

    def save() -> None:
        # under results/<gpu>/ once a child has named the GPU (results/unknown/ until then)
        nonlocal path
        slug = re.sub(r"[^a-z0-9]+", "-", run["environment"].get("gpu", "unknown").lower())
        new = results_path(slug.strip("-"), stamp)
        new.parent.mkdir(parents=True, exist_ok=True)
        new.write_text(json.dumps(run, indent=1, default=str) + "\n")
        if path is not None and path != new:
            path.unlink(missing_ok=True)
        path = new

    # compile everything first (no GPU needed): a variant that does not build is reported
    for spec in specs:
        label, macros = variant_macros(spec, not args.no_watchdog)
        info = {"macros": macros, "what": VARIANTS[spec.split(":")[0]][1]}
        t0 = time.time()
        try:
            gemm, split = compile_variant(macros)
            info["compile"] = {"seconds": round(time.time() - t0, 1),
                               "resources": gemm.resources.__dict__,
                               "warnings": [ln for ln in gemm.log.splitlines()
                                            if "warning" in ln.lower()],
                               "log": gemm.log}
            if split:
                info["split_pass"] = {"resources": split.resources.__dict__}
            info["sass"] = sass_summary(gemm.cubin)
        except Exception as exc:  # reported; the other variants go on
            info["compile"] = {"error": str(exc)}
        run["variants"][label] = info
        res = info["compile"].get("resources")
        regs = info.get("sass", {}).get("registers_used")
        print(f"compiled {label}: " + (f"{res['registers']} registers ({regs} used), "
                                        f"{res['spill_stores']}+{res['spill_loads']} spill bytes, "
                                        f"{smem_bytes(macros)} B dynamic smem, "
                                        f"SASS {info['sass'].get('counts', info['sass'])}"
                                        if res else f"FAILED: {info['compile']['error'][:2000]}"),
              flush=True)
    save()

    for spec in specs:
        if "error" in run["variants"][spec]["compile"]:
            continue
        todo = list(shapes)
        hangs = failures = 0  # timeouts; crashes and timeouts in a row
        while todo:
            if time.time() - started > args.budget:
                run["notes"].append(f"budget of {args.budget} s spent: {spec} skipped "
                                    f"{','.join(todo)}")
                for s in todo:
                    run["records"].append({"variant": spec, "shape": list(parse_shape(s)),
                                           "status": "skipped (budget)"})
                break
            print(f"--- {spec}: {','.join(todo)}", flush=True)
            before = len(todo)
            for kind, rec in run_child(spec, todo, args, args.timeout):
                if kind == "line":
                    ev = rec.pop("event")
                    if ev == "env":
                        run["environment"].update({k: rec[k] for k in rec})
                    elif ev == "loaded":
                        run["variants"][spec]["loaded"] = rec["attributes"]
                        print(f"    loaded: {rec['attributes']}", flush=True)
                    elif ev in ("note", "fatal"):
                        run["notes"].append(f"{spec}: {rec['text']}")
                        print(f"    {ev}: {rec['text']}", flush=True)
                        if ev == "fatal":
                            for sh in todo:
                                run["records"].append(
                                    {"variant": spec, "shape": list(parse_shape(sh)),
                                     "status": "not run: " + rec["text"].strip().splitlines()[-1]})
                            todo = []
                    elif ev == "result":
                        rec["variant"] = spec
                        run["records"].append(rec)
                        todo = todo[1:]
                        failures = failures + 1 if rec["status"].startswith("error") else 0
                        chk = rec.get("check", {})
                        print(f"    {'x'.join(map(str, rec['shape']))}: {rec['status']}"
                              f"  error {fmt(chk.get('error'), '.2e')}"
                              f"  {fmt(rec.get('vs_fp32', {}).get('kernel_tflops'), '.1f')}"
                              f" TFLOP/s ({fmt(rec.get('seconds'), '.1f')} s)", flush=True)
                        save()
                elif kind == "timeout":
                    shape = rec["shape"] or list(parse_shape(todo[0]))
                    run["records"].append({"variant": spec, "shape": shape,
                                           "status": f"timeout after {args.timeout} s (hang?)",
                                           "stderr": rec["stderr"][-4000:]})
                    print(f"    {'x'.join(map(str, shape))}: TIMEOUT (killed)", flush=True)
                    todo = todo[1:]
                    hangs += 1
                    failures += 1
                elif kind == "exit":
                    if rec["rc"] not in (0, 3) and todo:
                        # died in a shape: that shape failed, the rest get a new child;
                        # died outside one (start-up): nothing would run, so stop
                        died = [rec["shape"]] if rec["shape"] else [
                            list(parse_shape(sh)) for sh in todo]
                        for shape in died:
                            run["records"].append({"variant": spec, "shape": shape,
                                                   "status": f"child died (rc {rec['rc']})",
                                                   "stderr": rec["stderr"][-4000:]})
                        where = ("in " + "x".join(map(str, rec["shape"])) if rec["shape"]
                                 else "at start-up")
                        print(f"    child died rc={rec['rc']} {where}\n{rec['stderr'][-1500:]}",
                              flush=True)
                        todo = todo[1:] if rec["shape"] else []
                        failures += 1
                    elif rec["rc"] == 3 and rec["stderr"].strip():
                        run["records"][-1]["stderr"] = rec["stderr"][-4000:]
            save()
            if todo and len(todo) == before:  # the child ended without a word on any shape
                run["notes"].append(f"{spec}: the child ended early; not run: {','.join(todo)}")
                for sh in todo:
                    run["records"].append({"variant": spec, "shape": list(parse_shape(sh)),
                                           "status": "not run (the child ended early)"})
                todo = []
            if (hangs >= 2 or failures >= 3) and todo:
                run["notes"].append(f"{spec}: {hangs} hangs, {failures} failures in a row; "
                                    f"skipped {','.join(todo)}")
                for s in todo:
                    run["records"].append({"variant": spec, "shape": list(parse_shape(s)),
                                           "status": "skipped (repeated failures)"})
                todo = []
    run["environment"]["wall_seconds"] = round(time.time() - started, 1)
    save()
    print()
    print(table(run))
    print(f"\nwrote {path}")
    bad = [r for r in run["records"] if r.get("status") != "ok"]
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="comma list of N or MxNxK")
    ap.add_argument("--variants", default=DEFAULT_VARIANTS,
                    help=f"comma list of NAME[:MACRO=V...]; names: {', '.join(VARIANTS)}")
    ap.add_argument("--timeout", type=float, default=60.0,
                    help="seconds one shape may take in a child before it is killed")
    ap.add_argument("--budget", type=float, default=480.0,
                    help="seconds of wall time after which no new child starts")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--launches", type=int, default=20, help="timed launches per round")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--no-flush", action="store_true", help="do not flush the L2 per launch")
    ap.add_argument("--no-timing", action="store_true", help="checks only")
    ap.add_argument("--no-watchdog", action="store_true", help="compile with WATCHDOG=0")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    return child(args) if args.child else parent(args)


if __name__ == "__main__":
    sys.exit(main())
