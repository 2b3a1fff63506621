"""What a new user meets first, without a GPU: the version, the one error style, output
that fits 100 columns, distinct colours per chart series, `build` and `explain` agreeing
with the API, and the bundle of prebuilt cubins (read before the cache, verified, never
trusted blindly) that `sgemmlab warmup --bundle` writes."""

from __future__ import annotations

import importlib.metadata as md
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import sgemmlab
from conftest import one_message  # noqa: E402
from sgemmlab import registry
from sgemmlab.cli import app
from sgemmlab.runtime import compiler


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The real entry point (cli.main), as a user's shell runs it."""
    import os

    return subprocess.run([sys.executable, "-m", "sgemmlab", *args], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **(env or {})})


# -- version and errors ------------------------------------------------------------------
def test_version_agrees_everywhere():
    done = cli("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"sgemmlab {sgemmlab.__version__}"
    assert md.version("sgemmlab") == sgemmlab.__version__


@pytest.mark.parametrize("args, words", [
    (["explain", "0", "2", "2"], "greater than or equal to 1"),
    (["ladder", "--bogus"], "No such option: --bogus"),
    (["inspect"], "give a RUNG or --all"),
    (["nosuchcommand"], "No such command"),
    (["run", "-k", "99"], "unknown kernel '99'"),
    (["explain", "3000000000", "2", "2"], "M = 3000000000 does not fit the kernels' 32-bit"),
    (["explain", "-1", "4", "4"], "-1 is not a size: M, N, K and counts are integers >= 1"),
])
def test_usage_errors_are_one_line_and_exit_2(args, words):
    done = cli(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert words in one_message(done.stdout + done.stderr)


def test_no_command_prints_the_help_and_succeeds():
    done = cli()
    assert done.returncode == 0, done.stderr
    assert "Usage" in done.stdout and "explain" in done.stdout and not done.stderr.strip()


def test_explain_refuses_what_the_api_refuses_in_the_same_words():
    from sgemmlab.runtime.limits import check_int32

    with pytest.raises(OverflowError) as api:
        check_int32(M=3_000_000_000, N=2, K=2, batch=1)
    done = cli("explain", "3000000000", "2", "2")
    assert str(api.value) in done.stderr


def test_config_error_is_exported():
    assert issubclass(sgemmlab.ConfigError, Exception) and "ConfigError" in sgemmlab.__all__


# -- output ----------------------------------------------------------------------------------
def test_the_no_gpu_ladder_fits_100_columns_honours_k_and_says_it_once():
    done = cli("ladder", "-k", "3", "-k", "13", env={"CUDA_VISIBLE_DEVICES": ""})
    if "nothing was measured" not in done.stdout:
        pytest.skip("a GPU answered")
    out = done.stdout
    assert max(len(ln) for ln in out.splitlines()) <= 100, out
    rows = [ln.split()[0] for ln in out.splitlines() if ln[:2].isdigit()]
    assert rows == ["03_smem", "13_hoisted"]
    assert out.lower().count("no usable nvidia gpu") + out.lower().count("no gpu") == 1
    assert "% of cuBLAS" in out and "limited by" in out


def test_build_runs_the_gpus_defaults():
    done = CliRunner().invoke(app, ["build", "-k", "13", "--gpu", "h200"])
    assert done.exit_code == 0, done.output
    want = registry.config_key(registry.rung(13).default("NVIDIA H200"))
    assert want in done.output and "NVIDIA H200 (sm_90)" in done.output


def test_every_series_has_its_own_colour():
    pytest.importorskip("matplotlib")
    from sgemmlab.bench.plots import FIXED_COLORS, kernel_color

    names = [r.label for r in registry.ALL + registry.TENSOR + registry.HISTORY]
    names += [p.label for p in registry.PYTHON] + list(FIXED_COLORS)
    colours = [kernel_color(n) for n in names]
    assert len(set(colours)) == len(names), sorted(zip(colours, names))


# -- the bundle of prebuilt cubins -------------------------------------------------------
SMALL = ("ladder/01_naive.cu", {"BS": 8, "THREADS": 64})


@pytest.fixture
def bundle(tmp_path, monkeypatch):
    monkeypatch.setenv("SGEMMLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SGEMMLAB_BUNDLE_DIR", str(tmp_path / "bundle"))
    return tmp_path / "bundle"


def test_a_bundled_entry_is_used_before_compiling(bundle):
    source, macros = SMALL
    built = compiler.compile_kernel(source, macros, "sm_90", use_cache=False)
    compiler.write_bundle_entry(bundle, built, source, macros, "sm_90")
    hit = compiler.compile_kernel(source, macros, "sm_90")
    assert hit.bundled and hit.cached and hit.cubin == built.cubin
    assert hit.resources == built.resources


@pytest.mark.parametrize("how", ["foreign", "corrupt", "other-arch"])
def test_a_stale_or_damaged_bundle_entry_is_not_trusted(bundle, how):
    source, macros = SMALL
    built = compiler.compile_kernel(source, macros, "sm_90", use_cache=False)
    path = compiler.write_bundle_entry(bundle, built, source, macros, "sm_90")
    if how == "corrupt":
        blob = bytearray(path.read_bytes())
        blob[-1] ^= 0xFF
        path.write_bytes(bytes(blob))
    else:  # an entry under this key that records another compile
        other = {**macros, "BS": 16} if how == "foreign" else macros
        arch = "sm_90" if how == "foreign" else "sm_80"
        path.unlink()
        compiler._write_entry(path, compiler.entry_meta(source, other, arch, built.log,
                                                        built.resources), built.cubin)
    got = compiler.compile_kernel(source, macros, "sm_90")
    assert not got.bundled and not got.cached  # compiled afresh
    assert got.cubin == built.cubin


def test_warmup_writes_a_bundle_of_what_dispatch_can_choose(bundle, monkeypatch):
    from sgemmlab.tune import bundle as bundle_mod

    todo = bundle_mod.variants("NVIDIA H200", "sm_90")
    sources = {s for s, _, _ in todo}
    for r in registry.ALL:  # every rung's default is in it, in each layout it reads
        assert r.source in sources, r.label
    assert any(a == "sm_90a" for _, _, a in todo)  # the tensor rungs, for their own arch
    first = todo[0]
    monkeypatch.setattr(bundle_mod, "variants", lambda gpu, arch: [first])
    done = CliRunner().invoke(app, ["warmup", "--gpu", "h200", "--jobs", "1",
                                    "--bundle", str(bundle)])
    assert done.exit_code == 0, done.output
    assert "1 kernel variants" in done.output
    (entry,) = bundle.glob("*.bin")
    hit = compiler.compile_kernel(*first)
    assert hit.bundled and entry.name == f"{hit.key}.bin"


# -- the first call ------------------------------------------------------------------------
def test_firstcall_measures_every_problem_of_the_shipped_table_once():

    from sgemmlab.bench import firstcall
    from sgemmlab.dispatch import table as table_mod

    todo = firstcall.problems("NVIDIA H200")
    table = table_mod.read_table(table_mod.package_table_path("NVIDIA H200"))
    want = {(w["M"], w["N"], w["K"], w.get("layout", "NN"), w.get("batch", 1))
            for w in table.winners()}
    got = [(p["M"], p["N"], p["K"], p["layout"], p["batch"]) for p in todo]
    assert len(got) == len(set(got)) == len(want) and set(got) == want
    assert firstcall.problems("NVIDIA H200", limit=3) == todo[:3]
    with pytest.raises(ValueError, match="no shipped table"):
        firstcall.problems("Some GPU")


def test_firstcall_summary_counts_what_misses_the_target():
    from sgemmlab.bench import firstcall

    recs = [{"M": 1, "N": 1, "K": 1, "layout": "NN", "batch": 1, "first_ms": t,
             "second_ms": 0.1, "compiled": c} for t, c in ((60.0, False), (1.0, True),
                                                           (2.0, False))]
    s = firstcall.summary(recs)
    assert (s["over_target"], s["compiled"], s["max_first_ms"], s["median_first_ms"]) == (
        1, 1, 60.0, 2.0)


def cli_python(code: str, **env) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **env})
