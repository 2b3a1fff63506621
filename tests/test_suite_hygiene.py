"""The suite itself: it ends in bounded time wherever it is started (a runner that ignores
SIGINT, as under nohup or in a background job, once hung it for 12 minutes), and it keeps
its compiles in a cache of its own, never the user's."""

from __future__ import annotations

import ast
import os
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import (
    SESSION_CACHE,
    SESSION_CACHE_OWNER,
    SESSION_CACHE_PREFIX,
    process_group,
)
from sgemmlab.runtime import compiler

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"


def pytest_child(args: list[str], timeout: float, **popen) -> tuple[int, str]:
    """(exit status, output) of `python -m pytest ARGS` from the checkout, in its own
    process group (all of it killed at the end), given `timeout` seconds."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    with process_group(cmd, cwd=ROOT, text=True, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, **popen) as proc:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"pytest {' '.join(args)} did not end within {timeout} s")
    return proc.returncode, out


def test_the_interrupted_compile_test_ends_where_the_runner_ignores_sigint():
    """Its child must stop at SIGINT even when it inherits SIG_IGN (nohup, `cmd &`)."""
    code, out = pytest_child(
        ["-x", "tests/test_tune_resume.py::test_an_interrupted_compile_stops_at_once"],
        timeout=240, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert code == 0 and "1 passed" in out, out[-3000:]


#: subprocess's functions that wait for the child (besides the methods communicate() and
#: wait(): a Popen's, an Event's, a Barrier's, a Condition's).
SUBPROCESS_WAITS = {"run", "call", "check_call", "check_output"}


def unbounded_waits(path: Path) -> list[str]:
    """The calls in `path` that can wait for ever: a communicate() or wait() with neither
    a positional nor a keyword timeout, a subprocess.run (call, ...) without timeout=."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name, owner = node.func.attr, node.func.value
        keywords = {k.arg for k in node.keywords}
        if name in ("communicate", "wait"):
            bounded = "timeout" in keywords or len(node.args) >= (2 if name == "communicate"
                                                                   else 1)
        elif name in SUBPROCESS_WAITS and isinstance(owner, ast.Name) and \
                owner.id == "subprocess":
            bounded = "timeout" in keywords
        else:
            continue
        if not bounded:
            found.append(ast.unparse(node))
    return found


def test_no_test_waits_without_a_timeout():
    found = {(p.name, call) for p in sorted(TESTS.glob("*.py")) for call in unbounded_waits(p)}
    assert found == set(), "bound these waits with a timeout"


def test_the_scan_sees_an_unbounded_wait(tmp_path):
    f = tmp_path / "t.py"
    f.write_text("p.communicate()\np.communicate(None, 5)\np.wait()\ne.wait(3)\n"
                 "subprocess.run(['x'])\nsubprocess.run(['x'], timeout=9)\n")
    assert unbounded_waits(f) == ["p.communicate()", "p.wait()", "subprocess.run(['x'])"]


def test_the_compile_cache_is_the_sessions_own():
    """Not the user's cache, and one directory for every xdist worker: the process that
    started the session made it, and the workers inherited it."""
    where = compiler.cache_dir()
    if named := os.environ.get("SGEMMLAB_TEST_CACHE_DIR"):  # the runner opted in
        assert where == Path(named)
        return
    made = Path(os.environ[SESSION_CACHE])
    assert where == made and made.name.startswith(SESSION_CACHE_PREFIX) and made.is_dir()
    assert made.parent.resolve() == Path(tempfile.gettempdir()).resolve()
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    for users in (Path.home() / ".cache", os.environ.get("XDG_CACHE_HOME")):
        if users:
            assert not where.resolve().is_relative_to(Path(users).resolve())
    owner = int(os.environ[SESSION_CACHE_OWNER])
    assert (owner != os.getpid()) == bool(os.environ.get("PYTEST_XDIST_WORKER"))


def test_a_session_makes_its_cache_and_leaves_nothing_behind(tmp_path):
    """A pytest run with two xdist workers: its compile cache is made in the temporary
    directory and gone at the end; the user's own cache directories are not touched."""
    user = {"SGEMMLAB_CACHE_DIR": tmp_path / "user-cache", "XDG_CACHE_HOME": tmp_path / "xdg",
            "TMPDIR": tmp_path / "tmp"}
    (tmp_path / "tmp").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in (
        SESSION_CACHE, SESSION_CACHE_OWNER, "SGEMMLAB_TEST_CACHE_DIR")}
    code, out = pytest_child(
        ["-n", "2", "--basetemp", str(tmp_path / "basetemp"),
         "tests/test_suite_hygiene.py::test_the_compile_cache_is_the_sessions_own",
         "tests/test_suite_hygiene.py::test_the_scan_sees_an_unbounded_wait"],
        timeout=240, env=env | {k: str(v) for k, v in user.items()})
    assert code == 0 and "2 passed" in out, out[-3000:]
    assert list((tmp_path / "tmp").iterdir()) == []
    assert not user["SGEMMLAB_CACHE_DIR"].exists() and not user["XDG_CACHE_HOME"].exists()
