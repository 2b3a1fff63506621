"""Shared test setup. Tests marked `gpu` run only where an NVIDIA GPU and torch are present;
elsewhere they are skipped with a reason (CI is CPU-only)."""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import shutil
import signal
import subprocess
import tempfile

import pytest

# The package's prebuilt cubins (runtime/compiler.py's bundle) stay out of every test, in
# this process and in those it starts: a test that compiles must compile. The bundle's own
# tests point SGEMMLAB_BUNDLE_DIR at the bundle they build.
os.environ["SGEMMLAB_BUNDLE_DIR"] = ""

#: The session's compile cache, and the pid of the process that made it (which removes it).
SESSION_CACHE, SESSION_CACHE_OWNER = "SGEMMLAB_TEST_SESSION_CACHE", "SGEMMLAB_TEST_SESSION_OWNER"
SESSION_CACHE_PREFIX = "sgemmlab-test-cache-"


def _session_cache() -> None:
    """Point the compile cache at the session's own directory, never the user's
    ($SGEMMLAB_CACHE_DIR, $XDG_CACHE_HOME, ~/.cache): a run left ~2,450 cubins (139 MB)
    there, and the suite's time swung with that cache's state. The first process to import
    this file makes it (with pytest-xdist the controller, before it starts the workers,
    which inherit it; so does a pytest that a test starts); SGEMMLAB_TEST_CACHE_DIR names one
    to use instead (the GPU machine's, which carries prebuilt cubins). Mode 0o700: the
    compile cache is to refuse a directory that group or others may write."""
    if named := os.environ.get("SGEMMLAB_TEST_CACHE_DIR"):
        os.environ["SGEMMLAB_CACHE_DIR"] = named
        return
    made = os.environ.get(SESSION_CACHE)
    if not (made and os.path.isdir(made)):
        made = tempfile.mkdtemp(prefix=SESSION_CACHE_PREFIX)  # mkdtemp: mode 0o700
        os.environ[SESSION_CACHE], os.environ[SESSION_CACHE_OWNER] = made, str(os.getpid())
    os.environ["SGEMMLAB_CACHE_DIR"] = made


_session_cache()


def pytest_unconfigure(config):
    """The process that made the session's cache removes it, after every worker is done."""
    made = os.environ.get(SESSION_CACHE)
    if made and os.environ.get(SESSION_CACHE_OWNER) == str(os.getpid()):
        shutil.rmtree(made, ignore_errors=True)


@contextlib.contextmanager
def process_group(args, **popen):
    """subprocess.Popen(args) in a session of its own, whose whole process group is killed
    on the way out, however the test ends: a child that did not stop must not leave its
    workers behind holding the pipes, which a communicate() would wait on for ever."""
    proc = subprocess.Popen(args, start_new_session=True, **popen)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.returncode is None:
            proc.communicate(timeout=60)


@functools.cache
def gpu_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    from sgemmlab.runtime.device import has_gpu

    return torch.cuda.is_available() and has_gpu()


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with torch (none here)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _big_memory_is_given_back(request):
    """After a test of the "bigmem" group (buffers of 8-50 GiB, one at a time on one xdist
    worker): free the workspaces it grew and torch's cached blocks, so the memory goes back
    to the other workers' tests (a K_MAX product at tf32x3 leaves a workspace of tens of GiB
    in its stream's slot, held until the process ends)."""
    yield
    group = request.node.get_closest_marker("xdist_group")
    if group is None or group.args[:1] != ("bigmem",):
        return
    import gc

    import torch

    from sgemmlab.runtime import workspace

    gc.collect()
    torch.cuda.synchronize()
    workspace.release_all()
    torch.cuda.empty_cache()


@pytest.fixture
def isolated_dispatch(tmp_path, monkeypatch):
    """Dispatch with no table but the ones a test writes, seeds as defaults, no compiles
    (255 registers: 2 blocks of 128 threads per SM, 264 slots on 132 SMs), and a fresh
    cache and results directory per test."""
    from sgemmlab import dispatch, registry

    monkeypatch.setenv("SGEMMLAB_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("SGEMMLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(dispatch.table, "PACKAGE_TABLE_DIR", tmp_path / "package")
    monkeypatch.setattr(registry, "tuned_defaults", lambda: {})
    monkeypatch.setattr(registry.core, "tuned_defaults", lambda: {})
    monkeypatch.setattr(dispatch.waves, "registers_of", lambda rung, cfg, arch: 255)
    dispatch.clear_cache()
    yield
    dispatch.clear_cache()


#: Values tried when looking for a configuration that breaks one rule (test_compile,
#: test_membound: every rule must have a static_assert of the same text).
PROBE_VALUES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 72, 96, 128, 192, 256, 512)


