"""The packed launch (runtime/launch.Packed, CPU, with the driver call replaced): the
arguments land in C memory as the kernel's parameter types, in order, and a call passes
cuLaunchKernel exactly the kernel, grid, block, stream and parameter array; a failed launch
raises; an argument that is neither a numpy scalar nor a pointer is refused."""

from __future__ import annotations

import ctypes
import types

import numpy as np
import pytest

from sgemmlab.runtime import driver as driver_mod
from sgemmlab.runtime import launch as launch_mod
from sgemmlab.runtime import workspace as ws
from sgemmlab.runtime.packed import Packed, WorkspaceLaunch

KERNEL = types.SimpleNamespace(handle="CUkernel")
STREAM = types.SimpleNamespace(handle="CUstream")


def test_arguments_are_packed_in_order_as_their_c_types():
    args = (np.int32(-7), np.float32(0.1), 0x7F00_0000_1000, np.int64(1 << 40), np.int32(3))
    p = launch_mod.Packed(KERNEL, STREAM, (5, 2, 1), (256, 1, 1), args)
    seen = []
    p._fn = lambda *a: seen.append(a) or 0
    p()
    (call,) = seen
    assert call[:9] == ("CUkernel", 5, 2, 1, 256, 1, 1, 0, "CUstream") and call[10] is None
    ptrs = (ctypes.c_void_p * len(args)).from_address(call[9])
    read = [ctypes.c_int32.from_address(ptrs[0]).value,
            ctypes.c_float.from_address(ptrs[1]).value,
            ctypes.c_uint64.from_address(ptrs[2]).value,
            ctypes.c_int64.from_address(ptrs[3]).value,
            ctypes.c_int32.from_address(ptrs[4]).value]
    assert read == [-7, float(np.float32(0.1)), 0x7F00_0000_1000, 1 << 40, 3]
    assert len({ptrs[i] for i in range(len(args))}) == len(args)


def test_a_failed_launch_raises():
    p = launch_mod.Packed(KERNEL, STREAM, (1, 1, 1), (32, 1, 1), (np.int32(1),))
    p._fn = lambda *a: 701  # CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
    with pytest.raises(RuntimeError, match="cuLaunchKernel failed"):
        p()


def test_a_launch_on_stand_in_handles_has_no_driver_to_run_it():
    p = launch_mod.Packed(KERNEL, STREAM, (1, 1, 1), (32, 1, 1), (np.int32(1),))
    with pytest.raises(TypeError, match="no driver to run it"):
        p()


@pytest.mark.parametrize("bad", [1.5, -1, 2**64, "0x10", np.float16(1.0), np.int8(1)])
def test_an_argument_of_no_known_type_is_refused(bad):
    with pytest.raises(TypeError, match="numpy scalar or a device pointer"):
        launch_mod.Packed(KERNEL, STREAM, (1, 1, 1), (32, 1, 1), (np.int32(1), bad))


def test_doubles_and_structs_are_packed_as_their_bytes():
    """rung 26's steps take a double (oz_norms' radius) and structs by value (the moduli)."""
    import ctypes

    class Pair(ctypes.Structure):
        _fields_ = [("m", ctypes.c_int * 3), ("w", ctypes.c_ulonglong)]

    s = Pair((ctypes.c_int * 3)(5, 6, 7), 2**40 + 3)
    p = launch_mod.Packed(KERNEL, STREAM, (1, 1, 1), (32, 1, 1), (np.float64(0.1), s))
    first, second = p._values
    assert bytes(first) == np.float64(0.1).tobytes()
    assert second.address % 64 == 0
    assert ctypes.string_at(second.address, ctypes.sizeof(s)) == bytes(s)


