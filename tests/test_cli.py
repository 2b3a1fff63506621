"""The command line and the API's input checks, on a machine without a GPU.

Errors a user can make (no GPU, a malformed shape, a numpy array where a GPU array belongs)
must end in one plain sentence, never a traceback.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import sgemmlab
from sgemmlab import OperandError, registry
from sgemmlab.cli import app, parse_shape
from sgemmlab.runtime.arrays import as_matrix
from sgemmlab.runtime.compiler import compile_kernel, nvrtc_version
from sgemmlab.runtime.device import has_gpu

SRC = Path(sgemmlab.__file__).resolve().parent.parent


def _run(*args: str, cache: Path) -> subprocess.CompletedProcess:
    """`python -m sgemmlab ARGS` in a fresh process that imports this checkout."""
    env = dict(os.environ, SGEMMLAB_CACHE_DIR=str(cache), NO_COLOR="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "sgemmlab", *args], check=False,
                          capture_output=True, text=True, env=env, timeout=300)


def _plain(text: str) -> str:
    """Rich's error panel without its frame and line breaks."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.setenv("SGEMMLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("NO_COLOR", "1")
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args))


# -- no GPU -------------------------------------------------------------------------------


def test_ladder_without_a_gpu_shows_the_predicted_ladder(tmp_path):
    if has_gpu():
        pytest.skip("this machine has a GPU")
    done = _run("ladder", "--size", "64", cache=tmp_path)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "Traceback" not in output, output
    assert "PREDICTS" in done.stdout and "% of cuBLAS" in done.stdout
    assert " ".join(done.stdout.split()).count("nothing was measured") == 1  # said once
    assert max(map(len, done.stdout.splitlines())) <= 100
    for r in registry.RUNGS + registry.HISTORY:
        assert re.search(rf"^{r.label}\s", done.stdout, re.MULTILINE), r.label
    assert "\x1b[" not in output  # no colour codes when stdout is not a terminal


def test_tune_without_a_gpu_fails_the_same_way(cli):
    if has_gpu():
        pytest.skip("this machine has a GPU")
    result = cli("tune", "-k", "1", "--size", "64")
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "GPU" in result.stderr and len(result.stderr.strip().splitlines()) == 1


# -- malformed input ----------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["12x34", "1,2,3,4", "a,b,c", "4,4,0", "4,-4,4", "",
                                   "4.5,4,4"])
def test_a_malformed_shape_is_a_usage_error(cli, shape):
    result = cli("ladder", "--shape", shape)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "is not a shape: expected M,N,K with each >= 1" in _plain(result.output)


@pytest.mark.parametrize("text, shape", [
    ("64,32,16", (64, 32, 16)), ("64x32x16", (64, 32, 16)), ("64×32×16", (64, 32, 16)),
    (" 64 32 16 ", (64, 32, 16)), ("1, 1, 1", (1, 1, 1)), ("4092x4092x4092", (4092,) * 3),
])
def test_shapes_parse_with_any_separator(text, shape):
    assert parse_shape(text) == shape


def test_a_zero_size_is_a_usage_error(cli):
    result = cli("ladder", "--size", "0")
    assert result.exit_code == 2
    assert "sizes must be >= 1" in _plain(result.output)


def test_an_unknown_kernel_is_a_usage_error(cli):
    result = cli("ladder", "-k", "99", "--size", "64")
    assert result.exit_code == 2
    assert "unknown kernel '99'" in _plain(result.output)


# -- info and build -------------------------------------------------------------------------


def test_info_lists_the_compiler_the_cache_and_every_rung(cli, tmp_path):
    result = cli("info")
    assert result.exit_code == 0, result.output
    out = result.output
    assert f"NVRTC {nvrtc_version()}" in out
    assert str(tmp_path) in out
    assert re.search(r"^GPU: ", out, re.MULTILINE)
    if not has_gpu():
        assert "GPU: none" in out
    for r in registry.ALL + registry.TENSOR + registry.HISTORY:
        legal = sum(1 for _ in r.configs())
        line = re.search(rf"^\s*{r.number} {r.name}\s.*$", out, re.MULTILINE)
        assert line, f"rung {r.number} is missing from:\n{out}"
        assert f" {legal} configs " in line.group(0)
    for p in registry.PYTHON:
        assert f"{p.label}" in out and f"mirrors {p.rung.label}" in out
    assert max(map(len, out.splitlines())) <= 100 or str(tmp_path) in max(
        out.splitlines(), key=len)  # only the cache path may be as long as it is


def test_build_prints_the_register_count(cli):
    result = cli("build", "-k", "1", "--gpu", "h200")
    assert result.exit_code == 0, result.output
    r = registry.rung(1)
    cfg = r.default("NVIDIA H200")  # what every other command runs on the H200
    m = re.search(rf"^{r.label}\s+{registry.config_key(cfg)}\s+regs=\s*(\d+)\s+"
                  rf"smem=\s*(\d+)B\s+stack=(\d+)", result.output, re.MULTILINE)
    assert m, result.output
    expect = compile_kernel(r.source, r.macros(cfg)).resources
    assert int(m.group(1)) == expect.registers > 0
    assert (int(m.group(2)), int(m.group(3))) == (expect.smem_bytes, expect.stack_bytes)
    assert "SPILLS" not in result.output


