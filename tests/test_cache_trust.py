"""What sgemmlab loads from disk, and what it refuses (runtime/trust.py).

An entry's digest and record can be computed by anyone from the public package, so a
planted entry with a correct record is refused unless nobody but you (or root) can have put
it there: the cache directory and its cubins/ owned by you or root and not writable by group
or others, the entry a regular file (no symlink) that is the same. A refused directory is
neither read nor written (compiled in memory, one warning per directory and process); a
refused entry is compiled afresh and replaced. The same holds for a bundle named by
$SGEMMLAB_BUNDLE_DIR and for the user's tuning tables; the package's own bundle is trusted
as installed. Each planted entry below carries a correct record and key around a cubin of
its own (PLANTED), so loading it shows as that cubin. All CPU (NVRTC compiles rung 1).
"""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path

import pytest

from sgemmlab import dispatch
from sgemmlab.runtime import compiler, trust
from sgemmlab.runtime.compiler import compile_kernel
from test_compile import ARCH, SMALL
from test_dispatch import GPU, R13, SMS, entry, write_package_table

PLANTED = b"\x7fELF planted: an sgemm that writes 42"
OTHER_UID = 65534  # nobody


@pytest.fixture(scope="module")
def fresh() -> compiler.Compiled:
    """SMALL compiled without the cache: what every refused case must return."""
    return compile_kernel(*SMALL, ARCH, use_cache=False)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv("SGEMMLAB_CACHE_DIR", str(path))
    return path


def _planted(fresh, **changes) -> bytes:
    """An entry for SMALL with the full, correct record (key included) and PLANTED as its
    cubin; `changes` alter the record (None drops a field)."""
    meta = compiler.entry_meta(*SMALL, ARCH, fresh.log, fresh.resources, fresh.key)
    meta = {k: v for k, v in {**meta, **changes}.items() if v is not None}
    return compiler._pack(meta, PLANTED)


def _plant(cache: Path, fresh, **changes) -> Path:
    path = cache / "cubins" / f"{fresh.key}.bin"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(_planted(fresh, **changes))
    path.chmod(0o644)
    return path