def test_the_capture_probe_resolves_the_handle_once_and_asks_the_driver_every_call(
        monkeypatch):
    asked, reads = [], []

    def is_capturing(handle, status):
        asked.append(handle)
        status._obj.value = driver_mod.CAPTURE_ACTIVE if len(asked) == 2 else 0
        return driver_mod.SUCCESS

    class Stream:
        @property
        def handle(self):
            reads.append(1)
            return 0x7F00

    monkeypatch.setitem(driver_mod._protos, "cuStreamIsCapturing", is_capturing)
    probe = ws.capture_probe(Stream())
    assert [probe(), probe(), probe()] == [False, True, False]
    assert asked == [0x7F00] * 3 and len(reads) == 1


def test_a_failed_capture_query_counts_as_not_capturing(monkeypatch):
    monkeypatch.setitem(driver_mod._protos, "cuStreamIsCapturing", lambda h, s: 400)
    assert ws.capturing(types.SimpleNamespace(handle=0x7F00)) is False


@pytest.mark.parametrize("legacy", [0, 1])
def test_the_legacy_default_stream_needs_no_capture_query(monkeypatch, legacy):
    """CUDA cannot capture the legacy stream (torch's default): no probe, no driver call."""
    def no_driver(*a):
        raise AssertionError("the driver was asked")

    class Stream:
        handle = legacy

    monkeypatch.setattr(driver_mod, "stream_is_capturing", no_driver)
    assert ws.capture_probe(Stream()) is None
    assert ws.capturing(Stream()) is False


def test_integer_handles_launch_through_ctypes_on_plain_integers(monkeypatch):
    seen = []
    monkeypatch.setattr(driver_mod, "launch_kernel",
                        lambda: lambda *a: seen.append(a) or 0)
    kernel, stream = types.SimpleNamespace(handle=0xABC0), types.SimpleNamespace(handle=0x51)
    p = launch_mod.Packed(kernel, stream, (3, 1, 1), (128, 1, 1), (np.int32(9),))
    p()
    (call,) = seen
    assert call[:9] == (0xABC0, 3, 1, 1, 128, 1, 1, 0, 0x51) and call[10] is None
    assert ctypes.c_int32.from_address((ctypes.c_void_p * 1).from_address(call[9])[0]).value == 9
    p._fn = lambda *a: 719  # CUDA_ERROR_LAUNCH_FAILED, as ctypes returns it: an int
    with pytest.raises(RuntimeError, match="cuLaunchKernel failed"):
        p()


def test_an_overlapped_launch_goes_through_cuLaunchKernelEx_with_its_config(monkeypatch):
    """overlap=True: one cuLaunchKernelEx(config, f, params, None), the config holding the
    grid, block, dynamic shared memory and stream, and one attribute: programmatic stream
    serialization, allowed."""
    seen = []
    monkeypatch.setattr(driver_mod, "launch_kernel_ex", lambda: lambda *a: seen.append(a) or 0)
    kernel, stream = types.SimpleNamespace(handle=0xABC0), types.SimpleNamespace(handle=0x51)
    p = Packed(kernel, stream, (3, 2, 1), (384, 1, 1), (np.int32(9),), smem=4096,
               overlap=True)
    p()
    (call,) = seen
    assert call[1] == 0xABC0 and call[3] is None
    config = driver_mod.LaunchConfig.from_address(call[0])
    assert (tuple(config.grid), tuple(config.block), config.shared, config.stream,
            config.count) == ((3, 2, 1), (384, 1, 1), 4096, 0x51, 1)
    attr = config.attrs[0]
    assert attr.id == driver_mod.LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    value = ctypes.addressof(attr) + driver_mod.LaunchAttribute.value.offset
    assert ctypes.c_int.from_address(value).value == 1
    assert ctypes.c_int32.from_address((ctypes.c_void_p * 1).from_address(call[2])[0]).value == 9
    p._fn = lambda *a: 719
    with pytest.raises(RuntimeError, match="cuLaunchKernelEx failed"):
        p()
    with pytest.raises(TypeError, match="overlap"):
        p.export({})