def probe_config(r, text: str) -> dict | None:
    """A configuration near the seed (one or two constants changed) that breaks the rule
    called `text` and as few others as possible; None if no such neighbour exists."""
    best = None
    for n in (1, 2):
        for names in itertools.combinations(r.space, n):
            for values in itertools.product(PROBE_VALUES, repeat=n):
                cfg = {**r.seed, **dict(zip(names, values))}
                broken = r.violations(cfg)
                if text in broken and (best is None or len(broken) < best[0]):
                    best = (len(broken), cfg)
        if best is not None and best[0] == 1:
            break
    return best and best[1]


def first_error(exc: BaseException) -> str:
    """The first line of a compile error that says 'error' (else its first line)."""
    lines = [ln.strip() for ln in str(exc).splitlines()]
    errors = [ln for ln in lines if "error" in ln]
    return (errors or lines or [type(exc).__name__])[0]


REGISTERS_PER_SM_BLOCK = 64 * 1024  # registers one block may hold on an SM


def resource_problems(results, spills_tolerated=lambda rung, cfg: False) -> list[str]:
    """One line per ((rung, config), compile result) that failed to compile, spilled (where
    `spills_tolerated` does not allow it), used a stack frame, or disagrees with the
    registry about shared memory or the register file (test_compile, test_membound)."""
    from sgemmlab.registry import config_key

    problems = []
    for (r, cfg), res in results:
        key = config_key(cfg)
        if isinstance(res, BaseException):
            problems.append(f"{key}: did not compile: {first_error(res)}")
            continue
        if not res.known:
            problems.append(f"{key}: ptxas gave no resource report")
            continue
        if res.spills and spills_tolerated(r, cfg):
            continue
        if res.spills:
            problems.append(f"{key}: spills {res.spill_stores} B stored, {res.spill_loads} B "
                            f"loaded ({res.registers} registers)")
        if res.stack_bytes:
            problems.append(f"{key}: {res.stack_bytes} B stack frame")
        if res.smem_bytes != r.smem_bytes(cfg):
            problems.append(f"{key}: ptxas reports {res.smem_bytes} B of shared memory, the "
                            f"registry says {r.smem_bytes(cfg)} B")
        # registers are allocated per warp in units of 256, i.e. 8 per thread
        if -(-res.registers // 8) * 8 * r.threads(cfg) > REGISTERS_PER_SM_BLOCK:
            problems.append(f"{key}: {res.registers} registers x {r.threads(cfg)} threads "
                            "do not fit one SM's register file: the launch would fail")
    return problems


def illegal_sample(r, limit: int) -> list[dict]:
    """All illegal configurations of a small space; of a big one, a deterministic sample
    that breaks every rule that can be broken there, then evenly spread picks (test_compile
    and test_membound: every rule must have a static_assert refusing what it forbids)."""
    from sgemmlab.registry import config_key

    illegal = list(r.configs(legal=False))
    if len(illegal) <= limit:
        return illegal
    broken = {config_key(c): r.violations(c) for c in illegal}
    picked: list[dict] = []
    for rule in r.all_rules():  # the configuration breaking this rule and the fewest others
        breaking = [c for c in illegal if rule.text in broken[config_key(c)]]
        if breaking:
            choice = min(breaking, key=lambda c: len(broken[config_key(c)]))
            if choice not in picked:
                picked.append(choice)
    rest = [c for c in illegal if c not in picked]
    need = limit - len(picked)
    if need > 0:
        picked += [rest[i * len(rest) // need] for i in range(need)]
    return picked[:limit]


@pytest.fixture
def float32_highest():
    """torch's float32 matmul precision at "highest" (exact FP32) for the test, restored
    after: the drop-in switch's tests, whose routing follows it."""
    import torch

    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(old)


def one_message(output: str) -> str:
    """The CLI's one message in `output`, checked for its form and returned as one line: a
    line, or one folded to 100 columns with its continuation lines under two spaces (the
    command line's `fold`); never a traceback or a rich panel."""
    lines = [ln for ln in output.strip().splitlines() if ln.strip()]
    assert lines, "no message"
    assert max(map(len, lines)) <= 100, output
    assert all(ln.startswith("  ") for ln in lines[1:]), output
    text = " ".join(ln.strip() for ln in lines)
    assert "Traceback" not in text and "╭" not in text, output
    return text
