"""Compiling needs no GPU: every rung builds for sm_90 with NVRTC on any machine.

(a) every configuration the registry calls legal compiles with no spills and no stack frame,
    in both variants of a vectorized rung (with and without SGEMM_VEC4), and ptxas agrees
    with the registry about shared memory. Spaces of more than FULL_SPACE distinct builds
    (rungs 12-14: hundreds) are sampled: the seed, the tuned defaults, configurations that
    together take every value of every constant, then evenly spread ones (the full sweep,
    tools/compile_sweep.py, compiled all of them once: section (e)). A configuration may
    spill only where that sweep found it spilling (registry.known_spills; the register rule
    there is an estimate, and the tuner reads the ptxas report). The column-major variants
    of the rungs that have them compile too;
(b) the registry's rules agree with the kernels' static_asserts, in both directions;
(c) the ptxas report is read correctly;
(d) the disk cache: what the key covers, hits, corrupt entries, concurrent writers.

Cost: (a) compiles every legal configuration in each variant (minutes cold on two cores,
seconds with a warm cache); it uses the default cache directory so that later runs are
warm. The tests of (d) use a private cache directory each.
"""

from __future__ import annotations

import dataclasses
import hashlib
import multiprocessing
import os
import re
import shutil
from pathlib import Path

import pytest

from conftest import first_error, illegal_sample, probe_config, resource_problems
from sgemmlab import registry
from sgemmlab.registry import Rung, config_key
from sgemmlab.runtime import compiler
from sgemmlab.runtime.compiler import (
    KERNEL_DIR,
    CompileError,
    Resources,
    cache_dir,
    cache_key,
    compile_kernel,
    parse_ptxas,
)
from sgemmlab.tune.search import compile_many

ARCH = "sm_90"
JOBS = 2
ILLEGAL_SAMPLE = 40  # illegal configurations compiled per rung, at most
FULL_SPACE = 240  # distinct builds of a space compiled in full; bigger spaces are sampled
SAMPLE = 24
_STATIC_ASSERT = re.compile(r'static assertion failed with "((?:[^"\\]|\\.)*)"')


def _written(r: Rung) -> bool:
    return (KERNEL_DIR / r.source).is_file()


RUNG_PARAMS = [
    pytest.param(r, id=f"r{r.number}", marks=pytest.mark.skipif(
        not _written(r), reason=f"{r.source} is not written yet"))
    for r in registry.RUNGS
]
VECTOR_PARAMS = [p for p in RUNG_PARAMS if p.values[0].vectorized]


def _distinct(r: Rung) -> list[dict]:
    """The legal configurations, one per distinct build (host-only keys change no code)."""
    seen: dict[str, dict] = {}
    for cfg in r.configs():
        seen.setdefault(config_key(r.macros(cfg)), cfg)
    return list(seen.values())


def compiled_configs(r: Rung) -> list[dict]:
    """What (a) compiles for `r`: every distinct build, or a deterministic sample."""
    configs = _distinct(r)
    if len(configs) <= FULL_SPACE:
        return configs
    defaults = [t[r.label] for t in registry.tuned_defaults().values() if r.label in t]
    return registry.covering_sample(configs, SAMPLE, first=[r.seed, *defaults])


def _scalar(r: Rung) -> Rung:
    """The same rung compiled without SGEMM_VEC4: the variant unaligned operands run."""
    return dataclasses.replace(r, vectorized=False)


def _asserts_fired(error: BaseException) -> list[str]:
    """The messages of the static_asserts that failed, from NVRTC's log."""
    return _STATIC_ASSERT.findall(str(error))


def _spills_tolerated(r: Rung, cfg: dict) -> bool:
    """A configuration may spill only where the full compile sweep found it spilling
    (registry.known_spills: rungs whose register rule is an estimate). The seed and the
    tuned defaults are never among them (test_the_newest_compile_sweep_matches_...)."""
    return config_key(r.macros(cfg)) in {config_key(r.macros(c))
                                         for c in registry.known_spills().get(r.label, [])}


# -- (a) every legal configuration compiles cleanly -------------------------------------