def _record_pointers(p, seen):
    """Replace p's driver call by one that records A, B, C as the kernel would read them."""

    def call(*a):
        ptrs = (ctypes.c_void_p * len(p.args)).from_address(a[9])
        seen.append(tuple(ctypes.c_uint64.from_address(ptrs[i]).value for i in (4, 6, 9)))
        return 0

    p._fn = call


def _bare_plan(monkeypatch, g, bind, rung=None):
    """A plan.Plan of Gemm `g` whose launcher's bind is `bind`, on the stand-in stream."""
    from sgemmlab import plan as plan_mod

    monkeypatch.setattr(plan_mod, "stream_for", lambda handle, dev: STREAM)
    pl = plan_mod.Plan.__new__(plan_mod.Plan)
    for name, v in dict(gemm=g, out_shape=(8, 8), kind="gemm", device_id=0, rung=rung,
                        config=None, launcher=types.SimpleNamespace(bind=bind),
                        per_item=False, reuse=True, bound={}, templates={},
                        lock=__import__("threading").Lock(), staging=None).items():
        setattr(pl, name, v)
    return pl


@pytest.mark.parametrize("swap", [False, True])
def test_a_plan_repoints_its_packed_launch_for_new_pointers(swap, monkeypatch):
    from sgemmlab import plan as plan_mod

    g = plan_mod.Gemm(8, 8, 8, 1, False, False, 8, 8, 8, 0, 0, 0, swap, (8, 8))
    packs, seen = [], []

    def bind(M, N, K, alpha, a, lda, b, ldb, beta, c, ldc, stream, **kw):
        args = (np.int32(M), np.int32(N), np.int32(K), np.float32(alpha), a, np.int32(lda),
                b, np.int32(ldb), np.float32(beta), c, np.int32(ldc))
        p = launch_mod.Packed(KERNEL, STREAM, (1, 1, 1), (32, 1, 1), args,
                              launch_mod.POINTERS)
        _record_pointers(p, seen)
        packs.append(p)
        return p

    pl = _bare_plan(monkeypatch, g, bind)
    calls = [(0x100, 0x200, 0x300), (0x400, 0x500, 0x600), (0x100, 0x200, 0x300),
             (0x700, 0x800, 0x900)]
    for pa, pb, pc in calls:
        pl.launch(pa, pb, pc, 7, 1.0, 0.0)
    want = [(pb, pa, pc) if swap else (pa, pb, pc) for pa, pb, pc in calls]
    assert seen == want
    assert len(packs) == 1  # packed once; every other pointer set only repointed it
    pl.launch(0x100, 0x200, 0x300, 7, 2.0, 0.0)  # another alpha: packed anew
    assert len(packs) == 2 and seen[-1] == want[0]


def test_repointing_checks_its_pointers():
    p = launch_mod.Packed(KERNEL, STREAM, (1, 1, 1), (32, 1, 1),
                          (np.int32(1), 0x10, 0x20), (1, 2))
    with pytest.raises(ValueError, match="2 pointers for 2 slots|pointers"):
        p.repointed(0x10)
    with pytest.raises(TypeError, match="device pointer"):
        p.repointed(0x10, -1)


def _driver_recorder(monkeypatch, nargs):
    """A fake cuLaunchKernel (through runtime/driver.py) recording every argument as the kernel
    would read it, for launches on integer handles."""
    seen = []

    def call(*a):
        ptrs = (ctypes.c_void_p * nargs).from_address(a[9])
        seen.append(tuple(ctypes.c_uint64.from_address(ptrs[i]).value for i in range(nargs)))
        return 0

    monkeypatch.setattr(driver_mod, "launch_kernel", lambda: call)
    return seen


