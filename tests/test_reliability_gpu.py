"""Issue 18 on a GPU (skipped without one): many threads on many streams at once, a CUDA
graph replayed on another stream beside eager work on its own, the Stream-K workspace across
streams and devices, determinism as identical bits across 100 runs, streams and processes
(and equal in value to float64), the compiled backward pass against float64.

Every result is judged against float64 with the project's bound (bench/check.py), in
NaN-poisoned outputs where the call writes into one.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import sgemmlab
from sgemmlab import api
from test_api_gpu import _streamk_shape, assert_matches, run_threads

pytestmark = pytest.mark.gpu

NAN = float("nan")
SRC = str(Path(__file__).resolve().parents[1] / "src")

# the decompositions a call can take: data-parallel tiles, Stream-K's split tiles, split-K
# skinny rungs, small tiles in a batch, the tensor cores' split tail
MIXED = [  # (M, N, K, batch, layout, precision, deterministic)
    (1024, 1024, 1024, 1, "NN", "ieee", False),
    (256, 256, 8192, 1, "NN", "ieee", False),
    (256, 256, 8192, 1, "TN", "ieee", True),
    (67, 45, 33, 1, "NT", "ieee", False),
    (1, 4096, 4096, 1, "NN", "ieee", False),
    (4096, 3, 2048, 1, "NN", "ieee", True),
    (48, 40, 24, 32, "NN", "ieee", False),
    (777, 333, 129, 1, "TT", "ieee", False),
    (512, 512, 2048, 1, "NN", "tf32x3", False),
    (257, 255, 300, 1, "NT", "tf32x3", True),
]


def _operands(M, N, K, batch, layout, generator=None, device="cuda"):
    import torch

    def one(rows, cols, col_major):
        lead = (batch,) if batch > 1 else ()
        dims = (cols, rows) if col_major else (rows, cols)
        x = torch.rand(*lead, *dims, device=device, generator=generator) * 2 - 1
        return x.transpose(-2, -1) if col_major else x

    return one(M, K, layout[0] == "T"), one(K, N, layout[1] == "T")


# ---------------------------------------------------------------------------------------
# 8 threads x 8 streams
# ---------------------------------------------------------------------------------------
def test_eight_threads_on_eight_streams_every_result_checked():
    """Eight threads start together (a barrier), each on a stream of its own, each running
    every decomposition in its own order, twice; every result is checked afterwards. The
    plan cache, the compile cache and the per-stream workspaces are filled concurrently."""
    import torch

    api.clear_caches()  # the plans are made concurrently, by the threads
    threads, results = 8, {}
    start = threading.Barrier(threads)

    def worker(index):
        stream = torch.cuda.Stream()
        mine = []
        start.wait(timeout=60)
        with torch.cuda.stream(stream):
            order = MIXED[index % len(MIXED):] + MIXED[:index % len(MIXED)]
            for M, N, K, batch, layout, precision, det in order * 2:
                a, b = _operands(M, N, K, batch, layout)
                shape = (batch, M, N) if batch > 1 else (M, N)
                out = torch.full(shape, NAN, device="cuda")
                sgemmlab.matmul(a, b, out=out, precision=precision, deterministic=det)
                mine.append((out, a, b, K))
        stream.synchronize()
        results[index] = mine

    run_threads(worker, threads, timeout=600)
    assert sorted(results) == list(range(threads))
    for index, mine in results.items():
        assert len(mine) == 2 * len(MIXED)
        for out, a, b, K in mine:
            assert_matches(out, a.double() @ b.double(), K)


# ---------------------------------------------------------------------------------------
# CUDA graphs on other streams, the workspace across streams and devices
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("precision", ["ieee", "tf32x3"])
def test_a_graph_captured_on_one_stream_replays_on_another_beside_eager_work(precision):
    """A graph of Stream-K products (ieee) or of the tensor rung's pre-passes and split tail
    (tf32x3) is captured on stream S1, then replayed on S2 while eager calls of the same
    shape run on S1 at the same time. Captured launches own their workspace
    (runtime/workspace.for_capture): neither side ever sees the other's counters."""
    import torch

    from sgemmlab.runtime import workspace as ws

    shape = _streamk_shape() if precision == "ieee" else (257, 255, 300)
    if shape is None:
        pytest.skip("dispatch sends no test shape to Stream-K on this GPU")
    M, N, K = shape
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    a, b = _operands(M, N, K, 1, "NN")
    # made on the default stream, which the side streams do not wait for (torch's streams
    # are non-blocking): an H200 run read ea before it was written without this
    torch.cuda.synchronize()
    with torch.cuda.stream(s1):
        for _ in range(3):  # warm-up: plans, kernels, S1's own workspace
            sgemmlab.matmul(a, b, precision=precision)
    s1.synchronize()
    eager_ws = dict(ws._spaces)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s1):
        c = sgemmlab.matmul(a, b, precision=precision)
    assert dict(ws._spaces) == eager_ws, "the capture touched the streams' workspaces"
    ea, eb = _operands(M, N, K, 1, "NN")  # the same shape: the same plan, S1's workspace
    torch.cuda.synchronize()
    eager = []
    for round_ in range(20):
        with torch.cuda.stream(s2):
            a.copy_(torch.rand(M, K, device="cuda") * 2 - 1)
            b.copy_(torch.rand(K, N, device="cuda") * 2 - 1)
            c.fill_(NAN)
            graph.replay()
            ref = a.double() @ b.double()
            got = c.clone()
        with torch.cuda.stream(s1):  # beside the replay: S1's own workspace
            eager.append(sgemmlab.matmul(ea, eb, precision=precision))
            eager.append(sgemmlab.matmul(ea, eb, precision=precision))
        s2.synchronize()
        assert_matches(got, ref, K)
    s1.synchronize()
    ref = ea.double() @ eb.double()
    for e in eager:
        assert_matches(e, ref, K)


