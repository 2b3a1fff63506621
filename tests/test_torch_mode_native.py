"""The drop-in switch's native kernels (sgemmlab/csrc/switch.cpp) without a GPU.

The module is built as a user's first torch_mode() builds it, registered on torch's CPU key
instead of CUDA, and handed a stand-in for cuLaunchKernel: a ctypes callback that reads the
launch's packed arguments exactly as the driver would (the kernel handle, the grid, and
an array of pointers to the arguments) and computes the launch on the CPU tensors' memory
in float64. The stand-in plans export launches laid out as the rungs' are (M, N, K, alpha,
A, lda, B, ldb, beta, C, ldc, ...: the A, B and C slots at launch.POINTERS; with the
epilogue's source, X and ldx after ldc, X's slot at launch.SOURCE_POINTERS), and the fill
launch as kernels/broadcast.cu's. So every test sees the C++ side do what it does on the
H200 — the key, the recipe, the repointing, the bias read in the epilogue or filled, the
passes to torch's kernel — and checks the values against float64. The GPU tests run the
same kernels on the real driver.
"""

from __future__ import annotations

import ctypes
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sgemmlab import dropin  # noqa: E402
from sgemmlab.dropin import torch_mode  # noqa: E402
from sgemmlab.plan import describe  # noqa: E402
from sgemmlab.runtime import native  # noqa: E402
from sgemmlab.runtime.launch import POINTERS, SOURCE_POINTERS  # noqa: E402

F = torch.nn.functional
# the stand-in kernels' handles (3: a workspace tail too; 4: beta's term from a source X)
GEMM, FILL, GEMM_WS, GEMM_X = 1, 2, 3, 4

LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, *[ctypes.c_uint] * 7,
                          ctypes.c_uint64, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)
CAPTURING = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, ctypes.POINTER(ctypes.c_int))


def product64(a, b):
    return (a.double().unsqueeze(-1) * b.double().unsqueeze(-3)).sum(-2)


def _view(ptr: int, shape, strides) -> np.ndarray:
    """float32 memory at `ptr` as an array (strides in elements)."""
    if not shape or min(shape) == 0:
        return np.zeros(shape, np.float32)
    span = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    flat = np.ctypeslib.as_array((ctypes.c_float * span).from_address(ptr))
    return np.lib.stride_tricks.as_strided(flat, shape, [4 * s for s in strides])