def test_a_workspace_launch_is_repointed_and_follows_its_workspace(monkeypatch):
    seen = _driver_recorder(monkeypatch, 13)
    spaces = iter([(0xA000, 0xB000), (0xC000, 0xD000)])
    monkeypatch.setattr(ws, "workspace", lambda dev, stream, z, s: next(spaces))
    monkeypatch.setattr(ws, "capture_probe", lambda stream: None)
    kernel, stream = types.SimpleNamespace(handle=0x10), types.SimpleNamespace(handle=0x20)
    head = [np.int32(8), np.int32(8), np.int32(8), np.float32(1), 0x100, np.int32(8), 0x200,
            np.int32(8), np.float32(0), 0x300, np.int32(8)]
    p = types.SimpleNamespace(zeroed_bytes=256, scratch_bytes=256)
    w = launch_mod.one_launch(0, kernel, stream, (1, 1, 1), (32, 1, 1), head, p,
                                   [(launch_mod.SCRATCH, 0), (launch_mod.ZEROED, 0)])
    w()
    w.repointed(0x400, 0x500, 0x600)()
    monkeypatch.setattr(ws, "generation", ws.generation + 1)  # a bigger call replaced it
    w.repointed(0x700, 0x800, 0x900)()
    w()
    abc = [(r[4], r[6], r[9]) for r in seen]
    assert abc == [(0x100, 0x200, 0x300), (0x400, 0x500, 0x600), (0x700, 0x800, 0x900),
                   (0x100, 0x200, 0x300)]
    assert [r[11:] for r in seen] == [(0xB000, 0xA000)] * 2 + [(0xD000, 0xC000)] * 2


def _small_workspace_launch():
    """An 8x8x8 product's WorkspaceLaunch on integer stand-in handles, A, B and C at 0x100,
    0x200 and 0x300, 256 bytes of each workspace region, its tail (SCRATCH, ZEROED)."""
    head = [np.int32(8), np.int32(8), np.int32(8), np.float32(1), 0x100, np.int32(8), 0x200,
            np.int32(8), np.float32(0), 0x300, np.int32(8)]
    p = types.SimpleNamespace(zeroed_bytes=256, scratch_bytes=256)
    return launch_mod.one_launch(0, types.SimpleNamespace(handle=0x10),
                                      types.SimpleNamespace(handle=0x20), (1, 1, 1),
                                      (32, 1, 1), head, p,
                                      [(launch_mod.SCRATCH, 0), (launch_mod.ZEROED, 0)])


def test_a_captured_workspace_launch_gets_its_own_workspace_and_the_new_pointers(monkeypatch):
    seen = _driver_recorder(monkeypatch, 13)
    monkeypatch.setattr(ws, "workspace", lambda dev, stream, z, s: (0xA000, 0xB000))
    monkeypatch.setattr(ws, "capture_probe", lambda stream: lambda: True)
    monkeypatch.setattr(ws, "for_capture", lambda dev, stream, z, s: (0xE000, 0xF000, None))
    w = _small_workspace_launch()
    w.repointed(0x400, 0x500, 0x600)()
    assert [(r[4], r[6], r[9], r[11], r[12]) for r in seen] == [
        (0x400, 0x500, 0x600, 0xF000, 0xE000)]


def test_a_workspace_launch_bound_during_a_capture_allocates_nothing_until_eager(monkeypatch):
    """A graph's first call on a stream of its own binds there while capturing: nothing
    may be allocated on that stream then; the captured launch uses a workspace of its own,
    and the stream's is made at its first eager call."""
    seen = _driver_recorder(monkeypatch, 13)
    asked = []
    monkeypatch.setattr(ws, "workspace", lambda dev, stream, z, s: asked.append(1) or (
        0xA000, 0xB000))
    capturing = [True]
    monkeypatch.setattr(ws, "capture_probe", lambda stream: lambda: capturing[0])
    monkeypatch.setattr(ws, "for_capture", lambda dev, stream, z, s: (0xE000, 0xF000, None))
    w = _small_workspace_launch()
    assert not asked
    with pytest.raises(TypeError, match="during a capture"):
        w.export({4: 0, 6: 1, 9: 2})
    w()
    capturing[0] = False
    w()
    assert asked == [1] and [r[11:] for r in seen] == [(0xF000, 0xE000), (0xB000, 0xA000)]


