"""compute-sanitizer memcheck and racecheck over every rung at ragged shapes, the history
rung (21) included (GPU; skipped without one or without the sanitizer).

Each rung runs in its own process under the tool, once on the scalar path (67x45x33: no
leading dimension is a multiple of 4), once on the float4 path (67x44x36), and once at
300x200x1000, where rung 14 splits tiles between blocks (its default fix-up, and each other
fix-up in a test of its own);
beta != 0 so C is read as well as written. Racecheck covers the rungs with shared memory
(3 on): a missing barrier between a stage's last reads and its next copy shows there. The
tensor-core rungs (19, 20: compute capability 9.0 only) run at their own precision under
memcheck, racecheck and synccheck (their mbarrier ring and warpgroup barriers). Packed plans
(kernels/pack.cu's copy, then the product on it) and F.linear's bias read in the epilogue,
exact and at 3xTF32, run under memcheck and racecheck. Ozaki scheme II (rung 26 and its steps)
runs under all three.
PyTorch's caching allocator is turned off in that process: with it on, every tensor would sit
inside one larger allocation and an access past a matrix's
end would land in memory the sanitizer considers valid.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sgemmlab
from sgemmlab import registry
from sgemmlab.bench.ceilings import cuda_tool
from sgemmlab.runtime.compiler import KERNEL_DIR, compile_kernel
from test_tensor_gpu import HOPPER, PRECISION, tensor_rung

SANITIZER = cuda_tool("compute-sanitizer")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    SANITIZER is None, reason="compute-sanitizer not found (PATH, $CUDA_HOME, /usr/local/cuda)")]

DONE = "sgemmlab: all launches returned"
SCRIPT = f"""
import json
import sys
import torch
import sgemmlab

rung = int(sys.argv[1])
config = json.loads(sys.argv[2]) if len(sys.argv) > 2 else None
shapes = json.loads(sys.argv[3]) if len(sys.argv) > 3 else [
    (67, 45, 33, 0, 0), (67, 44, 36, 0, 0), (300, 200, 1000, 0, 0)]
precision = {{"precision": sys.argv[4]}} if len(sys.argv) > 4 else {{}}
for M, N, K, ta, tb in shapes:  # ta, tb: A, B column-major (transposed views)
    a = (torch.rand(K, M, device="cuda") * 2 - 1).t() if ta else (
        torch.rand(M, K, device="cuda") * 2 - 1)
    b = (torch.rand(N, K, device="cuda") * 2 - 1).t() if tb else (
        torch.rand(K, N, device="cuda") * 2 - 1)
    c = torch.rand(M, N, device="cuda") * 2 - 1
    sgemmlab.sgemm(a, b, c, alpha=1.5, beta=0.5, kernel=rung, config=config, **precision)
    torch.cuda.synchronize()
