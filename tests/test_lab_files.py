"""The files the lab writes: whole or not at all (a run stopped mid-write leaves the previous
file, which the next run reads back), under the current directory or a path the user
gives (never beside an installed package, whose parents are site-packages'), and a bundle
build that deletes only its own previous entries."""

from __future__ import annotations

import io
import json
import os

import pytest
from typer.testing import CliRunner

from sgemmlab.bench import fuzz, results
from sgemmlab.cli import app
from sgemmlab.runtime import compiler, device
from sgemmlab.runtime.compiler import Compiled, Resources
from sgemmlab.tune import bundle
from test_cache_faults import _FileWith

GPU = device.GPUInfo(index=0, name="NVIDIA H200", compute_capability=(9, 0), sm_count=132,
                     l2_bytes=60 << 20, max_smem_per_block_optin=232448)


class Killed(BaseException):
    """Stands for the process being stopped (Ctrl-C, a kill) in the middle of a write."""


def _torn(f):
    """`f` as a file that takes half of what is written to it, flushes it, then is killed."""
    def write(data):
        f.write(data[:len(data) // 2])
        f.flush()
        raise Killed

    return _FileWith(f, write=write)


def tear_writes_under(monkeypatch, directory):
    """Every file opened for writing under `directory` is killed halfway through its
    write (Path.write_text, os.fdopen and so write_atomic all open through io.open)."""
    real = io.open

    def opened(file, mode="r", *args, **kwargs):
        f = real(file, mode, *args, **kwargs)
        path = os.readlink(f"/proc/self/fd/{file}") if isinstance(file, int) else \
            os.path.realpath(file)
        inside = path.startswith(f"{directory.resolve()}{os.sep}")
        return _torn(f) if inside and any(c in mode for c in "wax") else f

    monkeypatch.setattr(io, "open", opened)


def run_of(n_records: int) -> dict:
    return {"schema": results.SCHEMA, "kind": "bench", "environment": {},
            "records": [{"kernel": "k", "M": i, "N": i, "K": i, "median_us": 1.5 * i}
                        for i in range(n_records)]}


@pytest.mark.parametrize("n_records", [3, 20000], ids=["json", "json.xz"])
def test_an_interrupted_results_write_leaves_the_previous_file(n_records, tmp_path,
                                                               monkeypatch):
    monkeypatch.setenv("SGEMMLAB_RESULTS_DIR", str(tmp_path))
    monkeypatch.setattr(results, "sm_clock_mhz", lambda: None)
    before = results.write(run_of(n_records), "gpu", "bench-x")
    assert before.name.endswith(".xz") == (n_records > 3)  # both cases of write are taken
    kept = results.load(before)
    tear_writes_under(monkeypatch, tmp_path)
    with pytest.raises(Killed):
        results.write(run_of(n_records + 1), "gpu", "bench-x")
    monkeypatch.undo()
    assert results.load(before) == kept
    assert sorted(p.name for p in before.parent.iterdir()) == [before.name]


def fake_site_packages(tmp_path, monkeypatch):
    """The package as a wheel installs it: site-packages/sgemmlab, whose grandparent
    (lib/python3.X) has a pyproject.toml, as when installed with --target into a project."""
    lib = tmp_path / "venv" / "lib" / "python3.11"
    (lib / "site-packages" / "sgemmlab").mkdir(parents=True)
    (lib / "pyproject.toml").write_text("[project]\nname = 'someone-else'\n")
    monkeypatch.setattr(results, "PACKAGE_DIR", lib / "site-packages" / "sgemmlab")
    monkeypatch.setattr(results, "REPO_DIR", lib)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return lib, work


def written_under(directory) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def test_results_of_an_installed_package_go_under_the_current_directory(tmp_path,
                                                                        monkeypatch):
    monkeypatch.delenv("SGEMMLAB_RESULTS_DIR", raising=False)
    lib, work = fake_site_packages(tmp_path, monkeypatch)
    assert results.results_root().absolute() == work / "results"


def fuzz_that_fails(monkeypatch, tmp_path, failure):
    monkeypatch.setenv("SGEMMLAB_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setattr("sgemmlab.cli.probes.require_gpu", lambda: GPU)
    monkeypatch.setattr("sgemmlab.cli.probes.require_torch", lambda: None)
    monkeypatch.setattr(results, "new_run", lambda kind, gpu, method: {
        "schema": results.SCHEMA, "kind": kind, "environment": {}, "method": method})
    monkeypatch.setattr(results, "sm_clock_mhz", lambda: None)
    monkeypatch.setattr(fuzz, "campaign", lambda count, seed: ([], failure))


def test_fuzz_keeps_its_failures_under_the_current_directory_or_the_path_given(
        tmp_path, monkeypatch):
    lib, work = fake_site_packages(tmp_path, monkeypatch)
    fuzz_that_fails(monkeypatch, tmp_path, {"M": 1, "why": "first"})
    out = CliRunner().invoke(app, ["fuzz", "--count", "1"])
    assert out.exit_code == 3, out.output
    kept = work / "tests" / "data" / "fuzz_regressions.json"
    assert json.loads(kept.read_text()) == [{"M": 1, "why": "first"}]
    assert str(kept) in out.output.replace("\n", "")
    fuzz_that_fails(monkeypatch, tmp_path, {"M": 2, "why": "second"})
    mine = tmp_path / "mine" / "regressions.json"
    for _ in range(2):  # appended, the first failure kept
        out = CliRunner().invoke(app, ["fuzz", "--count", "1", "--regressions", str(mine)])
        assert out.exit_code == 3, out.output
    assert [f["why"] for f in json.loads(mine.read_text())] == ["second", "second"]
    assert written_under(lib) == ["pyproject.toml"]


def test_the_operands_table_goes_under_the_current_directory_or_the_path_given(
        tmp_path, monkeypatch):
    lib, work = fake_site_packages(tmp_path, monkeypatch)
    monkeypatch.setattr("sgemmlab.bench.probes.operands.markdown",
                        lambda runs: f"# {len(runs)} run(s)\n")
    run = tmp_path / "operands-1.json"
    run.write_text("{}")
    out = CliRunner().invoke(app, ["operands", "--table", str(run)])
    assert out.exit_code == 0, out.output
    assert (work / "docs" / "operands-h200.md").read_text() == "# 1 run(s)\n"
    mine = tmp_path / "elsewhere" / "ops.md"
    out = CliRunner().invoke(app, ["operands", "--table", str(run), "--out", str(mine)])
    assert out.exit_code == 0, out.output
    assert mine.read_text() == "# 1 run(s)\n"
    assert written_under(lib) == ["pyproject.toml"]


def compiled(key: str) -> Compiled:
    return Compiled(key, b"\x7fELF" + key.encode(), "", Resources(
        registers=64, spill_stores=0, spill_loads=0, stack_bytes=0, smem_bytes=0,
        barriers=1), cached=False)


def build(directory, *keys):
    return bundle.write_bundle(directory, [(("ladder/01_naive.cu", {"BM": i}, "sm_90"), compiled(k))
                                           for i, k in enumerate(keys)])


def test_a_bundle_build_removes_its_previous_entries_and_nothing_else(tmp_path,
                                                                     monkeypatch):
    monkeypatch.setattr(compiler, "nvrtc_version", lambda: "13.0")
    where = tmp_path / "bundle"
    where.mkdir()
    (where / "foreign.bin").write_bytes(b"someone else's")
    (where / "notes.txt").write_text("mine")
    build(where, "a" * 16, "b" * 16)
    assert (where / "foreign.bin").read_bytes() == b"someone else's"
    assert json.loads((where / compiler.MANIFEST).read_text()) == {
        "nvrtc": "13.0", "entries": ["a" * 16 + ".bin", "b" * 16 + ".bin"]}
    build(where, "c" * 16)
    assert sorted(p.name for p in where.iterdir()) == [
        "c" * 16 + ".bin", "foreign.bin", compiler.MANIFEST, "notes.txt"]
    assert (where / "foreign.bin").read_bytes() == b"someone else's"


def test_a_bundle_from_before_manifests_named_entries_loses_only_its_entries(tmp_path,
                                                                            monkeypatch):
    monkeypatch.setattr(compiler, "nvrtc_version", lambda: "13.0")
    where = tmp_path / "bundle"
    where.mkdir()
    compiler.write_bundle_entry(where, compiled("a" * 16), "ladder/01_naive.cu", {"BM": 1}, "sm_90")
    assert json.loads((where / compiler.MANIFEST).read_text()) == {"nvrtc": "13.0"}
    (where / "foreign.bin").write_bytes(b"someone else's")
    build(where, "c" * 16)
    assert sorted(p.name for p in where.iterdir()) == [
        "c" * 16 + ".bin", "foreign.bin", compiler.MANIFEST]