def test_a_launch_exports_its_arguments_bytes_and_pointer_slots_for_the_native_switch(
        monkeypatch):
    """What csrc/switch.cpp copies and repoints: each argument's bytes as an integer, the
    pointer slots with the operand each takes, and a workspace launch's tail (its slots, the
    region each points into and the offset) with the bytes it needs."""
    monkeypatch.setattr(ws, "workspace", lambda dev, stream, z, s: (0xA000, 0xB000))
    monkeypatch.setattr(ws, "capture_probe", lambda stream: None)
    head = [np.int32(-3), np.int32(8), np.int32(8), np.float32(0.5), 0x100, np.int32(8),
            0x200, np.int32(8), np.float32(0), 0x300, np.int32(8)]
    kernel, stream = types.SimpleNamespace(handle=0x10), types.SimpleNamespace(handle=0x20)
    packed = launch_mod.Packed(kernel, stream, (2, 1, 1), (32, 1, 1), tuple(head),
                               launch_mod.POINTERS)
    k, grid, block, cells, slots, tail, zeroed, scratch = packed.export({4: 1, 6: 0, 9: 2})
    assert (k, grid, block, tail, zeroed, scratch) == (0x10, (2, 1, 1), (32, 1, 1), [], 0, 0)
    assert cells[0] == 2**32 - 3 and cells[3] == int.from_bytes(np.float32(0.5).tobytes(),
                                                                 "little")
    assert cells[4] == 0x100 and slots == [(4, 1), (6, 0), (9, 2)]
    p = types.SimpleNamespace(zeroed_bytes=512, scratch_bytes=1024, counters_bytes=64)
    w = launch_mod.one_launch(0, kernel, stream, (1, 1, 1), (32, 1, 1), head, p,
                                   [(launch_mod.ZEROED, 64), (launch_mod.ZEROED, 0)])
    _, _, _, cells, slots, tail, zeroed, scratch = w.export({4: 0, 6: 1, 9: 2})
    assert len(cells) == len(head) and slots == [(4, 0), (6, 1), (9, 2)]
    assert tail == [(11, launch_mod.ZEROED, 64), (12, launch_mod.ZEROED, 0)]
    assert (zeroed, scratch) == (512, 1024)


def _bind_recorder(monkeypatch):
    """Launcher.bind without a GPU: `load` records the variant asked for."""
    asked = []

    def load(rung, cfg, vec4, device_id=0, trans_a=False, trans_b=False, source=False,
             store4=True):
        asked.append((vec4, source))
        return KERNEL, None

    monkeypatch.setattr(launch_mod, "load", load)
    return asked