@pytest.mark.sweep
@pytest.mark.parametrize("rung", RUNG_PARAMS)
def test_every_legal_config_compiles_without_spills(rung):
    configs = compiled_configs(rung)
    assert configs, f"{rung.label} has no legal configuration"
    problems = resource_problems(compile_many([(rung, c) for c in configs], ARCH, JOBS),
                                 _spills_tolerated)
    variant = " (SGEMM_VEC4=1)" if rung.vectorized else ""
    assert not problems, (
        f"{len(problems)} of {len(configs)} legal configurations of {rung.label}{variant} "
        f"fail for {ARCH}:\n  " + "\n  ".join(problems))


@pytest.mark.sweep
@pytest.mark.parametrize("rung", VECTOR_PARAMS)
def test_scalar_variant_has_no_stack_frame_either(rung):
    """Unaligned operands run the rung built without SGEMM_VEC4. compile_many builds that
    variant too and reports its failures and spills, but not the rest of its bill; built
    again here (cache hits after the test above), it must meet the same bar."""
    configs = compiled_configs(rung)
    problems = resource_problems(
        compile_many([(_scalar(rung), c) for c in configs], ARCH, JOBS), _spills_tolerated)
    assert not problems, (
        f"{len(problems)} of {len(configs)} legal configurations of {rung.label} "
        f"(SGEMM_VEC4=0) fail for {ARCH}:\n  " + "\n  ".join(problems))


LAYOUT_PARAMS = [p for p in RUNG_PARAMS if p.values[0].supports("layouts")]


@pytest.mark.sweep
@pytest.mark.parametrize("trans", ["TN", "NT", "TT"])
@pytest.mark.parametrize("rung", LAYOUT_PARAMS)
def test_column_major_variants_compile_without_spills(rung, trans):
    from sgemmlab.runtime.launch import variant_macros

    problems = []
    for cfg in [dict(rung.seed)] + [c for c in (t.get(rung.label) for t in
                                                registry.tuned_defaults().values()) if c]:
        for vec4 in (True, False):
            macros = rung.macros(cfg) | variant_macros(rung, vec4, trans[0] == "T",
                                                       trans[1] == "T")
            res = compile_kernel(rung.source, macros, ARCH).resources
            if res.spills or res.stack_bytes or not res.known:
                problems.append(f"{config_key(cfg)} vec4={vec4}: {res}")
    assert not problems, "\n".join(problems)


# -- (b) the rules agree with the compiler ----------------------------------------------


def _illegal_sample(r: Rung, limit: int = ILLEGAL_SAMPLE) -> list[dict]:
    return illegal_sample(r, limit)


def _refusals(r: Rung, configs: list[dict]) -> list[str]:
    """One line per configuration that compiled, or was refused without a static_assert
    naming one of the rules it breaks."""
    wrong = []
    for (_, cfg), res in compile_many([(r, c) for c in configs], ARCH, JOBS):
        broken = r.violations(cfg)
        if not isinstance(res, BaseException):
            wrong.append(f"{config_key(cfg)} breaks {broken} but compiled "
                         f"({res.registers} registers)")
        elif not isinstance(res, CompileError):
            wrong.append(f"{config_key(cfg)}: {type(res).__name__}: {res}")
        elif not set(_asserts_fired(res)) & set(broken):
            wrong.append(f"{config_key(cfg)} breaks {broken}; the compiler refused it with "
                         f"{_asserts_fired(res) or first_error(res)}")
    return wrong


@pytest.mark.sweep
@pytest.mark.parametrize("rung", RUNG_PARAMS)
def test_illegal_configs_of_the_space_are_refused_by_the_compiler(rung):
    configs = _illegal_sample(rung)
    if not configs:
        pytest.skip(f"every configuration in {rung.label}'s space is legal")
    wrong = _refusals(rung, configs)
    assert not wrong, (f"{len(wrong)} of {len(configs)} illegal configurations of "
                       f"{rung.label} disagree with the compiler:\n  " + "\n  ".join(wrong))