class Driver:
    """cuLaunchKernel and cuStreamIsCapturing, on the CPU: each launch is recorded."""

    def __init__(self):
        self.launches: list[tuple] = []
        self.launch = LAUNCH(self._launch)
        self.capturing = CAPTURING(lambda stream, status: 0)

    def addresses(self) -> tuple[int, int]:
        return (ctypes.cast(self.launch, ctypes.c_void_p).value,
                ctypes.cast(self.capturing, ctypes.c_void_p).value)

    def _launch(self, kernel, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        def arg(i, ctype):
            return ctypes.cast(params[i], ctypes.POINTER(ctype))[0]

        try:
            if kernel in (GEMM, GEMM_WS, GEMM_X):
                self._gemm(arg, kernel == GEMM_X)
                if kernel == GEMM_WS:
                    self.launches.append(("tail", arg(17, ctypes.c_uint64),
                                          arg(18, ctypes.c_uint64)))
            elif kernel == FILL:
                self._fill(arg)
            else:
                return 400  # CUDA_ERROR_INVALID_HANDLE
        except Exception as exc:  # a stand-in that fails must fail the test
            self.launches.append(("error", repr(exc)))
            return 999
        return 0

    def _gemm(self, arg, source: bool = False):
        i32, f32, u64 = ctypes.c_int32, ctypes.c_float, ctypes.c_uint64
        M, N, K, alpha = arg(0, i32), arg(1, i32), arg(2, i32), arg(3, f32)
        pa, lda, pb, ldb = arg(4, u64), arg(5, i32), arg(6, u64), arg(7, i32)
        beta, pc, ldc = arg(8, f32), arg(9, u64), arg(10, i32)
        px, ldx = (arg(11, u64), arg(12, ctypes.c_int64)) if source else (0, 0)
        first = 13 if source else 11
        batch, sa, sb, sc, ta, tb = (arg(first + i, ctypes.c_int64) for i in range(6))
        self.launches.append(("gemm", pa, pb, pc, alpha, beta) + ((px,) if source else ()))
        for z in range(batch):
            A = _view(pa + 4 * z * sa, (M, K), (1, lda) if ta else (lda, 1)).astype(np.float64)
            Bm = _view(pb + 4 * z * sb, (K, N), (1, ldb) if tb else (ldb, 1)).astype(np.float64)
            C = _view(pc + 4 * z * sc, (M, N), (ldc, 1))
            r = alpha * (A @ Bm)
            if beta != 0:  # C itself, or X: the same for every product of a batch
                old = _view(px, (M, N), (ldx, 1)) if source else C
                r = r + beta * old.astype(np.float64)
            C[...] = r.astype(np.float32)

    def _fill(self, arg):
        i64 = ctypes.c_int64
        pout, px = arg(0, ctypes.c_uint64), arg(1, ctypes.c_uint64)
        rows, cols, total, sz, si, sj = (arg(2 + i, i64) for i in range(6))
        self.launches.append(("fill", pout, px))
        batch = total // (rows * cols)
        out = _view(pout, (batch, rows, cols), (rows * cols, cols, 1))
        out[...] = _view(px, (batch, rows, cols), (sz, si, sj))


class Launch:
    """A stand-in for launch.Packed: what `export` gives csrc/switch.cpp."""

    def __init__(self, kernel, cells, slots):
        self.kernel, self.cells, self.slots = kernel, cells, slots

    def export(self, operands):
        return (self.kernel, (1, 1, 1), (1, 1, 1), self.cells,
                [(i, operands[i]) for i in self.slots], [], 0, 0)


def _cell(value, ctype) -> int:
    return int.from_bytes(bytes(ctype(value)), "little")


class Plan:
    """A stand-in plan.Plan: the real `describe` of the call, and the template a rung's
    launch would export (its arguments in the rungs' order; with a source's row stride
    `ldx`, X's slot and ldx after ldc)."""

    kind, per_item = "gemm", False

    def __init__(self, a, b, c, alpha=1.0, beta=0.0, ldx=None):
        g = describe((tuple(a.shape), a.stride()), (tuple(b.shape), b.stride()),
                     (tuple(c.shape), c.stride()))
        self.gemm, self.alpha, self.beta = g, alpha, beta
        self.kind = "empty" if g.empty else "scale" if g.K == 0 else "gemm"  # as plan.Plan
        self.takes_source = self.kind == "gemm" and not g.swap  # as a rung 13-18 plan's
        i32, f32 = ctypes.c_int32, ctypes.c_float
        cells = [_cell(g.M, i32), _cell(g.N, i32), _cell(g.K, i32), _cell(alpha, f32), 0,
                 _cell(g.lda, i32), 0, _cell(g.ldb, i32), _cell(beta, f32), 0,
                 _cell(g.ldc, i32)]
        tail = [_cell(v, ctypes.c_int64) for v in (
            g.batch, g.stride_a, g.stride_b, g.stride_c, g.trans_a, g.trans_b)]
        self.templates = {"only": Launch(GEMM, cells + tail, POINTERS)}
        if ldx is not None:
            self.templates["source"] = Launch(
                GEMM_X, cells + [0, _cell(ldx, ctypes.c_int64)] + tail, SOURCE_POINTERS)


class Python:
    """The Python side's stand-ins: plans, the first call's product, the fill."""

    def __init__(self, driver):
        self.driver = driver
        self.misses: list[str] = []

    def plan_for(self, a, b, c, opts, fresh=False):
        if not fresh and dropin._overlap(c, a, b):
            return None
        return Plan(a, b, c)

    def run(self, plan, a, b, c, alpha, beta, source=None):
        """The first call of a signature, in Python; its template then carries the call's
        alpha and beta (and the source's stride), as a real plan's does (Plan.templates)."""
        ldx = None if source is None else source[1]
        plan.templates.update(Plan(a, b, c, alpha, beta, ldx).templates)
        r = alpha * product64(a, b)
        if beta != 0:
            if source is None:
                old = c.double()
            else:  # X as the kernel reads it: rows ldx apart, the batch's own or repeated
                g = plan.gemm
                old = torch.from_numpy(_view(source[0], (g.M, g.N), (ldx, 1)).astype(
                    np.float64))
                old = old.reshape(c.shape) if g.M == c.numel() // g.N else old
            r = r + beta * old
        c.copy_(r)

    def fill(self, target, x, shape, strides=None):
        target.copy_(x.expand(shape))
        if not target.is_contiguous():
            return None
        if target.numel() == 0:
            return ()
        s = strides or dropin._broadcast_strides(x, shape)
        rows, cols = shape[-2], shape[-1]
        total = target.numel()
        i64 = ctypes.c_int64
        return Launch(FILL, [0, 0] + [_cell(v, i64) for v in (rows, cols, total, *s)], (0, 1))


@pytest.fixture
def switch(monkeypatch):
    torch_mode.disable_all()
    mod = native.load(quiet=True)
    if mod is None:
        pytest.skip(f"the native module cannot be built here ({native._failed})")
    driver = Driver()
    py = Python(driver)
    monkeypatch.setattr(dropin, "KEY", "CPU")
    monkeypatch.setattr(dropin, "NATIVE", True)
    monkeypatch.setattr(dropin, "_driver_calls", driver.addresses)
    monkeypatch.setattr(dropin, "_plan_for", py.plan_for)
    monkeypatch.setattr(dropin, "_run", py.run)
    monkeypatch.setattr(dropin, "_fill", py.fill)
    monkeypatch.setattr(dropin, "_template", lambda plan, dev, alpha, beta, source=None:
                        plan.templates["only" if source is None else "source"])
    real_miss = dropin._miss

    def miss(op, *args):
        py.misses.append(dropin.OPS[op])
        return real_miss(op, *args)

    monkeypatch.setattr(dropin, "_miss", miss)
    mod.clear()
    yield driver, py, mod
    torch_mode.disable_all()
    mod.clear()


pytestmark = pytest.mark.usefixtures("float32_highest")


def close(got, want):
    torch.testing.assert_close(got.double(), want, rtol=2e-6, atol=2e-6)


def rand(*shape, gen):
    return torch.randn(shape, generator=gen)


CASES = {  # name -> (call on fresh operands, its float64 value, the aten op it lands in)
    "mm": (lambda o: o["a"] @ o["b"], lambda o: product64(o["a"], o["b"]), "mm"),
    "x @ W^T": (lambda o: o["a"] @ o["w"].t(), lambda o: product64(o["a"], o["w"].t()), "mm"),
    "bmm": (lambda o: torch.bmm(o["x"], o["y"]), lambda o: product64(o["x"], o["y"]), "bmm"),
    "linear": (lambda o: F.linear(o["a"], o["w"], o["bias"]),
               lambda o: product64(o["a"], o["w"].t()) + o["bias"].double(), "addmm"),
    "addmm, a column of x": (
        lambda o: torch.addmm(o["col"], o["a"], o["b"], beta=0.5, alpha=-2),
        lambda o: 0.5 * o["col"].double() - 2 * product64(o["a"], o["b"]), "addmm"),
    "addmm, a whole x": (
        lambda o: torch.addmm(o["full"], o["a"], o["b"], beta=3),
        lambda o: 3 * o["full"].double() + product64(o["a"], o["b"]), "addmm"),
    "baddbmm": (lambda o: torch.baddbmm(o["bias"], o["x"], o["y"], alpha=0.25),
                lambda o: o["bias"].double() + 0.25 * product64(o["x"], o["y"]), "baddbmm"),
    "mm out=": (lambda o: torch.mm(o["a"], o["b"], out=o["out"]),
                lambda o: product64(o["a"], o["b"]), "mm.out"),
    "addmm out=x": (lambda o: torch.addmm(o["out"], o["a"], o["b"], out=o["out"]),
                    lambda o: o["out"].double() + product64(o["a"], o["b"]), "addmm.out"),
}


def operands(gen):
    return {"a": rand(5, 7, gen=gen), "b": rand(7, 3, gen=gen), "w": rand(3, 7, gen=gen),
            "x": rand(2, 5, 7, gen=gen), "y": rand(2, 7, 3, gen=gen),
            "bias": rand(3, gen=gen), "col": rand(5, 1, gen=gen), "full": rand(5, 3, gen=gen),
            "out": rand(5, 3, gen=gen)}


@pytest.mark.parametrize("name", CASES)
def test_a_signature_asks_python_once_then_runs_in_cpp_on_new_pointers(switch, name):
    driver, py, mod = switch
    call, want, op = CASES[name]
    gen = torch.Generator().manual_seed(11)
    with torch_mode() as mode:
        for step in range(3):
            o = operands(gen)  # new tensors, new pointers: each call is repointed
            expected = want(o)  # before the call: out= may be an input too
            got = call(o)
            close(got, expected)
    assert py.misses == [op], py.misses
    assert mode.served == {op: 3} and not mode.passed, (mode.served, mode.passed)
    gemms = [x for x in driver.launches if x[0] == "gemm"]
    assert len(gemms) == 2 and gemms[0][1:4] != gemms[1][1:4], driver.launches
    assert not [x for x in driver.launches if x[0] == "error"], driver.launches
    assert mod.recipes() == 1


def test_a_bias_is_read_in_the_epilogue_without_a_fill(switch):
    """F.linear's bias reaches the product's own launch as its source (X's slot, row stride
    0): no fill kernel, the output written once."""
    driver, py, _ = switch
    gen = torch.Generator().manual_seed(3)
    with torch_mode():
        for _ in range(2):
            o = operands(gen)
            r = F.linear(o["a"], o["w"], o["bias"])
            close(r, product64(o["a"], o["w"].t()) + o["bias"].double())
    assert not [x for x in driver.launches if x[0] == "fill"], driver.launches
    (gemm,) = [x for x in driver.launches if x[0] == "gemm"]  # the second call's, in C++
    assert gemm[3] == r.data_ptr() and gemm[6] == o["bias"].data_ptr()


@pytest.mark.parametrize("case", ["a column", "unaligned bias", "rows not a multiple of 4"])
def test_an_input_the_epilogue_cannot_read_is_filled_into_the_output(switch, case):
    """A column of x (a stride-0 column), a bias off 16-byte alignment, a whole x whose rows
    are not 4-element multiples apart: copied into the output first (kernels/broadcast.cu),
    then updated by the product, with the new output and x's pointers every call."""
    driver, py, _ = switch
    gen = torch.Generator().manual_seed(4)
    with torch_mode():
        for _ in range(2):
            a, b = rand(5, 7, gen=gen), rand(7, 4, gen=gen)
            x = {"a column": rand(5, 1, gen=gen),
                 "unaligned bias": rand(5, gen=gen)[1:],
                 "rows not a multiple of 4": rand(5, 7, gen=gen)[:, :4]}[case]
            r = torch.addmm(x, a, b, beta=0.5)
            close(r, 0.5 * x.double() + product64(a, b))
    fills = [f for f in driver.launches if f[0] == "fill"]
    assert len(fills) == 1 and fills[0][1:] == (r.data_ptr(), x.data_ptr()), driver.launches


def test_an_aligned_whole_input_is_read_with_its_row_stride(switch):
    driver, py, _ = switch
    gen = torch.Generator().manual_seed(6)
    with torch_mode():
        for _ in range(2):
            a, b = rand(5, 7, gen=gen), rand(7, 4, gen=gen)
            x = rand(5, 8, gen=gen)[:, :4]  # rows 8 apart
            r = torch.addmm(x, a, b, beta=-2, alpha=3)
            close(r, -2 * x.double() + 3 * product64(a, b))
    assert not [f for f in driver.launches if f[0] == "fill"]
    (gemm,) = [x for x in driver.launches if x[0] == "gemm"]
    assert gemm[6] == x.data_ptr()


def test_what_sgemmlab_refuses_goes_to_torch_without_asking_python_again(switch):
    _, py, mod = switch
    gen = torch.Generator().manual_seed(5)
    a, b, x = rand(4, 6, gen=gen), rand(6, 2, gen=gen), rand(4, 2, gen=gen)
    a[0, 0] = float("nan")
    with torch_mode() as mode:
        for _ in range(3):  # alpha = 0: torch's kernel decides what NaN * 0 gives
            r = torch.addmm(x, a, b, alpha=0)
            torch.testing.assert_close(r, x)
    assert py.misses == ["addmm"] and mod.recipes() == 1
    assert mode.passed == {"addmm": 3} and not mode.served


def test_calls_the_kernels_never_see_go_straight_to_torch(switch):
    driver, py, _ = switch
    gen = torch.Generator().manual_seed(9)
    a, b = rand(4, 6, gen=gen), rand(6, 2, gen=gen)
    with torch_mode() as mode:
        r64 = a.double() @ b.double()  # another dtype
        torch.set_float32_matmul_precision("high")  # TF32 accepted: cuBLAS's
        r_high = a @ b
        torch.set_float32_matmul_precision("highest")
        with pytest.raises(RuntimeError):  # torch's own error for shapes it refuses
            a @ a
        s = (a.relu() + 1).sum()  # not a product
    assert not py.misses and not driver.launches
    assert mode.passed == {"mm": 3} and not mode.served
    close(r_high, product64(a, b))
    torch.testing.assert_close(r64, product64(a, b))
    assert torch.isfinite(s)


def test_an_out_that_overlaps_an_operand_goes_to_torch_even_with_a_recipe(switch):
    _, py, _ = switch
    gen = torch.Generator().manual_seed(13)
    buf = rand(2, 4, 4, gen=gen)
    b = rand(4, 4, gen=gen)
    with torch_mode() as mode:
        torch.mm(buf[0], b, out=buf[1])  # the signature's recipe
        theirs = buf.clone()
        torch.mm(buf[1], b, out=buf[1])  # the same signature, out is an operand
    torch.mm(theirs[1], b, out=theirs[1])  # whatever torch's kernel makes of it
    assert torch.equal(buf, theirs)
    assert mode.served == {"mm.out": 1} and mode.passed == {"mm.out": 1}


def test_beta_zero_ignores_nan_in_the_input(switch):
    gen = torch.Generator().manual_seed(17)
    a, b = rand(3, 5, gen=gen), rand(5, 4, gen=gen)
    x = torch.full((3, 4), float("nan"))
    with torch_mode() as mode:
        for _ in range(2):
            close(torch.addmm(x, a, b, beta=0), product64(a, b))
    assert mode.served == {"addmm": 2}


def test_modes_nest_and_count_their_own_calls_and_disabling_restores_torch(switch):
    driver, _, _ = switch
    gen = torch.Generator().manual_seed(19)
    a, b = rand(3, 5, gen=gen), rand(5, 4, gen=gen)
    outer = torch_mode().enable()
    a @ b
    with torch_mode() as inner:
        a @ b
        a @ b
    a @ b
    outer.disable()
    n = len(driver.launches)
    close(a @ b, product64(a, b))  # torch's own kernel again
    assert len(driver.launches) == n
    assert outer.served == {"mm": 2} and inner.served == {"mm": 2}


def test_a_new_signature_is_a_new_recipe(switch):
    _, py, mod = switch
    gen = torch.Generator().manual_seed(23)
    with torch_mode():
        for m in (1, 2, 3, 2, 1):
            a, b = rand(m, 6, gen=gen), rand(6, 5, gen=gen)
            close(a @ b, product64(a, b))
        for m in (1, 2):
            a, b = rand(m, 6, gen=gen), rand(6, 5, gen=gen)
            close(a.t().contiguous().t() @ b, product64(a, b))  # other strides, same shape
    assert py.misses == ["mm"] * 4 and mod.recipes() == 4


def test_a_workspace_tail_points_into_the_workspace_python_hands_over(switch, monkeypatch):
    """A launch with a workspace (Stream-K, split-K parts): its tail is the stream's
    workspace as runtime/workspace.py allocates it, asked for once, and again after that
    module replaced or freed a buffer (workspace.on_change -> the native bump)."""
    from sgemmlab.runtime import workspace as ws

    driver, py, mod = switch
    asked = []

    def space(dev, handle, zeroed, scratch):
        asked.append((zeroed, scratch))
        base = 0x100000 * len(asked)
        return base, base + 0x1000

    monkeypatch.setattr(dropin, "_workspace", space)
    real_run = py.run

    def run(plan, a, b, c, alpha, beta, source=None):  # a tail, as a rung 14 launch has
        real_run(plan, a, b, c, alpha, beta, source)
        t = plan.templates["only"]
        plan.templates["only"] = types.SimpleNamespace(export=lambda operands: (
            GEMM_WS, (1, 1, 1), (1, 1, 1), t.cells, [(i, operands[i]) for i in t.slots],
            [(17, 1, 0), (18, 0, 64)], 256, 512))

    monkeypatch.setattr(dropin, "_run", run)
    gen = torch.Generator().manual_seed(29)
    with torch_mode():
        for step in range(4):
            if step == 3:
                ws._moved()  # a buffer replaced: the next call asks again
            a, b = rand(6, 5, gen=gen), rand(5, 7, gen=gen)
            close(a @ b, product64(a, b))
    tails = [x[1:] for x in driver.launches if x[0] == "tail"]
    assert asked == [(256, 512), (256, 512)], asked
    assert tails == [(0x101000, 0x100040)] * 2 + [(0x201000, 0x200040)], tails


def test_the_workspace_the_native_kernels_get_is_the_streams_own(monkeypatch):
    """dropin._workspace (what csrc/switch.cpp asks) is runtime/workspace.py's buffer for
    the stream the handle names, on that device, at the sizes asked."""
    seen = []
    monkeypatch.setattr(dropin, "stream_for", lambda handle, dev: ("stream", handle, dev))
    monkeypatch.setattr(dropin.workspace, "workspace",
                        lambda dev, stream, z, s: seen.append((dev, stream, z, s)) or (16, 32))
    assert dropin._workspace(1, 0xABC, 256, 1024) == (16, 32)
    assert seen == [(1, ("stream", 0xABC, 1), 256, 1024)]


def test_precision_and_determinism_are_part_of_a_signature(switch, monkeypatch):
    """A mode's precision, and torch's determinism flag, reach the plan; a call of the same
    shapes under other options is another signature (a recipe never serves the wrong one)."""
    _, py, mod = switch
    opts = []
    plan_for = py.plan_for
    monkeypatch.setattr(dropin, "_plan_for", lambda a, b, c, o, fresh=False: (
        opts.append(o), plan_for(a, b, c, o, fresh))[1])
    gen = torch.Generator().manual_seed(31)
    a, b = rand(3, 8, gen=gen), rand(8, 5, gen=gen)
    old = torch.are_deterministic_algorithms_enabled()
    try:
        for _ in range(2):
            with torch_mode():
                close(a @ b, product64(a, b))
            with torch_mode(precision="tf32x3"):
                close(a @ b, product64(a, b))
            torch.use_deterministic_algorithms(True)
            with torch_mode():
                close(a @ b, product64(a, b))
            torch.use_deterministic_algorithms(False)
    finally:
        torch.use_deterministic_algorithms(old)
    assert opts == [("ieee", False), ("tf32x3", False), ("ieee", True)], opts
    assert mod.recipes() == 3 and len(py.misses) == 3


def test_an_empty_product_is_a_recipe_without_launches(switch):
    driver, py, _ = switch
    with torch_mode() as mode:
        for _ in range(2):
            r = torch.mm(torch.empty(0, 4), torch.ones(4, 3))
            assert r.shape == (0, 3)
            r = torch.mm(torch.ones(2, 0), torch.ones(0, 3))  # K = 0: torch's zeros
            assert torch.equal(r, torch.zeros(2, 3))
    assert not [x for x in driver.launches if x[0] == "gemm"]
    assert mode.served["mm"] + mode.passed["mm"] == 4
    # the empty product is served from its recipe; K = 0 (beta C) asks Python every time
    assert py.misses == ["mm"] * 3, py.misses


def test_threads_share_the_recipes(switch):
    """Products from several threads at once: each gets its own operands' result."""
    import concurrent.futures

    _, py, _ = switch
    gen = torch.Generator().manual_seed(37)
    work = [(rand(4, 9, gen=gen), rand(9, 6, gen=gen)) for _ in range(32)]
    with torch_mode(), concurrent.futures.ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda ab: ab[0] @ ab[1], work))
    for (a, b), r in zip(work, got):
        close(r, product64(a, b))
    assert 1 <= len(py.misses) <= 4  # one signature: asked until a recipe is kept