def test_a_source_is_packed_after_ldc_and_repointed_with_a_b_and_c(monkeypatch):
    """C = alpha A B + beta X (kernels/epilogue.cuh's Source): X and its row stride follow ldc,
    before the batch strides; X is a fourth pointer slot; the variant compiled with
    SGEMM_SOURCE is asked for, with float4 only where X is aligned as well."""
    from sgemmlab import registry
    from sgemmlab.errors import ConfigError

    asked = _bind_recorder(monkeypatch)
    r13 = registry.rung(13)
    lau = launch_mod.Launcher(r13, r13.default(None))
    p = lau.bind(64, 64, 64, 1.0, 0x1000, 64, 0x2000, 64, 1.0, 0x3000, 64, STREAM,
                 source=(0x4000, 0))
    assert p.pointer_slots == launch_mod.SOURCE_POINTERS == (4, 6, 9, 11)
    assert p.args[11] == 0x4000 and type(p.args[12]) is np.int64 and p.args[12] == 0
    assert [int(v) for v in p.args[13:]] == [0, 0, 0]  # the batch strides come after
    assert asked[-1] == (True, launch_mod.SOURCE_BIAS)  # row stride 0: the bias variant
    lau.bind(64, 64, 64, 1.0, 0x1000, 64, 0x2000, 64, 1.0, 0x3000, 64, STREAM,
             source=(0x4004, 0))  # X off 16-byte alignment: the scalar variant
    assert asked[-1] == (False, launch_mod.SOURCE_BIAS)
    lau.bind(64, 64, 64, 1.0, 0x1000, 64, 0x2000, 64, 1.0, 0x3000, 64, STREAM,
             source=(0x4000, 68))  # a matrix of its own row stride
    assert asked[-1] == (True, launch_mod.SOURCE_MATRIX)
    plain = lau.bind(64, 64, 64, 1.0, 0x1000, 64, 0x2000, 64, 1.0, 0x3000, 64, STREAM)
    assert plain.pointer_slots == launch_mod.POINTERS and asked[-1] == (True, 0)
    assert len(plain.args) == len(p.args) - 2
    with pytest.raises(ValueError, match="row stride"):
        lau.bind(64, 64, 64, 1.0, 0x1000, 64, 0x2000, 64, 1.0, 0x3000, 64, STREAM,
                 source=(0x4000, -4))
    monkeypatch.undo()  # the real load refuses a source to a rung without one, uncompiled
    r10 = registry.rung(10)
    with pytest.raises(ConfigError, match="from C alone"):
        launch_mod.load(r10, r10.default(None), True, source=True)
    assert launch_mod.variant_macros(r13, True, source=True)["SGEMM_SOURCE"] == 1
    assert launch_mod.variant_macros(r13, True, source=launch_mod.SOURCE_BIAS)[
        "SGEMM_SOURCE"] == 2
    assert "SGEMM_SOURCE" not in launch_mod.variant_macros(r13, True)
    assert [launch_mod.source_kind(s) for s in (None, (0x4000, 0), (0x4000, 8))] == [0, 2, 1]


def test_a_plan_keeps_a_template_per_source_stride_and_repoints_x_too(monkeypatch):
    from sgemmlab import plan as plan_mod
    from sgemmlab.errors import ConfigError

    g = plan_mod.Gemm(8, 8, 8, 1, False, False, 8, 8, 8, 0, 0, 0, False, (8, 8))
    packs, seen = [], []

    def bind(M, N, K, alpha, a, lda, b, ldb, beta, c, ldc, stream, source=None, **kw):
        args = [np.int32(M), np.int32(N), np.int32(K), np.float32(alpha), a, np.int32(lda),
                b, np.int32(ldb), np.float32(beta), c, np.int32(ldc)]
        slots = launch_mod.POINTERS
        if source is not None:
            args += [source[0], np.int64(source[1])]
            slots = launch_mod.SOURCE_POINTERS
        p = launch_mod.Packed(KERNEL, STREAM, (1, 1, 1), (32, 1, 1), tuple(args), slots)

        def call(*a):
            ptrs = (ctypes.c_void_p * len(args)).from_address(a[9])
            seen.append(tuple(ctypes.c_uint64.from_address(ptrs[i]).value for i in slots))
            return 0

        p._fn = call
        packs.append(p)
        return p

    rung = types.SimpleNamespace(supports=lambda f: True, label="stand-in")
    pl = _bare_plan(monkeypatch, g, bind, rung)
    assert pl.takes_source
    pl.launch(0x100, 0x200, 0x300, 7, 1.0, 1.0, source=(0x400, 0))
    pl.launch(0x500, 0x600, 0x700, 7, 1.0, 1.0, source=(0x800, 0))
    pl.launch(0x500, 0x600, 0x700, 7, 1.0, 1.0, source=(0x800, 8))  # another stride
    pl.launch(0x500, 0x600, 0x700, 7, 1.0, 1.0)  # C's own term
    # an X off 16-byte alignment never reuses a launch bound (float4) for an aligned one
    pl.launch(0x500, 0x600, 0x700, 7, 1.0, 1.0, source=(0x804, 0))
    assert seen == [(0x100, 0x200, 0x300, 0x400), (0x500, 0x600, 0x700, 0x800),
                    (0x500, 0x600, 0x700, 0x800), (0x500, 0x600, 0x700),
                    (0x500, 0x600, 0x700, 0x804)]
    assert len(packs) == 4 and int(packs[1].args[12]) == 8
    pl.per_item = True  # a batch launched product by product has no source
    with pytest.raises(ConfigError, match="from C alone"):
        pl.launch(0x900, 0x600, 0x700, 7, 1.0, 1.0, source=(0x800, 0))