print({DONE!r}, flush=True)
"""


# the tensor-core rungs (19 TF32, 20 3xTF32; compute capability 9.0): 1x1x1 (one tile, almost
# all of it past the edges, K padded to 4), ragged tiles with K not a multiple of 4 (the host
# pads B^T and A), and 257x255x300 (6 tiles on 132 SMs: the one wave is partial, and where the
# host splits such tiles along K they meet in rung 20's workspace), A and B in every layout
TENSOR_SHAPES = [(1, 1, 1, 0, 0), (130, 129, 37, 0, 0), (257, 255, 300, 0, 0),
                 (130, 129, 37, 1, 0), (257, 255, 300, 0, 1), (67, 45, 36, 1, 1)]


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    src = str(Path(sgemmlab.__file__).resolve().parent.parent)  # this checkout, not another
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    return env


def _exact(r) -> bool:
    """An FP32 rung (the tensor-core ones, at their own precision, have a test of their own)."""
    return getattr(r, "precision", "ieee") == "ieee"


def _rung_params(first: int = 1):
    return [pytest.param(r, id=f"r{r.number}", marks=pytest.mark.skipif(
        not (KERNEL_DIR / r.source).is_file(), reason=f"{r.source} is not written yet"))
        for r in registry.RUNGS + registry.HISTORY if r.number >= first and _exact(r)]


def _sanitize(rung, tool: str, overrides: dict | None = None,
              shapes: list | None = None) -> None:
    # compile both variants out here so that the process under the sanitizer finds them in
    # the disk cache when it can (NVRTC under it returns no ptxas report; an entry without
    # one is not cached, and the launch works all the same)
    from sgemmlab.runtime.device import gpu_info
    from sgemmlab.runtime.launch import variant_macros

    cfg = {**rung.default(gpu_info().name), **(overrides or {})}
    precision = getattr(rung, "precision", "ieee")
    if precision != "ieee" and not shapes:
        shapes = [list(s) for s in TENSOR_SHAPES]
    script = [sys.executable, "-c", SCRIPT, str(rung.number)]
    if overrides or shapes:
        script.append(json.dumps(cfg))
    if shapes:
        script.append(json.dumps(shapes))
    if precision != "ieee":  # a rung is never switched to its precision silently: ask for it
        script.append(precision)
        _warm_up(tuple(script))
    else:
        layouts = sorted({(bool(s[3]), bool(s[4])) for s in shapes or [(0, 0, 0, 0, 0)]})
        for vec4 in ((True, False) if rung.vectorized else (False,)):
            for ta, tb in layouts:
                macros = rung.macros(cfg) | variant_macros(rung, vec4, ta, tb)
                compile_kernel(rung.source, macros, gpu_info().arch)
    _under(tool, script, rung.label)


def _under(tool: str, script, what: str) -> None:
    """Run `script` under the sanitizer's `tool`: it must exit 0, report nothing and finish.
    API errors are torch's business (it probes the driver at start-up); a failed launch of
    ours raises in the script, which then exits non-zero without printing DONE."""
    cmd = [SANITIZER, "--tool", tool, "--error-exitcode", "1",
           "--report-api-errors", "no", *script]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, env=_env(),
                          timeout=600)
    output = done.stdout + done.stderr
    tail = output[-6000:]
    assert done.returncode == 0, f"{what}: exit {done.returncode} under {tool}:\n{tail}"
    clean = ("RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
             if tool == "racecheck" else "ERROR SUMMARY: 0 errors")  # memcheck, synccheck
    assert clean in output, f"{what}:\n{tail}"
    assert DONE in output, f"{what}: the script did not finish:\n{tail}"


@functools.cache
def _warm_up(script: tuple[str, ...]) -> None:
    """Run the script once outside the sanitizer: whatever a tensor-core rung launches (its
    kernel, B's split pre-pass, the host's copies) is then compiled and in the disk cache."""
    done = subprocess.run(list(script), check=False, capture_output=True, text=True,
                          env=_env(), timeout=600)
    output = (done.stdout + done.stderr)[-6000:]
    assert done.returncode == 0 and DONE in done.stdout, f"without the sanitizer:\n{output}"


@pytest.mark.parametrize("rung", _rung_params())
def test_memcheck_is_clean(rung):
    _sanitize(rung, "memcheck")


@pytest.mark.parametrize("rung", _rung_params(first=3))
def test_racecheck_is_clean(rung):
    _sanitize(rung, "racecheck")


# the family (rungs 15-18; the memory-bound ones serve parts of the shape space only): ragged
# shapes each serves, on the scalar path (odd leading dimensions) and the float4 one, long K
# (split inside the block), and every layout of A and B; (M, N, K, A column-major, B
# column-major)
FAMILY_SHAPES = {
    15: [(7, 45, 33, 0, 0), (8, 44, 36, 0, 0), (16, 200, 1000, 0, 0), (1, 131, 517, 0, 0),
         (5, 67, 300, 1, 0), (5, 67, 300, 0, 1), (13, 68, 260, 1, 1), (3, 1, 5000, 0, 1)],
    16: [(45, 7, 33, 0, 0), (44, 8, 36, 0, 0), (200, 16, 1000, 0, 0), (131, 1, 517, 0, 0),
         (67, 5, 300, 1, 0), (67, 5, 300, 0, 1), (68, 13, 260, 1, 1), (1, 3, 5000, 1, 0)],
    17: [(67, 45, 3, 0, 0), (68, 44, 4, 0, 0), (300, 200, 16, 0, 0), (1, 1, 1, 0, 0),
         (67, 45, 7, 1, 0), (67, 45, 9, 0, 1), (300, 257, 13, 1, 1),
         # K > 16: chunks of 16 staged between barriers, the last one partial
         (67, 45, 33, 0, 0), (5, 130, 17, 0, 1), (300, 257, 64, 1, 1), (129, 3, 47, 1, 0)],
    # rung 18 (small tiles): K split into parts that meet in the workspace (29x32x3635,
    # 127x129x131, 31x33x2000), one part (1x1x1, 300x200x16), every layout
    18: [(67, 45, 33, 0, 0), (29, 32, 3635, 0, 0), (127, 129, 131, 0, 0), (1, 1, 1, 0, 0),
         (300, 200, 16, 0, 0), (31, 33, 2000, 1, 0), (31, 33, 2000, 0, 1),
         (67, 45, 999, 1, 1)],
}
FAMILY_PARAMS = [pytest.param(r, id=f"r{r.number}", marks=pytest.mark.skipif(
    not (KERNEL_DIR / r.source).is_file(), reason=f"{r.source} is not written yet"))
    for r in registry.FAMILY if _exact(r)]


@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
@pytest.mark.parametrize("rung", FAMILY_PARAMS)
def test_the_family_is_clean(rung, tool):
    _sanitize(rung, tool, shapes=[list(s) for s in FAMILY_SHAPES[rung.number]])


# rung 14's other fix-ups (its default has one): ordered slots, and adds into C itself
FIXUPS = [pytest.param({"SPLIT": s, "FIXUP": f}, id=f"split{s}-fixup{f}")
          for s, f in ((0, 0), (4, 0), (0, 2), (4, 2))]


@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
@pytest.mark.parametrize("overrides", FIXUPS)
def test_every_fixup_of_rung_14_is_clean(overrides, tool):
    _sanitize(registry.rung(14), tool, overrides)


@pytest.mark.parametrize("tool", ["memcheck", "racecheck", "synccheck"])
@pytest.mark.parametrize("number", [pytest.param(n, id=f"r{n}-{p}", marks=HOPPER)
                                    for n, p in PRECISION.items()])
def test_the_tensor_core_rungs_are_clean(number, tool):
    _sanitize(tensor_rung(number), tool, shapes=[list(s) for s in TENSOR_SHAPES])


# packed plans (kernels/pack.cu, then the product on the copy) and biases read in the
# epilogue: the gates lowered so that ragged, small products pack (misaligned ones too);
# F.linear's bias through the switch, exact and (on Hopper) at 3xTF32, where rung 20's
# epilogue reads it
PACKED_SCRIPT = f"""
import torch
import sgemmlab
from sgemmlab import plan