def test_an_input_of_more_dimensions_than_the_product_gets_torchs_own_error(switch):
    """addmm's input of (2, 3, 4) for a 3 x 4 product: torch refuses it, and so does the
    switch (through torch's kernel), before it builds a key of the call."""
    _, py, _ = switch
    with torch_mode() as mode:
        with pytest.raises(RuntimeError):
            torch.addmm(torch.ones(2, 3, 4), torch.ones(3, 5), torch.ones(5, 4))
        with pytest.raises(RuntimeError):
            torch.baddbmm(torch.ones(1, 2, 3, 4), torch.ones(2, 3, 5), torch.ones(2, 5, 4))
    assert not py.misses and mode.passed == {"addmm": 1, "baddbmm": 1}


def test_the_python_registrations_read_the_bias_as_the_source_too(switch, monkeypatch):
    """Without the native module (SGEMMLAB_NATIVE=0, no compiler): the first call plans, the
    next ones come from the Python recipe, and both read the bias in the product's launch;
    an unaligned bias of the same signature is filled instead."""
    driver, py, _ = switch
    monkeypatch.setattr(dropin, "NATIVE", False)
    runs = []
    real_run = py.run
    monkeypatch.setattr(dropin, "_run", lambda plan, a, b, c, al, be, source=None: (
        runs.append(source), real_run(plan, a, b, c, al, be, source)))
    fills = []
    real_fill = py.fill
    monkeypatch.setattr(dropin, "_fill", lambda *args, **kw: (
        fills.append(args[1].data_ptr()), real_fill(*args, **kw))[1])
    gen = torch.Generator().manual_seed(41)
    with torch_mode() as mode:
        for aligned in (True, True, False):
            o = operands(gen)
            bias = o["bias"] if aligned else rand(4, gen=gen)[1:]
            close(F.linear(o["a"], o["w"], bias), product64(o["a"], o["w"].t()) +
                  bias.double())
    assert [s is not None for s in runs] == [True, True, False], runs
    assert runs[0][0] != runs[1][0] and runs[0][1] == runs[1][1] == 0  # each call's bias
    assert fills == [bias.data_ptr()] and mode.served == {"addmm": 3}
    assert not [x for x in driver.launches if x[0] in ("gemm", "fill")]  # no C++ launches
