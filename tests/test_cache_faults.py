"""The compile cache under faults (issue 18, item 3). Whatever state the cache directory is
in, a compile returns the right cubin (byte-identical to a fresh, uncached compile of the
same key) with at most one clear warning; never a crash, a wrong kernel or a partial file.

(1) 8 processes compile one key and several others into one directory at once; two of them
    stall half-way through writing their first entry, and the other six start while those
    half-written files sit in the directory;
(2) 8 processes read a cache whose entries were damaged beforehand: truncated, bit-flipped,
    and foreign (well-formed entries recording another kernel, configuration, key, NVRTC
    version or architecture); in one process, no single bit flip or truncation of an entry
    is trusted;
(3) a read-only cache directory;
(4) a full one: EFBIG (a child process under RLIMIT_FSIZE) and ENOSPC (from a write, from
    fsync); afterwards, with space, the entry is written;
(5) a cache path that is a file, lies under a file, cannot be read, or holds a directory
    where an entry goes.

How (3) and (5) make a directory read-only or unreadable, two ways (the test id says which):
`chmod-unprivileged` chmods it and compiles in a child process of an unprivileged user: as
root, which chmod does not stop, the child drops to `nobody` first (skipped where it cannot);
`erofs-in-process` refuses, in this process, the OS calls that write under the directory
(os.open to create, os.mkdir, os.replace) with EROFS, as a read-only mount does for root too.

test_compile.py (d) covers the key, hits, each of CORRUPTIONS in one process, a failed
rename and four processes racing; these build on it. All CPU; under a minute on two
cores, most of it spent starting the groups of 8 processes.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import multiprocessing
import os
import pwd
import queue
import resource
import shutil
import signal
import stat
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import pytest

from sgemmlab.runtime import compiler, files
from sgemmlab.runtime.compiler import compile_kernel
from test_compile import ARCH, CORRUPTIONS, SMALL, _entry, _sha

RUNG1, RUNG2 = "ladder/01_naive.cu", "ladder/02_coalesced.cu"  # the two quickest rungs to compile


def _job(source: str, bs: int, **variant: int) -> tuple[str, dict]:
    return source, {"BS": bs, "THREADS": bs * bs, **variant}


assert _job(RUNG1, 8) == SMALL
VARIANTS = ({}, {"SGEMM_TA": 1}, {"SGEMM_TB": 1}, {"SGEMM_TA": 1, "SGEMM_TB": 1})
#: 24 distinct keys (6 distinct cubins: the layout macros change nothing in rungs 1 and 2)
ALL_JOBS = [_job(s, bs, **v) for v in VARIANTS for s in (RUNG1, RUNG2) for bs in (8, 16, 32)]
RACE_JOBS = [SMALL, _job(RUNG1, 16), _job(RUNG1, 32), _job(RUNG2, 8), _job(RUNG2, 16)]
PROCESSES = 8
TIMEOUT = 180  # seconds a group of child processes may take (a few on two cores)


@functools.cache
def _fresh_frozen(source: str, macros: tuple, arch: str) -> compiler.Compiled:
    return compile_kernel(source, dict(macros), arch, use_cache=False)


def _fresh(job: tuple[str, dict], arch: str = ARCH) -> compiler.Compiled:
    """The reference: an uncached compile of `job` (once per test session)."""
    return _fresh_frozen(job[0], tuple(sorted(job[1].items())), arch)


def _good(job: tuple[str, dict], arch: str = ARCH) -> bytes:
    """The entry compile_kernel writes for `job`."""
    ref = _fresh(job, arch)
    return compiler._pack(compiler.entry_meta(*job, arch, ref.log, ref.resources, ref.key),
                          ref.cubin)


def _fingerprint(c: compiler.Compiled) -> tuple:
    return c.key, _sha(c.cubin), dataclasses.astuple(c.resources)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A private cache directory for this test and the processes it starts."""
    path = tmp_path / "cache"
    monkeypatch.setenv("SGEMMLAB_CACHE_DIR", str(path))
    return path