@pytest.mark.parametrize("n, change", [(14, {"SPLIT": 0, "FIXUP": 2}), (14, {"SPLIT": 2}),
                                       (15, {"SPLIT": 1}), (18, {"SPLIT": 1}),
                                       (18, {"SPLIT": 0})])
def test_launches_with_a_workspace_take_the_source_too(n, change, monkeypatch):
    """Stream-K and split-K binds (a WorkspaceLaunch, or a Packed with one part) keep X's
    slot among their repointed ones, before the workspace tail."""
    from sgemmlab import registry

    _bind_recorder(monkeypatch)
    monkeypatch.setattr(launch_mod, "gpu_info", lambda dev=0: types.SimpleNamespace(
        sm_count=132))
    monkeypatch.setattr(launch_mod.Launcher, "blocks_per_sm", lambda self, kernel: 1)
    monkeypatch.setattr(ws, "workspace", lambda dev, stream, z, s: (0xA000, 0xB000))
    monkeypatch.setattr(ws, "capture_probe", lambda stream: None)
    r = registry.rung(n)
    M, N, K = (8, 1024, 4096) if n == 15 else (1000, 1000, 4096)
    lau = launch_mod.Launcher(r, {**r.default(None), **change})
    for source in (None, (0x4000, 0)):
        fn = lau.bind(M, N, K, 1.0, 0x1000, K, 0x2000, N, 1.0, 0x3000, N, STREAM,
                      source=source)
        want = launch_mod.POINTERS if source is None else launch_mod.SOURCE_POINTERS
        assert fn.pointer_slots == want, (n, change, source)
        packed = fn._steps[-1] if hasattr(fn, "_steps") else fn  # its current Packed
        if source is not None:
            assert packed.args[11] == 0x4000 and int(packed.args[12]) == 0


def test_a_failed_launch_among_a_workspace_launchs_steps_raises_and_stops_there(monkeypatch):
    """The replayed launches (WorkspaceLaunch._run) report a driver error as a single
    launch does, naming the failed launch's grid, and launch nothing after it."""
    grids = []

    def call(*a):
        grids.append(a[1])
        return 700 if a[1] == 2 else 0  # the second launch fails

    monkeypatch.setattr(driver_mod, "launch_kernel", lambda: call)
    monkeypatch.setattr(ws, "workspace", lambda dev, stream, z, s: (0xA000, 0xB000))
    monkeypatch.setattr(ws, "capture_probe", lambda stream: None)
    kernel, stream = types.SimpleNamespace(handle=0x10), types.SimpleNamespace(handle=0x20)

    def build(zeroed, scratch):
        return tuple(Packed(kernel, stream, (g, 1, 1), (32, 1, 1), (0x100, np.int32(g)),
                            pointer_slots=(0,)) for g in (1, 2, 3))

    p = types.SimpleNamespace(zeroed_bytes=16, scratch_bytes=16)
    w = WorkspaceLaunch(0, stream, p, build, pointer_slots=(0,), bound_pointers=(0x100,),
                        roles=((0,), (0,), (0,)))
    with pytest.raises(RuntimeError, match=r"cuLaunchKernel failed: .*grid \(2, 1, 1\)"):
        w()
    assert grids == [1, 2]
