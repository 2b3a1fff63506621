"""What a newcomer meets first, on a machine without a GPU: help that reads at 80 and 100
columns, errors that fit 100 columns, an `info` that lists every rung the library runs, a
Python simulation that warns before it takes long, and examples that say what they need."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from sgemmlab.cli import app
from sgemmlab.cli.common import WIDTH

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = sorted(typer.main.get_command(app).commands)


ROOT_COMMAND = typer.main.get_command(app)


def _help(command: str | None, columns: int, monkeypatch) -> str:
    """`sgemmlab [COMMAND] --help` as a terminal of `columns` columns shows it (click reads
    the width from COLUMNS, as in a shell; typer's CliRunner would force one instead)."""
    monkeypatch.setenv("COLUMNS", str(columns))
    with ROOT_COMMAND.make_context("sgemmlab", [], resilient_parsing=True) as ctx:
        if command is None:
            return ctx.get_help()
        sub = ROOT_COMMAND.get_command(ctx, command)
        with sub.make_context(command, [], parent=ctx, resilient_parsing=True) as inner:
            return inner.get_help()


def _hard_breaks(text: str, width: int) -> list[str]:
    """Lines broken before the line was full: the next line's first word would have fitted.
    A formatter that wraps paragraphs fills each line first; a docstring's own line breaks
    kept inside a narrower box break sentences where the box does not end."""
    lines = text.splitlines()
    bad, listing = [], False  # listing: inside "Options:" or "Commands:", a row per entry
    for a, b in zip(lines, lines[1:]):
        if a and not a[0].isspace():
            listing = a.rstrip().endswith(":") and not a.startswith("Usage")
        if not a.strip() or not b.strip() or a.rstrip().endswith(":"):
            continue  # a paragraph's end, or a heading
        indent_a = len(a) - len(a.lstrip())
        indent_b = len(b) - len(b.lstrip())
        if indent_b < indent_a or (listing and 2 in (indent_a, indent_b)):
            continue  # the next row of a listing, or its text under a long option's name
        if len(a.rstrip()) + 1 + len(b.split()[0]) <= width:
            bad.append(f"{a!r} / {b!r}")
    return bad


@pytest.mark.parametrize("columns", [80, 100, 160])
@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_fits_and_wraps_where_lines_are_full(command, columns, monkeypatch):
    text = _help(command, columns, monkeypatch)
    width = min(columns, WIDTH) - 2  # click's formatter keeps two columns free
    assert max(map(len, text.splitlines())) <= WIDTH
    assert _hard_breaks(text, width) == [], command


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_every_help_runs_through_the_cli(command):
    """Through typer's runner, as a user types it: exit 0, nothing wider than 100 columns,
    and the command list shows each command's first line whole or shortened with '...',
    never a docstring line cut where the source file happened to break it."""
    done = CliRunner().invoke(app, [command, "--help"] if command else ["--help"])
    assert done.exit_code == 0, done.output
    assert max(map(len, done.output.splitlines())) <= WIDTH
    assert "uniform, positive\n" not in done.output


@pytest.mark.parametrize("args", [["inspect", "99"], ["ladder", "-k", "nonsense"],
                                  ["run", "-k", "a-rung-that-does-not-exist"],
                                  ["explain", "-1", "4", "4"]])
def test_usage_errors_fit_100_columns(args):
    done = subprocess.run([sys.executable, "-m", "sgemmlab", *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert max(map(len, done.stderr.splitlines())) <= WIDTH, done.stderr


def test_fail_folds_a_long_message():
    from sgemmlab.cli.common import fail

    words = "a long list of rungs that goes on " * 12
    one = typer.Typer()

    @one.command()
    def go():
        fail(words.strip())

    done = CliRunner().invoke(one, [])
    assert done.exit_code == 1
    lines = done.output.splitlines()
    assert len(lines) > 1 and max(map(len, lines)) <= WIDTH
    assert " ".join(line.strip() for line in lines) == words.strip()


def sgemmlab(*args: str, env: dict | None = None, timeout: int = 300):
    return subprocess.run([sys.executable, "-m", "sgemmlab", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, env={**os.environ, **(env or {})})


# -- info lists what explain can pick ----------------------------------------------------
def _info_numbers(output: str) -> set[int]:
    return {int(line.split()[0]) for line in output.splitlines()
            if line.startswith("  ") and line.split()[0].isdigit()}


def test_info_lists_every_rung_the_library_runs():
    from sgemmlab import registry

    done = CliRunner().invoke(app, ["info"])
    assert done.exit_code == 0, done.output
    every = registry.ALL + registry.TENSOR + registry.HISTORY + registry.ORDERED
    assert _info_numbers(done.output) == {r.number for r in every}
    for r in every:
        assert registry.rung(r.number) is r  # the lookup -k and explain go through
    assert max(map(len, done.output.splitlines())) <= WIDTH
    for words in ("tensor cores", "history", "post-compile", "Python track"):
        assert words in done.output


@pytest.mark.parametrize("shape, precision", [((4096, 4096, 4096), "ieee"),
                                              ((8, 4096, 4096), "ieee"),
                                              ((4096, 4096, 4096), "tf32x3"),
                                              ((4096, 4096, 4096), "fp32_emulated"),
                                              ((512, 512, 512), "fp32_emulated")])
def test_what_explain_picks_info_lists(shape, precision):
    import json

    from sgemmlab import registry

    chose = CliRunner().invoke(app, ["explain", *map(str, shape), "--gpu", "h200", "--json",
                                     "--precision", precision])
    assert chose.exit_code == 0, chose.output
    picked = registry.rung(json.loads(chose.output)["rung"]).number
    assert picked in _info_numbers(CliRunner().invoke(app, ["info"]).output)
    if precision == "fp32_emulated":  # the scheme at 4096^3, exact FP32 at 512^3: both say why
        assert (picked == 26) is (shape[0] == 4096), picked
        assert "predicted" in json.loads(chose.output)["reason"]


# -- the Python simulator: an estimate first, progress on the way --------------------------
needs_numba = pytest.mark.skipif(importlib.util.find_spec("numba") is None,
                                 reason="the Python track needs numba-cuda")


@needs_numba
def test_a_simulation_of_4096_cubed_is_refused_at_once_with_the_estimate():
    done = sgemmlab("run", "--track", "numba", "--simulate", "-k", "7", "--size", "4096",
                    timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    text = " ".join(done.stderr.split())
    assert "68.7 billion multiply-adds" in text and "about 38 h" in text
    assert "--size 240" in text and "--long" in text and "Traceback" not in done.stderr
    assert max(map(len, done.stderr.splitlines())) <= WIDTH
    assert "on the simulator" not in done.stdout  # nothing ran


@needs_numba
def test_a_tiny_simulation_runs_without_a_word_about_time():
    done = sgemmlab("run", "--track", "numba", "--simulate", "-k", "1", "--size", "16")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith("ok") and "note:" not in done.stdout


SLOW = r"""
import sys
from sgemmlab.pytrack import simulator
simulator.WARN_S = simulator.EVERY_S = 0.0  # every launch is 'long', every block reported
from sgemmlab.cli import main
sys.argv = ["sgemmlab", "run", "--track", "numba", "--simulate", "-k", "1", "--size", "24"]
main()
"""


@needs_numba
def test_a_long_simulation_warns_and_shows_its_blocks():
    """The thresholds lowered in a child process, so a 24^3 launch (9 blocks of rung 1's
    SIM_CONFIG) takes the path 4096^3 --long would."""
    done = subprocess.run([sys.executable, "-c", SLOW], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={**os.environ, "NUMBA_ENABLE_CUDASIM": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("note: 24x24x24 in Numba's simulator: 13,824 multiply-adds")
    assert "--size" in lines[0] + lines[1]
    assert any("1 of 9 blocks" in line for line in lines)
    assert any("8 of 9 blocks" in line for line in lines)
    assert lines[-1].endswith("ok")


@needs_numba
def test_the_estimate_grows_with_the_product_and_names_a_quick_size():
    from sgemmlab import registry
    from sgemmlab.pytrack import simulator

    py = registry.python_rung("3")
    small = simulator.estimate(3, py.rung, {"BS": 8}, (32, 32, 32))
    big = simulator.estimate(3, py.rung, {"BS": 8}, (1024, 1024, 1024))
    assert not small.warns() and big.refused() and big.blocks == 128 * 128
    quick = simulator.quick_size(3)
    assert simulator.seconds(3, quick ** 3) <= simulator.WARN_S
    assert simulator.seconds(3, (quick + 8) ** 3) > simulator.WARN_S


# -- examples say what they need -----------------------------------------------------------
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def _no_gpu_here() -> bool:
    from sgemmlab.errors import NoGPUError
    from sgemmlab.runtime.device import gpu_info

    try:
        gpu_info()
    except NoGPUError:
        return True
    return False


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_each_example_states_what_it_needs(example):
    import ast

    doc = ast.get_docstring(ast.parse(example.read_text()))
    assert doc and "Needs:" in doc, example.name


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_without_a_gpu_an_example_says_so_in_one_line(example):
    if not _no_gpu_here():
        pytest.skip("this machine has a GPU")
    done = subprocess.run([sys.executable, str(example)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "NVIDIA GPU" in lines[0] and not done.stdout


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_without_torch_an_example_says_so_in_one_line(example, tmp_path):
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('no torch here')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(example)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs torch" in lines[0] and "Traceback" not in done.stderr
    assert max(map(len, lines)) <= WIDTH


# -- the predicted ladder says what it rests on --------------------------------------------
def _predicted(monkeypatch, numbers, disassembler: bool):
    from sgemmlab import registry
    from sgemmlab.anatomy import report, sass
    from sgemmlab.bench import results
    from sgemmlab.runtime import occupancy

    if not disassembler:
        monkeypatch.setattr(sass, "find_nvdisasm", lambda: None)
    elif sass.find_nvdisasm() is None:
        pytest.skip("no nvdisasm here")
    g, shape = occupancy.gpu("h200"), (4096, 4096, 4096)
    meas = results.ladder_records(g.name, shape)
    assert meas, "the committed H200 ladder at 4096^3 is the measurement beside the prediction"
    items = report.ladder(g, shape, measured=meas, rungs=[registry.rung(n) for n in numbers])
    cublas = meas[0]["cublas"]["median_us"]
    return items, report.brief_text(items, "H200", cublas, meas[1])


@pytest.mark.parametrize("disassembler", [True, False])
def test_the_predicted_ladder_says_what_it_rests_on(monkeypatch, disassembler):
    items, text = _predicted(monkeypatch, [11, 13], disassembler)
    assert "the slowest of five throughputs" in text
    assert max(map(len, text.splitlines())) <= WIDTH
    if disassembler:
        assert "read with nvdisasm" in text and items[1]["prediction"]["limit"] == "issue"
    else:  # one line says the tool is missing and what changes; rung 13 loses its issue limit
        assert "nvdisasm is not installed" in text and "issue limit is left out" in text
        assert items[1]["prediction"]["limit"] == "FFMA"


def test_predictions_beyond_the_model_and_far_from_the_measurement_are_marked(monkeypatch):
    items, text = _predicted(monkeypatch, [6, 11, 13], True)
    rows = {line.split()[0]: line for line in text.splitlines() if line[:2].isdigit()}
    assert "†" not in rows["06_vectorized"] and "‡" not in rows["06_vectorized"]
    assert "‡" in rows["11_cp_async"]  # predicted 31 % of cuBLAS, measured 77 %
    assert "†" in rows["13_hoisted"]  # predicted faster than cuBLAS
    assert "† faster than cuBLAS as measured" in text and "‡ the measurement is more" in text