def test_the_workspace_is_one_per_stream_and_device_and_reused():
    """Calls on two streams of every device: each (device, stream) has its workspace, a
    second call on a stream reuses it, results are right on each device."""
    import torch

    from sgemmlab.runtime import workspace as ws

    shape = _streamk_shape()
    if shape is None:
        pytest.skip("dispatch sends no test shape to Stream-K on this GPU")
    M, N, K = shape
    seen = {}
    for dev in range(torch.cuda.device_count()):
        with torch.cuda.device(dev):
            streams = [torch.cuda.Stream(), torch.cuda.Stream()]
            a, b = _operands(M, N, K, 1, "NN", device=f"cuda:{dev}")
            torch.cuda.synchronize()  # the side streams do not wait for the default one
            for round_ in range(2):
                for s in streams:
                    with torch.cuda.stream(s):
                        c = sgemmlab.matmul(a, b)
                    s.synchronize()
                    assert c.device == a.device
                    assert_matches(c, a.double() @ b.double(), K)
                    key = (dev, int(s.cuda_stream))
                    assert key in ws._spaces
                    handle = int(ws._spaces[key].buffer.handle)
                    assert seen.setdefault(key, handle) == handle, "not reused"
    assert len(set(seen.values())) == len(seen), "two (device, stream) pairs share a buffer"


# ---------------------------------------------------------------------------------------
# deterministic means identical
# ---------------------------------------------------------------------------------------
DETERMINISTIC = [  # dispatch's choice under deterministic=True; rung 14 named (its default
    # atomic fix-up becomes the fixed order); the skinny split-K; the tensor rung's tail
    ((256, 256, 8192, "NN"), {}),
    ((1024, 1024, 1024, "TN"), {}),
    ((300, 200, 1000, "NN"), {"kernel": 14}),
    ((1, 4096, 4096, "NN"), {}),
    ((257, 255, 300, "NT"), {"precision": "tf32x3"}),
]

DIGEST_SCRIPT = """
import hashlib, json, sys
import torch
sys.path.insert(0, {src!r})
import sgemmlab
from test_reliability_gpu import DETERMINISTIC, _operands
out = []
for (M, N, K, layout), kw in DETERMINISTIC:
    g = torch.Generator(device="cuda").manual_seed(M * 7 + N * 3 + K)
    a, b = _operands(M, N, K, 1, layout, generator=g)
    c = sgemmlab.matmul(a, b, deterministic=True, **kw)
    torch.cuda.synchronize()
    out.append(hashlib.sha256(c.cpu().numpy().tobytes()).hexdigest())
print(json.dumps(out))
"""