plan.PACK_MIN_M, plan.PACK_MIN_OUTPUTS = 1, 1
plan.STAGE_SHARE = 1e30
choose = plan.choose_rung
for M, N, K in [(68, 44, 36), (300, 132, 1000), (4, 260, 4), (67, 45, 33)]:
    a = torch.rand(M, K, device="cuda") * 2 - 1
    w = torch.rand(N, K, device="cuda") * 2 - 1
    c = torch.rand(M, N, device="cuda") * 2 - 1
    sgemmlab.sgemm(a, w.t(), c, alpha=1.5, beta=0.5)
    # misaligned: copied into padded buffers, C (a view one float off) element by element,
    # on both rungs that can (at these sizes dispatch would pick rung 18)
    for n in (24, 25):
        r = plan.registry.rung(n)
        plan.choose_rung = lambda *args: (r, r.default("NVIDIA H200"))
        sgemmlab.sgemm(a[1:, 1:], w[1:, 1:].t(), c[1:, 1:], alpha=1.5, beta=0.5,
                       deterministic=n == 24)
    plan.choose_rung = choose
    for precision in ["ieee"] + (["tf32x3"] if torch.cuda.get_device_capability() == (9, 0)
                                 else []):
        x = torch.rand(M + 1, K + 1, device="cuda")[1:, 1:]  # ragged views as well
        lin = torch.nn.Linear(K + 1, N + 3, device="cuda")
        with sgemmlab.torch_mode(precision=precision):
            lin(torch.rand(M, K + 1, device="cuda"))
            torch.nn.functional.linear(x, w, c[0])
    torch.cuda.synchronize()
# rung 17 on A and B whose rows are not 16-byte multiples beside an aligned C: its float4
# variant (the "vec4_c" feature), K <= 16 and past it
for K in (7, 33):
    x = torch.rand(300, K + 2, device="cuda")[:, :K]
    y = torch.rand(K, 261, device="cuda")[:, :260]
    sgemmlab.matmul(x, y, kernel=17)
    sgemmlab.matmul(x, y.t().contiguous().t(), kernel=17)