@pytest.mark.sweep
@pytest.mark.parametrize("rung", RUNG_PARAMS)
def test_every_rule_has_a_static_assert(rung):
    """For each rule, a configuration just outside it (out of the search space if need be)
    must be refused by a static_assert carrying the rule's text."""
    probes = {}
    for rule in rung.all_rules():
        if rule.host or rule.search:  # the launcher's plan, or the search's space: no
            continue  # kernel sees the key, or none depends on the rule
        cfg = probe_config(rung, rule.text)
        if cfg is not None:  # else the rule cannot break near the seed (smem of rung 1)
            probes[rule.text] = cfg
    assert probes, f"no rule of {rung.label} can be broken near its seed"
    results = dict(zip(probes, (res for _, res in compile_many(
        [(rung, c) for c in probes.values()], ARCH, JOBS))))
    missing = []
    for text, res in results.items():
        cfg = probes[text]
        if not isinstance(res, BaseException):
            missing.append(f"{text!r}: {config_key(cfg)} compiled")
        elif text not in _asserts_fired(res):
            missing.append(f"{text!r}: {config_key(cfg)} refused with "
                           f"{_asserts_fired(res) or first_error(res)}")
    assert not missing, (f"{rung.label}: rules with no static_assert of the same text:\n  "
                         + "\n  ".join(missing))


# -- (c) the ptxas report -----------------------------------------------------------------