def _compile_all(jobs) -> tuple[list[tuple], list[str]]:
    """(fingerprint, cached) per job, and the message of every warning they raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # count every warning, not the first per place
        got = [(_fingerprint(c), c.cached)
               for c in (compile_kernel(*job, ARCH) for job in jobs)]
    return got, [str(w.message) for w in caught]


def _assert_right_kernels(jobs, got, who: str) -> None:
    for job, (fingerprint, cached) in zip(jobs, got, strict=True):
        assert fingerprint == _fingerprint(_fresh(job)), (
            f"{who}: a wrong kernel for {job} (cached={cached})")


def _assert_one_warning(messages: list[str], where: Path) -> None:
    assert len(messages) == 1, f"expected one warning about {where}, got {messages}"
    assert str(where) in messages[0] and "cannot be written" in messages[0], messages[0]


def _files(root: Path) -> dict[str, bytes]:
    """Every file under `root` (relative path -> contents); a directory entry as b'<dir>'."""
    out = {}
    for p in sorted(root.rglob("*")):
        out[p.relative_to(root).as_posix()] = b"<dir>" if p.is_dir() else p.read_bytes()
    return out


def _assert_holds_exactly(cache: Path, jobs) -> None:
    """One valid entry per key, recording its own compile, and nothing else (no .tmp)."""
    names = sorted({f"{_fresh(j).key}.bin" for j in jobs})
    found = sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*") if p.is_file())
    assert found == [f"cubins/{n}" for n in names], f"the cache holds {found}"
    for job in jobs:
        ref = _fresh(job)
        hit = compiler._recorded(compiler._read_entry(_entry(cache, ref.key)), ref.key, *job,
                                 ARCH, compiler.nvrtc_version())
        assert hit is not None and hit.cubin == ref.cubin, f"the entry of {job} is not right"


# -- child processes ----------------------------------------------------------------------


class _Skip(Exception):
    """Raised in a child: the test cannot run here (the parent skips it, saying why)."""


def _child(index: int, cache: str, results, work, *args) -> None:
    """Run `work(*args)` in a spawned process on a private cache; report (index, status,
    payload) to the parent: 'ok', 'skip' (payload: why) or 'error' (the traceback)."""
    os.environ["SGEMMLAB_CACHE_DIR"] = cache
    os.environ["SGEMMLAB_BUNDLE_DIR"] = ""
    try:
        results.put((index, "ok", work(*args)))
    except _Skip as why:
        results.put((index, "skip", str(why)))
    except BaseException:  # noqa: BLE001 - reported to the parent, which fails the test
        results.put((index, "error", traceback.format_exc()))


def _run(children: list[tuple], cache: Path, ctx=None, when=None) -> list:
    """Start one process per (work, *args), collect their payloads in order; fail at once
    on a child that errs or dies without a report. `when(reports)` runs after each one."""
    ctx = ctx or multiprocessing.get_context("spawn")
    results = ctx.Queue()
    workers = [ctx.Process(target=_child, args=(i, str(cache), results, *c))
               for i, c in enumerate(children)]
    for w in workers:
        w.start()
    reports: dict[int, tuple[str, object]] = {}
    deadline = time.monotonic() + TIMEOUT
    try:
        while len(reports) < len(workers):
            try:
                index, status, payload = results.get(timeout=1)
            except queue.Empty:
                dead = [(i, w.exitcode) for i, w in enumerate(workers)
                        if w.exitcode not in (None, 0) and i not in reports]
                assert not dead, f"child processes died without a report: {dead}"
                assert time.monotonic() < deadline, f"children still running after {TIMEOUT}s"
                continue
            assert status != "error", f"child {index} failed:\n{payload}"
            reports[index] = (status, payload)
            if when:
                when(reports)
        for w in workers:
            w.join(timeout=60)
        assert [w.exitcode for w in workers] == [0] * len(workers)
    finally:
        for w in workers:
            if w.is_alive():
                w.kill()
    skipped = [p for s, p in reports.values() if s == "skip"]
    if skipped:
        pytest.skip(skipped[0])
    return [reports[i][1] for i in range(len(workers))]


class _OsWith:
    """The os module as runtime/files.py (which writes the entries) sees it, with some
    functions replaced."""

    def __init__(self, **replaced):
        self.__dict__.update(replaced)

    def __getattr__(self, name):
        return getattr(os, name)


class _FileWith:
    """A file opened by os.fdopen, with some methods replaced."""

    def __init__(self, f, **replaced):
        self._f = f
        self.__dict__.update(replaced)

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


# -- (1) 8 processes at once, some starting while entries are half-written -----------------


def _stalling_writer(jobs, half_written, resume):
    """Compile `jobs`; the first entry written stops half-way (flushed to the file) until
    the parent sets `resume`."""
    stalled = []

    def fdopen(fd, mode):
        f = os.fdopen(fd, mode)
        if stalled:
            return f
        stalled.append(True)

        def write(data):
            f.write(data[: len(data) // 2])
            f.flush()
            half_written.set()
            if not resume.wait(timeout=TIMEOUT):
                raise TimeoutError("the parent never let the stalled write finish")
            return f.write(data[len(data) // 2:])
        return _FileWith(f, write=write)

    files.os = _OsWith(fdopen=fdopen)
    return _compile_all(jobs), []  # (no look at the directory before it starts)


def _late_starter(jobs, half_written, barrier):
    """Compile `jobs` once every stalled writer is half-way through its entry; report the
    temporary files seen in the directory at the start."""
    for event in half_written:
        if not event.wait(timeout=TIMEOUT):
            raise TimeoutError("a stalled writer never got half-way")
    barrier.wait(timeout=TIMEOUT)
    seen = sorted(p.name for p in (compiler.cache_dir() / "cubins").glob("*.tmp"))
    return _compile_all(jobs), seen


def test_eight_processes_compile_one_key_and_others_while_entries_are_half_written(cache):
    ctx = multiprocessing.get_context("spawn")
    stalled = 2
    half_written = [ctx.Event() for _ in range(stalled)]
    resume, barrier = ctx.Event(), ctx.Barrier(PROCESSES - stalled)
    n = len(RACE_JOBS)
    # each process compiles every key, from its own starting point: at every moment some
    # processes share a key and others are on different ones
    orders = [RACE_JOBS[i % n:] + RACE_JOBS[:i % n] for i in range(PROCESSES)]
    children = ([(_stalling_writer, orders[i], half_written[i], resume)
                 for i in range(stalled)]
                + [(_late_starter, orders[i], half_written, barrier)
                   for i in range(stalled, PROCESSES)])

    def release_when_the_late_ones_are_done(reports):
        if all(i in reports for i in range(stalled, PROCESSES)):
            resume.set()  # the stalled writes finish last: their renames land on entries

    refs = [_fresh(j) for j in RACE_JOBS]  # before the children: the parent's CPU is free
    try:
        reports = _run(children, cache, ctx, when=release_when_the_late_ones_are_done)
    finally:
        resume.set()
    for i, ((got, messages), seen_tmp) in enumerate(reports):
        _assert_right_kernels(orders[i], got, f"process {i}")
        assert messages == [], f"process {i} warned: {messages}"
        if i >= stalled:  # started while both stalled entries were half-written
            assert len(seen_tmp) >= stalled, f"process {i} saw no half-written entry"
    _assert_holds_exactly(cache, RACE_JOBS)
    for ref, job in zip(refs, RACE_JOBS):
        hit = compile_kernel(*job, ARCH)
        assert hit.cached and _fingerprint(hit) == _fingerprint(ref)


# -- (2) damaged and foreign entries -------------------------------------------------------


def _flip(blob: bytes, byte: int, bit: int = 7) -> bytes:
    b = bytearray(blob)
    b[byte] ^= 1 << bit
    return bytes(b)


def _cubin_at(job) -> int:
    """Where the cubin starts in `job`'s entry."""
    return len(_good(job)) - len(_fresh(job).cubin)