def _digest(c) -> str:
    return hashlib.sha256(c.cpu().numpy().tobytes()).hexdigest()


@pytest.mark.parametrize("case", DETERMINISTIC, ids=lambda c: "x".join(map(str, c[0])))
def test_deterministic_is_identical_over_100_runs_and_8_streams_and_right(case):
    import torch

    (M, N, K, layout), kw = case
    g = torch.Generator(device="cuda").manual_seed(M * 7 + N * 3 + K)
    a, b = _operands(M, N, K, 1, layout, generator=g)
    first = sgemmlab.matmul(a, b, deterministic=True, **kw)
    assert_matches(first, a.double() @ b.double(), K)  # identical, and right
    streams = [torch.cuda.Stream() for _ in range(8)]
    noise = torch.cuda.Stream()
    outs = []
    for i in range(100):
        with torch.cuda.stream(noise):  # other work on the GPU changes timing, not bits
            torch.rand(1024, 1024, device="cuda") @ torch.rand(1024, 1024, device="cuda")
        with torch.cuda.stream(streams[i % 8]):
            outs.append(sgemmlab.matmul(a, b, deterministic=True, **kw))
    torch.cuda.synchronize()
    bits = first.view(torch.int32)
    for i, c in enumerate(outs):
        assert torch.equal(bits, c.view(torch.int32)), f"run {i} on stream {i % 8} differs"


def test_deterministic_is_identical_across_processes():
    """Two fresh processes (their own plans, workspaces and compile-cache reads) give the
    same bits as this one for the same inputs."""
    import torch

    mine = []
    for (M, N, K, layout), kw in DETERMINISTIC:
        g = torch.Generator(device="cuda").manual_seed(M * 7 + N * 3 + K)
        a, b = _operands(M, N, K, 1, layout, generator=g)
        mine.append(_digest(sgemmlab.matmul(a, b, deterministic=True, **kw)))
    tests = str(Path(__file__).resolve().parent)
    for _ in range(2):
        run = subprocess.run([sys.executable, "-c", DIGEST_SCRIPT.format(src=SRC)],
                             capture_output=True, text=True, timeout=300, cwd=tests,
                             env={**__import__("os").environ, "PYTHONPATH": f"{SRC}:{tests}"})
        assert run.returncode == 0, run.stderr[-2000:]
        assert json.loads(run.stdout.strip().splitlines()[-1]) == mine


# ---------------------------------------------------------------------------------------
# the compiled backward pass against float64
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("precision", ["ieee", "tf32x3"])
def test_the_compiled_backward_pass_matches_float64(precision):
    """torch.compile(fullgraph=True) of a two-layer model through sgemmlab.matmul, forward
    and backward: the outputs and every gradient against float64 autograd of the same
    function, each within the bound of its own depth. The activation is smooth (tanh): a
    ReLU's mask flips wherever a pre-activation lies within rounding of zero, and the one
    flipped gradient is then an O(1) difference no bound covers (an H200 run met it, about
    one run in a hundred with these sizes)."""
    import torch

    torch._dynamo.reset()

    def f(x, w1, w2):
        h = torch.tanh(sgemmlab.matmul(x, w1, precision=precision))
        return sgemmlab.matmul(h, w2, precision=precision)

    compiled = torch.compile(f, fullgraph=True)
    x = (torch.rand(4, 67, 33, device="cuda") * 2 - 1).requires_grad_()
    w1 = (torch.rand(33, 130, device="cuda") * 2 - 1).requires_grad_()
    w2 = (torch.rand(130, 17, device="cuda") * 2 - 1).requires_grad_()
    y = compiled(x, w1, w2)
    gy = torch.rand_like(y) * 2 - 1
    gx, g1, g2 = torch.autograd.grad(y, (x, w1, w2), gy)
    x64, w164, w264 = (t.detach().double().requires_grad_() for t in (x, w1, w2))
    h64 = torch.tanh(x64 @ w164)
    y64 = h64 @ w264
    rx, r1, r2 = torch.autograd.grad(y64, (x64, w164, w264), gy.double())
    assert_matches(y.detach(), y64.detach(), 130)
    # depths: dx = (gy w2^T * tanh') w1^T sums over 17 then 130; dW1 sums over the 4 x 67
    # rows; dW2 = h^T gy likewise
    assert_matches(gx, rx, 130 * 17)
    assert_matches(g1, r1, 4 * 67 * 17)
    assert_matches(g2, r2, 4 * 67)