def test_build_all_configs_lists_each_legal_configuration(cli):
    result = cli("build", "-k", "naive", "--all-configs")
    assert result.exit_code == 0, result.output
    for cfg in registry.rung(1).configs():
        assert re.search(rf"{registry.config_key(cfg)}\s+regs=\s*\d+", result.output), cfg


def test_build_of_an_unknown_kernel_is_a_usage_error(cli):
    result = cli("build", "-k", "nope")
    assert result.exit_code == 2
    assert "unknown kernel 'nope'" in _plain(result.output)


# -- the API refuses what is not a GPU matrix, naming the operand ---------------------------


@pytest.mark.parametrize("a", [
    pytest.param(np.ones((4, 4), np.float32), id="numpy-float32"),
    pytest.param(np.ones((4, 4)), id="numpy-float64"),
    pytest.param([[1.0, 2.0], [3.0, 4.0]], id="list"),
    pytest.param(3.0, id="scalar"),
])
def test_matmul_refuses_host_operands_naming_them(a):
    with pytest.raises(OperandError, match=r"^a: "):
        sgemmlab.matmul(a, a)
    with pytest.raises(OperandError, match=r"^a: "):
        sgemmlab.sgemm(a, a, alpha=2.0)


def test_the_operand_error_says_what_was_wrong():
    with pytest.raises(OperandError, match=r"^a: list is not a GPU array"):
        sgemmlab.matmul([[1.0]], [[1.0]])
    with pytest.raises(OperandError, match=r"^b: .*host memory, not on a CUDA GPU"):
        as_matrix(np.ones((2, 2), np.float32), "b")
    assert issubclass(OperandError, ValueError)


@pytest.mark.parametrize("alpha, beta", [(float("nan"), 0.0), (1.0, float("inf")),
                                         (float("-inf"), 1.0)])
def test_alpha_and_beta_must_be_finite(alpha, beta):
    x = np.ones((2, 2), np.float32)
    with pytest.raises(ValueError, match="must be finite"):
        sgemmlab.sgemm(x, x, x, alpha=alpha, beta=beta)


def test_a_cpu_torch_tensor_is_refused_naming_the_device():
    torch = pytest.importorskip("torch")
    a = torch.ones(4, 4)
    with pytest.raises(OperandError, match=r"^a: tensor is on cpu, not on a CUDA GPU"):
        sgemmlab.matmul(a, a)
    with pytest.raises(OperandError, match=r"^a: dtype is torch.float64"):
        sgemmlab.matmul(a.double(), a)


def test_candidate_lists_for_a_search(tmp_path, cli):
    from sgemmlab.cli.tune import search_lists

    f = tmp_path / "c.jsonl"
    f.write_text('{"rung": "6", "config": {"BM": 64, "BN": 64}}\n\n'
                 '{"rung": "06_vectorized", "config": {"BM": 64, "BN": 64}}\n'
                 '{"rung": "warptiling", "config": {"BK": 16}}\n')
    assert search_lists(f) == {"06_vectorized": [{"BM": 64, "BN": 64}],
                               "10_warptiling": [{"BK": 16}]}
    f.write_text('{"rung": "99", "config": {}}\n')
    out = cli("tune", "--candidates", str(f))
    assert out.exit_code == 2 and "--candidates" in out.output
    assert cli("tune", "--table", "--candidates", str(f)).exit_code == 2


def test_tune_table_measures_the_shapes_asked_and_the_suites_only_by_default(monkeypatch):
    """`tune --table --shape ...` measures those shapes alone (the suites are the default
    when no shape is named), and --confirm hands the table builder the confirm method;
    neither needs a GPU to decide."""
    import types

    from sgemmlab.bench.measure import CONFIRM, QUICK
    from sgemmlab.cli import tune as tune_cli
    from sgemmlab.tune import table as table_mod

    seen = []

    def build_table(todo, rungs, **kw):
        seen.append((todo, kw["method"]))
        return types.SimpleNamespace(table={"winners": []}, results="r.json", written=[])

    monkeypatch.setattr(tune_cli, "require_gpu", lambda: None)
    monkeypatch.setattr(tune_cli, "require_torch", lambda: None)
    monkeypatch.setattr(table_mod, "build_table", build_table)
    runner = CliRunner()
    assert runner.invoke(app, ["tune", "--table", "--shape", "333,444,555", "--confirm",
                               "--size", "2048"]).exit_code == 0
    assert runner.invoke(app, ["tune", "--table"]).exit_code == 0
    (asked, confirm), (default, quick) = seen
    assert sorted(asked) == [(333, 444, 555), (2048, 2048, 2048)] and confirm is CONFIRM
    assert (1024, 1024, 1024) in default and (333, 444, 555) not in default
    assert quick is QUICK
    assert runner.invoke(app, ["tune", "--confirm"]).exit_code != 0  # --table only