def _other_kernel(job):
    source, macros = job
    return (RUNG2 if source == RUNG1 else RUNG1), macros


def _other_config(job):
    source, macros = job
    return _job(source, {8: 16, 16: 32, 32: 8}[macros["BS"]],
                **{k: v for k, v in macros.items() if k not in ("BS", "THREADS")})


def _sealed(job, donor, **changes) -> bytes:
    """A well-formed entry under `job`'s name: its record with `changes`, and `donor`'s
    cubin (so that trusting it shows as a wrong kernel)."""
    ref = _fresh(job)
    meta = {**compiler.entry_meta(*job, ARCH, ref.log, ref.resources, ref.key), **changes}
    return compiler._pack(meta, _fresh(donor).cubin)


def _record_only(meta, donor) -> bytes:
    """A well-formed entry whose record is `meta` alone."""
    return compiler._pack(meta, _fresh(donor).cubin)


def _old_format(job) -> bytes:
    """`job`'s entry as written before records held their key."""
    ref = _fresh(job)
    return compiler._pack(compiler.entry_meta(*job, ARCH, ref.log, ref.resources), ref.cubin)


def _other_arch(job) -> bytes:
    """A real sm_80 build of the same compile (its own record), under the sm_90 name."""
    return _good(job, "sm_80")