# ---------------------------------------------------------------------------------------
# K at the limit (runtime/limits.K_MAX): right to the last bit, or refused
# ---------------------------------------------------------------------------------------
def _free_gib() -> float:
    import torch

    free, _ = torch.cuda.mem_get_info()
    return free / 2**30


def _sparse_long(K_alloc: int):
    """A (2 x K_alloc) and B (K_alloc x 1), zero but for k = 0, K_alloc // 2, K_alloc - 1
    (set for the depth used by `_set`): integers, so every partial sum is exact in FP32 and
    in TF32, and C must be 21 bit for bit."""
    import torch

    a = torch.zeros(2, K_alloc, device="cuda")
    b = torch.zeros(K_alloc, 1, device="cuda")
    return a, b


def _set(a, b, K):
    a.zero_()
    b.zero_()
    for k, x, y in ((0, 1.0, 2.0), (K // 2, 1.0, 4.0), (K - 1, 3.0, 5.0)):
        a[:, k] = x
        b[k, 0] = y


#: 24 GiB a test: they take turns on one worker with test_membound_gpu's buffers past 2^31
#: floats (the same group), since under `-n 12 --dist loadgroup` two at once ran the GPU out
#: of memory (results/nvidia-h200/pytest/gpu-20261202T1245Z.txt); conftest frees what a
#: test of the group leaves behind
BIG = pytest.mark.xdist_group("bigmem")


@BIG
@pytest.mark.parametrize("kw", [{}, {"kernel": 15}, {"kernel": 18}, {"kernel": 14},
                                {"kernel": 14, "deterministic": True},
                                {"kernel": 20, "precision": "tf32x3"}],
                         ids=["dispatch", "r15", "r18", "r14", "r14-fixed-order", "r20"])
def test_k_at_the_limit_is_exact_and_one_past_it_is_refused(kw):
    """K = K_MAX (and K_MAX - 1, ragged) for M = 2, N = 1: A is 16 GiB, B 8 GiB (views of
    one allocation of K_MAX + 1 columns, which is itself refused before anything runs)."""
    import torch

    from sgemmlab.runtime.limits import K_MAX

    if _free_gib() < 30:
        pytest.skip("needs 30 GiB of free GPU memory")
    a_all, b_all = _sparse_long(K_MAX + 1)
    with pytest.raises(OverflowError, match=rf"K = {K_MAX + 1} exceeds"):
        sgemmlab.matmul(a_all, b_all, **kw)
    for K in (K_MAX, K_MAX - 1):
        a, b = a_all[:, :K], b_all[:K]
        _set(a, b, K)
        c = torch.full((2, 1), NAN, device="cuda")
        sgemmlab.matmul(a, b, out=c, **kw)
        torch.cuda.synchronize()
        assert c.tolist() == [[21.0], [21.0]], f"K = {K}: {c.tolist()}"


@BIG
def test_a_broadcast_batch_at_the_limit_is_exact():
    """A batch that cannot be folded into one taller product (both operands expanded, stride
    0) goes to a batched rung; at K = K_MAX its k-tile count must not wrap (before the limit,
    K >= 2^31 - 31 gave C = beta C without a word)."""
    import torch

    from sgemmlab.runtime.limits import K_MAX

    if _free_gib() < 30:
        pytest.skip("needs 30 GiB of free GPU memory")
    a, b = _sparse_long(K_MAX)
    _set(a, b, K_MAX)
    for batch in (2,):  # (a bigger batch goes to rungs that walk all of K: minutes)
        c = sgemmlab.matmul(a.unsqueeze(0).expand(batch, 2, K_MAX),
                            b.unsqueeze(0).expand(batch, K_MAX, 1))
        torch.cuda.synchronize()
        assert c.shape == (batch, 2, 1) and bool((c == 21).all()), f"batch {batch}"
