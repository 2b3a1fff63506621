"""The runtime's door to the CUDA driver (runtime/driver.py), on the CPU: its enumerators
are the driver's (checked against cuda.bindings, generated from cuda.h), every function it
calls has a prototype, the versioned names are the ones cuda.h maps to, and without a
driver library there is no GPU in one sentence, not a crash."""

from __future__ import annotations

import ast
import ctypes
import inspect

import pytest

from sgemmlab.errors import NoGPUError
from sgemmlab.runtime import device as device_mod
from sgemmlab.runtime import driver


def test_the_enumerators_are_the_drivers():
    b = pytest.importorskip("cuda.bindings.driver")
    attr, fattr = b.CUdevice_attribute, b.CUfunction_attribute
    assert driver.ATTR_MULTIPROCESSOR_COUNT == attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
    assert driver.ATTR_L2_CACHE_SIZE == attr.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE
    assert driver.ATTR_CC_MAJOR == attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
    assert driver.ATTR_CC_MINOR == attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
    assert driver.ATTR_MAX_SMEM_PER_BLOCK_OPTIN == \
        attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
    for name, value in driver.FUNC_ATTRIBUTES.items():
        assert value == getattr(fattr, f"CU_FUNC_ATTRIBUTE_{name}"), name
    assert driver.POINTER_DEVICE_ORDINAL == \
        b.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    assert driver.EVENT_DISABLE_TIMING == b.CUevent_flags.CU_EVENT_DISABLE_TIMING
    assert driver.CAPTURE_ACTIVE == \
        b.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE
    assert driver.SUCCESS == b.CUresult.CUDA_SUCCESS


def test_an_overlapped_launch_config_has_the_drivers_layout():
    """overlapped_config's bytes are cuda.bindings' CUlaunchConfig and CUlaunchAttribute
    with the same values (the attribute pointer aside): a field out of place would launch
    on the wrong stream or grid."""
    b = pytest.importorskip("cuda.bindings.driver")
    assert driver.LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION == \
        b.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    theirs = b.CUlaunchAttribute()
    theirs.id = b.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    theirs.value.programmaticStreamSerializationAllowed = 1
    config, attr = driver.overlapped_config((3, 2, 5), (384, 1, 1), 1000, 0x1234)
    size = ctypes.sizeof(driver.LaunchAttribute)
    assert ctypes.string_at(theirs.getPtr(), size) == ctypes.string_at(ctypes.addressof(attr),
                                                                       size)
    c = b.CUlaunchConfig()
    c.gridDimX, c.gridDimY, c.gridDimZ = 3, 2, 5
    c.blockDimX, c.blockDimY, c.blockDimZ = 384, 1, 1
    c.sharedMemBytes, c.hStream, c.numAttrs = 1000, b.CUstream(0x1234), 1
    size = ctypes.sizeof(driver.LaunchConfig)
    raw, mine = ctypes.string_at(c.getPtr(), size), ctypes.string_at(ctypes.addressof(config),
                                                                      size)
    at = driver.LaunchConfig.attrs.offset
    assert raw[:at] == mine[:at]
    assert raw[at + 8:] == mine[at + 8:]
    assert ctypes.cast(config.attrs, ctypes.c_void_p).value == ctypes.addressof(attr)


def test_every_function_called_has_a_prototype_of_the_versioned_name():
    """A name called without a prototype would be called with ctypes' guesses (ints), and
    cuModuleGetGlobal, cuEventDestroy, cuMemAlloc, cuMemFree unsuffixed are the old ABI."""
    tree = ast.parse(inspect.getsource(driver))
    called = {n.args[0].value for n in ast.walk(tree) if isinstance(n, ast.Call)
              and getattr(n.func, "id", None) in ("call", "fn") and n.args
              and isinstance(n.args[0], ast.Constant)}
    assert called and called <= set(driver.SIGNATURES)
    for old in ("cuModuleGetGlobal", "cuEventDestroy", "cuMemAlloc", "cuMemFree",
                "cuCtxDestroy", "cuDevicePrimaryCtxRelease"):
        assert old not in driver.SIGNATURES, f"{old} unsuffixed is the v1 ABI"


def test_without_a_driver_library_there_is_no_gpu_in_one_sentence(monkeypatch):
    monkeypatch.setattr(driver, "_lib", False)
    monkeypatch.setattr(driver, "_protos", {})
    monkeypatch.setattr(driver, "_initialised", False)
    device_mod._device.cache_clear()
    try:
        with pytest.raises(NoGPUError, match="No usable NVIDIA GPU was found") as err:
            device_mod.device(0)
        assert "\n" not in str(err.value)
        assert not device_mod.has_gpu()
        assert driver.launch_kernel() is None and driver.stream_is_capturing(7) is None
        assert driver.addresses() is None and driver.pointer_device(0x1000) is None
    finally:
        device_mod._device.cache_clear()


def test_a_failed_call_names_the_call_and_the_error(monkeypatch):
    def name_of(err, out):
        out._obj.value = b"CUDA_ERROR_INVALID_VALUE"
        return 0

    monkeypatch.setitem(driver._protos, "cuGetErrorName", name_of)
    monkeypatch.setitem(driver._protos, "cuCtxSynchronize", lambda: 1)
    with pytest.raises(driver.DriverError, match=r"cuCtxSynchronize failed: "
                       r"CUDA_ERROR_INVALID_VALUE \(1\)") as err:
        driver.call("cuCtxSynchronize")
    assert err.value.code == 1


def test_an_unnamed_error_is_shown_by_its_number(monkeypatch):
    monkeypatch.setitem(driver._protos, "cuGetErrorName", lambda err, out: 1)
    assert driver.error_name(999) == "CUresult 999"


def test_a_module_opts_in_to_dynamic_shared_memory_above_the_default(monkeypatch):
    """Above 48 KiB a kernel must ask (cuFuncSetAttribute); at or below it must not."""
    asked = []

    def load(out, image):
        out._obj.value = 0x1000
        return 0

    def get(out, module, name):
        out._obj.value = 0x2000
        return 0

    monkeypatch.setitem(driver._protos, "cuModuleLoadData", load)
    monkeypatch.setitem(driver._protos, "cuModuleGetFunction", get)
    monkeypatch.setitem(driver._protos, "cuFuncSetAttribute",
                        lambda f, attr, v: asked.append((f.value, attr, v)) or 0)
    m = driver.Module(b"\x7fELF")
    assert m.handle == 0x1000
    small = m.function("k", driver.DEFAULT_DYNAMIC_SMEM)
    assert small.handle == 0x2000 and asked == []
    m.function("k", 200 * 1024)
    assert asked == [(0x2000, driver.FUNC_ATTRIBUTES["MAX_DYNAMIC_SHARED_SIZE_BYTES"],
                      200 * 1024)]


def test_a_buffer_is_freed_once_on_the_stream_named(monkeypatch):
    freed = []
    monkeypatch.setattr(driver, "make_current", lambda index: None)
    monkeypatch.setitem(driver._protos, "cuMemFreeAsync",
                        lambda ptr, stream: freed.append((ptr.value, stream.value)) or 0)
    buf = driver.Buffer(0x5000, 256, 0, driver.Stream(0x77))
    buf.set_deallocation_stream(driver.LEGACY)
    buf.close()
    buf.close()
    assert freed == [(0x5000, None)], "freed on the legacy stream (NULL), once"
    assert buf.handle == 0


def test_the_signatures_are_ctypes_types():
    for name, args in driver.SIGNATURES.items():
        assert all(isinstance(a, type) and issubclass(a, ctypes._SimpleCData | ctypes._Pointer)
                   for a in args), name