SPILLING_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'sgemm' for 'sm_90'
ptxas info    : Function properties for sgemm
ptxas         .     880 bytes stack frame, 2680 bytes spill stores, 3000 bytes spill loads
ptxas info    : Used 64 registers, used 1 barriers, 16512 bytes smem, 400 bytes cmem[0]
ptxas info    : Compile time = 812.345 ms
"""

CLEAN_LOG = """\
ptxas info    : 1024 bytes gmem
ptxas info    : Compiling entry function 'sgemm' for 'sm_90'
ptxas info    : Function properties for sgemm
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers
ptxas info    : Compile time = 14.812 ms
"""


def test_parse_ptxas_reads_a_spilling_report():
    res = parse_ptxas(SPILLING_LOG)
    assert res == Resources(registers=64, spill_stores=2680, spill_loads=3000,
                            stack_bytes=880, smem_bytes=16512, barriers=1)
    assert res.spills


def test_parse_ptxas_reads_a_clean_report():
    res = parse_ptxas(CLEAN_LOG)  # 1024 bytes gmem is not shared memory
    assert res == Resources(registers=32, spill_stores=0, spill_loads=0, stack_bytes=0,
                            smem_bytes=0, barriers=0)
    assert not res.spills


def test_loads_alone_count_as_spills():
    assert parse_ptxas(CLEAN_LOG.replace("0 bytes spill loads", "8 bytes spill loads")).spills


def test_a_report_without_registers_is_unknown_and_not_cached(tmp_path, monkeypatch):
    res = parse_ptxas("ptxas info    : Compiling entry function 'sgemm' for 'sm_90'\n")
    assert res.registers == -1 and not res.known
    monkeypatch.setenv("SGEMMLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(compiler, "_nvrtc", lambda *a: (b"\x7fELF-not-a-real-cubin", ""))
    r = registry.rung(3)
    out = compile_kernel(r.source, r.macros({"BS": 16}), ARCH)
    assert not out.resources.known
    assert not list(tmp_path.rglob("*.bin")), "an entry without its report must not be cached"


def test_an_empty_report_is_compiled_again_until_one_comes(tmp_path, monkeypatch):
    """Parallel NVRTC compiles on the H200 machine sometimes returned an empty log: the
    compile is tried again, and only the attempt with the report is kept."""
    monkeypatch.setenv("SGEMMLAB_CACHE_DIR", str(tmp_path))
    logs = iter(["", "", CLEAN_LOG])
    calls = []

    def fake(*args):
        calls.append(args)
        return b"\x7fELF-not-a-real-cubin", next(logs)

    monkeypatch.setattr(compiler, "_nvrtc", fake)
    r = registry.rung(3)
    out = compile_kernel(r.source, r.macros({"BS": 16}), ARCH)
    assert len(calls) == 3 and out.resources == parse_ptxas(CLEAN_LOG)
    assert len(list(tmp_path.rglob("*.bin"))) == 1


@pytest.mark.parametrize("name, registers, smem", [
    ("inspect_03_smem_BS32_sm90.cubin", 32, 8192),  # As, Bs: 2 x 32 x 32 floats
    ("inspect_10_warptiling_h200_vec4_sm90.cubin", 127, None),
])
def test_resources_from_the_cubin_when_ptxas_says_nothing(name, registers, smem):
    cubin = (Path(__file__).parent / "data" / name).read_bytes()
    res = compiler.resources_from_cubin(cubin)
    assert res.registers == registers and res.stack_bytes == 0 and not res.spills
    if smem is not None:
        assert res.smem_bytes == smem
    with pytest.raises(ValueError, match="no symbol"):
        compiler.resources_from_cubin(cubin, "not_a_kernel")


def test_a_fresh_cubin_reads_as_ptxas_reports_it(tmp_path, monkeypatch):
    """The fallback agrees with ptxas on two builds of rung 14 (233 and 255 registers):
    registers, shared memory, and no spills (no stack frame)."""
    monkeypatch.setenv("SGEMMLAB_CACHE_DIR", str(tmp_path))
    r = registry.rung(14)
    for cfg in (r.seed, {**r.seed, "FIXUP": 2}):
        out = compile_kernel(r.source, r.macros(cfg), ARCH, use_cache=False)
        got = compiler.resources_from_cubin(out.cubin)
        assert (got.registers, got.smem_bytes, got.spills) == (
            out.resources.registers, out.resources.smem_bytes, out.resources.spills)


def test_three_empty_reports_fall_back_to_the_cubin(tmp_path, monkeypatch):
    monkeypatch.setenv("SGEMMLAB_CACHE_DIR", str(tmp_path))
    cubin = (Path(__file__).parent / "data" / "inspect_03_smem_BS32_sm90.cubin").read_bytes()
    monkeypatch.setattr(compiler, "_nvrtc", lambda *a: (cubin, ""))
    r = registry.rung(3)
    out = compile_kernel(r.source, r.macros({"BS": 32}), ARCH)
    assert out.resources.known and out.resources.registers == 32
    assert len(list(tmp_path.rglob("*.bin"))) == 1  # known now: cached


def test_a_cached_entry_without_a_report_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("SGEMMLAB_CACHE_DIR", str(tmp_path))
    r = registry.rung(3)
    macros = r.macros({"BS": 16})
    key = compiler.cache_key(r.source, macros, ARCH)
    compiler._write_entry(tmp_path / "cubins" / f"{key}.bin",
                          {"log": "", "resources": dataclasses.asdict(parse_ptxas(""))},
                          b"\x7fELF-stale")
    monkeypatch.setattr(compiler, "_nvrtc", lambda *a: (b"\x7fELF-fresh", CLEAN_LOG))
    out = compile_kernel(r.source, macros, ARCH)
    assert not out.cached and out.cubin == b"\x7fELF-fresh" and out.resources.known


def test_parse_ptxas_on_a_real_nvrtc_log(tmp_path, monkeypatch):
    monkeypatch.setenv("SGEMMLAB_CACHE_DIR", str(tmp_path))
    r = registry.rung(3)
    out = compile_kernel(r.source, r.macros({"BS": 16}), ARCH)
    assert "Used" in out.log and "registers" in out.log
    assert out.resources == parse_ptxas(out.log)
    assert 0 < out.resources.registers <= 255
    assert out.resources.smem_bytes == 2 * 16 * 16 * 4
    assert out.resources.barriers == 1


# -- (d) the disk cache ---------------------------------------------------------------------

SMALL = ("ladder/01_naive.cu", {"BS": 8, "THREADS": 64})  # the quickest kernel to compile


@pytest.fixture
def private_cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SGEMMLAB_CACHE_DIR", str(tmp_path))
    return tmp_path


def _entry(cache: Path, key: str) -> Path:
    return cache / "cubins" / f"{key}.bin"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SGEMMLAB_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("SGEMMLAB_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "sgemmlab"


def test_cache_key_covers_macros_arch_and_nvrtc(monkeypatch):
    source, macros = SMALL
    key = cache_key(source, macros, ARCH)
    assert re.fullmatch(r"[0-9a-f]{32}", key)
    assert cache_key(source, dict(reversed(list(macros.items()))), ARCH) == key
    assert cache_key(source, {**macros, "BS": 16}, ARCH) != key
    assert cache_key(source, {**macros, "SGEMM_VEC4": 1}, ARCH) != key
    assert cache_key(source, macros, "sm_80") != key
    assert cache_key("ladder/02_coalesced.cu", macros, ARCH) != key
    monkeypatch.setattr(compiler, "nvrtc_version", lambda: "99.9")
    assert cache_key(source, macros, ARCH) != key


def test_cache_key_covers_the_source_and_its_includes(tmp_path, monkeypatch):
    source, macros = SMALL
    original = cache_key(source, macros, ARCH)
    copy = tmp_path / "kernels"
    shutil.copytree(KERNEL_DIR, copy)
    monkeypatch.setattr(compiler, "KERNEL_DIR", copy)
    assert cache_key(source, macros, ARCH) == original  # the text decides, not the path

    with open(copy / "ladder/02_coalesced.cu", "a") as f:
        f.write("\n// another rung's edit\n")
    assert cache_key(source, macros, ARCH) == original

    with open(copy / "common.cuh", "a") as f:
        f.write("\n// an edit to the shared header\n")
    after_header = cache_key(source, macros, ARCH)
    assert after_header != original

    with open(copy / source, "a") as f:
        f.write("\n// an edit to the rung itself\n")
    assert cache_key(source, macros, ARCH) not in (original, after_header)


def test_a_hit_returns_the_same_cubin(private_cache):
    source, macros = SMALL
    first = compile_kernel(source, macros, ARCH)
    assert not first.cached
    assert _entry(private_cache, first.key).is_file()
    second = compile_kernel(source, macros, ARCH)
    assert second.cached
    assert (second.key, second.cubin, second.log, second.resources) == (
        first.key, first.cubin, first.log, first.resources)


def test_use_cache_false_neither_reads_nor_writes(private_cache):
    source, macros = SMALL
    compile_kernel(source, macros, ARCH)
    before = sorted(p.name for p in (private_cache / "cubins").iterdir())
    fresh = compile_kernel(source, {**macros, "BS": 16}, ARCH, use_cache=False)
    again = compile_kernel(source, macros, ARCH, use_cache=False)
    assert not fresh.cached and not again.cached
    assert sorted(p.name for p in (private_cache / "cubins").iterdir()) == before


def _flip(i):
    def corrupt(blob: bytes) -> bytes:
        b = bytearray(blob)
        b[i] ^= 0xFF
        return bytes(b)
    return corrupt


CORRUPTIONS = {
    "flip-magic": _flip(0),
    "flip-checksum": _flip(len(compiler._MAGIC) + 5),
    "flip-metadata": _flip(len(compiler._MAGIC) + 32 + 10),
    "flip-cubin": _flip(-1),
    "truncate-half": lambda b: b[: len(b) // 2],
    "truncate-header": lambda b: b[: len(compiler._MAGIC) + 3],
    "empty": lambda b: b"",
    "garbage": lambda b: os.urandom(len(b)),
    "appended": lambda b: b + b"\0" * 16,
}


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_a_corrupt_entry_is_rebuilt_not_trusted(private_cache, how):
    source, macros = SMALL
    good = compile_kernel(source, macros, ARCH)
    path = _entry(private_cache, good.key)
    bad = CORRUPTIONS[how](path.read_bytes())
    path.write_bytes(bad)

    rebuilt = compile_kernel(source, macros, ARCH)
    assert not rebuilt.cached, f"a {how} entry was trusted"
    assert rebuilt.cubin == good.cubin and rebuilt.resources == good.resources
    assert path.read_bytes() != bad, "the corrupt entry was not replaced"
    hit = compile_kernel(source, macros, ARCH)
    assert hit.cached and hit.cubin == good.cubin


def test_a_failed_write_leaves_no_temporary_file(private_cache, monkeypatch):
    source, macros = SMALL

    def no_rename(src, dst):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(compiler.os, "replace", no_rename)
    try:
        compile_kernel(source, macros, ARCH)
    except OSError:
        pass  # whether a failed cache write fails the compile is the compiler's choice
    monkeypatch.undo()
    leftovers = [p.name for p in private_cache.rglob("*") if p.is_file()]
    assert leftovers == [], f"a failed write left {leftovers}"


def _race(cache: str, configs: list[dict], barrier, results) -> None:
    """One of several processes compiling the same keys at the same moment."""
    os.environ["SGEMMLAB_CACHE_DIR"] = cache
    out = []
    try:
        barrier.wait(timeout=60)
        for macros in configs:
            c = compile_kernel(SMALL[0], macros, ARCH)
            out.append((c.key, _sha(c.cubin), c.cached))
        results.put(("ok", out))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the test
        results.put(("error", f"{type(exc).__name__}: {exc}"))


def test_concurrent_compiles_of_one_key_all_succeed_and_leave_one_entry(tmp_path,
                                                                       monkeypatch):
    processes = 4
    configs = [{"BS": bs, "THREADS": bs * bs} for bs in (8, 16, 32)]
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(processes), ctx.Queue()
    workers = [ctx.Process(target=_race, args=(str(tmp_path), configs, barrier, results))
               for _ in range(processes)]
    for w in workers:
        w.start()
    reports = [results.get(timeout=240) for _ in workers]
    for w in workers:
        w.join(timeout=60)
    assert [w.exitcode for w in workers] == [0] * processes
    errors = [r for status, r in reports if status != "ok"]
    assert not errors, f"concurrent compiles failed: {errors}"

    per_config = list(zip(*(r for _, r in reports)))  # one tuple of results per config
    for macros, seen in zip(configs, per_config):
        assert len({(key, sha) for key, sha, _ in seen}) == 1, (
            f"processes disagree about {macros}: {seen}")
    keys = [seen[0][0] for seen in per_config]
    files = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    assert files == sorted(f"{k}.bin" for k in keys), f"cache holds {files}"

    monkeypatch.setenv("SGEMMLAB_CACHE_DIR", str(tmp_path))
    for macros, (key, sha, _) in zip(configs, (seen[0] for seen in per_config)):
        hit = compile_kernel(SMALL[0], macros, ARCH)
        assert hit.cached and hit.key == key and _sha(hit.cubin) == sha


def test_the_generated_measured_block_is_not_part_of_the_cache_key(tmp_path, monkeypatch):
    monkeypatch.setattr(compiler, "KERNEL_DIR", tmp_path)
    body = ("// header\n// <measured>\n{}\n// </measured>\n"
            "extern \"C\" __global__ void sgemm() {{}}\n")
    (tmp_path / "k.cu").write_text(body.format("// 1.0 us"))
    before = compiler.cache_key("k.cu", {"BS": 8}, ARCH)
    (tmp_path / "k.cu").write_text(body.format("// 2.0 us, a new measurement"))
    assert compiler.cache_key("k.cu", {"BS": 8}, ARCH) == before
    (tmp_path / "k.cu").write_text(body.format("// 2.0 us").replace("{}", "{ }"))
    assert compiler.cache_key("k.cu", {"BS": 8}, ARCH) != before  # code outside: new key


# -- (e) the full sweep (tools/compile_sweep.py) behind registry.py's compile guarantee ----


def _sweep():
    import sys as _sys

    _sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    import compile_sweep

    path = compile_sweep.newest()
    return compile_sweep, (compile_sweep.load(path) if path else None)


def test_the_newest_compile_sweep_matches_the_registry_and_the_guarantee():
    """Every rung the newest committed sweep covers, as its source is now: the sweep
    compiled every distinct legal build of it, none failed, and the only spills are the ones
    the package lists (registry.known_spills, data/spills.json); the seed and tuned defaults
    never spill. A rung
    whose source changed since must be swept again (tools/compile_sweep.py compiles only
    those)."""
    sweep, doc = _sweep()
    if doc is None:
        pytest.skip("no compile sweep committed yet")
    assert doc["arch"] == ARCH
    stale = []
    for r in sweep.swept_rungs():
        rec = doc["rungs"].get(r.label)
        if rec is None:
            continue  # not swept yet: registry.py says which are
        if rec["source_digest"] != sweep.source_digest(r):
            stale.append(r.label)
            continue
        records = rec["records"]
        assert len(records) == len(_distinct(r)), f"{r.label}: the space changed since"
        assert not [x for x in records if "error" in x], f"{r.label}: a legal build failed"
        spilled = {config_key(r.macros(x["config"])) for x in records
                   if x.get("spill_stores", 0) + x.get("spill_loads", 0) > 0}
        named = {config_key(r.macros(c)) for c in registry.known_spills().get(r.label, [])}
        assert spilled == named, f"{r.label}: spills {sorted(spilled)}, registry names " \
                                 f"{sorted(named)}"
        for d in [r.seed] + [t[r.label] for t in registry.tuned_defaults().values()
                             if r.label in t]:
            assert config_key(r.macros({**r.seed, **d})) not in spilled, r.label
    assert not stale, f"sources changed since the sweep: {stale} (run tools/compile_sweep.py)"