def _compile(*jobs) -> tuple[list[compiler.Compiled], list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [compile_kernel(*job, ARCH) for job in (jobs or [SMALL])]
    return got, [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


def _files(root: Path) -> dict[str, tuple[int, bytes]]:
    return {p.relative_to(root).as_posix(): (stat.S_IMODE(p.lstat().st_mode),
                                             b"" if p.is_dir() else p.read_bytes())
            for p in sorted([root, *root.rglob("*")])}


def _owned_by_someone_else(path: Path, monkeypatch) -> None:
    """Make `path` another user's: chown as root, else make trust.py see another uid."""
    if os.geteuid() == 0:
        os.chown(path, OTHER_UID, OTHER_UID)
    else:
        monkeypatch.setattr(trust, "_uid", lambda: os.geteuid() + 1)


# -- a refused cache directory -------------------------------------------------------------


@pytest.mark.parametrize("where", ["cache", "cubins"])
def test_a_planted_entry_in_a_world_writable_cache_is_not_loaded(cache, fresh, where):
    _plant(cache, fresh)
    refused = cache if where == "cache" else cache / "cubins"
    refused.chmod(0o777)
    before = _files(cache)
    [got], messages = _compile()
    assert not got.cached and got.cubin == fresh.cubin != PLANTED
    assert len(messages) == 1, messages
    assert str(refused) in messages[0] and "writable by group or others (mode 0o777)" in \
        messages[0] and f"chmod go-w {refused}" in messages[0], messages[0]
    assert _files(cache) == before, "an untrusted cache was written into"


def test_a_planted_entry_in_another_users_cache_is_not_loaded(cache, fresh, monkeypatch):
    _plant(cache, fresh)
    for p in (cache, cache / "cubins"):
        p.chmod(0o755)
    _owned_by_someone_else(cache, monkeypatch)
    before = _files(cache)
    [got], messages = _compile()
    assert not got.cached and got.cubin == fresh.cubin
    assert len(messages) == 1 and str(cache) in messages[0], messages
    assert "is owned by uid" in messages[0] and "not by you" in messages[0], messages[0]
    assert _files(cache) == before


def test_a_refused_directory_warns_once_per_process_not_per_compile(tmp_path, monkeypatch,
                                                                    fresh):
    """Three compiles (two keys) in each of two world-writable caches: two warnings, each
    naming its directory."""
    dirs = [tmp_path / "one", tmp_path / "two"]
    messages = []
    for d in dirs:
        d.mkdir(mode=0o777)
        d.chmod(0o777)
        monkeypatch.setenv("SGEMMLAB_CACHE_DIR", str(d))
        got, said = _compile(SMALL, ("ladder/01_naive.cu", {"BS": 16, "THREADS": 256}), SMALL)
        assert not any(c.cached for c in got) and got[0].cubin == fresh.cubin
        messages += said
    assert len(messages) == 2, messages
    assert [str(d) in m for d, m in zip(dirs, messages)] == [True, True], messages


# -- a refused entry in a trusted cache ------------------------------------------------------


def test_a_symlinked_entry_is_not_followed(cache, tmp_path, fresh):
    """A link to a valid entry elsewhere is not read; the fresh entry replaces the link,
    and the file it pointed to is left alone."""
    elsewhere = tmp_path / "elsewhere" / "entry.bin"
    elsewhere.parent.mkdir(mode=0o700)
    elsewhere.write_bytes(_planted(fresh))
    path = cache / "cubins" / f"{fresh.key}.bin"
    path.parent.mkdir(parents=True)
    path.symlink_to(elsewhere)
    [got], messages = _compile()
    assert not got.cached and got.cubin == fresh.cubin and messages == []
    assert not path.is_symlink() and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert elsewhere.read_bytes() == _planted(fresh)
    [again], _ = _compile()
    assert again.cached and again.cubin == fresh.cubin


@pytest.mark.parametrize("how", ["group-writable", "world-writable", "another-owner"])
def test_an_entry_someone_else_could_have_written_is_refused_and_replaced(cache, fresh, how):
    path = _plant(cache, fresh)
    if how == "another-owner":
        if os.geteuid() != 0:
            pytest.skip("giving a file to another user needs root")
        os.chown(path, OTHER_UID, OTHER_UID)
    else:
        path.chmod(0o664 if how == "group-writable" else 0o646)
    [got], messages = _compile()
    assert not got.cached and got.cubin == fresh.cubin and messages == []
    st = path.lstat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (os.geteuid(), 0o600)
    assert compiler._read_entry(path)[1] == fresh.cubin


@pytest.mark.parametrize("missing", ["key", "nvrtc"])
def test_an_entry_without_its_key_or_nvrtc_version_is_refused(cache, fresh, missing):
    """An older sgemmlab wrote such records; the rest of the record can be computed by
    anyone, so they are compiled again and replaced."""
    path = _plant(cache, fresh, **{missing: None})
    [got], _ = _compile()
    assert not got.cached and got.cubin == fresh.cubin
    meta, cubin = compiler._read_entry(path)
    assert cubin == fresh.cubin and meta["key"] == fresh.key and "nvrtc" in meta


# -- what is trusted -----------------------------------------------------------------------


def test_a_trusted_cache_still_hits(cache, fresh):
    """The compile that fills the cache, then a hit; and a cache made by hand as an older
    sgemmlab left it (0o755 directories, a 0o644 entry with the full record) is a hit too."""
    [first], messages = _compile()
    [second], _ = _compile()
    assert not first.cached and second.cached and second.cubin == fresh.cubin
    assert messages == []
    path = cache / "cubins" / f"{fresh.key}.bin"
    for p in (cache, cache / "cubins"):
        p.chmod(0o755)
    path.write_bytes(compiler._pack(compiler.entry_meta(
        *SMALL, ARCH, fresh.log, fresh.resources, fresh.key), fresh.cubin))
    path.chmod(0o644)
    [hit], messages = _compile()
    assert hit.cached and hit.cubin == fresh.cubin and messages == []


def test_a_new_cache_is_made_private(tmp_path, monkeypatch, isolated_dispatch):
    """The cache directory, cubins/ and tables/ 0o700, entries 0o600; the user's table
    0o644 (written by its owner alone)."""
    cache = tmp_path / "new" / "cache"
    monkeypatch.setenv("SGEMMLAB_CACHE_DIR", str(cache))
    [got], _ = _compile()
    table = dispatch.write_table(dispatch.new_table(GPU, "9.0", SMS, [
        entry(1024, 1024, 1024, R13, R13.seed, 1.2)]), dispatch.user_table_path(GPU))

    def mode(p: Path) -> int:
        return stat.S_IMODE(p.stat().st_mode)
    assert [mode(cache), mode(cache / "cubins"), mode(cache / "tables")] == [0o700] * 3
    assert mode(cache / "cubins" / f"{got.key}.bin") == 0o600 and mode(table) == 0o644


# -- bundles -------------------------------------------------------------------------------


def _bundle(where: Path, fresh) -> None:
    compiler.write_bundle_entry(where, fresh, *SMALL, ARCH)


def test_a_bundle_named_by_the_environment_is_checked_like_the_cache(tmp_path, cache,
                                                                      monkeypatch, fresh):
    where = tmp_path / "bundle"
    _bundle(where, fresh)
    where.chmod(0o777)
    monkeypatch.setenv("SGEMMLAB_BUNDLE_DIR", str(where))
    [got], messages = _compile()
    assert not got.bundled and got.cubin == fresh.cubin
    assert len(messages) == 1 and str(where) in messages[0], messages
    assert "writable by group or others" in messages[0]


def test_the_packages_own_bundle_is_trusted_as_installed(tmp_path, cache, monkeypatch, fresh):
    """As installed: its directory's owner and mode are the installation's business, like
    the package's Python code."""
    where = tmp_path / "package-bundle"
    _bundle(where, fresh)
    where.chmod(0o777)
    monkeypatch.setattr(compiler, "BUNDLE_DIR", where)
    monkeypatch.delenv("SGEMMLAB_BUNDLE_DIR")
    [got], messages = _compile()
    assert got.bundled and got.cubin == fresh.cubin and messages == []


# -- tuning tables -------------------------------------------------------------------------


def _user_table() -> Path:
    """The package's table, and a user table that would choose rung 13 at 1024^3."""
    write_package_table()
    mine = dispatch.new_table(GPU, "9.0", SMS, [entry(1024, 1024, 1024, R13, R13.seed, 1.2)])
    return dispatch.write_table(mine, dispatch.user_table_path(GPU))


def test_a_trusted_user_table_is_used(isolated_dispatch):
    _user_table()
    c = dispatch.choose(1024, 1024, 1024, gpu_name=GPU, sm_count=SMS)
    assert c.rung == "13_hoisted" and c.table.startswith("user cache")


@pytest.mark.parametrize("how", ["tables-world-writable", "cache-world-writable",
                                 "tables-another-owner", "file-symlinked",
                                 "file-group-writable"])
def test_an_untrusted_user_table_is_ignored_with_one_warning(isolated_dispatch, tmp_path,
                                                             monkeypatch, how):
    path = _user_table()
    refused = {"tables-world-writable": path.parent, "cache-world-writable":
               path.parent.parent, "tables-another-owner": path.parent}.get(how, path)
    if how.endswith("world-writable"):
        refused.chmod(0o777)
    elif how == "tables-another-owner":
        _owned_by_someone_else(refused, monkeypatch)
    elif how == "file-symlinked":
        real = tmp_path / "elsewhere.json"
        path.rename(real)
        path.symlink_to(real)
    else:
        path.chmod(0o664)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c = dispatch.choose(1024, 1024, 1024, gpu_name=GPU, sm_count=SMS)
        dispatch.clear_cache()  # read the tables again: still one warning
        dispatch.choose(1024, 1024, 1024, gpu_name=GPU, sm_count=SMS)
    messages = [str(w.message) for w in caught]
    assert c.source == "table" and c.table.startswith("package"), c.table
    assert len(messages) == 1 and str(refused) in messages[0], messages
    assert "package's table" in messages[0]