DAMAGE = {
    **{name: (lambda how: lambda job: CORRUPTIONS[how](_good(job)))(name)
       for name in CORRUPTIONS},
    "truncate-1-byte": lambda job: _good(job)[:1],
    "truncate-after-checksum": lambda job: _good(job)[: len(compiler._MAGIC) + 32],
    "truncate-in-record": lambda job: _good(job)[: len(compiler._MAGIC) + 32 + 4 + 20],
    "flip-record-length": lambda job: _flip(_good(job), len(compiler._MAGIC) + 32, 0),
    "flip-elf-header": lambda job: _flip(_good(job), _cubin_at(job) + 4, 1),
    "flip-cubin-middle": lambda job: _flip(_good(job), (_cubin_at(job) + len(_good(job))) // 2),
    # foreign: well formed, each carrying another compile's cubin
    "foreign-other-kernel": lambda job: _good(_other_kernel(job)),
    "foreign-other-config": lambda job: _old_format(_other_config(job)),
    "foreign-other-key": lambda job: _sealed(job, _other_config(job),
                                             key=_fresh(_other_config(job)).key),
    "foreign-other-nvrtc": lambda job: _sealed(job, _other_config(job), nvrtc="12.0"),
    "foreign-other-arch": _other_arch,
    "foreign-no-report": lambda job: _sealed(
        job, _other_config(job), resources=dataclasses.asdict(compiler.parse_ptxas(""))),
    "foreign-bad-resources": lambda job: _sealed(job, _other_config(job),
                                                 resources={"registers": 32}),
    "foreign-record-a-list": lambda job: _record_only(["sgemm"], _other_config(job)),
    "foreign-record-empty": lambda job: _record_only({}, _other_config(job)),
}
assert len(DAMAGE) <= len(ALL_JOBS)


def test_damage_is_distinct_from_the_right_entry():
    """Every damaged entry differs from the right one, and every foreign one carries
    another cubin, so a trusted entry shows as a wrong kernel below."""
    for (name, damage), job in zip(DAMAGE.items(), ALL_JOBS):
        bad = damage(job)
        assert bad != _good(job), name
        if name.startswith("foreign"):
            assert _fresh(job).cubin not in bad, name


def test_eight_processes_reading_damaged_and_foreign_entries_get_the_right_kernels(cache):
    jobs = ALL_JOBS[: len(DAMAGE)]
    damaged = {}
    for (name, damage), job in zip(DAMAGE.items(), jobs):
        path = _entry(cache, _fresh(job).key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(damaged.setdefault(path.name, damage(job)))
    step = len(jobs) // PROCESSES
    orders = [jobs[i * step:] + jobs[:i * step] for i in range(PROCESSES)]
    reports = _run([(_compile_all, order) for order in orders], cache)
    for i, (got, messages) in enumerate(reports):
        _assert_right_kernels(orders[i], got, f"process {i}")
        assert messages == [], f"process {i} warned: {messages}"
    _assert_holds_exactly(cache, jobs)
    still = [n for n, bad in damaged.items() if (cache / "cubins" / n).read_bytes() == bad]
    assert still == [], f"damaged entries were left in place: {still}"


def test_no_single_bit_flip_or_truncation_of_an_entry_is_trusted():
    """Exhaustive, on the read path alone (no compile per case): every bit of the header
    and record, one bit of every byte of the cubin, every shorter length."""
    ref, blob = _fresh(SMALL), _good(SMALL)
    nvrtc = compiler.nvrtc_version()

    def trusted(b: bytes) -> bool:
        return compiler._recorded(compiler._unpack(b), ref.key, *SMALL, ARCH, nvrtc) is not None

    assert trusted(blob)
    head = _cubin_at(SMALL)
    flips = [(i, bit) for i in range(head) for bit in range(8)]
    flips += [(i, i % 8) for i in range(head, len(blob))]
    assert [f for f in flips if trusted(_flip(blob, *f))] == []
    assert [n for n in range(len(blob)) if trusted(blob[:n])] == []


# -- (3) a read-only cache, (5) an unreadable one: chmod for an unprivileged user ----------

A, B, C = SMALL, _job(RUNG1, 16), _job(RUNG2, 8)  # A has an entry, B none, C a damaged one


def _layout(cache: Path, layout: str) -> None:
    cache.mkdir(parents=True)
    if layout == "populated":
        (cache / "cubins").mkdir()
        _entry(cache, _fresh(A).key).write_bytes(_good(A))
        _entry(cache, _fresh(C).key).write_bytes(CORRUPTIONS["flip-cubin"](_good(C)))


def _calls(layout: str) -> tuple[list, list[bool]]:
    """What the read-only tests compile, and which of those calls are hits."""
    if layout == "populated":
        return [A, B, C, B, C, A], [True, False, False, False, False, True]
    return [A, B, A], [False, False, False]


def _warm_up() -> None:
    """Load NVRTC and everything a compile imports, touching no cache (an unprivileged or
    file-size-limited child may not be able to read or write those files afterwards)."""
    compile_kernel(*_job(RUNG1, 32), ARCH, use_cache=False)


def _unprivileged(jobs):
    """Compile `jobs` as a user that chmod binds: as root, drop to `nobody` first."""
    _warm_up()
    if os.geteuid() == 0:
        try:
            nobody = pwd.getpwnam("nobody")
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
        except (KeyError, OSError) as exc:
            raise _Skip(f"running as root and cannot become nobody ({exc})") from None
    return os.geteuid(), _compile_all(jobs)


@pytest.fixture
def reachable():
    """A directory an unprivileged child process can reach (pytest's tmp_path sits in a
    directory private to its user); handed to `nobody` when the tests run as root."""
    base = Path(tempfile.mkdtemp(prefix="sgemmlab-cache-faults-"))
    base.chmod(0o755)
    yield base

    def unlock(path: Path) -> None:
        path.chmod(0o700)
        for p in path.iterdir():
            if p.is_dir() and not p.is_symlink():
                unlock(p)
    unlock(base)
    shutil.rmtree(base)


def _hand_over(root: Path, mode: int) -> None:
    """Give `root`'s tree to the child's user, then set every directory's mode."""
    if os.geteuid() == 0:
        try:
            nobody = pwd.getpwnam("nobody")
        except KeyError:
            pytest.skip("running as root and there is no user nobody to drop to")
        for p in [root, *root.rglob("*")]:
            os.chown(p, nobody.pw_uid, nobody.pw_gid)
    for p in sorted([root, *root.rglob("*")], reverse=True):  # the deepest first
        if p.is_dir():
            p.chmod(mode)


def _refuse_writes_under(monkeypatch, root: Path) -> None:
    """As a read-only mount: creating, making a directory or renaming under `root` fails
    with EROFS, for root too; reading works."""
    top = str(root)

    def under(path) -> bool:
        p = os.path.abspath(os.fspath(path))
        return p == top or p.startswith(top + os.sep)

    def refuse(path):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))

    real_open, real_mkdir, real_replace = os.open, os.mkdir, os.replace

    def open_(path, flags, mode=0o777, *, dir_fd=None):
        if under(path) and flags & (os.O_CREAT | os.O_WRONLY | os.O_RDWR):
            refuse(path)
        return real_open(path, flags, mode, dir_fd=dir_fd)

    def mkdir(path, mode=0o777, *, dir_fd=None):
        if under(path):
            if os.path.isdir(path):
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), path)
            refuse(path)
        return real_mkdir(path, mode, dir_fd=dir_fd)

    def replace(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
        if under(dst):
            refuse(dst)
        return real_replace(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.setattr(os, "replace", replace)


@pytest.mark.parametrize("layout", ["populated", "empty"])
@pytest.mark.parametrize("mechanism", ["chmod-unprivileged", "erofs-in-process"])
def test_a_read_only_cache_gives_the_right_kernels_and_one_warning(
        tmp_path, reachable, monkeypatch, record_property, mechanism, layout):
    """Hits still hit; a miss or a damaged entry is compiled in memory, every time, with
    one warning naming the directory; the directory is left exactly as it was."""
    jobs, hits = _calls(layout)
    if mechanism == "chmod-unprivileged":
        cache = reachable / "cache"
        _layout(cache, layout)
        before = _files(cache)
        _hand_over(cache, 0o555)
        [(uid, (got, messages))] = _run([(_unprivileged, jobs)], cache)
        record_property("read_only_by", f"chmod 0o555, compiled as uid {uid}")
    else:
        cache = tmp_path / "cache"
        monkeypatch.setenv("SGEMMLAB_CACHE_DIR", str(cache))
        _layout(cache, layout)
        before = _files(cache)
        with monkeypatch.context() as m:
            _refuse_writes_under(m, cache)
            got, messages = _compile_all(jobs)
        record_property("read_only_by", "EROFS from os.open/os.mkdir/os.replace, in-process")
    _assert_right_kernels(jobs, got, mechanism)
    assert [cached for _, cached in got] == hits
    _assert_one_warning(messages, cache)
    cache.chmod(0o755)
    assert _files(cache) == before, "the read-only cache was changed"


# -- (4) a full cache ----------------------------------------------------------------------


def _file_size_limited(jobs, limit: int):
    """Compile `jobs` with files limited to `limit` bytes (writes past it fail with EFBIG,
    SIGXFSZ ignored), as on a disk or quota that is full."""
    _warm_up()
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    return _compile_all(jobs)


def _enospc(*args):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _filling_fdopen(fd, mode):
    """A file whose write gets half-way, then finds the disk full."""
    f = os.fdopen(fd, mode)

    def write(data):
        f.write(data[: len(data) // 2])
        f.flush()
        _enospc()
    return _FileWith(f, write=write)


@pytest.mark.parametrize("how", ["efbig-rlimit-child", "enospc-on-write", "enospc-on-fsync"])
def test_a_full_cache_gives_the_right_kernels_then_fills_when_there_is_space(
        cache, monkeypatch, how):
    jobs = [A, B]
    if how == "efbig-rlimit-child":
        limit = min(len(_good(j)) for j in jobs) // 2  # each write starts, then fails
        [(got, messages)] = _run([(_file_size_limited, jobs, limit)], cache)
    else:
        replaced = ({"fdopen": _filling_fdopen} if how == "enospc-on-write"
                    else {"fsync": _enospc})
        with monkeypatch.context() as m:
            m.setattr(files, "os", _OsWith(**replaced))
            got, messages = _compile_all(jobs)
    _assert_right_kernels(jobs, got, how)
    assert not any(cached for _, cached in got)
    _assert_one_warning(messages, cache)
    left = [p.name for p in cache.rglob("*") if p.is_file()]
    assert left == [], f"a full cache kept {left}"

    again, messages = _compile_all(jobs)  # space again
    assert [cached for _, cached in again] == [False, False] and messages == []
    _assert_right_kernels(jobs, again, f"{how}, then with space")
    _assert_holds_exactly(cache, jobs)
    hits, _ = _compile_all(jobs)
    assert [cached for _, cached in hits] == [True, True]


# -- (5) a cache path that is not a directory, or cannot be read ---------------------------


@pytest.mark.parametrize("how", ["a-file", "under-a-file", "entry-is-a-directory",
                                 "chmod-000-unprivileged"])
def test_a_cache_that_is_not_a_directory_or_unreadable_falls_back_with_one_warning(
        tmp_path, reachable, monkeypatch, record_property, how):
    # A's entry cannot be read or written; B's can, unless the whole directory is at fault
    jobs = [A, A] if how == "entry-is-a-directory" else [A, A, B]
    if how == "chmod-000-unprivileged":
        cache = reachable / "cache"
        _layout(cache, "populated")  # A's entry is there, and cannot be read
    else:
        cache = {"a-file": tmp_path / "cache", "under-a-file": tmp_path / "cache" / "sub",
                 "entry-is-a-directory": tmp_path / "cache"}[how]
        monkeypatch.setenv("SGEMMLAB_CACHE_DIR", str(cache))
    if how in ("a-file", "under-a-file"):
        (tmp_path / "cache").write_text("not a directory\n")
    if how == "entry-is-a-directory":
        (_entry(cache, _fresh(A).key) / "inside").mkdir(parents=True)
    root = tmp_path if how != "chmod-000-unprivileged" else reachable
    before = _files(root)
    if how == "chmod-000-unprivileged":
        _hand_over(cache, 0o000)
        [(uid, (got, messages))] = _run([(_unprivileged, jobs)], cache)
        record_property("unreadable_by", f"chmod 0o000, compiled as uid {uid}")
        cache.chmod(stat.S_IRWXU)
        (cache / "cubins").chmod(stat.S_IRWXU)
    else:
        got, messages = _compile_all(jobs)
    _assert_right_kernels(jobs, got, how)
    assert not any(cached for _, cached in got)
    _assert_one_warning(messages, cache)
    assert _files(root) == before, f"{how}: the cache path was changed"


def test_an_entry_without_its_full_record_is_not_a_hit():
    """Only the full record (key, source, constants, arch, NVRTC version, resources) of this
    compile makes a hit: an entry an older sgemmlab wrote without its key or NVRTC version
    is compiled again, like one lacking any other field (every field of the record can be
    computed from the public package, so no field may be taken on trust)."""
    ref = _fresh(SMALL)
    meta = compiler.entry_meta(*SMALL, ARCH, ref.log, ref.resources, ref.key)
    nvrtc = compiler.nvrtc_version()
    full = compiler._recorded(compiler._unpack(compiler._pack(meta, ref.cubin)), ref.key,
                              *SMALL, ARCH, nvrtc)
    assert full is not None and full.cubin == ref.cubin
    for dropped in ("key", "nvrtc", "source", "macros", "arch", "resources"):
        partial = {k: v for k, v in meta.items() if k != dropped}
        hit = compiler._recorded(compiler._unpack(compiler._pack(partial, ref.cubin)),
                                 ref.key, *SMALL, ARCH, nvrtc)
        assert hit is None, f"an entry without {dropped} was a hit"
    other = compiler._unpack(_old_format(_other_config(SMALL)))
    assert compiler._recorded(other, ref.key, *SMALL, ARCH, nvrtc) is None