torch.cuda.synchronize()
print({DONE!r}, flush=True)
"""


@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_packed_plans_and_biases_in_the_epilogue_are_clean(tool):
    script = (sys.executable, "-c", PACKED_SCRIPT)
    _warm_up(script)
    _under(tool, script, "packed plans and biases")


# Ozaki scheme II (runtime/ozaki.py: rung 26 and hopper/ozaki.cu's steps), alone and in
# clusters of two that share B's tiles by multicast: 1x1x1, ragged shapes in every layout
# (an odd count of row-tiles leaves one block of a pair past M), a K that crosses several
# k-tiles and norm chunks, a row holding Inf, and every third row of A and fourth column of B
# with one huge entry (their outputs come from the tiled FP64 fallback, oz_fallback); then
# activations with outlier features, which the balanced scaling serves (oz_balance and the
# second norms). Rung 26 also with its 16-byte stores and each warpgroup on its own tiles in
# turn (both shapes), the launches overlapped (ozaki.OVERLAP), with the integer
# recombination (ozaki.CRT_INT), with a pass both operands take in one launch (ozaki.MERGED:
# with oz_scale, and in the last configuration with the two passes, ozaki.FUSED off; in one,
# the fallback in the splits' launch, ozaki.FALLBACK_EARLY), and
# oz_scale built for four blocks an SM (ozaki.SCALE_BLOCKS), and staging 2 rows a block
# (ozaki.SCALE_ROWS_K and _R); in the last, rung 26's residues by an exact division
# (EXACT_DIV)
OZAKI_SCRIPT = f"""
import torch
from sgemmlab.runtime import ozaki
from sgemmlab.runtime.arrays import stream_for

stream = stream_for(torch.cuda.current_stream().cuda_stream, 0)
configs = [({{"CLUSTER": 1, "STORE16": 0}}, False), ({{"CLUSTER": 1}}, True),
           ({{"CLUSTER": 2}}, True), ({{"STORE16": 1, "PINGPONG": 1}}, True),
           ({{"PINGPONG": 1, "BN": 128, "STAGES": 6, "STORE16": 1, "EXACT_DIV": 1}}, True)]
for i, (over, overlap) in enumerate(configs):
    ozaki.OVERLAP = overlap  # (read when a product is bound)
    ozaki.CRT_INT = overlap  # the integer recombination with the overlapped launches
    ozaki.MERGED = i % 2 == 0  # with and without OVERLAP
    ozaki.FALLBACK_EARLY = i == 2  # (with MERGED: the fallback in the splits' launch)
    ozaki.FUSED = i != len(configs) - 1
    ozaki.SCALE_BLOCKS = 4 if i == 1 else 1  # oz_scale's launch bounds (read when bound)
    ozaki.SCALE_ROWS_K = ozaki.SCALE_ROWS_R = 2 if i == 3 else 4  # its 2-row staging
    for M, N, K, ta, tb in [(1, 1, 1, 0, 0), (130, 257, 37, 0, 0), (257, 129, 300, 1, 0),
                            (67, 45, 513, 0, 1), (131, 300, 1031, 1, 1)]:
        a = torch.rand(K, M, device="cuda").t() if ta else torch.rand(M, K, device="cuda")
        b = torch.rand(N, K, device="cuda").t() if tb else torch.rand(K, N, device="cuda")
        a[::3, 0] = 2.0**40
        b[K // 3, ::4] = 2.0**40
        a[M // 2, K // 2] = float("inf")
        c = torch.rand(M, N, device="cuda")
        lda = a.stride(1) if ta else a.stride(0)
        ldb = b.stride(1) if tb else b.stride(0)
        ozaki.bind(0, M, N, K, 1.5, a.data_ptr(), lda, b.data_ptr(), ldb, 0.5, c.data_ptr(),
                   N, stream, trans_a=bool(ta), trans_b=bool(tb),
                   cfg=dict(ozaki.rung().seed, **over))()
    a = torch.randn(200, 1100, device="cuda")
    a[:, :4] *= 1000.0
    b, c = torch.randn(1100, 150, device="cuda"), torch.empty(200, 150, device="cuda")
    ozaki.bind(0, 200, 150, 1100, 1.0, a.data_ptr(), 1100, b.data_ptr(), 150, 0.0,
               c.data_ptr(), 150, stream, cfg=dict(ozaki.rung().seed, **over))()
torch.cuda.synchronize()
print({DONE!r}, flush=True)
"""


@HOPPER
@pytest.mark.parametrize("tool", ["memcheck", "racecheck", "synccheck"])
def test_the_ozaki_scheme_is_clean(tool):
    script = (sys.executable, "-c", OZAKI_SCRIPT)
    _warm_up(script)
    _under(tool, script, "Ozaki scheme II")
